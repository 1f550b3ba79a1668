/* test_mpi_comm.c - every collective and send/receive of mt_comm against a serial
 * computation, on the world and (with 8 ranks) on every group of a 2 x 2 x 2 mesh, on
 * sizes that do not divide evenly; byte counters against the formulas, exactly; the
 * deterministic reductions against a serial pairwise tree, bit for bit.  Run under
 * mpiexec with 1, 2, 3, 4 and 8 ranks; the verdict is agreed by all ranks. */
#include <mpi.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mt_comm.h"
#include "mt_rng.h"
#include "mt_test.h"

/* exact values: sums of up to 8 of them are exact in float, so any order gives the same */
static float exact(int r, int64_t i) { return (float)(((r * 7919 + i * 31) % 1000) - 500) / 64.0f; }
/* random values: the order of a sum shows in its bits */
static float noisy(int r, int64_t i) { return mt_rng_normal(99, (uint64_t)r, (uint64_t)i); }

/* serial pairwise tree over v[0..N) */
static float tree(const float *v, int lo, int hi)
{
    if (hi - lo == 1)
        return v[lo];
    int mid = lo + (hi - lo) / 2;
    return tree(v, lo, mid) + tree(v, mid, hi);
}

/* element i of the sum over the group: exact values in any order, or noisy ones in the tree */
static float expected(const int *members, int N, int64_t i, int det, float *v)
{
    float s = 0;
    for (int k = 0; k < N; k++) {
        v[k] = det ? noisy(members[k], i) : exact(members[k], i);
        s += v[k];
    }
    return det ? tree(v, 0, N) : s;
}

static MtComm *C;

static void expect_bytes(MtGroupKind g, MtOp op, int64_t before, int64_t n, int is_root, const char *what)
{
    int64_t want = mt_comm_formula_bytes(op, n * 4, mt_comm_group_size(C, g), is_root);
    int64_t got = mt_comm_bytes(C, g, op) - before;
    CHECK(got == want, "%s on %s: counted %lld bytes, formula %lld", what, mt_group_name(g), (long long)got,
          (long long)want);
}

