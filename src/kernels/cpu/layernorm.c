/* layernorm.c - LayerNorm forward and backward (eps 1e-5, biased variance). */
#include "mt_kernels.h"

#include <math.h>

#include "mathinl.h"

#define LN_EPS 1e-5f

/* sum of (x - m)^2 in the fixed lane order of mathinl.h */
static inline float sumsq_centered(const float *x, float m, int n)
{
    mt_v8 lo = {0}, hi = {0};
    int i = 0;
    for (; i + MT_LANES <= n; i += MT_LANES) {
        mt_v8 a = mt_v8_load(x + i) - m, b = mt_v8_load(x + i + 8) - m;
        lo += a * a;
        hi += b * b;
    }
    float t[MT_LANES] = {0};
    for (int j = 0; i + j < n; j++)
        t[j] = (x[i + j] - m) * (x[i + j] - m);
    lo += mt_v8_load(t);
    hi += mt_v8_load(t + 8);
    return mt_lanes_reduce(lo, hi);
}

void mt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (int64_t)n * C;
        float *o = out + (int64_t)n * C;
        float m = mt_sum_fixed(x, C) / C;
        float s = 1.0f / sqrtf(sumsq_centered(x, m, C) / C + LN_EPS);
        for (int c = 0; c < C; c++)
            o[c] = (x[c] - m) * s * w[c] + b[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

void mt_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int N, int C, int add)
{
    /* 1. the input gradient, row by row */
#pragma omp parallel for schedule(static) if (dinp)
    for (int n = 0; n < (dinp ? N : 0); n++) {
        const float *x = inp + (int64_t)n * C, *d = dout + (int64_t)n * C;
        float *dx = dinp + (int64_t)n * C;
        float m = mean[n], s = rstd[n];
        /* sums of dn = dout * w and of dn * norm, in the fixed lane order */
        mt_v8 a1 = {0}, b1 = {0}, a2 = {0}, b2 = {0};
        int c = 0;
        for (; c + MT_LANES <= C; c += MT_LANES) {
            mt_v8 dn0 = mt_v8_load(d + c) * mt_v8_load(w + c);
            mt_v8 dn1 = mt_v8_load(d + c + 8) * mt_v8_load(w + c + 8);
            a1 += dn0;
            b1 += dn1;
            a2 += dn0 * ((mt_v8_load(x + c) - m) * s);
            b2 += dn1 * ((mt_v8_load(x + c + 8) - m) * s);
        }
        float t1[MT_LANES] = {0}, t2[MT_LANES] = {0};
        for (int j = 0; c + j < C; j++) {
            float dn = d[c + j] * w[c + j];
            t1[j] = dn;
            t2[j] = dn * ((x[c + j] - m) * s);
        }
        a1 += mt_v8_load(t1);
        b1 += mt_v8_load(t1 + 8);
        a2 += mt_v8_load(t2);
        b2 += mt_v8_load(t2 + 8);
        float dn_mean = mt_lanes_reduce(a1, b1) / C, dn_norm_mean = mt_lanes_reduce(a2, b2) / C;
        for (c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            float dn = d[c] * w[c];
            dx[c] += (dn - dn_mean - norm * dn_norm_mean) * s;
        }
    }
    /* 2. weight and bias gradients: split over channels, rows summed in order */
    if (!dw)
        return;
#pragma omp parallel
    {
        int c0, c1;
        mt_channel_range(C, &c0, &c1);
        if (!add)
            for (int c = c0; c < c1; c++)
                dw[c] = db[c] = 0.0f;
        for (int n = 0; n < N; n++) {
            const float *x = inp + (int64_t)n * C, *d = dout + (int64_t)n * C;
            float m = mean[n], s = rstd[n];
            for (int c = c0; c < c1; c++) {
                dw[c] += d[c] * (x[c] - m) * s;
                db[c] += d[c];
            }
        }
    }
}
