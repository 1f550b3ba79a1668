/* zero.c - ZeRO-1, ZeRO-2 and FSDP (ZeRO-3): sharded optimizer state, gradients and
 * parameters (see mt_dp.h and mt_shard.h).  The lower half of the data-parallel family:
 * dp.c (DDP, the shared step) calls into it, never the other way. */
#include "mt_dp.h"
#include "mt_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mt_optim.h"
#include "mt_sharded.h"

/* ---- the shared step's clock and the choice of runs (dp.c calls these; nothing here
 * calls dp.c) ---- */

int mt_dp_contiguous(int zero, int det, int N, int microbatches, int B)
{
    return !mt_accum_round_robin(N, zero, det, microbatches, B);
}

double mt_dp_clock(MtDp *dp, double since)
{
    double t = mt_now();
    dp->comm_s += t - since;
    return t;
}

void mt_dp_wait(MtDp *dp, MtRequest *r)
{
    double t = mt_now();
    mt_wait(dp->c, r);
    mt_dp_clock(dp, t);
}

/* which buffer of ugrad / the FSDP slots a unit uses: embedding, head, blocks by parity */
static int slot_of(const MtDp *dp, int unit)
{
    if (unit == 0)
        return 0;
    if (unit == dp->map.nunits - 1)
        return 1;
    return 2 + (unit & 1);
}

/* this rank's chunk of unit u in each array */
static float *grad_chunk(MtDp *dp, int u)
{
    return dp->contig ? dp->tr->grads + mt_shard_chunk_lo(&dp->map, u) : dp->tr->grads + dp->map.shard_off[u];
}

static float *param_chunk(MtDp *dp, int u)
{
    return dp->o.zero == 3 ? dp->tr->params + dp->map.shard_off[u] : dp->tr->params + mt_shard_chunk_lo(&dp->map, u);
}

/* ---- the sharded update: norm from everyone's block sums, clip, AdamW on the chunks ---- */

static float *grad_of(void *ctx, int u) { return grad_chunk(ctx, u); }
static float *param_of(void *ctx, int u) { return param_chunk(ctx, u); }
static int64_t flat_of(void *ctx, int u) { return mt_shard_chunk_lo(&((MtDp *)ctx)->map, u); }

static double sharded_sumsq(MtDp *dp)
{
    MtTrainer *tr = dp->tr;
    const MtShardMap *m = &dp->map;
    int64_t nb = m->shard_len / MT_NORM_BLOCK, nflat = tr->nfloats / MT_NORM_BLOCK; /* this rank's, all */
    double *mine = malloc(sizeof(double) * (size_t)(nb * (dp->S + 1) + nflat));
    MT_ASSERT(mine, "out of memory for %lld block sums", (long long)nflat);
    double *all = mine + nb, *flat = all + nb * dp->S;
    mt_sharded_block_sums(&dp->sh, grad_of, dp, mine, all);
    for (int u = 0; u < m->nunits; u++) /* every rank's chunks back in flat order */
        for (int r = 0; r < dp->S; r++)
            memcpy(flat + (m->lo[u] + r * m->chunk[u]) / MT_NORM_BLOCK,
                   all + (int64_t)r * nb + m->shard_off[u] / MT_NORM_BLOCK,
                   sizeof(double) * (size_t)(m->chunk[u] / MT_NORM_BLOCK));
    double total = 0.0; /* unit by unit, each unit's blocks in flat order: the canonical sum */
    if (tr->sumsq_blocks) /* the trainer's tensors are split over other ranks too */
        total = tr->sumsq_blocks(tr->sumsq_ctx, flat);
    else
        for (int64_t k = 0; k < nflat; k++)
            total += flat[k];
    free(mine);
    return total;
}

static void sharded_update(MtDp *dp, MtStepStats *st)
{
    MtTrainer *tr = dp->tr;
    const MtOptimConfig *oc = &tr->tc.oc;
    double norm = sqrt(sharded_sumsq(dp));
    float lr = mt_lr_at(oc, (int)tr->step);
    mt_sharded_adamw(&dp->sh, tr->table, tr->nparams, grad_of, param_of, flat_of, dp, tr->m, tr->v, oc, lr,
                     (int)tr->step + 1, norm);
    tr->step++;
    st->grad_norm = (float)norm;
    st->lr = lr;
}

