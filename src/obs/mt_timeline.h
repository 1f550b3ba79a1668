/* mt_timeline.h - pipeline timelines drawn as SVG: one row per rank, a box per compute
 * action (forward, backward, weight gradient; the micro-batch written inside), idle time
 * left grey.  Used for planned (simulated) and measured (traced) steps alike. */
#ifndef MT_TIMELINE_H
#define MT_TIMELINE_H

#include <stdio.h>

#include "mt_schedule.h"

typedef struct {
    int rank;
    int kind;     /* MtActKind: MT_ACT_F, MT_ACT_B or MT_ACT_W */
    int mb, chunk;
    double start, end; /* any unit (simulated slots, milliseconds) */
} MtBox;

/* Draws `nsets` timelines one under the other (e.g. planned and measured), each with its
 * title, P rows and its own time scale; returns 0 or -1 on a write error. */
typedef struct {
    const char *title;
    const MtBox *box;
    int nbox, P;
} MtTimeline;
int mt_timeline_svg(FILE *f, const MtTimeline *sets, int nsets);

/* The compute actions of a simulated step as boxes (the P lists the simulation ran; *n
 * receives their count); malloc'd, the caller frees. */
MtBox *mt_timeline_sim_boxes(const MtSimResult *res, MtAction *const *lists, int P, int *n);

#endif
