/* cost.c - the planner's time model (see mt_cost.h; formulas in docs/planner.md). */
#include "mt_cost.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- pieces ---- */

static double eff_dim(const MtCluster *cl, double d) { return d / (d + cl->gemm_half); }

double mt_cost_gemm(const MtCluster *cl, int prec, double m, double n, double k, double count)
{
    if (m <= 0 || n <= 0 || k <= 0 || count <= 0)
        return 0.0;
    double e = prec == MT_PREC_BF16 ? 2.0 : 4.0;
    double eff = cl->gemm_max * eff_dim(cl, m) * eff_dim(cl, n) * eff_dim(cl, k);
    double t_flops = 2.0 * m * n * k / (cl->peak[prec] * eff);
    double t_bytes = e * (m * k + k * n + m * n) / (cl->mem_bw * cl->mem_eff);
    return count * (t_flops > t_bytes ? t_flops : t_bytes);
}

double mt_cost_stream(const MtCluster *cl, double bytes) { return bytes / (cl->mem_bw * cl->mem_eff); }

MtLink mt_cost_group_link(const MtCluster *cl, int n, int stride, int *per_node)
{
    int dpn = cl->devices_per_node;
    if ((long long)n * stride <= dpn || n == 1) { /* all members in one node */
        if (per_node)
            *per_node = n;
        return cl->intra;
    }
    if (per_node) /* members stride apart: a node holds dpn / stride of them (at least one) */
        *per_node = stride >= dpn ? 1 : dpn / stride;
    return cl->inter;
}

double mt_cost_coll(const MtCluster *cl, MtLink link, int kind, int n, double bytes)
{
    if (n <= 1 || bytes <= 0)
        return 0.0;
    double bw = link.bw * cl->net_eff;
    if (kind == MT_COLL_P2P)
        return link.lat + bytes / bw;
    double steps = kind == MT_COLL_ALLREDUCE ? 2.0 * (n - 1) : (double)(n - 1);
    return steps * (link.lat + bytes / n / bw);
}

/* ---- the pipeline ---- */

/* The schedule's lists, the last two schedules' kept: the search times many layouts of one
 * schedule in a row (the two lengths of an extrapolation alternate). */
typedef struct {
    MtSchedule key;
    MtAction *all;
    int cap, n[MT_MAX_STAGES];
} Lists;

static const Lists *lists_of(const MtSchedule *s)
{
    static Lists kept[2];
    static int next;
    for (int i = 0; i < 2; i++)
        if (kept[i].all && memcmp(&kept[i].key, s, sizeof *s) == 0)
            return &kept[i];
    Lists *k = &kept[next];
    next ^= 1;
    int cap = mt_schedule_max_actions(s);
    MtAction *all = realloc(k->all, sizeof(MtAction) * (size_t)cap * (size_t)s->P);
    if (!all)
        return NULL;
    k->all = all, k->cap = cap, k->key = *s;
    for (int r = 0; r < s->P; r++)
        k->n[r] = mt_schedule_build(s, r, all + (size_t)r * cap);
    return k;
}

static MtStatus simulate(const MtSchedule *s, const double *stage, double *makespan, double *busy)
{
    const Lists *k = lists_of(s);
    if (!k)
        return mt_error(MT_ENOMEM, "out of memory simulating a pipeline");
    MtAction *lists[MT_MAX_STAGES];
    for (int r = 0; r < s->P; r++)
        lists[r] = k->all + (size_t)r * k->cap;
    MtSimCosts c = {0, 0, 0, stage, NULL};
    MtSimResult res;
    MtStatus st = mt_simulate(s, lists, k->n, c, &res);
    if (st == MT_OK) {
        *makespan = res.makespan;
        *busy = 0;
        for (int r = 0; r < s->P; r++)
            *busy = res.busy[r] > *busy ? res.busy[r] : *busy;
    }
    mt_sim_free(&res);
    return st;
}

