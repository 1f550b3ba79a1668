/* mt_engine.h - one training engine built from a layout: the techniques composed once.
 *
 * A layout (dp x tp x pp ranks, the ZeRO stage, the blocks, the schedule) becomes, on each
 * rank, one engine: the trainer that holds the rank's arrays and the techniques stacked on
 * it, always in this order (each one shapes what the next one sees):
 *   1. tensor parallelism: the trainer's table becomes the rank's slices (mt_tp_engine.h);
 *   2. a pipeline (--pp): the rank's stage of those tensors, with data parallelism over
 *      the copies of the pipeline inside it (DDP or ZeRO, mt_pipeline.h);
 *      or else data parallelism (--dp, DDP or ZeRO): the shards of those tensors (mt_dp.h);
 *   3. the trainer is allocated for that shape (mt_train.h), and the techniques attach to
 *      it (tensor parallelism's norm, the data-parallel hooks, the pipeline's executor).
 * The built engine answers a step, the validation loss, a save and a load of its pieces,
 * and the replica check; `mt_engine_shape` is the same composition without ranks, which the
 * planner (mt_plan.h) asks instead of re-deriving it.
 *
 * The engine must stay where mt_engine_init put it (its techniques point into it).
 */
#ifndef MT_ENGINE_H
#define MT_ENGINE_H

#include "mt_comm.h"
#include "mt_dp.h"
#include "mt_pipeline.h"
#include "mt_tp_engine.h"
#include "mt_train.h"

typedef struct {
    int dp, tp, pp;       /* the mesh (mt_mesh.h) */
    int zero, shard;      /* --zero, --shard-size */
    int tp_blocks;        /* --tp-blocks (0: none) */
    int seqpar;           /* --sequence-parallel */
    int det;              /* fixed-order reductions (not --fast-comm) */
    int64_t bucket_bytes; /* DDP's bucket (<= 0: one per unit) */
    MtPipeOptions po;     /* with pp > 1: as mt_pipe_check filled it (kind, V, stage_layers) */
} MtEngineLayout;

/* What a user asks for: train's layout flags as given (the planner asks the same). */
typedef struct {
    int dp, tp, pp, zero, shard, tp_blocks, seqpar, fast_comm;
    const char *schedule;    /* naive, gpipe, 1f1b, interleaved, zb, zb2 */
    int vstages;             /* --virtual-stages */
    const int *stage_layers; /* --stage-layers: nstage numbers, or NULL (even) */
    int nstage;
    int head_recompute;
    float bucket_mb;
    int accum_blocks;        /* --accum-blocks K; < 0: the layout's default (mt_accum_default) */
    int ltr_stage;           /* test hook (mt_testhooks.h) */
    int post_validate;       /* --post-validate (mt_pipeline.h) */
} MtEngineRequest;

/* The rule book: whether the engine runs request rq for the model, batch, micro-batch and
 * sequence length in tc (tc->cfg checked already), the one check that `train` and `plan`
 * share.  MT_OK with *l the layout and tc->accum_blocks set (one block per micro-batch
 * recorded as 0; K not given: the layout's default); else MT_EINPUT with one line (no
 * command prefix) and *part saying which check refused: 1 the layout's degrees and
 * techniques, 2 the accumulation blocks, 3 the pipeline's cuts and micro-batches. */
MtStatus mt_engine_check(const MtEngineRequest *rq, MtTrainConfig *tc, MtEngineLayout *l, int *part);

/* What the composition makes of one rank: its coordinates, tc as the techniques configure it
 * (tc.tp pointing at ctx; the pipeline's options in po) and which techniques it runs. */
typedef struct {
    MtTrainConfig tc;
    MtTpCtx ctx;
    MtPipeOptions po;
    int tp_rank, pp_rank, dp_rank, shard_rank;
    int use_tp, use_dp, use_pp;
} MtEngineShape;

/* World rank `rank` of layout l for tc as the command line set it (pure; no ranks). */
void mt_engine_shape(const MtTrainConfig *tc, const MtEngineLayout *l, int rank, MtEngineShape *x);

typedef struct {
    MtEngineLayout l;
    MtComm *c;            /* NULL: one rank */
    MtTrainConfig tc;     /* as configured (tc.tp points at tpe.ctx) */
    MtTrainer tr;
    MtTpe tpe, *tp;       /* tp: &tpe when tensor parallelism (or --tp-blocks) runs */
    MtDp dpe, *dp;
    MtPipe pipe, *pp;
    MtDpSum dsum;         /* the pipeline copies' reduction */
    MtPipeOptions po;
} MtEngine;

/* Builds the engine of this rank (c: the world with its mesh set, NULL for one rank) for
 * tc (the command line's: model, batch, optimizer, accumulation, threads).  On failure
 * everything is freed and the status says why. */
MtStatus mt_engine_init(MtEngine *e, const MtTrainConfig *tc, const MtEngineLayout *l, MtComm *c);
void mt_engine_free(MtEngine *e);
/* One training step on the step's batch of data (every technique inside). */
void mt_engine_step(MtEngine *e, const MtTokens *data, MtStepStats *st);
/* With post-validation (a pipeline's --post-validate) a step's stats come with the next
 * step (st->step says which; 0: none yet) and this completes the last one: its stats into
 * st, 1; 0 where nothing is pending.  Before an evaluation, a save or the end. */
int mt_engine_flush(MtEngine *e, MtStepStats *st);
/* Seconds this rank spent inside communication calls during the last step. */
double mt_engine_comm_s(const MtEngine *e);
/* The validation loss of windows 0 .. n-1 of val, the same bits on every layout
 * (mt_train.h); sums holds dp x ceil(n / dp) doubles. */
double mt_engine_validate(MtEngine *e, const MtTokens *val, int64_t n, double *sums);
/* Every rank writes its pieces of a checkpoint of the state (mt_checkpoint.h) with the
 * arithmetic it was trained in; collective. */
MtStatus mt_engine_save(MtEngine *e, const char *dir);
/* Every rank reads its pieces of checkpoint dir (the parameters and moments; the step is
 * the caller's); collective. */
MtStatus mt_engine_load(MtEngine *e, const char *dir);
/* With tensor parallelism over ranks: how many replicated tensors (parameters and moments)
 * differ across the tp group (0: none); collective. */
int mt_engine_replicas_differ(MtEngine *e);

#endif
