/* schedule.c - pipeline stages, schedule generators, the simulator (pure). */
#include "mt_schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *names[MT_NSCHED] = {"naive", "gpipe", "1f1b", "interleaved", "zb", "zb2"};

int mt_schedule_kind(const char *name)
{
    for (int k = 0; k < MT_NSCHED; k++)
        if (strcmp(name, names[k]) == 0)
            return k;
    return -1;
}

const char *mt_schedule_name(MtSchedKind kind) { return kind >= 0 && kind < MT_NSCHED ? names[kind] : "?"; }

int mt_schedule_split(MtSchedKind kind) { return kind == MT_SCHED_ZB || kind == MT_SCHED_ZB2; }

MtStatus mt_schedule_check(const MtSchedule *s)
{
    if (s->kind < 0 || s->kind >= MT_NSCHED)
        return mt_error(MT_EINPUT, "unknown pipeline schedule %d", (int)s->kind);
    if (s->P < 1 || s->P > MT_MAX_STAGES || s->M < 1 || s->M > 4096 || s->V < 1 || s->P * s->V > MT_MAX_STAGES)
        return mt_error(MT_EINPUT, "pipeline of %d stages x %d virtual stages with %d micro-batches: need 1 <= stages "
                        "x virtual stages <= %d and 1 <= micro-batches <= 4096", s->P, s->V, s->M, MT_MAX_STAGES);
    if (s->V > 1 && s->kind != MT_SCHED_INTERLEAVED)
        return mt_error(MT_EINPUT, "--virtual-stages %d needs --schedule interleaved (%s runs one chunk per rank)",
                        s->V, names[s->kind]);
    if (s->kind == MT_SCHED_INTERLEAVED && s->P < 2 && s->V > 1)
        return mt_error(MT_EINPUT, "--schedule interleaved with --virtual-stages %d needs --pp >= 2", s->V);
    if (s->kind == MT_SCHED_INTERLEAVED && s->M % s->P != 0)
        return mt_error(MT_EINPUT, "--schedule interleaved needs the micro-batches (%d) to be a multiple of --pp %d "
                        "(Megatron's rule: micro-batches go round the stages in groups of pp)", s->M, s->P);
    return MT_OK;
}

int mt_schedule_max_actions(const MtSchedule *s) { return 9 * s->M * s->V + 3 * s->M + 4; }

/* ---- generators: the compute actions of every rank, in order ---- */

typedef struct {
    MtAction *a;
    int n;
} List;

static void put(List *l, int kind, int stage, int mb) { l->a[l->n++] = (MtAction){kind, stage, mb}; }

static void gen_naive(const MtSchedule *s, int r, List *l)
{
    for (int m = 0; m < s->M; m++) {
        put(l, MT_ACT_F, r, m);
        put(l, MT_ACT_B, r, m);
    }
}

static void gen_gpipe(const MtSchedule *s, int r, List *l)
{
    for (int m = 0; m < s->M; m++)
        put(l, MT_ACT_F, r, m);
    for (int m = 0; m < s->M; m++)
        put(l, MT_ACT_B, r, m);
}

static void gen_1f1b(const MtSchedule *s, int r, List *l)
{
    int M = s->M, warm = s->P - r - 1 < M ? s->P - r - 1 : M;
    for (int m = 0; m < warm; m++)
        put(l, MT_ACT_F, r, m);
    for (int i = 0; i < M - warm; i++) {
        put(l, MT_ACT_F, r, warm + i);
        put(l, MT_ACT_B, r, i);
    }
    for (int m = M - warm; m < M; m++)
        put(l, MT_ACT_B, r, m);
}

/* Megatron's interleaved 1F1B: the k-th forward of a rank is micro-batch
 * (k / (P V)) P + k mod P on chunk (k / P) mod V; backwards go through the chunks in
 * reverse.  Warm-up: 2 (P - r - 1) + (V - 1) P forwards (all of them when M = P). */
