/* mt_cost.h - the planner's models: what one layout of one model costs on one cluster, in
 * memory and in step time, without running it (docs/planner.md has the formulas).
 *
 * Memory.  In fp32 the bytes are the engine's own (mt_plan.h: exactly what `mem` in the
 * training log measures).  In bf16, the mixed precision the CUDA backend will run (as
 * Megatron trains), the same arrays take: every parameter float a bf16 working copy (2 B),
 * each float of the rank's optimizer shard a fp32 master copy (4 B); gradients fp32 (4 B)
 * and AdamW's two moments fp32 (8 B) as the engine holds them: 18 bytes per parameter
 * unsharded (2 + 4 + 4 + 8).  Activations in bf16 follow Korthikanti et al. (2022) per
 * layer and micro-batch, s b h (34 + 5 a s / h) bytes, divided by tp where tensor and
 * sequence parallelism split them, 2 s b h with full recomputation, without the 5 a s / h
 * term with fused attention; times the micro-batches each stage holds at once under its
 * schedule (the schedule's own lists, mt_schedule_peak_sets).
 *
 * Time.  Each matrix product costs max(FLOPs / (peak x eff), bytes / bandwidth), eff =
 * gemm_max x g(m) g(n) g(k) with g(d) = d / (d + gemm_half) (an efficiency curve over the
 * shape); element-wise work costs its bytes over the memory bandwidth; each collective the
 * alpha-beta cost of a ring over the link its group spans (the mesh puts tp innermost, then
 * dp, then pp: a group inside one node uses intra_node, else inter_node); the pipeline's
 * step comes from the schedule simulator fed with the stages' costs; data parallelism and
 * the optimizer follow, overlapped as the engine overlaps them.  Pure: no MPI, no device.
 */
#ifndef MT_COST_H
#define MT_COST_H

#include "mt_cluster.h"
#include "mt_engine.h"
#include "mt_mem.h"
#include "mt_mesh.h"
#include "mt_model.h"
#include "mt_schedule.h"

typedef struct {
    MtConfig cfg;   /* L, NH, C, V, T */
    int batch, seq; /* global sequences per step, tokens per sequence */
    int prec;       /* MT_PREC_* */
    int attn_fused; /* 1: fused attention (the s x s probabilities never stored); 0: unfused */
} MtPlanModel;

typedef struct {
    int dp, tp, pp, zero, shard;
    int sched, V;  /* MtSchedKind and virtual stages, with pp > 1 */
    int micro;     /* micro-batch size */
    int recompute; /* MT_RECOMPUTE_* */
    int seqpar;
    const int *stage_layers; /* blocks per virtual stage (nstage of them: the engine checks pp x V), or NULL: even */
    int nstage;
    int post_validate; /* --post-validate: a pipeline's steps overlap (mt_pipeline.h) */
} MtPlanLayout;

/* The step's time on the critical rank, seconds, by term; step is their sum. */
typedef struct {
    double compute, recompute, bubble, tp, dp, pp, optimizer, step;
    int bounded; /* 1: step is a lower bound (above the bound asked, the pipeline not simulated) */
} MtStepTime;

enum { MT_PMEM_PARAMS, MT_PMEM_GRADS, MT_PMEM_OPTIM, MT_PMEM_ACTS, MT_PMEM_COMM, MT_PMEM_WORK, MT_NPMEM };

typedef struct {
    double bytes[MT_NPMEM]; /* the fullest rank's, by category */
    double peak;            /* their sum */
    int rank;               /* which world rank that is */
} MtPlanMem;

/* ---- pieces (exported for the tests) ---- */

/* Seconds of one product (m x k) (k x n) in precision prec, count times. */
double mt_cost_gemm(const MtCluster *cl, int prec, double m, double n, double k, double count);
/* Seconds to stream `bytes` through device memory. */
double mt_cost_stream(const MtCluster *cl, double bytes);

enum { MT_COLL_ALLREDUCE, MT_COLL_ALLGATHER, MT_COLL_REDUCE_SCATTER, MT_COLL_P2P };
/* The link a group of `n` members uses when they lie `stride` world ranks apart (tp 1,
 * dp tp, pp dp x tp): inside a node when they all fit in one, else across nodes; *per_node
 * receives how many members share a node. */
MtLink mt_cost_group_link(const MtCluster *cl, int n, int stride, int *per_node);
/* Seconds of one collective of kind over n members on link, `bytes` being the whole buffer
 * (all-reduce: each member's; all-gather: the gathered result; reduce-scatter: the input;
 * p2p: the message): a ring, 2 (n-1) or (n-1) steps of bytes / n each, plus latency. */
double mt_cost_coll(const MtCluster *cl, MtLink link, int kind, int n, double bytes);

/* The pipeline's makespan for schedule s and per-virtual-stage costs (3 S: f, b, w), and in
 * *busy the most any rank computes: the simulator on the schedule's lists; above 8
 * P micro-batches, the simulation of 8 P and then the busiest rank's work per micro-batch
 * for each further one, or the last P's slope where steeper (within 1% of full runs in the
 * tests; exact once the busiest rank is saturated). */
MtStatus mt_cost_pipeline(const MtSchedule *s, const double *stage, double *makespan, double *busy);
/* With post-validation (--post-validate) a step's warm-up runs under the last one's
 * cool-down: by how much a step of schedule s with those stage costs is shorter than its
 * makespan, from two steps simulated back to back (0 where nothing overlaps). */
MtStatus mt_cost_pipeline_overlap(const MtSchedule *s, const double *stage, double *saving);

/* ---- the models ---- */

/* Memory of the fullest rank (fp32: the engine's exact bytes; bf16: as above), for the
 * engine's configuration of the layout (tc and el as mt_engine_check left them). */
MtStatus mt_plan_mem(const MtPlanModel *m, const MtPlanLayout *l, const MtTrainConfig *tc, const MtEngineLayout *el,
                     MtPlanMem *out);
/* bf16 activations of one transformer block for one micro-batch (Korthikanti et al.). */
double mt_plan_block_act_bytes(const MtPlanModel *m, const MtPlanLayout *l);
/* Step time by term; a layout whose lower bound (the critical rank's work, data
 * parallelism, the optimizer) exceeds `bound` seconds gets that bound only (t->bounded). */
MtStatus mt_plan_time(const MtPlanModel *m, const MtPlanLayout *l, const MtCluster *cl, double bound, MtStepTime *t);
/* The costs the pipeline simulation is fed: (f, b, w) seconds of each of the pp x V virtual
 * stages for one micro-batch (exposed collectives and sends inside), into stage (3 S). */
MtStatus mt_plan_stage_costs(const MtPlanModel *m, const MtPlanLayout *l, const MtCluster *cl, double *stage);
/* Model FLOPs of one step (forward and backward, no recomputation: 6 N tokens plus
 * attention's 12 L s h per token; MFU counts these). */
double mt_plan_model_flops(const MtPlanModel *m);

#endif