static void test_group(MtGroupKind g, const MtLayout *l, int64_t n)
{
    int me = mt_comm_rank(C), N = mt_comm_group_size(C, g), gr = mt_comm_group_rank(C, g);
    int members[64];
    int idx;
    int cnt = mt_mesh_group(l, g, me, members, &idx);
    CHECK(cnt == N && idx == gr, "group %s: size %d/%d, rank %d/%d", mt_group_name(g), N, cnt, gr, idx);
    float *buf = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * n), *v = malloc(sizeof(float) * N);
    int64_t lo, hi, before;
    mt_chunk(n, N, gr, &lo, &hi);
    int bad;

    /* all-reduce, fast path, exact values */
    for (int64_t i = 0; i < n; i++) buf[i] = exact(me, i);
    before = mt_comm_bytes(C, g, MT_OP_ALLREDUCE);
    mt_allreduce(C, g, buf, n, 0);
    bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float s = 0;
        for (int k = 0; k < N; k++) s += exact(members[k], i);
        bad += buf[i] != s;
    }
    CHECK(bad == 0, "allreduce on %s, n=%lld: %d wrong", mt_group_name(g), (long long)n, bad);
    expect_bytes(g, MT_OP_ALLREDUCE, before, n, 0, "allreduce");

    /* all-reduce, deterministic, random values: bits of the serial tree */
    for (int64_t i = 0; i < n; i++) buf[i] = noisy(me, i);
    before = mt_comm_bytes(C, g, MT_OP_ALLREDUCE);
    mt_allreduce(C, g, buf, n, 1);
    bad = 0;
    for (int64_t i = 0; i < n; i++) {
        for (int k = 0; k < N; k++) v[k] = noisy(members[k], i);
        float s = tree(v, 0, N);
        bad += memcmp(&buf[i], &s, 4) != 0;
    }
    CHECK(bad == 0, "deterministic allreduce on %s, n=%lld: %d differ from the tree", mt_group_name(g), (long long)n, bad);
    expect_bytes(g, MT_OP_ALLREDUCE, before, n, 0, "deterministic allreduce");

    /* reduce-scatter, both paths */
    for (int det = 0; det < 2; det++) {
        for (int64_t i = 0; i < n; i++) buf[i] = det ? noisy(me, i) : exact(me, i);
        before = mt_comm_bytes(C, g, MT_OP_REDUCE_SCATTER);
        mt_reduce_scatter(C, g, buf, out, n, det);
        bad = 0;
        for (int64_t i = lo; i < hi; i++) {
            for (int k = 0; k < N; k++) v[k] = det ? noisy(members[k], i) : exact(members[k], i);
            float s = det ? tree(v, 0, N) : 0;
            if (!det)
                for (int k = 0; k < N; k++) s += v[k];
            bad += memcmp(&out[i - lo], &s, 4) != 0;
        }
        CHECK(bad == 0, "reduce_scatter det=%d on %s, n=%lld: %d wrong", det, mt_group_name(g), (long long)n, bad);
        expect_bytes(g, MT_OP_REDUCE_SCATTER, before, n, 0, "reduce_scatter");
    }

    /* all-gather */
    for (int64_t i = lo; i < hi; i++) buf[i - lo] = exact(me, i);
    before = mt_comm_bytes(C, g, MT_OP_ALLGATHER);
    mt_allgather(C, g, buf, out, n);
    bad = 0;
    for (int k = 0; k < N; k++) {
        int64_t a, b;
        mt_chunk(n, N, k, &a, &b);
        for (int64_t i = a; i < b; i++) bad += out[i] != exact(members[k], i);
    }
    CHECK(bad == 0, "allgather on %s, n=%lld: %d wrong", mt_group_name(g), (long long)n, bad);
    expect_bytes(g, MT_OP_ALLGATHER, before, n, 0, "allgather");

    /* broadcast from the last group rank */
    int root = N - 1;
    for (int64_t i = 0; i < n; i++) buf[i] = exact(me, i);
    before = mt_comm_bytes(C, g, MT_OP_BROADCAST);
    mt_broadcast(C, g, buf, n, root);
    bad = 0;
    for (int64_t i = 0; i < n; i++) bad += buf[i] != exact(members[root], i);
    CHECK(bad == 0, "broadcast on %s: %d wrong", mt_group_name(g), bad);
    expect_bytes(g, MT_OP_BROADCAST, before, n, gr == root, "broadcast");

    /* send to the next group rank, receive from the previous (a ring; even ranks send
     * first so that blocking calls cannot deadlock) */
    if (N > 1) {
        int next = (gr + 1) % N, prev = (gr + N - 1) % N;
        for (int64_t i = 0; i < n; i++) buf[i] = exact(me, i);
        int64_t bs = mt_comm_bytes(C, g, MT_OP_SEND), br = mt_comm_bytes(C, g, MT_OP_RECV);
        if (gr % 2 == 0) {
            mt_send(C, g, buf, n, next);
            mt_recv(C, g, out, n, prev);
        } else {
            mt_recv(C, g, out, n, prev);
            mt_send(C, g, buf, n, next);
        }
        bad = 0;
        for (int64_t i = 0; i < n; i++) bad += out[i] != exact(members[prev], i);
        CHECK(bad == 0, "send/recv ring on %s: %d wrong", mt_group_name(g), bad);
        CHECK(mt_comm_bytes(C, g, MT_OP_SEND) - bs == n * 4 && mt_comm_bytes(C, g, MT_OP_RECV) == br,
              "send counts n bytes, receive counts none");
        /* the same with non-blocking calls */
        MtRequest *rr = mt_irecv(C, g, out, n, prev, 7), *rs = mt_isend(C, g, buf, n, next, 7);
        mt_wait(C, rs);
        while (!mt_test(C, rr)) {}
        bad = 0;
        for (int64_t i = 0; i < n; i++) bad += out[i] != exact(members[prev], i);
        CHECK(bad == 0, "isend/irecv ring on %s: %d wrong", mt_group_name(g), bad);
        /* finished requests are reused, not allocated again (a steady step allocates none) */
        int64_t made = mt_comm_requests_made(C);
        for (int k = 0; k < 3; k++) {
            rr = mt_irecv(C, g, out, n, prev, 8);
            rs = mt_isend(C, g, buf, n, next, 8);
            mt_wait(C, rs);
            mt_wait(C, rr);
        }
        CHECK(mt_comm_requests_made(C) == made, "requests on %s: %lld allocated after the first pair finished",
              mt_group_name(g), (long long)(mt_comm_requests_made(C) - made));
    }

    /* non-blocking reductions, both paths (the fixed order finished by polling): exact sums,
     * and the bits of the serial tree */
    for (int det = 0; det < 2; det++) {
        for (int64_t i = 0; i < n; i++) buf[i] = det ? noisy(me, i) : exact(me, i);
        before = mt_comm_bytes(C, g, MT_OP_ALLREDUCE);
        MtRequest *q = mt_iallreduce(C, g, buf, n, det);
        while (!mt_test(C, q)) {}
        bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += buf[i] != expected(members, N, i, det, v);
        CHECK(bad == 0, "iallreduce det=%d on %s: %d wrong", det, mt_group_name(g), bad);
        expect_bytes(g, MT_OP_ALLREDUCE, before, n, 0, "iallreduce");
        for (int64_t i = 0; i < n; i++) buf[i] = det ? noisy(me, i) : exact(me, i);
        q = mt_ireduce_scatter(C, g, buf, out, n, det);
        mt_wait(C, q);
        bad = 0;
        for (int64_t i = lo; i < hi; i++)
            bad += out[i - lo] != expected(members, N, i, det, v);
        CHECK(bad == 0, "ireduce_scatter det=%d on %s: %d wrong", det, mt_group_name(g), bad);
    }
    MtRequest *r;
    for (int64_t i = lo; i < hi; i++) buf[i - lo] = exact(me, i);
    r = mt_iallgather(C, g, buf, out, n);
    mt_wait(C, r);
    bad = 0;
    for (int k = 0; k < N; k++) {
        int64_t a, b;
        mt_chunk(n, N, k, &a, &b);
        for (int64_t i = a; i < b; i++) bad += out[i] != exact(members[k], i);
    }
    CHECK(bad == 0, "iallgather on %s: %d wrong", mt_group_name(g), bad);
    free(buf);
    free(out);
    free(v);
}