/* ZeRO-1 (and ZeRO-2 / FSDP on contiguous runs): the rank's local tree is in tr->grads;
 * reduce-scatter unit by unit into the rank's chunks (in place, through the stage buffer),
 * update them, gather the parameters (FSDP keeps its shard). */
void mt_zero_contiguous_finish(MtDp *dp, MtStepStats *st)
{
    for (int u = dp->map.nunits - 1; u >= 0; u--) /* in place, through the stage buffer */
        mt_sharded_reduce(&dp->sh, u, dp->tr->grads, grad_chunk(dp, u), dp->stage);
    sharded_update(dp, st);
    if (dp->o.zero <= 2)
        mt_sharded_gather_params(&dp->sh, dp->tr->params);
}

/* ---- ZeRO-2 / FSDP: unit events ---- */

static void start_gather(MtDp *dp, int u) { mt_sharded_slot_start(&dp->sh, slot_of(dp, u), u, u, dp->tr->params); }

static void params_need(MtDp *dp, int u)
{
    MtTrainer *tr = dp->tr;
    int L = tr->tc.cfg.L, s = slot_of(dp, u);
    if (u == 0)
        dp->backward = 0;
    start_gather(dp, u);
    mt_weights_view_unit(&tr->tc.cfg, tr->table, tr->nparams, u, mt_sharded_slot_wait(&dp->sh, s), &tr->w);
    /* prefetch the unit the pass needs next */
    int next = -1;
    if (!dp->backward)
        next = u <= L ? u + 1 : -1;
    else if (u >= 2 && u <= L)
        next = u - 1;
    if (next >= 0)
        start_gather(dp, next);
}

static void params_done(MtDp *dp, int u)
{
    int s = slot_of(dp, u);
    if (dp->sh.slot_unit[s] == u && !dp->sh.slot_req[s])
        dp->sh.slot_unit[s] = -1; /* released: the next use gathers again */
}

static void grads_need(MtDp *dp, int u)
{
    MtTrainer *tr = dp->tr;
    int s = slot_of(dp, u);
    if (dp->ugrad_req[s]) { /* the unit two back is still being reduced */
        mt_dp_wait(dp, dp->ugrad_req[s]);
        dp->ugrad_req[s] = NULL;
    }
    mt_be()->zero(dp->ugrad[s], dp->map.len[u]);
    mt_weights_view_unit(&tr->tc.cfg, tr->table, tr->nparams, u, dp->ugrad[s], &dp->gview);
}

static void grads_done(MtDp *dp, int u)
{
    int s = slot_of(dp, u);
    double t = mt_now();
    dp->ugrad_req[s] = mt_ireduce_scatter(dp->c, MT_GROUP_DP_SHARD, dp->ugrad[s], dp->round_dst + dp->map.shard_off[u],
                                          dp->map.len[u], dp->o.det);
    mt_dp_clock(dp, t);
}

static void poll_units(MtDp *dp)
{
    double t = mt_now();
    for (int s = 0; s < 4; s++)
        if (dp->ugrad_req[s] && mt_test(dp->c, dp->ugrad_req[s]))
            dp->ugrad_req[s] = NULL;
    mt_dp_clock(dp, t);
    mt_sharded_slot_poll(&dp->sh);
}

static void zero_hook(void *ctx, MtUnitEvent ev, int unit)
{
    MtDp *dp = ctx;
    poll_units(dp);
    switch (ev) {
    case MT_PARAMS_NEED:
        if (dp->o.zero == 3)
            params_need(dp, unit);
        break;
    case MT_PARAMS_DONE:
        if (dp->o.zero == 3)
            params_done(dp, unit);
        break;
    case MT_BACKWARD_BEGIN: /* the blocks come in reverse now: fetch the last one */
        if (dp->o.zero == 3) {
            dp->backward = 1;
            if (dp->tr->tc.cfg.L >= 1)
                start_gather(dp, dp->tr->tc.cfg.L);
        }
        break;
    case MT_GRADS_NEED: /* on contiguous runs the trainer's full buffers take the gradients */
        if (!dp->contig)
            grads_need(dp, unit);
        break;
    case MT_GRADS_DONE:
        if (!dp->contig)
            grads_done(dp, unit);
        break;
    }
}

