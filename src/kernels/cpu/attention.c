/* attention.c - causal multi-head self-attention, fused: the (B, NH, T, T) probabilities
 * are never stored.
 *
 * qkv (B,T,3C): row (b,t) holds q | k | v, each C wide; head h owns columns
 * [h*hs, (h+1)*hs) of each part (hs = C/NH).  One (batch, head) pair is one task of the
 * parallel loop, computed by one thread from start to end in a fixed order, so the bits do
 * not depend on the number of threads; nor on the instruction set: the vector code is GCC's
 * 8-lane vectors (mathinl.h) with contraction off, the same operations on every machine.
 *
 * Forward, per pair: K is transposed once into the thread's scratch, then query rows go in
 * tiles of QT; a tile's scores against its whole causal row of keys (QT x T floats, in L1
 * for the sizes here) are computed by a register-blocked kernel, each row's softmax is
 * exact (its maximum, then the sum of exp as 16 fixed lanes), and y = p @ v.  Only each
 * row's log-sum-exp is kept (lse, (B, NH, T)).  Decision: FlashAttention's online softmax
 * rescales the running sums at every key tile; with a whole row of a QT-row tile in L1 the
 * exact two-pass row is as cheap and its bits do not depend on a key tile size.
 *
 * Backward, per pair: the tile's probabilities are recomputed as exp(s - lse); with
 * D = rowsum(dy * y): dp = dy @ v^T, ds = p (dp - D), dq = scale ds @ k (whole in the tile),
 * and dv += p^T dy, dk += scale ds^T q accumulated over the query tiles in order. */
#include "mt_kernels.h"

#include "mathinl.h"

#include <math.h>
#include <omp.h>
#include <string.h>
#if defined(__FMA__)
#include <immintrin.h>
#endif

#define QT 4  /* query rows per tile */
#define QB 16 /* backward: query rows whose dk, dv contributions are added at once (QB / QT tiles) */

static int64_t pad16(int64_t n) { return (n + 15) / 16 * 16; }

/* a * b + c rounded once (IEEE fused multiply-add): the same bits with the instruction
 * (AVX2 and AVX-512 machines) and without it (fmaf lane by lane, slow but exact) */
static inline mt_v8 fma8(float a, mt_v8 b, mt_v8 c)
{
#if defined(__FMA__)
    return (mt_v8)_mm256_fmadd_ps(_mm256_set1_ps(a), (__m256)b, (__m256)c);
#else
    mt_v8 r;
    for (int i = 0; i < 8; i++)
        r[i] = fmaf(a, b[i], c[i]);
    return r;
#endif
}

int64_t mt_attention_scratch_floats(int T, int hs)
{
    int64_t Tp = pad16(T), hp = pad16(hs);
    /* kt, vt (hs x Tp); kp, dk, dv (Tp x hp); p, ds (QB x Tp); q and dy rows (QB x hp) */
    return 2 * (int64_t)hs * Tp + 3 * Tp * hp + 2 * QB * Tp + 2 * QB * hp;
}

/* xt <- the transpose of x's T rows (stride ld) in panels of 16 keys: panel j / 16 holds
 * (hs x 16) floats, element (d, j) at (j / 16) 16 hs + 16 d + j % 16, so the score kernel
 * reads each panel in order; keys past T zero */
static void transpose_in(float *xt, const float *x, int T, int hs, int64_t ld, int64_t Tp)
{
    memset(xt + (int64_t)(T / 16) * 16 * hs, 0, sizeof(float) * (size_t)((Tp - T / 16 * 16) * hs));
    for (int j = 0; j < T; j++)
        for (int d = 0; d < hs; d++)
            xt[(int64_t)(j / 16) * 16 * hs + 16 * d + j % 16] = x[(int64_t)j * ld + d];
}

/* xc <- x's T rows (stride ld) in column panels of 16: panel c / 16 holds (Tp x 16)
 * floats, element (j, c) at (c / 16) 16 Tp + 16 j + c % 16, so the product kernel reads
 * each panel in order; columns past hs and rows past T zero */
static void panel_rows(float *xc, const float *x, int T, int hs, int64_t ld, int64_t Tp, int64_t hp)
{
    memset(xc, 0, sizeof(float) * (size_t)(Tp * hp));
    for (int j = 0; j < T; j++)
        for (int c = 0; c < hs; c++)
            xc[(int64_t)(c / 16) * 16 * Tp + 16 * j + c % 16] = x[(int64_t)j * ld + c];
}

