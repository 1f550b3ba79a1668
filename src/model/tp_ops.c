/* tp_ops.c - a tensor-parallel rank's share of the split products: the blocked sums whose
 * terms are split (row-parallel forward, column-parallel input gradients, the head's input
 * gradient, the cross-entropy's sum of exponentials) and the vocabulary-parallel embedding.
 * Pure (no MPI): the model calls these around the tp group's collectives. */
#include "mt_tp.h"

#include <math.h>
#include <string.h>

#include "mathinl.h"
#include "mt_gemm.h"
#include "mt_kernels.h"

int mt_tp_tree_depth(int n)
{
    int d = 0;
    while ((1 << d) < n)
        d++;
    return d;
}

static void add_into(float *dst, const float *src, int64_t n)
{
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++)
        dst[i] += src[i];
}

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
        mt_gemm(0, 0, b->N, b->OC, k, 1.0f, b->a + (int64_t)j * k, b->C, b->w + (int64_t)j * k * b->OC, b->OC, 0.0f,
                dst, b->OC, 0);
        return;
    }
    case 1: { /* dout (N, OC) @ w (C, OC)^T over columns of block j */
        int k = b->OC / b->nb;
        mt_gemm(0, 1, b->N, b->C, k, 1.0f, b->a + (int64_t)j * k, b->OC, b->w + (int64_t)j * k, b->OC, 0.0f, dst,
                b->C, 0);
        return;
    }
    case 2: { /* the q, k and v columns of block j of the heads, in that order */
        int Cl = b->OC / 3, k = Cl / b->nb;
        for (int part = 0; part < 3; part++) {
            int64_t at = (int64_t)part * Cl + (int64_t)j * k;
            mt_gemm(0, 1, b->N, b->C, k, 1.0f, b->a + at, b->OC, b->w + at, b->OC, part ? 1.0f : 0.0f, dst, b->C, 0);
        }
        return;
    }
    default: { /* dlogits (N, OC=Vl) @ wte (Vl, C) over vocabulary rows of block j */
        int k = b->OC / b->nb;
        mt_gemm(0, 0, b->N, b->C, k, 1.0f, b->a + (int64_t)j * k, b->OC, b->w + (int64_t)j * k * b->C, b->C, 0.0f,
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

void mt_tp_rowpar_finish(float *out, const float *S, const float *bias, const float *resid, int N, int OC)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = out + (int64_t)n * OC;
        const float *s = S + (int64_t)n * OC, *r = resid ? resid + (int64_t)n * OC : NULL;
        for (int c = 0; c < OC; c++) {
            float base = r && bias ? r[c] + bias[c] : r ? r[c] : bias ? bias[c] : 0.0f;
            o[c] = base + s[c];
        }
    }
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
            mt_layernorm_backward(NULL, out, out + C, d, inp + r0 * C, NULL, mean + r0, rstd + r0, (int)(r1 - r0), C, 0);
        else
            mt_colsum(out, d, (int)(r1 - r0), C, 0);
        return;
    }
    int mid = lo + (hi - lo) / 2, w = ln ? 2 * C : C;
    rows_tree(ln, out, lvl + 1, dout, inp, mean, rstd, R, C, nb, lo, mid);
    rows_tree(ln, lvl[0], lvl + 1, dout, inp, mean, rstd, R, C, nb, mid, hi);
    for (int c = 0; c < w; c++)
        out[c] += lvl[0][c];
}

void mt_tp_rows_grads(float *out, float **lvl, int ln, const float *dout, const float *inp, const float *mean,
                      const float *rstd, int rows, int C, int nb)
{
    rows_tree(ln, out, lvl, dout, inp, mean, rstd, rows, C, nb, 0, nb);
}

/* ---- the vocabulary-parallel embedding ---- */

void mt_tp_embed_lookup(float *out, const int32_t *tokens, const float *wte, int64_t v0, int64_t Vl, int N, int C)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = out + (int64_t)n * C;
        int64_t t = tokens[n] - v0;
        if (t >= 0 && t < Vl)
            memcpy(o, wte + t * C, sizeof(float) * (size_t)C);
        else
            memset(o, 0, sizeof(float) * (size_t)C);
    }
}

void mt_tp_embed_finish(float *out, const float *wpe, int row0, int rows, int T, int C)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < rows; n++) {
        float *o = out + (int64_t)n * C;
        const float *p = wpe + (int64_t)((row0 + n) % T) * C;
        for (int c = 0; c < C; c++)
            o[c] = o[c] + p[c];
    }
}

