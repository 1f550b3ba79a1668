/* commands.c - the meshtrain command line: usage and dispatch to the subcommands (main.c
 * calls it; so does the test build of the command, tests/prog_meshtrain_test.c). */
#include <stdio.h>
#include <string.h>

#include "mt_cli.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: meshtrain <command> [flags]   (meshtrain <command> --help: its flags and their defaults)\n"
            "commands:\n"
            "  prepare     turn a text file into train.bin and val.bin token files\n"
            "  train       train a GPT-2 model, on one rank or on any dp x tp x pp layout\n"
            "  eval        mean next-token loss of a checkpoint on a token or text file\n"
            "  sample      generate text from a checkpoint\n"
            "  bench       time full training steps on random data (prints JSON)\n"
            "  bench-comm  bus bandwidth of the collectives, meshtrain's layer against raw MPI\n"
            "  schedule    print a pipeline schedule's timeline per rank and its simulated bubble\n"
            "  plan        choose a layout for a model on a cluster: memory, step time, the train command\n"
            "  calibrate   measure this machine as a cluster file for plan\n"
            "  tokenizer   GPT-2 byte-level BPE: import a vocabulary, encode text to ids, decode them\n"
            "\n"
            "Parallel runs: train --dp D --tp T --pp P is a job of D x T x P ranks. Started by hand, meshtrain\n"
            "launches them on this machine through mpirun itself (with --oversubscribe, and --allow-run-as-root\n"
            "as root). Under an explicit mpirun -np N (a cluster, a hostfile) it uses that world, and N must be\n"
            "D x T x P; as root, Open MPI wants --allow-run-as-root there too. Every layout gives one rank's bits.\n"
            "Every command accepts --dry-run: it checks the input and prints the settings it would use.\n");
}

int mt_cli_main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "train") == 0) return mt_cmd_train(argc, argv);
    if (strcmp(cmd, "eval") == 0) return mt_cmd_eval(argc - 2, argv + 2);
    if (strcmp(cmd, "sample") == 0) return mt_cmd_sample(argc - 2, argv + 2);
    if (strcmp(cmd, "prepare") == 0) return mt_cmd_prepare(argc - 2, argv + 2);
    if (strcmp(cmd, "bench") == 0) return mt_cmd_bench(argc - 2, argv + 2);
    if (strcmp(cmd, "schedule") == 0) return mt_cmd_schedule(argc - 2, argv + 2);
    if (strcmp(cmd, "bench-comm") == 0) return mt_cmd_bench_comm(argc, argv);
    if (strcmp(cmd, "tokenizer") == 0) return mt_cmd_tokenizer(argc - 2, argv + 2);
    if (strcmp(cmd, "plan") == 0) return mt_cmd_plan(argc - 2, argv + 2);
    if (strcmp(cmd, "calibrate") == 0) return mt_cmd_calibrate(argc - 2, argv + 2);
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "meshtrain: unknown command '%s' (try meshtrain --help)\n", cmd);
    return 2;
}
