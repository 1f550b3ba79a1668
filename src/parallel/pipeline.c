/* pipeline.c - model and pipeline parallelism: one executor for any schedule's list. */
#include "mt_pipeline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mt_checkpoint.h"
#include "mt_kernels.h"
#include "mt_tp.h"

/* ---- layout ---- */

MtStatus mt_pipe_check(MtPipeOptions *o, const MtConfig *cfg, int P, const int *given, int ngiven)
{
    MtSchedule s = {o->kind, P, o->M, o->V};
    MT_TRY(mt_schedule_check(&s));
    int S = P * o->V;
    if (given && ngiven != S)
        return mt_error(MT_EINPUT, "--stage-layers lists %d stages, but --pp %d x --virtual-stages %d makes %d", ngiven,
                        P, o->V, S);
    if (!given && o->V > 1 && cfg->L % S != 0)
        return mt_error(MT_EINPUT, "--schedule interleaved: --pp %d x --virtual-stages %d = %d stages do not divide the "
                        "%d layers (or give --stage-layers)", P, o->V, S, cfg->L);
    o->given = given != NULL;
    return mt_stage_layers(cfg->L, S, given, o->stage_layers);
}

/* chunk c of rank: its stage, units and blocks */
static void chunk_units(const MtPipeOptions *o, int L, int P, int rank, int c, MtPipeChunk *ch, int *uf, int *ul)
{
    int S = P * o->V;
    ch->stage = c * P + rank;
    mt_stage_units(L, S, o->stage_layers, ch->stage, uf, ul);
    ch->embed = *uf == 0;
    ch->head = *ul == L + 1;
    ch->l0 = (*uf > 1 ? *uf : 1) - 1;
    ch->l1 = *ul < L ? *ul : L;
}

void mt_pipe_dp_options(MtPipeOptions *o, int dp, int dp_rank, int zero, int shard, int det, int B)
{
    int rr = mt_accum_round_robin(dp, zero, det, o->M * dp, B);
    o->first_mb = rr ? dp_rank : dp_rank * o->M;
    o->mb_stride = rr ? dp : 1;
    o->zero_dp = dp > 1 && zero > 0 ? dp : 0;
    o->zero = o->zero_dp ? zero : 0;
    o->zero_shard = shard > 0 ? shard : dp;
    o->det = det;
}

/* ZeRO over copies: S ranks shard the units; round-robin leaves; FSDP */
static int zero_S(const MtPipeOptions *o) { return o->zero_dp > 1 ? o->zero_shard : 0; }
static int rr(const MtPipe *p) { return p->o.mb_stride > 1; }
static int fsdp(const MtPipe *p) { return p->o.zero == 3; }
/* ZeRO: this rank's reduced chunk of shard unit i: in the round-robin tree's result, or
 * (contiguous runs) in place in the stage's gradient */
static float *gchunk(MtPipe *p, int i)
{
    return rr(p) ? p->sbuf[0] + p->zmap.shard_off[i] : p->tr->grads + mt_shard_chunk_lo(&p->zmap, i);
}

void mt_pipe_configure(MtTrainConfig *tc, const MtPipeOptions *o, int P, int rank)
{
    int np = mt_param_count(&tc->cfg);
    MtParam *t = malloc(sizeof(MtParam) * (size_t)np);
    MT_ASSERT(t, "out of memory");
    int S = zero_S(o);
    tc->unit_align = S > 0 ? mt_shard_align(S) : 1; /* ZeRO: chunks of whole norm blocks */
    int64_t total = mt_trainer_table(tc, t), local = 0; /* a tensor-parallel rank's slices with --tp */
    for (int c = 0; c < o->V; c++) {
        MtPipeChunk ch;
        int uf, ul;
        chunk_units(o, tc->cfg.L, P, rank, c, &ch, &uf, &ul);
        int64_t lo, hi = total, a, b; /* the span of units uf..ul, padding included */
        mt_unit_span(t, np, uf, &lo, &a);
        if (ul + 1 < tc->cfg.L + 2)
            mt_unit_span(t, np, ul + 1, &hi, &b);
        local += hi - lo;
    }
    free(t);
    tc->params_len = tc->grads_len = tc->optim_len = local;
    if (S > 0)
        tc->optim_len = local / S;
    if (S > 0 && o->zero == 3)
        tc->params_len = local / S; /* FSDP: the shard; the units are gathered into slots */
    tc->tree_span = 1; /* the executor keeps its own tree buffers */
    tc->acts_none = 1;
}

/* ---- set-up ---- */

/* the model units chunk ch holds: uf..ul */
static void pipe_units(const MtPipe *p, const MtPipeChunk *ch, int *uf, int *ul)
{
    *uf = ch->embed ? 0 : ch->l0 + 1;
    *ul = ch->head ? p->tr->tc.cfg.L + 1 : ch->l1;
}

static void poll(void *ctx); /* progresses the step's transfers (below) */

static int64_t nblocks(const MtTrainer *tr, int u)
{
    return (tr->unit_hi[u] - tr->unit_lo[u] + MT_NORM_BLOCK - 1) / MT_NORM_BLOCK;
}

static float *alloc_f(MtPipe *p, MtMemCat cat, int64_t n)
{
    return mt_mem_alloc(&p->tr->mem, cat, sizeof(float) * (size_t)(n > 0 ? n : 1));
}

static void free_f(MtPipe *p, MtMemCat cat, float *x, int64_t n)
{
    mt_mem_free(&p->tr->mem, cat, x, sizeof(float) * (size_t)(n > 0 ? n : 1));
}

/* receives outstanding at once in list order: landing buffers needed */
static int max_landing(const MtPipe *p)
{
    int held = 0, peak = 0;
    for (int i = 0; i < p->nlist; i++) {
        int k = p->list[i].kind;
        if ((k == MT_ACT_RECV_F || k == MT_ACT_RECV_B) && ++held > peak)
            peak = held;
        if ((k == MT_ACT_F && p->list[i].stage > 0) || (k == MT_ACT_B && p->list[i].stage < p->S - 1))
            held--;
    }
    return peak;
}

/* floats of a micro-batch's residual stream on this rank (what crosses a stage boundary:
 * with sequence parallelism a tp rank's rows), and of all its rows (the embedding's rows
 * that go from the first stage to the last) */
static int64_t erows(const MtPipe *p) { return (int64_t)p->tr->tc.micro * p->tr->tc.seq * p->tr->tc.cfg.C; }
static int64_t rows(const MtPipe *p)
{
    const MtTpCtx *tp = p->tr->tc.tp;
    return tp && tp->seqpar ? erows(p) / tp->N : erows(p);
}

int64_t mt_pipe_stash_floats(const MtPipe *p, int c)
{
    const MtTrainConfig *tc = &p->tr->tc;
    const MtPipeChunk *ch = &p->ch[c];
    if (!mt_schedule_split(p->o.kind))
        return 0;
    return mt_model_stash_floats(&tc->cfg, tc->micro, tc->seq, ch->l1 - ch->l0, ch->head, ch->embed);
}

/* the activation sets: the one backward scratch (with the recompute buffers), and a set of
 * chunk ch's blocks, embedding or received input, head */
static MtActsShape scratch_shape(const MtTrainConfig *tc)
{
    return (MtActsShape){0, 0, 0, 0, 0, 1, tc->recompute, 1, tc->tp};
}

static MtActsShape set_shape(const MtTrainConfig *tc, const MtPipeChunk *ch)
{
    return (MtActsShape){ch->l0, ch->l1, ch->embed, ch->head, !ch->embed, 0, tc->recompute, 0, tc->tp};
}

/* which FSDP slot unit u of a model of L blocks uses: embedding, head, blocks by parity */
static int unit_slot(int L, int u) { return u == 0 ? 0 : u == L + 1 ? 1 : 2 + (u & 1); }
static int slot_of(const MtPipe *p, int u) { return unit_slot(p->tr->tc.cfg.L, u); }

/* ZeRO over copies: the rank's units, in its arrays, sharded over its dp_shard group; the
 * reduced gradient's chunks (round-robin: with the tree over rounds); FSDP's slots and the
 * initialisation of its shard (a pure function of each element's index, as everywhere) */
static MtStatus zero_init(MtPipe *p)
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
    p->nsbuf = rr(p) ? 1 + mt_tree_temps(p->o.M) : 0;
    for (int i = 0; i < p->nsbuf; i++)
        if (!(p->sbuf[i] = alloc_f(p, MT_MEM_GRADS, m->shard_len)))
            return MT_ENOMEM;
    for (int i = 0; !rr(p) && i < nu; i++) /* contiguous: a unit's chunk lands back in place, via zstage */
        p->zstage_len = m->chunk[i] > p->zstage_len ? m->chunk[i] : p->zstage_len;
    if (p->zstage_len && !(p->zstage = alloc_f(p, MT_MEM_GRADS, p->zstage_len)))
        return MT_ENOMEM;
    p->zblocks = malloc(sizeof(double) * (size_t)(m->shard_len / MT_NORM_BLOCK) * (1 + S));
    if (!p->zblocks)
        return MT_ENOMEM;
    if (rr(p) && p->rank == p->P - 1 && !(p->loss_all = malloc(2 * sizeof(float) * (size_t)p->o.M * p->o.zero_dp)))
        return MT_ENOMEM;
    if (!fsdp(p))
        return MT_OK;
    for (int i = 0; i < nu; i++) {
        int s = slot_of(p, p->zunit[i]);
        p->pslot_len[s] = m->len[i] > p->pslot_len[s] ? m->len[i] : p->pslot_len[s];
    }
    for (int s = 0; s < 4; s++)
        if (p->pslot_len[s] && !(p->pslot[s] = alloc_f(p, MT_MEM_PARAMS, p->pslot_len[s])))
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

