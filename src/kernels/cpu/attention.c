/* attention.c - causal multi-head self-attention, fused: the (B, NH, T, T) probabilities
 * are never stored.
 *
 * qkv (B,T,3C): row (b,t) holds q | k | v, each C wide; head h owns columns
 * [h*hs, (h+1)*hs) of each part (hs = C/NH).  One (batch, head) pair is one task of the
 * parallel loop, computed by one thread from start to end in a fixed order, so the bits do
 * not depend on the number of threads; nor on the instruction set: the vector code works on
 * 16 lanes (one AVX-512 register, or a pair of 8-lane GCC vectors elsewhere) with
 * contraction off and IEEE fused multiply-adds, the same operations on every machine
 * (test_attention_isa).
 *
 * Forward, per pair: K is transposed once into the thread's scratch, then query rows go in
 * tiles of QT; a tile's scores against its whole causal row of keys (QT x T floats, in L1
 * for the sizes here) are computed by a register-blocked kernel, each row's softmax is
 * exact (its maximum, then the sum of exp as 16 fixed lanes) and left unnormalised, and
 * y = (p @ v) / sum.  Only each
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

/* Forward query rows per tile and backward rows per step of the key-block loop.  No
 * result's bits depend on them (every sum runs over d, keys or rows in one fixed order), so
 * they are sized to the registers: 2 QT (AVX-512) or QT (elsewhere) accumulators of 16 lanes
 * in the forward, 4 RB vectors in the backward (32 registers with AVX-512, 16 half-size
 * ones with AVX2). */
#if defined(__AVX512F__)
#define QT 8
#define RB 8
#define PANELS2 1 /* the forward's products take two 16-wide panels at once */
#else
#define QT 4
#define RB 4
#define PANELS2 0 /* one panel (2 x 8 lanes): two would spill AVX2's 16 registers (measured 1.45x slower) */
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

/* xc <- x's T rows (stride ld) in column panels of 16: panel c / 16 holds (Tp x 16)
 * floats, element (j, c) at (c / 16) 16 Tp + 16 j + c % 16, so the product kernel reads
 * each panel in order; columns past hs and rows past T zero */
static void panel_rows(float *xc, const float *x, int T, int hs, int64_t ld, int64_t Tp, int64_t hp)
{
    memset(xc, 0, sizeof(float) * (size_t)(Tp * hp));
    int hb = hs / 16 * 16;
    for (int j = 0; j < T; j++) {
        for (int c = 0; c < hb; c += 16)
            memcpy(xc + (int64_t)c * Tp + 16 * j, x + (int64_t)j * ld + c, 16 * sizeof(float));
        for (int c = hb; c < hs; c++)
            xc[(int64_t)(c / 16) * 16 * Tp + 16 * j + c % 16] = x[(int64_t)j * ld + c];
    }
}

/* xp (rows x hp) <- x's rows (stride ld), each zero-padded from hs to hp */
static void pad_rows(float *xp, const float *x, int rows, int hs, int64_t ld, int64_t hp)
{
    for (int j = 0; j < rows; j++) {
        memcpy(xp + (int64_t)j * hp, x + (int64_t)j * ld, sizeof(float) * (size_t)hs);
        memset(xp + (int64_t)j * hp + hs, 0, sizeof(float) * (size_t)(hp - hs));
    }
}

/* 16 lanes at once.  Every operation is elementwise (or IEEE fma), so each lane's value is
 * the same whatever the vector width: one AVX-512 register, or two 8-lane halves elsewhere
 * (a 64-byte GCC vector would live on the stack there: measured 5-10x slower). */
