/* pipeline.c - model and pipeline parallelism: one executor for any schedule's list (see
 * mt_pipeline.h): transfers, compute, the step (the tied embedding: pipe_head.c). */
#include "pipe_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mt_backend.h"

/* ---- transfers ---- */

#define SEND_SPIN_S 3e-4 /* the most a send waits for its transfer to finish at once */
static int key(const MtAction *a) { return (a->kind * MT_MAX_STAGES + a->stage) * 4096 + a->mb; }

double pipe_clock_in(MtPipe *p, double since)
{
    double t = mt_now();
    p->comm_s += t - since;
    return t;
}

/* whether *r has completed (NULL); waits if `wait`.  A completed request is released. */
int pipe_req_done(MtPipe *p, MtRequest **r, int wait)
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
            pipe_req_done(p, &p->land_req[i], 0);
    for (int i = 0; i < p->send_next; i++)
        pipe_req_done(p, &p->send_req[i], 0);
    for (int h = 0; h < p->nh; h++)
        if (p->h_mb[h] >= 0)
            pipe_req_done(p, &p->ereq[h], 0);
    for (int k = 0; k < p->nesend; k++)
        pipe_req_done(p, &p->esend_req[k], 0);
}

void pipe_poll(void *ctx) { progress(ctx); }

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
    pipe_clock_in(p, t);
}

/* waits for the receive that feeds compute action a; returns its landing buffer index */
static int take_land(MtPipe *p, int recv_kind, const MtAction *a)
{
    MtAction r = {recv_kind, a->stage, a->mb};
    int k = key(&r);
    for (int i = 0; i < p->nland; i++)
        if (p->land_key[i] == k) {
            double t = mt_now();
            pipe_req_done(p, &p->land_req[i], 1);
            pipe_clock_in(p, t);
            return i;
        }
    MT_ASSERT(0, "no receive was posted for stage %d micro-batch %d", a->stage, a->mb);
    return -1;
}

static void send(MtPipe *p, MtGroupKind g, int peer, int t, const float *x, int64_t n)
{
    MT_ASSERT(p->send_next < p->nsend, "more sends than the list holds");
    float *b = p->sendb[p->send_next];
    mt_be()->copy(b, x, n);
    double t0 = mt_now();
    p->send_req[p->send_next++] = mt_isend(p->c, g, b, n, peer, t);
    /* A peer already waiting for this gets it now, not at our next poll a kernel later (a
     * large message needs the sender's progress after the receiver answers): measured here,
     * 1F1B's bubble fell by about 1.5 points (4 of 4 interleaved pairs). */
    while (!pipe_req_done(p, &p->send_req[p->send_next - 1], 0) && mt_now() < t0 + SEND_SPIN_S)
        ;
    progress(p);
    pipe_clock_in(p, t0);
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
    MtPipeChunk *po = &p->ch[ch->pool];
    MT_ASSERT(po->nfree > 0, "no activation set free on stage %d", a->stage);
    int slot = po->freelist[--po->nfree];
    ch->slot[a->mb] = slot;
    MtActs *s = &ch->sets[slot];
    int64_t off = (int64_t)a->mb * tc->micro * tc->seq;
    double t0 = mt_comm_clock(p->c);
    if (ch->embed) {
        pipe_params_need(p, 0, next_after_embed(ch));
        mt_model_embed_forward(&tc->cfg, &p->w, s, p->tr->inputs + off);
    } else {
        mt_be()->copy(s->encoded, p->land[land], rows(p));
        p->land_key[land] = -1;
    }
    const float *x = s->encoded;
    for (int l = ch->l0; l < ch->l1; l++) {
        pipe_params_need(p, l + 1, next_forward(tc->cfg.L, ch, l));
        mt_model_block_forward(&tc->cfg, &p->w, s, l, x);
        x = s->res3[l];
        progress(p);
    }
    if (ch->head) {
        pipe_params_need(p, tc->cfg.L + 1, -1);
        double sum = mt_model_head_forward(&tc->cfg, &p->w, s, x, p->tr->targets + off, head_dscale(tc));
        p->leaf_loss[a->mb] = (float)(sum / ((double)tc->batch * tc->seq));
    }
    busy(p, t0, MT_ACT_F, a);
}