MtStatus mt_cost_pipeline(const MtSchedule *s, const double *stage, double *makespan, double *busy)
{
    int P = s->P, V = s->V, step = s->kind == MT_SCHED_INTERLEAVED ? P : 1;
    int m2 = (8 * P + step - 1) / step * step; /* the longest list simulated */
    if (s->M <= m2 || s->kind == MT_SCHED_NAIVE)
        return simulate(s, stage, makespan, busy);
    /* beyond: the busiest rank computes every micro-batch, so the makespan grows at least by
     * its work per micro-batch, and by the slope of the last P micro-batches simulated where
     * that is steeper; exact once the busiest rank has absorbed its slack (tested against
     * full simulations of uneven stages up to 21 P: within 1%) */
    double t1, b1, t2, b2, wmax = 0;
    MtSchedule a = *s, b = *s;
    a.M = m2 - (P > step ? P : step);
    b.M = m2;
    MT_TRY(simulate(&a, stage, &t1, &b1));
    MT_TRY(simulate(&b, stage, &t2, &b2));
    for (int r = 0; r < P; r++) {
        double w = 0;
        for (int c = 0; c < V; c++)
            w += stage[3 * (c * P + r)] + stage[3 * (c * P + r) + 1] + stage[3 * (c * P + r) + 2];
        wmax = w > wmax ? w : wmax;
    }
    /* the last P micro-batches' slope where it is steeper (phases whose bottlenecks differ:
     * gpipe's forwards then backwards, interleaving's rounds) */
    double slope = (t2 - t1) / (b.M - a.M);
    *makespan = t2 + (s->M - m2) * (slope > wmax ? slope : wmax);
    *busy = b2 + (s->M - m2) * wmax;
    return MT_OK;
}

MtStatus mt_cost_pipeline_overlap(const MtSchedule *s, const double *stage, double *saving)
{
    /* two steps back to back, without the barrier: each rank's list of the second step (its
     * micro-batches numbered on) follows its first; the step shortens by what the second's
     * warm-up hides of the first's cool-down, the same at any M beyond the simulated one
     * (the lists' ends do not change), so it is measured at most at mt_cost_pipeline's
     * longest simulated list */
    int P = s->P, step = s->kind == MT_SCHED_INTERLEAVED ? P : 1;
    int m2 = (8 * P + step - 1) / step * step;
    MtSchedule one = *s, two = *s;
    one.M = s->M <= m2 ? s->M : m2;
    two.M = 2 * one.M;
    int cap = mt_schedule_max_actions(&one);
    MtAction *all = malloc(sizeof(MtAction) * (size_t)cap * 2 * (size_t)P), *lists[MT_MAX_STAGES];
    int n[MT_MAX_STAGES], n2[MT_MAX_STAGES];
    if (!all)
        return mt_error(MT_ENOMEM, "out of memory simulating a pipeline's overlapped steps");
    for (int r = 0; r < P; r++) {
        lists[r] = all + (size_t)r * 2 * cap;
        n[r] = mt_schedule_build(&one, r, lists[r]);
        for (int i = 0; i < n[r]; i++) {
            lists[r][n[r] + i] = lists[r][i];
            lists[r][n[r] + i].mb += one.M;
        }
        n2[r] = 2 * n[r];
    }
    MtSimResult a, b;
    MtStatus st = mt_simulate(&one, lists, n, (MtSimCosts){0, 0, 0, stage, NULL}, &a);
    if (st == MT_OK)
        st = mt_simulate(&two, lists, n2, (MtSimCosts){0, 0, 0, stage, NULL}, &b);
    if (st == MT_OK)
        *saving = 2.0 * a.makespan - b.makespan;
    if (st == MT_OK)
        mt_sim_free(&b);
    mt_sim_free(&a);
    free(all);
    return st;
}

/* ---- one unit's costs for one micro-batch on one tp rank ---- */

typedef struct {
    double f, b, w;    /* compute: forward, backward's input part, its weight part */
    double rc;         /* recomputation before the backward */
    double tpf, tpb;   /* exposed tensor-parallel collectives: forward (and recomputed forward), backward */
} UnitCost;

typedef struct {
    const MtPlanModel *m;
    const MtPlanLayout *l;
    const MtCluster *cl;
    double e;  /* bytes per activation element */
    MtLink tpl;
    double speed;  /* the device's compute speed: node_full_speed when the layout fills a node, else 1 */
    double mspeed; /* its streaming speed: node_full_memory_speed when the layout fills a node, else 1 */
} Ctx;

