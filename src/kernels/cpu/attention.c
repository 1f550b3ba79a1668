/* attention.c - causal multi-head self-attention, one (batch, head) pair per task.
 *
 * qkv (B,T,3C): row (b,t) holds q | k | v, each C wide; head h owns columns
 * [h*hs, (h+1)*hs) of each part (hs = C/NH).  Products run through mt_gemm, single-
 * threaded inside the parallel loop over pairs, so the result is the same for any
 * number of threads.  The softmax uses mt_expf with its row maximum subtracted. */
#include "mt_gemm.h"
#include "mt_kernels.h"

#include "mathinl.h"

#include <math.h>
#include <omp.h>
#include <string.h>

int64_t mt_attention_scratch_floats(int T) { return (int64_t)T * T; }

/* row[0..n) <- softmax(row[0..n)), row[n..T) <- 0.  The sum runs over 16 interleaved
 * lanes combined in a fixed tree, so it vectorises and stays the same on every machine. */
static inline void softmax_causal_row(float *row, int n, int T)
{
    float mx = row[0];
    for (int j = 1; j < n; j++)
        mx = row[j] > mx ? row[j] : mx;
    for (int j = 0; j < n; j++)
        row[j] = mt_expf_inl(row[j] - mx);
    float acc[MT_LANES] = {0};
    int j = 0;
    for (; j + MT_LANES <= n; j += MT_LANES)
        for (int k = 0; k < MT_LANES; k++)
            acc[k] += row[j + k];
    for (int k = 0; j < n; j++, k++)
        acc[k] += row[j];
    float inv = 1.0f / mt_lanes_sum(acc);
    for (j = 0; j < n; j++)
        row[j] *= inv;
    for (j = n; j < T; j++)
        row[j] = 0.0f;
}

/* drow[0..n) <- prow * (drow - <prow, drow>), drow[n..T) <- 0 (softmax backward) */
static inline void softmax_backward_row(float *drow, const float *prow, int n, int T)
{
    float acc[MT_LANES] = {0};
    int j = 0;
    for (; j + MT_LANES <= n; j += MT_LANES)
        for (int k = 0; k < MT_LANES; k++)
            acc[k] += prow[j + k] * drow[j + k];
    for (int k = 0; j < n; j++, k++)
        acc[k] += prow[j] * drow[j];
    float dot = mt_lanes_sum(acc);
    for (j = 0; j < n; j++)
        drow[j] = prow[j] * (drow[j] - dot);
    for (j = n; j < T; j++)
        drow[j] = 0.0f;
}

void mt_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (int64_t)b * T * C3 + h * hs;
        const float *k = q + C, *v = q + 2 * C;
        float *p = att + (int64_t)bh * T * T;
        /* scores (T,T) = scale * q @ k^T */
        mt_gemm(0, 1, T, T, hs, scale, q, C3, k, C3, 0.0f, p, T, 1);
        for (int t = 0; t < T; t++)
            softmax_causal_row(p + (int64_t)t * T, t + 1, T);
        /* out (T,hs) = p @ v */
        mt_gemm(0, 0, T, hs, T, 1.0f, p, T, v, C3, 0.0f, out + (int64_t)b * T * C + h * hs, C, 1);
    }
}

void mt_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                           const float *att, int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        float *ds = scratch + (int64_t)omp_get_thread_num() * T * T;
        const float *q = qkv + (int64_t)b * T * C3 + h * hs;
        const float *k = q + C, *v = q + 2 * C;
        float *dq = dqkv + (int64_t)b * T * C3 + h * hs;
        float *dk = dq + C, *dv = dq + 2 * C;
        const float *p = att + (int64_t)bh * T * T;
        const float *dy = dout + (int64_t)b * T * C + h * hs;
        /* dp (T,T) = dy @ v^T ;  dv (T,hs) = p^T @ dy */
        mt_gemm(0, 1, T, T, hs, 1.0f, dy, C, v, C3, 0.0f, ds, T, 1);
        mt_gemm(1, 0, T, hs, T, 1.0f, p, T, dy, C, 0.0f, dv, C3, 1);
        /* softmax backward, in place */
        for (int t = 0; t < T; t++)
            softmax_backward_row(ds + (int64_t)t * T, p + (int64_t)t * T, t + 1, T);
        /* dq = scale * ds @ k ;  dk = scale * ds^T @ q */
        mt_gemm(0, 0, T, hs, T, scale, ds, T, k, C3, 0.0f, dq, C3, 1);
        mt_gemm(1, 0, T, hs, T, scale, ds, T, q, C3, 0.0f, dk, C3, 1);
    }
}
