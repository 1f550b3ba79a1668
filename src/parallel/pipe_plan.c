/* pipe_plan.c - a pipeline rank's memory and traffic from the layout alone (see mt_pipeline.h). */
#include "pipe_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void mt_pipe_plan(const MtTrainConfig *tc, const MtPipeOptions *o, int P, int rank, int dp_rank,
                  int64_t bytes[MT_MEM_NCAT])
{
    int64_t ulo[MT_MAX_UNITS], uhi[MT_MAX_UNITS], VC = mt_trainer_spans(tc, ulo, uhi);
    int ngbuf = 1 + mt_tree_temps_blocks(o->M, mt_accum_block_size(tc)), S = zero_S(o), rrm = o->mb_stride > 1;
    int64_t ulen = pipe_leaf_unit_floats(tc, o, P, rank);
    if (!rrm) /* the tree's temporaries (round-robin: on shards, below), the leaf buffer whole or unit by unit */
        bytes[MT_MEM_GRADS] += 4 * ((int64_t)(ngbuf - 1 - (ulen > 0)) * tc->grads_len + ulen);
    if (o->post_validate) /* what the pending update keeps: the parameters before it, its gradient */
        bytes[MT_MEM_OPTIM] += 8 * tc->grads_len;
    MtSchedule s = {o->kind, P, o->M, o->V, tc->cfg.untied};
    MtAction *list = malloc(sizeof(MtAction) * (size_t)mt_schedule_max_actions(&s));
    MT_ASSERT(list, "out of memory");
    int B = mt_accum_block_size(tc), n = mt_schedule_build(&s, rank, list), nh = mt_schedule_peak_wte(&s, list, n, B);
    /* activations: the backward scratch, and per pool of chunks of one shape the sets its
     * list holds at once (each with its stash for W in a split schedule), as mt_pipe_init
     * allocates them */
    const MtConfig *cfg = &tc->cfg;
    MtActsShape scratch = scratch_shape(tc);
    bytes[MT_MEM_ACTS] += 4 * mt_acts_floats_shape(cfg, tc->micro, tc->seq, tc->threads, &scratch);
    int psets[MT_PIPE_MAX_CHUNKS];
    pipe_pool_sets(o, &s, cfg->L, rank, list, n, psets);
    for (int c = 0; c < o->V; c++) {
        MtPipeChunk ch;
        int uf, ul, sets = psets[c]; /* 0 where the chunk views another's pool */
        pipe_chunk_units(o, cfg->L, P, rank, c, &ch, &uf, &ul);
        MtActsShape sh = set_shape(tc, &ch);
        int64_t stash = mt_schedule_split(o->kind)
                            ? mt_model_stash_floats(cfg, tc->micro, tc->seq, ch.l1 - ch.l0, ch.head, ch.embed) : 0;
        bytes[MT_MEM_ACTS] += 4 * (int64_t)sets * (mt_acts_floats_shape(cfg, tc->micro, tc->seq, tc->threads, &sh) + stash);
    }
    free(list);
    if (rank == 0) /* the block's embedding rows */
        bytes[MT_MEM_GRADS] += 4 * mt_trainer_esum_block_floats(tc);
    if (rank == P - 1 && !cfg->untied) { /* the wte replica, its moments, its tree over the blocks, their head sums (or operands) */
        PipeHead hd = pipe_head(tc, o, VC, nh);
        int nb = o->M / B, slots = hd.mode ? 1 : nh;
        bytes[MT_MEM_PARAMS] += 4 * VC;
        bytes[MT_MEM_OPTIM] += 8 * VC;
        bytes[MT_MEM_GRADS] += 4 * (int64_t)(1 + mt_accum_depth(nb) + (nb == 1 ? 0 : slots) + (B > 1)) * VC;
        bytes[MT_MEM_ACTS] += 4 * (nh * hd.keep + hd.scratch);
    }
    if (S > 0) { /* the reduced gradient's chunks (round-robin: with the tree over rounds); FSDP's slots */
        int64_t lo[MT_MAX_UNITS], hi[MT_MAX_UNITS], off = 0;
        int k = 0, unit[MT_MAX_UNITS];
        for (int c = 0; c < o->V; c++) {
            MtPipeChunk ch;
            int uf, ul;
            pipe_chunk_units(o, tc->cfg.L, P, rank, c, &ch, &uf, &ul);
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

int mt_pipe_plan_head(const MtTrainConfig *tc, const MtPipeOptions *o, int P, int rank, int *defer)
{
    *defer = 0;
    if (rank != P - 1 || tc->cfg.untied) /* an untied head sums its weight's gradient as any other */
        return 0;
    MtSchedule s = {o->kind, P, o->M, o->V, tc->cfg.untied};
    MtAction *list = malloc(sizeof(MtAction) * (size_t)mt_schedule_max_actions(&s));
    MT_ASSERT(list, "out of memory");
    int nh = mt_schedule_peak_wte(&s, list, mt_schedule_build(&s, rank, list), mt_accum_block_size(tc));
    free(list);
    int64_t ulo[MT_MAX_UNITS], uhi[MT_MAX_UNITS], VC = mt_trainer_spans(tc, ulo, uhi);
    *defer = pipe_head(tc, o, VC, nh).mode;
    return nh;
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
        pipe_chunk_units(o, L, P, rank, a->stage / P, &ch, &uf, &ul);
        if (a->kind == MT_ACT_F) {
            if (ch.embed)
                plan_need(&x, 0, next_after_embed(&ch));
            for (int l = ch.l0; l < ch.l1; l++)
                plan_need(&x, l + 1, next_forward(L, &ch, l));
            if (ch.head)
                plan_need(&x, L + 1, -1);
            continue;
        }
        if (a->kind == MT_ACT_B && ch.head)
            plan_need(&x, L + 1, next_after_head(&ch));
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
    MtSchedule s = {o->kind, P, M, o->V, cfg->untied};
    MtAction *list = malloc(sizeof(MtAction) * (size_t)mt_schedule_max_actions(&s));
    MT_ASSERT(list, "out of memory");
    int n = mt_schedule_build(&s, rank, list);
    bytes[0] = bytes[1] = bytes[2] = 0;
    /* pp (with the embed group): activations and their gradients, the embedding's rows (a
     * block's at its last micro-batch), the final wte gradient, the norm's block sums (with
     * tp: per-tensor parts) and the loss */
    int B = mt_accum_block_size(tc);
    for (int i = 0; i < n; i++)
        bytes[2] += list[i].kind == MT_ACT_SEND_F || list[i].kind == MT_ACT_SEND_B ? 4 * rows
                    : list[i].kind == MT_ACT_SEND_E && list[i].mb % B == B - 1 ? 4 * mt_trainer_esum_block_floats(tc)
                                                                              : 0;
    if (rank == P - 1 && !cfg->untied) /* the final wte gradient */
        bytes[2] += 4 * VC;
    int64_t most = 0, stage = 0, skip = 0; /* the most norm blocks a rank owns; this rank's floats */
    for (int r = 0; r < P; r++) {
        int64_t blocks = 0;
        for (int c = 0; c < o->V; c++) {
            MtPipeChunk ch;
            int uf, ul;
            pipe_chunk_units(o, L, P, r, c, &ch, &uf, &ul);
            for (int u = uf; u <= ul; u++) {
                blocks += (ulen[u] + MT_NORM_BLOCK - 1) / MT_NORM_BLOCK;
                stage += r == rank ? ulen[u] : 0;
            }
            skip += r == rank && ch.embed && !cfg->untied ? VC : 0;
            /* tp inside the stage: its units' passes, every micro-batch */
            if (r == rank)
                bytes[1] += (int64_t)M * mt_tp_plan_micro_bytes(cfg, tp, (int64_t)tc->micro * tc->seq, ch.embed, ch.l0,
                                                                  ch.l1, ch.head, tc->recompute,
                                                                  mt_schedule_split(o->kind));
        }
        most = blocks > most ? blocks : most;
    }
    bytes[2] += 8 * (int64_t)(P - 1) * ((tp ? nparams + 1 : most + 1) + (o->post_validate ? 3 : 0)); /* post-validation: the times too */
    bytes[1] += mt_tp_plan_step_bytes(tp, nparams);
    /* dp over the copies */
    int last = rank == P - 1;
    int64_t ar = 8 * (int64_t)(dp - 1), wte = last && !cfg->untied ? ar * VC / dp : 0, loss = last ? ar / dp : 0;
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
