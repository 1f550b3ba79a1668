/* trainer.c - single-device training: allocation, canonical accumulation, update. */
#include "mt_train.h"

#include "mt_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mt_testhooks.h"
#include "mt_tp.h"

static MtStatus check(const MtTrainConfig *tc)
{
    MT_TRY(mt_config_check(&tc->cfg));
    if (tc->seq < 1 || tc->seq > tc->cfg.T)
        return mt_error(MT_EINPUT, "sequence length %d must be between 1 and the context length %d",
                        tc->seq, tc->cfg.T);
    if (tc->batch < 1 || tc->micro < 1)
        return mt_error(MT_EINPUT, "batch size %d and micro-batch size %d must be positive",
                        tc->batch, tc->micro);
    if (tc->batch % tc->micro != 0)
        return mt_error(MT_EINPUT, "batch size %d is not a multiple of the micro-batch size %d",
                        tc->batch, tc->micro);
    int M = tc->batch / tc->micro;
    if (M > (1 << 20))
        return mt_error(MT_EINPUT, "too many micro-batches (%d)", M);
    if (tc->accum_blocks < 0 || (tc->accum_blocks > 0 && M % tc->accum_blocks != 0))
        return mt_error(MT_EINPUT, "--accum-blocks %d must divide the step's %d micro-batches (0: one block each)",
                        tc->accum_blocks, M);
    if (tc->threads < 1 || tc->threads > 1024)
        return mt_error(MT_EINPUT, "threads %d must be between 1 and 1024", tc->threads);
    double bad;
    const char *want;
    int k = mt_optim_bad(&tc->oc, &bad, &want);
    if (k >= 0)
        return mt_error(MT_EINPUT, "optimizer setting %s %g is out of range (want %s)", mt_optim_keys[k], bad, want);
    return MT_OK;
}

/* bytes of one flat array of len floats (0: the whole table) */
static size_t param_bytes(const MtTrainer *tr, int64_t len)
{
    return sizeof(float) * (size_t)(len > 0 ? len : tr->nfloats);
}

int mt_accum_block_size(const MtTrainConfig *tc) { return mt_accum_block(tc->batch / tc->micro, tc->accum_blocks); }

int64_t mt_trainer_vocab_first(const MtTrainConfig *tc)
{
    return tc->tp ? mt_tp_local(&tc->cfg, tc->tp, tc->micro * tc->seq).v0 : 0;
}

int64_t mt_trainer_vocab_rows(const MtTrainConfig *tc)
{
    return tc->tp ? mt_tp_local(&tc->cfg, tc->tp, tc->micro * tc->seq).Vl : tc->cfg.V;
}

int64_t mt_trainer_esum_block_floats(const MtTrainConfig *tc)
{
    int64_t N = (int64_t)tc->micro * tc->seq;
    return mt_embsum_cap(mt_trainer_vocab_rows(tc), mt_accum_block_size(tc) * N) * tc->cfg.C;
}

void mt_trainer_leaf_lens(const MtTrainConfig *tc, int64_t len[2])
{
    int M = tc->batch / tc->micro, span = tc->tree_span > 0 ? tc->tree_span : M;
    len[0] = len[1] = 0;
    if (tc->inference || mt_accum_block_size(tc) <= 1 || span <= 1)
        return;
    int64_t lo[MT_MAX_LAYERS + 2], hi[MT_MAX_LAYERS + 2];
    mt_trainer_spans(tc, lo, hi);
    len[0] = hi[0] - lo[0];
    for (int u = 1; u < tc->cfg.L + 2; u++)
        len[1] = hi[u] - lo[u] > len[1] ? hi[u] - lo[u] : len[1];
}

int64_t mt_trainer_esum_floats(const MtTrainConfig *tc)
{
    return tc->inference || tc->acts_none ? 0 : mt_trainer_esum_block_floats(tc);
}

/* A failed allocation of a size the user's model and batch asked for: bad input (exit 2),
 * naming what and how much; everything allocated so far is freed. */
