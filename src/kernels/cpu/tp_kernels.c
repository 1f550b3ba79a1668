/* tp_kernels.c - tensor parallelism's element-wise kernels on the CPU: the vocabulary-
 * split embedding and cross-entropy and the row-parallel product's finish (mt_kernels.h).
 * The blocked sums around them are the model's (src/model/tp_ops.c). */
#include "mt_kernels.h"

#include "mathinl.h"

#include <math.h>
#include <omp.h>
#include <string.h>

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
