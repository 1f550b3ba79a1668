/* mt_planner.h - `meshtrain plan`'s search: every layout of a model on a cluster, each
 * checked by the engine's own rule book (mt_engine_check), sized by the memory model and
 * timed by the time model (mt_cost.h); the fastest that fit, first.  Pure: no MPI.
 */
#ifndef MT_PLANNER_H
#define MT_PLANNER_H

#include "mt_cost.h"

/* What the search may vary: each dimension fixed (>= 0; schedule a kind) or searched (-1). */
typedef struct {
    int dp, tp, pp, zero, shard, sched, V, micro, recompute, seqpar, accum_blocks;
    const int *stage_layers; /* given: the pipeline's cut (pp x V numbers), else NULL */
    int nstage;
    int post_validate; /* --post-validate on every pipeline (1), on none (0), searched (-1: on an untied model's pipelines) */
} MtPlanFixed;

enum { MT_PLAN_OK, MT_PLAN_OOM, MT_PLAN_NODIV, MT_PLAN_REFUSED, MT_PLAN_NREASON };

typedef struct {
    MtPlanLayout l;
    int verdict;       /* MT_PLAN_OK (fits), _OOM, _NODIV (the engine: does not divide), _REFUSED (the engine, another reason) */
    char why[200];     /* the engine's refusal, or what did not fit */
    MtPlanMem mem;
    MtStepTime time;   /* fits only */
    double tokens_per_s, tflops, mfu;
} MtPlanEntry;

typedef struct {
    MtPlanEntry *e; /* every layout considered; fitting ones first, fastest first */
    int n, fits;
    int counts[MT_PLAN_NREASON];
    double seconds; /* the search's own time */
} MtPlanResult;

/* Evaluates one layout (the engine's check, memory, time; above `bound` seconds only its
 * lower bound: mt_plan_time). */
void mt_plan_one(const MtPlanModel *m, const MtCluster *cl, const MtPlanLayout *l, int accum_blocks, double bound,
                 MtPlanEntry *e);
/* Every layout of `devices` devices allowed by fx; MT_EINPUT when none can be formed.  With
 * top > 0 only layouts that can be among the `top` fastest are simulated (branch and bound:
 * the others keep their lower bound, which is slower than the top's); top 0 times all. */
MtStatus mt_plan_search(const MtPlanModel *m, const MtCluster *cl, int devices, const MtPlanFixed *fx, int top,
                        MtPlanResult *r);
void mt_plan_result_free(MtPlanResult *r);
/* train's flags of the layout (and the model), into buf. */
void mt_plan_train_flags(const MtPlanModel *m, const MtPlanLayout *l, const char *data, char *buf, size_t n);

#endif