static MtStatus alloc_failed(MtTrainer *tr, const char *what, size_t bytes)
{
    long long n = (long long)tr->nfloats;
    mt_trainer_free(tr);
    return mt_error(MT_EINPUT, "cannot allocate %.1f MiB for the %s of this model and batch (%lld parameters): "
                    "out of memory; use a smaller model, batch or sequence, or more ranks",
                    bytes / 1048576.0, what, n);
}

int64_t mt_trainer_table(const MtTrainConfig *tc, MtParam *table)
{
    int64_t align = tc->unit_align > 0 ? tc->unit_align : 1;
    /* the last table made, kept: the planner asks for the same one for layout after layout */
    static _Thread_local struct {
        MtConfig cfg;
        int N;
        int64_t Vp, align, total;
        MtParam *t;
    } kept;
    int N = tc->tp ? tc->tp->N : 0, n = mt_param_count(&tc->cfg);
    int64_t Vp = tc->tp ? tc->tp->Vp : 0;
    if (kept.t && memcmp(&kept.cfg, &tc->cfg, sizeof kept.cfg) == 0 && kept.N == N && kept.Vp == Vp &&
        kept.align == align) {
        memcpy(table, kept.t, sizeof(MtParam) * (size_t)n);
        return kept.total;
    }
    int64_t total = !tc->tp ? mt_param_table_aligned(&tc->cfg, table, align)
                            /* sharded over dp: every tensor starts a norm block, so that the
                             * shards' block sums give each tensor's (tr->sumsq_blocks) */
                            : mt_tp_local_table(&tc->cfg, N, Vp, align, align > 1 ? MT_NORM_BLOCK : 1, table);
    MtParam *t = realloc(kept.t, sizeof(MtParam) * (size_t)n);
    if (t) {
        memcpy(t, table, sizeof(MtParam) * (size_t)n);
        kept.t = t, kept.cfg = tc->cfg, kept.N = N, kept.Vp = Vp, kept.align = align, kept.total = total;
    }
    return total;
}

int64_t mt_trainer_spans(const MtTrainConfig *tc, int64_t *lo, int64_t *hi)
{
    int np = mt_param_count(&tc->cfg), nu = tc->cfg.L + 2;
    MtParam *t = calloc((size_t)np, sizeof *t);
    MT_ASSERT(t, "out of memory");
    int64_t total = mt_trainer_table(tc, t), first = t[0].numel;
    for (int u = 0; u < nu; u++) /* each unit's first tensor, in one pass (as mt_unit_span finds it) */
        lo[u] = -1;
    for (int p = 0; p < np; p++)
        if (lo[t[p].unit] < 0)
            lo[t[p].unit] = t[p].offset;
    for (int u = 0; u < nu; u++)
        hi[u] = u + 1 < nu ? lo[u + 1] : total;
    free(t);
    return first;
}

void mt_trainer_param_init(const MtTrainer *tr, int p, int64_t a, int64_t b, float *dst)
{
    const MtTrainConfig *tc = &tr->tc;
    const MtParam *pp = &tr->table[p];
    if (!tc->tp) { /* on the host, then onto the device (dst itself where it is host memory) */
        float *host = mt_be()->host_memory ? dst : malloc(sizeof(float) * (size_t)(b - a));
        MT_ASSERT(host, "out of memory to initialise %s", pp->name);
        mt_param_init(pp, tc->cfg.L, tc->seed, a, b, host);
        if (host != dst) {
            mt_be()->upload(dst, host, sizeof(float) * (size_t)(b - a));
            free(host);
        }
        return;
    }
    MtParam *whole = calloc((size_t)tr->nparams, sizeof(MtParam)); /* the slice, then its range */
    float *slice = malloc(sizeof(float) * (size_t)pp->numel);
    MT_ASSERT(whole && slice, "out of memory to initialise %s", pp->name);
    mt_param_table(&tc->cfg, whole);
    mt_tp_init_slice(&whole[p], tc->cfg.L, tc->seed, tc->tp->N, tc->tp->r, tc->tp->Vp, slice);
    mt_be()->upload(dst, slice + a, sizeof(float) * (size_t)(b - a));
    free(slice);
    free(whole);
}