/* The leaf of (chunk, micro-batch) starts: its tree buffer's span zeroed, gradient views
 * on it (and on the head's part of wte on the last rank: pipe_head_begin). */
static float *leaf_begin(MtPipe *p, MtPipeChunk *ch, int mb, MtWeights *gv)
{
    const MtTrainer *tr = p->tr;
    const MtConfig *cfg = &tr->tc.cfg;
    const MtTreeStep *ts = &ch->plan[ch->tstep];
    MT_ASSERT(ts->leaf == mb, "stage %d: gradient of micro-batch %d out of order (tree expects %d)", ch->stage, mb,
              ts->leaf);
    float *g = rr(p) ? tr->grads : p->gbuf[ts->buf]; /* round-robin: the leaf buffer, reduced at leaf_end */
    p->apart = p->ubuf && !rr(p) && ts->buf == p->ngbuf - 1; /* the leaf buffer unit by unit: unit_begin */
    if (p->apart)
        MT_ASSERT(ch->plan[ch->tstep + 1].leaf == -1 && ch->plan[ch->tstep + 1].src == ts->buf,
                  "stage %d: a leaf computed apart is not added next", ch->stage);
    else {
        if (ch->embed) /* wpe adds its rows (tied: wte comes whole from the last rank); the rest is assigned */
            mt_be()->zero(g + ch->loff + ch->skip, tr->unit_hi[0] - ch->lo - ch->skip);
        int uf, ul;
        pipe_units(p, ch, &uf, &ul);
        for (int u = uf; u <= ul; u++)
            mt_weights_view_unit(cfg, tr->table, tr->nparams, u, g + ch->loff + (tr->unit_lo[u] - ch->lo), gv);
    }
    gv->fresh = 1;
    gv->esum = NULL; /* the first rank adds its rows itself (pipe_embed_index) */
    if (ch->head && !cfg->untied)
        gv->wte = pipe_head_begin(p, mb);
    return g;
}

/* Where the leaf is computed apart: unit u's gradient views on the unit buffer (wpe alone
 * for the embedding), zeroed first (wpe adds its rows; the padding, after a unit's end and
 * with ZeRO over tensor parallelism between its tensors, stays 0), and at its end the
 * plan's add of the leaf into the block's sum on the unit's span, as the trainer does. */
static void unit_begin(MtPipe *p, const MtPipeChunk *ch, int u, MtWeights *gv)
{
    if (!p->apart)
        return;
    const MtTrainer *tr = p->tr;
    int64_t lo = tr->unit_lo[u] + (u == 0 ? ch->skip : 0);
    mt_be()->zero(p->ubuf, tr->unit_hi[u] - lo);
    if (u == 0)
        gv->wpe = p->ubuf + (tr->table[1].offset - lo);
    else
        mt_weights_view_unit(&tr->tc.cfg, tr->table, tr->nparams, u, p->ubuf, gv);
}

static void unit_end(MtPipe *p, const MtPipeChunk *ch, int u)
{
    if (!p->apart)
        return;
    const MtTrainer *tr = p->tr;
    int64_t lo = tr->unit_lo[u] + (u == 0 ? ch->skip : 0);
    mt_be()->add(p->gbuf[ch->plan[ch->tstep + 1].buf] + ch->loff + (lo - ch->lo), p->ubuf, tr->unit_hi[u] - lo);
}

/* An untied model's first stage at an accumulation block's end: the block's embedding rows
 * into the block's wte gradient, as the trainer does (the tied one sends them: SEND_E). */
static void embed_block_end(void *ctx, float *sum, int64_t off, int64_t n)
{
    MtPipe *p = ctx;
    int64_t at = p->ch[0].loff + (p->tr->table[0].offset - p->ch[0].lo); /* wte in the rank's arrays */
    MT_ASSERT(off <= at && at + p->tr->table[0].numel <= off + n, "a block's end on part of wte");
    mt_embsum_apply(&p->esum, NULL, sum + at);
    mt_embsum_reset(&p->esum);
}