static void gen_interleaved(const MtSchedule *s, int r, List *l)
{
    int P = s->P, V = s->V, total = s->M * V;
    int warm = s->M == P ? total : 2 * (P - r - 1) + (V - 1) * P;
    if (warm > total)
        warm = total;
#define MB(k) ((k) / (P * V) * P + (k) % P)
#define FSTAGE(k) (((k) / P % V) * P + r)
#define BSTAGE(k) ((V - 1 - (k) / P % V) * P + r)
    for (int k = 0; k < warm; k++)
        put(l, MT_ACT_F, FSTAGE(k), MB(k));
    for (int i = 0; i < total - warm; i++) {
        put(l, MT_ACT_F, FSTAGE(warm + i), MB(warm + i));
        put(l, MT_ACT_B, BSTAGE(i), MB(i));
    }
    for (int k = total - warm; k < total; k++)
        put(l, MT_ACT_B, BSTAGE(k), MB(k));
#undef MB
#undef FSTAGE
#undef BSTAGE
}

/* ZB-H1 (Qi et al., 2023): 1F1B's order of F and B (P-r-1 warm-up forwards, then one
 * forward, one backward), with rank r's weight-gradient passes deferred by r micro-batches:
 * W(j-r) right after B(j), the last r of them at the end.  Later stages then run their
 * backwards earlier, which shortens every upstream rank's wait, and the deferred W fill the
 * cool-down; each rank holds at most min(P, M) activation sets (F done, W not). */
static void gen_zb(const MtSchedule *s, int r, List *l)
{
    int M = s->M, warm = s->P - r - 1 < M ? s->P - r - 1 : M;
    for (int m = 0; m < warm; m++)
        put(l, MT_ACT_F, r, m);
    for (int j = 0; j < M; j++) {
        if (warm + j < M)
            put(l, MT_ACT_F, r, warm + j);
        put(l, MT_ACT_B, r, j);
        if (j - r >= 0)
            put(l, MT_ACT_W, r, j - r);
    }
    for (int m = M - r > 0 ? M - r : 0; m < M; m++)
        put(l, MT_ACT_W, r, m);
}

/* ZB-2p (Qi et al., 2023), with the memory of ZB-H2: every rank holds at most 2P activation
 * sets (F done, W not).  The order is a list schedule of the whole pipeline at unit costs:
 * the rank whose next action can start first goes first (the lower rank on a tie) and runs,
 * of what is ready then, its next backward, else its next forward (while it holds fewer
 * than 2P sets), else its next weight-gradient pass, which fills what would be a bubble.
 * B and W stay in micro-batch order.  At unit costs its step is ZB-H1's (3M + P - 1: in the
 * engine's synchronous step, the global norm and the tied embedding before the update, the
 * last stage cannot start before (P-1) F); at other costs it is never longer than ZB-H1 and
 * shorter whenever B > W and M > P (test_schedule, P 2..8, costs 1..3): ZB-H1 makes the
 * first stage wait (P-1) (F + B - W) for its last backwards, zb2 sends the backwards up
 * the pipeline first and does the weight passes after, for up to twice the memory. */
static void zb2_orders(int P, int M, MtAction *out, int *n)
{
    int nf[MT_MAX_STAGES] = {0}, nb[MT_MAX_STAGES] = {0}, nw[MT_MAX_STAGES] = {0};
    int64_t now[MT_MAX_STAGES] = {0};
    int64_t *fend = malloc(sizeof(int64_t) * (size_t)P * M * 2), *bend = fend + (size_t)P * M;
    MT_ASSERT(fend, "out of memory");
    for (size_t i = 0; i < (size_t)P * M * 2; i++)
        fend[i] = -1;
    for (int left = 3 * P * M; left > 0; left--) {
        int best = -1, kind = 0;
        int64_t when = 0;
        for (int r = 0; r < P; r++) {
            int64_t t[3] = {-1, -1, -1}; /* earliest start of the next F, B, W (-1: not ready) */
            if (nf[r] < M && nf[r] - nw[r] < 2 * P) {
                int64_t dep = r == 0 ? 0 : fend[(size_t)(r - 1) * M + nf[r]];
                t[0] = dep < 0 ? -1 : dep > now[r] ? dep : now[r];
            }
            if (nb[r] < nf[r]) {
                int64_t dep = r == P - 1 ? fend[(size_t)r * M + nb[r]] : bend[(size_t)(r + 1) * M + nb[r]];
                t[1] = dep < 0 ? -1 : dep > now[r] ? dep : now[r];
            }
            if (nw[r] < nb[r])
                t[2] = now[r];
            int k = -1;
            for (int c = 0; c < 3; c++) /* the earliest; B, then F, then W among equals */
                if (t[c] >= 0 && (k < 0 || t[c] < t[k] || (t[c] == t[k] && c == 1)))
                    k = c;
            if (k >= 0 && (best < 0 || t[k] < when))
                best = r, kind = k, when = t[k];
        }
        MT_ASSERT(best >= 0, "zb2: nothing ready with %d actions left", left);
        int r = best;
        MtAction *a = &out[(size_t)r * 3 * M + n[r]++];
        now[r] = when + 1;
        if (kind == 0)
            *a = (MtAction){MT_ACT_F, r, nf[r]}, fend[(size_t)r * M + nf[r]++] = now[r];
        else if (kind == 1)
            *a = (MtAction){MT_ACT_B, r, nb[r]}, bend[(size_t)r * M + nb[r]++] = now[r];
        else
            *a = (MtAction){MT_ACT_W, r, nw[r]++};
    }
    free(fend);
}

