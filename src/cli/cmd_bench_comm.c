/* cmd_bench_comm.c - `meshtrain bench-comm`: bus bandwidth of all-reduce, reduce-scatter
 * and all-gather through meshtrain's layer and through raw MPI, side by side, with one
 * core's memcpy bandwidth.  Launches itself on --ranks local ranks. */
#include <stdio.h>
#include <stdlib.h>

#include "flags.h"
#include "mt_cli.h"
#include "mt_commbench.h"
#include "mt_launch.h"

int mt_cmd_bench_comm(int argc, char **argv)
{
    int ranks = 2, min_kib = 1, max_mib = 64, reps = 3, dry = 0, done;
    Flag flags[] = {
        {"ranks", FLAG_INT, &ranks, "local ranks, launched through mpirun (under mpirun -np N: N, and this is ignored)"},
        {"min-kib", FLAG_INT, &min_kib, "smallest buffer, KiB (sizes grow 4x)"},
        {"max-mib", FLAG_INT, &max_mib, "largest buffer, MiB"},
        {"reps", FLAG_INT, &reps, "rounds per size (calls alternate meshtrain, raw; the best is kept)"},
        {"dry-run", FLAG_BOOL, &dry, MT_HELP_DRY_RUN},
    };
    int n = (int)(sizeof flags / sizeof flags[0]);
    int rc = mt_cli_parse(flags, n, argc - 2, argv + 2, "bench-comm",
                          "Bus bandwidth of meshtrain's collectives against raw MPI.", &done);
    if (done)
        return rc;
    if (ranks < 1 || ranks > 64 || min_kib < 1 || max_mib < 1 || reps < 1 || (int64_t)min_kib > 1024LL * max_mib)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain bench-comm: need 1 <= --ranks <= 64, --min-kib <= --max-mib, --reps >= 1"));
    if (dry) {
        mt_flags_print(flags, n);
        return 0;
    }
    if (mt_launch(argc, argv, ranks) != 0)
        return 1;
    MtCommOptions opt = {.check = 0, .timeout_s = 120, .trace = 0};
    MtComm *c = mt_comm_init(&argc, &argv, &opt);
    mt_cli_comm_up();
    int N = mt_comm_size(c), me = mt_comm_rank(c);
    int64_t maxn = (int64_t)max_mib << 18; /* floats */
    float *buf = malloc(sizeof(float) * (size_t)maxn), *out = malloc(sizeof(float) * (size_t)maxn);
    MT_ASSERT(buf && out, "cannot allocate 2 x %d MiB", max_mib);
    for (int64_t i = 0; i < maxn; i++)
        buf[i] = out[i] = 1.0f;
    if (me == 0) {
        printf("bus bandwidth, GB/s, %d ranks (busbw = bytes / time x 2(N-1)/N for all-reduce, (N-1)/N otherwise)\n\n", N);
        printf("| size | op | meshtrain | raw MPI | meshtrain / raw | memcpy (1 core) |\n|---|---|---|---|---|---|\n");
    }
    MtOp ops[3] = {MT_OP_ALLREDUCE, MT_OP_REDUCE_SCATTER, MT_OP_ALLGATHER};
    for (int64_t bytes = (int64_t)min_kib << 10; bytes <= (int64_t)max_mib << 20; bytes *= 4) {
        int64_t nf = bytes / 4;
        int iters = (int)(((int64_t)64 << 20) / bytes);
        iters = iters < 10 ? 10 : iters > 1000 ? 1000 : iters;
        for (int k = 0; k < 3; k++) {
            MtCommTiming t = mt_commbench_time(c, ops[k], nf, iters, reps, buf, out);
            double f = ops[k] == MT_OP_ALLREDUCE ? 2.0 * (N - 1) / N : (double)(N - 1) / N;
            double ours = bytes / t.ours_s * f / 1e9, raw = bytes / t.raw_s * f / 1e9;
            if (me == 0) {
                char sz[32];
                if (bytes >= (1 << 20))
                    snprintf(sz, sizeof sz, "%lld MiB", (long long)(bytes >> 20));
                else
                    snprintf(sz, sizeof sz, "%lld KiB", (long long)(bytes >> 10));
                printf("| %s | %s | %.2f | %.2f | %.3f | %.2f |\n", sz, mt_op_name(ops[k]), ours, raw, ours / raw,
                       bytes / t.memcpy_s / 1e9);
                fflush(stdout);
            }
        }
    }
    free(buf);
    free(out);
    mt_comm_finalize(c);
    return 0;
}