/* one round: micro-batch j N + rank, its unit gradients reduce-scattered into dst (a shard) */
static float round_grad(MtDp *dp, int j, float *dst)
{
    MtTrainer *tr = dp->tr;
    dp->round_dst = dst;
    MtUnitHooks h = {zero_hook, dp};
    float loss = mt_trainer_micro_grad_views(tr, j * dp->N + dp->rank, &dp->gview, &h);
    for (int s = 0; s < 4; s++)
        if (dp->ugrad_req[s]) {
            mt_dp_wait(dp, dp->ugrad_req[s]);
            dp->ugrad_req[s] = NULL;
        }
    mt_sharded_across_copies(&dp->sh, dst, dp->map.shard_len);
    return loss;
}

void mt_zero_step(MtDp *dp, const MtTokens *data, MtStepStats *st)
{
    MtTrainer *tr = dp->tr;
    const MtTrainConfig *tc = &tr->tc;
    int R = dp->rounds, N = dp->N;
    for (int j = 0; j < R; j++) {
        int k = j * N + dp->rank;
        mt_trainer_fill(tr, data, k * tc->micro, tc->micro, k * tc->micro);
    }
    float *mine = dp->leaf_loss + (int64_t)dp->rank * R, *all = dp->leaf_loss + (int64_t)dp->M;
    float *bufs[MT_TREE_MAX_BUFS] = {tr->grads}; /* the rounds as the tree (mt_accum.h): result, temporaries */
    for (int d = 0; d < dp->nrtmp; d++)
        bufs[1 + d] = dp->rtmp[d];
    for (int i = 0; i < dp->nplan;) {
        const MtTreeStep *s = &dp->plan[i];
        mine[s->leaf] = round_grad(dp, s->leaf, bufs[s->buf]);
        i = mt_accum_adds(dp->plan, dp->nplan, i, bufs, 0, dp->map.shard_len, NULL);
    }
    double t = mt_now();
    mt_allgather(dp->c, MT_GROUP_DP, mine, dp->leaf_loss, (int64_t)dp->M);
    mt_dp_clock(dp, t);
    for (int r = 0; r < N; r++) /* leaf k = j N + r sits at [r R + j] */
        for (int j = 0; j < R; j++)
            all[j * N + r] = dp->leaf_loss[r * R + j];
    st->loss = mt_accum_tree_sum(all, dp->M);
    sharded_update(dp, st);
    if (dp->o.zero == 2)
        mt_sharded_gather_params(&dp->sh, dp->tr->params);
}

/* ---- set-up ---- */

MtStatus mt_zero_init(MtDp *dp)
{
    MtTrainer *tr = dp->tr;
    const MtShardMap *m = &dp->map;
    int z = dp->o.zero, last = m->nunits - 1;
    mt_sharded_init(&dp->sh, dp->c, m, dp->o.det, &dp->comm_s);
    if (z == 0)
        return MT_OK;
    dp->gview.fresh = 1; /* each unit's gradient buffer is zeroed before its backward (grads_need), as a leaf's */
    if (!dp->contig) { /* round-robin: every leaf a block, its embedding rows added before it is reduced */
        dp->gview.esum = &tr->esum;
        tr->esum.flush = 1;
    }
    int64_t lens[4] = {m->len[0], m->len[last], m->max_block_len, m->max_block_len};
    for (int s = 0; s < 4; s++)
        dp->ugrad_len[s] = lens[s];
    if (dp->contig) {
        for (int u = 0; u < m->nunits; u++)
            dp->stage_len = m->chunk[u] > dp->stage_len ? m->chunk[u] : dp->stage_len;
        if (!(dp->stage = mt_mem_alloc(&tr->mem, MT_MEM_GRADS, sizeof(float) * (size_t)dp->stage_len)))
            goto oom;
    } else {
        for (int s = 0; s < 4; s++)
            if (lens[s] && !(dp->ugrad[s] = mt_mem_alloc(&tr->mem, MT_MEM_GRADS, sizeof(float) * (size_t)lens[s])))
                goto oom;
        dp->nrtmp = mt_accum_depth(dp->rounds);
        if (!(dp->plan = malloc(sizeof(MtTreeStep) * (size_t)mt_tree_plan_max(dp->rounds))))
            goto oom;
        dp->nplan = mt_tree_plan(dp->rounds, dp->plan);
        for (int d = 0; d < dp->nrtmp; d++)
            if (!(dp->rtmp[d] = mt_mem_alloc(&tr->mem, MT_MEM_GRADS, sizeof(float) * (size_t)m->shard_len)))
                goto oom;
        dp->leaf_loss = calloc(2 * (size_t)dp->M, sizeof(float));
        if (!dp->leaf_loss)
            goto oom;
    }
    for (int s = 0; z == 3 && s < 4; s++)
        if (lens[s] && !(dp->sh.slot[s] = mt_mem_alloc(&tr->mem, MT_MEM_PARAMS, sizeof(float) * (size_t)lens[s])))
            goto oom;
    if (z == 3) {
        tr->hooks = (MtUnitHooks){zero_hook, dp}; /* evaluation passes gather too */
        /* each rank initialises exactly its chunks: init is a pure function of the index */
        for (int p = 0; p < tr->nparams; p++) {
            const MtParam *pp = &tr->table[p];
            int u = pp->unit;
            int64_t lo = mt_shard_chunk_lo(m, u), hi = lo + m->chunk[u];
            int64_t a = pp->offset > lo ? pp->offset : lo;
            int64_t b = pp->offset + pp->numel < hi ? pp->offset + pp->numel : hi;
            if (a < b)
                mt_trainer_param_init(tr, p, a - pp->offset, b - pp->offset, tr->params + m->shard_off[u] + (a - lo));
        }
    }
    return MT_OK;
oom:
    mt_zero_free(dp);
    return mt_error(MT_ENOMEM, "cannot allocate the ZeRO-%d buffers", z);
}

