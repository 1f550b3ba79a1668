/* planner.c - the layout search (see mt_planner.h). */
#include "mt_planner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mt_engine.h"

static const char *recompute_names[] = {"none", "attn", "full"};

void mt_plan_train_flags(const MtPlanModel *m, const MtPlanLayout *l, const char *data, char *buf, size_t n)
{
    const MtConfig *c = &m->cfg;
    int k = snprintf(buf, n, "meshtrain train --data %s --layers %d --heads %d --dim %d --seq-len %d --vocab %d "
                     "--batch-size %d --micro-batch-size %d --dp %d --tp %d --pp %d", data, c->L, c->NH, c->C, m->seq,
                     c->V, m->batch, l->micro, l->dp, l->tp, l->pp);
    if (l->dp > 1 && k < (int)n)
        k += snprintf(buf + k, n - k, " --zero %d", l->zero);
    if (l->shard > 0 && l->shard < l->dp && k < (int)n)
        k += snprintf(buf + k, n - k, " --shard-size %d", l->shard);
    if (l->pp > 1 && k < (int)n)
        k += snprintf(buf + k, n - k, " --schedule %s", mt_schedule_name(l->sched));
    if (l->pp > 1 && l->V > 1 && k < (int)n)
        k += snprintf(buf + k, n - k, " --virtual-stages %d", l->V);
    for (int i = 0; l->pp > 1 && l->stage_layers && i < l->nstage && k < (int)n; i++)
        k += snprintf(buf + k, n - k, "%s%d", i ? "," : " --stage-layers ", l->stage_layers[i]);
    if (l->recompute != MT_RECOMPUTE_NONE && k < (int)n)
        k += snprintf(buf + k, n - k, " --recompute %s", recompute_names[l->recompute]);
    if (l->seqpar && k < (int)n)
        k += snprintf(buf + k, n - k, " --sequence-parallel");
    if (c->untied && k < (int)n)
        k += snprintf(buf + k, n - k, " --untie-embeddings");
    if (l->post_validate && k < (int)n)
        snprintf(buf + k, n - k, " --post-validate");
}

void mt_plan_one(const MtPlanModel *m, const MtCluster *cl, const MtPlanLayout *l, int accum_blocks, double bound,
                 MtPlanEntry *e)
{
    memset(e, 0, sizeof *e);
    e->l = *l;
    MtTrainConfig tc = {0};
    tc.cfg = m->cfg;
    tc.batch = m->batch;
    tc.micro = l->micro;
    tc.seq = m->seq;
    tc.threads = cl->threads > 0 ? cl->threads : 1; /* the CPU engine's per-thread scratch */
    tc.recompute = l->recompute;
    MtEngineRequest rq = {.dp = l->dp, .tp = l->tp, .pp = l->pp, .zero = l->zero, .shard = l->shard,
                          .seqpar = l->seqpar, .schedule = mt_schedule_name(l->pp > 1 ? l->sched : MT_SCHED_1F1B),
                          .vstages = l->pp > 1 ? l->V : 1, .bucket_mb = 25.0f, .accum_blocks = accum_blocks,
                          .stage_layers = l->pp > 1 ? l->stage_layers : NULL,
                          .nstage = l->pp > 1 && l->stage_layers ? l->nstage : 0, .post_validate = l->post_validate};
    MtEngineLayout el;
    int part;
    if (l->pp > MT_MAX_STAGES) {
        e->verdict = MT_PLAN_REFUSED;
        snprintf(e->why, sizeof e->why, "--pp %d: at most %d pipeline stages", l->pp, MT_MAX_STAGES);
        return;
    }
    if (mt_engine_check(&rq, &tc, &el, &part) != MT_OK) {
        const char *msg = mt_error_msg(); /* the degrees, cuts or blocks do not divide, or another refusal */
        e->verdict = strstr(msg, "divide") || strstr(msg, "multiple") ? MT_PLAN_NODIV : MT_PLAN_REFUSED;
        snprintf(e->why, sizeof e->why, "%s", mt_error_msg());
        return;
    }
    if (mt_plan_mem(m, l, &tc, &el, &e->mem) != MT_OK) {
        e->verdict = MT_PLAN_REFUSED;
        snprintf(e->why, sizeof e->why, "%s", mt_error_msg());
        return;
    }
    if (e->mem.peak > cl->mem_bytes) {
        e->verdict = MT_PLAN_OOM;
        snprintf(e->why, sizeof e->why, "rank %d needs %.2f GB of the device's %.2f GB", e->mem.rank,
                 e->mem.peak / 1e9, cl->mem_bytes / 1e9);
        return;
    }
    if (mt_plan_time(m, l, cl, bound, &e->time) != MT_OK) {
        e->verdict = MT_PLAN_REFUSED;
        snprintf(e->why, sizeof e->why, "%s", mt_error_msg());
        return;
    }
    int devices = l->dp * l->tp * l->pp;
    e->tokens_per_s = (double)m->batch * m->seq / e->time.step;
    e->tflops = mt_plan_model_flops(m) / e->time.step / devices / 1e12;
    e->mfu = e->tflops * 1e12 / cl->peak[m->prec];
    e->verdict = MT_PLAN_OK;
}