/* element-wise kernels' bytes (the cluster's measured rate where it has one) */
static double E(const Ctx *x, double bytes)
{
    return (x->cl->ew_bw > 0 ? bytes / x->cl->ew_bw : mt_cost_stream(x->cl, bytes)) / x->mspeed;
}

/* a product (m x k) (k x n) as the CPU kernels call it (ta, tb: 0 0 forward, 0 1 the input's
 * gradient, 1 0 the weight's): its measured rate where the cluster has that shape, else the curve */
static double Gt(const Ctx *x, int ta, int tb, double m, double n, double k, double count)
{
    for (int i = 0; i < x->cl->ngemm; i++)
        if (x->cl->gemm[i].ta == ta && x->cl->gemm[i].tb == tb && x->cl->gemm[i].m == m && x->cl->gemm[i].n == n &&
            x->cl->gemm[i].k == k)
            return count * 2.0 * m * n * k / x->cl->gemm[i].rate / x->speed;
    return mt_cost_gemm(x->cl, x->m->prec, m, n, k, count) / x->speed;
}

static double G(const Ctx *x, double m, double n, double k, double count) { return Gt(x, 0, 0, m, n, k, count); }

static double tp_coll(const Ctx *x, double bytes)
{
    /* an all-reduce, or with sequence parallelism an all-gather and a reduce-scatter of the
     * same total: the same ring time */
    return mt_cost_coll(x->cl, x->tpl, MT_COLL_ALLREDUCE, x->l->tp, bytes);
}

static UnitCost block_cost(const Ctx *x)
{
    const MtConfig *c = &x->m->cfg;
    double b = x->l->micro, s = x->m->seq, h = c->C, a = c->NH, t = x->l->tp, hd = h / a, bs = b * s, e = x->e;
    double sp = x->l->seqpar ? t : 1.0; /* what sequence parallelism divides */
    UnitCost u = {0};
    /* the four weight products: qkv, proj, fc1, fc2 */
    double fwd = 0, dgrad = 0, wgrad = 0;
    double in[4] = {h, h / t, h, 4 * h / t}, out[4] = {3 * h / t, h, 4 * h / t, h}; /* qkv, proj, fc, fc proj */
    for (int i = 0; i < 4; i++) {
        fwd += Gt(x, 0, 0, bs, out[i], in[i], 1);
        dgrad += Gt(x, 0, 1, bs, in[i], out[i], 1);
        wgrad += Gt(x, 1, 0, in[i], out[i], bs, 1);
    }
    /* attention's core: S = Q K^T and S V per head; fused skips the causal mask's half */
    double heads = b * a / t, causal = x->m->attn_fused ? 0.5 : 1.0;
    double core = G(x, s, s, hd, heads * causal) + G(x, s, hd, s, heads * causal);
    double core_b = (x->m->attn_fused ? 2.5 : 2.0) * core; /* fused: the backward recomputes S */
    if (x->m->attn_fused && x->cl->attn_fwd > 0) { /* the fused kernel measured (meshtrain calibrate) */
        double flops = 4.0 * heads * s * s * hd * 0.5, peak = x->cl->peak[x->m->prec];
        core = flops / (peak * x->cl->attn_fwd) / x->speed;
        core_b = 2.5 * flops / (peak * (x->cl->attn_bwd > 0 ? x->cl->attn_bwd : x->cl->attn_fwd)) / x->speed;
    }
    /* element-wise bytes of the forward: two LayerNorms, two residual adds with dropout, GELU,
     * and unfused attention's scale, mask, softmax and dropout over the scores */
    double ew = (2 * 2 * e + 2 * 3 * e) * bs * h / sp + 2 * e * 4 * bs * h / t;
    double scores = x->m->attn_fused ? 0.0 : (4 * e + 1) * b * a * s * s / t;
    double ew_t = E(x, ew), sc_t = E(x, scores);
    u.f = fwd + core + ew_t + sc_t;
    u.b = dgrad + core_b + 2 * (ew_t + sc_t);
    u.w = wgrad;
    double tp1 = t > 1 ? tp_coll(x, bs * h * e) : 0.0;
    u.tpf = 2 * tp1;
    u.tpb = 2 * tp1;
    if (x->l->recompute == MT_RECOMPUTE_FULL) {
        u.rc = u.f;
        u.tpf += 2 * tp1; /* the recomputed forward's collectives */
    } else if (x->l->recompute == MT_RECOMPUTE_ATTN)
        u.rc = core + sc_t;
    return u;
}

