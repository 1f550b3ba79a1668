/* accum.c - the accumulation order as a plan, its executor and its loss (see mt_accum.h). */
#include "mt_accum.h"

#include "mt_backend.h"
#include "mt_core.h"

int mt_accum_depth(int n)
{
    int d = 0;
    while ((1 << d) < n)
        d++;
    return d;
}

int mt_accum_block(int M, int K) { return K > 0 ? M / K : 1; }

int mt_accum_buffers(int span, int B) { return span > 1 ? mt_accum_depth(span / B) + (B > 1) : 0; }

static int pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

int mt_accum_round_robin(int D, int zero, int det, int M, int B)
{
    return D > 1 && zero >= 2 && B == 1 && (!det || pow2(M / D));
}

int mt_accum_default(int D, int zero, int det, int M)
{
    return mt_accum_round_robin(D, zero, det, M, 1) ? 0 : D;
}

/* leaves [lo, hi) in blocks of B: a block left to right through the leaf buffer L, the
 * blocks as the pairwise tree (the left sum in buf, the right one in temporary depth) */
static void plan(int lo, int hi, int B, int L, int buf, int depth, MtTreeStep *steps, int *n)
{
    if (hi - lo == B) {
        steps[(*n)++] = (MtTreeStep){lo, buf, -1};
        for (int k = lo + 1; k < hi; k++) {
            steps[(*n)++] = (MtTreeStep){k, L, -1};
            steps[(*n)++] = (MtTreeStep){-1, buf, L};
        }
        steps[(*n)++] = (MtTreeStep){MT_TREE_END, buf, lo / B};
        return;
    }
    int mid = lo + (hi - lo) / B / 2 * B;
    plan(lo, mid, B, L, buf, depth + 1, steps, n);
    plan(mid, hi, B, L, depth + 1, depth + 1, steps, n);
    steps[(*n)++] = (MtTreeStep){-1, buf, depth + 1};
}

int mt_tree_plan_blocks(int M, int B, MtTreeStep *steps)
{
    MT_ASSERT(B >= 1 && M >= B && M % B == 0, "an accumulation plan of %d leaves in blocks of %d", M, B);
    int n = 0;
    plan(0, M, B, 1 + mt_accum_depth(M / B), 0, 0, steps, &n);
    return n;
}

int mt_tree_plan(int M, MtTreeStep *steps) { return mt_tree_plan_blocks(M, 1, steps); }

int mt_tree_temps_blocks(int M, int B) { return mt_accum_depth(M / B) + (B > 1); }

int mt_tree_temps(int M) { return mt_tree_temps_blocks(M, 1); }

int mt_tree_plan_max(int M) { return 3 * M; }

int mt_accum_adds(const MtTreeStep *steps, int nsteps, int at, float *const *bufs, int64_t off, int64_t n,
                  const MtAccumEnd *end)
{
    for (at++; at < nsteps && steps[at].leaf < 0; at++) {
        if (steps[at].leaf == MT_TREE_END) {
            if (end && end->fn)
                end->fn(end->ctx, bufs[steps[at].buf], off, n);
        } else
            mt_be()->add(bufs[steps[at].buf] + off, bufs[steps[at].src] + off, n);
    }
    return at;
}

float mt_tree_plan_sum(const MtTreeStep *steps, int n, const float *x)
{
    float buf[MT_TREE_MAX_BUFS] = {0};
    for (int i = 0; i < n; i++) {
        MT_ASSERT(steps[i].buf < MT_TREE_MAX_BUFS, "tree plan buffer %d", steps[i].buf);
        if (steps[i].leaf >= 0)
            buf[steps[i].buf] = x[steps[i].leaf];
        else if (steps[i].leaf != MT_TREE_END)
            buf[steps[i].buf] += buf[steps[i].src];
    }
    return buf[0];
}

float mt_accum_tree_sum(const float *x, int n)
{
    if (n == 1)
        return x[0];
    int mid = n / 2;
    return mt_accum_tree_sum(x, mid) + mt_accum_tree_sum(x + mid, n - mid);
}
