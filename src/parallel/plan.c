/* plan.c - a rank's memory and traffic from the layout alone (see mt_plan.h). */
#include "mt_plan.h"

#include <stdlib.h>
#include <string.h>

#include "mt_dp.h"
#include "mt_engine.h"
#include "mt_mesh.h"
#include "mt_tp.h"

void mt_plan_memory(const MtTrainConfig *tc0, const MtEngineLayout *l, int rank, int64_t bytes[MT_MEM_NCAT])
{
    MtEngineShape x; /* the rank as the engine composes it */
    mt_engine_shape(tc0, l, rank, &x);
    MtTrainConfig tc = x.tc; /* tc.tp: &x.ctx with tensor parallelism */
    memset(bytes, 0, sizeof(int64_t) * MT_MEM_NCAT);
    MtParam *table = calloc((size_t)mt_param_count(&tc.cfg), sizeof(MtParam));
    MT_ASSERT(table, "out of memory");
    int64_t nf = mt_trainer_table(&tc, table);
    free(table);
    int M = tc.batch / tc.micro;
    bytes[MT_MEM_PARAMS] = 4 * (tc.params_len > 0 ? tc.params_len : nf);
    int64_t ulen[2];
    int span = tc.tree_span > 0 ? tc.tree_span : M;
    mt_trainer_leaf_lens(&tc, ulen);
    bytes[MT_MEM_GRADS] = 4 * (tc.grads_len > 0 ? tc.grads_len : nf) *
                          (1 + (span > 1 ? mt_accum_depth(span / mt_accum_block_size(&tc)) : 0)) +
                          4 * (ulen[0] + ulen[1]); /* the sum, the tree's temporaries, the unit leaf buffers */
    bytes[MT_MEM_GRADS] += 4 * mt_trainer_esum_floats(&tc); /* the block's embedding rows */
    bytes[MT_MEM_OPTIM] = 8 * (tc.optim_len > 0 ? tc.optim_len : nf);
    if (!tc.acts_none) { /* the trainer's whole-model set (a pipeline stage's are its own, below) */
        MtActsShape sh = mt_trainer_acts_shape(&tc);
        bytes[MT_MEM_ACTS] = 4 * mt_acts_floats_shape(&tc.cfg, tc.micro, tc.seq, tc.threads, &sh);
    }
    if (x.use_dp)
        mt_dp_plan(&tc, l->dp, l->shard > 0 ? l->shard : l->dp, l->zero, l->det, x.shard_rank, bytes);
    if (l->pp > 1)
        mt_pipe_plan(&tc, &x.po, l->pp, x.pp_rank, x.shard_rank, bytes);
}

int mt_plan_head(const MtTrainConfig *tc0, const MtEngineLayout *l, int rank, int *defer)
{
    *defer = 0;
    if (l->pp <= 1)
        return 0;
    MtEngineShape x;
    mt_engine_shape(tc0, l, rank, &x);
    return mt_pipe_plan_head(&x.tc, &x.po, l->pp, x.pp_rank, defer);
}

void mt_plan_comm(const MtTrainConfig *tc0, const MtEngineLayout *l, int rank, int64_t bytes[3])
{
    MtEngineShape x; /* the rank as the engine composes it */
    mt_engine_shape(tc0, l, rank, &x);
    MtTrainConfig tc = x.tc; /* tc.tp: &x.ctx with tensor parallelism */
    bytes[0] = bytes[1] = bytes[2] = 0;
    if (l->pp > 1) {
        mt_pipe_plan_comm(&tc, &x.po, l->pp, x.pp_rank, l->dp, bytes);
        return;
    }
    int M = tc.batch / tc.micro, mine = M / l->dp; /* the micro-batches this rank runs */
    if (x.use_dp)
        bytes[0] = mt_dp_plan_comm(&tc, l->dp, l->shard > 0 ? l->shard : l->dp, l->zero, l->det);
    bytes[1] = (int64_t)mine * mt_tp_plan_micro_bytes(&tc.cfg, tc.tp, (int64_t)tc.micro * tc.seq, 1, 0, tc.cfg.L, 1,
                                                      tc.recompute, 0) +
               mt_tp_plan_step_bytes(tc.tp, mt_param_count(&tc.cfg));
}