MtActsShape mt_trainer_acts_shape(const MtTrainConfig *tc)
{
    MtActsShape sh = mt_acts_whole(&tc->cfg);
    sh.recompute = tc->recompute;
    sh.rc_buffers = 1;
    sh.tp = tc->tp;
    return sh;
}

MtStatus mt_trainer_init(MtTrainer *tr, const MtTrainConfig *tc)
{
    memset(tr, 0, sizeof *tr);
    MT_TRY(check(tc));
    tr->tc = *tc;
    mt_mem_init(&tr->mem);
    mt_mem_use(&tr->mem, mt_be()->alloc, mt_be()->free); /* the bytes are the backend's device's */
    if (tc->fail_alloc_after > 0)
        mt_mem_set_fail_after(&tr->mem, tc->fail_alloc_after - 1);
    const MtConfig *cfg = &tc->cfg;
    tr->nparams = mt_param_count(cfg);
    tr->table = calloc((size_t)tr->nparams, sizeof(MtParam));
    int64_t gb = (int64_t)tc->batch * tc->seq;
    /* the batch's tokens (not counted: they are not the model's state) */
    tr->inputs = mt_be()->alloc(sizeof(int32_t) * (size_t)gb);
    tr->targets = mt_be()->alloc(sizeof(int32_t) * (size_t)gb);
    int host = mt_be()->host_memory;
    int64_t nloss = (int64_t)tc->micro * tc->seq;
    tr->host_inputs = host ? tr->inputs : malloc(sizeof(int32_t) * (size_t)gb);
    tr->host_targets = host ? tr->targets : malloc(sizeof(int32_t) * (size_t)gb);
    tr->host_losses = host ? NULL : malloc(sizeof(float) * (size_t)nloss);
    if (!tr->table || !tr->inputs || !tr->targets || !tr->host_inputs || !tr->host_targets || (!host && !tr->host_losses))
        goto oom;
    tr->nfloats = mt_trainer_table(tc, tr->table);
    tr->nunits = cfg->L + 2;
    for (int u = 0; u < tr->nunits; u++)
        mt_unit_span(tr->table, tr->nparams, u, &tr->unit_lo[u], &tr->unit_end[u]);
    for (int u = 0; u < tr->nunits; u++)
        tr->unit_hi[u] = u + 1 < tr->nunits ? tr->unit_lo[u + 1] : tr->nfloats;
    size_t pb = param_bytes(tr, tc->params_len), gbytes = param_bytes(tr, tc->grads_len);
    size_t ob = param_bytes(tr, tc->optim_len);
    if (!(tr->params = mt_mem_alloc(&tr->mem, MT_MEM_PARAMS, pb)))
        return alloc_failed(tr, "parameters", pb);
    if (!tc->inference) { /* eval and sample hold no gradients and no optimizer state */
        if (!(tr->grads = mt_mem_alloc(&tr->mem, MT_MEM_GRADS, gbytes)))
            return alloc_failed(tr, "gradients", gbytes);
        if (!(tr->m = mt_mem_alloc(&tr->mem, MT_MEM_OPTIM, ob)) || !(tr->v = mt_mem_alloc(&tr->mem, MT_MEM_OPTIM, ob)))
            return alloc_failed(tr, "AdamW moments", ob);
        tr->blk = mt_accum_block_size(tc);
        tr->span = tc->tree_span > 0 ? tc->tree_span : tc->batch / tc->micro;
        tr->ntmp = mt_accum_depth(tr->span / tr->blk);
    }
    for (int i = 0; i < tr->ntmp; i++)
        if (!(tr->gtmp[i] = mt_mem_alloc(&tr->mem, MT_MEM_GRADS, gbytes)))
            return alloc_failed(tr, "gradient tree buffers", gbytes);
    mt_trainer_leaf_lens(tc, tr->ulen);
    for (int s = 0; s < 2; s++)
        if (tr->ulen[s] && !(tr->ubuf[s] = mt_mem_alloc(&tr->mem, MT_MEM_GRADS, sizeof(float) * (size_t)tr->ulen[s])))
            return alloc_failed(tr, "the accumulation block's leaf buffers", sizeof(float) * (size_t)tr->ulen[s]);
    MtActsShape sh = mt_trainer_acts_shape(tc);
    MtStatus s = tc->acts_none ? MT_OK : mt_acts_alloc_shape(&tr->acts, &tr->mem, cfg, tc->micro, tc->seq, tc->threads, &sh);
    if (s != MT_OK) {
        int64_t want = mt_acts_floats_shape(cfg, tc->micro, tc->seq, tc->threads, &sh) * 4;
        return alloc_failed(tr, "activations", (size_t)want);
    }
    int64_t erows = mt_trainer_esum_floats(tc);
    if (erows > 0) { /* the block's embedding rows (MtEmbSum) */
        if (mt_embsum_init(&tr->esum, &tr->mem, mt_trainer_vocab_first(tc), mt_trainer_vocab_rows(tc), cfg->C,
                           erows / cfg->C, (int64_t)tc->micro * tc->seq, MT_EMBSUM_OWN) != MT_OK)
            return alloc_failed(tr, "embedding's gradient rows", sizeof(float) * (size_t)erows);
    }
    if (tc->params_len > 0)
        return MT_OK; /* sharded: views and values are the technique's */
    mt_weights_view(cfg, tr->table, tr->params, &tr->w);
    for (int p = 0; p < tr->nparams; p++)
        mt_trainer_param_init(tr, p, 0, tr->table[p].numel, tr->params + tr->table[p].offset);
    return MT_OK;
oom:
    mt_trainer_free(tr);
    return mt_error(MT_ENOMEM, "cannot allocate the training state (%lld parameters)",
                    (long long)tr->nfloats);
}