static void leaf_end(MtPipe *p, MtPipeChunk *ch, int mb)
{
    if (ch->head && !p->defer && !p->tr->tc.cfg.untied)
        pipe_head_end(p, mb);
    int own_rows = ch->embed && p->tr->tc.cfg.untied;
    if (own_rows && rr(p)) /* round-robin: blocks of one, reduced as the leaf ends */
        embed_block_end(p, p->tr->grads, ch->loff, ch->hi - ch->lo);
    MtAccumEnd end = {own_rows ? embed_block_end : NULL, p};
    if (!rr(p)) /* apart: the leaf's add ran unit by unit, the steps after it run here */
        ch->tstep = mt_accum_adds(ch->plan, p->nplan, ch->tstep + p->apart, p->gbuf, ch->loff + ch->skip,
                                  ch->hi - ch->lo - ch->skip, &end);
    p->apart = 0;
    MtPipeChunk *po = &p->ch[ch->pool];
    po->freelist[po->nfree++] = ch->slot[mb];
}

static const float *block_input(const MtPipeChunk *ch, const MtActs *s, int l)
{
    return l > ch->l0 ? s->res3[l - 1] : s->encoded;
}

/* what the chunk's blocks leave for the head or the next stage: the embedding's rows where it has none */
static const float *chunk_out(const MtPipeChunk *ch, const MtActs *s) { return block_input(ch, s, ch->l1); }

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
    const float *xh = chunk_out(ch, s);
    if (ch->head)
        pipe_params_need(p, cfg->L + 1, next_after_head(ch));
    if (!ch->head) {
        mt_be()->copy(s->dres, p->land[land], rows(p));
        p->land_key[land] = -1;
    } else if (split)
        mt_model_head_backward_input(cfg, &p->w, s, xh, stash(p, ch, slot, STASH_HEAD));
    else {
        unit_begin(p, ch, cfg->L + 1, &gv);
        mt_model_head_backward(cfg, &p->w, &gv, s, xh);
        unit_end(p, ch, cfg->L + 1);
        if (p->defer)
            pipe_keep_head(p, s, a->mb);
    }
    progress(p);
    for (int l = ch->l1 - 1; l >= ch->l0; l--) {
        pipe_params_need(p, l + 1, l > ch->l0 ? l : -1);
        if (split)
            mt_model_block_backward_input(cfg, &p->w, s, l, block_input(ch, s, l), stash(p, ch, slot, l));
        else {
            unit_begin(p, ch, l + 1, &gv);
            mt_model_block_backward(cfg, &p->w, &gv, s, l, block_input(ch, s, l));
            unit_end(p, ch, l + 1);
        }
        progress(p);
    }
    if (ch->embed && split) { /* every row (gathered over tp with sequence parallelism): W's wpe, the block's sum */
        const float *d = tr->tc.tp ? mt_tp_all_rows(cfg, s) : s->dres;
        mt_be()->copy(stash(p, ch, slot, STASH_EMBED), d, erows(p));
        if (!cfg->untied) { /* tied: now, for the last rank (SEND_E); untied: at W, in W's order (its block's end) */
            pipe_embed_index(p, a->mb);
            mt_embsum_add(&p->esum, d);
        }
    } else if (ch->embed) { /* wpe here; the token rows into the block's sum (tied: for the last rank, SEND_E) */
        pipe_embed_index(p, a->mb);
        unit_begin(p, ch, 0, &gv);
        mt_model_embed_backward(cfg, NULL, gv.wpe, s, tokens_of(p, a->mb), &p->esum);
        unit_end(p, ch, 0);
    }
    if (!split)
        leaf_end(p, ch, a->mb);
    busy(p, t0, MT_ACT_B, a);
    if (!split)
        pipe_leaf_reduce(p, ch);
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
    if (ch->head) {
        unit_begin(p, ch, tc->cfg.L + 1, &gv);
        mt_model_head_backward_weight(&tc->cfg, &gv, s, chunk_out(ch, s), stash(p, ch, slot, STASH_HEAD));
        unit_end(p, ch, tc->cfg.L + 1);
        if (p->defer)
            pipe_keep_head(p, s, a->mb);
    }
    progress(p);
    for (int l = ch->l1 - 1; l >= ch->l0; l--) {
        pipe_params_need(p, l + 1, l > ch->l0 ? l : -1); /* recomputation runs the block's forward */
        unit_begin(p, ch, l + 1, &gv);
        mt_model_block_backward_weight(&tc->cfg, &p->w, &gv, s, l, block_input(ch, s, l), stash(p, ch, slot, l));
        unit_end(p, ch, l + 1);
        progress(p);
    }
    if (ch->embed) {
        if (tc->cfg.untied) { /* the rows into the block's sum here, where the block ends */
            pipe_embed_index(p, a->mb);
            mt_embsum_add(&p->esum, stash(p, ch, slot, STASH_EMBED));
        }
        unit_begin(p, ch, 0, &gv);
        mt_be()->encoder_backward(NULL, gv.wpe, stash(p, ch, slot, STASH_EMBED), tokens_of(p, a->mb), tc->micro, tc->seq,
                                  tc->cfg.C);
        unit_end(p, ch, 0);
    }
    leaf_end(p, ch, a->mb);
    busy(p, t0, MT_ACT_W, a);
    pipe_leaf_reduce(p, ch);
}