#if defined(__AVX512F__)
typedef float v16 __attribute__((vector_size(64)));
static inline v16 v16_load(const float *p) { return (v16)_mm512_loadu_ps(p); }
static inline void v16_store(float *p, v16 v) { _mm512_storeu_ps(p, (__m512)v); }
static inline v16 v16_set(float a) { return (v16)_mm512_set1_ps(a); }
static inline v16 v16_add(v16 a, v16 b) { return a + b; }
static inline v16 v16_mul(v16 a, v16 b) { return a * b; }
static inline v16 v16_mulf(v16 a, float b) { return a * b; }
static inline v16 v16_subf(v16 a, float b) { return a - b; }
static inline v16 fma16(float a, v16 b, v16 c)
{
    return (v16)_mm512_fmadd_ps(_mm512_set1_ps(a), (__m512)b, (__m512)c);
}
typedef int32_t vi16 __attribute__((vector_size(64)));
static inline v16 max16(v16 a, v16 b)
{
    vi16 m = a > b;
    return (v16)((m & (vi16)a) | (~m & (vi16)b));
}
/* mt_expf_inl's operations on 16 lanes (mathinl.h): each lane gets its bits */
MT_DEFINE_EXPF_VEC(exp16, v16, vi16, max16)
/* the backward's key vector: the whole 16-key block */
#define BW 16
typedef v16 bv;
#define bv_load v16_load
#define bv_store v16_store
#define bv_fma fma16
#define bv_exp exp16
static inline float v16_reduce(v16 v)
{
    mt_v8 lo, hi;
    memcpy(&lo, &v, 32);
    memcpy(&hi, (const char *)&v + 32, 32);
    return mt_lanes_reduce(lo, hi);
}
#if defined(__clang__) /* __builtin_shuffle is GCC's; clang builds (the fuzz targets) copy element-wise */
#define TRANSPOSE16 0
#else
#define TRANSPOSE16 1
#endif
#else
typedef struct {
    mt_v8 lo, hi;
} v16;
static inline v16 v16_load(const float *p) { return (v16){mt_v8_load(p), mt_v8_load(p + 8)}; }
static inline void v16_store(float *p, v16 v)
{
    mt_v8_store(p, v.lo);
    mt_v8_store(p + 8, v.hi);
}
static inline v16 v16_set(float a)
{
    mt_v8 z = {0};
    return (v16){z + a, z + a};
}
static inline v16 v16_add(v16 a, v16 b) { return (v16){a.lo + b.lo, a.hi + b.hi}; }
static inline v16 v16_mul(v16 a, v16 b) { return (v16){a.lo * b.lo, a.hi * b.hi}; }
static inline v16 v16_mulf(v16 a, float b) { return (v16){a.lo * b, a.hi * b}; }
static inline v16 v16_subf(v16 a, float b) { return (v16){a.lo - b, a.hi - b}; }
static inline v16 fma16(float a, v16 b, v16 c) { return (v16){fma8(a, b.lo, c.lo), fma8(a, b.hi, c.hi)}; }
static inline v16 max16(v16 a, v16 b) { return (v16){mt_v8_max(a.lo, b.lo), mt_v8_max(a.hi, b.hi)}; }
static inline v16 exp16(v16 x) { return (v16){mt_expf_v8(x.lo), mt_expf_v8(x.hi)}; }
static inline float v16_reduce(v16 v) { return mt_lanes_reduce(v.lo, v.hi); }
#define TRANSPOSE16 0
/* the backward's key vector: half a 16-key block */
#define BW 8
typedef mt_v8 bv;
#define bv_load mt_v8_load
#define bv_store mt_v8_store
#define bv_fma fma8
#define bv_exp mt_expf_v8
#endif

static inline v16 v16_zero(void) { return v16_set(0.0f); }

/* v with lanes k..15 set to zero */
static inline v16 v16_keep(v16 v, int k)
{
    float t[16];
    v16_store(t, v);
    for (int l = k < 0 ? 0 : k; l < 16; l++)
        t[l] = 0.0f;
    return v16_load(t);
}

