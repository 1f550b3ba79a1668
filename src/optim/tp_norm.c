/* tp_norm.c - the gradient norm of a model split over tensor-parallel slices, defined for
 * any number of blocks K (see mt_optim.h). */
#include "mt_optim.h"

#include <stdlib.h>

/* sum of squares of x (device) as blocks of MT_NORM_BLOCK from its first element (each the
 * backend's 16-lane double sum, as every other path sums a block), the blocks added in
 * order; part: room for the block sums (host) */
static double blocks_sumsq(const float *x, int64_t n, double *part)
{
    mt_be()->block_sumsq(x, n, part);
    double total = 0.0;
    for (int64_t b = 0; b * MT_NORM_BLOCK < n; b++)
        total += part[b];
    return total;
}

/* sub-slice j of nsub of a local tensor, gathered in its order, summed as blocks; the
 * sub-slices' sums added as the pairwise tree */
static double slice_tree(const MtParam *p, const float *g, int nsub, int lo, int hi, float *buf, double *part)
{
    if (hi - lo == 1) {
        int64_t n = 0;
        for (int k = 0; k < mt_tp_nruns(p, nsub); k++) {
            int64_t b, e, at;
            mt_tp_run(p, nsub, lo, p->shape[0], k, &b, &e, &at);
            mt_be()->copy(buf + at, g + b, e - b);
            n = at + (e - b) > n ? at + (e - b) : n;
        }
        return blocks_sumsq(buf, n, part);
    }
    int mid = lo + (hi - lo) / 2;
    double left = slice_tree(p, g, nsub, lo, mid, buf, part);
    return left + slice_tree(p, g, nsub, mid, hi, buf, part);
}

void mt_tp_sumsq_parts(const MtParam *t, int n, const float *g, int nsub, double *out)
{
    int64_t most = 1;
    for (int i = 0; i < n; i++)
        most = t[i].numel > most ? t[i].numel : most;
    size_t bytes = sizeof(float) * (size_t)most; /* a sub-slice gathered on the device */
    float *buf = nsub > 1 ? mt_be()->alloc(bytes) : NULL;
    double *part = malloc(sizeof(double) * (size_t)(most / MT_NORM_BLOCK + 1));
    MT_ASSERT(part && (buf || nsub == 1), "out of memory for the gradient norm");
    for (int i = 0; i < n; i++) {
        const MtParam *p = &t[i];
        if (mt_tp_split(p) == MT_TP_REPLICATED || nsub == 1) /* one slice: the tensor itself, in order */
            out[i] = blocks_sumsq(g + p->offset, p->numel, part);
        else
            out[i] = slice_tree(p, g + p->offset, nsub, 0, nsub, buf, part);
    }
    mt_be()->free(buf, bytes);
    free(part);
}

static double rank_tree(const double *all, int n, int i, int lo, int hi)
{
    if (hi - lo == 1)
        return all[(int64_t)lo * n + i];
    int mid = lo + (hi - lo) / 2;
    double left = rank_tree(all, n, i, lo, mid);
    return left + rank_tree(all, n, i, mid, hi);
}

double mt_tp_sumsq_combine(const MtParam *t, int n, const double *all, int N)
{
    double total = 0.0;
    for (int i = 0; i < n; i++)
        total += mt_tp_split(&t[i]) == MT_TP_REPLICATED ? all[i] : rank_tree(all, n, i, 0, N);
    return total;
}