static void gen_zb2(const MtSchedule *s, int r, List *l)
{
    /* every rank's order comes out of one schedule of the whole pipeline: keep the last one */
    static _Thread_local MtAction *kept;
    static _Thread_local int kept_p, kept_m, kept_n[MT_MAX_STAGES];
    if (!kept || kept_p != s->P || kept_m != s->M) {
        free(kept);
        kept = malloc(sizeof(MtAction) * (size_t)s->P * 3 * s->M);
        MT_ASSERT(kept, "out of memory");
        memset(kept_n, 0, sizeof kept_n);
        zb2_orders(s->P, s->M, kept, kept_n);
        kept_p = s->P, kept_m = s->M;
    }
    memcpy(l->a + l->n, kept + (size_t)r * 3 * s->M, sizeof(MtAction) * (size_t)kept_n[r]);
    l->n += kept_n[r];
}

/* Sends after the action that produced the data; a receive before the compute action
 * ahead of its consumer (posted early, so the transfer overlaps that compute). */
static int needs_recv(const MtSchedule *s, const MtAction *a)
{
    int S = s->P * s->V;
    if (s->P == 1)
        return -1;
    if (a->kind == MT_ACT_F && a->stage > 0)
        return MT_ACT_RECV_F;
    if (a->kind == MT_ACT_B && a->stage < S - 1)
        return MT_ACT_RECV_B;
    return -1;
}

static int needs_send(const MtSchedule *s, const MtAction *a)
{
    int S = s->P * s->V;
    if (s->P == 1)
        return -1;
    if (a->kind == MT_ACT_F && a->stage < S - 1)
        return MT_ACT_SEND_F;
    if (a->kind == MT_ACT_B && a->stage > 0)
        return MT_ACT_SEND_B;
    return -1;
}

static MtStatus simulate(const MtSchedule *s, MtAction *const *lists, const int *n, MtSimCosts costs, int want_e,
                         int eslots, int eblock, MtSimResult *res);

/* the compute actions of rank, in order */
static int compute_list(const MtSchedule *s, int rank, MtAction *out)
{
    List c = {out, 0};
    switch (s->kind) {
    case MT_SCHED_NAIVE: gen_naive(s, rank, &c); break;
    case MT_SCHED_GPIPE: gen_gpipe(s, rank, &c); break;
    case MT_SCHED_1F1B: gen_1f1b(s, rank, &c); break;
    case MT_SCHED_INTERLEAVED: gen_interleaved(s, rank, &c); break;
    case MT_SCHED_ZB: gen_zb(s, rank, &c); break;
    case MT_SCHED_ZB2: gen_zb2(s, rank, &c); break;
    default: MT_ASSERT(0, "unknown schedule %d", (int)s->kind);
    }
    return c.n;
}

