/* tp_ops.c - a tensor-parallel rank's share of the split products: the blocked sums whose
 * terms are split (row-parallel forward, column-parallel input gradients, the head's input
 * gradient) and the replicated parameters' row blocks.  Pure (no MPI): the model calls
 * these around the tp group's collectives; their products and adds run on the backend
 * (mt_backend.h), which also holds the vocabulary-split embedding and cross-entropy. */
#include "mt_tp.h"

#include <math.h>
#include <string.h>

#include "mt_backend.h"

int mt_tp_tree_depth(int n)
{
    int d = 0;
    while ((1 << d) < n)
        d++;
    return d;
}

static void add_into(float *dst, const float *src, int64_t n) { mt_be()->add(dst, src, n); }

/* block j of a blocked sum, written (=) into dst */
typedef struct {
    const float *a, *w;
    int N, C, OC, nb, kind; /* kind 0 rows of inp, 1 columns, 2 heads, 3 vocabulary */
} Blocks;

static void block(const Blocks *b, int j, float *dst)
{
    switch (b->kind) {
    case 0: { /* inp (N, C=Kin) @ w (Kin, OC), input rows of block j */
        int k = b->C / b->nb;
        mt_be()->gemm(0, 0, b->N, b->OC, k, 1.0f, b->a + (int64_t)j * k, b->C, b->w + (int64_t)j * k * b->OC, b->OC, 0.0f,
                dst, b->OC, 0);
        return;
    }
    case 1: { /* dout (N, OC) @ w (C, OC)^T over columns of block j */
        int k = b->OC / b->nb;
        mt_be()->gemm(0, 1, b->N, b->C, k, 1.0f, b->a + (int64_t)j * k, b->OC, b->w + (int64_t)j * k, b->OC, 0.0f, dst,
                b->C, 0);
        return;
    }
    case 2: { /* the q, k and v columns of block j of the heads, in that order */
        int Cl = b->OC / 3, k = Cl / b->nb;
        for (int part = 0; part < 3; part++) {
            int64_t at = (int64_t)part * Cl + (int64_t)j * k;
            mt_be()->gemm(0, 1, b->N, b->C, k, 1.0f, b->a + at, b->OC, b->w + at, b->OC, part ? 1.0f : 0.0f, dst, b->C, 0);
        }
        return;
    }
    default: { /* dlogits (N, OC=Vl) @ wte (Vl, C) over vocabulary rows of block j */
        int k = b->OC / b->nb;
        mt_be()->gemm(0, 0, b->N, b->C, k, 1.0f, b->a + (int64_t)j * k, b->OC, b->w + (int64_t)j * k * b->C, b->C, 0.0f,
                dst, b->C, 0);
        return;
    }
    }
}

static int test_ltr; /* mt_tp_test_left_to_right */

void mt_tp_test_left_to_right(int on) { test_ltr = on; }

/* S(lo, hi) into out, depth first; tmp[0..] are the deeper levels' right halves */
static void tree(const Blocks *b, int lo, int hi, float *out, float **tmp, int64_t n)
{
    if (test_ltr && hi - lo > 1) { /* the wrong order the tests must catch */
        block(b, lo, out);
        for (int j = lo + 1; j < hi; j++) {
            block(b, j, tmp[0]);
            add_into(out, tmp[0], n);
        }
        return;
    }
    if (hi - lo == 1) {
        block(b, lo, out);
        return;
    }
    int mid = lo + (hi - lo) / 2;
    tree(b, lo, mid, out, tmp + 1, n);
    tree(b, mid, hi, tmp[0], tmp + 1, n);
    add_into(out, tmp[0], n);
}

void mt_tp_rowpar_sum(float *S, float **tmp, const float *inp, const float *w, int N, int Kin, int OC, int nb)
{
    Blocks b = {inp, w, N, Kin, OC, nb, 0};
    tree(&b, 0, nb, S, tmp, (int64_t)N * OC);
}

void mt_tp_colpar_dinp(float *S, float **tmp, const float *dout, const float *w, int N, int C, int OC, int nb,
                       int heads)
{
    Blocks b = {dout, w, N, C, OC, nb, heads ? 2 : 1};
    tree(&b, 0, nb, S, tmp, (int64_t)N * C);
}

void mt_tp_vocab_dinp(float *S, float **tmp, const float *dlogits, const float *wte, int N, int C, int Vl, int nb)
{
    Blocks b = {dlogits, wte, N, C, Vl, nb, 3};
    tree(&b, 0, nb, S, tmp, (int64_t)N * C);
}

static void tree_parts(float **parts, int lo, int hi, int64_t n)
{
    if (hi - lo == 1)
        return;
    int mid = lo + (hi - lo) / 2;
    tree_parts(parts, lo, mid, n);
    tree_parts(parts, mid, hi, n);
    add_into(parts[lo], parts[mid], n);
}

void mt_tp_tree_add(float **parts, int nb, int64_t n) { tree_parts(parts, 0, nb, n); }

/* ---- row blocks: the replicated parameters' gradients ---- */

/* the tree over blocks [lo, hi) of nb, block j being rows [j R / nb, (j+1) R / nb) */
static void rows_tree(int ln, float *out, float **lvl, const float *dout, const float *inp, const float *mean,
                      const float *rstd, int R, int C, int nb, int lo, int hi)
{
    if (hi - lo == 1) {
        int64_t r0 = (int64_t)lo * R / nb, r1 = (int64_t)(lo + 1) * R / nb;
        const float *d = dout + r0 * C;
        if (ln)
            mt_be()->layernorm_backward(NULL, out, out + C, d, inp + r0 * C, NULL, mean + r0, rstd + r0, (int)(r1 - r0), C, 0);
        else
            mt_be()->colsum(out, d, (int)(r1 - r0), C, 0);
        return;
    }
    int mid = lo + (hi - lo) / 2, w = ln ? 2 * C : C;
    rows_tree(ln, out, lvl + 1, dout, inp, mean, rstd, R, C, nb, lo, mid);
    rows_tree(ln, lvl[0], lvl + 1, dout, inp, mean, rstd, R, C, nb, mid, hi);
    add_into(out, lvl[0], w);
}

void mt_tp_rows_grads(float *out, float **lvl, int ln, const float *dout, const float *inp, const float *mean,
                      const float *rstd, int rows, int C, int nb)
{
    rows_tree(ln, out, lvl, dout, inp, mean, rstd, rows, C, nb, 0, nb);
}

