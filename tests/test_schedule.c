/* test_schedule.c - the pipeline schedules, exhaustively (P 1..8, M 1..32, V 1..4 where
 * valid): every list runs to the end in the simulator (no deadlock, every dependency
 * respected, every forward and backward of every stage exactly once, every transfer sent
 * and received), backwards (and W) of each stage in micro-batch order, the bubble equal to
 * its closed form for unit costs and the peak activation sets equal to their formula.
 * Mutated lists are caught.  The tree plan equals the recursive tree bit for bit; stage
 * cuts follow their rule.  zb2 is never longer than zb at unequal F, B, W costs and shorter
 * when B > W; the first stage's send buffers for the embedding's rows suffice. */
#include <stdlib.h>
#include <string.h>

#include "mt_accum.h"
#include "mt_schedule.h"
#include "mt_test.h"

static double closed_bubble(const MtSchedule *s)
{
    double P = s->P, M = s->M, V = s->V;
    switch (s->kind) {
    case MT_SCHED_NAIVE: return (P - 1) / P;
    case MT_SCHED_INTERLEAVED: return (P - 1) / (V * M + P - 1);
    case MT_SCHED_ZB:
    case MT_SCHED_ZB2: return M >= P ? (P - 1) / (3 * M + P - 1) : 1 - 3 * M / (2 * M + 2 * P - 1);
    default: return (P - 1) / (M + P - 1);
    }
}

static int closed_peak(const MtSchedule *s, int r)
{
    int P = s->P, M = s->M, V = s->V;
    switch (s->kind) {
    case MT_SCHED_NAIVE: return 1;
    case MT_SCHED_GPIPE: return M;
    case MT_SCHED_1F1B: return P - r < M ? P - r : M;
    case MT_SCHED_ZB: return P < M ? P : M;
    case MT_SCHED_ZB2: return 2 * P < M ? 2 * P : M;
    default: { /* Megatron's warm-up plus the first steady forward, at most every set */
        int warm = M == P ? M * V : 2 * (P - r - 1) + (V - 1) * P + 1;
        return warm < M * V ? warm : M * V;
    }
    }
}

typedef struct {
    MtAction *l[MT_MAX_STAGES];
    int n[MT_MAX_STAGES];
} Lists;

static void build(const MtSchedule *s, Lists *L)
{
    for (int r = 0; r < s->P; r++) {
        L->l[r] = malloc(sizeof(MtAction) * (size_t)mt_schedule_max_actions(s));
        L->n[r] = mt_schedule_build(s, r, L->l[r]);
    }
}

static void drop(const MtSchedule *s, Lists *L)
{
    for (int r = 0; r < s->P; r++)
        free(L->l[r]);
}

/* backwards and W of each stage in micro-batch order (the gradient tree needs it) */
static int in_order(const MtSchedule *s, const Lists *L)
{
    int S = s->P * s->V;
    int next[2][MT_MAX_STAGES] = {{0}};
    for (int r = 0; r < s->P; r++)
        for (int i = 0; i < L->n[r]; i++) {
            const MtAction *a = &L->l[r][i];
            if (a->kind != MT_ACT_B && a->kind != MT_ACT_W)
                continue;
            int k = a->kind == MT_ACT_W;
            if (a->stage >= S || a->mb != next[k][a->stage]++)
                return 0;
        }
    return 1;
}

