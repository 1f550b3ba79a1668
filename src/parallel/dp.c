/* dp.c - data parallelism: the shared step, DDP's buckets (see mt_dp.h). */
#include "mt_dp.h"

#include <stdlib.h>
#include <string.h>

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

void mt_dp_configure(MtTrainConfig *tc, int N, int S, int zero, int det)
{
    int M = tc->batch / tc->micro, contig = mt_dp_contiguous(zero, det, N, M, mt_accum_block_size(tc));
    S = S > 0 && zero > 0 ? S : N;
    tc->unit_align = mt_shard_align(S);
    int np = mt_param_count(&tc->cfg);
    MtParam *t = calloc((size_t)np, sizeof *t);
    MT_ASSERT(t, "out of memory");
    int64_t shard = mt_trainer_table(tc, t) / S;
    free(t);
    tc->tree_span = contig ? M / N : 1;
    tc->optim_len = zero >= 1 ? shard : 0;
    tc->grads_len = contig ? 0 : shard;
    tc->params_len = zero >= 3 ? shard : 0;
}

void mt_dp_sum(void *ctx, float *x, int64_t n)
{
    MtDpSum *s = ctx;
    double t = mt_now();
    for (int64_t at = 0; at < n; at += MT_PIECE_FLOATS) /* each element's sum is the same whatever the piece */
        mt_allreduce(s->c, MT_GROUP_DP, x + at, n - at < MT_PIECE_FLOATS ? n - at : MT_PIECE_FLOATS, s->det);
    s->comm_s += mt_now() - t;
}

void mt_dp_poll(MtDp *dp)
{
    double t = mt_now();
    int k = 0;
    for (int i = 0; i < dp->npending; i++)
        if (!mt_test(dp->c, dp->pending[i]))
            dp->pending[k++] = dp->pending[i];
    dp->npending = k;
    mt_dp_clock(dp, t);
}

static void wait_pending(MtDp *dp)
{
    for (int i = 0; i < dp->npending; i++)
        mt_dp_wait(dp, dp->pending[i]);
    dp->npending = 0;
}

/* DDP: the last micro-batch's backward finished unit u; start its bucket if complete */
static void ddp_hook(void *ctx, MtUnitEvent ev, int unit)
{
    MtDp *dp = ctx;
    if (ev != MT_GRADS_DONE)
        return;
    mt_dp_poll(dp);
    for (int b = 0; b < dp->nbuckets; b++) {
        if (dp->bfirst[b] != unit)
            continue;
        const MtShardMap *m = &dp->map;
        int64_t lo = m->lo[dp->bfirst[b]], hi = m->lo[dp->blast[b]] + m->len[dp->blast[b]];
        double t = mt_now();
        for (int64_t at = lo; at < hi; at += dp->piece) {
            int64_t n = hi - at < dp->piece ? hi - at : dp->piece;
            MT_ASSERT(dp->npending < MT_DP_MAX_REQ, "too many reductions in flight");
            dp->pending[dp->npending++] = mt_iallreduce(dp->c, MT_GROUP_DP, dp->tr->grads + at, n, dp->o.det);
        }
        mt_dp_clock(dp, t);
    }
}

MtStatus mt_dp_init(MtDp *dp, MtTrainer *tr, MtComm *c, const MtDpOptions *o)
{
    memset(dp, 0, sizeof *dp);
    dp->tr = tr;
    dp->c = c;
    dp->o = *o;
    dp->N = mt_comm_group_size(c, MT_GROUP_DP);
    dp->rank = mt_comm_group_rank(c, MT_GROUP_DP);
    dp->M = tr->tc.batch / tr->tc.micro;
    dp->rounds = dp->M / dp->N;
    dp->contig = mt_dp_contiguous(o->zero, o->det, dp->N, dp->M, tr->blk);
    MtGroupKind sg = o->zero > 0 ? MT_GROUP_DP_SHARD : MT_GROUP_DP;
    dp->S = mt_comm_group_size(c, sg);
    MT_ASSERT(mt_shard_map(tr->unit_lo, tr->unit_hi, tr->nunits, dp->S, mt_comm_group_rank(c, sg), &dp->map) == 0,
              "the trainer was not configured for shards of %d ranks (mt_dp_configure)", dp->S);
    dp->piece = mt_piece_floats(dp->N, MT_PIECE_FLOATS);
    int64_t bucket = o->bucket_bytes > 0 ? o->bucket_bytes / (int64_t)sizeof(float) : 0;
    dp->nbuckets = mt_bucket_plan(tr->unit_lo, tr->unit_hi, tr->nunits, bucket, dp->bfirst, dp->blast);
    if (o->zero == 0)
        tr->hooks = (MtUnitHooks){ddp_hook, dp};
    return mt_zero_init(dp);
}

void mt_dp_free(MtDp *dp)
{
    mt_zero_free(dp);
    if (dp->tr)
        dp->tr->hooks = (MtUnitHooks){0};
}

void mt_dp_step(MtDp *dp, const MtTokens *data, MtStepStats *st)
{
    MtTrainer *tr = dp->tr;
    const MtTrainConfig *tc = &tr->tc;
    dp->comm_s = 0.0;
    if (!dp->contig) {
        mt_zero_step(dp, data, st);
        return;
    }
    int lo, hi;
    mt_dp_range(dp->M, dp->N, dp->rank, &lo, &hi);
    mt_trainer_fill(tr, data, lo * tc->micro, (hi - lo) * tc->micro, lo * tc->micro);
    float loss = mt_trainer_forward_backward_range(tr, lo, hi);
    wait_pending(dp);
    double t = mt_now();
    mt_allreduce(dp->c, MT_GROUP_DP, &loss, 1, dp->o.det);
    mt_dp_clock(dp, t);
    st->loss = loss;
    if (dp->o.zero == 0)
        mt_trainer_update(tr, st);
    else
        mt_zero_contiguous_finish(dp, st);
}
