/* rng.c - Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC 2011) and the draws built on it. */
#include "mt_rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

MtPhilox mt_philox(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3)
{
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    return (MtPhilox){{c0, c1, c2, c3}};
}

static MtPhilox draw(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b)
{
    /* key: the seed folded with the stream; counter: (a, b) as four 32-bit words */
    uint64_t key = seed ^ (stream * 0x9E3779B97F4A7C15ull);
    return mt_philox((uint32_t)key, (uint32_t)(key >> 32), (uint32_t)a, (uint32_t)(a >> 32),
                     (uint32_t)b, (uint32_t)(b >> 32));
}

float mt_rng_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
    MtPhilox r = draw(seed, stream, index, 0);
    /* Box-Muller on two 32-bit uniforms, computed in double: u1 in (0, 1], u2 in [0, 1) */
    double u1 = ((double)r.v[0] + 1.0) / 4294967296.0;
    double u2 = (double)r.v[1] / 4294967296.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

uint64_t mt_rng_u64(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b)
{
    MtPhilox r = draw(seed, stream, a, b);
    return ((uint64_t)r.v[0] << 32) | r.v[1];
}

float mt_rng_uniform(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b)
{
    return (float)(mt_rng_u64(seed, stream, a, b) >> 40) / 16777216.0f;
}
