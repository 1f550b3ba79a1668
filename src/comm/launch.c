/* launch.c - self-launch under mpirun (see mt_launch.h). */
#include "mt_launch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int mt_launched_by_mpi(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") ||
           getenv("MPI_LOCALNRANKS");
}

int mt_launch_rank(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(vars[i]);
        if (v)
            return atoi(v) > 0 ? atoi(v) : 0;
    }
    return 0;
}

int mt_local_ranks(void)
{
    const char *v = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!v)
        v = getenv("MPI_LOCALNRANKS");
    int n = v ? atoi(v) : 1;
    return n > 0 ? n : 1;
}

int mt_launch(int argc, char **argv, int ranks)
{
    if (ranks <= 1 || mt_launched_by_mpi())
        return 0;
    char self[4096], np[16];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        snprintf(self, sizeof self, "%s", argv[0]);
    else
        self[len] = 0;
    snprintf(np, sizeof np, "%d", ranks);
    const char *run = getenv("MT_MPIRUN") && *getenv("MT_MPIRUN") ? getenv("MT_MPIRUN") : "mpirun";
    const char *pre[] = {run, "-n", np, "--oversubscribe", "--mca", "btl_vader_single_copy_mechanism",
                         "none", "--bind-to", "none"};
    int npre = (int)(sizeof pre / sizeof pre[0]);
    char **args = calloc((size_t)(npre + argc + 4), sizeof(char *));
    if (!args)
        return -1;
    int k = 0;
    for (int i = 0; i < npre; i++)
        args[k++] = (char *)pre[i];
    if (geteuid() == 0)
        args[k++] = "--allow-run-as-root";
    if (getenv("MT_HOSTFILE") && *getenv("MT_HOSTFILE")) { /* train --hostfile: the ranks on those hosts */
        args[k++] = "--hostfile";
        args[k++] = getenv("MT_HOSTFILE");
    }
    args[k++] = self;
    for (int i = 1; i < argc; i++)
        args[k++] = argv[i];
    args[k] = NULL;
    fflush(stdout);
    execvp(run, args);
    fprintf(stderr, "meshtrain: cannot start mpirun for %d ranks: %s (install Open MPI: scripts/bootstrap.sh)\n",
            ranks, strerror(errno));
    free(args);
    return -1;
}