void mt_zero_free(MtDp *dp)
{
    MtTrainer *tr = dp->tr;
    if (!tr)
        return;
    mt_mem_free(&tr->mem, MT_MEM_GRADS, dp->stage, sizeof(float) * (size_t)dp->stage_len);
    dp->stage = NULL;
    for (int s = 0; s < 4; s++) {
        mt_mem_free(&tr->mem, MT_MEM_GRADS, dp->ugrad[s], sizeof(float) * (size_t)dp->ugrad_len[s]);
        mt_mem_free(&tr->mem, MT_MEM_PARAMS, dp->sh.slot[s], sizeof(float) * (size_t)dp->ugrad_len[s]);
        dp->ugrad[s] = dp->sh.slot[s] = NULL;
    }
    for (int d = 0; d < dp->nrtmp; d++) {
        mt_mem_free(&tr->mem, MT_MEM_GRADS, dp->rtmp[d], sizeof(float) * (size_t)dp->map.shard_len);
        dp->rtmp[d] = NULL;
    }
    dp->nrtmp = 0;
    free(dp->leaf_loss);
    dp->leaf_loss = NULL;
    free(dp->plan);
    dp->plan = NULL;
}

/* ---- whole arrays from the shards ---- */

void mt_dp_gather_state(MtDp *dp, float *params, float *m, float *v)
{
    MtTrainer *tr = dp->tr;
    const MtShardMap *sm = &dp->map;
    size_t bytes = sizeof(float) * (size_t)tr->nfloats;
    if (dp->o.zero < 3)
        mt_be()->download(params, tr->params, bytes);
    if (dp->o.zero == 0) {
        mt_be()->download(m, tr->m, bytes);
        mt_be()->download(v, tr->v, bytes);
        return;
    }
    for (int u = 0; u < sm->nunits; u++) {
        if (dp->o.zero == 3)
            mt_allgather(dp->c, MT_GROUP_DP_SHARD, tr->params + sm->shard_off[u], params + sm->lo[u], sm->len[u]);
        mt_allgather(dp->c, MT_GROUP_DP_SHARD, tr->m + sm->shard_off[u], m + sm->lo[u], sm->len[u]);
        mt_allgather(dp->c, MT_GROUP_DP_SHARD, tr->v + sm->shard_off[u], v + sm->lo[u], sm->len[u]);
    }
}

int64_t mt_dp_piece(void *ctx, int q, int k, int64_t *begin, int64_t *end)
{
    const MtDpPiece *x = ctx;
    const MtDp *dp = x->dp;
    const MtParam *t = &dp->tr->table[q];
    if (k > 0)
        return -1;
    if (dp->o.zero == 0) { /* replicas: the first writes */
        if (dp->rank != 0 && !x->load)
            return -1;
        *begin = 0;
        *end = t->numel;
        return t->offset;
    }
    if (!x->load && mt_comm_group_rank(dp->c, MT_GROUP_DP_REPLICA) != 0) /* hybrid sharding: the first copy */
        return -1;
    const MtShardMap *m = &dp->map;
    int u = t->unit;
    int64_t clo = mt_shard_chunk_lo(m, u), chi = clo + m->chunk[u];
    int64_t a = t->offset > clo ? t->offset : clo, b = t->offset + t->numel < chi ? t->offset + t->numel : chi;
    if (a >= b)
        return -1;
    *begin = a - t->offset;
    *end = b - t->offset;
    return x->moments || dp->o.zero == 3 ? m->shard_off[u] + (a - clo) : a;
}

