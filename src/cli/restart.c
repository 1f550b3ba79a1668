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

int mt_train_supervise(int argc, char **argv, const char *save, const char *log_json, int max_restarts)
{
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        return mt_cli_fail(mt_error(MT_EIO, "meshtrain train: --max-restarts: cannot find its own binary"));
    self[len] = 0;
    char **args = calloc((size_t)argc + 4, sizeof(char *));
    if (!args)
        return mt_cli_fail(mt_error(MT_ENOMEM, "out of memory"));
    static char resume[4200];
    setenv("MT_SUPERVISED", "1", 1); /* the job itself does not supervise */
    for (int attempt = 0;; attempt++) {
        int k = 0;
        args[k++] = self;
        for (int i = 1; i < argc; i++) {
            if (attempt > 0 && resume[0] && (strcmp(argv[i], "--resume") == 0 || strncmp(argv[i], "--resume=", 9) == 0)) {
                i += strcmp(argv[i], "--resume") == 0; /* the save the restart takes, in its place */
                continue;
            }
            args[k++] = argv[i];
        }
        if (attempt > 0 && resume[0]) {
            args[k++] = "--resume";
            args[k++] = resume;
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