MtStatus mt_pipe_init(MtPipe *p, MtTrainer *tr, MtComm *c, const MtPipeOptions *o)
{
    memset(p, 0, sizeof *p);
    const MtTrainConfig *tc = &tr->tc;
    const MtConfig *cfg = &tc->cfg;
    p->tr = tr;
    p->c = c;
    p->o = *o;
    p->P = mt_comm_group_size(c, MT_GROUP_PP);
    p->rank = mt_comm_group_rank(c, MT_GROUP_PP);
    p->V = o->V;
    p->S = p->P * p->V;
    MT_ASSERT(p->P >= 2 && p->V <= MT_PIPE_MAX_CHUNKS, "a pipeline needs 2 or more stages (pp %d, %d chunks)", p->P, p->V);
    p->sched = (MtSchedule){o->kind, p->P, o->M, o->V};
    int M = o->M;
    int64_t VC = tr->table[0].numel; /* wte (a tp rank's vocabulary rows) */
    p->list = malloc(sizeof(MtAction) * (size_t)mt_schedule_max_actions(&p->sched));
    p->plan = malloc(sizeof(MtTreeStep) * (size_t)(2 * M));
    p->ltr = malloc(sizeof(MtTreeStep) * (size_t)(2 * M));
    p->leaf_loss = calloc((size_t)M, sizeof(float));
    if (!p->list || !p->plan || !p->ltr || !p->leaf_loss)
        goto oom;
    p->nlist = mt_schedule_build(&p->sched, p->rank, p->list);
    p->nplan = mt_tree_plan_blocks(M, mt_accum_block_size(tc), p->plan); /* --accum-blocks (mt_train.h) */
    for (int k = 0; k < M; k++) { /* the test hook's order: ((g0 + g1) + g2) + ... */
        p->ltr[k ? 2 * k - 1 : 0] = (MtTreeStep){k, k ? 1 : 0, -1};
        if (k)
            p->ltr[2 * k] = (MtTreeStep){-1, 0, 1};
    }
    /* chunks, their spans in the rank's arrays, their activation sets */
    MtActsShape scratch = scratch_shape(tc);
    if (mt_acts_alloc_shape(&p->scratch, &tr->mem, cfg, tc->micro, tc->seq, tc->threads, &scratch) != MT_OK)
        goto oom;
    int64_t off = 0;
    for (int k = 0; k < p->V; k++) {
        MtPipeChunk *ch = &p->ch[k];
        int uf, ul;
        chunk_units(o, cfg->L, p->P, p->rank, k, ch, &uf, &ul);
        ch->lo = tr->unit_lo[uf];
        ch->hi = tr->unit_hi[ul];
        ch->loff = off;
        ch->skip = ch->embed ? VC : 0; /* the first stage's wte gradient comes whole from the last */
        ch->plan = ch->stage == o->ltr_stage - 1 && M > 1 ? p->ltr : p->plan;
        off += ch->hi - ch->lo;
        for (int u = uf; u <= ul && !fsdp(p); u++) /* FSDP: views on the slots, as units are gathered */
            mt_weights_view_unit(cfg, tr->table, tr->nparams, u, tr->params + ch->loff + (tr->unit_lo[u] - ch->lo), &p->w);
        ch->nsets = mt_schedule_peak_sets(&p->sched, p->list, p->nlist, k);
        ch->sets = calloc((size_t)ch->nsets, sizeof(MtActs));
        ch->freelist = malloc(sizeof(int) * (size_t)(ch->nsets + 1));
        ch->slot = malloc(sizeof(int) * (size_t)M);
        ch->stash = calloc((size_t)ch->nsets + 1, sizeof(float *));
        if (!ch->sets || !ch->freelist || !ch->slot || !ch->stash)
            goto oom;
        MtActsShape sh = set_shape(tc, ch);
        for (int i = 0; i < ch->nsets; i++) {
            MtActs *a = &ch->sets[i];
            if (mt_acts_alloc_shape(a, &tr->mem, cfg, tc->micro, tc->seq, tc->threads, &sh) != MT_OK)
                goto oom;
            a->dres = p->scratch.dres; /* views of the one backward scratch */
            a->dln = p->scratch.dln;
            a->datty = p->scratch.datty;
            a->dqkv = p->scratch.dqkv;
            a->dfch = p->scratch.dfch;
            a->datt_scratch = p->scratch.datt_scratch;
            mt_acts_share(a, &p->scratch);
            a->poll = poll;
            a->poll_ctx = p;
            if (mt_schedule_split(o->kind) &&
                !(ch->stash[i] = alloc_f(p, MT_MEM_ACTS, mt_pipe_stash_floats(p, k))))
                goto oom;
        }
        /* initialisation: a pure function of (seed, name, element); FSDP: the shard, below */
        for (int q = 0; q < tr->nparams && !fsdp(p); q++) {
            const MtParam *pp = &tr->table[q];
            if (pp->unit >= uf && pp->unit <= ul)
                mt_trainer_param_init(tr, q, 0, pp->numel, tr->params + ch->loff + (pp->offset - ch->lo));
        }
    }
    MT_ASSERT(off == tc->grads_len, "pipeline arrays: %lld floats laid out, %lld allocated", (long long)off,
              (long long)tc->grads_len);
    /* gradient tree buffers (round-robin: the tree runs on shards, below) */
    p->ngbuf = 1 + mt_tree_temps_blocks(M, mt_accum_block_size(tc));
    p->gbuf[0] = tr->grads;
    for (int i = 1; i < p->ngbuf && !rr(p); i++)
        if (!(p->gbuf[i] = alloc_f(p, MT_MEM_GRADS, off)))
            goto oom;
    /* the last rank's tied embedding: replica, moments, its tree, the H_k awaiting rows */
    if (p->rank == p->P - 1) {
        if (!(p->wte = alloc_f(p, MT_MEM_PARAMS, VC)) || !(p->wte_m = alloc_f(p, MT_MEM_OPTIM, VC)) ||
            !(p->wte_v = alloc_f(p, MT_MEM_OPTIM, VC)))
            goto oom;
        mt_trainer_param_init(tr, 0, 0, VC, p->wte);
        p->w.wte = p->wte;
        /* its tree's buffers; a block's later leaves are added from their H slot (no leaf buffer) */
        p->nwbuf = p->ngbuf - (mt_accum_block_size(tc) > 1);
        for (int i = 0; i < p->nwbuf; i++)
            if (!(p->wbuf[i] = alloc_f(p, MT_MEM_GRADS, VC)))
                goto oom;
        p->nh = mt_schedule_peak_wte(&p->sched, p->list, p->nlist);
        p->hslot = calloc((size_t)p->nh, sizeof(float *));
        p->eland = calloc((size_t)p->nh, sizeof(float *));
        p->ereq = calloc((size_t)p->nh, sizeof(MtRequest *));
        p->h_mb = malloc(sizeof(int) * (size_t)p->nh);
        p->e_posted = calloc((size_t)p->nh, sizeof(int));
        if (!p->hslot || !p->eland || !p->ereq || !p->h_mb || !p->e_posted)
            goto oom;
        for (int i = 0; i < p->nh; i++)
            if (!(p->hslot[i] = alloc_f(p, MT_MEM_GRADS, VC)) || !(p->eland[i] = alloc_f(p, MT_MEM_OTHER, erows(p))))
                goto oom;
    }
    if (p->rank == 0 && tc->tp && tc->tp->seqpar && !(p->erows = alloc_f(p, MT_MEM_OTHER, erows(p))))
        goto oom;
    /* transfers: landing buffers for the receives outstanding at once, one buffer per send */
    p->nland = max_landing(p);
    for (int i = 0; i < p->nlist; i++)
        p->nsend += p->list[i].kind == MT_ACT_SEND_F || p->list[i].kind == MT_ACT_SEND_B ||
                    p->list[i].kind == MT_ACT_SEND_E;
    p->land = calloc((size_t)p->nland + 1, sizeof(float *));
    p->land_req = calloc((size_t)p->nland + 1, sizeof(MtRequest *));
    p->land_key = malloc(sizeof(int) * ((size_t)p->nland + 1));
    p->sendb = calloc((size_t)p->nsend + 1, sizeof(float *));
    p->send_req = calloc((size_t)p->nsend + 1, sizeof(MtRequest *));
    if (!p->land || !p->land_req || !p->land_key || !p->sendb || !p->send_req)
        goto oom;
    for (int i = 0; i < p->nland; i++)
        if (!(p->land[i] = alloc_f(p, MT_MEM_OTHER, rows(p))))
            goto oom;
    for (int i = 0; i < p->nsend; i++)
        if (!(p->sendb[i] = alloc_f(p, MT_MEM_OTHER, erows(p)))) /* the embedding's rows are the largest */
            goto oom;
    /* who owns each unit's norm blocks, and where they sit in its list of block sums */
    for (int r = 0; r < p->P; r++) {
        int64_t at = 0;
        for (int k = 0; k < p->V; k++) {
            MtPipeChunk ch;
            int uf, ul;
            chunk_units(o, cfg->L, p->P, r, k, &ch, &uf, &ul);
            for (int u = uf; u <= ul; u++) {
                p->unit_rank[u] = r;
                p->unit_block[u] = at;
                at += nblocks(tr, u);
            }
        }
        p->max_blocks = at > p->max_blocks ? at : p->max_blocks;
    }
    p->block_sums = malloc(sizeof(double) * (size_t)(p->max_blocks + 1) * p->P);
    p->rank_times = malloc(sizeof(int64_t) * 3 * (size_t)mt_comm_size(c));
    for (int u = 0; u < MT_MAX_UNITS; u++)
        p->zidx[u] = -1;
    for (int s = 0; s < 4; s++)
        p->slot_unit[s] = -1;
    if (zero_S(o) > 0 && zero_init(p) != MT_OK)
        goto oom;
    if (tc->tp) /* tp_norm_and_loss: mine, every stage's, the tensors', every tp rank's */
        p->tparts = malloc(sizeof(double) * (size_t)(tr->nparams + 1) * (1 + p->P + 1 + tc->tp->N));
    if (!p->block_sums || !p->rank_times || (tc->tp && !p->tparts))
        goto oom;
    return MT_OK;
oom:
    mt_pipe_free(p);
    return mt_error(MT_ENOMEM, "cannot allocate the pipeline stage's buffers");
}

