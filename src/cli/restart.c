/* restart.c - train --max-restarts R: the process started by hand supervises the job (docs/failures.md).
 *
 * It runs the job (itself again, or mpirun with the ranks) as a child and waits.  The job
 * ends 0: done.  It ends 2 (bad input): that is not a failure a restart mends, the status is
 * passed on.  Otherwise, up to R times, it takes the newest intact save of --save (the one
 * checkpoint, or a folder of them: mt_ckpt_resolve) and starts the job again from it with
 * --resume, one line giving the cause and the save; with no save yet, from the start.  The
 * data position, the accumulation order and every setting continue from the save, so the
 * run ends with the bits of one that never failed.  --log-json keeps the steps up to the
 * save the restart takes: the lines of the steps after it, which the job computes again,
 * are dropped before it does. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mt_checkpoint.h"
#include "mt_cli.h"
#include "mt_series.h"

/* keeps the lines of the JSON log whose "step" is at most `step` */
static void trim_log(const char *path, int64_t step)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char tmp[4200], line[65536];
    snprintf(tmp, sizeof tmp, "%s.restart-tmp", path);
    FILE *o = fopen(tmp, "w");
    if (!o) {
        fclose(f);
        return;
    }
    while (fgets(line, sizeof line, f)) {
        const char *s = strstr(line, "\"step\": ");
        if (!s || strtoll(s + 8, NULL, 10) <= step)
            fputs(line, o);
    }
    fclose(f);
    if (fclose(o) == 0)
        rename(tmp, path);
}

/* The hosts of `hostfile` that answer (MT_HOST_PROBE HOST true: default ssh in batch mode, 5 s
 * to connect), written to `out` as a hostfile; their slots (default 1 each) into *ranks and
 * the others' names into `dropped`.  -1 when the hostfile cannot be read. */
static int live_hosts(const char *hostfile, const char *out, int *ranks, char *dropped, size_t cap)
{
    FILE *f = fopen(hostfile, "r"), *o = f ? fopen(out, "w") : NULL;
    if (!f || !o) {
        if (f)
            fclose(f);
        return -1;
    }
    const char *probe = getenv("MT_HOST_PROBE") && *getenv("MT_HOST_PROBE") ? getenv("MT_HOST_PROBE")
                                                                          : "ssh -o BatchMode=yes -o ConnectTimeout=5";
    char line[1024], host[256], cmd[2048];
    *ranks = 0;
    dropped[0] = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%255s", host) != 1 || host[0] == '#')
            continue;
        const char *sl = strstr(line, "slots=");
        int slots = sl ? atoi(sl + 6) : 1;
        snprintf(cmd, sizeof cmd, "timeout 15 %s %s true > /dev/null 2>&1", probe, host);
        if (system(cmd) == 0) {
            fputs(line, o);
            *ranks += slots > 0 ? slots : 1;
        } else
            snprintf(dropped + strlen(dropped), cap - strlen(dropped), "%s%s", dropped[0] ? ", " : "", host);
    }
    fclose(f);
    return fclose(o) == 0 ? 0 : -1;
}