static void run(MtPipe *p, const MtAction *a)
{
    int last = p->rank == p->P - 1;
    if (last)
        pipe_poll_e(p, 0);
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
        send(p, MT_GROUP_PP, (a->stage + 1) % p->P, tag(TAG_F, a->mb), chunk_out(ch, &ch->sets[ch->slot[a->mb]]),
             rows(p));
        break;
    case MT_ACT_SEND_B:
        send(p, MT_GROUP_PP, (a->stage - 1) % p->P, tag(TAG_B, a->mb), p->scratch.dres, rows(p));
        break;
    case MT_ACT_SEND_E:
        pipe_send_e(p, a->mb);
        break;
    case MT_ACT_RECV_E:
        pipe_recv_e(p, a->mb);
        break;
    case MT_ACT_E: /* round-robin: completed here, where every copy reduces it */
        p->e_due++;
        pipe_poll_e(p, rr(p) ? p->e_due - p->e_next : 0);
        break;
    default:
        MT_ASSERT(0, "the executor cannot run action kind %d yet", a->kind);
    }
}

/* ---- the step ---- */

/* the single-device norm: every unit's block sums in order, from whichever rank holds it;
 * the last rank's loss rides along.  The first stage sums its other units while the wte
 * gradient (*wte, in flight from the last rank) arrives. */
static void norm_blocks(MtPipe *p, double *mine, MtRequest **wte)
{
    MtTrainer *tr = p->tr;
    int64_t K = p->max_blocks + 1;
    memset(mine, 0, sizeof(double) * (size_t)K);
    if (p->o.zero_dp > 1)
        pipe_zero_blocks(p, mine, wte);
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
                pipe_req_done(p, wte, 1);
                pipe_clock_in(p, t);
            }
        }
    if (p->rank == p->P - 1)
        mine[K - 1] = p->loss;
}

/* the sum of every rank's blocks (each rank's `stride` doubles in all, its K first), in
 * unit order, and the loss the last rank sent */
static double norm_total(const MtPipe *p, const double *all, int64_t stride, float *loss)
{
    const MtTrainer *tr = p->tr;
    int64_t K = p->max_blocks + 1;
    double total = 0.0;
    for (int u = 0; u < tr->nunits; u++) {
        const double *b = all + (int64_t)p->unit_rank[u] * stride + p->unit_block[u];
        for (int64_t i = 0; i < nblocks(tr, u); i++)
            total += b[i];
    }
    *loss = (float)all[(int64_t)(p->P - 1) * stride + K - 1];
    return total;
}

static double norm_and_loss(MtPipe *p, float *loss, MtRequest **wte)
{
    int64_t K = p->max_blocks + 1;
    double *mine = p->block_sums + (int64_t)p->rank * K;
    norm_blocks(p, mine, wte);
    double t = mt_now();
    mt_allgather(p->c, MT_GROUP_PP, (const float *)mine, (float *)p->block_sums, 2 * K * p->P);
    pipe_clock_in(p, t);
    return norm_total(p, p->block_sums, K, loss);
}

/* With tensor parallelism, its norm (mt_tp.h): each tensor's part (K/N sub-slices of a
 * split one) from the stage that holds it, gathered over pp with the loss, then combined
 * over the tp group as one tp rank does: the bits of one device with K blocks. */
