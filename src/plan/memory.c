/* memory.c - the planner's memory model (see mt_cost.h; formulas in docs/planner.md). */
#include "mt_cost.h"

#include <stdlib.h>
#include <string.h>

#include "mt_plan.h"

/* The bf16 backend's fixed buffers: a matrix library workspace, and the transfer buffers
 * (DDP's bucket twice, a pipeline's two messages each way, a tp collective's buffer). */
#define MT_PLAN_WORKSPACE (32.0 * 1048576.0)

double mt_plan_block_act_bytes(const MtPlanModel *m, const MtPlanLayout *l)
{
    double s = m->seq, b = l->micro, h = m->cfg.C, a = m->cfg.NH, t = l->tp, sbh = s * b * h;
    if (l->recompute == MT_RECOMPUTE_FULL) /* only the block's input */
        return 2.0 * sbh / (l->seqpar ? t : 1.0);
    double scores = m->attn_fused || l->recompute == MT_RECOMPUTE_ATTN ? 0.0 : 5.0 * a * s / h;
    double stats = m->attn_fused ? 4.0 * a * s * b / t : 0.0; /* fused: the softmax's log-sum-exp per row */
    if (l->seqpar)
        return sbh / t * (34.0 + scores) + stats;
    return sbh * (10.0 + 24.0 / t + scores / t) + stats;
}

/* The sets of every virtual stage v (chunk v / P of rank v % P) under schedule s and the cut
 * `blocks`: a rank's chunks of one shape (as many blocks, the same ends) share one pool of
 * sets, as the executor allocates them (mt_schedule_pool_sets: the pool's count on its first
 * chunk, 0 on the others); the last schedule's kept (the search asks many layouts in a row). */
static const int *pool_sets(const MtSchedule *s, int L, const int *blocks)
{
    static MtSchedule key;
    static int kept_l, kept_blocks[MT_MAX_STAGES], sets[MT_MAX_STAGES];
    int S = s->P * s->V;
    if (memcmp(&key, s, sizeof key) == 0 && kept_l == L && memcmp(kept_blocks, blocks, sizeof(int) * (size_t)S) == 0)
        return sets;
    MtAction *list = malloc(sizeof(MtAction) * (size_t)mt_schedule_max_actions(s));
    MT_ASSERT(list, "out of memory");
    for (int r = 0; r < s->P; r++) {
        int k[MT_MAX_STAGES], got[MT_MAX_STAGES];
        for (int ch = 0; ch < s->V; ch++) {
            int first, last;
            mt_stage_units(L, S, blocks, ch * s->P + r, &first, &last);
            int nb = (last < L ? last : L) - (first > 1 ? first : 1) + 1;
            k[ch] = 4 * nb + 2 * (first == 0) + (last == L + 1); /* pipe_set_key */
        }
        mt_schedule_pool_sets(s, list, mt_schedule_build(s, r, list), k, got);
        for (int ch = 0; ch < s->V; ch++)
            sets[ch * s->P + r] = got[ch];
    }
    free(list);
    key = *s;
    kept_l = L;
    memcpy(kept_blocks, blocks, sizeof(int) * (size_t)S);
    return sets;
}

/* bf16: the rank's activations: each chunk's blocks times the sets it holds at once, the
 * first stage's embedding output, the last stage's fp32 logits, and with full
 * recomputation one block's whole set (the one being recomputed). */
static double bf16_acts(const MtPlanModel *m, const MtPlanLayout *l, const MtPipeOptions *po, int prank)
{
    const MtConfig *c = &m->cfg;
    double sbh = (double)m->seq * l->micro * c->C, per = mt_plan_block_act_bytes(m, l);
    double sp = l->seqpar ? l->tp : 1.0, logits = 4.0 * m->seq * l->micro * (double)c->V / l->tp;
    MtPlanLayout all = *l;
    all.recompute = MT_RECOMPUTE_NONE;
    double whole = mt_plan_block_act_bytes(m, &all);
    int P = l->pp, V = P > 1 ? l->V : 1, S = P * V;
    if (P == 1) /* one micro-batch at a time */
        return c->L * per + 2.0 * sbh / sp + logits + (l->recompute == MT_RECOMPUTE_FULL ? whole : 0.0);
    MtSchedule s = {l->sched, P, po->M, V, c->untied};
    int blocks[MT_MAX_STAGES];
    MT_ASSERT(mt_stage_layers(c->L, S, po->stage_layers, blocks) == MT_OK, "the plan's cut does not hold");
    const int *sets = pool_sets(&s, c->L, blocks);
    double bytes = 0.0;
    for (int ch = 0; ch < V; ch++) {
        int v = ch * P + prank, first, last;
        mt_stage_units(c->L, S, blocks, v, &first, &last);
        int nb = (last < c->L ? last : c->L) - (first > 1 ? first : 1) + 1;
        bytes += sets[v] * (nb * per + (first == 0 ? 2.0 * sbh / sp : 0.0) + (last == c->L + 1 ? logits : 0.0));
    }
    return bytes + (l->recompute == MT_RECOMPUTE_FULL ? whole : 0.0);
}

/* The ranks to ask: every rank of a small world; of a large one, on the stages that can be
 * the fullest (the first two, the last two, the last with an extra block and the next one)
 * the first and the last dp rank (their shards differ by the padding). */