void mt_trainer_free(MtTrainer *tr)
{
    const MtTrainConfig *tc = &tr->tc;
    mt_acts_free(&tr->acts, &tr->mem);
    mt_embsum_free(&tr->esum, &tr->mem);
    for (int i = 0; i < tr->ntmp; i++) {
        mt_mem_free(&tr->mem, MT_MEM_GRADS, tr->gtmp[i], param_bytes(tr, tc->grads_len));
        tr->gtmp[i] = NULL;
    }
    for (int s = 0; s < 2; s++) {
        mt_mem_free(&tr->mem, MT_MEM_GRADS, tr->ubuf[s], sizeof(float) * (size_t)tr->ulen[s]);
        tr->ubuf[s] = NULL;
    }
    mt_mem_free(&tr->mem, MT_MEM_PARAMS, tr->params, param_bytes(tr, tc->params_len));
    mt_mem_free(&tr->mem, MT_MEM_GRADS, tr->grads, param_bytes(tr, tc->grads_len));
    mt_mem_free(&tr->mem, MT_MEM_OPTIM, tr->m, param_bytes(tr, tc->optim_len));
    mt_mem_free(&tr->mem, MT_MEM_OPTIM, tr->v, param_bytes(tr, tc->optim_len));
    tr->params = tr->grads = tr->m = tr->v = NULL;
    free(tr->table);
    free(tr->plan);
    free(tr->plan_loss);
    tr->plan = NULL;
    tr->plan_loss = NULL;
    int64_t gb = (int64_t)tc->batch * tc->seq;
    if (tr->host_inputs != tr->inputs)
        free(tr->host_inputs);
    if (tr->host_targets != tr->targets)
        free(tr->host_targets);
    free(tr->host_losses);
    mt_be()->free(tr->inputs, sizeof(int32_t) * (size_t)gb);
    mt_be()->free(tr->targets, sizeof(int32_t) * (size_t)gb);
    tr->table = NULL;
    tr->inputs = tr->targets = tr->host_inputs = tr->host_targets = NULL;
    tr->host_losses = NULL;
}

float mt_trainer_micro_grad_views(MtTrainer *tr, int k, const MtWeights *g, const MtUnitHooks *h)
{
    const MtTrainConfig *tc = &tr->tc;
    int64_t off = (int64_t)k * tc->micro * tc->seq;
    double step_tokens = (double)tc->batch * tc->seq;
    if (g->esum)
        mt_embsum_index(g->esum, tr->host_inputs + off, (int64_t)tc->micro * tc->seq);
    double sum = mt_model_forward(&tc->cfg, &tr->w, &tr->acts, tr->inputs + off, tr->targets + off,
                                  (float)(1.0 / step_tokens), h);
    mt_model_backward(&tc->cfg, &tr->w, g, &tr->acts, tr->inputs + off, h);
    return (float)(sum / step_tokens);
}

