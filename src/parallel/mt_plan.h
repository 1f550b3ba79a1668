/* mt_plan.h - how many bytes a rank of a layout holds and sends, without running it.
 *
 * mt_plan_memory(tc, layout, rank) configures a copy of tc as the engine composes that rank
 * of the mesh (mt_engine_shape) (tensor parallelism's slices, the pipeline's stage, data
 * parallelism's shards) and adds up what the trainer and each technique allocate: the
 * parameters, gradients (with tree temporaries, ZeRO's unit buffers and round trees, the
 * pipeline's tree and wte replica, FSDP's unit slots), AdamW moments and activations (the
 * trainer's whole-model set, or a pipeline stage's sets as its schedule holds them at once,
 * their stashes for W and the backward scratch; tensor parallelism's slices and sequence
 * split inside), per memory category, exactly as `mem` in the training log measures them
 * (its peaks: nothing in these categories is freed during a step).  Transfer buffers
 * (category other) are not predicted.  Pure: no MPI, no allocation of the state.
 * The core of a layout planner: try layouts, keep those that fit.
 */
#ifndef MT_PLAN_H
#define MT_PLAN_H

#include "mt_engine.h"
#include "mt_mem.h"
#include "mt_pipeline.h"
#include "mt_train.h"

/* the layout: MtEngineLayout (mt_engine.h) */

/* Bytes per category (params, grads, optimizer, activations; other 0) of world rank
 * `rank`; tc as the command line sets it before any technique configures it. */
void mt_plan_memory(const MtTrainConfig *tc, const MtEngineLayout *l, int rank, int64_t bytes[MT_MEM_NCAT]);
/* Bytes world rank `rank` sends per step over its groups, {dp, tp, pp} as the log's comm
 * counts them (dp with dp_shard and dp_replica, pp with the embed group): the sum of each
 * technique's formula (mt_dp_plan_comm, mt_tp_plan_micro_bytes per micro-batch and
 * mt_tp_plan_step_bytes, mt_pipe_plan_comm), for a step that follows a step (an evaluation
 * sends nothing the step counts). */
void mt_plan_comm(const MtTrainConfig *tc, const MtEngineLayout *l, int rank, int64_t bytes[3]);
/* A pipeline's last stage: the micro-batches whose tied-head gradient H_k awaits the first
 * stage's rows at once, and in *defer whether it keeps their head operands instead (H_k
 * computed when the rows arrive: mt_pipeline.h); 0 on every other rank. */
int mt_plan_head(const MtTrainConfig *tc, const MtEngineLayout *l, int rank, int *defer);

#endif