static void exhaustive(void)
{
    int runs = 0, worst_wte = 0, more_slots = 0;
    for (int k = 0; k < MT_NSCHED; k++)
        for (int V = 1; V <= 4; V++)
            for (int P = 1; P <= 8; P++)
                for (int M = 1; M <= 32; M++) {
                    MtSchedule s = {k, P, M, V};
                    if (mt_schedule_check(&s) != MT_OK)
                        continue;
                    Lists L;
                    build(&s, &L);
                    MtSimResult res;
                    MtStatus st = mt_simulate(&s, L.l, L.n, (MtSimCosts){1, 1, 1}, &res);
                    const char *nm = mt_schedule_name(k);
                    CHECK(st == MT_OK, "%s P%d M%d V%d: %s", nm, P, M, V, res.error);
                    CHECK(fabs(res.bubble - closed_bubble(&s)) < 1e-12, "%s P%d M%d V%d: bubble %.6f, closed form %.6f",
                          nm, P, M, V, res.bubble, closed_bubble(&s));
                    for (int r = 0; r < P; r++)
                        CHECK(res.peak_sets[r] == closed_peak(&s, r), "%s P%d M%d V%d rank %d: peak %d sets, formula %d",
                              nm, P, M, V, r, res.peak_sets[r], closed_peak(&s, r));
                    CHECK(in_order(&s, &L), "%s P%d M%d V%d: backwards out of micro-batch order", nm, P, M, V);
                    /* the executor's allocations follow from the list alone */
                    for (int r = 0; r < P; r++) {
                        int sum = 0;
                        for (int c = 0; c < V; c++)
                            sum += mt_schedule_peak_sets(&s, L.l[r], L.n[r], c);
                        CHECK(sum >= res.peak_sets[r] && (V > 1 || sum == res.peak_sets[r]),
                              "%s P%d M%d V%d rank %d: chunk peaks %d vs %d", nm, P, M, V, r, sum, res.peak_sets[r]);
                        /* pools: one shape for every chunk holds the rank's simultaneous peak;
                         * a shape per chunk each chunk's own; the first chunk alone (the
                         * embedding's) its own peak beside the others' shared one */
                        int one[MT_MAX_STAGES] = {0}, each[MT_MAX_STAGES], ends[MT_MAX_STAGES], got[MT_MAX_STAGES];
                        for (int c = 0; c < V; c++)
                            each[c] = c, ends[c] = c == 0;
                        mt_schedule_pool_sets(&s, L.l[r], L.n[r], one, got);
                        CHECK(got[0] == res.peak_sets[r], "%s P%d M%d V%d rank %d: one pool %d sets, rank peak %d", nm,
                              P, M, V, r, got[0], res.peak_sets[r]);
                        for (int c = 1; c < V; c++)
                            CHECK(got[c] == 0, "%s P%d M%d V%d rank %d: chunk %d of the one pool owns %d", nm, P, M, V, r,
                                  c, got[c]);
                        mt_schedule_pool_sets(&s, L.l[r], L.n[r], each, got);
                        for (int c = 0; c < V; c++)
                            CHECK(got[c] == mt_schedule_peak_sets(&s, L.l[r], L.n[r], c),
                                  "%s P%d M%d V%d rank %d: chunk %d alone %d sets", nm, P, M, V, r, c, got[c]);
                        if (V > 2) {
                            mt_schedule_pool_sets(&s, L.l[r], L.n[r], ends, got);
                            int most = 0, held = 0; /* chunks 1.. together, counted here */
                            for (int i = 0; i < L.n[r]; i++) {
                                const MtAction *a = &L.l[r][i];
                                if (a->stage / P == 0)
                                    continue;
                                if (a->kind == MT_ACT_F && ++held > most)
                                    most = held;
                                if (a->kind == (mt_schedule_split(k) ? MT_ACT_W : MT_ACT_B))
                                    held--;
                            }
                            CHECK(got[0] == mt_schedule_peak_sets(&s, L.l[r], L.n[r], 0) && got[1] == most &&
                                      got[2] == 0 && got[1] <= res.peak_sets[r],
                                  "%s P%d M%d V%d rank %d: pools %d, %d, %d (chunks 1.. at once %d)", nm, P, M, V, r,
                                  got[0], got[1], got[2], most);
                        }
                    }
                    int pw = mt_schedule_peak_wte(&s, L.l[P - 1], L.n[P - 1], 1);
                    CHECK(pw == res.peak_wte && (P == 1 ? pw == 0 : pw >= 1 && pw <= (P * V < M ? P * V : M) + 1),
                          "%s P%d M%d V%d: %d head gradients await their rows (sim %d)", nm, P, M, V, pw, res.peak_wte);
                    /* blocks of B micro-batches: never more blocks than single micro-batches in
                     * flight, and one block per step is one slot */
                    for (int B = 2; B <= M; B++) {
                        if (M % B)
                            continue;
                        int pb = mt_schedule_peak_wte(&s, L.l[P - 1], L.n[P - 1], B);
                        CHECK(P == 1 ? pb == 0 : pb >= 1 && pb <= pw && (B < M || pb == 1),
                              "%s P%d M%d V%d: %d blocks of %d await their rows (%d single)", nm, P, M, V, pb, B, pw);
                    }
                    if (pw > worst_wte)
                        worst_wte = pw;
                    /* the first stage's send buffers for the rows: one, but for zb2's late receives */
                    int es = mt_schedule_esend_slots(&s, 1);
                    CHECK(P == 1 ? es == 0 : es >= 1 && es <= M && (k == MT_SCHED_ZB2 || es == 1),
                          "%s P%d M%d V%d: %d send buffers for the embedding's rows", nm, P, M, V, es);
                    more_slots += es > 1;
                    /* zb beats 1F1B whenever there is a bubble to fill */
                    if (k == MT_SCHED_ZB && P > 1)
                        CHECK(res.bubble < (P - 1.0) / (M + P - 1.0), "zb P%d M%d: bubble %.4f not below 1F1B's", P, M,
                              res.bubble);
                    mt_sim_free(&res);
                    drop(&s, &L);
                    runs++;
                }
    printf("simulated %d schedules; at most %d head gradients awaited their embedding rows; %d needed more than one "
           "send buffer for them\n", runs, worst_wte, more_slots);
    CHECK(runs > 1200, "only %d schedules were valid", runs);
    CHECK(more_slots > 0, "no schedule needed a second send buffer (zb2 P 2 M 8 does: it deadlocked with one)");
}