/* leaf k into gbuf, with hooks h.  The blocks' and ln_f's gradients are assigned (fresh
 * views); only the embedding unit, which several rows add to, and the padding are zeroed.
 * The token embedding's rows go to the block's sum (tr->esum). */
static float leaf(MtTrainer *tr, int k, float *gbuf, const MtUnitHooks *h)
{
    MtWeights g;
    mt_be()->zero(gbuf, tr->unit_hi[0]);
    for (int u = 1; u < tr->nunits; u++)
        mt_be()->zero(gbuf + tr->unit_end[u], tr->unit_hi[u] - tr->unit_end[u]);
    mt_weights_view(&tr->tc.cfg, tr->table, gbuf, &g);
    g.fresh = 1;
    g.esum = tr->esum.rows ? &tr->esum : NULL;
    return mt_trainer_micro_grad_views(tr, k, &g, h);
}

float mt_trainer_micro_grad(MtTrainer *tr, int k, float *gbuf)
{
    int flush = tr->esum.flush;
    tr->esum.flush = 1; /* a block of its own */
    float loss = leaf(tr, k, gbuf, NULL);
    tr->esum.flush = flush;
    return loss;
}

/* A block's end (mt_accum.h): its embedding rows into the block's wte, once the span being
 * summed holds wte (elements [0, numel) of the flat array: the embedding unit). */
static void block_end(void *ctx, float *sum, int64_t off, int64_t n)
{
    MtTrainer *tr = ctx;
    if (!tr->esum.rows || off > tr->table[0].offset)
        return;
    MT_ASSERT(off + n >= tr->table[0].offset + tr->table[0].numel, "a block's end on part of wte");
    mt_embsum_apply(&tr->esum, NULL, sum + tr->table[0].offset - off);
    mt_embsum_reset(&tr->esum);
}

/* The last leaf's hook: a unit's gradient is final for this micro-batch; run the plan's
 * remaining adds on its span, then tell the technique. */
static void spine_hook(void *ctx, MtUnitEvent ev, int unit)
{
    MtTrainer *tr = ctx;
    MtAccumEnd end = {block_end, tr};
    if (ev == MT_GRADS_DONE)
        mt_accum_adds(tr->plan, tr->nplan, tr->plan_last, tr->bufs, tr->unit_lo[unit],
                      tr->unit_hi[unit] - tr->unit_lo[unit], &end);
    tr->hooks.fn(tr->hooks.ctx, ev, unit);
}

/* A leaf computed apart (a block's later one): each unit's gradient in a unit buffer (the
 * embedding unit's, which lives through the whole backward, or the other one), added to the
 * block's sum when the unit is done: the plan's add, unit by unit.  On the spine (the
 * range's last leaf) the plan's steps after that add run on the unit too, and the technique
 * sees its gradient events; otherwise only the parameter events. */
static void apart_hook(void *ctx, MtUnitEvent ev, int u)
{
    MtTrainer *tr = ctx;
    int s = u == 0 ? 0 : 1;
    int64_t lo = tr->unit_lo[u], n = tr->unit_hi[u] - lo;
    if (ev == MT_GRADS_NEED) { /* the tensors are assigned (fresh views); wte and wpe add, padding stays 0 */
        int64_t z = u == 0 ? 0 : tr->unit_end[u] - lo;
        mt_be()->zero(tr->ubuf[s] + z, n - z);
        for (int q = 1; q < tr->nparams && u > 0; q++) /* the padding between tensors (ZeRO's norm blocks) */
            if (tr->table[q].unit == u && tr->table[q - 1].unit == u) {
                int64_t end = tr->table[q - 1].offset + tr->table[q - 1].numel;
                if (tr->table[q].offset > end)
                    mt_be()->zero(tr->ubuf[s] + (end - lo), tr->table[q].offset - end);
            }
        mt_weights_view_unit(&tr->tc.cfg, tr->table, tr->nparams, u, tr->ubuf[s], &tr->lview);
    } else if (ev == MT_GRADS_DONE) {
        mt_be()->add(tr->bufs[tr->plan[tr->lstep].buf] + lo, tr->ubuf[s], n);
        MtAccumEnd end = {block_end, tr};
        if (tr->lspine)
            mt_accum_adds(tr->plan, tr->nplan, tr->lstep, tr->bufs, lo, n, &end);
    }
    int grads = ev == MT_GRADS_NEED || ev == MT_GRADS_DONE;
    if (tr->hooks.fn && (tr->lspine || !grads))
        tr->hooks.fn(tr->hooks.ctx, ev, u);
}