#if TRANSPOSE16
/* v[i][l] <- v[l][i]: round b swaps bit b of the row with bit b of the lane */
static inline void transpose16(v16 *v)
{
    static const vi16 lo8 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
                      hi8 = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31},
                      lo4 = {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
                      hi4 = {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31},
                      lo2 = {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
                      hi2 = {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31},
                      lo1 = {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
                      hi1 = {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31};
    const vi16 *lo[4] = {&lo8, &lo4, &lo2, &lo1}, *hi[4] = {&hi8, &hi4, &hi2, &hi1};
    for (int r = 0, b = 8; r < 4; r++, b /= 2)
        for (int i = 0; i < 16; i++)
            if (!(i & b)) {
                v16 a = v[i], c = v[i + b];
                v[i] = __builtin_shuffle(a, c, *lo[r]);
                v[i + b] = __builtin_shuffle(a, c, *hi[r]);
            }
}
#endif

/* xt <- the transpose of x's T rows (stride ld) in panels of 16 keys: panel j / 16 holds
 * (hw x 16) floats, element (d, j) at (j / 16) 16 hw + 16 d + j % 16, so the score kernels
 * read each panel in order; keys past T and d past hs zero.  Whole 16 x 16 blocks are
 * transposed in registers with AVX-512 (four rounds of shuffles; element by element this
 * copy took 10% of the kernel, measured), the edges and other machines element by element. */
static void transpose_in(float *xt, const float *x, int T, int hs, int64_t hw, int64_t ld, int64_t Tp)
{
    if (T < Tp || hs < hw) /* keys past T or d past hs: zero (the copies below set the rest) */
        memset(xt, 0, sizeof(float) * (size_t)(Tp * hw));
    int Tb = TRANSPOSE16 ? T / 16 * 16 : 0, hb = hs / 16 * 16;
#if TRANSPOSE16
    for (int j0 = 0; j0 < Tb; j0 += 16)
        for (int d0 = 0; d0 < hb; d0 += 16) {
            v16 v[16];
            for (int i = 0; i < 16; i++)
                v[i] = v16_load(x + (int64_t)(j0 + i) * ld + d0);
            transpose16(v);
            for (int i = 0; i < 16; i++)
                v16_store(xt + (int64_t)j0 * hw + 16 * (d0 + i), v[i]);
        }
#endif
    for (int j = 0; j < T; j++)
        for (int d = j < Tb ? hb : 0; d < hs; d++)
            xt[(int64_t)(j / 16) * 16 * hw + 16 * d + j % 16] = x[(int64_t)j * ld + d];
}

/* out[r][c] = scale * sum_{k < K} a[r][k] x[k][c] for QT rows (a, out: row strides lda,
 * ldo) and c < nc (a multiple of 16).  x is in panels of 16 columns: panel c / 16 starts at
 * x + (c / 16) ps, element (k, c) at 16 k + c % 16.  QT rows by two panels (one off
 * AVX-512) in registers, k in order.  The forward's scores (a: q, x: K transposed) and its
 * product with V (a: the probabilities, x: V in panels, scale 1: exact). */
static void panel_product(float *out, int64_t ldo, const float *a, int64_t lda, int K, const float *x,
                          int64_t ps, int64_t nc, float scale)
{
    int64_t c = 0;
    for (; PANELS2 && c + 32 <= nc; c += 32) {
        v16 acc[QT][2];
        for (int r = 0; r < QT; r++)
            acc[r][0] = acc[r][1] = v16_zero();
        const float *p0 = x + c / 16 * ps, *p1 = p0 + ps;
        for (int k = 0; k < K; k++) {
            v16 x0 = v16_load(p0 + 16 * k), x1 = v16_load(p1 + 16 * k);
            for (int r = 0; r < QT; r++) {
                float ar = a[r * lda + k];
                acc[r][0] = fma16(ar, x0, acc[r][0]);
                acc[r][1] = fma16(ar, x1, acc[r][1]);
            }
        }
        for (int r = 0; r < QT; r++) {
            v16_store(out + r * ldo + c, v16_mulf(acc[r][0], scale));
            v16_store(out + r * ldo + c + 16, v16_mulf(acc[r][1], scale));
        }
    }
    for (; c < nc; c += 16) {
        v16 acc[QT];
        for (int r = 0; r < QT; r++)
            acc[r] = v16_zero();
        const float *p0 = x + c / 16 * ps;
        for (int k = 0; k < K; k++) {
            v16 x0 = v16_load(p0 + 16 * k);
            for (int r = 0; r < QT; r++)
                acc[r] = fma16(a[r * lda + k], x0, acc[r]);
        }
        for (int r = 0; r < QT; r++)
            v16_store(out + r * ldo + c, v16_mulf(acc[r], scale));
    }
}

/* Row t's softmax over s[0..n), left unnormalised: row[j] = exp(s_j - max) for j < n, zero
 * from n to end (a multiple of 16); *inv = 1 / sum (the sum in 16 fixed lanes, combined by
 * mt_lanes_reduce); returns the log-sum-exp.  The product is scaled by *inv afterwards:
 * hs multiplies a row instead of n. */
static float softmax_row(float *row, int n, int end, float *inv)
{
    v16 m = v16_set(row[0]);
    int j = 0;
    for (; j + 16 <= n; j += 16)
        m = max16(m, v16_load(row + j));
    float t[16], mx;
    v16_store(t, m);
    mx = t[0];
    for (int k = 1; k < 16; k++)
        mx = t[k] > mx ? t[k] : mx;
    for (; j < n; j++)
        mx = row[j] > mx ? row[j] : mx;
    v16 sum = v16_zero();
    for (j = 0; j < end; j += 16) { /* keys from n on are masked to zero (exp clamps at e^-87) */
        v16 e = exp16(v16_subf(v16_load(row + j), mx));
        if (j + 16 > n)
            e = v16_keep(e, n - j);
        v16_store(row + j, e);
        sum = v16_add(sum, e);
    }
    float total = v16_reduce(sum);
    *inv = 1.0f / total;
    return mx + logf(total);
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
            panel_product(s, Tp, qt, hp, hs, kt, 16 * hs, nk, scale);
            float inv[QT];
            for (int r = 0; r < QT; r++) {
                float x = softmax_row(s + r * Tp, (r < nr ? i0 + r : i0 + nr - 1) + 1, nk, &inv[r]);
                if (r < nr)
                    l[i0 + r] = x;
            }
            panel_product(yt, hp, s, Tp, nk, vp, 16 * Tp, hp, 1.0f);
            for (int r = 0; r < nr; r++)
                for (int d = 0; d < hs; d++)
                    y[(int64_t)(i0 + r) * C + d] = yt[r * hp + d] * inv[r];
        }
    }
}

