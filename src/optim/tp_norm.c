/* tp_norm.c - the gradient norm of a model split over tensor-parallel slices, defined for
 * any number of blocks K (see mt_optim.h). */
#include "mt_optim.h"

#include <stdlib.h>
#include <string.h>

/* sum of squares of x as blocks of MT_NORM_BLOCK from its first element (double each),
 * the blocks added in order */
static double blocks_sumsq(const float *x, int64_t n)
{
    double total = 0.0;
    for (int64_t lo = 0; lo < n; lo += MT_NORM_BLOCK) {
        int64_t hi = lo + MT_NORM_BLOCK < n ? lo + MT_NORM_BLOCK : n;
        double s = 0.0;
        for (int64_t i = lo; i < hi; i++)
            s += (double)x[i] * x[i];
        total += s;
    }
    return total;
}

/* sub-slice j of nsub of a local tensor, gathered in its order, summed as blocks; the
 * sub-slices' sums added as the pairwise tree */
static double slice_tree(const MtParam *p, const float *g, int nsub, int lo, int hi, float *buf)
{
    if (hi - lo == 1) {
        int64_t n = 0;
        for (int k = 0; k < mt_tp_nruns(p, nsub); k++) {
            int64_t b, e, at;
            mt_tp_run(p, nsub, lo, p->shape[0], k, &b, &e, &at);
            memcpy(buf + at, g + b, sizeof(float) * (size_t)(e - b));
            n = at + (e - b) > n ? at + (e - b) : n;
        }
        return blocks_sumsq(buf, n);
    }
    int mid = lo + (hi - lo) / 2;
    double left = slice_tree(p, g, nsub, lo, mid, buf);
    return left + slice_tree(p, g, nsub, mid, hi, buf);
}

void mt_tp_sumsq_parts(const MtParam *t, int n, const float *g, int nsub, double *out)
{
    int64_t most = 1;
    for (int i = 0; i < n; i++)
        most = t[i].numel > most ? t[i].numel : most;
    float *buf = malloc(sizeof(float) * (size_t)most);
    MT_ASSERT(buf, "out of memory for the gradient norm");
    for (int i = 0; i < n; i++) {
        const MtParam *p = &t[i];
        if (mt_tp_split(p) == MT_TP_REPLICATED || nsub == 1) /* one slice: the tensor itself, in order */
            out[i] = blocks_sumsq(g + p->offset, p->numel);
        else
            out[i] = slice_tree(p, g + p->offset, nsub, 0, nsub, buf);
    }
    free(buf);
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