/* leaf k computed apart, its add being plan step `add` */
static float leaf_apart(MtTrainer *tr, int k, int add, int spine)
{
    memset(&tr->lview, 0, sizeof tr->lview); /* every unit is viewed at its GRADS_NEED */
    tr->lview.fresh = 1;
    tr->lview.esum = tr->esum.rows ? &tr->esum : NULL;
    tr->lstep = add;
    tr->lspine = spine;
    MtUnitHooks h = {apart_hook, tr};
    return mt_trainer_micro_grad_views(tr, k, &tr->lview, &h);
}

/* Leaves other than the last: the technique sees the parameter events only (its gradient
 * events belong to the last leaf, whose sums finish the range). */
static void params_only_hook(void *ctx, MtUnitEvent ev, int unit)
{
    MtTrainer *tr = ctx;
    if (ev == MT_PARAMS_NEED || ev == MT_PARAMS_DONE || ev == MT_BACKWARD_BEGIN)
        tr->hooks.fn(tr->hooks.ctx, ev, unit);
}

/* The plan over n leaves (mt_accum.h), made when n changes. */
static void plan_for(MtTrainer *tr, int n)
{
    if (tr->plan && tr->plan_leaves == n)
        return;
    free(tr->plan);
    free(tr->plan_loss);
    tr->plan = malloc(sizeof(MtTreeStep) * (size_t)mt_tree_plan_max(n));
    tr->plan_loss = malloc(sizeof(float) * (size_t)n);
    MT_ASSERT(tr->plan && tr->plan_loss, "out of memory for the accumulation plan of %d micro-batches", n);
    tr->nplan = mt_tree_plan_blocks(n, tr->blk, tr->plan);
    tr->plan_leaves = n;
    for (int i = 0; i < tr->nplan; i++) /* the last leaf computed: its adds finish the sums */
        if (tr->plan[i].leaf >= 0)
            tr->plan_last = i;
}

/* Micro-batches [lo, hi) into tr->grads by the plan: each leaf computed into its buffer,
 * the adds after it run over the whole array; with a technique's hooks the last leaf's adds
 * run unit by unit as its backward finishes each unit (spine_hook).  Returns the loss, the
 * leaves' losses summed by the same plan. */
static float run_plan(MtTrainer *tr, int lo, int hi)
{
    int n = hi - lo;
    plan_for(tr, n);
    int ntemp = mt_accum_depth(n / tr->blk);
    tr->bufs[0] = tr->grads;
    for (int d = 0; d < ntemp; d++)
        tr->bufs[1 + d] = tr->gtmp[d];
    tr->bufs[1 + ntemp] = NULL; /* the leaf buffer is unit by unit (apart_hook) */
    float *losses = tr->plan_loss;
    MtUnitHooks params = {params_only_hook, tr}, last = {spine_hook, tr};
    MtAccumEnd end = {block_end, tr};
    for (int i = 0; i < tr->nplan;) {
        const MtTreeStep *s = &tr->plan[i];
        int on_spine = tr->hooks.fn && i == tr->plan_last;
        if (s->buf == 1 + ntemp) { /* a block's later leaf: apart, then added (step i + 1) unit by unit */
            losses[s->leaf] = leaf_apart(tr, lo + s->leaf, i + 1, on_spine);
            if (on_spine)
                break;
            i = mt_accum_adds(tr->plan, tr->nplan, i + 1, tr->bufs, 0, tr->nfloats, &end);
            continue;
        }
        losses[s->leaf] = leaf(tr, lo + s->leaf, tr->bufs[s->buf], !tr->hooks.fn ? NULL : on_spine ? &last : &params);
        if (on_spine) /* its adds were run unit by unit */
            break;
        i = mt_accum_adds(tr->plan, tr->nplan, i, tr->bufs, 0, tr->nfloats, &end);
    }
    return mt_tree_plan_sum(tr->plan, tr->nplan, losses);
}