/* xp (rows x hp) <- x's rows (stride ld), each zero-padded from hs to hp */
static void pad_rows(float *xp, const float *x, int rows, int hs, int64_t ld, int64_t hp)
{
    for (int j = 0; j < rows; j++) {
        memcpy(xp + (int64_t)j * hp, x + (int64_t)j * ld, sizeof(float) * (size_t)hs);
        memset(xp + (int64_t)j * hp + hs, 0, sizeof(float) * (size_t)(hp - hs));
    }
}

/* 16 lanes at once: each lane's value is the same whatever the width (elementwise) */
typedef float v16 __attribute__((vector_size(64)));

static inline v16 v16_load(const float *p)
{
    v16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline v16 fma16(float a, v16 b, v16 c)
{
#if defined(__AVX512F__)
    return (v16)_mm512_fmadd_ps(_mm512_set1_ps(a), (__m512)b, (__m512)c);
#else
    mt_v8 lo, hi, blo, bhi, clo, chi;
    memcpy(&blo, &b, 32);
    memcpy(&bhi, (const char *)&b + 32, 32);
    memcpy(&clo, &c, 32);
    memcpy(&chi, (const char *)&c + 32, 32);
    lo = fma8(a, blo, clo);
    hi = fma8(a, bhi, chi);
    v16 r;
    memcpy(&r, &lo, 32);
    memcpy((char *)&r + 32, &hi, 32);
    return r;
#endif
}

/* s[r][j] = scale * sum_d a[r][d] xt[d][j] for QT rows (a: QT x hp) and j < nk (a multiple
 * of 16): four rows by two panels of sixteen keys in registers, d in order */
static void tile_scores(float *s, const float *a, const float *xt, int hs, int64_t hp, int64_t Tp, int nk,
                        float scale)
{
    int j = 0;
    for (; j + 32 <= nk; j += 32) {
        v16 acc[QT][2] = {{{0}}};
        const float *p0 = xt + (int64_t)j * hs, *p1 = p0 + 16 * hs;
        for (int d = 0; d < hs; d++) {
            v16 x0 = v16_load(p0 + 16 * d), x1 = v16_load(p1 + 16 * d);
            for (int r = 0; r < QT; r++) {
                float ar = a[r * hp + d];
                acc[r][0] = fma16(ar, x0, acc[r][0]);
                acc[r][1] = fma16(ar, x1, acc[r][1]);
            }
        }
        for (int r = 0; r < QT; r++) {
            v16 s0 = acc[r][0] * scale, s1 = acc[r][1] * scale;
            memcpy(s + r * Tp + j, &s0, sizeof s0);
            memcpy(s + r * Tp + j + 16, &s1, sizeof s1);
        }
    }
    for (; j < nk; j += 16) {
        v16 acc[QT] = {{0}};
        const float *p0 = xt + (int64_t)j * hs;
        for (int d = 0; d < hs; d++) {
            v16 x0 = v16_load(p0 + 16 * d);
            for (int r = 0; r < QT; r++)
                acc[r] = fma16(a[r * hp + d], x0, acc[r]);
        }
        for (int r = 0; r < QT; r++) {
            v16 s0 = acc[r] * scale;
            memcpy(s + r * Tp + j, &s0, sizeof s0);
        }
    }
}

/* out[r][:] = sum_{j < nk} p[r][j] x[j][:] for QT rows (xc: x in column panels,
 * panel_rows), j in order */
static void tile_product(float *out, const float *p, const float *xc, int64_t hp, int64_t Tp, int nk)
{
    int64_t c = 0;
    for (; c + 32 <= hp; c += 32) {
        v16 acc[QT][2] = {{{0}}};
        const float *p0 = xc + c * Tp, *p1 = p0 + 16 * Tp;
        for (int j = 0; j < nk; j++) {
            v16 x0 = v16_load(p0 + 16 * j), x1 = v16_load(p1 + 16 * j);
            for (int r = 0; r < QT; r++) {
                float pr = p[r * Tp + j];
                acc[r][0] = fma16(pr, x0, acc[r][0]);
                acc[r][1] = fma16(pr, x1, acc[r][1]);
            }
        }
        for (int r = 0; r < QT; r++) {
            memcpy(out + r * hp + c, &acc[r][0], sizeof(v16));
            memcpy(out + r * hp + c + 16, &acc[r][1], sizeof(v16));
        }
    }
    for (; c < hp; c += 16) {
        v16 acc[QT] = {{0}};
        const float *p0 = xc + c * Tp;
        for (int j = 0; j < nk; j++) {
            v16 x0 = v16_load(p0 + 16 * j);
            for (int r = 0; r < QT; r++)
                acc[r] = fma16(p[r * Tp + j], x0, acc[r]);
        }
        for (int r = 0; r < QT; r++)
            memcpy(out + r * hp + c, &acc[r], sizeof(v16));
    }
}

/* acc[j][:] += sum_r p[r][j] xp[r][:] for j < nk (xp: QB rows of hp), r in order */
static void tile_accumulate(float *acc, const float *p, const float *xp, int64_t hp, int64_t Tp, int nk)
{
    for (int j = 0; j < nk; j++) {
        float *row = acc + (int64_t)j * hp;
        for (int64_t c = 0; c < hp; c += 8) {
            mt_v8 t = mt_v8_load(row + c);
            for (int r = 0; r < QB; r++)
                t = fma8(p[r * Tp + j], mt_v8_load(xp + r * hp + c), t);
            mt_v8_store(row + c, t);
        }
    }
}

/* Row t's softmax over s[0..n) in place (exact maximum, exp and sum as 16 fixed lanes),
 * zero from n to end; returns the log-sum-exp. */
static float softmax_row(float *row, int n, int end)
{
    mt_v8 m = {0};
    m += row[0];
    int j = 0;
    for (; j + 8 <= n; j += 8)
        m = mt_v8_max(m, mt_v8_load(row + j));
    float t[8], mx;
    mt_v8_store(t, m);
    mx = t[0];
    for (int k = 1; k < 8; k++)
        mx = t[k] > mx ? t[k] : mx;
    for (; j < n; j++)
        mx = row[j] > mx ? row[j] : mx;
    mt_v8 lo = {0}, hi = {0};
    j = 0;
    for (; j + MT_LANES <= n; j += MT_LANES) {
        mt_v8 a = mt_expf_v8(mt_v8_load(row + j) - mx), b = mt_expf_v8(mt_v8_load(row + j + 8) - mx);
        mt_v8_store(row + j, a);
        mt_v8_store(row + j + 8, b);
        lo += a;
        hi += b;
    }
    for (int k = j; k < n; k++)
        row[k] = mt_expf_inl(row[k] - mx);
    mt_lanes_tail(&lo, &hi, row + j, n - j);
    float sum = mt_lanes_reduce(lo, hi), inv = 1.0f / sum;
    for (j = 0; j + 8 <= n; j += 8)
        mt_v8_store(row + j, mt_v8_load(row + j) * inv);
    for (; j < n; j++)
        row[j] *= inv;
    for (j = n; j < end; j++)
        row[j] = 0.0f;
    return mx + logf(sum);
}

/* the causal tile of query rows [i0, i0 + nr): the keys it needs, rounded up to 16 */
static int tile_keys(int i0, int nr) { return (int)pad16(i0 + nr); }

void mt_attention_forward(float *out, float *lse, float *scratch, const float *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    int64_t Tp = pad16(T), hp = pad16(hs);
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        float *kt = scratch + (int64_t)omp_get_thread_num() * mt_attention_scratch_floats(T, hs);
        float *vp = kt + (int64_t)hs * Tp, *s = vp + Tp * hp, *qt = s + QT * Tp, *yt = qt + QT * hp;
        const float *q = qkv + (int64_t)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
        float *y = out + (int64_t)b * T * C + h * hs, *l = lse + (int64_t)bh * T;
        transpose_in(kt, k, T, hs, C3, Tp);
        panel_rows(vp, v, T, hs, C3, Tp, hp);
        for (int i0 = 0; i0 < T; i0 += QT) {
            int nr = T - i0 < QT ? T - i0 : QT, nk = tile_keys(i0, nr);
            for (int r = 0; r < QT; r++) /* rows past T repeat the last one; their results are dropped */
                pad_rows(qt + r * hp, q + (int64_t)(r < nr ? i0 + r : i0 + nr - 1) * C3, 1, hs, C3, hp);
            tile_scores(s, qt, kt, hs, hp, Tp, nk, scale);
            for (int r = 0; r < QT; r++) {
                float x = softmax_row(s + r * Tp, (r < nr ? i0 + r : i0 + nr - 1) + 1, nk);
                if (r < nr)
                    l[i0 + r] = x;
            }
            tile_product(yt, s, vp, hp, Tp, nk);
            for (int r = 0; r < nr; r++)
                memcpy(y + (int64_t)(i0 + r) * C, yt + r * hp, sizeof(float) * (size_t)hs);
        }
    }
}

