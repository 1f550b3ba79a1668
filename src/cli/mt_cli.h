/* mt_cli.h - the meshtrain subcommands.  Each returns an exit status (0, 2 bad input,
 * 1 run-time failure) and prints its own errors as one line on stderr. */
#ifndef MT_CLI_H
#define MT_CLI_H

/* The whole command: `meshtrain <command> [flags]`; returns the exit status. */
int mt_cli_main(int argc, char **argv);
/* takes the whole argv (it may re-execute itself under mpirun) */
int mt_cmd_train(int argc, char **argv);
int mt_cmd_eval(int argc, char **argv);
int mt_cmd_sample(int argc, char **argv);
int mt_cmd_prepare(int argc, char **argv);
int mt_cmd_bench(int argc, char **argv);
int mt_cmd_schedule(int argc, char **argv);
int mt_cmd_tokenizer(int argc, char **argv);
int mt_cmd_plan(int argc, char **argv);
int mt_cmd_calibrate(int argc, char **argv);
/* takes the whole argv (it may re-execute itself under mpirun) */
int mt_cmd_bench_comm(int argc, char **argv);

/* Runs `meshtrain calibrate --threads T` into a file of this process's own (its report on
 * stderr) and returns the path (the caller removes it), or NULL with the error set. */
const char *mt_cli_calibrate_now(int threads);

/* Threads, BLAS and kernels set up for this process; threads 0: OMP_NUM_THREADS if set
 * (and well formed), else the cores shared by this machine's ranks.  Returns the count,
 * or -1 with the error set when threads < 0. */
int mt_cli_setup_threads(int threads, const char *cmd);
/* What --threads t resolves to for a process among local_ranks ranks on this machine:
 * t when > 0, else OMP_NUM_THREADS if set (and well formed), else cores / local_ranks
 * (at least 1).  Sets nothing up. */
int mt_cli_threads(int threads, int local_ranks);
/* The help text of --threads and of --dry-run, the same in every subcommand. */
#define MT_HELP_THREADS "threads of this process: BLAS and kernels; results do not depend on it (0: OMP_NUM_THREADS if set, else this machine's cores / its ranks)"
#define MT_HELP_DRY_RUN "check the flags and files, print the settings this run would use (one --flag value per line, what 0 stands for resolved), and exit"
/* Parses a subcommand's flags.  *done is set when the command should return at once with
 * the returned status: a bad flag (its line printed, 2) or --help (usage printed, 0). */
typedef struct Flag Flag;
int mt_cli_parse(Flag *f, int n, int argc, char **argv, const char *cmd, const char *summary, int *done);
/* Prints the error's one line and returns the exit status for s.  Under an MPI launcher,
 * before mt_cli_comm_up(), only rank 0 prints it (the ranks check the same input). */
int mt_cli_fail(int status);
/* train --max-restarts R (restart.c): runs the job (argv again, with MT_SUPERVISED set) and
 * restarts it from the newest intact save of `save` up to R times (with min_ranks and a
 * hostfile, on the hosts that answer, dp shrunk); its exit status */
typedef struct {
    const char *save, *log_json, *hostfile;
    int max_restarts, min_ranks, dp, tp, pp;
} MtSupervise;
int mt_train_supervise(int argc, char **argv, const MtSupervise *sv);
/* The ranks' communicator exists: from now on every rank prints its own errors. */
void mt_cli_comm_up(void);

#endif
