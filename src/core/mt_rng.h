/* mt_rng.h - counter-based random numbers (Philox-4x32-10).
 *
 * Every random number in meshtrain is a pure function of (key, counter): the same
 * value no matter which rank computes it, in which order, or how many threads run.
 * Parameter initialisation uses key = (seed, hash(parameter name)) and counter = the
 * element index, so any slice of any tensor can be initialised on its own and equals
 * the same slice of the whole tensor.  The data loader uses key = (seed, stream) and
 * counter = (step, sample).
 */
#ifndef MT_RNG_H
#define MT_RNG_H

#include <stdint.h>

typedef struct { uint32_t v[4]; } MtPhilox;

/* Philox-4x32-10 of counter (c0..c3) under key (k0, k1). */
MtPhilox mt_philox(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3);

/* A standard normal draw for element `index` of the stream keyed by (seed, stream). */
float mt_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);
/* A uniform 64-bit draw for (seed, stream, a, b). */
uint64_t mt_rng_u64(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b);
/* A uniform float in [0, 1) with 24 random bits, for (seed, stream, a, b). */
float mt_rng_uniform(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b);

#endif
