/* mt_tp_engine.h - tensor parallelism run over the tp group of the mesh (--tp N,
 * --tp-blocks K).
 *
 * Each rank of a tp group holds its slices of the split tensors and the whole of the
 * replicated ones (mt_tp.h), trains on the whole global batch (every rank of the group reads
 * the same tokens), and the model's split sums meet in the group's fixed-order all-reduces:
 * per block two in the forward (after attn.c_proj and mlp.c_proj, Megatron's g) and two in
 * the backward (the input gradients of c_attn and c_fc, Megatron's f), one for the
 * embedding and one for the head's input gradient, and two all-gathers of row statistics
 * for the vocabulary-parallel loss.  With --sequence-parallel each all-reduce of the
 * residual stream becomes a reduce-scatter and an all-gather (tp_model.c), plus one small
 * all-reduce of the replicated gradients per block and one for ln_f.  With K blocks (N dividing K) every layout gives the
 * bits of one device run with the same K; without --tp-blocks, K = N.  The replicated
 * parameters receive the same gradients on every rank, so they stay identical without
 * being communicated.  The gradient norm: mt_tp_sumsq_parts on each rank, all-gathered,
 * mt_tp_sumsq_combine.
 *
 * Data parallelism composes from outside (--dp with --tp): each tp rank's trainer holds
 * its slices in units padded to the dp shard alignment (tc->unit_align), the dp engine
 * steps it (its share of the micro-batches, the dp group's reductions of each slice), and
 * the trainer's update clips by this engine's norm (tr->sumsq, set by mt_tpe_init).
 *
 * Checkpoints are the single-device files: in a save every rank writes its slices' runs
 * into them (mt_tpe_piece, mt_ckpt_par_write); a load has every rank read only its slices
 * (one read per run).  Nothing here knows data
 * or pipeline parallelism.
 */
#ifndef MT_TP_ENGINE_H
#define MT_TP_ENGINE_H

#include "mt_checkpoint.h"
#include "mt_comm.h"
#include "mt_tp.h"
#include "mt_train.h"

typedef struct {
    MtTpCtx ctx;      /* what the model sees (its comm points back here) */
    MtComm *c;        /* NULL on one rank (--tp-blocks without --tp) */
    MtTrainer *tr;
    MtParam *whole;   /* the whole model's table (the checkpoint's) */
    double comm_s;    /* seconds inside the tp collectives during the last step */
    double *parts, *all; /* the norm's per-tensor parts: this rank's, every rank's */
} MtTpe;

/* Checks --tp N and --tp-blocks K (0: not given) against the model: N divides the heads
 * (and so 4C); K a power of two, a multiple of N, dividing the width (row blocks need not
 * divide a micro-batch's tokens: mt_tp_rows_grads).  MT_EINPUT with one line. */
MtStatus mt_tpe_check(const MtConfig *cfg, int N, int K);
/* Before mt_trainer_init: the context for rank r of N with K blocks (0: N), sequence
 * parallelism on or off, and tc->tp. */
void mt_tpe_setup(MtTpe *t, MtComm *c, MtTrainConfig *tc, int N, int K, int seqpar);
/* After mt_trainer_init: buffers; MT_ENOMEM on failure (t freed). */
MtStatus mt_tpe_init(MtTpe *t, MtTrainer *tr);
void mt_tpe_free(MtTpe *t);
/* One step: the global batch, forward and backward, the norm over the group, AdamW. */
void mt_tpe_step(MtTpe *t, const MtTokens *data, MtStepStats *st);
/* The pieces this rank writes of a checkpoint (mt_ckpt_par_write against t->whole; ctx:
 * the MtTpe): the runs of its slices of the split tensors, the replicated ones on tp rank
 * 0 only, from arrays laid out like the trainer's (the same offset in params, m, v). */
int64_t mt_tpe_piece(void *ctx, int q, int k, int64_t *begin, int64_t *end);
/* What this rank reads: every run of its slices, replicated tensors included. */
int64_t mt_tpe_load_piece(void *ctx, int q, int k, int64_t *begin, int64_t *end);
/* Every rank reads only its slices of the parameters and moments (one read per run) into
 * the trainer's arrays (a sharding technique reads through mt_tpe_load_piece instead). */
MtStatus mt_tpe_load(MtTpe *t, const char *dir);
/* How many replicated tensors (parameters or AdamW moments) are not bit-identical to tp
 * rank 0's (in state = {params, m, v} laid out like the trainer's table, or NULL for the
 * trainer's own arrays: a sharding technique passes gathered copies), by a 64-bit hash of each all-gathered over the group; the same answer on every
 * rank (collective).  Test hook: with MT_TEST_TP_DRIFT=1 in the environment, tp rank 1
 * moves one element of ln_f.bias by one ulp after every step (the check must see it). */
int mt_tpe_replicas_differ(MtTpe *t, float *const state[3]);
/* Floats of a micro-batch's logits on this rank (micro x T x Vp / N). */
int64_t mt_tpe_logits_floats(const MtTpe *t);

#endif
