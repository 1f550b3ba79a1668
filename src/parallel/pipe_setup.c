/* pipe_setup.c - a pipeline stage's layout, configuration, allocation and release (see mt_pipeline.h). */
#include "pipe_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- layout ---- */

MtStatus mt_pipe_check(MtPipeOptions *o, const MtConfig *cfg, int P, const int *given, int ngiven)
{
    MtSchedule s = {o->kind, P, o->M, o->V, cfg->untied};
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
void pipe_chunk_units(const MtPipeOptions *o, int L, int P, int rank, int c, MtPipeChunk *ch, int *uf, int *ul)
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
        pipe_chunk_units(o, tc->cfg.L, P, rank, c, &ch, &uf, &ul);
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
void pipe_units(const MtPipe *p, const MtPipeChunk *ch, int *uf, int *ul)
{
    *uf = ch->embed ? 0 : ch->l0 + 1;
    *ul = ch->head ? p->tr->tc.cfg.L + 1 : ch->l1;
}

float *pipe_alloc(MtPipe *p, MtMemCat cat, int64_t n)
{
    return mt_mem_alloc(&p->tr->mem, cat, sizeof(float) * (size_t)(n > 0 ? n : 1));
}

void pipe_free_buf(MtPipe *p, MtMemCat cat, float *x, int64_t n)
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

void pipe_pool_sets(const MtPipeOptions *o, const MtSchedule *s, int L, int rank, const MtAction *list, int n,
                    int *sets)
{
    int key[MT_PIPE_MAX_CHUNKS];
    for (int c = 0; c < o->V; c++) {
        MtPipeChunk ch;
        int uf, ul;
        pipe_chunk_units(o, L, s->P, rank, c, &ch, &uf, &ul);
        key[c] = pipe_set_key(&ch);
    }
    mt_schedule_pool_sets(s, list, n, key, sets);
}

int pipe_leaf_units(const MtTrainConfig *tc, const MtPipeOptions *o, int P, int rank)
{
    if (o->mb_stride > 1 || mt_accum_block_size(tc) <= 1 || o->M <= 1)
        return 0;
    for (int c = 0; c < o->V; c++)
        if (c * P + rank == o->ltr_stage - 1) /* the test hook's order: its leaf buffer is a sum */
            return 0;
    return 1;
}

int64_t pipe_leaf_unit_floats(const MtTrainConfig *tc, const MtPipeOptions *o, int P, int rank)
{
    if (!pipe_leaf_units(tc, o, P, rank))
        return 0;
    int64_t ulo[MT_MAX_UNITS], uhi[MT_MAX_UNITS], VC = mt_trainer_spans(tc, ulo, uhi), most = 0;
    for (int c = 0; c < o->V; c++) {
        MtPipeChunk ch;
        int uf, ul;
        pipe_chunk_units(o, tc->cfg.L, P, rank, c, &ch, &uf, &ul);
        for (int u = uf; u <= ul; u++) { /* tied: the embedding's wpe only (its wte comes whole from the last rank) */
            int64_t n = uhi[u] - ulo[u] - (u == 0 && !tc->cfg.untied ? VC : 0);
            most = n > most ? n : most;
        }
    }
    return most;
}

int64_t mt_pipe_stash_floats(const MtPipe *p, int c)
{
    const MtTrainConfig *tc = &p->tr->tc;
    const MtPipeChunk *ch = &p->ch[c];
    if (!mt_schedule_split(p->o.kind))
        return 0;
    return mt_model_stash_floats(&tc->cfg, tc->micro, tc->seq, ch->l1 - ch->l0, ch->head, ch->embed);
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
    p->sched = (MtSchedule){o->kind, p->P, o->M, o->V, cfg->untied};
    int M = o->M;
    int64_t VC = tr->table[0].numel; /* wte (a tp rank's vocabulary rows) */
    p->list = malloc(sizeof(MtAction) * (size_t)mt_schedule_max_actions(&p->sched));
    p->plan = malloc(sizeof(MtTreeStep) * (size_t)mt_tree_plan_max(M));
    p->ltr = malloc(sizeof(MtTreeStep) * (size_t)mt_tree_plan_max(M));
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
    int psets[MT_PIPE_MAX_CHUNKS];
    pipe_pool_sets(o, &p->sched, cfg->L, p->rank, p->list, p->nlist, psets);
    for (int k = 0; k < p->V; k++) {
        MtPipeChunk *ch = &p->ch[k];
        int uf, ul;
        pipe_chunk_units(o, cfg->L, p->P, p->rank, k, ch, &uf, &ul);
        for (ch->pool = 0; pipe_set_key(&p->ch[ch->pool]) != pipe_set_key(ch); ch->pool++)
            ;
        ch->lo = tr->unit_lo[uf];
        ch->hi = tr->unit_hi[ul];
        ch->loff = off;
        ch->skip = ch->embed && !cfg->untied ? VC : 0; /* tied: the first stage's wte gradient comes whole from the last */
        ch->plan = ch->stage == o->ltr_stage - 1 && M > 1 ? p->ltr : p->plan;
        off += ch->hi - ch->lo;
        for (int u = uf; u <= ul && !fsdp(p); u++) /* FSDP: views on the slots, as units are gathered */
            mt_weights_view_unit(cfg, tr->table, tr->nparams, u, tr->params + ch->loff + (tr->unit_lo[u] - ch->lo), &p->w);
        /* the pool's sets: the owner allocates them, a chunk of the same shape views them */
        const MtPipeChunk *own = &p->ch[ch->pool];
        int owner = ch->pool == k;
        ch->nsets = owner ? psets[k] : own->nsets;
        ch->sets = calloc((size_t)ch->nsets, sizeof(MtActs));
        ch->freelist = owner ? malloc(sizeof(int) * (size_t)(ch->nsets + 1)) : NULL;
        ch->slot = malloc(sizeof(int) * (size_t)M);
        ch->stash = owner ? calloc((size_t)ch->nsets + 1, sizeof(float *)) : own->stash;
        if (!ch->sets || (owner && !ch->freelist) || !ch->slot || !ch->stash)
            goto oom;
        MtActsShape sh = set_shape(tc, ch);
        for (int i = 0; i < ch->nsets; i++) {
            MtActs *a = &ch->sets[i];
            if (!owner)
                mt_acts_view_shape(a, &own->sets[i], cfg, tc->micro, tc->seq, tc->threads, &sh);
            else if (mt_acts_alloc_shape(a, &tr->mem, cfg, tc->micro, tc->seq, tc->threads, &sh) != MT_OK)
                goto oom;
            a->dres = p->scratch.dres; /* views of the one backward scratch */
            a->dln = p->scratch.dln;
            a->datty = p->scratch.datty;
            a->dqkv = p->scratch.dqkv;
            a->dfch = p->scratch.dfch;
            a->datt_scratch = p->scratch.datt_scratch;
            mt_acts_share(a, &p->scratch);
            a->poll = pipe_poll;
            a->poll_ctx = p;
            if (owner && mt_schedule_split(o->kind) &&
                !(ch->stash[i] = pipe_alloc(p, MT_MEM_ACTS, mt_pipe_stash_floats(p, k))))
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
    int64_t ulen = pipe_leaf_unit_floats(tc, o, p->P, p->rank); /* the leaf buffer unit by unit */
    for (int i = 1; i < p->ngbuf - (ulen > 0) && !rr(p); i++)
        if (!(p->gbuf[i] = pipe_alloc(p, MT_MEM_GRADS, off)))
            goto oom;
    if (ulen > 0 && !(p->ubuf = pipe_alloc(p, MT_MEM_GRADS, ulen)))
        goto oom;
    /* the tied embedding (pipe_head.c): the first rank's block of rows and their send buffer */
    p->blk = mt_accum_block_size(tc);
    p->ecap = mt_trainer_esum_block_floats(tc);
    int64_t ntok = (int64_t)tc->micro * tc->seq;
    if (p->rank == 0) {
        if (mt_embsum_init(&p->esum, &tr->mem, mt_trainer_vocab_first(tc), mt_trainer_vocab_rows(tc), cfg->C,
                           p->ecap / cfg->C, ntok, MT_EMBSUM_OWN) != MT_OK)
            goto oom;
        int slots = mt_schedule_esend_slots(&p->sched, p->blk);
        p->nesend = cfg->untied ? 0 : slots > 1 ? slots : 1; /* untied: the rows stay, added to its own wte */
        if (!(p->esend = calloc((size_t)p->nesend + 1, sizeof(float *))) ||
            !(p->esend_req = calloc((size_t)p->nesend + 1, sizeof(MtRequest *))))
            goto oom;
        for (int k = 0; k < p->nesend; k++)
            if (!(p->esend[k] = pipe_alloc(p, MT_MEM_OTHER, p->ecap)))
                goto oom;
        MT_ASSERT(p->ch[0].embed && (cfg->untied || p->ch[0].skip >= p->ecap), "the first rank's first chunk holds the embedding");
    }
    /* the last rank: replica, moments, its tree over the blocks, the blocks' head sums */
    if (p->rank == p->P - 1 && !cfg->untied) {
        if (!(p->wte = pipe_alloc(p, MT_MEM_PARAMS, VC)) || !(p->wte_m = pipe_alloc(p, MT_MEM_OPTIM, VC)) ||
            !(p->wte_v = pipe_alloc(p, MT_MEM_OPTIM, VC)))
            goto oom;
        mt_trainer_param_init(tr, 0, 0, VC, p->wte);
        p->w.wte = p->wte;
        int nb = M / p->blk; /* the copy's blocks */
        if (!(p->wplan = malloc(sizeof(MtTreeStep) * (size_t)mt_tree_plan_max(nb))) ||
            mt_embsum_init(&p->esum, &tr->mem, mt_trainer_vocab_first(tc), mt_trainer_vocab_rows(tc), cfg->C,
                           p->ecap / cfg->C, ntok, MT_EMBSUM_TOKENS) != MT_OK)
            goto oom;
        p->nwplan = mt_tree_plan(nb, p->wplan);
        p->nwbuf = 1 + mt_accum_depth(nb);
        for (int i = 0; i < p->nwbuf; i++)
            if (!(p->wbuf[i] = pipe_alloc(p, MT_MEM_GRADS, VC)))
                goto oom;
        if (p->blk > 1 && !(p->hleaf = pipe_alloc(p, MT_MEM_GRADS, VC)))
            goto oom;
        p->nh = mt_schedule_peak_wte(&p->sched, p->list, p->nlist, p->blk);
        PipeHead hd = pipe_head(tc, &p->o, VC, p->nh);
        p->defer = hd.mode;
        p->hslot = calloc((size_t)p->nh, sizeof(float *));
        p->keep = calloc((size_t)p->nh, sizeof(float *));
        p->eland = calloc((size_t)p->nh, sizeof(float *));
        p->ereq = calloc((size_t)p->nh, sizeof(MtRequest *));
        p->h_mb = malloc(sizeof(int) * (size_t)p->nh);
        p->e_posted = calloc((size_t)p->nh, sizeof(int));
        if (!p->hslot || !p->keep || !p->eland || !p->ereq || !p->h_mb || !p->e_posted)
            goto oom;
        for (int i = 0; i < p->nh; i++) {
            int hs = !p->defer || i == 0; /* KEEP, REDO: one H slot, and a keep per awaiting micro-batch */
            if (hs && nb == 1) /* one block: its sum is the tree's result */
                p->hslot[i] = p->wbuf[0];
            else if (hs && !(p->hslot[i] = pipe_alloc(p, MT_MEM_GRADS, VC)))
                goto oom;
            if ((p->defer && !(p->keep[i] = pipe_alloc(p, MT_MEM_ACTS, hd.keep))) ||
                !(p->eland[i] = pipe_alloc(p, MT_MEM_OTHER, p->ecap)))
                goto oom;
        }
        if (p->defer == MT_PIPE_HEAD_REDO && !(p->redo = pipe_alloc(p, MT_MEM_ACTS, hd.scratch)))
            goto oom;
    }
    /* transfers: landing buffers for the receives outstanding at once, one buffer per send */
    p->nland = max_landing(p);
    for (int i = 0; i < p->nlist; i++)
        p->nsend += p->list[i].kind == MT_ACT_SEND_F || p->list[i].kind == MT_ACT_SEND_B;
    p->land = calloc((size_t)p->nland + 1, sizeof(float *));
    p->land_req = calloc((size_t)p->nland + 1, sizeof(MtRequest *));
    p->land_key = malloc(sizeof(int) * ((size_t)p->nland + 1));
    p->sendb = calloc((size_t)p->nsend + 1, sizeof(float *));
    p->send_req = calloc((size_t)p->nsend + 1, sizeof(MtRequest *));
    if (!p->land || !p->land_req || !p->land_key || !p->sendb || !p->send_req)
        goto oom;
    for (int i = 0; i < p->nland; i++)
        if (!(p->land[i] = pipe_alloc(p, MT_MEM_OTHER, rows(p))))
            goto oom;
    for (int i = 0; i < p->nsend; i++)
        if (!(p->sendb[i] = pipe_alloc(p, MT_MEM_OTHER, rows(p))))
            goto oom;
    /* who owns each unit's norm blocks, and where they sit in its list of block sums */
    for (int r = 0; r < p->P; r++) {
        int64_t at = 0;
        for (int k = 0; k < p->V; k++) {
            MtPipeChunk ch;
            int uf, ul;
            pipe_chunk_units(o, cfg->L, p->P, r, k, &ch, &uf, &ul);
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
    if (zero_S(o) > 0 && pipe_zero_init(p) != MT_OK) /* its sharded state (mt_sharded.h) */
        goto oom;
    if (tc->tp) /* tp_norm_and_loss: mine, every stage's, the tensors', every tp rank's */
        p->tparts = malloc(sizeof(double) * (size_t)(tr->nparams + 1) * (1 + p->P + 1 + tc->tp->N));
    if (!p->block_sums || !p->rank_times || (tc->tp && !p->tparts))
        goto oom;
    if (o->post_validate) { /* two steps' gathers; the state before the pending update (MT_MEM_OPTIM) */
        for (int i = 0; i < 2; i++)
            if (!(p->pv_all[i] = calloc((size_t)((tc->tp ? tr->nparams + 1 : p->max_blocks + 1) + 3) * p->P,
                                        sizeof(double))))
                goto oom;
        if (!(p->pv_save = pipe_alloc(p, MT_MEM_OPTIM, 2 * tc->grads_len)))
            goto oom;
    }
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
        if (ch->pool != k) /* a view of another chunk's pool: its stash is the owner's */
            ch->stash = NULL;
        for (int i = 0; ch->stash && i < ch->nsets; i++)
            if (ch->stash[i])
                pipe_free_buf(p, MT_MEM_ACTS, ch->stash[i], mt_pipe_stash_floats(p, k));
        free(ch->stash);
        free(ch->sets);
        free(ch->freelist);
        free(ch->slot);
    }
    mt_acts_free(&p->scratch, &p->tr->mem);
    for (int i = 1; i < p->ngbuf; i++)
        if (p->gbuf[i])
            pipe_free_buf(p, MT_MEM_GRADS, p->gbuf[i], p->tr->tc.grads_len);
    if (p->ubuf)
        pipe_free_buf(p, MT_MEM_GRADS, p->ubuf, pipe_leaf_unit_floats(&p->tr->tc, &p->o, p->P, p->rank));
    if (p->wte) {
        pipe_free_buf(p, MT_MEM_PARAMS, p->wte, VC);
        pipe_free_buf(p, MT_MEM_OPTIM, p->wte_m, VC);
        pipe_free_buf(p, MT_MEM_OPTIM, p->wte_v, VC);
    }
    for (int i = 0; i < p->nwbuf; i++)
        pipe_free_buf(p, MT_MEM_GRADS, p->wbuf[i], VC);
    const MtTrainConfig *tc = &p->tr->tc;
    PipeHead hd = pipe_head(tc, &p->o, VC, p->nh);
    pipe_free_buf(p, MT_MEM_ACTS, p->redo, hd.scratch);
    for (int i = 0; i < p->nh; i++) {
        if (p->hslot && p->hslot[i] != p->wbuf[0])
            pipe_free_buf(p, MT_MEM_GRADS, p->hslot[i], VC);
        pipe_free_buf(p, MT_MEM_ACTS, p->keep ? p->keep[i] : NULL, hd.keep);
        pipe_free_buf(p, MT_MEM_OTHER, p->eland ? p->eland[i] : NULL, p->ecap);
    }
    pipe_free_buf(p, MT_MEM_GRADS, p->hleaf, VC);
    for (int k = 0; k < p->nesend; k++)
        pipe_free_buf(p, MT_MEM_OTHER, p->esend ? p->esend[k] : NULL, p->ecap);
    free(p->esend);
    free(p->esend_req);
    mt_embsum_free(&p->esum, &p->tr->mem);
    free(p->wplan);
    for (int i = 0; i < p->nland; i++)
        pipe_free_buf(p, MT_MEM_OTHER, p->land[i], rows(p));
    for (int i = 0; i < p->nsend; i++)
        pipe_free_buf(p, MT_MEM_OTHER, p->sendb[i], rows(p));
    free(p->hslot);
    free(p->keep);
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
    free(p->zblocks);
    for (int i = 0; i < p->nsbuf; i++)
        if (p->sbuf[i])
            pipe_free_buf(p, MT_MEM_GRADS, p->sbuf[i], p->zmap.shard_len);
    if (p->zstage)
        pipe_free_buf(p, MT_MEM_GRADS, p->zstage, p->zstage_len);
    for (int s = 0; s < 4; s++)
        if (p->zsh.slot[s])
            pipe_free_buf(p, MT_MEM_PARAMS, p->zsh.slot[s], p->zsh.slot_len[s]);
    free(p->loss_all);
    free(p->rank_times);
    for (int i = 0; i < 2; i++) {
        if (p->pv_req[i])
            pipe_req_done(p, &p->pv_req[i], 1);
        free(p->pv_all[i]);
    }
    if (p->pv_save)
        pipe_free_buf(p, MT_MEM_OPTIM, p->pv_save, 2 * p->tr->tc.grads_len);
    memset(p, 0, sizeof *p);
}

