/* pipe_zero.c - ZeRO and FSDP over the copies of a pipeline (see mt_pipeline.h): the stage's
 * units as sharded state over dp_shard (mt_sharded.h, as ZeRO over whole replicas): the
 * round-robin leaves' reduce-scatters into the tree over rounds, the contiguous runs' reduce
 * after the copy's tree, the norm's block sums, AdamW on the chunks, FSDP's unit slots. */
#include "pipe_internal.h"
#include "mt_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ZeRO: this rank's reduced chunk of shard unit i: in the round-robin tree's result, or
 * (contiguous runs) in place in the stage's gradient */
float *pipe_gchunk(MtPipe *p, int i)
{
    return rr(p) ? p->sbuf[0] + p->zmap.shard_off[i] : p->tr->grads + mt_shard_chunk_lo(&p->zmap, i);
}

static float *chunk_of(void *ctx, int i) { return pipe_gchunk(ctx, i); }

/* ZeRO over copies: the rank's units, in its arrays, sharded over its dp_shard group; the
 * reduced gradient's chunks (round-robin: with the tree over rounds); FSDP's slots and the
 * initialisation of its shard (a pure function of each element's index, as everywhere) */
MtStatus pipe_zero_init(MtPipe *p)
{
    MtTrainer *tr = p->tr;
    int S = zero_S(&p->o);
    int64_t lo[MT_MAX_UNITS], hi[MT_MAX_UNITS];
    int nu = 0;
    for (int k = 0; k < p->V; k++) {
        MtPipeChunk *ch = &p->ch[k];
        int uf, ul;
        pipe_units(p, ch, &uf, &ul);
        ch->zu0 = nu;
        for (int u = uf; u <= ul; u++, nu++) {
            p->zunit[nu] = u;
            p->zidx[u] = nu;
            lo[nu] = ch->loff + (tr->unit_lo[u] - ch->lo);
            hi[nu] = lo[nu] + (tr->unit_hi[u] - tr->unit_lo[u]);
        }
        ch->zu1 = nu;
    }
    MtShardMap *m = &p->zmap;
    MT_ASSERT(mt_shard_map(lo, hi, nu, S, mt_comm_group_rank(p->c, MT_GROUP_DP_SHARD), m) == 0,
              "the pipeline's units are not aligned for %d dp shards", S);
    mt_sharded_init(&p->zsh, p->c, m, p->o.det, &p->comm_s);
    p->nsbuf = rr(p) ? 1 + mt_tree_temps(p->o.M) : 0;
    for (int i = 0; i < p->nsbuf; i++)
        if (!(p->sbuf[i] = pipe_alloc(p, MT_MEM_GRADS, m->shard_len)))
            return MT_ENOMEM;
    for (int i = 0; !rr(p) && i < nu; i++) /* contiguous: a unit's chunk lands back in place, via zstage */
        p->zstage_len = m->chunk[i] > p->zstage_len ? m->chunk[i] : p->zstage_len;
    if (p->zstage_len && !(p->zstage = pipe_alloc(p, MT_MEM_GRADS, p->zstage_len)))
        return MT_ENOMEM;
    p->zblocks = malloc(sizeof(double) * (size_t)(m->shard_len / MT_NORM_BLOCK) * (1 + S));
    if (!p->zblocks)
        return MT_ENOMEM;
    if (rr(p) && p->rank == p->P - 1 && !(p->loss_all = malloc(2 * sizeof(float) * (size_t)p->o.M * p->o.zero_dp)))
        return MT_ENOMEM;
    if (!fsdp(p))
        return MT_OK;
    int64_t *len = p->zsh.slot_len;
    for (int i = 0; i < nu; i++) {
        int s = slot_of(p, p->zunit[i]);
        len[s] = m->len[i] > len[s] ? m->len[i] : len[s];
    }
    for (int s = 0; s < 4; s++)
        if (len[s] && !(p->zsh.slot[s] = pipe_alloc(p, MT_MEM_PARAMS, len[s])))
            return MT_ENOMEM;
    for (int q = 0; q < tr->nparams; q++) {
        const MtParam *t = &tr->table[q];
        int i = p->zidx[t->unit];
        if (i < 0)
            continue;
        int64_t b, e, at = mt_pipe_piece(p, q, 0, &b, &e); /* where the tensor sits in the stage */
        int64_t cl = mt_shard_chunk_lo(m, i), x = at > cl ? at : cl;
        int64_t y = at + t->numel < cl + m->chunk[i] ? at + t->numel : cl + m->chunk[i];
        if (x < y)
            mt_trainer_param_init(tr, q, x - at, y - at, tr->params + m->shard_off[i] + (x - cl));
    }
    return MT_OK;
}