/* the compute actions with their transfers of activations and gradients (no E yet) */
static int with_transfers(const MtSchedule *s, int rank, MtAction *out)
{
    List c = {malloc(sizeof(MtAction) * (size_t)(3 * s->M * s->V + 1)), 0};
    MT_ASSERT(c.a, "out of memory");
    c.n = compute_list(s, rank, c.a);
    List o = {out, 0};
    for (int i = 0; i < c.n; i++) {
        int k;
        if (i == 0 && (k = needs_recv(s, &c.a[0])) >= 0)
            put(&o, k, c.a[0].stage, c.a[0].mb);
        if (i + 1 < c.n && (k = needs_recv(s, &c.a[i + 1])) >= 0)
            put(&o, k, c.a[i + 1].stage, c.a[i + 1].mb);
        o.a[o.n++] = c.a[i];
        if ((k = needs_send(s, &c.a[i])) >= 0)
            put(&o, k, c.a[i].stage, c.a[i].mb);
        /* the first stage's backward of k has the embedding's rows of micro-batch k */
        if (s->P > 1 && !s->untied && c.a[i].kind == MT_ACT_B && c.a[i].stage == 0)
            put(&o, MT_ACT_SEND_E, 0, c.a[i].mb);
    }
    free(c.a);
    return o.n;
}

/* the last stage's pass that computes H_k: its backward, or W when split */
static int makes_h(const MtSchedule *s, const MtAction *a)
{
    int S = s->P * s->V;
    return a->stage == S - 1 && a->kind == (mt_schedule_split(s->kind) ? MT_ACT_W : MT_ACT_B);
}

static int build_last(const MtSchedule *s, int rank, MtAction *out, int n);

int mt_schedule_build(const MtSchedule *s, int rank, MtAction *out)
{
    if (s->P == 1 || rank != s->P - 1 || s->untied)
        return with_transfers(s, rank, out);
    /* the last rank's list takes a simulation of the whole pipeline: the last few kept (the
     * planner asks for the same ones layout after layout) */
    enum { KEEP = 4 };
    static _Thread_local struct {
        MtSchedule s;
        MtAction *a;
        int n;
    } kept[KEEP];
    static _Thread_local int next;
    for (int i = 0; i < KEEP; i++)
        if (kept[i].a && memcmp(&kept[i].s, s, sizeof *s) == 0) {
            memcpy(out, kept[i].a, sizeof(MtAction) * (size_t)kept[i].n);
            return kept[i].n;
        }
    int n = build_last(s, rank, out, with_transfers(s, rank, out));
    MtAction *a = realloc(kept[next].a, sizeof(MtAction) * (size_t)n);
    if (a) {
        memcpy(a, out, sizeof(MtAction) * (size_t)n);
        kept[next].a = a, kept[next].n = n, kept[next].s = *s;
        next = (next + 1) % KEEP;
    }
    return n;
}

/* the last rank's list: its compute and transfers (n of them in out) with the embedding's */
static int build_last(const MtSchedule *s, int rank, MtAction *out, int n)
{
    /* The last rank: RECV_E k right after H_k is computed, E k before the first compute
     * action that starts after the first stage sent the rows (unit costs). */
    int cap = mt_schedule_max_actions(s);
    MtAction *lists[MT_MAX_STAGES];
    int ns[MT_MAX_STAGES];
    for (int r = 0; r < s->P; r++) {
        lists[r] = malloc(sizeof(MtAction) * (size_t)cap);
        MT_ASSERT(lists[r], "out of memory");
        ns[r] = with_transfers(s, r, lists[r]);
    }
    MtSimResult res;
    MtStatus st = simulate(s, lists, ns, (MtSimCosts){1, 1, 1, NULL, NULL}, 0, 0, 1, &res);
    MT_ASSERT(st == MT_OK, "schedule %s P %d M %d V %d: %s", mt_schedule_name(s->kind), s->P, s->M, s->V, res.error);
    /* when stage 0 finished each backward (its SEND_E time) */
    double *sent = malloc(sizeof(double) * (size_t)s->M);
    double *start = malloc(sizeof(double) * (size_t)(n + 1));
    MT_ASSERT(sent && start, "out of memory");
    for (int i = 0; i < res.nspan[0]; i++) {
        const MtAction *a = &lists[0][res.span[0][i].action];
        if (a->kind == MT_ACT_B && a->stage == 0)
            sent[a->mb] = res.span[0][i].end;
    }
    for (int i = 0; i <= n; i++)
        start[i] = -1.0; /* list index -> simulated start of that compute action */
    for (int i = 0; i < res.nspan[rank]; i++)
        start[res.span[rank][i].action] = res.span[rank][i].start;
    List o = {out, 0};
    int next_e = 0, have_h = 0;
    for (int i = 0; i < n; i++) {
        const MtAction a = lists[rank][i];
        if (start[i] >= 0)
            while (next_e < have_h && sent[next_e] <= start[i])
                put(&o, MT_ACT_E, s->P * s->V - 1, next_e++);
        o.a[o.n++] = a;
        if (makes_h(s, &a)) {
            put(&o, MT_ACT_RECV_E, s->P * s->V - 1, a.mb);
            have_h++;
        }
    }
    while (next_e < s->M)
        put(&o, MT_ACT_E, s->P * s->V - 1, next_e++);
    free(sent);
    free(start);
    mt_sim_free(&res);
    for (int r = 0; r < s->P; r++)
        free(lists[r]);
    return o.n;
}

