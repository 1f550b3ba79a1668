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
 * Backward, per pair, in FlashAttention-2's order: key blocks of 16 outside, the query rows
 * that see a block inside, RB rows at a time.  The rows' probabilities are recomputed as
 * exp(s - lse); with D = rowsum(dy * y): dp = dy v^T, ds = p (dp - D); the block's
 * dv += p^T dy and dk += scale ds^T q stay in L1 (16 keys x hs) and are summed over the rows
 * in order; dq += scale ds k is summed over the blocks in order in the thread's scratch. */
#include "mt_kernels.h"

#include "mathinl.h"

#include <math.h>
#include <omp.h>
#include <string.h>
#if defined(__FMA__)
#include <immintrin.h>
#endif

#define QT 4  /* query rows per tile */
/* Backward rows per step of the key-block loop: every result's bits are the same for any
 * RB (each sum runs over rows, keys or d in one fixed order), so it is sized to the
 * registers: 2 RB score vectors and 2 RB probability vectors live at once. */
#if defined(__AVX512F__)
#define RB 8
#else
#define RB 4
#endif

static int64_t pad16(int64_t n) { return (n + 15) / 16 * 16; }

/* the backward's row buffers: whole steps of 8 >= RB rows from the last key block's start */
static int64_t rows_padded(int T) { return (T + 7) / 8 * 8 + 16; }

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
    int64_t Tr = rows_padded(T);
    /* backward: kt, vt, kp (Tp x hp); q, dy, dq rows (Tr x hp); a block's dk, dv (2 x 16 x hp);
     * D (Tp); ds rows (8 x 16).  The forward's share (kt, v panels, a tile) is smaller.  The
     * same on every machine (RB <= 8), so the memory plan does not depend on the ISA. */
    return 3 * Tp * hp + 3 * Tr * hp + 32 * hp + Tp + 8 * 16;
}

/* xt <- the transpose of x's T rows (stride ld) in panels of 16 keys: panel j / 16 holds
 * (hw x 16) floats, element (d, j) at (j / 16) 16 hw + 16 d + j % 16, so the score kernels
 * read each panel in order; keys past T and d past hs zero */
