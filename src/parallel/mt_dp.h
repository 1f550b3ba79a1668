/* mt_dp.h - data parallelism, plain form: every rank of the dp group holds the whole model
 * and takes a contiguous run of the step's micro-batches; the gradient and the loss are
 * all-reduced over the dp group, by default in the fixed order.
 *
 * Why contiguous runs: the single-device step sums its M micro-batch gradients as a
 * balanced pairwise tree (mt_train.h).  When dp is a power of two dividing M, rank r's
 * micro-batches [r M/dp, (r+1) M/dp) form a whole subtree, which the rank sums locally in
 * the same order, and the fixed-order all-reduce sums the dp subtrees as the upper levels
 * of the same tree.  So dp = 1, 2, 4, ... give the same bits.  Other sizes differ only in
 * the order of the top-level sums (within fp32 rounding).
 */
#ifndef MT_DP_H
#define MT_DP_H

#include "mt_comm.h"
#include "mt_train.h"

/* The run of micro-batches a dp rank takes; MT_EINPUT if dp does not divide M. */
MtStatus mt_dp_check(int dp, int microbatches);
void mt_dp_range(int microbatches, int dp, int dp_rank, int *lo, int *hi);
/* One training step: this rank's micro-batches, all-reduce (fixed order if det), update. */
void mt_dp_step(MtTrainer *tr, MtComm *c, const MtTokens *data, int det, MtStepStats *st);

#endif
