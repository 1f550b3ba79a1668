/* mathinl.h - inline math for the kernels and the code that must match their bits (the
 * vocabulary-parallel loss, the gradient norm): exp, fixed-order sums in 16 lanes.
 * Build with -fno-trapping-math so that GCC if-converts the clamps. */
#ifndef MT_MATHINL_H
#define MT_MATHINL_H

#include <stdint.h>
#include <string.h>

/* exp(x), relative error below 3e-7 on [-87, 80]: x = n ln2 + r (Cody-Waite split of ln2),
 * exp(r) by its degree-6 Taylor polynomial, 2^n from the exponent bits.  Inputs are clamped
 * to [-87, 80]: the upper bound keeps y / (1 + exp(x)) clear of subnormal results, which
 * cost a microcode assist each (measured: GELU 5x slower when its if-converted clamp branch
 * produced them). */
static inline float mt_expf_inl(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 80.0f ? 80.0f : x;
    /* round to nearest by adding and removing 1.5 * 2^23 (|x log2 e| < 2^22 here) */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    /* a NaN x gives a NaN p whatever the scale; 0 keeps the conversion defined */
    int32_t k = n == n ? (int32_t)n : 0;
    uint32_t bits = (uint32_t)(k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* Fixed-order sums.  A sum over n elements runs in 16 lanes: lane j adds elements
 * j, j+16, j+32, ... of the main part in order, then the n % 16 tail elements go to lanes
 * 0, 1, ...; the lanes are combined in a fixed tree (j += j+8, then j += j+4, j+2, j+1).
 * The lanes are two 8-wide GCC vectors, so the order is the same with or without SIMD
 * hardware, and compilers keep them in registers. */
#define MT_LANES 16

typedef float mt_v8 __attribute__((vector_size(32)));

static inline mt_v8 mt_v8_load(const float *p)
{
    mt_v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void mt_v8_store(float *p, mt_v8 v) { memcpy(p, &v, sizeof v); }

typedef int32_t mt_i8 __attribute__((vector_size(32)));

/* lane-wise max (exact, so the order of a max reduction never matters) */
static inline mt_v8 mt_v8_max(mt_v8 a, mt_v8 b)
{
    mt_i8 m = a > b;
    return (mt_v8)((m & (mt_i8)a) | (~m & (mt_i8)b));
}

/* Defines `static inline V name(V x)`: mt_expf_inl's operations on every lane of the GCC
 * vector type V (I: the int vector of its width, MAX: its lane-wise max), so each lane gets
 * mt_expf_inl's bits whatever the width. */
#define MT_DEFINE_EXPF_VEC(name, V, I, MAX)                                                              \
    static inline V name(V x)                                                                            \
    {                                                                                                    \
        V zero = {0}, lo = zero - 87.0f, hi = zero + 80.0f;                                              \
        x = MAX(x, lo);                                                                                  \
        x = -MAX(-x, -hi);                                                                               \
        V n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;                                    \
        V r = x - n * 0.693359375f + n * 2.12194440e-4f;                                                 \
        V p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720)))))); \
        I bits = (__builtin_convertvector(n, I) + 127) << 23;                                            \
        return p * (V)bits;                                                                              \
    }

/* mt_expf_inl on 8 lanes */
MT_DEFINE_EXPF_VEC(mt_expf_v8, mt_v8, mt_i8, mt_v8_max)