void mt_pipe_free(MtPipe *p)
{
    if (!p->tr)
        return;
    int64_t VC = p->tr->table[0].numel;
    for (int k = 0; k < p->V; k++) {
        MtPipeChunk *ch = &p->ch[k];
        for (int i = 0; ch->sets && i < ch->nsets; i++)
            mt_acts_free(&ch->sets[i], &p->tr->mem);
        for (int i = 0; ch->stash && i < ch->nsets; i++)
            if (ch->stash[i])
                free_f(p, MT_MEM_ACTS, ch->stash[i], mt_pipe_stash_floats(p, k));
        free(ch->stash);
        free(ch->sets);
        free(ch->freelist);
        free(ch->slot);
    }
    mt_acts_free(&p->scratch, &p->tr->mem);
    for (int i = 1; i < p->ngbuf; i++)
        if (p->gbuf[i])
            free_f(p, MT_MEM_GRADS, p->gbuf[i], p->tr->tc.grads_len);
    if (p->wte) {
        free_f(p, MT_MEM_PARAMS, p->wte, VC);
        free_f(p, MT_MEM_OPTIM, p->wte_m, VC);
        free_f(p, MT_MEM_OPTIM, p->wte_v, VC);
    }
    for (int i = 0; i < p->nwbuf; i++)
        free_f(p, MT_MEM_GRADS, p->wbuf[i], VC);
    for (int i = 0; i < p->nh; i++) {
        free_f(p, MT_MEM_GRADS, p->hslot ? p->hslot[i] : NULL, VC);
        free_f(p, MT_MEM_OTHER, p->eland ? p->eland[i] : NULL, erows(p));
    }
    for (int i = 0; i < p->nland; i++)
        free_f(p, MT_MEM_OTHER, p->land[i], rows(p));
    for (int i = 0; i < p->nsend; i++)
        free_f(p, MT_MEM_OTHER, p->sendb[i], erows(p));
    free(p->hslot);
    free(p->eland);
    free(p->ereq);
    free(p->h_mb);
    free(p->e_posted);
    free(p->land);
    free(p->land_req);
    free(p->land_key);
    free(p->sendb);
    free(p->send_req);
    free(p->list);
    free(p->plan);
    free(p->ltr);
    free(p->leaf_loss);
    free(p->block_sums);
    free(p->tparts);
    if (p->erows)
        free_f(p, MT_MEM_OTHER, p->erows, erows(p));
    free(p->zblocks);
    for (int i = 0; i < p->nsbuf; i++)
        if (p->sbuf[i])
            free_f(p, MT_MEM_GRADS, p->sbuf[i], p->zmap.shard_len);
    if (p->zstage)
        free_f(p, MT_MEM_GRADS, p->zstage, p->zstage_len);
    for (int s = 0; s < 4; s++)
        if (p->pslot[s])
            free_f(p, MT_MEM_PARAMS, p->pslot[s], p->pslot_len[s]);
    free(p->loss_all);
    free(p->rank_times);
    memset(p, 0, sizeof *p);
}

/* ---- transfers ---- */

#define TAG_F 0
#define TAG_B 1
#define TAG_E 2
#define TAG_WTE 3
#define SEND_SPIN_S 3e-4 /* the most a send waits for its transfer to finish at once */
static int tag(int kind, int mb) { return kind * 8192 + mb; }
static int key(const MtAction *a) { return (a->kind * MT_MAX_STAGES + a->stage) * 4096 + a->mb; }

static double clock_in(MtPipe *p, double since)
{
    double t = mt_now();
    p->comm_s += t - since;
    return t;
}

/* whether *r has completed (NULL); waits if `wait`.  A completed request is released. */
static int req_done(MtPipe *p, MtRequest **r, int wait)
{
    if (*r && wait)
        mt_wait(p->c, *r);
    else if (*r && !mt_test(p->c, *r))
        return 0;
    *r = NULL;
    return 1;
}

/* MPI moves a transfer only inside MPI calls (and a large one needs both sides to call):
 * the compute calls this between blocks, so a peer waiting on us is served within a block. */
static void progress(MtPipe *p)
{
    for (int i = 0; i < p->nland; i++)
        if (p->land_key[i] >= 0)
            req_done(p, &p->land_req[i], 0);
    for (int i = 0; i < p->send_next; i++)
        req_done(p, &p->send_req[i], 0);
    for (int h = 0; h < p->nh; h++)
        if (p->h_mb[h] >= 0)
            req_done(p, &p->ereq[h], 0);
}

static void poll(void *ctx) { progress(ctx); }

static void post_land(MtPipe *p, const MtAction *a)
{
    int i = 0;
    while (i < p->nland && p->land_key[i] >= 0)
        i++;
    MT_ASSERT(i < p->nland, "no landing buffer free for %d receives", p->nland);
    int from = a->kind == MT_ACT_RECV_F ? a->stage - 1 : a->stage + 1;
    double t = mt_now();
    p->land_key[i] = key(a);
    p->land_req[i] = mt_irecv(p->c, MT_GROUP_PP, p->land[i], rows(p), from % p->P,
                              tag(a->kind == MT_ACT_RECV_F ? TAG_F : TAG_B, a->mb));
    progress(p);
    clock_in(p, t);
}

/* waits for the receive that feeds compute action a; returns its landing buffer index */
static int take_land(MtPipe *p, int recv_kind, const MtAction *a)
{
    MtAction r = {recv_kind, a->stage, a->mb};
    int k = key(&r);
    for (int i = 0; i < p->nland; i++)
        if (p->land_key[i] == k) {
            double t = mt_now();
            req_done(p, &p->land_req[i], 1);
            clock_in(p, t);
            return i;
        }
    MT_ASSERT(0, "no receive was posted for stage %d micro-batch %d", a->stage, a->mb);
    return -1;
}

static void send(MtPipe *p, MtGroupKind g, int peer, int t, const float *x, int64_t n)
{
    MT_ASSERT(p->send_next < p->nsend, "more sends than the list holds");
    float *b = p->sendb[p->send_next];
    memcpy(b, x, sizeof(float) * (size_t)n);
    double t0 = mt_now();
    p->send_req[p->send_next++] = mt_isend(p->c, g, b, n, peer, t);
    /* A peer already waiting for this gets it now, not at our next poll a kernel later (a
     * large message needs the sender's progress after the receiver answers): measured here,
     * 1F1B's bubble fell by about 1.5 points (4 of 4 interleaved pairs). */
    while (!req_done(p, &p->send_req[p->send_next - 1], 0) && mt_now() < t0 + SEND_SPIN_S)
        ;
    progress(p);
    clock_in(p, t0);
}

/* ---- FSDP: units gathered into slots ---- */

static void start_gather(MtPipe *p, int u)
{
    int s = slot_of(p, u), i = p->zidx[u];
    if (p->slot_unit[s] == u)
        return;
    MT_ASSERT(!p->slot_req[s] && i >= 0, "FSDP slot %d is still being gathered (unit %d)", s, u);
    double t = mt_now();
    p->slot_req[s] = mt_iallgather(p->c, MT_GROUP_DP_SHARD, p->tr->params + p->zmap.shard_off[i], p->pslot[s],
                                   p->zmap.len[i]);
    p->slot_unit[s] = u;
    clock_in(p, t);
}

/* Unit u's parameters in its slot and the views on them, then the gather of `next` (the
 * unit the pass needs after u; -1 none) started.  A unit stays in its slot until another
 * takes the slot: a stage of one or two blocks gathers each unit once per step. */
static void params_need(MtPipe *p, int u, int next)
{
    if (!fsdp(p))
        return;
    int s = slot_of(p, u);
    start_gather(p, u);
    if (p->slot_req[s]) {
        double t = mt_now();
        req_done(p, &p->slot_req[s], 1);
        clock_in(p, t);
    }
    mt_weights_view_unit(&p->tr->tc.cfg, p->tr->table, p->tr->nparams, u, p->pslot[s], &p->w);
    if (next >= 0 && slot_of(p, next) != s)
        start_gather(p, next);
}

/* after the update: every slot holds old parameters */
static void params_release(MtPipe *p)
{
    for (int s = 0; s < 4; s++) {
        MT_ASSERT(!p->slot_req[s], "FSDP slot %d still being gathered at the end of the step", s);
        p->slot_unit[s] = -1;
    }
}

/* the unit after block l's in a forward through chunk ch (-1: none) */
static int next_forward(int L, const MtPipeChunk *ch, int l)
{
    return l + 1 < ch->l1 ? l + 2 : ch->head ? L + 1 : -1;
}

/* ---- the tied embedding on the last rank ---- */

static const int32_t *tokens_of(const MtPipe *p, int mb)
{
    return p->tr->inputs + (int64_t)mb * p->tr->tc.micro * p->tr->tc.seq;
}

