/* mt_dp.h - the data-parallel family: DDP (--zero 0), ZeRO-1, ZeRO-2, FSDP (ZeRO-3).
 *
 * Every rank of the dp group trains the same model on its share of each step's global batch;
 * the result does not depend on the number of ranks N.  How the share is taken is what makes
 * the sums reproduce the single-device step in the accumulation order (mt_accum.h: K blocks,
 * each left to right, the blocks as a pairwise tree) bit for bit with the fixed-order
 * reductions:
 *
 *  - DDP and ZeRO-1 give rank r the contiguous run [r M/N, (r+1) M/N) of the M micro-batches:
 *    its K/N blocks (the default K = N: one block, summed left to right).  For N a power of
 *    two dividing K the run is a whole subtree, which the rank sums locally with the plan;
 *    the fixed-order reduction over ranks (tree over group ranks) forms the upper levels.
 *  - ZeRO-2 and FSDP keep only a shard of the gradient.  At one block per micro-batch (K = M,
 *    their default) they reduce after every round of micro-batches: round j gives rank r
 *    micro-batch j N + r, each unit's gradient is reduce-scattered as soon as backward
 *    finishes it (fixed order: the N leaves of the round are a subtree when M / N is a power
 *    of two), and the rounds' shards are summed as the tree over rounds.  At K < M, or when
 *    M / N is not a power of two, they take contiguous runs as ZeRO-1 does (the whole
 *    gradient held during the step): exact, at ZeRO-1's gradient memory.
 *
 * DDP: gradients are all-reduced in buckets of units (mt_shard.h); the last micro-batch's
 * backward reports each unit as its sums finish (mt_trainer_forward_backward_range), a
 * bucket's all-reduce starts as soon as its last unit is final, and pending reductions are
 * progressed at every unit event, overlapping the rest of backward.
 * ZeRO-1: optimizer state is sharded (mt_shard.h); after backward each unit's gradient is
 * reduce-scattered, each rank clips and updates its chunks, and the parameters are
 * all-gathered unit by unit.
 * ZeRO-2: gradients too are sharded; backward writes each unit's gradient into a unit
 * buffer (two for blocks, so one can be in flight while the next is computed).
 * FSDP: parameters too; a unit is all-gathered into a slot just before its forward and its
 * backward and released after, and the next unit's gather is started first (prefetch).
 * The embedding unit (tied with the LM head) and the final LayerNorm are gathered once in
 * the forward and kept until the head's backward, as PyTorch keeps its root unit.
 *
 * The gradient norm is the single-device one (mt_optim.h): the ranks' block sums are
 * all-gathered and added in the canonical order.
 *
 * Hybrid sharding (--shard-size S, ZeRO 1-3): the N ranks form N / S copies of S
 * consecutive dp ranks; sharding (reduce-scatter, gathers, the norm's block sums) runs
 * within a copy (group dp_shard), and each reduced shard is then all-reduced across the
 * copies (group dp_replica).  With N and S powers of two the copies are subtrees of the
 * rank tree, so the sums stay the canonical ones.
 */
#ifndef MT_DP_H
#define MT_DP_H

#include "mt_checkpoint.h"
#include "mt_comm.h"
#include "mt_shard.h"
#include "mt_sharded.h"
#include "mt_train.h"

typedef struct {
    int zero;             /* 0 DDP, 1, 2, 3 */
    int det;              /* fixed-order reductions */
    int64_t bucket_bytes; /* DDP bucket size (<= 0: one bucket per unit) */
    int shard;            /* hybrid sharding: ranks per sharded copy (0: all dp ranks) */
} MtDpOptions;

#define MT_DP_MAX_REQ 512

typedef struct {
    MtTrainer *tr;
    MtComm *c;
    MtDpOptions o;
    int N, rank, M, rounds;
    int S;                /* ranks per sharded copy (the shard map's N) */
    int contig; /* contiguous runs with full local gradients (DDP, ZeRO-1, exact fallback) */
    MtShardMap map;
    /* DDP */
    int nbuckets, bfirst[MT_MAX_UNITS], blast[MT_MAX_UNITS];
    int64_t piece; /* all-reduce piece: MT_PIECE_FLOATS (mt_sharded.h) rounded to the shard alignment */
    MtRequest *pending[MT_DP_MAX_REQ];
    int npending;
    /* ZeRO-1: one unit's chunk of the reduced gradient */
    float *stage;
    int64_t stage_len;
    /* ZeRO-2 / FSDP: unit gradient buffers (0: embedding, 1: head, 2 and 3: blocks by parity) */
    float *ugrad[4];
    int64_t ugrad_len[4];
    MtRequest *ugrad_req[4];
    float *round_dst;
    float *rtmp[MT_MAX_TREE];
    int nrtmp;
    MtTreeStep *plan; /* the rounds' tree (mt_accum.h) */
    int nplan;
    MtWeights gview;
    float *leaf_loss; /* all M leaf losses */
    /* ZeRO's sharded state (mt_sharded.h): reductions, the norm's blocks, AdamW on the
     * chunks, FSDP's parameter slots (same grain as ugrad) */
    MtSharded sh;
    int backward;
    /* this step */
    double comm_s; /* time inside communication calls made from the step (exposed) */
} MtDp;