static double makespan(const MtSchedule *s, MtSimCosts c)
{
    Lists L;
    build(s, &L);
    MtSimResult res;
    MtStatus st = mt_simulate(s, L.l, L.n, c, &res);
    CHECK(st == MT_OK, "%s P%d M%d: %s", mt_schedule_name(s->kind), s->P, s->M, res.error);
    double t = res.makespan;
    mt_sim_free(&res);
    drop(s, &L);
    return t;
}

/* zb2 against zb at unequal costs: never longer, shorter whenever B > W and M > P (the
 * last backwards reach the first stage sooner); at most twice the sets (exhaustive above) */
static void zb2_costs(void)
{
    int shorter = 0, cases = 0;
    for (int P = 2; P <= 8; P++)
        for (int M = 1; M <= 32; M += M < 8 ? 1 : 3)
            for (int f = 1; f <= 3; f++)
                for (int b = 1; b <= 3; b++)
                    for (int w = 1; w <= 3; w++) {
                        MtSimCosts c = {f, b, w, NULL, NULL};
                        double h1 = makespan(&(MtSchedule){MT_SCHED_ZB, P, M, 1}, c);
                        double h2 = makespan(&(MtSchedule){MT_SCHED_ZB2, P, M, 1}, c);
                        CHECK(h2 <= h1 + 1e-9, "zb2 P%d M%d costs %d,%d,%d: %g, longer than zb's %g", P, M, f, b, w, h2,
                              h1);
                        if (b > w && M > P)
                            CHECK(h2 < h1 - 1e-9, "zb2 P%d M%d costs %d,%d,%d: %g, not shorter than zb's %g", P, M, f,
                                  b, w, h2, h1);
                        shorter += h2 < h1 - 1e-9;
                        cases++;
                    }
    printf("zb2 against zb: shorter in %d of %d cost settings, never longer\n", shorter, cases);
}

