/* cmd_schedule.c - `meshtrain schedule`: a pipeline schedule's timeline per rank, as text
 * (one row per rank, one cell per time unit) and as SVG, with its simulated bubble. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flags.h"
#include "mt_cli.h"
#include "mt_fsutil.h"
#include "mt_json.h"
#include "mt_schedule.h"
#include "mt_timeline.h"

/* "F12", with the chunk as a letter when there are several: "F12b" */
static void label(const MtAction *a, int P, int V, char *out)
{
    static const char kinds[] = "FBW";
    if (V > 1)
        snprintf(out, 16, "%c%d%c", kinds[a->kind], a->mb, 'a' + a->stage / P);
    else
        snprintf(out, 16, "%c%d", kinds[a->kind], a->mb);
}

/* Prints each rank's row: cells of equal width, each time unit one cell, "." idle. */
static void print_text(const MtSchedule *s, MtAction *const *lists, const MtSimResult *res)
{
    int width = 2;
    char b[16];
    for (int r = 0; r < s->P; r++)
        for (int i = 0; i < res->nspan[r]; i++) {
            label(&lists[r][res->span[r][i].action], s->P, s->V, b);
            int n = (int)strlen(b) + 1;
            width = n > width ? n : width;
        }
    int cells = (int)(res->makespan + 0.5);
    for (int r = 0; r < s->P; r++) {
        printf("rank %d |", r);
        int t = 0;
        for (int i = 0; i < res->nspan[r]; i++) {
            const MtSimSpan *sp = &res->span[r][i];
            for (; t < (int)(sp->start + 0.5); t++)
                printf("%*s", width, ".");
            label(&lists[r][sp->action], s->P, s->V, b);
            for (; t < (int)(sp->end + 0.5); t++)
                printf("%*s", width, b);
        }
        for (; t < cells; t++)
            printf("%*s", width, ".");
        printf(" |\n");
    }
}

/* ---- a measured step from a run's --trace ---- */

typedef struct {
    MtBox *box; /* compute events of the chosen step, per rank in time order */
    int n, step;
} Measured;