void mt_dp_plan(const MtTrainConfig *tc, int N, int S, int zero, int det, int shard_rank, int64_t bytes[MT_MEM_NCAT])
{
    if (zero == 0)
        return;
    int64_t lo[MT_MAX_UNITS], hi[MT_MAX_UNITS];
    int nu = tc->cfg.L + 2;
    mt_trainer_spans(tc, lo, hi);
    MtShardMap m;
    MT_ASSERT(mt_shard_map(lo, hi, nu, S, shard_rank, &m) == 0, "the plan's table is not aligned for %d shards", S);
    int M = tc->batch / tc->micro;
    int64_t lens = m.len[0] + m.len[nu - 1] + 2 * m.max_block_len; /* as mt_zero_init allocates */
    if (mt_dp_contiguous(zero, det, N, M, mt_accum_block_size(tc))) {
        int64_t most = 0;
        for (int u = 0; u < nu; u++)
            most = m.chunk[u] > most ? m.chunk[u] : most;
        bytes[MT_MEM_GRADS] += 4 * most;
    } else
        bytes[MT_MEM_GRADS] += 4 * (lens + mt_accum_depth(M / N) * m.shard_len);
    if (zero == 3)
        bytes[MT_MEM_PARAMS] += 4 * lens;
}

int64_t mt_dp_plan_comm(const MtTrainConfig *tc, int N, int S, int zero, int det)
{
    if (N <= 1)
        return 0;
    int64_t lo[MT_MAX_UNITS], hi[MT_MAX_UNITS];
    int nu = tc->cfg.L + 2, M = tc->batch / tc->micro, c = N / S;
    mt_trainer_spans(tc, lo, hi);
    int64_t P = hi[nu - 1] - lo[0], shard = P / S, loss = 8 * (int64_t)(N - 1) / N;
    if (zero == 0) /* the gradient all-reduced (in buckets), the loss */
        return 8 * (int64_t)(N - 1) * P / N + loss;
    int64_t rs = 4 * (int64_t)(S - 1) * P / S, across = c > 1 ? 8 * (int64_t)(c - 1) * shard / c : 0;
    int64_t bytes = 8 * (int64_t)(S - 1) * (shard / MT_NORM_BLOCK); /* the norm's block sums */
    int64_t fsdp = 4 * (int64_t)(S - 1) * (2 * P - (hi[0] - lo[0]) - (hi[nu - 1] - lo[nu - 1])) / S;
    if (mt_dp_contiguous(zero, det, N, M, mt_accum_block_size(tc))) /* reduce-scattered once, the loss all-reduced */
        bytes += rs + across + loss + (zero == 3 ? (int64_t)(M / N) * fsdp : 0);
    else /* per round; the leaf losses all-gathered */
        bytes += (int64_t)(M / N) * (rs + across + (zero == 3 ? fsdp : 0)) + 4 * (int64_t)(N - 1) * M / N;
    return bytes + (zero <= 2 ? rs : 0); /* ZeRO-1/2: the parameters all-gathered */
}

int64_t mt_dp_inner_piece(void *ctx, int q, int k, int64_t *begin, int64_t *end)
{
    const MtDpInner *x = ctx;
    const MtDp *dp = x->dp;
    const MtParam *t = &dp->tr->table[q];
    if (!x->load && mt_comm_group_rank(dp->c, MT_GROUP_DP_REPLICA) != 0) /* hybrid sharding: the first copy */
        return -1;
    int64_t at = x->fn(x->ctx, q, k, begin, end);
    if (at < 0)
        return -1;
    const MtShardMap *m = &dp->map;
    int64_t clo = mt_shard_chunk_lo(m, t->unit), chi = clo + m->chunk[t->unit], n = *end - *begin;
    int64_t lo = at > clo ? at : clo, hi = at + n < chi ? at + n : chi;
    *begin += lo - at;
    *end = lo < hi ? *begin + (hi - lo) : *begin; /* empty: the next piece may still be here */
    return lo < hi ? m->shard_off[t->unit] + (lo - clo) : 0;
}