/* the fixed tree over 16 lanes held as lo (lanes 0-7) and hi (lanes 8-15) */
static inline float mt_lanes_reduce(mt_v8 lo, mt_v8 hi)
{
    mt_v8 a = lo + hi;
    float t[8];
    memcpy(t, &a, sizeof t);
    for (int w = 4; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            t[j] += t[j + w];
    return t[0];
}

/* adds the tail x[0..r) (r < 16) to lanes 0..r-1 */
static inline void mt_lanes_tail(mt_v8 *lo, mt_v8 *hi, const float *x, int r)
{
    float t[16] = {0};
    memcpy(t, x, sizeof(float) * (size_t)r);
    *lo += mt_v8_load(t);
    *hi += mt_v8_load(t + 8);
}

static inline float mt_sum_fixed(const float *x, int n)
{
    mt_v8 lo = {0}, hi = {0};
    int i = 0;
    for (; i + MT_LANES <= n; i += MT_LANES) {
        lo += mt_v8_load(x + i);
        hi += mt_v8_load(x + i + 8);
    }
    mt_lanes_tail(&lo, &hi, x + i, n - i);
    return mt_lanes_reduce(lo, hi);
}

/* The cross-entropy's row loops (single device and vocabulary-parallel share them, so a
 * tensor-parallel reference with one block is the single-device row). */

/* max of x[0..n) (n >= 1); exact, so the lanes' order does not matter.  A NaN may be
 * skipped; it still reaches the sum of exponentials. */
static inline float mt_max_fixed(const float *x, int64_t n)
{
    float m = x[0];
    int64_t i = 0;
    if (n >= 16) {
        mt_v8 lo = mt_v8_load(x), hi = mt_v8_load(x + 8);
        for (i = 16; i + 16 <= n; i += 16) {
            lo = mt_v8_max(lo, mt_v8_load(x + i));
            hi = mt_v8_max(hi, mt_v8_load(x + i + 8));
        }
        float t[16];
        mt_v8_store(t, lo);
        mt_v8_store(t + 8, hi);
        for (int j = 0; j < 16; j++)
            m = t[j] > m ? t[j] : m;
    }
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

typedef double mt_d4 __attribute__((vector_size(32)));
typedef float mt_f4 __attribute__((vector_size(16)));

static inline mt_d4 mt_d4_of(mt_v8 v, int half)
{
    mt_f4 f;
    memcpy(&f, (const char *)&v + 16 * half, sizeof f);
    return __builtin_convertvector(f, mt_d4);
}

/* 16 double lanes combined as mt_lanes_reduce combines float ones */
static inline double mt_dlanes_reduce(double *t)
{
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            t[j] += t[j + w];
    return t[0];
}

/* sum of exp(x[v] - mx) over v < n in double, in 16 fixed lanes (lane j adds v = j, j+16,
 * ... in order, the tail v to lane v % 16), combined as mt_lanes_reduce does; with `keep`,
 * x[v] is replaced by its exponential (mt_scale_exp's input then) */
static inline double mt_sum_exp_fixed(float *x, int64_t n, float mx, int keep)
{
    mt_d4 acc[4] = {{0}};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        mt_v8 a = mt_expf_v8(mt_v8_load(x + i) - mx), b = mt_expf_v8(mt_v8_load(x + i + 8) - mx);
        if (keep) {
            mt_v8_store(x + i, a);
            mt_v8_store(x + i + 8, b);
        }
        acc[0] += mt_d4_of(a, 0);
        acc[1] += mt_d4_of(a, 1);
        acc[2] += mt_d4_of(b, 0);
        acc[3] += mt_d4_of(b, 1);
    }
    double t[16];
    memcpy(t, acc, sizeof t);
    for (int j = 0; i < n; i++, j++) {
        float e = mt_expf_inl(x[i] - mx);
        if (keep)
            x[i] = e;
        t[j] += e;
    }
    return mt_dlanes_reduce(t);
}

/* sum of x[i]^2 over i < n in double (each square exact), in the same 16 lanes and tree */
static inline double mt_sumsq_fixed(const float *x, int64_t n)
{
    mt_d4 acc[4] = {{0}};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int q = 0; q < 4; q++) {
            mt_d4 d = mt_d4_of(mt_v8_load(x + i + 8 * (q / 2)), q % 2);
            acc[q] += d * d;
        }
    double t[16];
    memcpy(t, acc, sizeof t);
    for (int j = 0; i < n; i++, j++)
        t[j] += (double)x[i] * x[i];
    return mt_dlanes_reduce(t);
}

/* x[v] <- dscale (exp(x[v] - mx) inv) for v < n, or dscale (x[v] inv) where x already holds
 * the exponentials (mt_sum_exp_fixed's keep): the same bits */
static inline void mt_scale_exp(float *x, int64_t n, float mx, float inv, float dscale, int have_exp)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        mt_v8 e = mt_v8_load(x + i);
        if (!have_exp)
            e = mt_expf_v8(e - mx);
        mt_v8_store(x + i, dscale * (e * inv));
    }
    for (; i < n; i++)
        x[i] = dscale * ((have_exp ? x[i] : mt_expf_inl(x[i] - mx)) * inv);
}

#endif