static int ranks_to_ask(const MtPlanLayout *l, int L, int *ranks)
{
    int world = l->dp * l->tp * l->pp, n = 0, P = l->pp, S = P * (P > 1 ? l->V : 1);
    if (world <= 64) {
        for (int r = 0; r < world; r++)
            ranks[n++] = r;
        return n;
    }
    int extra = L % S, cand[6] = {0, 1, P - 2, P - 1, (extra > 0 ? extra - 1 : 0) % P, extra % P};
    for (int i = 0; i < 6; i++) {
        int p = cand[i], seen = 0;
        if (p < 0 || p >= P)
            continue;
        for (int j = 0; j < i; j++)
            seen |= cand[j] == p;
        if (seen)
            continue;
        ranks[n++] = p * l->dp * l->tp;
        if (l->dp > 1)
            ranks[n++] = (p * l->dp + l->dp - 1) * l->tp;
    }
    return n;
}

/* The engine's arrays (params, grads, optimizer) on the ranks asked, for bf16: they do not
 * depend on recomputation or sequence parallelism, so the search's consecutive layouts that
 * differ only there share them (one entry per ZeRO stage). */
typedef struct {
    MtPlanLayout key;
    int seq, batch, accum, n, ranks[64];
    MtConfig cfg;
    int64_t b[64][MT_MEM_NCAT];
} ArraysCache;

static const ArraysCache *engine_arrays(const MtPlanModel *m, const MtPlanLayout *l, const MtTrainConfig *tc,
                                        const MtEngineLayout *el)
{
    static ArraysCache cache[4];
    ArraysCache *c = &cache[l->zero & 3];
    MtPlanLayout k = *l;
    k.recompute = 0, k.seqpar = 0;
    if (c->n > 0 && memcmp(&c->key, &k, sizeof k) == 0 && memcmp(&c->cfg, &m->cfg, sizeof c->cfg) == 0 &&
        c->seq == m->seq && c->batch == m->batch && c->accum == tc->accum_blocks)
        return c;
    c->key = k, c->cfg = m->cfg, c->seq = m->seq, c->batch = m->batch, c->accum = tc->accum_blocks;
    c->n = ranks_to_ask(l, m->cfg.L, c->ranks);
    for (int i = 0; i < c->n; i++)
        mt_plan_memory(tc, el, c->ranks[i], c->b[i]);
    return c;
}

MtStatus mt_plan_mem(const MtPlanModel *m, const MtPlanLayout *l, const MtTrainConfig *tc, const MtEngineLayout *el,
                     MtPlanMem *out)
{
    memset(out, 0, sizeof *out);
    ArraysCache fresh, *c = &fresh;
    if (m->prec == MT_PREC_FP32) { /* every category the engine's, activations included: no sharing */
        c->n = ranks_to_ask(l, m->cfg.L, c->ranks);
        for (int i = 0; i < c->n; i++)
            mt_plan_memory(tc, el, c->ranks[i], c->b[i]);
    } else
        c = (ArraysCache *)engine_arrays(m, l, tc, el);
    for (int i = 0; i < c->n; i++) {
        const int64_t *b = c->b[i];
        double x[MT_NPMEM] = {0};
        if (m->prec == MT_PREC_FP32) {
            x[MT_PMEM_PARAMS] = (double)b[MT_MEM_PARAMS];
            x[MT_PMEM_GRADS] = (double)b[MT_MEM_GRADS];
            x[MT_PMEM_OPTIM] = (double)b[MT_MEM_OPTIM];
            x[MT_PMEM_ACTS] = (double)b[MT_MEM_ACTS];
        } else {
            /* post-validation's kept state is optimizer state too: in fp32 the parameters before
             * the pending update and its gradient (8 bytes a parameter, no ZeRO); in bf16 the
             * gradient only (4 bytes), the update written to the bf16 copy and the fp32 master
             * left until the check */
            double pf = b[MT_MEM_PARAMS] / 4.0, kept = l->post_validate ? 2.0 * b[MT_MEM_PARAMS] : 0.0;
            double master = (b[MT_MEM_OPTIM] - kept) / 8.0;
            int prank = c->ranks[i] / (l->dp * l->tp);
            x[MT_PMEM_PARAMS] = 2.0 * pf + 4.0 * master;
            x[MT_PMEM_GRADS] = (double)b[MT_MEM_GRADS];
            x[MT_PMEM_OPTIM] = (double)b[MT_MEM_OPTIM] - kept + (l->post_validate ? 4.0 * pf : 0.0);
            x[MT_PMEM_ACTS] = bf16_acts(m, l, &el->po, prank);
            double msg = 2.0 * m->seq * l->micro * m->cfg.C / (l->seqpar ? l->tp : 1);
            x[MT_PMEM_COMM] = (l->dp > 1 ? 2.0 * 25.0 * 1048576.0 : 0.0) + (l->pp > 1 ? 4.0 * msg : 0.0) +
                              (l->tp > 1 ? msg * (l->seqpar ? l->tp : 1) : 0.0);
            x[MT_PMEM_WORK] = MT_PLAN_WORKSPACE;
        }
        double peak = 0.0;
        for (int k = 0; k < MT_NPMEM; k++)
            peak += x[k];
        if (i == 0 || peak > out->peak) {
            memcpy(out->bytes, x, sizeof x);
            out->peak = peak;
            out->rank = c->ranks[i];
        }
    }
    return MT_OK;
}
