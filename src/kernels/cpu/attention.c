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

/* row[0..n) <- softmax(row[0..n)), row[n..end) <- 0.  The sum runs over 16 interleaved
 * lanes combined in a fixed tree (element j in lane j % 16, as mt_sum_fixed), so it
 * vectorises and stays the same on every machine; exp and the sum share one pass. */
static inline void softmax_causal_row(float *row, int n, int end)
{
    int j = 0;
    mt_v8 m0 = {0}, m1;
    m0 += row[0];
    m1 = m0;
    for (; j + MT_LANES <= n; j += MT_LANES) {
        m0 = mt_v8_max(m0, mt_v8_load(row + j));
        m1 = mt_v8_max(m1, mt_v8_load(row + j + 8));
    }
    float t[MT_LANES];
    mt_v8_store(t, mt_v8_max(m0, m1));
    float mx = t[0];
    for (int k = 1; k < 8; k++)
        mx = t[k] > mx ? t[k] : mx;
    for (; j < n; j++)
        mx = row[j] > mx ? row[j] : mx;
    mt_v8 lo = {0}, hi = {0};
    for (j = 0; j + MT_LANES <= n; j += MT_LANES) {
        mt_v8 a = mt_expf_v8(mt_v8_load(row + j) - mx), b = mt_expf_v8(mt_v8_load(row + j + 8) - mx);
        mt_v8_store(row + j, a);
        mt_v8_store(row + j + 8, b);
        lo += a;
        hi += b;
    }
    memset(t, 0, sizeof t);
    for (int k = 0; j + k < n; k++)
        row[j + k] = t[k] = mt_expf_inl(row[j + k] - mx);
    lo += mt_v8_load(t);
    hi += mt_v8_load(t + 8);
    float inv = 1.0f / mt_lanes_reduce(lo, hi);
    for (j = 0; j < n; j++)
        row[j] *= inv;
    for (j = n; j < end; j++)
        row[j] = 0.0f;
}

/* drow[0..n) <- prow * (drow - <prow, drow>), drow[n..end) <- 0 (softmax backward) */
static inline void softmax_backward_row(float *drow, const float *prow, int n, int end)
{
    mt_v8 lo = {0}, hi = {0};
    int j = 0;
    for (; j + MT_LANES <= n; j += MT_LANES) {
        lo += mt_v8_load(prow + j) * mt_v8_load(drow + j);
        hi += mt_v8_load(prow + j + 8) * mt_v8_load(drow + j + 8);
    }
    float t[MT_LANES] = {0};
    for (int k = 0; j + k < n; k++)
        t[k] = prow[j + k] * drow[j + k];
    lo += mt_v8_load(t);
    hi += mt_v8_load(t + 8);
    float dot = mt_lanes_reduce(lo, hi);
    for (j = 0; j < n; j++)
        drow[j] = prow[j] * (drow[j] - dot);
    for (j = n; j < end; j++)
        drow[j] = 0.0f;
}

/* Causal blocking: rows are processed in blocks of RB; a block of query rows [r0, r1) only
 * needs keys [0, r1), and a block of key rows [c0, c1) only receives gradient from query
 * rows [c0, T).  For T = 256 this skips 37% of the products' work. */
#define RB 64

void mt_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (int64_t)b * T * C3 + h * hs;
        const float *k = q + C, *v = q + 2 * C;
        float *p = att + (int64_t)bh * T * T, *y = out + (int64_t)b * T * C + h * hs;
        for (int r0 = 0; r0 < T; r0 += RB) {
            int r1 = r0 + RB < T ? r0 + RB : T, rb = r1 - r0;
            /* scores [r0,r1) x [0,r1) = scale * q @ k^T, softmax, then y = p @ v */
            mt_gemm(0, 1, rb, r1, hs, scale, q + (int64_t)r0 * C3, C3, k, C3, 0.0f,
                    p + (int64_t)r0 * T, T, 1);
            for (int t = r0; t < r1; t++) /* later blocks read this row up to r1 only */
                softmax_causal_row(p + (int64_t)t * T, t + 1, r1);
            mt_gemm(0, 0, rb, hs, r1, 1.0f, p + (int64_t)r0 * T, T, v, C3, 0.0f,
                    y + (int64_t)r0 * C, C, 1);
        }
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
        for (int r0 = 0; r0 < T; r0 += RB) {
            int r1 = r0 + RB < T ? r0 + RB : T, rb = r1 - r0;
            /* dp [r0,r1) x [0,r1) = dy @ v^T, softmax backward in place, dq = scale * ds @ k */
            mt_gemm(0, 1, rb, r1, hs, 1.0f, dy + (int64_t)r0 * C, C, v, C3, 0.0f,
                    ds + (int64_t)r0 * T, T, 1);
            for (int t = r0; t < r1; t++)
                softmax_backward_row(ds + (int64_t)t * T, p + (int64_t)t * T, t + 1, r1);
            mt_gemm(0, 0, rb, hs, r1, scale, ds + (int64_t)r0 * T, T, k, C3, 0.0f,
                    dq + (int64_t)r0 * C3, C3, 1);
        }
        for (int c0 = 0; c0 < T; c0 += RB) {
            int c1 = c0 + RB < T ? c0 + RB : T, cb = c1 - c0, rows = T - c0;
            /* dv [c0,c1) = p[c0:T, c0:c1]^T @ dy[c0:T] ; dk = scale * ds[c0:T, c0:c1]^T @ q[c0:T] */
            mt_gemm(1, 0, cb, hs, rows, 1.0f, p + (int64_t)c0 * T + c0, T, dy + (int64_t)c0 * C, C,
                    0.0f, dv + (int64_t)c0 * C3, C3, 1);
            mt_gemm(1, 0, cb, hs, rows, scale, ds + (int64_t)c0 * T + c0, T, q + (int64_t)c0 * C3,
                    C3, 0.0f, dk + (int64_t)c0 * C3, C3, 1);
        }
    }
}
