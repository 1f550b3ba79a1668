/* timeline.c - SVG drawing of pipeline timelines. */
#include "mt_timeline.h"

#include <stdlib.h>

#include "mt_schedule.h"

#define ROW_H 22
#define WIDTH 960
#define LEFT 70

static const char *fill(int kind)
{
    return kind == MT_ACT_F ? "#4e79a7" : kind == MT_ACT_B ? "#59a14f" : "#f28e2b";
}

int mt_timeline_svg(FILE *f, const MtTimeline *sets, int nsets)
{
    int height = 10;
    for (int i = 0; i < nsets; i++)
        height += 30 + sets[i].P * ROW_H + 10;
    height += 24;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
               "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", WIDTH + LEFT + 20, height);
    int y = 10;
    for (int i = 0; i < nsets; i++) {
        const MtTimeline *t = &sets[i];
        double t0 = 0.0, t1 = 0.0;
        for (int k = 0; k < t->nbox; k++) {
            if (k == 0 || t->box[k].start < t0)
                t0 = t->box[k].start;
            if (t->box[k].end > t1)
                t1 = t->box[k].end;
        }
        double scale = t1 > t0 ? WIDTH / (t1 - t0) : 1.0;
        fprintf(f, "<text x=\"4\" y=\"%d\" font-size=\"13\">%s</text>\n", y + 16, t->title);
        y += 26;
        for (int r = 0; r < t->P; r++) {
            fprintf(f, "<text x=\"4\" y=\"%d\">rank %d</text>\n", y + r * ROW_H + 15, r);
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#dddddd\"/>\n", LEFT, y + r * ROW_H + 2,
                    WIDTH, ROW_H - 4);
        }
        for (int k = 0; k < t->nbox; k++) {
            const MtBox *b = &t->box[k];
            double x = LEFT + (b->start - t0) * scale, w = (b->end - b->start) * scale;
            int yy = y + b->rank * ROW_H + 2;
            fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\" stroke=\"white\" "
                       "stroke-width=\"0.5\"/>\n", x, yy, w > 0.5 ? w : 0.5, ROW_H - 4, fill(b->kind));
            if (w >= 14)
                fprintf(f, "<text x=\"%.2f\" y=\"%d\" fill=\"white\" text-anchor=\"middle\">%d%s</text>\n", x + w / 2,
                        yy + 13, b->mb, b->chunk > 0 ? (const char *[]){"", "b", "c", "d", "e", "f", "g", "h"}[b->chunk & 7] : "");
        }
        y += t->P * ROW_H + 10;
    }
    fprintf(f, "<g transform=\"translate(%d,%d)\">", LEFT, y + 4);
    const char *lab[3] = {"forward", "backward (input gradient for zb)", "weight gradient"};
    for (int k = 0; k < 3; k++)
        fprintf(f, "<rect x=\"%d\" y=\"0\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"10\">%s</text>",
                k * 230, fill(k), k * 230 + 16, lab[k]);
    fprintf(f, "<rect x=\"690\" y=\"0\" width=\"12\" height=\"12\" fill=\"#dddddd\"/><text x=\"706\" y=\"10\">idle</text>"
               "</g>\n</svg>\n");
    return ferror(f) ? -1 : 0;
}

MtBox *mt_timeline_sim_boxes(const MtSimResult *res, MtAction *const *lists, int P, int *n)
{
    int total = 0;
    for (int r = 0; r < P; r++)
        total += res->nspan[r];
    MtBox *box = malloc(sizeof(MtBox) * (size_t)(total ? total : 1));
    MT_ASSERT(box, "out of memory");
    int k = 0;
    for (int r = 0; r < P; r++)
        for (int i = 0; i < res->nspan[r]; i++) {
            const MtAction *a = &lists[r][res->span[r][i].action];
            box[k++] = (MtBox){r, a->kind, a->mb, a->stage / P, res->span[r][i].start, res->span[r][i].end};
        }
    *n = total;
    return box;
}