/* Completes the due E (their place in the list has passed) in micro-batch order: the rows
 * of k added to H_k, the leaf into the wte tree.  Waits for the first `wait` of them, then
 * takes only those already arrived. */
static void poll_e(MtPipe *p, int wait)
{
    const MtTrainConfig *tc = &p->tr->tc;
    int64_t VC = p->tr->table[0].numel;
    while (p->e_next < p->e_due) {
        int h = 0;
        while (h < p->nh && p->h_mb[h] != p->e_next)
            h++;
        MT_ASSERT(h < p->nh && p->e_posted[h], "micro-batch %d's head gradient is not awaiting its rows", p->e_next);
        double t = mt_now();
        int ok = req_done(p, &p->ereq[h], wait > 0);
        clock_in(p, t);
        if (!ok)
            return;
        p->e_posted[h] = 0;
        if (tc->tp) { /* a tensor-parallel rank adds the rows of its vocabulary slice */
            MtTpLocal lo = mt_tp_local(&tc->cfg, tc->tp, tc->micro * tc->seq);
            mt_tp_embed_backward_rows(p->hslot[h], p->eland[h], tokens_of(p, p->e_next), lo.v0, lo.Vl,
                                      tc->micro * tc->seq, tc->cfg.C);
        } else
            mt_encoder_backward(p->hslot[h], NULL, p->eland[h], tokens_of(p, p->e_next), tc->micro, tc->seq, tc->cfg.C);
        const MtTreeStep *ts = &p->plan[p->wtstep];
        MT_ASSERT(ts->leaf == p->e_next, "embedding leaf %d out of order (plan expects %d)", p->e_next, ts->leaf);
        float *bufs[MT_TREE_MAX_BUFS]; /* the tree's buffers, the leaf buffer being the H slot */
        memcpy(bufs, p->wbuf, sizeof(float *) * (size_t)p->nwbuf);
        if (ts->buf < p->nwbuf)
            memcpy(p->wbuf[ts->buf], p->hslot[h], sizeof(float) * (size_t)VC);
        else
            bufs[ts->buf] = p->hslot[h];
        if (rr(p)) { /* round-robin: the round's leaves over the copies (a subtree), at this E */
            t = mt_now();
            mt_allreduce(p->c, MT_GROUP_DP, bufs[ts->buf], VC, p->o.det);
            clock_in(p, t);
        }
        p->wtstep = mt_accum_adds(p->plan, p->nplan, p->wtstep, bufs, 0, VC);
        p->h_mb[h] = -1;
        p->e_next++;
        wait--;
    }
}

static int take_hslot(MtPipe *p, int mb)
{
    for (;;) {
        for (int h = 0; h < p->nh; h++)
            if (p->h_mb[h] < 0) {
                p->h_mb[h] = mb;
                return h;
            }
        MT_ASSERT(p->e_next < p->e_due, "all %d head-gradient slots wait for rows not yet due", p->nh);
        poll_e(p, 1); /* an E whose place in the list has passed: waiting on it cannot deadlock */
    }
}

/* ---- compute (timed on the trace's clock, common to the ranks) ---- */

static void busy(MtPipe *p, double t0, int kind, const MtAction *a)
{
    double t1 = mt_comm_clock(p->c);
    mt_comm_trace_compute(p->c, kind, a->stage, a->mb, p->tr->step, t0, t1);
    p->kind_s[a->stage / p->P][kind] += t1 - t0;
    p->kind_n[a->stage / p->P][kind]++;
    if (p->t_first < 0)
        p->t_first = t0;
    p->t_last = t1;
    p->busy_s += t1 - t0;
}

static void forward(MtPipe *p, const MtAction *a)
{
    const MtTrainConfig *tc = &p->tr->tc;
    MtPipeChunk *ch = &p->ch[a->stage / p->P];
    int land = ch->embed ? -1 : take_land(p, MT_ACT_RECV_F, a);
    MT_ASSERT(ch->nfree > 0, "no activation set free on stage %d", a->stage);
    int slot = ch->freelist[--ch->nfree];
    ch->slot[a->mb] = slot;
    MtActs *s = &ch->sets[slot];
    int64_t off = (int64_t)a->mb * tc->micro * tc->seq;
    double t0 = mt_comm_clock(p->c);
    if (ch->embed) {
        params_need(p, 0, ch->l0 + 1);
        mt_model_embed_forward(&tc->cfg, &p->w, s, p->tr->inputs + off);
    } else {
        memcpy(s->encoded, p->land[land], sizeof(float) * (size_t)rows(p));
        p->land_key[land] = -1;
    }
    const float *x = s->encoded;
    for (int l = ch->l0; l < ch->l1; l++) {
        params_need(p, l + 1, next_forward(tc->cfg.L, ch, l));
        mt_model_block_forward(&tc->cfg, &p->w, s, l, x);
        x = s->res3[l];
        progress(p);
    }
    if (ch->head) {
        params_need(p, tc->cfg.L + 1, -1);
        double step_tokens = (double)tc->batch * tc->seq;
        double sum = mt_model_head_forward(&tc->cfg, &p->w, s, x, p->tr->targets + off, (float)(1.0 / step_tokens));
        p->leaf_loss[a->mb] = (float)(sum / step_tokens);
    }
    busy(p, t0, MT_ACT_F, a);
}

/* The leaf of (chunk, micro-batch) starts: its tree buffer's span zeroed, gradient views
 * on it (and on the head's H_k slot on the last rank). */
static float *leaf_begin(MtPipe *p, MtPipeChunk *ch, int mb, MtWeights *gv)
{
    const MtTrainer *tr = p->tr;
    const MtConfig *cfg = &tr->tc.cfg;
    const MtTreeStep *ts = &ch->plan[ch->tstep];
    MT_ASSERT(ts->leaf == mb, "stage %d: gradient of micro-batch %d out of order (tree expects %d)", ch->stage, mb,
              ts->leaf);
    float *g = rr(p) ? tr->grads : p->gbuf[ts->buf]; /* round-robin: the leaf buffer, reduced at leaf_end */
    if (ch->embed) /* wpe adds its rows (wte comes whole from the last rank); the rest is assigned */
        memset(g + ch->loff + ch->skip, 0, sizeof(float) * (size_t)(tr->unit_hi[0] - ch->lo - ch->skip));
    int uf, ul;
    pipe_units(p, ch, &uf, &ul);
    for (int u = uf; u <= ul; u++)
        mt_weights_view_unit(cfg, tr->table, tr->nparams, u, g + ch->loff + (tr->unit_lo[u] - ch->lo), gv);
    gv->fresh = 1;
    if (ch->head) {
        int h = take_hslot(p, mb);
        memset(p->hslot[h], 0, sizeof(float) * (size_t)tr->table[0].numel);
        gv->wte = p->hslot[h];
    }
    return g;
}

static void leaf_end(MtPipe *p, MtPipeChunk *ch, int mb)
{
    if (!rr(p))
        ch->tstep = mt_accum_adds(ch->plan, p->nplan, ch->tstep, p->gbuf, ch->loff + ch->skip, ch->hi - ch->lo - ch->skip);
    ch->freelist[ch->nfree++] = ch->slot[mb];
}

/* Round-robin: the leaf's units reduce-scattered over the copies (this round's leaves, a
 * subtree; with hybrid sharding then summed over the replicas) into the tree over rounds. */
static void leaf_reduce(MtPipe *p, MtPipeChunk *ch)
{
    if (!rr(p))
        return;
    const MtShardMap *m = &p->zmap;
    float *dst = p->sbuf[ch->plan[ch->tstep].buf];
    int replicas = mt_comm_group_size(p->c, MT_GROUP_DP_REPLICA);
    double t = mt_now();
    for (int i = ch->zu0; i < ch->zu1; i++) {
        mt_reduce_scatter(p->c, MT_GROUP_DP_SHARD, p->tr->grads + m->lo[i], dst + m->shard_off[i], m->len[i], p->o.det);
        if (replicas > 1)
            mt_allreduce(p->c, MT_GROUP_DP_REPLICA, dst + m->shard_off[i], m->chunk[i], p->o.det);
    }
    clock_in(p, t);
    int64_t a = m->shard_off[ch->zu0], b = m->shard_off[ch->zu1 - 1] + m->chunk[ch->zu1 - 1];
    ch->tstep = mt_accum_adds(ch->plan, p->nplan, ch->tstep, p->sbuf, a, b - a);
}

static const float *block_input(const MtPipeChunk *ch, const MtActs *s, int l)
{
    return l > ch->l0 ? s->res3[l - 1] : s->encoded;
}

/* the stash of set `slot`: blocks l0.., then the head's, then the embedding's */
static float *stash(const MtPipe *p, const MtPipeChunk *ch, int slot, int part)
{
    int64_t NC = erows(p); /* a block's stash holds gathered rows (mt_tp.h) */
    return ch->stash[slot] + (part >= 0 ? 11 * NC * (part - ch->l0) : 11 * NC * (ch->l1 - ch->l0) + (part == -2 ? NC * ch->head : 0));
}
#define STASH_HEAD -1
#define STASH_EMBED -2