float mt_trainer_forward_backward(MtTrainer *tr) { return run_plan(tr, 0, tr->tc.batch / tr->tc.micro); }

float mt_trainer_forward_backward_range(MtTrainer *tr, int lo, int hi)
{
    MT_ASSERT(lo % tr->blk == 0 && (hi - lo) % tr->blk == 0 && hi > lo, "micro-batches [%d, %d) are not whole "
              "accumulation blocks of %d", lo, hi, tr->blk);
    MT_ASSERT(mt_accum_buffers(hi - lo, tr->blk) <= tr->ntmp + (tr->ubuf[0] != NULL),
              "a range of %d micro-batches needs more gradient buffers than those allocated (tree_span)", hi - lo);
    return run_plan(tr, lo, hi);
}

void mt_trainer_update(MtTrainer *tr, MtStepStats *st)
{
    if (tr->tc.test_nan_step == tr->step + 1 && tr->grads) { /* test hook: a gradient gone bad */
        float nan = NAN;
        mt_be()->upload(tr->grads, &nan, sizeof nan);
    }
    double sumsq = tr->sumsq ? tr->sumsq(tr->sumsq_ctx) : mt_grad_sumsq(tr->table, tr->nparams, tr->grads);
    mt_trainer_apply(tr, sqrt(sumsq), st);
}

void mt_trainer_apply(MtTrainer *tr, double norm, MtStepStats *st)
{
    const MtOptimConfig *oc = &tr->tc.oc;
    mt_grad_clip(tr->grads, tr->nfloats, oc->grad_clip, norm);
    float lr = mt_lr_at(oc, (int)tr->step);
    mt_adamw_step(tr->table, tr->nparams, tr->params, tr->grads, tr->m, tr->v, oc, lr,
                  (int)tr->step + 1);
    tr->step++;
    st->grad_norm = (float)norm;
    st->lr = lr;
}

void mt_trainer_upload_tokens(MtTrainer *tr, int64_t at, int64_t n)
{
    mt_be()->upload(tr->inputs + at, tr->host_inputs + at, sizeof(int32_t) * (size_t)n);
    mt_be()->upload(tr->targets + at, tr->host_targets + at, sizeof(int32_t) * (size_t)n);
}

/* Test hooks (mt_testhooks.h): the step's sequence whose data fills sequence s.  Reversing
 * the first block's micro-batches sums that block right to left; exchanging the first and
 * the last micro-batch swaps two leaves of the tree.  Every executor fills its micro-batches
 * here, so the same mutation reaches the trainer, DDP, ZeRO, the pipeline and tensor
 * parallelism, whatever their order of leaves. */
static int64_t test_row(const MtTrainConfig *tc, int64_t s)
{
    int64_t mb = s / tc->micro, M = tc->batch / tc->micro, B = mt_accum_block_size(tc);
    if (mt_test_hooks.accum_rtl && mb < B)
        mb = B - 1 - mb;
    if (mt_test_hooks.accum_swap && M > 1 && (mb == 0 || mb == M - 1))
        mb = M - 1 - mb;
    return mb * tc->micro + s % tc->micro;
}

