/* mathinl.h - inline scalar helpers that the kernels' loops vectorise (private to kernels).
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
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#define MT_LANES 16

/* Reduces 16 partial sums in a fixed tree. */
static inline float mt_lanes_sum(float *acc)
{
    for (int w = MT_LANES / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            acc[j] += acc[j + w];
    return acc[0];
}

#endif
