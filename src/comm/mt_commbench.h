/* mt_commbench.h - timing of the communication benchmark (meshtrain bench-comm). */
#ifndef MT_COMMBENCH_H
#define MT_COMMBENCH_H

#include "mt_comm.h"

typedef struct {
    double ours_s, raw_s, memcpy_s; /* seconds per call: mean over the calls (memcpy: best round) */
} MtCommTiming;

/* Times op on n floats over the world: meshtrain's layer and the raw MPI call alternating
 * call by call (reps x iters calls each, each after a barrier; the slowest rank's sum
 * counts), and one core's memcpy of the same bytes. */
MtCommTiming mt_commbench_time(MtComm *c, MtOp op, int64_t n, int iters, int reps, float *buf, float *out);

#endif