void mt_attention_backward(float *dqkv, float *scratch, const float *dout, const float *out, const float *qkv,
                           const float *lse, int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    int64_t Tp = pad16(T), hp = pad16(hs);
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        float *kt = scratch + (int64_t)omp_get_thread_num() * mt_attention_scratch_floats(T, hs);
        float *vt = kt + (int64_t)hs * Tp, *kp = vt + (int64_t)hs * Tp, *dk = kp + Tp * hp, *dv = dk + Tp * hp;
        float *p = dv + Tp * hp, *ds = p + QB * Tp, *qt = ds + QB * Tp, *dyt = qt + QB * hp;
        const float *q = qkv + (int64_t)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
        const float *y = out + (int64_t)b * T * C + h * hs, *dy = dout + (int64_t)b * T * C + h * hs;
        const float *l = lse + (int64_t)bh * T;
        float *dq = dqkv + (int64_t)b * T * C3 + h * hs, *dkk = dq + C, *dvv = dq + 2 * C;
        transpose_in(kt, k, T, hs, C3, Tp);
        transpose_in(vt, v, T, hs, C3, Tp);
        panel_rows(kp, k, T, hs, C3, Tp, hp);
        memset(dk, 0, sizeof(float) * (size_t)(2 * Tp * hp));
        for (int i0 = 0; i0 < T; i0 += QB) {
            int nr = T - i0 < QB ? T - i0 : QB, nk = tile_keys(i0, nr);
            for (int r = 0; r < QB; r++) { /* rows past T repeat the last one and take no part */
                int i = r < nr ? i0 + r : i0 + nr - 1;
                pad_rows(qt + r * hp, q + (int64_t)i * C3, 1, hs, C3, hp);
                pad_rows(dyt + r * hp, dy + (int64_t)i * C, 1, hs, C, hp);
            }
            for (int t = 0; t < QB; t += QT) {
                tile_scores(p + t * Tp, qt + t * hp, kt, hs, hp, Tp, nk, scale);
                tile_scores(ds + t * Tp, dyt + t * hp, vt, hs, hp, Tp, nk, 1.0f); /* dp = dy @ v^T */
            }
            for (int r = 0; r < QB; r++) {
                float *pr = p + r * Tp, *dr = ds + r * Tp;
                int n = r < nr ? i0 + r + 1 : 0;
                float D = 0.0f, li = r < nr ? l[i0 + r] : 0.0f;
                for (int d = 0; d < hs && r < nr; d++)
                    D += dy[(int64_t)(i0 + r) * C + d] * y[(int64_t)(i0 + r) * C + d];
                int j = 0;
                for (; j + 8 <= n; j += 8) {
                    mt_v8 pv = mt_expf_v8(mt_v8_load(pr + j) - li);
                    mt_v8_store(pr + j, pv);
                    mt_v8_store(dr + j, pv * (mt_v8_load(dr + j) - D));
                }
                for (; j < n; j++) {
                    pr[j] = mt_expf_inl(pr[j] - li);
                    dr[j] = pr[j] * (dr[j] - D);
                }
                for (; j < nk; j++)
                    pr[j] = dr[j] = 0.0f;
            }
            tile_accumulate(dv, p, dyt, hp, Tp, nk);
            tile_accumulate(dk, ds, qt, hp, Tp, nk);
            for (int t = 0; t < QB && t < nr; t += QT) { /* dq (unscaled) of each tile, into its dy rows */
                tile_product(dyt + t * hp, ds + t * Tp, kp, hp, Tp, nk);
                for (int r = t; r < t + QT && r < nr; r++)
                    for (int d = 0; d < hs; d++)
                        dq[(int64_t)(i0 + r) * C3 + d] = scale * dyt[r * hp + d];
            }
        }
        for (int j = 0; j < T; j++)
            for (int d = 0; d < hs; d++) {
                dkk[(int64_t)j * C3 + d] = scale * dk[(int64_t)j * hp + d];
                dvv[(int64_t)j * C3 + d] = dv[(int64_t)j * hp + d];
            }
    }
}