/* A list with one action moved, removed or duplicated must be refused. */
static void mutations(void)
{
    MtSchedule s = {MT_SCHED_1F1B, 4, 8, 1};
    Lists L;
    build(&s, &L);
    MtSimResult res;
    MtSimCosts c = {1, 1, 1};
    /* a receive removed: rank 2's first action is RECV_F of its first forward */
    CHECK(L.l[2][0].kind == MT_ACT_RECV_F, "rank 2 starts with a receive");
    MtAction saved = L.l[2][0];
    memmove(L.l[2], L.l[2] + 1, sizeof(MtAction) * (size_t)(L.n[2] - 1));
    L.n[2]--;
    CHECK(mt_simulate(&s, L.l, L.n, c, &res) == MT_EINPUT && strstr(res.error, "never received"), "missing receive: %s",
          res.error);
    mt_sim_free(&res);
    memmove(L.l[2] + 1, L.l[2], sizeof(MtAction) * (size_t)L.n[2]);
    L.l[2][0] = saved;
    L.n[2]++;
    CHECK(mt_simulate(&s, L.l, L.n, c, &res) == MT_OK, "restored list runs: %s", res.error);
    mt_sim_free(&res);
    /* the last stage's first backward moved before its forward */
    int f = -1, b = -1;
    for (int i = 0; i < L.n[3]; i++) {
        if (L.l[3][i].kind == MT_ACT_F && L.l[3][i].mb == 0)
            f = i;
        if (L.l[3][i].kind == MT_ACT_B && L.l[3][i].mb == 0)
            b = i;
    }
    MtAction t = L.l[3][f];
    L.l[3][f] = L.l[3][b];
    L.l[3][b] = t;
    CHECK(mt_simulate(&s, L.l, L.n, c, &res) == MT_EINPUT && strstr(res.error, "before its forward"),
          "backward before forward: %s", res.error);
    mt_sim_free(&res);
    L.l[3][b] = L.l[3][f];
    L.l[3][f] = t;
    /* two ranks that each wait for the other: rank 0 puts its first backward (which waits
     * for rank 1) before the forwards rank 1 needs -> deadlock */
    MtSchedule g = {MT_SCHED_GPIPE, 2, 2, 1};
    Lists G;
    build(&g, &G);
    /* rank 0: F0 SEND F1 SEND RECV_B0 B0 RECV_B1 B1 -> move "RECV_B0 B0" to the front */
    MtAction r0[16];
    int n0 = 0;
    for (int i = 0; i < G.n[0]; i++)
        if (G.l[0][i].kind == MT_ACT_RECV_B || G.l[0][i].kind == MT_ACT_B)
            r0[n0++] = G.l[0][i];
    for (int i = 0; i < G.n[0]; i++)
        if (!(G.l[0][i].kind == MT_ACT_RECV_B || G.l[0][i].kind == MT_ACT_B))
            r0[n0++] = G.l[0][i];
    memcpy(G.l[0], r0, sizeof(MtAction) * (size_t)n0);
    CHECK(mt_simulate(&g, G.l, G.n, c, &res) == MT_EINPUT && strstr(res.error, "before its forward"), "reordered: %s",
          res.error);
    mt_sim_free(&res);
    drop(&g, &G);
    /* a real deadlock: rank 1 waits for an activation that rank 0 sends only after a
     * backward that needs rank 1 */
    MtAction d0[] = {{MT_ACT_F, 0, 0}, {MT_ACT_RECV_B, 0, 0}, {MT_ACT_B, 0, 0}, {MT_ACT_SEND_F, 0, 0}};
    MtAction d1[] = {{MT_ACT_RECV_F, 1, 0}, {MT_ACT_F, 1, 0}, {MT_ACT_B, 1, 0}, {MT_ACT_SEND_B, 1, 0}};
    MtSchedule one = {MT_SCHED_GPIPE, 2, 1, 1};
    MtAction *dl[2] = {d0, d1};
    int dn[2] = {4, 4};
    CHECK(mt_simulate(&one, dl, dn, c, &res) == MT_EINPUT && strstr(res.error, "deadlock"), "deadlock: %s", res.error);
    mt_sim_free(&res);
    /* an action dropped: a forward missing from the step */
    L.n[0] -= 1; /* rank 0's last action (its final B) */
    CHECK(mt_simulate(&s, L.l, L.n, c, &res) == MT_EINPUT, "missing action accepted");
    mt_sim_free(&res);
    drop(&s, &L);
}

/* The plan's evaluation equals the recursive tree bit for bit, on values whose sums
 * depend on the order. */
static float tree(const float *x, int lo, int hi)
{
    if (hi - lo == 1)
        return x[lo];
    int mid = lo + (hi - lo) / 2;
    return tree(x, lo, mid) + tree(x, mid, hi);
}

static void tree_plan(void)
{
    for (int M = 1; M <= 300; M++) {
        float x[300], buf[16];
        for (int i = 0; i < M; i++)
            x[i] = (float)((i * 2654435761u % 1000003u) * 1e-3) * (i % 3 ? 1.0f : 1e-4f);
        MtTreeStep steps[900];
        int n = mt_tree_plan(M, steps), leaves = 0, maxbuf = 0, ok = n <= mt_tree_plan_max(M);
        for (int i = 0; i < n; i++) {
            MtTreeStep *st = &steps[i];
            maxbuf = st->buf > maxbuf ? st->buf : maxbuf;
            if (st->leaf >= 0) {
                ok &= st->leaf == leaves++;
                buf[st->buf] = x[st->leaf];
            } else if (st->leaf == MT_TREE_END) { /* blocks of one: right after its leaf, in its buffer */
                ok &= st->src == leaves - 1 && steps[i - 1].leaf == st->src && steps[i - 1].buf == st->buf;
            } else {
                buf[st->buf] += buf[st->src];
            }
        }
        float want = tree(x, 0, M);
        CHECK(ok && leaves == M, "M %d: leaves out of order", M);
        CHECK(memcmp(&buf[0], &want, sizeof want) == 0, "M %d: plan %.9g, tree %.9g", M, buf[0], want);
        CHECK(maxbuf <= mt_tree_temps(M), "M %d: buffer %d beyond %d temporaries", M, maxbuf, mt_tree_temps(M));
    }
}