int mt_schedule_peak_sets(const MtSchedule *s, const MtAction *list, int n, int chunk)
{
    int held = 0, peak = 0, free_at = mt_schedule_split(s->kind) ? MT_ACT_W : MT_ACT_B;
    for (int i = 0; i < n; i++) {
        if (list[i].stage / s->P != chunk)
            continue;
        if (list[i].kind == MT_ACT_F && ++held > peak)
            peak = held;
        if (list[i].kind == free_at)
            held--;
    }
    return peak;
}

void mt_schedule_pool_sets(const MtSchedule *s, const MtAction *list, int n, const int *key, int *sets)
{
    int pool[MT_MAX_STAGES], held[MT_MAX_STAGES] = {0}, free_at = mt_schedule_split(s->kind) ? MT_ACT_W : MT_ACT_B;
    MT_ASSERT(s->V <= MT_MAX_STAGES, "%d chunks per rank", s->V);
    for (int c = 0; c < s->V; c++) {
        pool[c] = c;
        for (int d = 0; d < c; d++)
            if (key[d] == key[c]) {
                pool[c] = d;
                break;
            }
        sets[c] = 0;
    }
    for (int i = 0; i < n; i++) {
        int q = pool[list[i].stage / s->P];
        if (list[i].kind == MT_ACT_F && ++held[q] > sets[q])
            sets[q] = held[q];
        if (list[i].kind == free_at)
            held[q]--;
    }
}

int mt_schedule_peak_wte(const MtSchedule *s, const MtAction *list, int n, int B)
{
    int held = 0, peak = 0;
    for (int i = 0; i < n; i++) {
        if (makes_h(s, &list[i]) && s->P > 1 && list[i].mb % B == 0 && ++held > peak)
            peak = held;
        if (list[i].kind == MT_ACT_E && list[i].mb % B == B - 1)
            held--;
    }
    return peak;
}

const char *mt_action_str(const MtAction *a, char *buf)
{
    static const char *k[] = {"F", "B", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "SEND_E", "RECV_E", "E", "?"};
    int kind = a->kind >= 0 && a->kind < MT_NACT ? a->kind : MT_NACT;
    snprintf(buf, 40, "%d%s%d", a->stage % 10000, k[kind], a->mb % 100000);
    return buf;
}

/* ---- stages ---- */

MtStatus mt_stage_layers(int L, int S, const int *given, int *blocks)
{
    if (!given) {
        if (S > L)
            return mt_error(MT_EINPUT, "%d pipeline stages for %d layers: every stage needs at least one layer", S, L);
        for (int s = 0; s < S; s++)
            blocks[s] = L / S + (s < L % S);
        return MT_OK;
    }
    int sum = 0;
    for (int s = 0; s < S; s++) {
        /* the first and the last stage may hold no block: the embedding or the head alone
         * (the Zero Bubble paper's 1F1B-I: one layer per chunk, those two counted as layers) */
        int least = S > 1 && (s == 0 || s == S - 1) ? 0 : 1;
        if (given[s] < least)
            return mt_error(MT_EINPUT, "--stage-layers: stage %d has %d layers; every stage needs at least one (the "
                            "first and the last may hold none)", s, given[s]);
        sum += given[s];
        blocks[s] = given[s];
    }
    if (sum != L)
        return mt_error(MT_EINPUT, "--stage-layers sums to %d layers, but the model has %d", sum, L);
    return MT_OK;
}