static int by_time(const void *a, const void *b)
{
    const MtPlanEntry *x = a, *y = b;
    if (x->verdict != y->verdict)
        return x->verdict - y->verdict;
    if (x->verdict == MT_PLAN_OK && x->time.step != y->time.step)
        return x->time.step < y->time.step ? -1 : 1;
    if (x->verdict == MT_PLAN_OOM && x->mem.peak != y->mem.peak)
        return x->mem.peak < y->mem.peak ? -1 : 1;
    return 0;
}

static int add(MtPlanResult *r, int *cap)
{
    if (r->n == *cap) {
        int nc = *cap ? 2 * *cap : 1024;
        MtPlanEntry *ne = realloc(r->e, sizeof(MtPlanEntry) * (size_t)nc);
        if (!ne)
            return -1;
        r->e = ne;
        *cap = nc;
    }
    return r->n++;
}

static int pick(int fixed, int v) { return fixed < 0 || fixed == v; }

/* the `top` fastest step times so far, ascending: best[top - 1] bounds the rest */
static void keep_best(double *best, int top, int *n, double t)
{
    if (*n == top && t >= best[top - 1])
        return;
    int i = *n < top ? (*n)++ : top - 1;
    for (; i > 0 && best[i - 1] > t; i--)
        best[i] = best[i - 1];
    best[i] = t;
}

MtStatus mt_plan_search(const MtPlanModel *m, const MtCluster *cl, int devices, const MtPlanFixed *fx, int top,
                        MtPlanResult *r)
{
    memset(r, 0, sizeof *r);
    double *best = top > 0 ? malloc(sizeof(double) * (size_t)top) : NULL;
    int nbest = 0;
    if (top > 0 && !best)
        return mt_error(MT_ENOMEM, "out of memory");
    double t0 = mt_now();
    int cap = 0;
    for (int tp = 1; tp <= devices; tp++) {
        if (devices % tp || !pick(fx->tp, tp))
            continue;
        for (int pp = 1; pp <= devices / tp; pp++) {
            if ((devices / tp) % pp || !pick(fx->pp, pp))
                continue;
            int dp = devices / tp / pp;
            if (!pick(fx->dp, dp) || m->batch % dp)
                continue;
            for (int micro = 1; micro <= m->batch / dp; micro++) {
                if ((m->batch / dp) % micro || !pick(fx->micro, micro))
                    continue;
                if (fx->micro < 0 && micro > 64)
                    break;
                /* ZeRO innermost: its layouts share the pipeline's simulation and the engine's arrays */
                for (int sk = 0; sk < (pp > 1 ? MT_NSCHED : 1); sk++) {
                    if (pp > 1 && fx->sched >= 0 && fx->sched != sk)
                        continue;
                    int vmax = pp > 1 && sk == MT_SCHED_INTERLEAVED ? 8 : 1;
                    for (int V = sk == MT_SCHED_INTERLEAVED && pp > 1 ? 2 : 1; V <= vmax; V++) {
                        if (fx->V >= 0 && fx->V != V)
                            continue;
                        for (int rc = 0; rc < 3; rc++) {
                            if (!pick(fx->recompute, rc))
                                continue;
                            for (int sp = 0; sp <= (tp > 1 ? 1 : 0); sp++) {
                                if (!pick(fx->seqpar, sp))
                                    continue;
                                /* post-validation: searched on an untied model's pipelines (the engine
                                 * refuses it tied), fixed by --post-validate / --no-post-validate */
                                int pvmax = pp > 1 && (fx->post_validate > 0 || (fx->post_validate < 0 && m->cfg.untied));
                                for (int zero = 0; zero <= 3; zero++)
                                for (int pv = pp > 1 && fx->post_validate > 0; pv <= pvmax; pv++) {
                                    if (!pick(fx->zero, zero) || (fx->zero < 0 && zero > 0 && dp == 1))
                                        continue;
                                    MtPlanLayout l = {.dp = dp, .tp = tp, .pp = pp, .zero = zero,
                                                      .shard = fx->shard >= 0 ? fx->shard : 0,
                                                      .sched = pp > 1 ? sk : MT_SCHED_1F1B, .V = V, .micro = micro,
                                                      .recompute = rc, .seqpar = sp,
                                                      .stage_layers = fx->stage_layers, .nstage = fx->nstage,
                                                      .post_validate = pv};
                                    int i = add(r, &cap);
                                    if (i < 0) {
                                        free(best);
                                        return mt_error(MT_ENOMEM, "out of memory listing layouts");
                                    }
                                    double bound = top > 0 && nbest == top ? best[top - 1] : INFINITY;
                                    mt_plan_one(m, cl, &l, fx->accum_blocks, bound, &r->e[i]);
                                    r->counts[r->e[i].verdict]++;
                                    if (top > 0 && r->e[i].verdict == MT_PLAN_OK && !r->e[i].time.bounded)
                                        keep_best(best, top, &nbest, r->e[i].time.step);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    free(best);
    qsort(r->e, (size_t)r->n, sizeof *r->e, by_time);
    r->fits = r->counts[MT_PLAN_OK];
    r->seconds = mt_now() - t0;
    if (r->n == 0)
        return mt_error(MT_EINPUT, "no layout of %d devices satisfies the fixed flags (the degrees must multiply "
                        "to the devices and divide the batch of %d)", devices, m->batch);
    return MT_OK;
}

void mt_plan_result_free(MtPlanResult *r)
{
    free(r->e);
    memset(r, 0, sizeof *r);
}