/* sum_d a[d] b[d] over d < hs: lane l adds d = l, l + 16, ... in order (the tail goes to
 * lanes 0, 1, ...), then mt_lanes_reduce's tree */
static float dot16(const float *a, const float *b, int hs)
{
    v16 acc = v16_zero();
    int d = 0;
    for (; d + 16 <= hs; d += 16)
        acc = v16_add(acc, v16_mul(v16_load(a + d), v16_load(b + d)));
    float ta[16] = {0}, tb[16] = {0}; /* the tail, zero-padded: lanes past it add 0 * 0 */
    memcpy(ta, a + d, sizeof(float) * (size_t)(hs - d));
    memcpy(tb, b + d, sizeof(float) * (size_t)(hs - d));
    acc = v16_add(acc, v16_mul(v16_load(ta), v16_load(tb)));
    return v16_reduce(acc);
}

/* xp <- rows [0, T) of x (stride ld) in blocks of RB rows, each (hp x RB): row t's
 * element d at (t / RB) RB hp + d RB + t % RB; zero past T (up to Tr rows) and past hs.
 * With AVX-512, 16 rows x 16 columns at a time through the register transpose. */
static void pack_rows(float *xp, const float *x, int T, int hs, int64_t ld, int64_t hp, int64_t Tr)
{
    int64_t from = hs < hp ? 0 : (int64_t)(T / RB) * RB * hp;
    memset(xp + from, 0, sizeof(float) * (size_t)(Tr * hp - from));
    int t0 = 0;
#if TRANSPOSE16 && RB == 8
    for (; t0 + 16 <= T; t0 += 16)
        for (int d0 = 0; d0 + 16 <= hs; d0 += 16) {
            v16 v[16];
            for (int i = 0; i < 16; i++)
                v[i] = v16_load(x + (int64_t)(t0 + i) * ld + d0);
            transpose16(v); /* v[i]: column d0 + i of rows t0..t0+15 */
            float *b0 = xp + (int64_t)t0 * hp + d0 * RB, *b1 = b0 + RB * hp;
            for (int i = 0; i < 16; i++) {
                _mm256_storeu_ps(b0 + i * RB, _mm512_castps512_ps256((__m512)v[i]));
                _mm256_storeu_ps(b1 + i * RB, _mm256_castpd_ps(_mm512_extractf64x4_pd((__m512d)v[i], 1)));
            }
        }
    int db = hs / 16 * 16; /* columns the transposes did not cover, rows t < t0 */
    for (int t = 0; t < t0; t++)
        for (int d = db; d < hs; d++)
            xp[(int64_t)(t / RB) * RB * hp + d * RB + t % RB] = x[(int64_t)t * ld + d];
#endif
    for (int t = t0; t < T; t++)
        for (int d = 0; d < hs; d++)
            xp[(int64_t)(t / RB) * RB * hp + d * RB + t % RB] = x[(int64_t)t * ld + d];
}

/* keys [j0, j0 + 16) of the block panel xt (hp x 16) into rows of out (stride ld), times
 * scale; keys past T skipped */
static void unpanel(float *out, const float *xt, int j0, int T, int hs, int64_t ld, float scale)
{
    int d0 = 0;
#if TRANSPOSE16
    if (j0 + 16 <= T)
        for (; d0 + 16 <= hs; d0 += 16) {
            v16 v[16];
            for (int i = 0; i < 16; i++)
                v[i] = v16_load(xt + 16 * (d0 + i));
            transpose16(v); /* v[i]: key j0 + i, columns d0..d0+15 */
            for (int i = 0; i < 16; i++)
                v16_store(out + (int64_t)(j0 + i) * ld + d0, v16_mulf(v[i], scale));
        }
#endif
    for (int j = j0; j < j0 + 16 && j < T; j++)
        for (int d = d0; d < hs; d++)
            out[(int64_t)j * ld + d] = scale * xt[16 * d + j - j0];
}