int main(int argc, char **argv)
{
    MtCommOptions opt = {.check = 1, .timeout_s = 120, .trace = 1};
    C = mt_comm_init(&argc, &argv, &opt);
    int size = mt_comm_size(C);
    int64_t sizes[] = {1, 7, 1000 + size, 65536 + 3};
    MtLayout flat = {.dp = size, .tp = 1, .pp = 1};
    mt_comm_mesh(C, &flat);
    for (int s = 0; s < 4; s++) {
        test_group(MT_GROUP_WORLD, &flat, sizes[s]);
        test_group(MT_GROUP_DP, &flat, sizes[s]);
    }
    if (size == 8) {
        MtLayout cube = {.dp = 2, .tp = 2, .pp = 2};
        mt_comm_mesh(C, &cube);
        for (int g = 0; g < MT_NGROUPS; g++)
            for (int s = 0; s < 3; s++)
                test_group((MtGroupKind)g, &cube, sizes[s]);
    }
    /* the formulas themselves, worked by hand */
    CHECK(mt_comm_formula_bytes(MT_OP_ALLREDUCE, 1000, 4, 0) == 1500, "allreduce 2(N-1)/N n");
    CHECK(mt_comm_formula_bytes(MT_OP_REDUCE_SCATTER, 1000, 4, 0) == 750, "reduce-scatter (N-1)/N n");
    CHECK(mt_comm_formula_bytes(MT_OP_ALLGATHER, 1001, 3, 0) == 667, "allgather rounds down");
    CHECK(mt_comm_formula_bytes(MT_OP_ALLREDUCE, 1000, 1, 0) == 0, "one rank sends nothing");
    int failures = mt_test_failures, worst;
    MPI_Allreduce(&failures, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (mt_comm_rank(C) == 0 || failures)
        mt_test_done(mt_comm_label(C));
    mt_comm_finalize(C);
    return worst ? 1 : 0;
}