int mt_train_supervise(int argc, char **argv, const MtSupervise *sv)
{
    const char *save = sv->save, *log_json = sv->log_json, *hostfile = sv->hostfile;
    int max_restarts = sv->max_restarts, min_ranks = sv->min_ranks, tp = sv->tp, pp = sv->pp;
    int dp0 = sv->dp, dp = dp0;
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        return mt_cli_fail(mt_error(MT_EIO, "meshtrain train: --max-restarts: cannot find its own binary"));
    self[len] = 0;
    char **args = calloc((size_t)argc + 4, sizeof(char *));
    if (!args)
        return mt_cli_fail(mt_error(MT_ENOMEM, "out of memory"));
    static char resume[4200], hosts[4200], dpv[32];
    snprintf(hosts, sizeof hosts, "%s/meshtrain-hosts-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    setenv("MT_SUPERVISED", "1", 1); /* the job itself does not supervise */
    for (int attempt = 0;; attempt++) {
        int k = 0, shrunk = dp != dp0;
        args[k++] = self;
        for (int i = 1; i < argc; i++) {
            /* in their place: the save the restart takes; the hosts that answer and the dp they hold */
            const char *repl[] = {"--resume", "--hostfile", "--dp"};
            int drop = 0;
            for (int r = 0; r < 3 && !drop; r++) {
                size_t n = strlen(repl[r]);
                int on = r == 0 ? attempt > 0 && resume[0] : shrunk;
                if (on && strncmp(argv[i], repl[r], n) == 0 && (argv[i][n] == 0 || argv[i][n] == '='))
                    drop = 1 + (argv[i][n] == 0);
            }
            if (drop) {
                i += drop - 1;
                continue;
            }
            args[k++] = argv[i];
        }
        if (attempt > 0 && resume[0]) {
            args[k++] = "--resume";
            args[k++] = resume;
        }
        if (shrunk) {
            snprintf(dpv, sizeof dpv, "%d", dp);
            args[k++] = "--hostfile", args[k++] = hosts, args[k++] = "--dp", args[k++] = dpv;
        }
        args[k] = NULL;
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) {
            free(args);
            return mt_cli_fail(mt_error(MT_EIO, "meshtrain train: cannot start the job: %s", strerror(errno)));
        }
        if (pid == 0) {
            execv(self, args);
            _exit(127);
        }
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (code == 0 || code == 2) {
            free(args);
            return code;
        }
        char cause[128];
        if (WIFSIGNALED(st))
            snprintf(cause, sizeof cause, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
        else
            snprintf(cause, sizeof cause, "exit status %d", code);
        if (attempt == max_restarts) {
            fprintf(stderr, "meshtrain train: the job ended (%s) after %d restart%s: giving up (--max-restarts %d)\n",
                    cause, attempt, attempt == 1 ? "" : "s", max_restarts);
            free(args);
            return code;
        }
        if (min_ranks > 0 && hostfile) { /* elastic: the hosts that answer, the data-parallel degree they hold */
            int ranks;
            char dropped[2048];
            if (live_hosts(hostfile, hosts, &ranks, dropped, sizeof dropped) != 0) {
                fprintf(stderr, "meshtrain train: cannot read --hostfile %s or write %s\n", hostfile, hosts);
                free(args);
                return code;
            }
            int nd = ranks / (tp * pp) < dp0 ? ranks / (tp * pp) : dp0;
            if (nd * tp * pp < min_ranks || nd < 1) {
                fprintf(stderr, "meshtrain train: the job ended (%s); %d ranks answer (%s do not), fewer than "
                        "--min-ranks %d: giving up\n", cause, ranks, dropped[0] ? dropped : "none", min_ranks);
                free(args);
                return code;
            }
            if (nd != dp)
                printf("meshtrain train: %s do%s not answer: on %d ranks from here (--dp %d, was %d)\n",
                       dropped[0] ? dropped : "some hosts", strchr(dropped, ',') ? "" : "es", nd * tp * pp, nd, dp);
            dp = nd;
        }
        int unverified;
        MtTrainState ts = {0};
        resume[0] = 0;
        if (save && mt_ckpt_resolve(save, resume, sizeof resume, stdout, &unverified) != MT_OK)
            resume[0] = 0;
        if (resume[0] && mt_ckpt_read_state(resume, &ts) != MT_OK)
            resume[0] = 0;
        if (log_json)
            trim_log(log_json, resume[0] ? ts.step : 0);
        if (resume[0])
            printf("meshtrain train: restart %d of %d: the job ended (%s); resuming from %s (step %lld)\n",
                   attempt + 1, max_restarts, cause, resume, (long long)ts.step);
        else
            printf("meshtrain train: restart %d of %d: the job ended (%s); no save yet: as it was started\n",
                   attempt + 1, max_restarts, cause);
    }
}