/* the blocked order written as text: a block "(((g0+g1)+g2)+e0)" (e: its end, where the
 * embedding's rows join), the blocks as the tree */
static void blocks_text(int lo, int hi, int B, char *out) /* out: 2040 bytes, or 4096 at the top */
{
    if (hi - lo == B) {
        char t[2040];
        sprintf(out, "g%d", lo);
        for (int k = lo + 1; k < hi; k++) {
            snprintf(t, sizeof t, "(%.1990s+g%d)", out, k);
            strcpy(out, t);
        }
        snprintf(t, sizeof t, "(%.1990s+e%d)", out, lo / B);
        strcpy(out, t);
        return;
    }
    int mid = lo + (hi - lo) / B / 2 * B;
    char a[2040], b[2040];
    blocks_text(lo, mid, B, a);
    blocks_text(mid, hi, B, b);
    snprintf(out, 2040, "(%.1015s+%.1015s)", a, b);
}

/* the blocked order on floats */
static float blocks_sum(const float *x, int lo, int hi, int B)
{
    if (hi - lo == B) {
        float s = x[lo];
        for (int k = lo + 1; k < hi; k++)
            s += x[k];
        return s;
    }
    int mid = lo + (hi - lo) / B / 2 * B;
    return blocks_sum(x, lo, mid, B) + blocks_sum(x, mid, hi, B);
}

/* The blocked plan (--accum-blocks) for every M <= 24 and B dividing M, run on text: the
 * same expression as the definition, leaves in order, buffers within the temporaries; and
 * mt_tree_plan_sum on floats gives the blocked sum's bits. */
static void tree_plan_blocks(void)
{
    int checked = 0;
    for (int M = 1; M <= 24; M++)
        for (int B = 1; B <= M; B++) {
            if (M % B)
                continue;
            static char buf[12][4096];
            char want[4096], t[4096];
            MtTreeStep steps[72];
            int n = mt_tree_plan_blocks(M, B, steps), leaves = 0, maxbuf = 0, ok = n <= mt_tree_plan_max(M);
            for (int i = 0; i < n; i++) {
                MtTreeStep *st = &steps[i];
                maxbuf = st->buf > maxbuf ? st->buf : maxbuf;
                if (st->leaf >= 0) {
                    ok &= st->leaf == leaves++;
                    sprintf(buf[st->buf], "g%d", st->leaf);
                } else if (st->leaf == MT_TREE_END) {
                    snprintf(t, sizeof t, "(%s+e%d)", buf[st->buf], st->src);
                    strcpy(buf[st->buf], t);
                } else {
                    snprintf(t, sizeof t, "(%s+%s)", buf[st->buf], buf[st->src]);
                    strcpy(buf[st->buf], t);
                }
            }
            blocks_text(0, M, B, want);
            CHECK(ok && leaves == M, "M %d B %d: leaves out of order or too many steps (%d)", M, B, n);
            CHECK(strcmp(buf[0], want) == 0, "M %d B %d: plan %s, definition %s", M, B, buf[0], want);
            CHECK(maxbuf <= mt_tree_temps_blocks(M, B), "M %d B %d: buffer %d beyond %d temporaries", M, B, maxbuf,
                  mt_tree_temps_blocks(M, B));
            float x[24], got, sum;
            for (int i = 0; i < M; i++)
                x[i] = (float)((i * 2654435761u % 1000003u) * 1e-3) * (i % 3 ? 1.0f : 1e-4f);
            got = mt_tree_plan_sum(steps, n, x);
            sum = blocks_sum(x, 0, M, B);
            CHECK(memcmp(&got, &sum, sizeof got) == 0, "M %d B %d: the plan's float sum %.9g, blocked %.9g", M, B, got,
                  sum);
            checked++;
        }
    CHECK(checked > 80, "only %d (M, B) checked", checked);
}