static int by_rank_time(const void *a, const void *b)
{
    const MtBox *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank - y->rank;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* Reads the compute events of step `want` (-1: the last traced) from a Chrome trace. */
static MtStatus read_trace(const char *path, int P, int V, int want, Measured *m)
{
    unsigned char *text;
    int64_t len;
    MT_TRY(mt_file_read(path, &text, &len));
    MtJson *j = NULL;
    MtStatus st = mt_json_parse((const char *)text, (size_t)len, &j);
    free(text);
    if (st != MT_OK)
        return mt_error(MT_EINPUT, "--from-trace %s: %s", path, mt_error_msg());
    const MtJson *ev = mt_json_get(j, "traceEvents");
    int n = mt_json_len(ev), last = -1;
    for (int i = 0; i < n; i++) {
        const MtJson *e = mt_json_at(ev, i), *a = mt_json_get(e, "args");
        const char *cat = mt_json_str(mt_json_get(e, "cat"));
        if (cat && strcmp(cat, "compute") == 0 && (int)mt_json_num(mt_json_get(a, "step")) > last)
            last = (int)mt_json_num(mt_json_get(a, "step"));
    }
    m->step = want >= 0 ? want : last;
    m->box = malloc(sizeof(MtBox) * (size_t)(n + 1));
    MT_ASSERT(m->box, "out of memory");
    m->n = 0;
    for (int i = 0; i < n; i++) {
        const MtJson *e = mt_json_at(ev, i), *a = mt_json_get(e, "args");
        const char *cat = mt_json_str(mt_json_get(e, "cat"));
        if (!cat || strcmp(cat, "compute") != 0 || (int)mt_json_num(mt_json_get(a, "step")) != m->step)
            continue;
        int rank = (int)mt_json_num(mt_json_get(e, "tid")), stage = (int)mt_json_num(mt_json_get(a, "stage"));
        int kind = (int)mt_json_num(mt_json_get(a, "kind"));
        if (rank < 0 || rank >= P || stage < 0 || stage >= P * V || stage % P != rank || kind < 0 || kind > 2) {
            mt_json_free(j);
            return mt_error(MT_EINPUT, "--from-trace %s: a compute event of rank %d, stage %d does not fit --pp %d "
                            "--virtual-stages %d", path, rank, stage, P, V);
        }
        double ts = mt_json_num(mt_json_get(e, "ts")) * 1e-3, dur = mt_json_num(mt_json_get(e, "dur")) * 1e-3;
        m->box[m->n++] = (MtBox){rank, kind, (int)mt_json_num(mt_json_get(a, "mb")), stage / P, ts, ts + dur};
    }
    mt_json_free(j);
    if (m->n == 0)
        return mt_error(MT_EINPUT, "--from-trace %s: no compute events of step %d (was the run traced with --pp?)",
                        path, m->step);
    qsort(m->box, (size_t)m->n, sizeof(MtBox), by_rank_time);
    return MT_OK;
}

/* Compares each rank's measured compute order with its list; prints the first difference. */
static int same_order(const MtSchedule *s, MtAction *const *lists, const int *n, const Measured *m)
{
    int k = 0, ok = 1;
    for (int r = 0; r < s->P; r++) {
        int count = 0, bad = 0;
        for (int i = 0; i < n[r]; i++) {
            const MtAction *a = &lists[r][i];
            if (a->kind > MT_ACT_W)
                continue;
            if (!bad && (k >= m->n || m->box[k].rank != r || m->box[k].kind != a->kind ||
                         m->box[k].chunk != a->stage / s->P || m->box[k].mb != a->mb)) {
                char b[40];
                printf("rank %d: measured action %d is not %s, the list's\n", r, count, mt_action_str(a, b));
                bad = 1;
            }
            k += !bad;
            count++;
        }
        while (!bad && k < m->n && m->box[k].rank == r) {
            printf("rank %d: more measured actions than the list holds\n", r);
            bad = 1;
        }
        while (k < m->n && m->box[k].rank == r)
            k++;
        if (!bad)
            printf("rank %d: measured order = the list's (%d compute actions)\n", r, count);
        ok &= !bad;
    }
    return ok;
}

static int from_trace(const MtSchedule *s, MtAction *const *lists, const int *n, const char *trace, int step,
                      const char *svg)
{
    Measured m = {0};
    MtStatus st = read_trace(trace, s->P, s->V, step, &m);
    if (st != MT_OK)
        return mt_cli_fail(mt_error_prefix(st, "meshtrain schedule"));
    int S = s->P * s->V;
    double *cost = calloc(6 * (size_t)S, sizeof(double)), lo = m.box[0].start, hi = m.box[0].end, busy = 0.0;
    MT_ASSERT(cost, "out of memory");
    double *cnt = cost + 3 * S; /* per stage: mean F, B, W in cost[0 .. 3S) */
    for (int i = 0; i < m.n; i++) {
        int at = 3 * (m.box[i].chunk * s->P + m.box[i].rank) + m.box[i].kind;
        cost[at] += m.box[i].end - m.box[i].start;
        cnt[at]++;
        busy += m.box[i].end - m.box[i].start;
        lo = m.box[i].start < lo ? m.box[i].start : lo;
        hi = m.box[i].end > hi ? m.box[i].end : hi;
    }
    for (int i = 0; i < 3 * S; i++)
        cost[i] = cnt[i] > 0 ? cost[i] / cnt[i] : 0.0;
    MtSimCosts c = {0, 0, 0, cost, NULL};
    printf("step %d of %s: %d compute events\n", m.step, trace, m.n);
    int ok = same_order(s, lists, n, &m);
    MtSimResult res, replay;
    st = mt_simulate(s, lists, n, c, &res);
    MT_ASSERT(st == MT_OK, "simulation: %s", res.error);
    /* the step replayed: every action with its own measured time, transfers free */
    double *each = calloc(3 * (size_t)S * s->M, sizeof(double));
    MT_ASSERT(each, "out of memory");
    for (int i = 0; i < m.n; i++)
        each[((int64_t)m.box[i].kind * S + m.box[i].chunk * s->P + m.box[i].rank) * s->M + m.box[i].mb] =
            m.box[i].end - m.box[i].start;
    st = mt_simulate(s, lists, n, (MtSimCosts){0, 0, 0, NULL, each}, &replay);
    MT_ASSERT(st == MT_OK, "replay: %s", replay.error);
    double measured = hi > lo ? 1.0 - busy / (s->P * (hi - lo)) : 0.0;
    printf("measured: %.2f ms, bubble %.4f\n", hi - lo, measured);
    printf("replayed with each action's measured time, transfers free: %.2f ms, bubble %.4f\n", replay.makespan,
           replay.bubble);
    printf("planned with the measured mean costs of each stage: %.2f ms, bubble %.4f\n", res.makespan, res.bubble);
    mt_sim_free(&replay);
    free(each);
    if (svg) {
        int total = 0;
        for (int r = 0; r < s->P; r++)
            total += res.nspan[r];
        MtBox *plan = malloc(sizeof(MtBox) * (size_t)(total + 1));
        MT_ASSERT(plan, "out of memory");
        int k = 0;
        for (int r = 0; r < s->P; r++)
            for (int i = 0; i < res.nspan[r]; i++) {
                const MtAction *a = &lists[r][res.span[r][i].action];
                plan[k++] = (MtBox){r, a->kind, a->mb, a->stage / s->P, res.span[r][i].start, res.span[r][i].end};
            }
        char t1[160], t2[160];
        snprintf(t1, sizeof t1, "planned: %s, P %d, M %d, V %d, measured costs per stage: %.2f ms, bubble %.4f",
                 mt_schedule_name(s->kind), s->P, s->M, s->V, res.makespan, res.bubble);
        snprintf(t2, sizeof t2, "measured: step %d, %.2f ms, bubble %.4f", m.step, hi - lo, measured);
        MtTimeline sets[2] = {{t1, plan, total, s->P}, {t2, m.box, m.n, s->P}};
        FILE *f = fopen(svg, "w");
        int bad = !f || mt_timeline_svg(f, sets, 2) != 0;
        bad |= f && fclose(f) != 0;
        free(plan);
        if (bad) {
            free(cost);
            free(m.box);
            mt_sim_free(&res);
            return mt_cli_fail(mt_error(MT_EIO, "meshtrain schedule: writing %s failed", svg));
        }
        printf("svg: %s\n", svg);
    }
    printf("bubble %.6f\n", measured);
    free(cost);
    free(m.box);
    mt_sim_free(&res);
    return ok ? 0 : 1;
}

int mt_cmd_schedule(int argc, char **argv)
{
    int P = 0, M = 0, V = 1, step = -1, dry = 0, done;
    const char *sched = "1f1b", *svg = NULL, *costs = "1,1,1", *trace = NULL;
    Flag flags[] = {
        {"pp", FLAG_INT, &P, "pipeline ranks P", NULL, 1},
        {"microbatches", FLAG_INT, &M, "micro-batches per step M", NULL, 1},
        {"schedule", FLAG_STR, &sched, "naive, gpipe, 1f1b, interleaved, zb or zb2"},
        {"virtual-stages", FLAG_INT, &V, "model chunks per rank V (interleaved)"},
        {"costs", FLAG_STR, &costs, "whole time units of F,B,W (where B and W are not split, B costs B+W)", "F,B,W"},
        {"svg", FLAG_STR, &svg, "also draw the timeline into this SVG file", "FILE"},
        {"from-trace", FLAG_STR, &trace, "a run's --trace: check its measured order, draw it beside the plan", "FILE"},
        {"step", FLAG_INT, &step, "with --from-trace: the step to show (-1: the last traced)"},
        {"dry-run", FLAG_BOOL, &dry, MT_HELP_DRY_RUN},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]);
    int rc = mt_cli_parse(flags, nflags, argc, argv, "schedule",
                          "Print each rank's timeline of one pipeline step and its simulated bubble.", &done);
    if (done)
        return rc;
    if (P < 1 || M < 1)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain schedule: --pp P >= 1 and --microbatches M >= 1 are required"));
    int kind = mt_schedule_kind(sched);
    if (kind < 0)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain schedule: --schedule %s: must be naive, gpipe, 1f1b, "
                                    "interleaved, zb or zb2", sched));
    int cf, cb, cw;
    char extra;
    if (sscanf(costs, "%d,%d,%d%c", &cf, &cb, &cw, &extra) != 3 || cf < 1 || cb < 1 || cw < 1 || cf > 99 || cb > 99 ||
        cw > 99)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain schedule: --costs %s: want three whole numbers 1..99 "
                                    "(F,B,W)", costs));
    MtSchedule s = {kind, P, M, V};
    MtStatus st = mt_schedule_check(&s);
    if (st != MT_OK)
        return mt_cli_fail(mt_error_prefix(st, "meshtrain schedule"));
    if (dry) {
        mt_flags_print(flags, nflags);
        return 0;
    }
    FILE *f = NULL;
    if (svg && !trace && !(f = fopen(svg, "w")))
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain schedule: cannot write --svg %s", svg));
    MtAction *lists[MT_MAX_STAGES];
    int n[MT_MAX_STAGES];
    for (int r = 0; r < P; r++) {
        lists[r] = malloc(sizeof(MtAction) * (size_t)mt_schedule_max_actions(&s));
        MT_ASSERT(lists[r], "out of memory");
        n[r] = mt_schedule_build(&s, r, lists[r]);
    }
    if (trace) {
        int rc2 = from_trace(&s, lists, n, trace, step, svg);
        for (int r = 0; r < P; r++)
            free(lists[r]);
        return rc2;
    }
    MtSimResult res;
    st = mt_simulate(&s, lists, n, (MtSimCosts){cf, cb, cw, NULL, NULL}, &res);
    MT_ASSERT(st == MT_OK, "the %s generator built a broken list: %s", sched, res.error);
    printf("schedule %s: %d ranks, %d micro-batches, %d chunk%s per rank; costs F %d, B %d, W %d%s\n", sched, P, M, V,
           V > 1 ? "s" : "", cf, cb, cw, mt_schedule_split(kind) ? "" : " (B and W together)");
    print_text(&s, lists, &res);
    printf("peak activation sets per rank:");
    for (int r = 0; r < P; r++) {
        printf(" %d", res.peak_sets[r]);
        if (V > 1) { /* each chunk's own peak; chunks of one shape share a pool (the rank's peak when all are alike) */
            printf(" (chunks");
            for (int c = 0; c < V; c++)
                printf(" %d", mt_schedule_peak_sets(&s, lists[r], n[r], c));
            printf(")");
        }
    }
    printf("\n");
    if (f) {
        int total;
        MtBox *box = mt_timeline_sim_boxes(&res, lists, P, &total);
        char title[128];
        snprintf(title, sizeof title, "%s, P %d, M %d, V %d: simulated bubble %.4f", sched, P, M, V, res.bubble);
        MtTimeline t = {title, box, total, P};
        int bad = mt_timeline_svg(f, &t, 1);
        bad |= fclose(f);
        free(box);
        if (bad) {
            mt_sim_free(&res);
            return mt_cli_fail(mt_error(MT_EIO, "meshtrain schedule: writing %s failed", svg));
        }
        printf("svg: %s\n", svg);
    }
    printf("bubble %.6f\n", res.bubble);
    mt_sim_free(&res);
    for (int r = 0; r < P; r++)
        free(lists[r]);
    return 0;
}