/* backward (or, split, its input half B) of one micro-batch on one chunk */
static void backward(MtPipe *p, const MtAction *a, int split)
{
    const MtTrainer *tr = p->tr;
    const MtConfig *cfg = &tr->tc.cfg;
    MtPipeChunk *ch = &p->ch[a->stage / p->P];
    int land = ch->head ? -1 : take_land(p, MT_ACT_RECV_B, a);
    int slot = ch->slot[a->mb];
    MtActs *s = &ch->sets[slot];
    MtWeights gv;
    if (!split)
        leaf_begin(p, ch, a->mb, &gv);
    double t0 = mt_comm_clock(p->c);
    const float *xh = ch->l1 > ch->l0 ? s->res3[ch->l1 - 1] : s->encoded;
    if (ch->head)
        params_need(p, cfg->L + 1, ch->l1);
    if (!ch->head) {
        memcpy(s->dres, p->land[land], sizeof(float) * (size_t)rows(p));
        p->land_key[land] = -1;
    } else if (split)
        mt_model_head_backward_input(cfg, &p->w, s, xh, stash(p, ch, slot, STASH_HEAD));
    else
        mt_model_head_backward(cfg, &p->w, &gv, s, xh);
    progress(p);
    for (int l = ch->l1 - 1; l >= ch->l0; l--) {
        params_need(p, l + 1, l > ch->l0 ? l : -1);
        if (split)
            mt_model_block_backward_input(cfg, &p->w, s, l, block_input(ch, s, l), stash(p, ch, slot, l));
        else
            mt_model_block_backward(cfg, &p->w, &gv, s, l, block_input(ch, s, l));
        progress(p);
    }
    if (ch->embed && split) { /* every row (gathered over tp with sequence parallelism): W's wpe, SEND_E */
        const float *d = tr->tc.tp ? mt_tp_all_rows(cfg, s) : s->dres;
        memcpy(stash(p, ch, slot, STASH_EMBED), d, sizeof(float) * (size_t)erows(p));
        if (p->erows)
            memcpy(p->erows, d, sizeof(float) * (size_t)erows(p));
    }
    else if (ch->embed) { /* wpe here; the token rows go to the last rank (SEND_E) */
        mt_model_embed_backward(cfg, NULL, gv.wpe, s, tokens_of(p, a->mb));
        if (p->erows) /* sequence parallelism: all rows, as the embedding's backward gathered them */
            memcpy(p->erows, s->tpfull, sizeof(float) * (size_t)erows(p));
    }
    if (!split)
        leaf_end(p, ch, a->mb);
    busy(p, t0, MT_ACT_B, a);
    if (!split)
        leaf_reduce(p, ch);
}

/* the weight half W of a split backward: the leaf's parameter gradients from the stash */
static void weights(MtPipe *p, const MtAction *a)
{
    const MtTrainConfig *tc = &p->tr->tc;
    MtPipeChunk *ch = &p->ch[a->stage / p->P];
    int slot = ch->slot[a->mb];
    MtActs *s = &ch->sets[slot];
    MtWeights gv;
    leaf_begin(p, ch, a->mb, &gv);
    double t0 = mt_comm_clock(p->c);
    if (ch->head)
        mt_model_head_backward_weight(&tc->cfg, &gv, s, ch->l1 > ch->l0 ? s->res3[ch->l1 - 1] : s->encoded,
                                      stash(p, ch, slot, STASH_HEAD));
    progress(p);
    for (int l = ch->l1 - 1; l >= ch->l0; l--) {
        params_need(p, l + 1, l > ch->l0 ? l : -1); /* recomputation runs the block's forward */
        mt_model_block_backward_weight(&tc->cfg, &p->w, &gv, s, l, block_input(ch, s, l), stash(p, ch, slot, l));
        progress(p);
    }
    if (ch->embed)
        mt_encoder_backward(NULL, gv.wpe, stash(p, ch, slot, STASH_EMBED), tokens_of(p, a->mb), tc->micro, tc->seq,
                            tc->cfg.C);
    leaf_end(p, ch, a->mb);
    busy(p, t0, MT_ACT_W, a);
    leaf_reduce(p, ch);
}

static void run(MtPipe *p, const MtAction *a)
{
    int last = p->rank == p->P - 1;
    if (last)
        poll_e(p, 0);
    MtPipeChunk *ch = &p->ch[a->stage / p->P];
    switch (a->kind) {
    case MT_ACT_RECV_F:
    case MT_ACT_RECV_B:
        post_land(p, a);
        break;
    case MT_ACT_F:
        forward(p, a);
        break;
    case MT_ACT_B:
        backward(p, a, mt_schedule_split(p->sched.kind));
        break;
    case MT_ACT_W:
        weights(p, a);
        break;
    case MT_ACT_SEND_F:
        send(p, MT_GROUP_PP, (a->stage + 1) % p->P, tag(TAG_F, a->mb), ch->sets[ch->slot[a->mb]].res3[ch->l1 - 1],
             rows(p));
        break;
    case MT_ACT_SEND_B:
        send(p, MT_GROUP_PP, (a->stage - 1) % p->P, tag(TAG_B, a->mb), p->scratch.dres, rows(p));
        break;
    case MT_ACT_SEND_E:
        send(p, MT_GROUP_EMBED, 1, tag(TAG_E, a->mb), p->erows ? p->erows : p->scratch.dres, erows(p));
        break;
    case MT_ACT_RECV_E: {
        int h = 0;
        while (h < p->nh && p->h_mb[h] != a->mb)
            h++;
        MT_ASSERT(h < p->nh, "no head gradient of micro-batch %d awaits rows", a->mb);
        double t = mt_now();
        p->ereq[h] = mt_irecv(p->c, MT_GROUP_EMBED, p->eland[h], erows(p), 0, tag(TAG_E, a->mb));
        p->e_posted[h] = 1;
        clock_in(p, t);
        break;
    }
    case MT_ACT_E: /* round-robin: completed here, where every copy reduces it */
        p->e_due++;
        poll_e(p, rr(p) ? p->e_due - p->e_next : 0);
        break;
    default:
        MT_ASSERT(0, "the executor cannot run action kind %d yet", a->kind);
    }
}

/* ---- the step ---- */

/* the single-device norm: every unit's block sums in order, from whichever rank holds it;
 * the last rank's loss rides along.  The first stage sums its other units while the wte
 * gradient (*wte, in flight from the last rank) arrives. */
/* ZeRO: the first stage's share of the wte gradient (arrived whole) into its shard, then
 * every unit's block sums from the dp ranks' chunks, in flat order, into mine */
static void zero_blocks(MtPipe *p, double *mine, MtRequest **wte)
{
    const MtShardMap *m = &p->zmap;
    double t = mt_now();
    req_done(p, wte, 1);
    clock_in(p, t);
    for (int i = 0; i < m->nunits && rr(p); i++) { /* contiguous runs: already in place */
        int64_t cl = mt_shard_chunk_lo(m, i), a = cl, b = cl + m->chunk[i];
        int64_t wlo = p->ch[0].loff, whi = wlo + p->ch[0].skip; /* the wte gradient on the first stage */
        a = a > wlo ? a : wlo;
        b = b < whi ? b : whi;
        if (p->zunit[i] == 0 && a < b)
            memcpy(gchunk(p, i) + (a - cl), p->tr->grads + a, sizeof(float) * (size_t)(b - a));
    }
    int64_t nb = m->shard_len / MT_NORM_BLOCK;
    double *all = p->zblocks + nb;
    for (int i = 0; i < m->nunits; i++)
        mt_block_sumsq(gchunk(p, i), m->chunk[i], p->zblocks + m->shard_off[i] / MT_NORM_BLOCK);
    t = mt_now();
    mt_allgather(p->c, MT_GROUP_DP_SHARD, (const float *)p->zblocks, (float *)all, 2 * nb * m->N);
    clock_in(p, t);
    for (int i = 0; i < m->nunits; i++)
        for (int r = 0; r < m->N; r++)
            memcpy(mine + p->unit_block[p->zunit[i]] + r * (m->chunk[i] / MT_NORM_BLOCK),
                   all + (int64_t)r * nb + m->shard_off[i] / MT_NORM_BLOCK,
                   sizeof(double) * (size_t)(m->chunk[i] / MT_NORM_BLOCK));
}

static double norm_and_loss(MtPipe *p, float *loss, MtRequest **wte)
{
    MtTrainer *tr = p->tr;
    int64_t K = p->max_blocks + 1;
    double *mine = p->block_sums + (int64_t)p->rank * K;
    memset(mine, 0, sizeof(double) * (size_t)K);
    if (p->o.zero_dp > 1)
        zero_blocks(p, mine, wte);
    for (int pass = 0; pass < 2 && p->o.zero_dp <= 1; pass++) /* units other than the embedding, then the embedding */
        for (int k = 0; k < p->V; k++) {
            MtPipeChunk *ch = &p->ch[k];
            int uf, ul;
            pipe_units(p, ch, &uf, &ul);
            for (int u = uf; u <= ul; u++)
                if ((u == 0) == pass)
                    mt_block_sumsq(tr->grads + ch->loff + (tr->unit_lo[u] - ch->lo), tr->unit_hi[u] - tr->unit_lo[u],
                                   mine + p->unit_block[u]);
            if (pass == 0 && k == p->V - 1) {
                double t = mt_now();
                req_done(p, wte, 1);
                clock_in(p, t);
            }
        }
    if (p->rank == p->P - 1)
        mine[K - 1] = p->loss;
    double t = mt_now();
    mt_allgather(p->c, MT_GROUP_PP, (const float *)mine, (float *)p->block_sums, 2 * K * p->P);
    clock_in(p, t);
    double total = 0.0;
    for (int u = 0; u < tr->nunits; u++) {
        const double *b = p->block_sums + (int64_t)p->unit_rank[u] * K + p->unit_block[u];
        for (int64_t i = 0; i < nblocks(tr, u); i++)
            total += b[i];
    }
    *loss = (float)p->block_sums[(int64_t)(p->P - 1) * K + K - 1];
    return total;
}

/* With tensor parallelism, its norm (mt_tp.h): each tensor's part (K/N sub-slices of a
 * split one) from the stage that holds it, gathered over pp with the loss, then combined
 * over the tp group as one tp rank does: the bits of one device with K blocks. */
