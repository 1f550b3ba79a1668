/* cmd_schedule.c - `meshtrain schedule`: a pipeline schedule's timeline per rank, as text
 * (one row per rank, one cell per time unit) and as SVG, with its simulated bubble. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flags.h"
#include "mt_cli.h"
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

int mt_cmd_schedule(int argc, char **argv)
{
    int P = 0, M = 0, V = 1, done;
    const char *sched = "1f1b", *svg = NULL, *costs = "1,1,1";
    Flag flags[] = {
        {"pp", FLAG_INT, &P, "pipeline ranks"},
        {"microbatches", FLAG_INT, &M, "micro-batches per step"},
        {"schedule", FLAG_STR, &sched, "naive gpipe 1f1b interleaved zb"},
        {"virtual-stages", FLAG_INT, &V, "model chunks per rank (interleaved)"},
        {"costs", FLAG_STR, &costs, "whole time units of F,B,W (without a split B costs B+W)"},
        {"svg", FLAG_STR, &svg, "also draw the timeline into this SVG file"},
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
                                    "interleaved or zb", sched));
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
    FILE *f = NULL;
    if (svg && !(f = fopen(svg, "w")))
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain schedule: cannot write --svg %s", svg));
    MtAction *lists[MT_MAX_STAGES];
    int n[MT_MAX_STAGES];
    for (int r = 0; r < P; r++) {
        lists[r] = malloc(sizeof(MtAction) * (size_t)mt_schedule_max_actions(&s));
        MT_ASSERT(lists[r], "out of memory");
        n[r] = mt_schedule_build(&s, r, lists[r]);
    }
    MtSimResult res;
    st = mt_simulate(&s, lists, n, (MtSimCosts){cf, cb, cw}, &res);
    MT_ASSERT(st == MT_OK, "the %s generator built a broken list: %s", sched, res.error);
    printf("schedule %s: %d ranks, %d micro-batches, %d chunk%s per rank; costs F %d, B %d, W %d%s\n", sched, P, M, V,
           V > 1 ? "s" : "", cf, cb, cw, mt_schedule_split(kind) ? "" : " (B and W together)");
    print_text(&s, lists, &res);
    printf("peak activation sets per rank:");
    for (int r = 0; r < P; r++)
        printf(" %d", res.peak_sets[r]);
    printf("\n");
    if (f) {
        int total = 0;
        for (int r = 0; r < P; r++)
            total += res.nspan[r];
        MtBox *box = malloc(sizeof(MtBox) * (size_t)total);
        MT_ASSERT(box, "out of memory");
        int k = 0;
        for (int r = 0; r < P; r++)
            for (int i = 0; i < res.nspan[r]; i++) {
                const MtAction *a = &lists[r][res.span[r][i].action];
                box[k++] = (MtBox){r, a->kind, a->mb, a->stage / P, res.span[r][i].start, res.span[r][i].end};
            }
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