/* this rank's parts (n + 1 doubles: a part per tensor, then the loss) */
static void tp_norm_parts(MtPipe *p, double *mine, MtRequest **wte)
{
    MtTrainer *tr = p->tr;
    const MtTpCtx *tp = tr->tc.tp;
    int n = tr->nparams;
    double t = mt_now();
    pipe_req_done(p, wte, 1); /* the first stage's wte gradient */
    pipe_clock_in(p, t);
    memset(mine, 0, sizeof(double) * (size_t)(n + 1));
    double *blocks = p->block_sums + (int64_t)p->rank * (p->max_blocks + 1);
    if (p->o.zero_dp > 1) /* ZeRO: the reduced gradient is in the dp ranks' chunks */
        pipe_zero_blocks(p, blocks, wte);
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
}

/* every stage's parts (stride doubles a rank in all), each tensor's from the stage that holds
 * it, combined over the tp group as one tp rank does (a collective over tp) */
static double tp_norm_total(MtPipe *p, const double *all, int64_t stride, float *loss)
{
    MtTrainer *tr = p->tr;
    const MtTpCtx *tp = tr->tc.tp;
    int n = tr->nparams;
    double *parts = p->tparts + (n + 1) + (int64_t)(n + 1) * p->P, *tp_all = parts + n;
    for (int q = 0; q < n; q++)
        parts[q] = all[(int64_t)p->unit_rank[tr->table[q].unit] * stride + q];
    *loss = (float)all[(int64_t)(p->P - 1) * stride + n];
    if (tp->N > 1)
        mt_allgather(p->c, MT_GROUP_TP, (const float *)parts, (float *)tp_all, 2 * (int64_t)n * tp->N);
    return mt_tp_sumsq_combine(tr->table, n, tp->N > 1 ? tp_all : parts, tp->N);
}

static double tp_norm_and_loss(MtPipe *p, float *loss, MtRequest **wte)
{
    int n = p->tr->nparams;
    double *mine = p->tparts, *all = mine + (n + 1);
    tp_norm_parts(p, mine, wte);
    double t = mt_now(); /* doubles travel as pairs of floats, bits untouched */
    mt_allgather(p->c, MT_GROUP_PP, (const float *)mine, (float *)all, 2 * (int64_t)(n + 1) * p->P);
    double total = tp_norm_total(p, all, n + 1, loss);
    pipe_clock_in(p, t);
    return total;
}

/* the step's compute: the list, the sends' completion, the loss, the reductions over the
 * copies, the wte gradient on its way to the first stage (*wte) */