void mt_trainer_fill(MtTrainer *tr, const MtTokens *data, int64_t first, int64_t rows, int64_t at)
{
    const MtTrainConfig *tc = &tr->tc;
    int64_t o = at * tc->seq;
    if (mt_test_hooks.accum_rtl || mt_test_hooks.accum_swap) {
        for (int64_t k = 0; k < rows; k++)
            mt_batch_fill(data, tc->seed, tr->step, (int)test_row(tc, first + k), 1, tc->seq,
                          tr->host_inputs + o + k * tc->seq, tr->host_targets + o + k * tc->seq);
    } else
        mt_batch_fill(data, tc->seed, tr->step, (int)first, (int)rows, tc->seq, tr->host_inputs + o,
                      tr->host_targets + o);
    mt_trainer_upload_tokens(tr, o, rows * tc->seq);
}

const float *mt_trainer_host_losses(MtTrainer *tr, const float *losses, int64_t n)
{
    if (!tr->host_losses)
        return losses;
    mt_be()->download(tr->host_losses, losses, sizeof(float) * (size_t)n);
    return tr->host_losses;
}

void mt_trainer_step(MtTrainer *tr, const MtTokens *data, MtStepStats *st)
{
    mt_trainer_fill(tr, data, 0, tr->tc.batch, 0);
    st->loss = mt_trainer_forward_backward(tr);
    mt_trainer_update(tr, st);
}

int64_t mt_eval_share(int64_t n, int D, int r, int micro, int64_t *lo, int64_t *hi, int *passes)
{
    int64_t s = n > 0 ? (n + D - 1) / D : 0;
    *lo = r * s < n ? r * s : n;
    *hi = (r + 1) * s < n ? (r + 1) * s : n;
    *passes = (int)((s + micro - 1) / micro);
    return s;
}

int mt_trainer_eval_pass(MtTrainer *tr, const MtTokens *data, int64_t lo, int64_t hi, int j, int *real)
{
    int T = tr->tc.seq, micro = tr->tc.micro;
    int64_t first = lo + (int64_t)j * micro, left = hi - first;
    *real = left <= 0 ? 0 : left < micro ? (int)left : micro;
    int b = *real > 0 ? *real : 1;
    for (int k = 0; k < b; k++) {
        int64_t s = *real > 0 ? (first + k) * T : 0;
        memcpy(tr->host_inputs + (int64_t)k * T, data->tok + s, sizeof(int32_t) * T);
        memcpy(tr->host_targets + (int64_t)k * T, data->tok + s + 1, sizeof(int32_t) * T);
    }
    mt_trainer_upload_tokens(tr, 0, (int64_t)b * T);
    return b;
}

void mt_eval_window_sums(const float *losses, int n, int T, double *sums)
{
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int t = 0; t < T; t++)
            s += losses[(int64_t)i * T + t];
        sums[i] = s;
    }
}

double mt_eval_mean(const double *sums, int64_t n, int T)
{
    double total = 0.0;
    for (int64_t i = 0; i < n; i++)
        total += sums[i];
    return n > 0 ? total / ((double)n * T) : 0.0;
}

void mt_trainer_eval_windows(MtTrainer *tr, const MtTokens *data, int64_t lo, int64_t hi, int passes, double *sums)
{
    const MtTrainConfig *tc = &tr->tc;
    for (int j = 0; j < passes; j++) {
        int real, b = mt_trainer_eval_pass(tr, data, lo, hi, j, &real);
        MtActs a = tr->acts; /* same buffers, fewer rows */
        a.B = b;
        mt_model_forward(&tc->cfg, &tr->w, &a, tr->inputs, tr->targets, 0.0f, &tr->hooks);
        mt_eval_window_sums(mt_trainer_host_losses(tr, a.losses, (int64_t)real * tc->seq), real, tc->seq,
                            sums + (int64_t)j * tc->micro);
    }
}

double mt_trainer_eval(MtTrainer *tr, const MtTokens *data, int64_t nwin)
{
    double *sums = malloc(sizeof(double) * (size_t)(nwin > 0 ? nwin : 1));
    MT_ASSERT(sums, "no memory for %lld window sums", (long long)nwin);
    int64_t lo, hi;
    int passes;
    mt_eval_share(nwin, 1, 0, tr->tc.micro, &lo, &hi, &passes);
    mt_trainer_eval_windows(tr, data, lo, hi, passes, sums);
    double mean = mt_eval_mean(sums, nwin, tr->tc.seq);
    free(sums);
    return mean;
}