/* Costs per stage: the same costs as an array give the same run; a naive pipeline whose
 * stages cost F 1, B 2 and F 3, B 4 takes M (1 + 3 + 4 + 2) with half of it idle. */
static void stage_costs(void)
{
    MtSchedule s = {MT_SCHED_ZB, 3, 7, 1};
    Lists L;
    build(&s, &L);
    double same[9] = {1, 2, 0.5, 1, 2, 0.5, 1, 2, 0.5};
    MtSimResult a, b;
    mt_simulate(&s, L.l, L.n, (MtSimCosts){1, 2, 0.5, NULL, NULL}, &a);
    mt_simulate(&s, L.l, L.n, (MtSimCosts){0, 0, 0, same, NULL}, &b);
    CHECK(a.makespan == b.makespan && a.bubble == b.bubble, "per-stage array of equal costs: %g vs %g", b.makespan,
          a.makespan);
    mt_sim_free(&a);
    mt_sim_free(&b);
    drop(&s, &L);
    MtSchedule nv = {MT_SCHED_NAIVE, 2, 5, 1};
    build(&nv, &L);
    double two[6] = {1, 2, 0, 3, 4, 0};
    mt_simulate(&nv, L.l, L.n, (MtSimCosts){0, 0, 0, two, NULL}, &a);
    CHECK(fabs(a.makespan - 50.0) < 1e-12 && fabs(a.bubble - 0.5) < 1e-12, "naive with stage costs: %g, bubble %g",
          a.makespan, a.bubble);
    mt_sim_free(&a);
    /* every action its own cost: micro-batch 3's backward on stage 1 takes 10 more, and the
     * naive pipeline (one micro-batch at a time) takes exactly 10 longer */
    double each[3 * 2 * 5] = {0};
    for (int k = 0; k < 5; k++) {
        each[(0 * 2 + 0) * 5 + k] = 1; /* F, stage 0 */
        each[(0 * 2 + 1) * 5 + k] = 3;
        each[(1 * 2 + 0) * 5 + k] = 2; /* B */
        each[(1 * 2 + 1) * 5 + k] = k == 3 ? 14 : 4;
    }
    mt_simulate(&nv, L.l, L.n, (MtSimCosts){0, 0, 0, NULL, each}, &a);
    CHECK(fabs(a.makespan - 60.0) < 1e-12, "naive with one slow action: %g, want 60", a.makespan);
    mt_sim_free(&a);
    drop(&nv, &L);
}

static void stages(void)
{
    int b[12]; /* S runs to 12 below (8 here overflowed: found by the sanitizer build) */
    CHECK(mt_stage_layers(5, 2, NULL, b) == MT_OK && b[0] == 3 && b[1] == 2, "5 over 2: %d %d", b[0], b[1]);
    CHECK(mt_stage_layers(8, 3, NULL, b) == MT_OK && b[0] == 3 && b[1] == 3 && b[2] == 2, "8 over 3");
    int first, last;
    mt_stage_layers(5, 2, NULL, b);
    mt_stage_units(5, 2, b, 0, &first, &last);
    CHECK(first == 0 && last == 3, "stage 0 units %d..%d", first, last);
    mt_stage_units(5, 2, b, 1, &first, &last);
    CHECK(first == 4 && last == 6, "stage 1 units %d..%d", first, last);
    int given[3] = {1, 3, 2};
    CHECK(mt_stage_layers(6, 3, given, b) == MT_OK && b[1] == 3, "given");
    mt_stage_units(6, 3, b, 1, &first, &last);
    CHECK(first == 2 && last == 4, "given stage 1 units %d..%d", first, last);
    int zero[3] = {2, 0, 2}, off[2] = {2, 3}, ends[4] = {0, 2, 2, 0}, one[1] = {0};
    CHECK(mt_stage_layers(4, 3, zero, b) == MT_EINPUT, "a middle stage of zero layers");
    CHECK(mt_stage_layers(0, 1, one, b) == MT_EINPUT, "a single stage of zero layers");
    /* end stages of no block: the embedding alone, the head alone (1F1B-I's cut) */
    CHECK(mt_stage_layers(4, 4, ends, b) == MT_OK, "end stages of no block");
    mt_stage_units(4, 4, b, 0, &first, &last);
    CHECK(first == 0 && last == 0, "the first stage holds the embedding alone: units %d..%d", first, last);
    mt_stage_units(4, 4, b, 3, &first, &last);
    CHECK(first == 5 && last == 5, "the last stage holds the head alone: units %d..%d", first, last);
    mt_stage_units(4, 4, b, 1, &first, &last);
    CHECK(first == 1 && last == 2, "stage 1 units %d..%d", first, last);
    CHECK(mt_stage_layers(4, 2, off, b) == MT_EINPUT, "layers not summing");
    CHECK(mt_stage_layers(2, 3, NULL, b) == MT_EINPUT, "more stages than layers");
    /* every unit in exactly one stage, in order */
    for (int L = 1; L <= 12; L++)
        for (int S = 1; S <= L; S++) {
            mt_stage_layers(L, S, NULL, b);
            int next = 0;
            for (int s = 0; s < S; s++) {
                mt_stage_units(L, S, b, s, &first, &last);
                CHECK(first == next && last >= first, "L%d S%d stage %d: units %d..%d", L, S, s, first, last);
                next = last + 1;
            }
            CHECK(next == L + 2, "L%d S%d: units end at %d", L, S, next);
        }
    /* refused layouts */
    MtSchedule bad[] = {{MT_SCHED_INTERLEAVED, 2, 3, 2}, {MT_SCHED_1F1B, 2, 4, 2}, {MT_SCHED_INTERLEAVED, 1, 4, 2},
                        {MT_SCHED_ZB, 0, 4, 1}, {MT_SCHED_GPIPE, 2, 0, 1}};
    for (int i = 0; i < 5; i++)
        CHECK(mt_schedule_check(&bad[i]) == MT_EINPUT, "layout %d accepted", i);
    CHECK(mt_schedule_kind("zb") == MT_SCHED_ZB && mt_schedule_kind("zb2") == MT_SCHED_ZB2 &&
          mt_schedule_kind("zigzag") < 0, "names");
}