void mt_stage_units(int L, int S, const int *blocks, int s, int *first, int *last)
{
    int before = 0;
    for (int j = 0; j < s; j++)
        before += blocks[j];
    *first = s == 0 ? 0 : 1 + before;
    *last = s == S - 1 ? L + 1 : before + blocks[s];
}

/* ---- simulator ---- */

void mt_sim_free(MtSimResult *res)
{
    for (int r = 0; r < MT_MAX_STAGES; r++) {
        free(res->span[r]);
        res->span[r] = NULL;
        res->nspan[r] = 0;
    }
}

static MtStatus sim_error(MtSimResult *res, const char *what, int rank, const MtAction *a)
{
    char b[40];
    snprintf(res->error, sizeof res->error, "%s on rank %d at action %s", what, rank, mt_action_str(a, b));
    return mt_error(MT_EINPUT, "schedule simulation: %s", res->error);
}

/* The input of a compute action from a neighbouring stage: with P > 1 a receive must have
 * been posted on this rank (-1: a violation) and the peer's send issued (0: blocked);
 * with P = 1 the producing action must have run.  1: ready, *start moved past it. */
static int input_ready(int P, int posted, double sent, double local_done, double *start)
{
    if (P > 1 && !posted)
        return -1;
    double ready = P > 1 ? sent : local_done;
    if (ready < 0)
        return 0;
    if (ready > *start)
        *start = ready;
    return 1;
}

/* kind 0 F, 1 B, 2 W of a stage's micro-batch mb (S stages, M micro-batches) */
static double cost_of(const MtSimCosts *c, int S, int M, int stage, int mb, int kind)
{
    if (c->each)
        return c->each[((int64_t)kind * S + stage) * M + mb];
    if (c->stage)
        return c->stage[3 * stage + kind];
    return kind == 0 ? c->f : kind == 1 ? c->b : c->w;
}

/* want_e: the lists include the embedding's E actions (all but mt_schedule_build's own drafts).
 * eslots > 0: the first stage sends a block's rows (the SEND_E of each eblock-th micro-batch)
 * from one of eslots buffers, so it waits there until the last rank has posted the receive
 * of the block eslots before (0: never waits). */
