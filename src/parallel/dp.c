/* dp.c - plain data parallelism (see mt_dp.h). */
#include "mt_dp.h"

/* Gradients are all-reduced in pieces of at most 8 MiB: Open MPI's bandwidth collapses
 * above 16 MiB per call on this kind of machine (it maps fresh memory per call).  Each
 * element's sum is the same whatever the piece, so the result does not change. */
#define DP_PIECE_FLOATS ((int64_t)2 << 20)

MtStatus mt_dp_check(int dp, int microbatches)
{
    if (microbatches % dp != 0)
        return mt_error(MT_EINPUT, "the step's %d micro-batches (--batch-size / --micro-batch-size) do not "
                        "split evenly over --dp %d", microbatches, dp);
    return MT_OK;
}

void mt_dp_range(int microbatches, int dp, int dp_rank, int *lo, int *hi)
{
    int per = microbatches / dp;
    *lo = dp_rank * per;
    *hi = *lo + per;
}

void mt_dp_step(MtTrainer *tr, MtComm *c, const MtTokens *data, int det, MtStepStats *st)
{
    const MtTrainConfig *tc = &tr->tc;
    int M = tc->batch / tc->micro, lo, hi;
    mt_dp_range(M, mt_comm_group_size(c, MT_GROUP_DP), mt_comm_group_rank(c, MT_GROUP_DP), &lo, &hi);
    int64_t off = (int64_t)lo * tc->micro * tc->seq;
    mt_batch_fill(data, tc->seed, tr->step, lo * tc->micro, (hi - lo) * tc->micro, tc->seq,
                  tr->inputs + off, tr->targets + off);
    float loss = mt_trainer_forward_backward_range(tr, lo, hi);
    for (int64_t at = 0; at < tr->nfloats; at += DP_PIECE_FLOATS) {
        int64_t n = tr->nfloats - at < DP_PIECE_FLOATS ? tr->nfloats - at : DP_PIECE_FLOATS;
        mt_allreduce(c, MT_GROUP_DP, tr->grads + at, n, det);
    }
    mt_allreduce(c, MT_GROUP_DP, &loss, 1, det);
    st->loss = loss;
    mt_trainer_update(tr, st);
}