/* One key block (16 keys from j0, panels kt and vt: hp x 16) against RB query rows from i:
 * s = scale q k^T, p = exp(s - lse) (zero where the key is past the row or the row past T),
 * dp = dy v^T, ds = p (dp - D); then dvt[d] += dy[r][d] p[r] and dkt[d] += q[r][d] ds[r]
 * over the rows in order, and dq[r][:] += sum_j ds[r][j] k[j][:] over the keys in order. */
static void bwd_rows(float *dvt, float *dkt, float *dq, float *dsb, const float *qp, const float *dyp,
                     const float *kt, const float *vt, const float *kp, const float *lse, const float *D,
                     int i, int j0, int T, int64_t hp, float scale)
{
    const float *q = qp + (int64_t)i * hp, *dy = dyp + (int64_t)i * hp; /* (hp x RB): q[d RB + r] */
    /* BW keys at a time: the whole block in one AVX-512 register; elsewhere each half in
     * turn, since 16 lanes of s and dp for RB rows would take all 16 AVX2 registers and
     * spill (an AVX2 build on an AVX-512 machine: 1.13-1.15x slower at T 256 and 1024) */
    for (int h = 0; h < 16; h += BW) {
        bv s[RB], dp[RB], zero = {0};
        for (int r = 0; r < RB; r++)
            s[r] = dp[r] = zero;
        for (int64_t d = 0; d < hp; d++) {
            bv kd = bv_load(kt + 16 * d + h), vd = bv_load(vt + 16 * d + h);
            for (int r = 0; r < RB; r++) {
                s[r] = bv_fma(q[d * RB + r], kd, s[r]);
                dp[r] = bv_fma(dy[d * RB + r], vd, dp[r]);
            }
        }
        for (int r = 0; r < RB; r++) {
            int row = i + r;
            if (row >= T) {
                s[r] = dp[r] = zero;
                continue;
            }
            bv p = bv_exp(s[r] * scale - lse[row]);
            if (row < j0 + h + BW - 1) { /* keys past the row take no part */
                float t[BW];
                bv_store(t, p);
                for (int l = row - j0 - h + 1 < 0 ? 0 : row - j0 - h + 1; l < BW; l++)
                    t[l] = 0.0f;
                p = bv_load(t);
            }
            dp[r] = p * (dp[r] - D[row]);
            s[r] = p;
        }
        for (int64_t d = 0; d < hp; d++) {
            bv dv = bv_load(dvt + 16 * d + h), dk = bv_load(dkt + 16 * d + h);
            for (int r = 0; r < RB; r++) {
                dv = bv_fma(dy[d * RB + r], s[r], dv);
                dk = bv_fma(q[d * RB + r], dp[r], dk);
            }
            bv_store(dvt + 16 * d + h, dv);
            bv_store(dkt + 16 * d + h, dk);
        }
        for (int r = 0; r < RB; r++)
            bv_store(dsb + 16 * r + h, dp[r]);
    }
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
            v16_store(dqi + r * hp + c, acc[r]);
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
        memset(kp + (int64_t)T * hp, 0, sizeof(float) * (size_t)((Tp - T) * hp));
        pad_rows(kp, k, T, hs, C3, hp);
        memset(dq, 0, sizeof(float) * (size_t)(Tr * hp));
        pack_rows(qp, q, T, hs, C3, hp, Tr);
        pack_rows(dyp, dy, T, hs, C, hp, Tr);
        for (int t = 0; t < T; t++) /* D = rowsum(dy * y) in 16 lanes, combined in a fixed tree */
            D[t] = dot16(dy + (int64_t)t * C, y + (int64_t)t * C, hs);
        for (int j0 = 0; j0 < T; j0 += 16) {
            memset(dkt, 0, sizeof(float) * (size_t)(32 * hp));
            for (int i = j0; i < T; i += RB)
                bwd_rows(dvt, dkt, dq, dsb, qp, dyp, kt + j0 * hp, vt + j0 * hp, kp, l, D, i, j0, T, hp, scale);
            unpanel(dko, dkt, j0, T, hs, C3, scale);
            unpanel(dvo, dvt, j0, T, hs, C3, 1.0f);
        }
        for (int t = 0; t < T; t++)
            for (int d = 0; d < hs; d++)
                dqo[(int64_t)t * C3 + d] = scale * dq[(int64_t)t * hp + d];
    }
}