static UnitCost head_cost(const Ctx *x)
{
    const MtConfig *c = &x->m->cfg;
    double bs = (double)x->l->micro * x->m->seq, h = c->C, t = x->l->tp, V = c->V, e = x->e;
    double sp = x->l->seqpar ? t : 1.0;
    UnitCost u = {0};
    double lnf = E(x, 2 * e * bs * h / sp);
    double loss = E(x, 3 * 4.0 * bs * V / t); /* fp32 logits: written, read for the softmax, the loss */
    u.f = G(x, bs, V / t, h, 1) + lnf + loss;
    u.b = G(x, bs, h, V / t, 1) + 2 * lnf + E(x, 2 * 4.0 * bs * V / t);
    u.w = G(x, h, V / t, bs, 1);
    if (t > 1) {
        u.tpf = 3 * mt_cost_coll(x->cl, x->tpl, MT_COLL_ALLREDUCE, x->l->tp, 4.0 * bs); /* max, sum, target logit */
        u.tpb = tp_coll(x, bs * h * e);                                               /* the input's gradient */
    }
    if (x->l->recompute == MT_RECOMPUTE_FULL)
        u.rc = 0.0; /* the head keeps its operands */
    return u;
}

static UnitCost embed_cost(const Ctx *x)
{
    double bs = (double)x->l->micro * x->m->seq, h = x->m->cfg.C, e = x->e;
    UnitCost u = {0};
    u.f = E(x, 3 * e * bs * h);
    u.b = E(x, 2 * 4.0 * bs * h);
    if (x->l->tp > 1)
        u.tpf = tp_coll(x, bs * h * e); /* the vocabulary-split lookup's sum */
    return u;
}

/* ---- parameters of the units (whole model; a tp rank holds its slices) ---- */

static double block_floats(const MtConfig *c, int t)
{
    double h = c->C;
    return (12 * h * h + 9 * h) / t + 4 * h; /* split weights and biases; LayerNorms and c_proj/fc2 biases replicated */
}

double mt_plan_model_flops(const MtPlanModel *m)
{
    const MtConfig *c = &m->cfg;
    double h = c->C, N = 12.0 * c->L * h * h + (double)c->V * h, tokens = (double)m->batch * m->seq;
    return 6.0 * N * tokens + 12.0 * c->L * m->seq * h * tokens;
}

