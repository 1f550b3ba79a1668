/* mt_launch.h - starting the ranks.
 *
 * `meshtrain <cmd> --dp 2 ...` started by hand re-executes itself under the system's
 * mpirun with dp*tp*pp local ranks and what this machine needs: consent to run as root,
 * --oversubscribe (more ranks than cores: Open MPI then yields the CPU while waiting), and
 * no single-copy mechanism (slow in VMs like this one).  Started by an MPI launcher
 * (mpirun -np N, a hostfile, a cluster scheduler), it uses the world it is given.
 * MT_MPIRUN names another mpirun (a wrapper: scripts/hosts.sh's), MT_HOSTFILE a hostfile
 * (train --hostfile) it is given.
 */
#ifndef MT_LAUNCH_H
#define MT_LAUNCH_H

/* Whether this process was started by an MPI launcher. */
int mt_launched_by_mpi(void);
/* If ranks > 1 and this process was not started by a launcher, replaces it with
 * `mpirun -n ranks ... <this program> argv[1..]` and does not return (the job's exit
 * status becomes this process's); returns -1 with a message if mpirun cannot start, and
 * 0 when no launch is needed. */
int mt_launch(int argc, char **argv, int ranks);
/* This process's rank in the launcher's world, from its environment (0 when not under
 * MPI): known before MPI starts, so that bad input is reported by rank 0 alone. */
int mt_launch_rank(void);
/* Ranks of this job on this machine (1 when not under MPI). */
int mt_local_ranks(void);

#endif