static void transpose_in(float *xt, const float *x, int T, int hs, int64_t hw, int64_t ld, int64_t Tp)
{
    memset(xt, 0, sizeof(float) * (size_t)(Tp * hw));
    for (int j = 0; j < T; j++)
        for (int d = 0; d < hs; d++)
            xt[(int64_t)(j / 16) * 16 * hw + 16 * d + j % 16] = x[(int64_t)j * ld + d];
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
        transpose_in(kt, k, T, hs, hs, C3, Tp);
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

/* exp of 16 lanes, each lane as mt_expf_v8 gives it */
static inline v16 exp16(v16 x)
{
    mt_v8 lo, hi;
    memcpy(&lo, &x, 32);
    memcpy(&hi, (const char *)&x + 32, 32);
    lo = mt_expf_v8(lo);
    hi = mt_expf_v8(hi);
    memcpy(&x, &lo, 32);
    memcpy((char *)&x + 32, &hi, 32);
    return x;
}

/* One key block (16 keys from j0, panels kt and vt: hp x 16) against RB query rows from i:
 * s = scale q k^T, p = exp(s - lse) (zero where the key is past the row or the row past T),
 * dp = dy v^T, ds = p (dp - D); then dvt[d] += dy[r][d] p[r] and dkt[d] += q[r][d] ds[r]
 * over the rows in order, and dq[r][:] += sum_j ds[r][j] k[j][:] over the keys in order. */
static void bwd_rows(float *dvt, float *dkt, float *dq, float *dsb, const float *qp, const float *dyp,
                     const float *kt, const float *vt, const float *kp, const float *lse, const float *D,
                     int i, int j0, int T, int64_t hp, float scale)
{
    v16 s[RB] = {{0}}, dp[RB] = {{0}};
    const float *q = qp + (int64_t)i * hp, *dy = dyp + (int64_t)i * hp;
    for (int64_t d = 0; d < hp; d++) {
        v16 kd = v16_load(kt + 16 * d), vd = v16_load(vt + 16 * d);
        for (int r = 0; r < RB; r++) {
            s[r] = fma16(q[r * hp + d], kd, s[r]);
            dp[r] = fma16(dy[r * hp + d], vd, dp[r]);
        }
    }
    for (int r = 0; r < RB; r++) {
        int row = i + r;
        if (row >= T) {
            s[r] = (v16){0};
            dp[r] = (v16){0};
            continue;
        }
        v16 p = exp16(s[r] * scale - lse[row]);
        if (row < j0 + 15) /* the diagonal block: keys past the row take no part */
            for (int j = row - j0 + 1; j < 16; j++)
                p[j] = 0.0f;
        dp[r] = p * (dp[r] - D[row]);
        s[r] = p;
    }
    for (int64_t d = 0; d < hp; d++) {
        v16 dv = v16_load(dvt + 16 * d), dk = v16_load(dkt + 16 * d);
        for (int r = 0; r < RB; r++) {
            dv = fma16(dy[r * hp + d], s[r], dv);
            dk = fma16(q[r * hp + d], dp[r], dk);
        }
        memcpy(dvt + 16 * d, &dv, sizeof dv);
        memcpy(dkt + 16 * d, &dk, sizeof dk);
    }
    memcpy(dsb, dp, sizeof dp);
    float *dqi = dq + (int64_t)i * hp;
    for (int64_t c = 0; c < hp; c += 16) {
        v16 acc[RB];
        for (int r = 0; r < RB; r++)
            acc[r] = v16_load(dqi + r * hp + c);
        for (int j = 0; j < 16; j++) {
            v16 kj = v16_load(kp + (int64_t)(j0 + j) * hp + c);
            for (int r = 0; r < RB; r++)
                acc[r] = fma16(dsb[r * 16 + j], kj, acc[r]);
        }
        for (int r = 0; r < RB; r++)
            memcpy(dqi + r * hp + c, &acc[r], sizeof(v16));
    }
}

/* Backward, per (batch, head), FlashAttention-2's order: key blocks of 16 outside, the
 * query rows that see them inside; a block's dk and dv stay in L1 until its rows are done,
 * dq is summed over the blocks in order. */
void mt_attention_backward(float *dqkv, float *scratch, const float *dout, const float *out, const float *qkv,
                           const float *lse, int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    int64_t Tp = pad16(T), hp = pad16(hs), Tr = rows_padded(T);
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        float *kt = scratch + (int64_t)omp_get_thread_num() * mt_attention_scratch_floats(T, hs);
        float *vt = kt + Tp * hp, *kp = vt + Tp * hp, *qp = kp + Tp * hp, *dyp = qp + Tr * hp;
        float *dq = dyp + Tr * hp, *dkt = dq + Tr * hp, *dvt = dkt + 16 * hp, *D = dvt + 16 * hp;
        float *dsb = D + Tp;
        const float *q = qkv + (int64_t)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
        const float *y = out + (int64_t)b * T * C + h * hs, *dy = dout + (int64_t)b * T * C + h * hs;
        const float *l = lse + (int64_t)bh * T;
        float *dqo = dqkv + (int64_t)b * T * C3 + h * hs, *dko = dqo + C, *dvo = dqo + 2 * C;
        transpose_in(kt, k, T, hs, hp, C3, Tp);
        transpose_in(vt, v, T, hs, hp, C3, Tp);
        memset(kp, 0, sizeof(float) * (size_t)(Tp * hp));
        pad_rows(kp, k, T, hs, C3, hp);
        memset(qp, 0, sizeof(float) * (size_t)(3 * Tr * hp));
        pad_rows(qp, q, T, hs, C3, hp);
        pad_rows(dyp, dy, T, hs, C, hp);
        for (int t = 0; t < T; t++) {
            float x = 0.0f;
            for (int d = 0; d < hs; d++)
                x += dy[(int64_t)t * C + d] * y[(int64_t)t * C + d];
            D[t] = x;
        }
        for (int j0 = 0; j0 < T; j0 += 16) {
            memset(dkt, 0, sizeof(float) * (size_t)(32 * hp));
            for (int i = j0; i < T; i += RB)
                bwd_rows(dvt, dkt, dq, dsb, qp, dyp, kt + j0 * hp, vt + j0 * hp, kp, l, D, i, j0, T, hp, scale);
            for (int j = j0; j < j0 + 16 && j < T; j++)
                for (int d = 0; d < hs; d++) {
                    dko[(int64_t)j * C3 + d] = scale * dkt[16 * d + j - j0];
                    dvo[(int64_t)j * C3 + d] = dvt[16 * d + j - j0];
                }
        }
        for (int t = 0; t < T; t++)
            for (int d = 0; d < hs; d++)
                dqo[(int64_t)t * C3 + d] = scale * dq[(int64_t)t * hp + d];
    }
}