/* MT_EINPUT unless dp divides the step's micro-batches. */
MtStatus mt_dp_check(int dp, int microbatches);
void mt_dp_range(int microbatches, int dp, int dp_rank, int *lo, int *hi);
/* Whether a layout takes contiguous runs with full local gradients: DDP and ZeRO-1 always;
 * ZeRO-2 and FSDP unless they reduce round-robin (mt_accum_round_robin: accumulation blocks
 * of B = 1, and M/N a power of two or the fixed order not asked for), at the cost of
 * full-size gradient buffers. */
int mt_dp_contiguous(int zero, int det, int N, int microbatches, int B);
/* Sets the trainer configuration for N ranks and a ZeRO stage (padding, shard lengths,
 * tree span) before mt_trainer_init. */
void mt_dp_configure(MtTrainConfig *tc, int N, int S, int zero, int det);
/* After mt_trainer_init on the configured tc: buffers, hooks, and (FSDP) the parameter
 * shard's initialisation.  MT_ENOMEM on failure. */
MtStatus mt_dp_init(MtDp *dp, MtTrainer *tr, MtComm *c, const MtDpOptions *o);
void mt_dp_free(MtDp *dp);
/* One training step. */
void mt_dp_step(MtDp *dp, const MtTokens *data, MtStepStats *st);
/* The whole parameters and moments on every rank, into arrays of tr->nfloats floats
 * (collective): a tensor-parallel rank's replica check under ZeRO. */
void mt_dp_gather_state(MtDp *dp, float *params, float *m, float *v);

/* The pieces this rank writes of a checkpoint (mt_ckpt_par_write against tr->table):
 * DDP, dp rank 0 everything; ZeRO, the first copy's ranks their chunks of every unit,
 * from the shard (moments; FSDP's parameters) or from the whole array (ZeRO-1/2's
 * parameters).  With load set, what every rank reads of a checkpoint: the same chunks on
 * every copy (DDP: everything).  ctx: an MtDpPiece. */
typedef struct {
    const MtDp *dp;
    int moments; /* pieces of the moments (1) or of the parameters (0) */
    int load;    /* 1: a load's pieces, every copy's chunks (mt_ckpt_load_pieces) */
} MtDpPiece;
int64_t mt_dp_piece(void *ctx, int q, int k, int64_t *begin, int64_t *end);

/* Another technique's pieces (tensor parallelism's slices: offsets in the trainer's flat
 * arrays) cut to this rank's ZeRO chunk of each unit and placed in its shard: what a tp rank
 * under ZeRO writes (the first copy) or reads (load: every copy) of the sharded arrays.
 * ctx: an MtDpInner. */
typedef struct {
    const MtDp *dp;
    MtCkptPieces fn;
    void *ctx;
    int load;
} MtDpInner;
int64_t mt_dp_inner_piece(void *ctx, int q, int k, int64_t *begin, int64_t *end);

/* DDP for a technique that steps on its own (pipelines, mt_pipeline.h o.reduce): x (n
 * floats) summed over the dp group, in pieces, in the fixed order unless !det; ctx is an
 * MtDpSum.  comm_s gathers the seconds spent. */
typedef struct {
    MtComm *c;
    int det;
    double comm_s;
} MtDpSum;
void mt_dp_sum(void *ctx, float *x, int64_t n);

/* Bytes per memory category that the ZeRO stage adds to the trainer's arrays on a rank of
 * the shard group (rank shard_rank of S; N dp ranks), for tc as mt_dp_configure left it:
 * its unit gradient buffers, round trees and FSDP parameter slots, as mt_zero_init
 * allocates them (added into bytes; mt_plan.h). */
void mt_dp_plan(const MtTrainConfig *tc, int N, int S, int zero, int det, int shard_rank, int64_t bytes[MT_MEM_NCAT]);
/* Bytes a rank sends per step over its dp groups (dp, dp_shard, dp_replica: the log's
 * comm.dp) as the comm layer counts them, for tc as mt_dp_configure left it (P: its padded
 * floats; f_S = (S-1)/S):
 *   DDP: the gradient all-reduced, 2 f_N 4P, and the loss;
 *   ZeRO: each unit reduce-scattered, f_S 4P, per round (round-robin) or once (contiguous
 *   runs), then with hybrid sharding all-reduced over the copies; the norm's block sums
 *   (8 bytes per 512 floats of the shard, all-gathered); the leaf losses (round-robin) or
 *   the loss; ZeRO-1/2 the parameters all-gathered, f_S 4P; FSDP per micro-batch every
 *   unit gathered for the forward and the blocks again for the backward. */
int64_t mt_dp_plan_comm(const MtTrainConfig *tc, int N, int S, int zero, int det);

/* ---- between dp.c and zero.c (defined in zero.c: dp.c calls down into it, never up) ---- */
double mt_dp_clock(MtDp *dp, double since); /* adds now - since to comm_s; returns now */
void mt_dp_poll(MtDp *dp);
void mt_dp_wait(MtDp *dp, MtRequest *r);
void mt_zero_step(MtDp *dp, const MtTokens *data, MtStepStats *st);
void mt_zero_contiguous_finish(MtDp *dp, MtStepStats *st); /* after the local tree */
MtStatus mt_zero_init(MtDp *dp);
void mt_zero_free(MtDp *dp);

#endif
