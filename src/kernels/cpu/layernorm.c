/* layernorm.c - LayerNorm forward and backward (eps 1e-5, biased variance). */
#include "mt_kernels.h"

#include <math.h>

#include "mathinl.h"

#define LN_EPS 1e-5f
#define LANES MT_LANES

/* Sum of x[0..n) in a fixed order: 16 interleaved partial sums, then a fixed tree. */
static inline float sum_fixed(const float *x, int n)
{
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++)
            acc[j] += x[i + j];
    for (int j = 0; i < n; i++, j++)
        acc[j] += x[i];
    return mt_lanes_sum(acc);
}

static inline float sumsq_centered(const float *x, float m, int n)
{
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) {
            float d = x[i + j] - m;
            acc[j] += d * d;
        }
    for (int j = 0; i < n; i++, j++) {
        float d = x[i] - m;
        acc[j] += d * d;
    }
    return mt_lanes_sum(acc);
}

void mt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (int64_t)n * C;
        float *o = out + (int64_t)n * C;
        float m = sum_fixed(x, C) / C;
        float s = 1.0f / sqrtf(sumsq_centered(x, m, C) / C + LN_EPS);
        for (int c = 0; c < C; c++)
            o[c] = (x[c] - m) * s * w[c] + b[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

void mt_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int N, int C)
{
    /* 1. the input gradient, row by row */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (int64_t)n * C, *d = dout + (int64_t)n * C;
        float *dx = dinp + (int64_t)n * C;
        float m = mean[n], s = rstd[n];
        float acc1[LANES] = {0}, acc2[LANES] = {0};
        int c = 0;
        for (; c + LANES <= C; c += LANES)
            for (int j = 0; j < LANES; j++) {
                float dn = d[c + j] * w[c + j];
                acc1[j] += dn;
                acc2[j] += dn * (x[c + j] - m) * s;
            }
        for (int j = 0; c < C; c++, j++) {
            float dn = d[c] * w[c];
            acc1[j] += dn;
            acc2[j] += dn * (x[c] - m) * s;
        }
        float dn_mean = mt_lanes_sum(acc1) / C, dn_norm_mean = mt_lanes_sum(acc2) / C;
        for (c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            float dn = d[c] * w[c];
            dx[c] += (dn - dn_mean - norm * dn_norm_mean) * s;
        }
    }
    /* 2. weight and bias gradients: split over channels, rows summed in order */
#pragma omp parallel
    {
        int c0, c1;
        mt_channel_range(C, &c0, &c1);
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