/* ---- FSDP: units gathered into slots ---- */

static void start_gather(MtPipe *p, int u)
{
    mt_sharded_slot_start(&p->zsh, slot_of(p, u), p->zidx[u], u, p->tr->params);
}

/* Unit u's parameters in its slot and the views on them, then the gather of `next` (the
 * unit the pass needs after u; -1 none) started.  A unit stays in its slot until another
 * takes the slot: a stage of one or two blocks gathers each unit once per step. */
void pipe_params_need(MtPipe *p, int u, int next)
{
    if (!fsdp(p))
        return;
    int s = slot_of(p, u);
    start_gather(p, u);
    mt_weights_view_unit(&p->tr->tc.cfg, p->tr->table, p->tr->nparams, u, mt_sharded_slot_wait(&p->zsh, s), &p->w);
    if (next >= 0 && slot_of(p, next) != s)
        start_gather(p, next);
}

/* after the update: every slot holds old parameters */
void pipe_params_release(MtPipe *p) { mt_sharded_slot_release(&p->zsh); }

/* Round-robin: the leaf's units reduce-scattered over the copies (this round's leaves, a
 * subtree; with hybrid sharding then summed over the replicas) into the tree over rounds. */
void pipe_leaf_reduce(MtPipe *p, MtPipeChunk *ch)
{
    if (!rr(p))
        return;
    const MtShardMap *m = &p->zmap;
    float *dst = p->sbuf[ch->plan[ch->tstep].buf];
    for (int i = ch->zu0; i < ch->zu1; i++)
        mt_sharded_reduce(&p->zsh, i, p->tr->grads, dst + m->shard_off[i], NULL);
    int64_t a = m->shard_off[ch->zu0], b = m->shard_off[ch->zu1 - 1] + m->chunk[ch->zu1 - 1];
    ch->tstep = mt_accum_adds(ch->plan, p->nplan, ch->tstep, p->sbuf, a, b - a, NULL);
}

/* ZeRO: the first stage's share of the wte gradient (arrived whole) into its shard, then
 * every unit's block sums from the dp ranks' chunks, in flat order, into mine */
void pipe_zero_blocks(MtPipe *p, double *mine, MtRequest **wte)
{
    const MtShardMap *m = &p->zmap;
    double t = mt_now();
    pipe_req_done(p, wte, 1);
    pipe_clock_in(p, t);
    for (int i = 0; i < m->nunits && rr(p); i++) { /* contiguous runs: already in place */
        int64_t cl = mt_shard_chunk_lo(m, i), a = cl, b = cl + m->chunk[i];
        int64_t wlo = p->ch[0].loff, whi = wlo + p->ch[0].skip; /* the wte gradient on the first stage */
        a = a > wlo ? a : wlo;
        b = b < whi ? b : whi;
        if (p->zunit[i] == 0 && a < b)
            mt_be()->copy(pipe_gchunk(p, i) + (a - cl), p->tr->grads + a, b - a);
    }
    int64_t nb = m->shard_len / MT_NORM_BLOCK;
    double *all = p->zblocks + nb;
    mt_sharded_block_sums(&p->zsh, chunk_of, p, p->zblocks, all);
    for (int i = 0; i < m->nunits; i++)
        for (int r = 0; r < m->N; r++)
            memcpy(mine + p->unit_block[p->zunit[i]] + r * (m->chunk[i] / MT_NORM_BLOCK),
                   all + (int64_t)r * nb + m->shard_off[i] / MT_NORM_BLOCK,
                   sizeof(double) * (size_t)(m->chunk[i] / MT_NORM_BLOCK));
}

/* Contiguous runs: after the copy's whole tree, each unit reduce-scattered over the copies
 * through zstage and landed back in place in the stage's gradient (its chunk); with hybrid
 * sharding then summed over the replicas.  The wte part comes whole (and reduced) from the
 * last stage. */