static void step_compute(MtPipe *p, MtRequest **wte_out)
{
    MtTrainer *tr = p->tr;
    const MtTrainConfig *tc = &tr->tc;
    int64_t VC = tr->table[0].numel;
    if (rr(p) && p->ch[0].embed) /* the leaves' wte part stays zero: it comes whole from the last rank */
        mt_be()->zero(tr->grads + p->ch[0].loff, p->ch[0].skip);
    for (int k = 0; k < p->V; k++) {
        MtPipeChunk *ch = &p->ch[k];
        ch->nfree = ch->pool == k ? ch->nsets : 0;
        for (int i = 0; i < ch->nfree; i++)
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
        pipe_poll_e(p, p->o.M);
    MT_ASSERT(p->e_next == p->e_due && (p->rank != p->P - 1 || tc->cfg.untied || p->e_next == p->o.M),
              "%d of %d embedding leaves completed", p->e_next, p->o.M);
    double t = mt_now();
    for (int i = 0; i < p->send_next; i++)
        pipe_req_done(p, &p->send_req[i], 1);
    for (int k = 0; k < p->nesend; k++)
        pipe_req_done(p, &p->esend_req[k], 1);
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
    if (p->o.zero_dp > 1 && !rr(p)) /* ZeRO: each unit reduce-scattered over the copies */
        pipe_zero_reduce(p);
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
    if (p->rank == p->P - 1 && p->wte)
        wte = mt_isend(p->c, MT_GROUP_EMBED, p->wbuf[0], VC, 0, tag(TAG_WTE, 0));
    if (p->rank == 0 && !tc->cfg.untied)
        wte = mt_irecv(p->c, MT_GROUP_EMBED, tr->grads + p->ch[0].loff, VC, 1, tag(TAG_WTE, 0));
    pipe_clock_in(p, t);
    *wte_out = wte;
}

/* the measured bubble: idle share of the span of the step's compute over the copy's ranks,
 * from each rank's busy seconds, first start and last end (x: stride doubles a rank, those
 * three at x[0..2]) */
static double bubble_of(const MtPipe *p, const double *x, int64_t stride)
{
    double lo = x[1], hi = x[2], b = 0;
    for (int r = 0; r < p->P; r++) {
        const double *y = x + (int64_t)r * stride;
        lo = y[1] < lo ? y[1] : lo;
        hi = y[2] > hi ? y[2] : hi;
        b += y[0];
    }
    return hi > lo ? 1.0 - b / ((double)p->P * (hi - lo)) : 0.0;
}

/* ---- optimizer post-validation (--post-validate, mt_pipeline.h) ---- */

/* the rank's blocks and loss (K doubles) and its busy, first and last time into the
 * parity's slot, gathered over pp without waiting */
/* the doubles of a rank's norm sums and loss: its blocks (the single-device blocks), or
 * with tensor parallelism's blocks a part per tensor */
static int64_t pv_sums(const MtPipe *p) { return p->tr->tc.tp ? p->tr->nparams + 1 : p->max_blocks + 1; }

static void pv_post(MtPipe *p)
{
    int64_t K = pv_sums(p), W = K + 3;
    double *all = p->pv_all[p->pv_parity], *mine = all + (int64_t)p->rank * W;
    MtRequest *none = NULL;
    if (p->tr->tc.tp)
        tp_norm_parts(p, mine, &none);
    else
        norm_blocks(p, mine, &none);
    mine[K] = p->busy_s, mine[K + 1] = p->t_first, mine[K + 2] = p->t_last;
    p->pv_req[p->pv_parity] = mt_iallgather(p->c, MT_GROUP_PP, (const float *)mine, (float *)all, 2 * W * p->P);
    mt_request_count_now(p->pv_req[p->pv_parity]); /* this step's traffic, though it completes in the next */
}

/* whether the update of the norm given is the one without clipping (mt_grad_clip's test) */
static int pv_unclipped(const MtOptimConfig *oc, double norm)
{
    return isfinite(norm) && (oc->grad_clip <= 0.0f || oc->grad_clip / (norm + 1e-6) >= 1.0);
}

/* The clip and AdamW on the rank's chunks (without ZeRO).  part (MT_ADAMW_*): ALL clips with
 * the norm and writes everything; post-validation's update before its check writes the
 * parameters only (PARAMS: as if the norm needs no clipping), and once checked the moments
 * (MOMENTS) from the same state and the gradient kept: together ALL's bits. */
static void stage_update(MtPipe *p, double norm, float lr, int t, int part)
{
    MtTrainer *tr = p->tr;
    const MtOptimConfig *oc = &tr->tc.oc;
    const float *g = part == MT_ADAMW_MOMENTS ? p->pv_save + tr->tc.grads_len : tr->grads;
    if (part == MT_ADAMW_ALL)
        mt_grad_clip(tr->grads, tr->tc.grads_len, oc->grad_clip, norm);
    for (int k = 0; k < p->V; k++) {
        MtPipeChunk *ch = &p->ch[k];
        mt_adamw_range_part(tr->table, tr->nparams, ch->lo, ch->hi, tr->params + ch->loff, g + ch->loff,
                            tr->m + ch->loff, tr->v + ch->loff, oc, lr, t, part);
    }
}

/* what the pending update needs kept (8 bytes a parameter): the parameters before it (it
 * writes them at once) and the gradient it took (the next step's is summed in its place);
 * the moments are left as they were until the check */
static void pv_copy(MtPipe *p, int back)
{
    MtTrainer *tr = p->tr;
    int64_t n = tr->tc.grads_len;
    float *arr[2] = {tr->params, tr->grads};
    for (int i = 0; i < 2; i++)
        if (back)
            mt_be()->copy(arr[i], p->pv_save + (int64_t)i * n, n);
        else
            mt_be()->copy(p->pv_save + (int64_t)i * n, arr[i], n);
}

/* The pending step's gathered norm: its stats into st; 1 when its update (made without
 * clipping) stands, its moments then written; else that update undone and made again with
 * the norm (clipped, or as the step without post-validation makes it with a norm that is
 * not finite), and 0: the step just computed read the wrong parameters */
static int pv_validate(MtPipe *p, MtStepStats *st)
{
    MtTrainer *tr = p->tr;
    int q = p->pv_parity ^ 1;
    int64_t K = pv_sums(p), W = K + 3;
    double t = mt_now();
    pipe_req_done(p, &p->pv_req[q], 1);
    float loss;
    double norm = sqrt(tr->tc.tp ? tp_norm_total(p, p->pv_all[q], W, &loss) : norm_total(p, p->pv_all[q], W, &loss));
    pipe_clock_in(p, t);
    if (mt_comm_rank(p->c) == 0)
        p->bubble = bubble_of(p, p->pv_all[q] + K, W);
    *st = (MtStepStats){loss, (float)norm, p->pv_lr, p->pv_step};
    p->pv_pending = 0;
    if (pv_unclipped(&tr->tc.oc, norm)) {
        stage_update(p, norm, p->pv_lr, (int)p->pv_step, MT_ADAMW_MOMENTS);
        return 1;
    }
    pv_copy(p, 1); /* the gradient of the step just computed goes: that step runs again */
    stage_update(p, norm, p->pv_lr, (int)p->pv_step, MT_ADAMW_ALL);
    p->pv_rollbacks++;
    return 0;
}

int mt_pipe_flush(MtPipe *p, MtStepStats *st)
{
    if (!p->pv_pending)
        return 0;
    pv_validate(p, st); /* between steps the pending step's slot is the other one */
    return 1;
}

void mt_pipe_step(MtPipe *p, const MtTokens *data, MtStepStats *st)
{
    MtTrainer *tr = p->tr;
    const MtTrainConfig *tc = &tr->tc;
    const MtOptimConfig *oc = &tc->oc;
    int64_t VC = tr->table[0].numel;
    if (!rr(p))
        mt_trainer_fill(tr, data, p->o.first_mb * tc->micro, p->o.M * tc->micro, 0);
    for (int j = 0; rr(p) && j < p->o.M; j++) { /* round-robin: round j's micro-batch of this copy */
        mt_trainer_fill(tr, data, (p->o.first_mb + j * p->o.mb_stride) * tc->micro, tc->micro, j * tc->micro);
    }
    MtRequest *wte = NULL;
    if (p->o.post_validate) {
        /* the previous step's update was made before its norm was known: checked here, after
         * this step's compute; where it had to be clipped it is made again and this step's
         * compute, which read the parameters it gave, runs again (every rank decides alike) */
        *st = (MtStepStats){0}; /* step 0: none ready (the first step) */
        for (;;) {
            step_compute(p, &wte);
            pv_post(p); /* into slot pv_parity; the pending step's is the other */
            if (!p->pv_pending || pv_validate(p, st))
                break;
            double t = mt_now(); /* this attempt's gather completes before the step runs again */
            pipe_req_done(p, &p->pv_req[p->pv_parity], 1);
            pipe_clock_in(p, t);
            mt_comm_reset_counters(p->c); /* the step's counters: its last attempt's */
        }
        /* this step's update, as if its norm needs no clipping: the state before it kept */
        pv_copy(p, 0);
        p->pv_lr = mt_lr_at(oc, (int)tr->step);
        p->pv_step = tr->step + 1;
        stage_update(p, 0.0, p->pv_lr, (int)p->pv_step, MT_ADAMW_PARAMS);
        p->pv_pending = 1;
        p->pv_parity ^= 1; /* the next step posts into the other slot */
        tr->step++;
        return;
    }
    step_compute(p, &wte);
    double norm = sqrt(tc->tp ? tp_norm_and_loss(p, &st->loss, &wte) : norm_and_loss(p, &st->loss, &wte));
    float lr = mt_lr_at(oc, (int)tr->step);
    if (p->o.zero_dp > 1)
        pipe_zero_update(p, norm, lr);
    else
        stage_update(p, norm, lr, (int)tr->step + 1, MT_ADAMW_ALL);
    if (p->wte) { /* the replica takes the same step as the first stage's wte */
        mt_grad_clip(p->wbuf[0], VC, oc->grad_clip, norm);
        mt_adamw_range(tr->table, tr->nparams, 0, VC, p->wte, p->wbuf[0], p->wte_m, p->wte_v, oc, lr, (int)tr->step + 1);
    }
    tr->step++;
    st->grad_norm = (float)norm;
    st->lr = lr;
    st->step = tr->step;
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

