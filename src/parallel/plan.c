/* plan.c - a rank's memory from the layout alone (see mt_plan.h). */
#include "mt_plan.h"

#include <stdlib.h>
#include <string.h>

#include "mt_dp.h"
#include "mt_mesh.h"
#include "mt_tp.h"

static int tree_depth(int n)
{
    int d = 0;
    while ((1 << d) < n)
        d++;
    return d;
}

void mt_plan_memory(const MtTrainConfig *tc0, const MtPlanLayout *l, int rank, int64_t bytes[MT_MEM_NCAT])
{
    MtTrainConfig tc = *tc0;
    MtLayout mesh = {.dp = l->dp, .tp = l->tp, .pp = l->pp, .shard = l->shard};
    int world = l->dp * l->tp * l->pp, tp_rank = 0, pp_rank = 0, dp_rank = 0, shard_rank = 0;
    if (world > 1) {
        mt_mesh_group(&mesh, MT_GROUP_TP, rank, NULL, &tp_rank);
        mt_mesh_group(&mesh, MT_GROUP_PP, rank, NULL, &pp_rank);
        mt_mesh_group(&mesh, MT_GROUP_DP, rank, NULL, &dp_rank);
        mt_mesh_group(&mesh, l->zero > 0 ? MT_GROUP_DP_SHARD : MT_GROUP_DP, rank, NULL, &shard_rank);
    }
    memset(bytes, 0, sizeof(int64_t) * MT_MEM_NCAT);
    int use_tp = l->tp > 1 || l->tp_blocks > 1, K = l->tp_blocks > 0 ? l->tp_blocks : l->tp;
    MtTpCtx ctx = {.N = l->tp, .r = tp_rank, .K = K, .Vp = mt_tp_vocab_of(tc.cfg.V, K), .seqpar = l->seqpar};
    if (use_tp)
        tc.tp = &ctx;
    MtPipeOptions po = l->po;
    int dp_engine = 0;
    if (l->pp > 1) { /* as the command configures a copy of the pipeline */
        po.M = tc.batch / tc.micro / l->dp;
        mt_pipe_dp_options(&po, l->dp, dp_rank, l->zero, l->shard, l->det);
        mt_pipe_configure(&tc, &po, l->pp, pp_rank);
    } else if (world > 1 && (!use_tp || l->dp > 1)) {
        mt_dp_configure(&tc, l->dp, l->shard, l->zero, l->det);
        dp_engine = 1;
    }
    MtParam *table = calloc((size_t)mt_param_count(&tc.cfg), sizeof(MtParam));
    MT_ASSERT(table, "out of memory");
    int64_t nf = mt_trainer_table(&tc, table);
    free(table);
    int M = tc.batch / tc.micro;
    bytes[MT_MEM_PARAMS] = 4 * (tc.params_len > 0 ? tc.params_len : nf);
    bytes[MT_MEM_GRADS] = 4 * (tc.grads_len > 0 ? tc.grads_len : nf) * (1 + tree_depth(tc.tree_span > 0 ? tc.tree_span : M));
    bytes[MT_MEM_OPTIM] = 8 * (tc.optim_len > 0 ? tc.optim_len : nf);
    if (!tc.acts_none) { /* the trainer's whole-model set (a pipeline stage's are its own, below) */
        MtActsShape sh = mt_acts_whole(&tc.cfg);
        sh.recompute = tc.recompute;
        sh.rc_buffers = 1;
        sh.tp = tc.tp;
        bytes[MT_MEM_ACTS] = 4 * mt_acts_floats_shape(&tc.cfg, tc.micro, tc.seq, tc.threads, &sh);
    }
    if (dp_engine)
        mt_dp_plan(&tc, l->dp, l->shard > 0 ? l->shard : l->dp, l->zero, l->det, shard_rank, bytes);
    if (l->pp > 1)
        mt_pipe_plan(&tc, &po, l->pp, pp_rank, shard_rank, bytes);
}