static double tp_norm_and_loss(MtPipe *p, float *loss, MtRequest **wte)
{
    MtTrainer *tr = p->tr;
    const MtTpCtx *tp = tr->tc.tp;
    int n = tr->nparams;
    double *mine = p->tparts, *all = mine + (n + 1), *parts = all + (int64_t)(n + 1) * p->P, *tp_all = parts + n;
    double t = mt_now();
    req_done(p, wte, 1); /* the first stage's wte gradient */
    clock_in(p, t);
    memset(mine, 0, sizeof(double) * (size_t)(n + 1));
    double *blocks = p->block_sums + (int64_t)p->rank * (p->max_blocks + 1);
    if (p->o.zero_dp > 1) /* ZeRO: the reduced gradient is in the dp ranks' chunks */
        zero_blocks(p, blocks, wte);
    for (int q = 0; q < n; q++) {
        int64_t b, e, at = mt_pipe_piece(p, q, 0, &b, &e);
        if (at < 0)
            continue;
        const MtParam *t = &tr->table[q];
        if (p->o.zero_dp > 1) { /* one slice per rank (K = N): its blocks in order (every tensor starts one) */
            const double *bs = blocks + p->unit_block[t->unit] + (t->offset - tr->unit_lo[t->unit]) / MT_NORM_BLOCK;
            for (int64_t k = 0; k * MT_NORM_BLOCK < t->numel; k++)
                mine[q] += bs[k];
            continue;
        }
        MtParam here = *t;
        here.offset = at;
        mt_tp_sumsq_parts(&here, 1, tr->grads, tp->K / tp->N, &mine[q]);
    }
    mine[n] = p->rank == p->P - 1 ? p->loss : 0.0;
    t = mt_now(); /* doubles travel as pairs of floats, bits untouched */
    mt_allgather(p->c, MT_GROUP_PP, (const float *)mine, (float *)all, 2 * (int64_t)(n + 1) * p->P);
    for (int q = 0; q < n; q++)
        parts[q] = all[(int64_t)p->unit_rank[tr->table[q].unit] * (n + 1) + q];
    *loss = (float)all[(int64_t)(p->P - 1) * (n + 1) + n];
    if (tp->N > 1)
        mt_allgather(p->c, MT_GROUP_TP, (const float *)parts, (float *)tp_all, 2 * (int64_t)n * tp->N);
    clock_in(p, t);
    return mt_tp_sumsq_combine(tr->table, n, tp->N > 1 ? tp_all : parts, tp->N);
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

/* ZeRO: clip and AdamW on the rank's chunks, then (ZeRO-1/2) each unit's parameters
 * all-gathered; FSDP keeps its shard and gathers units as passes need them */
static void zero_update(MtPipe *p, double norm, float lr)
{
    MtTrainer *tr = p->tr;
    const MtOptimConfig *oc = &tr->tc.oc;
    const MtShardMap *m = &p->zmap;
    for (int i = 0; i < m->nunits; i++) {
        int64_t cl = mt_shard_chunk_lo(m, i), flat = flat_of(p, cl);
        float *param = fsdp(p) ? tr->params + m->shard_off[i] : tr->params + cl;
        mt_grad_clip(gchunk(p, i), m->chunk[i], oc->grad_clip, norm);
        mt_adamw_range(tr->table, tr->nparams, flat, flat + m->chunk[i], param, gchunk(p, i),
                       tr->m + m->shard_off[i], tr->v + m->shard_off[i], oc, lr, (int)tr->step + 1);
    }
    if (fsdp(p)) {
        params_release(p);
        return;
    }
    double t = mt_now();
    for (int i = 0; i < m->nunits; i++)
        mt_allgather(p->c, MT_GROUP_DP_SHARD, tr->params + mt_shard_chunk_lo(m, i), tr->params + m->lo[i], m->len[i]);
    clock_in(p, t);
}

int64_t mt_pipe_stage_floats(const MtPipe *p) { return p->tr->tc.grads_len; }

void mt_pipe_gather_state(MtPipe *p, float *params, float *m, float *v)
{
    const MtShardMap *z = &p->zmap;
    int64_t n = mt_pipe_stage_floats(p);
    if (!fsdp(p))
        memcpy(params, p->tr->params, sizeof(float) * (size_t)n);
    if (p->o.zero_dp <= 1) {
        memcpy(m, p->tr->m, sizeof(float) * (size_t)n);
        memcpy(v, p->tr->v, sizeof(float) * (size_t)n);
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

void mt_pipe_step(MtPipe *p, const MtTokens *data, MtStepStats *st)
{
    MtTrainer *tr = p->tr;
    const MtTrainConfig *tc = &tr->tc;
    const MtOptimConfig *oc = &tc->oc;
    int64_t VC = tr->table[0].numel;
    if (!rr(p))
        mt_batch_fill(data, tc->seed, tr->step, p->o.first_mb * tc->micro, p->o.M * tc->micro, tc->seq, tr->inputs,
                      tr->targets);
    for (int j = 0; rr(p) && j < p->o.M; j++) { /* round-robin: round j's micro-batch of this copy */
        int64_t at = (int64_t)j * tc->micro * tc->seq;
        mt_batch_fill(data, tc->seed, tr->step, (p->o.first_mb + j * p->o.mb_stride) * tc->micro, tc->micro, tc->seq,
                      tr->inputs + at, tr->targets + at);
    }
    if (rr(p) && p->ch[0].embed) /* the leaves' wte part stays zero: it comes whole from the last rank */
        memset(tr->grads + p->ch[0].loff, 0, sizeof(float) * (size_t)p->ch[0].skip);
    for (int k = 0; k < p->V; k++) {
        MtPipeChunk *ch = &p->ch[k];
        ch->nfree = ch->nsets;
        for (int i = 0; i < ch->nsets; i++)
            ch->freelist[i] = ch->nsets - 1 - i;
        ch->tstep = 0;
    }
    for (int i = 0; i < p->nland; i++)
        p->land_key[i] = -1;
    for (int h = 0; h < p->nh; h++)
        p->h_mb[h] = -1;
    p->wtstep = p->e_next = p->e_due = p->send_next = 0;
    p->comm_s = p->busy_s = 0.0;
    if (p->steps_run++ == 1) { /* the costs average the run's steps after its first (page faults) */
        memset(p->kind_s, 0, sizeof p->kind_s);
        memset(p->kind_n, 0, sizeof p->kind_n);
    }
    p->t_first = -1.0;
    for (int i = 0; i < p->nlist; i++)
        run(p, &p->list[i]);
    if (p->rank == p->P - 1)
        poll_e(p, p->o.M);
    MT_ASSERT(p->e_next == p->e_due && (p->rank != p->P - 1 || p->e_next == p->o.M),
              "%d of %d embedding leaves completed", p->e_next, p->o.M);
    double t = mt_now();
    for (int i = 0; i < p->send_next; i++)
        req_done(p, &p->send_req[i], 1);
    p->loss = p->rank == p->P - 1 ? mt_tree_plan_sum(p->plan, p->nplan, p->leaf_loss) : 0.0f; /* as the gradients */
    if (rr(p) && p->rank == p->P - 1) { /* the copies' leaf losses, back in the step's order */
        int D = p->o.zero_dp, M = p->o.M;
        float *all = p->loss_all + (int64_t)M * D;
        mt_allgather(p->c, MT_GROUP_DP, p->leaf_loss, p->loss_all, (int64_t)M * D);
        memcpy(all, p->loss_all, sizeof(float) * (size_t)M * D); /* copy d's leaf j is micro-batch j D + d */
        for (int d = 0; d < D; d++)
            for (int j = 0; j < M; j++)
                p->loss_all[j * D + d] = all[d * M + j];
        p->loss = mt_accum_tree_sum(p->loss_all, M * D);
    }
    if (p->o.zero_dp > 1 && !rr(p)) { /* ZeRO: each unit reduce-scattered over the copies */
        if (p->ch[0].embed) /* the wte part comes whole (and reduced) from the last stage */
            memset(tr->grads + p->ch[0].loff, 0, sizeof(float) * (size_t)p->ch[0].skip);
        int replicas = mt_comm_group_size(p->c, MT_GROUP_DP_REPLICA);
        for (int i = 0; i < p->zmap.nunits; i++) { /* through zstage, back into the unit's chunk */
            float *dst = gchunk(p, i);
            mt_reduce_scatter(p->c, MT_GROUP_DP_SHARD, tr->grads + p->zmap.lo[i], p->zstage, p->zmap.len[i], p->o.det);
            memcpy(dst, p->zstage, sizeof(float) * (size_t)p->zmap.chunk[i]);
            if (replicas > 1) /* hybrid sharding: the copies' sums are the upper levels */
                mt_allreduce(p->c, MT_GROUP_DP_REPLICA, dst, p->zmap.chunk[i], p->o.det);
        }
    }
    if (p->o.reduce && !rr(p)) { /* over the copies: every span this rank sums, and the loss */
        for (int k = 0; k < p->V && p->o.zero_dp <= 1; k++) {
            MtPipeChunk *ch = &p->ch[k];
            p->o.reduce(p->o.reduce_ctx, tr->grads + ch->loff + ch->skip, ch->hi - ch->lo - ch->skip);
        }
        if (p->wte)
            p->o.reduce(p->o.reduce_ctx, p->wbuf[0], VC);
        if (p->rank == p->P - 1)
            p->o.reduce(p->o.reduce_ctx, &p->loss, 1);
    }
    /* the last rank's wte gradient (H and rows, the whole tree) to the first stage */
    MtRequest *wte = NULL;
    if (p->rank == p->P - 1)
        wte = mt_isend(p->c, MT_GROUP_EMBED, p->wbuf[0], VC, 0, tag(TAG_WTE, 0));
    if (p->rank == 0)
        wte = mt_irecv(p->c, MT_GROUP_EMBED, tr->grads + p->ch[0].loff, VC, 1, tag(TAG_WTE, 0));
    clock_in(p, t);
    double norm = sqrt(tc->tp ? tp_norm_and_loss(p, &st->loss, &wte) : norm_and_loss(p, &st->loss, &wte));
    float lr = mt_lr_at(oc, (int)tr->step);
    if (p->o.zero_dp > 1)
        zero_update(p, norm, lr);
    else {
        mt_grad_clip(tr->grads, tc->grads_len, oc->grad_clip, norm);
        for (int k = 0; k < p->V; k++) {
            MtPipeChunk *ch = &p->ch[k];
            mt_adamw_range(tr->table, tr->nparams, ch->lo, ch->hi, tr->params + ch->loff, tr->grads + ch->loff,
                           tr->m + ch->loff, tr->v + ch->loff, oc, lr, (int)tr->step + 1);
        }
    }
    if (p->wte) { /* the replica takes the same step as the first stage's wte */
        mt_grad_clip(p->wbuf[0], VC, oc->grad_clip, norm);
        mt_adamw_range(tr->table, tr->nparams, 0, VC, p->wte, p->wbuf[0], p->wte_m, p->wte_v, oc, lr, (int)tr->step + 1);
    }
    tr->step++;
    st->grad_norm = (float)norm;
    st->lr = lr;
    /* measured bubble: idle share of the span of the step's compute, over all ranks */
    int64_t mine[3] = {(int64_t)(p->busy_s * 1e6), (int64_t)(p->t_first * 1e6), (int64_t)(p->t_last * 1e6)};
    int64_t *all = p->rank_times;
    mt_comm_gather_i64(p->c, mine, 3, all);
    if (mt_comm_rank(p->c) == 0) { /* the first copy's ranks */
        int64_t lo = all[1], hi = all[2], b = 0;
        for (int r = 0; r < p->P; r++) {
            const int64_t *x = all + 3 * (int64_t)mt_pipe_world_rank(p, r);
            lo = x[1] < lo ? x[1] : lo;
            hi = x[2] > hi ? x[2] : hi;
            b += x[0];
        }
        p->bubble = hi > lo ? 1.0 - (double)b / ((double)p->P * (double)(hi - lo)) : 0.0;
    }
}

int mt_pipe_world_rank(const MtPipe *p, int r) { return r * (mt_comm_size(p->c) / p->P); }

/* ---- evaluation, checkpoints ---- */

void mt_pipe_eval_windows(MtPipe *p, const MtTokens *data, int64_t lo, int64_t hi, int passes, double *sums)
{
    MtTrainer *tr = p->tr;
    const MtTrainConfig *tc = &tr->tc;
    int T = tc->seq;
    for (int j = 0; j < passes; j++) {
        int real, b = mt_trainer_eval_pass(tr, data, lo, hi, j, &real);
        int64_t n = (int64_t)b * T * tc->cfg.C / (tc->tp && tc->tp->seqpar ? tc->tp->N : 1); /* this rank's rows */
        for (int stage = p->rank; stage < p->S; stage += p->P) {
            MtPipeChunk *ch = &p->ch[stage / p->P];
            MtActs a = ch->sets[0]; /* same buffers, fewer rows */
            a.B = b;
            if (ch->embed) {
                params_need(p, 0, ch->l0 + 1);
                mt_model_embed_forward(&tc->cfg, &p->w, &a, tr->inputs);
            } else
                mt_recv(p->c, MT_GROUP_PP, a.encoded, n, (stage - 1) % p->P);
            const float *x = a.encoded;
            for (int l = ch->l0; l < ch->l1; l++) {
                params_need(p, l + 1, next_forward(tc->cfg.L, ch, l));
                mt_model_block_forward(&tc->cfg, &p->w, &a, l, x);
                x = a.res3[l];
            }
            if (ch->head) {
                params_need(p, tc->cfg.L + 1, -1);
                mt_model_head_forward(&tc->cfg, &p->w, &a, x, tr->targets, 0.0f);
                mt_eval_window_sums(a.losses, real, T, sums + (int64_t)j * tc->micro);
            } else
                mt_send(p->c, MT_GROUP_PP, x, n, (stage + 1) % p->P);
        }
    }
    if (hi > lo) /* the doubles travel as pairs of floats, bits untouched */
        mt_broadcast(p->c, MT_GROUP_PP, (float *)sums, 2 * (hi - lo), p->P - 1);
    if (fsdp(p))
        params_release(p); /* every step starts from empty slots, evaluated or not */
}

int64_t mt_pipe_piece(void *ctx, int q, int k, int64_t *begin, int64_t *end)
{
    const MtPipe *p = ctx;
    const MtParam *t = &p->tr->table[q];
    if (k > 0 || p->unit_rank[t->unit] != p->rank) /* the last rank's wte replica is not its own */
        return -1;
    for (int c = 0; c < p->V; c++)
        if (t->offset >= p->ch[c].lo && t->offset < p->ch[c].hi) {
            *begin = 0;
            *end = t->numel;
            return p->ch[c].loff + (t->offset - p->ch[c].lo);
        }
    MT_ASSERT(0, "%s is not on pipeline rank %d", t->name, p->rank);
    return -1;
}

int64_t mt_pipe_inner_piece(void *ctx, int q, int k, int64_t *begin, int64_t *end)
{
    const MtPipeInner *x = ctx;
    const MtPipe *p = x->p;
    const MtParam *t = &p->tr->table[q];
    int64_t b, e, base = x->replica ? (q == 0 ? 0 : -1) : mt_pipe_piece((void *)p, q, 0, &b, &e);
    if (base < 0)
        return -1;
    int64_t at = x->fn(x->ctx, q, k, begin, end);
    if (at < 0)
        return -1;
    int64_t L = base + (at - t->offset); /* where the piece sits in the stage's arrays */
    if (!x->shard)
        return L;
    const MtShardMap *m = &p->zmap; /* ZeRO: only the part in this rank's chunk, from its shard */
    for (int i = 0; i < m->nunits; i++)
        if (p->zunit[i] == t->unit) {
            int64_t cl = mt_shard_chunk_lo(m, i), lo = L > cl ? L : cl;
            int64_t hi = L + (*end - *begin) < cl + m->chunk[i] ? L + (*end - *begin) : cl + m->chunk[i];
            *begin += lo - L;
            *end = lo < hi ? *begin + (hi - lo) : *begin; /* empty: the next piece may still be here */
            return lo < hi ? m->shard_off[i] + (lo - cl) : 0;
        }
    return -1;
}

MtStatus mt_pipe_load(MtPipe *p, const char *dir, const MtParam *whole, MtCkptPieces fn, void *ctx)
{
    MtTrainer *tr = p->tr;
    int z = p->o.zero_dp > 1, z3 = fsdp(p); /* ZeRO: the moments' chunks (FSDP: the parameters' too) */
    if (fn) { /* another technique's pieces inside the stages */
        MtPipeInner in = {p, fn, ctx, 0, 0}, rep = {p, fn, ctx, 1, 0}, sh = {p, fn, ctx, 0, 1};
        if (!z3)
            MT_TRY(mt_ckpt_load_pieces(dir, whole, tr->nparams, mt_pipe_inner_piece, &in, tr->params, z ? NULL : tr->m,
                                       z ? NULL : tr->v));
        if (z)
            MT_TRY(mt_ckpt_load_pieces(dir, whole, tr->nparams, mt_pipe_inner_piece, &sh, z3 ? tr->params : NULL, tr->m,
                                       tr->v));
        if (p->wte)
            MT_TRY(mt_ckpt_load_pieces(dir, whole, tr->nparams, mt_pipe_inner_piece, &rep, p->wte, p->wte_m, p->wte_v));
        return MT_OK;
    }
    for (int k = 0; k < p->V && !z3; k++) {
        MtPipeChunk *ch = &p->ch[k];
        MT_TRY(mt_ckpt_load_range(dir, tr->table, tr->nparams, ch->lo, ch->hi, tr->params + ch->loff,
                                  z ? NULL : tr->m + ch->loff, z ? NULL : tr->v + ch->loff));
    }
    if (z)
        MT_TRY(mt_ckpt_load_pieces(dir, tr->table, tr->nparams, mt_pipe_shard_piece, p, z3 ? tr->params : NULL, tr->m,
                                   tr->v));
    if (p->wte) /* the replica: wte is the table's first tensor */
        MT_TRY(mt_ckpt_load_range(dir, tr->table, tr->nparams, 0, tr->table[0].numel, p->wte, p->wte_m, p->wte_v));
    return MT_OK;
}

void mt_pipe_plan(const MtTrainConfig *tc, const MtPipeOptions *o, int P, int rank, int dp_rank,
                  int64_t bytes[MT_MEM_NCAT])
{
    int64_t ulo[MT_MAX_UNITS], uhi[MT_MAX_UNITS], VC = mt_trainer_spans(tc, ulo, uhi);
    int ngbuf = 1 + mt_tree_temps_blocks(o->M, mt_accum_block_size(tc)), S = zero_S(o), rrm = o->mb_stride > 1;
    if (!rrm) /* the tree's temporaries (round-robin: on shards, below) */
        bytes[MT_MEM_GRADS] += 4 * (int64_t)(ngbuf - 1) * tc->grads_len;
    MtSchedule s = {o->kind, P, o->M, o->V};
    MtAction *list = malloc(sizeof(MtAction) * (size_t)mt_schedule_max_actions(&s));
    MT_ASSERT(list, "out of memory");
    int n = mt_schedule_build(&s, rank, list), nh = mt_schedule_peak_wte(&s, list, n);
    /* activations: the backward scratch, and per chunk the sets its list holds at once
     * (each with its stash for W in a split schedule), as mt_pipe_init allocates them */
    const MtConfig *cfg = &tc->cfg;
    MtActsShape scratch = scratch_shape(tc);
    bytes[MT_MEM_ACTS] += 4 * mt_acts_floats_shape(cfg, tc->micro, tc->seq, tc->threads, &scratch);
    for (int c = 0; c < o->V; c++) {
        MtPipeChunk ch;
        int uf, ul, sets = mt_schedule_peak_sets(&s, list, n, c);
        chunk_units(o, cfg->L, P, rank, c, &ch, &uf, &ul);
        MtActsShape sh = set_shape(tc, &ch);
        int64_t stash = mt_schedule_split(o->kind)
                            ? mt_model_stash_floats(cfg, tc->micro, tc->seq, ch.l1 - ch.l0, ch.head, ch.embed) : 0;
        bytes[MT_MEM_ACTS] += 4 * (int64_t)sets * (mt_acts_floats_shape(cfg, tc->micro, tc->seq, tc->threads, &sh) + stash);
    }
    free(list);
    if (rank == P - 1) { /* the wte replica, its moments, its tree and the H_k awaiting rows */
        bytes[MT_MEM_PARAMS] += 4 * VC;
        bytes[MT_MEM_OPTIM] += 8 * VC;
        bytes[MT_MEM_GRADS] += 4 * (int64_t)(ngbuf - (mt_accum_block_size(tc) > 1) + nh) * VC;
    }
    if (S > 0) { /* the reduced gradient's chunks (round-robin: with the tree over rounds); FSDP's slots */
        int64_t lo[MT_MAX_UNITS], hi[MT_MAX_UNITS], off = 0;
        int k = 0, unit[MT_MAX_UNITS];
        for (int c = 0; c < o->V; c++) {
            MtPipeChunk ch;
            int uf, ul;
            chunk_units(o, tc->cfg.L, P, rank, c, &ch, &uf, &ul);
            for (int u = uf; u <= ul; u++, k++) {
                unit[k] = u;
                lo[k] = off + (ulo[u] - ulo[uf]);
                hi[k] = lo[k] + (uhi[u] - ulo[u]);
            }
            off += uhi[ul] - ulo[uf];
        }
        MtShardMap m;
        MT_ASSERT(mt_shard_map(lo, hi, k, S, dp_rank, &m) == 0, "the plan's stage is not aligned");
        int64_t most = 0; /* contiguous runs: one unit's chunk, staged (zstage) */
        for (int i = 0; i < k; i++)
            most = m.chunk[i] > most ? m.chunk[i] : most;
        bytes[MT_MEM_GRADS] += 4 * (rrm ? m.shard_len * ngbuf : most);
        int64_t slot[4] = {0, 0, 0, 0};
        for (int i = 0; i < k && o->zero == 3; i++) {
            int sl = unit_slot(tc->cfg.L, unit[i]);
            slot[sl] = m.len[i] > slot[sl] ? m.len[i] : slot[sl];
        }
        bytes[MT_MEM_PARAMS] += 4 * (slot[0] + slot[1] + slot[2] + slot[3]);
    }
}

/* the slots of plan_gathers: start_gather and params_need on a model of the slots */
typedef struct {
    int slot[4], L, S;
    const int64_t *ulen;
    int64_t bytes;
} PlanSlots;

static void plan_gather(PlanSlots *x, int u)
{
    int s = unit_slot(x->L, u);
    if (x->slot[s] != u) {
        x->slot[s] = u;
        x->bytes += 4 * (int64_t)(x->S - 1) * x->ulen[u] / x->S;
    }
}

static void plan_need(PlanSlots *x, int u, int next)
{
    plan_gather(x, u);
    if (next >= 0 && unit_slot(x->L, next) != unit_slot(x->L, u))
        plan_gather(x, next);
}

/* the FSDP gathers of one step on a rank: its list's passes through params_need, on slots
 * that start empty (the update and an evaluation release them) */
static int64_t plan_gathers(const MtPipeOptions *o, const MtConfig *cfg, int P, int rank, const MtAction *list, int n,
                            const int64_t *ulen, int S)
{
    int L = cfg->L;
    PlanSlots x = {{-1, -1, -1, -1}, L, S, ulen, 0};
    for (int i = 0; i < n; i++) {
        const MtAction *a = &list[i];
        if (a->kind != MT_ACT_F && a->kind != MT_ACT_B && a->kind != MT_ACT_W)
            continue;
        MtPipeChunk ch;
        int uf, ul;
        chunk_units(o, L, P, rank, a->stage / P, &ch, &uf, &ul);
        if (a->kind == MT_ACT_F) {
            if (ch.embed)
                plan_need(&x, 0, ch.l0 + 1);
            for (int l = ch.l0; l < ch.l1; l++)
                plan_need(&x, l + 1, next_forward(L, &ch, l));
            if (ch.head)
                plan_need(&x, L + 1, -1);
            continue;
        }
        if (a->kind == MT_ACT_B && ch.head)
            plan_need(&x, L + 1, ch.l1);
        for (int l = ch.l1 - 1; l >= ch.l0; l--)
            plan_need(&x, l + 1, l > ch.l0 ? l : -1);
    }
    return x.bytes;
}

void mt_pipe_plan_comm(const MtTrainConfig *tc, const MtPipeOptions *o, int P, int rank, int dp, int64_t bytes[3])
{
    const MtConfig *cfg = &tc->cfg;
    const MtTpCtx *tp = tc->tp;
    int64_t ulo[MT_MAX_UNITS], uhi[MT_MAX_UNITS], ulen[MT_MAX_UNITS], VC = mt_trainer_spans(tc, ulo, uhi);
    int L = cfg->L, M = o->M, S = zero_S(o), nparams = mt_param_count(cfg);
    for (int u = 0; u < L + 2; u++)
        ulen[u] = uhi[u] - ulo[u];
    int64_t erows = (int64_t)tc->micro * tc->seq * cfg->C, rows = tp && tp->seqpar ? erows / tp->N : erows;
    MtSchedule s = {o->kind, P, M, o->V};
    MtAction *list = malloc(sizeof(MtAction) * (size_t)mt_schedule_max_actions(&s));
    MT_ASSERT(list, "out of memory");
    int n = mt_schedule_build(&s, rank, list);
    bytes[0] = bytes[1] = bytes[2] = 0;
    /* pp (with the embed group): activations and their gradients, the embedding's rows, the
     * final wte gradient, the norm's block sums (with tp: per-tensor parts) and the loss */
    for (int i = 0; i < n; i++)
        bytes[2] += list[i].kind == MT_ACT_SEND_F || list[i].kind == MT_ACT_SEND_B ? 4 * rows
                    : list[i].kind == MT_ACT_SEND_E                           ? 4 * erows : 0;
    if (rank == P - 1)
        bytes[2] += 4 * VC;
    int64_t most = 0, stage = 0, skip = 0; /* the most norm blocks a rank owns; this rank's floats */
    for (int r = 0; r < P; r++) {
        int64_t blocks = 0;
        for (int c = 0; c < o->V; c++) {
            MtPipeChunk ch;
            int uf, ul;
            chunk_units(o, L, P, r, c, &ch, &uf, &ul);
            for (int u = uf; u <= ul; u++) {
                blocks += (ulen[u] + MT_NORM_BLOCK - 1) / MT_NORM_BLOCK;
                stage += r == rank ? ulen[u] : 0;
            }
            skip += r == rank && ch.embed ? VC : 0;
            /* tp inside the stage: its units' passes, every micro-batch */
            if (r == rank)
                bytes[1] += (int64_t)M * mt_tp_plan_micro_bytes(cfg, tp, (int64_t)tc->micro * tc->seq, ch.embed, ch.l0,
                                                                  ch.l1, ch.head, tc->recompute,
                                                                  mt_schedule_split(o->kind));
        }
        most = blocks > most ? blocks : most;
    }
    bytes[2] += 8 * (int64_t)(P - 1) * (tp ? nparams + 1 : most + 1);
    bytes[1] += mt_tp_plan_step_bytes(tp, nparams);
    /* dp over the copies */
    int last = rank == P - 1;
    int64_t ar = 8 * (int64_t)(dp - 1), wte = last ? ar * VC / dp : 0, loss = last ? ar / dp : 0;
    if (dp > 1 && S == 0) /* DDP: every span this rank sums (not the first stage's wte), wte replica, loss */
        bytes[0] = ar * (stage - skip) / dp + wte + loss;
    if (dp > 1 && S > 0) {
        int c = dp / S, rr = o->mb_stride > 1;
        int64_t rs = 4 * (int64_t)(S - 1) * stage / S, across = c > 1 ? 8 * (int64_t)(c - 1) * (stage / S) / c : 0;
        bytes[0] = 8 * (int64_t)(S - 1) * (stage / S / MT_NORM_BLOCK); /* the norm's block sums */
        if (rr) /* per leaf; the wte replica's leaves at their E; the leaf losses */
            bytes[0] += (int64_t)M * (rs + across + wte) + (last ? 4 * (int64_t)(dp - 1) * M : 0);
        else
            bytes[0] += rs + across + wte + loss;
        if (o->zero <= 2)
            bytes[0] += rs; /* the parameters all-gathered */
        else
            bytes[0] += plan_gathers(o, cfg, P, rank, list, n, ulen, S);
    }
    free(list);
}