static MtStatus simulate(const MtSchedule *s, MtAction *const *lists, const int *n, MtSimCosts costs, int want_e,
                         int eslots, int eblock, MtSimResult *res)
{
    memset(res, 0, sizeof *res);
    int P = s->P, M = s->M, S = P * s->V, split = mt_schedule_split(s->kind);
    size_t cells = (size_t)S * M;
    /* per (stage, mb): end times of F, B, W; times sends were issued; receives posted */
    double *t_f = malloc(sizeof(double) * (cells * 5 + 2 * (size_t)M));
    char *posted = calloc(cells * 2 + 2 * (size_t)M, 1);
    MT_ASSERT(t_f && posted, "out of memory");
    double *t_b = t_f + cells, *t_w = t_b + cells, *sent_f = t_w + cells, *sent_b = sent_f + cells;
    double *sent_e = sent_b + cells, *t_e = sent_e + M; /* the embedding's rows: sent, added (E) */
    char *posted_e = posted + cells * 2;
    int held_h = 0;
    for (size_t i = 0; i < cells * 5 + 2 * (size_t)M; i++)
        t_f[i] = -1.0;
    int pos[MT_MAX_STAGES] = {0}, sets[MT_MAX_STAGES] = {0};
    double now[MT_MAX_STAGES] = {0};
    for (int r = 0; r < P; r++) {
        res->span[r] = malloc(sizeof(MtSimSpan) * (size_t)(n[r] + 1));
        MT_ASSERT(res->span[r], "out of memory");
    }
    MtStatus st = MT_OK;
    int progress = 1;
    while (progress && st == MT_OK) {
        progress = 0;
        for (int r = 0; r < P && st == MT_OK; r++) {
            while (pos[r] < n[r] && st == MT_OK) {
                const MtAction *a = &lists[r][pos[r]];
                if (a->stage < 0 || a->stage >= S || a->mb < 0 || a->mb >= M || a->stage % P != r) {
                    st = sim_error(res, "an action of a stage or micro-batch this rank does not run", r, a);
                    break;
                }
                size_t i = (size_t)a->stage * M + a->mb;
                double start = now[r], cost = 0.0;
                int blocked = 0;
                switch (a->kind) {
                case MT_ACT_RECV_F:
                case MT_ACT_RECV_B:
                    if ((a->kind == MT_ACT_RECV_F && a->stage == 0) || (a->kind == MT_ACT_RECV_B && a->stage == S - 1))
                        st = sim_error(res, "a receive from no stage", r, a);
                    posted[i * 2 + (a->kind == MT_ACT_RECV_B)] = 1;
                    break;
                case MT_ACT_SEND_F:
                    if (t_f[i] < 0 || a->stage == S - 1)
                        st = sim_error(res, "a send of an activation not computed (or to no stage)", r, a);
                    sent_f[i] = now[r];
                    break;
                case MT_ACT_SEND_B:
                    if (t_b[i] < 0 || a->stage == 0)
                        st = sim_error(res, "a send of a gradient not computed (or to no stage)", r, a);
                    sent_b[i] = now[r];
                    break;
                case MT_ACT_F:
                    if (t_f[i] >= 0) {
                        st = sim_error(res, "a forward run twice", r, a);
                        break;
                    }
                    if (a->stage > 0) { /* from (stage - 1, mb) */
                        int in = input_ready(P, posted[i * 2], sent_f[i - M], t_f[i - M], &start);
                        if (in < 0)
                            st = sim_error(res, "a forward whose input was never received", r, a);
                        if (in <= 0) {
                            blocked = in == 0;
                            break;
                        }
                    }
                    cost = cost_of(&costs, S, M, a->stage, a->mb, 0);
                    t_f[i] = start + cost;
                    sets[r]++;
                    if (sets[r] > res->peak_sets[r])
                        res->peak_sets[r] = sets[r];
                    break;
                case MT_ACT_B:
                    if (t_b[i] >= 0 || t_f[i] < 0) {
                        st = sim_error(res, t_b[i] >= 0 ? "a backward run twice" : "a backward before its forward", r, a);
                        break;
                    }
                    if (a->stage < S - 1) { /* from (stage + 1, mb) */
                        int in = input_ready(P, posted[i * 2 + 1], sent_b[i + M], t_b[i + M], &start);
                        if (in < 0)
                            st = sim_error(res, "a backward whose gradient was never received", r, a);
                        if (in <= 0) {
                            blocked = in == 0;
                            break;
                        }
                    }
                    cost = cost_of(&costs, S, M, a->stage, a->mb, 1) +
                           (split ? 0.0 : cost_of(&costs, S, M, a->stage, a->mb, 2));
                    t_b[i] = start + cost;
                    if (!split)
                        sets[r]--;
                    break;
                case MT_ACT_W:
                    if (!split || t_b[i] < 0 || t_w[i] >= 0) {
                        st = sim_error(res, !split ? "a weight-gradient pass in a schedule without the split"
                                               : t_w[i] >= 0 ? "a weight-gradient pass run twice"
                                                             : "a weight-gradient pass before its backward", r, a);
                        break;
                    }
                    cost = cost_of(&costs, S, M, a->stage, a->mb, 2);
                    t_w[i] = start + cost;
                    sets[r]--;
                    break;
                case MT_ACT_SEND_E:
                    if (a->stage != 0 || t_b[i] < 0 || P == 1 || sent_e[a->mb] >= 0) {
                        st = sim_error(res, "a send of embedding rows not computed", r, a);
                        break;
                    }
                    if (eslots > 0 && a->mb % eblock == eblock - 1 && a->mb / eblock >= eslots &&
                        !posted_e[a->mb - eslots * eblock]) {
                        blocked = 1; /* its buffer still holds the rows of a block not yet received */
                        break;
                    }
                    sent_e[a->mb] = now[r];
                    break;
                case MT_ACT_RECV_E:
                    if (a->stage != S - 1 || P == 1)
                        st = sim_error(res, "a receive of embedding rows off the last stage", r, a);
                    posted_e[a->mb] = 1;
                    break;
                case MT_ACT_E: {
                    double h = split ? t_w[i] : t_b[i];
                    if (a->stage != S - 1 || h < 0 || !posted_e[a->mb] || t_e[a->mb] >= 0) {
                        st = sim_error(res, "an embedding leaf before its head gradient or receive", r, a);
                        break;
                    }
                    if (sent_e[a->mb] < 0) {
                        blocked = 1;
                        break;
                    }
                    if (sent_e[a->mb] > now[r])
                        now[r] = sent_e[a->mb]; /* waits for the rows */
                    t_e[a->mb] = now[r];
                    held_h--;
                    break;
                }
                default:
                    st = sim_error(res, "an unknown action", r, a);
                }
                if (st == MT_OK && !blocked && P > 1 && !s->untied && a->stage == S - 1 &&
                    a->kind == (split ? MT_ACT_W : MT_ACT_B) && ++held_h > res->peak_wte)
                    res->peak_wte = held_h;
                if (blocked || st != MT_OK)
                    break;
                if (a->kind == MT_ACT_F || a->kind == MT_ACT_B || a->kind == MT_ACT_W) {
                    res->span[r][res->nspan[r]++] = (MtSimSpan){start, start + cost, pos[r]};
                    res->busy[r] += cost;
                    now[r] = start + cost;
                }
                pos[r]++;
                progress = 1;
            }
        }
    }
    if (st == MT_OK)
        for (int r = 0; r < P; r++)
            if (pos[r] < n[r]) {
                st = sim_error(res, "deadlock: waiting forever", r, &lists[r][pos[r]]);
                break;
            }
    /* completeness: every (stage, mb) forward and backward (and W) ran, every send was received */
    for (size_t i = 0; i < cells && st == MT_OK; i++) {
        MtAction a = {MT_ACT_F, (int)(i / M), (int)(i % M)};
        int r = a.stage % P;
        if (t_f[i] < 0 || t_b[i] < 0 || (split && t_w[i] < 0))
            st = sim_error(res, "missing from the step", r, &a);
        else if (P > 1 && a.stage < S - 1 && (sent_f[i] < 0 || !posted[(i + M) * 2]))
            st = sim_error(res, "an activation not sent or not received", r, &a);
        else if (P > 1 && a.stage > 0 && (sent_b[i] < 0 || !posted[(i - M) * 2 + 1]))
            st = sim_error(res, "a gradient not sent or not received", r, &a);
        else if (want_e && !s->untied && P > 1 && a.stage == 0 && (sent_e[a.mb] < 0 || t_e[a.mb] < 0))
            st = sim_error(res, "embedding rows not sent or not added (E)", P - 1, &a);
    }
    for (int r = 0; r < P; r++) {
        if (now[r] > res->makespan)
            res->makespan = now[r];
    }
    double busy = 0.0;
    for (int r = 0; r < P; r++)
        busy += res->busy[r];
    res->bubble = res->makespan > 0 ? 1.0 - busy / (P * res->makespan) : 0.0;
    free(t_f);
    free(posted);
    return st;
}

MtStatus mt_simulate(const MtSchedule *s, MtAction *const *lists, const int *n, MtSimCosts costs,
                     MtSimResult *res)
{
    return simulate(s, lists, n, costs, 1, 0, 1, res);
}

int mt_schedule_esend_slots(const MtSchedule *s, int B)
{
    if (s->P == 1)
        return 0;
    int cap = mt_schedule_max_actions(s), ns[MT_MAX_STAGES], slots = 1;
    MtAction *lists[MT_MAX_STAGES];
    for (int r = 0; r < s->P; r++) {
        lists[r] = malloc(sizeof(MtAction) * (size_t)cap);
        MT_ASSERT(lists[r], "out of memory");
        ns[r] = mt_schedule_build(s, r, lists[r]);
    }
    for (;; slots++) { /* at M / B slots no send waits: the simulation without slots completes */
        MtSimResult res;
        MtStatus st = simulate(s, lists, ns, (MtSimCosts){1, 1, 1, NULL, NULL}, 1, slots, B, &res);
        mt_sim_free(&res);
        if (st == MT_OK || slots >= s->M / B)
            break;
        mt_error_clear();
    }
    for (int r = 0; r < s->P; r++)
        free(lists[r]);
    return slots;
}
