/* commbench.c - the communication benchmark's timing: meshtrain's layer and the raw MPI
 * call on the same buffers, interleaved, and one core's memcpy.  Touches MPI directly for
 * the raw side only. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "mt_comm.h"
#include "mt_commbench.h"

static double sync_max(double t)
{
    double m;
    MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

static void raw(MtOp op, float *buf, float *out, int64_t n, int N, int *counts)
{
    switch (op) {
    case MT_OP_ALLREDUCE:
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case MT_OP_REDUCE_SCATTER:
        MPI_Reduce_scatter(buf, out, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    default: {
        int *displs = counts + N, me;
        MPI_Comm_rank(MPI_COMM_WORLD, &me);
        MPI_Allgatherv(buf, counts[me], MPI_FLOAT, out, counts, displs, MPI_FLOAT, MPI_COMM_WORLD);
    }
    }
}

static void ours(MtComm *c, MtOp op, float *buf, float *out, int64_t n)
{
    switch (op) {
    case MT_OP_ALLREDUCE: mt_allreduce(c, MT_GROUP_WORLD, buf, n, 0); break;
    case MT_OP_REDUCE_SCATTER: mt_reduce_scatter(c, MT_GROUP_WORLD, buf, out, n, 0); break;
    default: mt_allgather(c, MT_GROUP_WORLD, buf, out, n); break;
    }
}

MtCommTiming mt_commbench_time(MtComm *c, MtOp op, int64_t n, int iters, int reps, float *buf, float *out)
{
    int N = mt_comm_size(c);
    int *counts = malloc(sizeof(int) * 2 * (size_t)N);
    MT_ASSERT(counts, "out of memory");
    for (int i = 0; i < N; i++) {
        int64_t lo, hi;
        mt_chunk(n, N, i, &lo, &hi);
        counts[i] = (int)(hi - lo);
        counts[N + i] = (int)lo;
    }
    /* A/B per call: ours then raw, each after a barrier, times summed per side over
     * reps x iters calls, so that the machine's drift affects both alike. */
    MtCommTiming sum = {0, 0, 0};
    for (int w = 0; w < 2; w++) {
        ours(c, op, buf, out, n);
        raw(op, buf, out, n, N, counts);
    }
    for (int r = 0; r < reps * iters; r++) {
        for (int k = 0; k < 2; k++) { /* the order alternates: ours first, then raw first */
            int first_ours = (r + k) % 2 == 0;
            MPI_Barrier(MPI_COMM_WORLD);
            double t = MPI_Wtime();
            if (first_ours)
                ours(c, op, buf, out, n);
            else
                raw(op, buf, out, n, N, counts);
            double dt = MPI_Wtime() - t;
            if (first_ours)
                sum.ours_s += dt;
            else
                sum.raw_s += dt;
        }
    }
    MtCommTiming best = {sync_max(sum.ours_s) / (reps * iters), sync_max(sum.raw_s) / (reps * iters), 1e30};
    memcpy(out, buf, sizeof(float) * (size_t)n);
    for (int r = 0; r < reps; r++) {
        double t = MPI_Wtime();
        for (int i = 0; i < iters; i++) {
            memcpy(out, buf, sizeof(float) * (size_t)n);
            __asm__ volatile("" ::"r"(out) : "memory");
        }
        t = (MPI_Wtime() - t) / iters;
        best.memcpy_s = t < best.memcpy_s ? t : best.memcpy_s;
    }
    free(counts);
    return best;
}
