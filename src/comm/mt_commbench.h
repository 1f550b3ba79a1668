/* mt_commbench.h - timing of the communication benchmark (meshtrain bench-comm). */
#ifndef MT_COMMBENCH_H
#define MT_COMMBENCH_H

#include "mt_comm.h"

typedef struct {
    double ours_s, raw_s, memcpy_s; /* seconds per call, best of the repetitions */
} MtCommTiming;

/* Times op on n floats over the world: meshtrain's layer and the raw MPI call interleaved
 * (reps rounds of iters calls each), and one core's memcpy of the same bytes. */
MtCommTiming mt_commbench_time(MtComm *c, MtOp op, int64_t n, int iters, int reps, float *buf, float *out);

#endif