void pipe_zero_reduce(MtPipe *p)
{
    MtTrainer *tr = p->tr;
    if (p->ch[0].embed) /* the wte part comes whole (and reduced) from the last stage */
        mt_be()->zero(tr->grads + p->ch[0].loff, p->ch[0].skip);
    for (int i = 0; i < p->zmap.nunits; i++) /* through zstage, back into the unit's chunk */
        mt_sharded_reduce(&p->zsh, i, tr->grads, pipe_gchunk(p, i), p->zstage);
}

/* the trainer-table flat index of element `at` of the rank's arrays */
static int64_t flat_of(const MtPipe *p, int64_t at)
{
    for (int k = 0; k < p->V; k++)
        if (at >= p->ch[k].loff && at < p->ch[k].loff + (p->ch[k].hi - p->ch[k].lo))
            return p->ch[k].lo + (at - p->ch[k].loff);
    MT_ASSERT(0, "element %lld is not in pipeline rank %d's arrays", (long long)at, p->rank);
    return -1;
}

/* shard unit i's parameters (FSDP: in the shard) and the table index of its chunk */
static float *param_of(void *ctx, int i)
{
    MtPipe *p = ctx;
    return fsdp(p) ? p->tr->params + p->zmap.shard_off[i] : p->tr->params + mt_shard_chunk_lo(&p->zmap, i);
}
static int64_t flat_at(void *ctx, int i) { return flat_of(ctx, mt_shard_chunk_lo(&((MtPipe *)ctx)->zmap, i)); }

/* ZeRO: clip and AdamW on the rank's chunks, then (ZeRO-1/2) each unit's parameters
 * all-gathered; FSDP keeps its shard and gathers units as passes need them */
void pipe_zero_update(MtPipe *p, double norm, float lr)
{
    MtTrainer *tr = p->tr;
    mt_sharded_adamw(&p->zsh, tr->table, tr->nparams, chunk_of, param_of, flat_at, p, tr->m, tr->v, &tr->tc.oc, lr,
                     (int)tr->step + 1, norm);
    if (fsdp(p))
        pipe_params_release(p);
    else
        mt_sharded_gather_params(&p->zsh, tr->params);
}

void mt_pipe_gather_state(MtPipe *p, float *params, float *m, float *v)
{
    const MtShardMap *z = &p->zmap;
    int64_t n = mt_pipe_stage_floats(p);
    if (!fsdp(p))
        mt_be()->download(params, p->tr->params, sizeof(float) * (size_t)n);
    if (p->o.zero_dp <= 1) {
        mt_be()->download(m, p->tr->m, sizeof(float) * (size_t)n);
        mt_be()->download(v, p->tr->v, sizeof(float) * (size_t)n);
        return;
    }
    for (int i = 0; i < z->nunits; i++) {
        if (fsdp(p))
            mt_allgather(p->c, MT_GROUP_DP_SHARD, p->tr->params + z->shard_off[i], params + z->lo[i], z->len[i]);
        mt_allgather(p->c, MT_GROUP_DP_SHARD, p->tr->m + z->shard_off[i], m + z->lo[i], z->len[i]);
        mt_allgather(p->c, MT_GROUP_DP_SHARD, p->tr->v + z->shard_off[i], v + z->lo[i], z->len[i]);
    }
}

int64_t mt_pipe_shard_piece(void *ctx, int q, int k, int64_t *begin, int64_t *end)
{
    const MtPipe *p = ctx;
    const MtParam *t = &p->tr->table[q];
    int64_t b, e, at = mt_pipe_piece(ctx, q, 0, &b, &e);
    if (k > 0 || at < 0)
        return -1;
    const MtShardMap *m = &p->zmap;
    for (int i = 0; i < m->nunits; i++) {
        if (p->zunit[i] != t->unit)
            continue;
        int64_t cl = mt_shard_chunk_lo(m, i), lo = at > cl ? at : cl;
        int64_t hi = at + t->numel < cl + m->chunk[i] ? at + t->numel : cl + m->chunk[i];
        if (lo >= hi)
            return -1;
        *begin = lo - at;
        *end = hi - at;
        return m->shard_off[i] + (lo - cl);
    }
    return -1;
}