/* An untied model's lists are the tied ones without the embedding's actions (SEND_E, RECV_E,
 * E), and simulate to the same step at unit costs: for every schedule, P and M. */
static void untied(void)
{
    int runs = 0;
    for (int k = 0; k < MT_NSCHED; k++)
        for (int P = 2; P <= 8; P++)
            for (int M = 1; M <= 16; M++) {
                MtSchedule t = {k, P, M, k == MT_SCHED_INTERLEAVED ? 2 : 1}, u = t;
                u.untied = 1;
                if (mt_schedule_check(&t) != MT_OK)
                    continue;
                Lists A, B;
                build(&t, &A);
                build(&u, &B);
                const char *nm = mt_schedule_name(k);
                for (int r = 0; r < P; r++) {
                    int j = 0, ok = 1;
                    for (int i = 0; i < A.n[r]; i++) {
                        int e = A.l[r][i].kind >= MT_ACT_SEND_E;
                        if (!e && (j >= B.n[r] || memcmp(&A.l[r][i], &B.l[r][j++], sizeof(MtAction)) != 0))
                            ok = 0;
                    }
                    for (int i = 0; i < B.n[r]; i++)
                        ok &= B.l[r][i].kind < MT_ACT_SEND_E;
                    CHECK(ok && j == B.n[r], "%s P%d M%d rank %d: untied list is not the tied one less E", nm, P, M, r);
                }
                MtSimResult ra, rb;
                MtStatus sa = mt_simulate(&t, A.l, A.n, (MtSimCosts){1, 1, 1}, &ra);
                MtStatus sb = mt_simulate(&u, B.l, B.n, (MtSimCosts){1, 1, 1}, &rb);
                CHECK(sa == MT_OK && sb == MT_OK, "%s P%d M%d: %s %s", nm, P, M, ra.error, rb.error);
                CHECK(ra.makespan == rb.makespan && rb.peak_wte == 0, "%s P%d M%d: untied makespan %g vs %g, %d head sums",
                      nm, P, M, rb.makespan, ra.makespan, rb.peak_wte);
                mt_sim_free(&ra);
                mt_sim_free(&rb);
                drop(&t, &A);
                drop(&u, &B);
                runs++;
            }
    CHECK(runs > 300, "%d untied schedules checked", runs);
}

int main(void)
{
    exhaustive();
    untied();
    mutations();
    tree_plan();
    tree_plan_blocks();
    stage_costs();
    zb2_costs();
    stages();
    return mt_test_done("test_schedule");
}