static MtStatus time_model(const MtPlanModel *m, const MtPlanLayout *l, const MtCluster *cl, MtStepTime *t,
                           double *stage_out, double bound)
{
    memset(t, 0, sizeof *t);
    const MtConfig *c = &m->cfg;
    int world = l->dp * l->tp * l->pp;
    int full = world >= cl->devices_per_node;
    Ctx x = {m, l, cl, m->prec == MT_PREC_BF16 ? 2.0 : 4.0, {0}, full && cl->node_full > 0 ? cl->node_full : 1.0,
             full && cl->node_full_mem > 0 ? cl->node_full_mem : 1.0};
    x.tpl = mt_cost_group_link(cl, l->tp, 1, NULL);
    UnitCost ub = block_cost(&x), uh = head_cost(&x), ue = embed_cost(&x);
    int P = l->pp, V = l->pp > 1 ? l->V : 1, S = P * V;
    int M = m->batch / l->micro / l->dp; /* micro-batches of one copy */
    int blocks[MT_MAX_STAGES * 8];
    MT_TRY(mt_stage_layers(c->L, S, P > 1 ? l->stage_layers : NULL, blocks));
    double act = (double)l->micro * m->seq * c->C * x.e / (l->seqpar ? l->tp : 1); /* a stage's output message */
    MtLink ppl = mt_cost_group_link(cl, P, l->dp * l->tp, NULL);
    double p2p = P > 1 ? mt_cost_coll(cl, ppl, MT_COLL_P2P, 2, act) : 0.0;
    /* per virtual stage: compute, recompute, tp, p2p of one micro-batch */
    double *stage = calloc((size_t)S * 7, sizeof(double));
    if (!stage)
        return mt_error(MT_ENOMEM, "out of memory");
    double *comp = stage + 3 * S, *rec = comp + S, *tpc = rec + S, *ppc = tpc + S;
    double units_floats[MT_MAX_STAGES] = {0}; /* per rank: the parameter floats it holds */
    int units_of[MT_MAX_STAGES] = {0};
    for (int v = 0; v < S; v++) {
        int first, last;
        mt_stage_units(c->L, S, blocks, v, &first, &last);
        double f = 0, b = 0, w = 0, rc = 0, tp = 0;
        for (int u = first; u <= last; u++) {
            const UnitCost *k = u == 0 ? &ue : u == c->L + 1 ? &uh : &ub;
            f += k->f, b += k->b, w += k->w, rc += k->rc, tp += k->tpf + k->tpb;
            units_floats[v % P] += u == 0 ? (double)c->V * c->C / l->tp + (double)m->seq * c->C
                                 : u == c->L + 1 ? 2.0 * c->C + (c->untied ? (double)c->V * c->C / l->tp : 0.0)
                                                 : block_floats(c, l->tp);
            units_of[v % P]++;
        }
        if (P > 1 && last == c->L + 1 && first > 0 && !c->untied) /* the last stage's wte replica */
            units_floats[v % P] += (double)c->V * c->C / l->tp;
        double sends = (v < S - 1 ? p2p : 0.0) + (v > 0 ? p2p : 0.0);
        comp[v] = f + b + w;
        rec[v] = rc;
        tpc[v] = tp;
        ppc[v] = sends;
        /* the simulator's F, B, W: the exposed collectives and sends inside them */
        double tpf = 0, tpb = 0;
        for (int u = first; u <= last; u++) {
            const UnitCost *k = u == 0 ? &ue : u == c->L + 1 ? &uh : &ub;
            tpf += k->tpf, tpb += k->tpb;
        }
        stage[3 * v] = f + tpf + (v < S - 1 ? p2p : 0.0);
        stage[3 * v + 1] = b + rc + tpb + (v > 0 ? p2p : 0.0);
        stage[3 * v + 2] = w;
        if (!mt_schedule_split(l->sched) || P == 1) {
            stage[3 * v + 1] += w;
            stage[3 * v + 2] = 0.0;
        }
    }
    /* the critical rank: the most work per micro-batch */
    int crit = 0;
    double work[MT_MAX_STAGES] = {0};
    for (int v = 0; v < S; v++)
        work[v % P] += stage[3 * v] + stage[3 * v + 1] + stage[3 * v + 2];
    for (int r = 1; r < P; r++)
        crit = work[r] > work[crit] ? r : crit;
    double compute = 0, recompute = 0, tp = 0, pps = 0, last_b = 0;
    for (int v = crit; v < S; v += P) {
        compute += M * comp[v];
        recompute += M * rec[v];
        tp += M * tpc[v];
        pps += M * ppc[v];
        last_b += stage[3 * v + 1] + stage[3 * v + 2];
    }
    /* data parallelism over the critical rank's floats: fp32 gradients, working parameters */
    double F = units_floats[crit], gbytes = 4.0 * F, wbytes = x.e * F;
    int D = l->dp, Sh = l->zero > 0 && l->shard > 0 ? l->shard : D, rep = D / Sh;
    MtLink dpl = mt_cost_group_link(cl, Sh, l->tp, NULL), repl = mt_cost_group_link(cl, rep, l->tp * Sh, NULL);
    double dp = 0.0, nunits = units_of[crit] > 0 ? units_of[crit] : 1;
    int mine = M; /* micro-batches of this rank per step */
    if (D > 1) {
        double ar = mt_cost_coll(cl, dpl, MT_COLL_ALLREDUCE, D, gbytes);
        double rs = mt_cost_coll(cl, dpl, MT_COLL_REDUCE_SCATTER, Sh, gbytes);
        double ag = mt_cost_coll(cl, dpl, MT_COLL_ALLGATHER, Sh, wbytes);
        double across = rep > 1 ? mt_cost_coll(cl, repl, MT_COLL_ALLREDUCE, rep, gbytes / Sh) : 0.0;
        /* what one backward hides: DDP's buckets and ZeRO's reduce-scatters overlap the last
         * backward without a pipeline (with one they follow the copy's last backward) */
        double hide = P > 1 ? 0.0 : last_b;
        double tail = 1.0 / nunits; /* the last unit's bucket is never hidden */
        if (l->zero == 0)
            dp = fmax(ar - hide, ar * tail);
        else if (l->zero == 1)
            dp = fmax(rs - hide, rs * tail) + across + ag;
        else if (l->zero == 2)
            dp = mine * fmax(rs - hide, rs * tail) + across + ag;
        else { /* FSDP: every micro-batch gathers each unit twice and reduce-scatters it, prefetched */
            double per = 2 * ag + rs, work_mb = work[crit];
            dp = mine * (fmax(per - work_mb, 0.0) + per * tail) + across;
        }
    }
    t->dp = dp;
    /* the optimizer over the rank's shard: read p, g, m, v, write p, m, v (and the bf16 copy), the norm's read */
    double shard = l->zero > 0 && D > 1 ? F / Sh : F, bf = m->prec == MT_PREC_BF16;
    double per = 28.0 + (bf ? 2.0 : 0.0) + 4.0;
    if (P > 1 && l->post_validate) /* the kept copies, the update writing the parameters, then the moments once checked
                                    * (fp32: p and g copied 16, update 20, moments 20, norm 4; bf16: g 8, 18, 28, 4) */
        per = bf ? 58.0 : 60.0;
    t->optimizer = mt_cost_stream(cl, shard * per) / x.mspeed;
    /* a lower bound without the simulation: the critical rank's work; above `bound` the
     * layout cannot be among the fastest and is not simulated */
    double lower = M * work[crit] + t->dp + t->optimizer;
    if (P > 1 && lower > bound) {
        free(stage);
        t->compute = compute, t->recompute = recompute, t->tp = tp, t->pp = pps;
        t->step = lower;
        t->bounded = 1;
        return MT_OK;
    }
    double makespan, busy;
    MtStatus st = MT_OK;
    if (P > 1) { /* the last simulation is kept: the search's layouts that differ only in ZeRO share it */
        static MtSchedule key;
        static double *kept, kept_span, kept_busy;
        static int kept_n;
        MtSchedule sc = {l->sched, P, M, V, c->untied};
        if (kept && kept_n == 3 * S && memcmp(&key, &sc, sizeof sc) == 0 &&
            memcmp(kept, stage, sizeof(double) * 3 * (size_t)S) == 0)
            makespan = kept_span, busy = kept_busy;
        else if ((st = mt_cost_pipeline(&sc, stage, &makespan, &busy)) == MT_OK) {
            double *k = realloc(kept, sizeof(double) * 3 * (size_t)S);
            if (k) {
                kept = k, kept_n = 3 * S, key = sc, kept_span = makespan, kept_busy = busy;
                memcpy(kept, stage, sizeof(double) * 3 * (size_t)S);
            }
        }
    } else
        makespan = busy = M * work[0];
    if (P > 1 && l->post_validate && st == MT_OK) { /* the steps overlap: no barrier between them */
        double saving = 0.0;
        if ((st = mt_cost_pipeline_overlap(&(MtSchedule){l->sched, P, M, V, c->untied}, stage, &saving)) == MT_OK)
            makespan -= saving > 0.0 ? saving : 0.0;
    }
    if (stage_out)
        memcpy(stage_out, stage, sizeof(double) * 3 * (size_t)S);
    free(stage);
    if (st != MT_OK)
        return st;
    t->compute = compute;
    t->recompute = recompute;
    t->tp = tp;
    t->pp = pps;
    t->bubble = makespan - (compute + recompute + tp + pps);
    if (t->bubble < 0)
        t->bubble = 0;
    t->step = makespan + t->dp + t->optimizer;
    (void)busy;
    return MT_OK;
}

MtStatus mt_plan_time(const MtPlanModel *m, const MtPlanLayout *l, const MtCluster *cl, double bound, MtStepTime *t)
{
    return time_model(m, l, cl, t, NULL, bound);
}

MtStatus mt_plan_stage_costs(const MtPlanModel *m, const MtPlanLayout *l, const MtCluster *cl, double *stage)
{
    MtStepTime t;
    return time_model(m, l, cl, &t, stage, INFINITY);
}