void mt_tp_embed_backward_rows(float *dwte, const float *dout, const int32_t *tokens, int64_t v0, int64_t Vl, int N, int C)
{
#pragma omp parallel
    {
        int c0, c1;
        mt_channel_range(C, &c0, &c1);
        for (int n = 0; n < N; n++) { /* each element's sum in row order */
            int64_t t = tokens[n] - v0;
            if (t < 0 || t >= Vl)
                continue;
            const float *d = dout + (int64_t)n * C;
            float *e = dwte + t * C;
            for (int c = c0; c < c1; c++)
                e[c] += d[c];
        }
    }
}

/* ---- the vocabulary-parallel cross-entropy ---- */

/* the rank's real columns: [0, real) of its Vl */
static int64_t real_cols(int64_t v0, int64_t Vl, int64_t V)
{
    int64_t r = V - v0;
    return r < 0 ? 0 : r > Vl ? Vl : r;
}

void mt_tp_xent_max(float *mx, const float *logits, int64_t v0, int64_t Vl, int64_t V, int N)
{
    int64_t real = real_cols(v0, Vl, V);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        mx[n] = real > 0 ? mt_max_fixed(logits + (int64_t)n * Vl, real) : -INFINITY;
    }
}

void mt_tp_xent_reduce_max(float *mx, const float *all, int nranks, int N)
{
    for (int n = 0; n < N; n++) {
        float m = all[n];
        for (int r = 1; r < nranks; r++)
            m = all[(int64_t)r * N + n] > m ? all[(int64_t)r * N + n] : m;
        mx[n] = m;
    }
}

static double sum_tree(const float *l, float mx, int64_t w, int64_t real, int lo, int hi)
{
    if (hi - lo == 1) {
        int64_t a = lo * w, b = a + w < real ? a + w : real;
        return b > a ? mt_sum_exp_fixed((float *)l + a, b - a, mx, 0) : 0.0; /* keep 0: read only */
    }
    int mid = lo + (hi - lo) / 2;
    double left = sum_tree(l, mx, w, real, lo, mid);
    return left + sum_tree(l, mx, w, real, mid, hi);
}

void mt_tp_xent_sums(float *stats, const float *logits, const float *mx, const int32_t *targets, int64_t v0,
                     int64_t Vl, int64_t V, int N, int nb)
{
    int64_t real = real_cols(v0, Vl, V), w = Vl / nb;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *l = logits + (int64_t)n * Vl;
        double s = sum_tree(l, mx[n], w, real, 0, nb);
        float *st = stats + (int64_t)n * 4;
        memcpy(st, &s, sizeof s);
        int64_t t = targets[n] - v0;
        st[2] = t >= 0 && t < real ? l[t] : 0.0f;
        st[3] = 0.0f;
    }
}

static double rank_sum(const float *all, int N, int n, int lo, int hi)
{
    if (hi - lo == 1) {
        double s;
        memcpy(&s, all + ((int64_t)lo * N + n) * 4, sizeof s);
        return s;
    }
    int mid = lo + (hi - lo) / 2;
    double left = rank_sum(all, N, n, lo, mid);
    return left + rank_sum(all, N, n, mid, hi);
}

static float rank_target(const float *all, int N, int n, int lo, int hi)
{
    if (hi - lo == 1)
        return all[((int64_t)lo * N + n) * 4 + 2];
    int mid = lo + (hi - lo) / 2;
    float left = rank_target(all, N, n, lo, mid);
    return left + rank_target(all, N, n, mid, hi);
}

double mt_tp_xent_finish(float *logits, float *losses, const float *all_stats, int nranks, const float *mx,
                         const int32_t *targets, int64_t v0, int64_t Vl, int64_t V, int N, float dscale)
{
    int64_t real = real_cols(v0, Vl, V);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *l = logits + (int64_t)n * Vl;
        double sum = rank_sum(all_stats, N, n, 0, nranks);
        float xt = rank_target(all_stats, N, n, 0, nranks);
        float lse = mx[n] + (float)log(sum);
        losses[n] = lse - xt;
        if (dscale != 0.0f) {
            float inv = (float)(1.0 / sum);
            mt_scale_exp(l, real, mx[n], inv, dscale, 0);
            for (int64_t v = real; v < Vl; v++)
                l[v] = 0.0f;
            int64_t t = targets[n] - v0;
            if (t >= 0 && t < real)
                l[t] -= dscale;
        }
    }
    double total = 0.0;
    for (int n = 0; n < N; n++)
        total += losses[n];
    return total;
}
