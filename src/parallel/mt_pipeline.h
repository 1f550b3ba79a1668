/* mt_pipeline.h - model and pipeline parallelism: the executor of a schedule's action list.
 *
 * The pp group's P ranks each hold the units of their virtual stages (mt_schedule.h):
 * parameters, gradients and AdamW moments of those units only, laid out as the rank's
 * chunks back to back (chunk c = stage c P + rank).  One executor runs any list
 * (mt_schedule_build): forwards, backwards, W, and non-blocking sends and receives of
 * activations and their gradients between neighbouring stages on the pp group.  Receives
 * land in buffers posted one compute action early; every send goes from a copy, so no
 * buffer the step reuses waits for a peer.
 *
 * What makes it reproduce one device bit for bit:
 *  - each stage accumulates its micro-batch gradients in the accumulation order (the plan of
 *    mt_accum.h: K blocks, each left to right, the blocks as a pairwise tree), leaves in
 *    micro-batch order, each leaf computed into a zeroed buffer as one device computes it;
 *  - the tied embedding: the last rank holds a replica of wte.  It sums each
 *    accumulation block's LM-head parts H_k in a slot as they come (the first assigned,
 *    each later one computed apart and added); the first stage sums the block's
 *    embedding rows per token (MtEmbSum, mt_model.h) and sends them once, after the
 *    block's last backward (SEND_E: the block's distinct tokens, at most the rank's rows
 *    of wte, x C floats); at E the last rank adds them to the slot, and the block joins
 *    the wte tree over the copy's blocks: the order of mt_accum.h, as one device sums it.
 *    Up to nh blocks await their rows at once: one at the default, where each copy of
 *    the pipeline is one block (and its slot is the tree's result).  With blocks of one
 *    micro-batch and nh >= 2 the rank keeps, instead of nh H_k, either their operands
 *    (dlogits and ln_f output, mt_model_head_keep_floats) where those take fewer bytes, or
 *    only ln_f's output and recomputes their logits at E (one more logits product):
 *    MT_PIPE_HEAD_* below, pipe_head in pipe_internal.h; H_k is then computed at its E
 *    into one slot (the same products, the same bits).  At the end of the step the final
 *    wte gradient goes to the first stage (embed group), so both copies see the same
 *    gradient and take the same AdamW step;
 *  - the gradient norm: every rank's 512-float block sums are all-gathered over the pp
 *    group and added unit by unit, blocks in order: the single-device order.  The step's
 *    loss (the tree over the last stage's micro-batch losses) rides along.
 *
 * With copies over dp (o.reduce), each copy's leaves are a contiguous run of the step's
 * micro-batches: a whole subtree when the copies are a power of two dividing them, so the
 * reduced sums are the single-device ones.  The reduction waits for the copy's last
 * backward (no overlap with it yet).
 *
 * Memory per rank: its stages' parameters, gradients (one buffer plus ceil(log2 M) tree
 * temporaries), moments (ZeRO over copies: see MtPipeOptions); the activation sets, one
 * pool per shape of chunk (as many blocks, the same ends: a rank's chunks share one), as
 * many as its list holds of those chunks at once (mt_schedule_pool_sets), plus one layer's
 * backward scratch; on the last rank the
 * wte replica, its moments, its tree and the blocks' head sums awaiting their rows
 * (mt_schedule_peak_wte); on the first the block's embedding rows; landing and send
 * buffers (category other).
 */
#ifndef MT_PIPELINE_H
#define MT_PIPELINE_H

#include "mt_checkpoint.h"
#include "mt_comm.h"
#include "mt_schedule.h"
#include "mt_shard.h"
#include "mt_sharded.h"
#include "mt_train.h"

#define MT_PIPE_MAX_CHUNKS 8

typedef struct {
    int kind;                /* MtSchedKind */
    int M;                   /* micro-batches per step */
    int V;                   /* chunks per rank (interleaved) */
    int stage_layers[MT_MAX_STAGES]; /* blocks per virtual stage (filled by mt_pipe_check) */
    int given;               /* stage_layers came from --stage-layers */
    int head_recompute;      /* --head-recompute: the last stage may recompute its awaiting micro-batches'
                              * logits rather than keep their H_k (pipe_head) */
    int ltr_stage;           /* test hook (mt_testhooks.h): stage ltr_stage - 1 sums its micro-batches
                              * left to right, an order the equivalence test must catch; 0: none */
    /* Data parallelism over copies of this pipeline (--dp with --pp): the copy's j-th
     * micro-batch is the step's first_mb + j mb_stride (a contiguous run with stride 1;
     * round-robin over the copies with stride D), and reduce sums a gradient span and the
     * loss over the copies in a fixed order after its last backward; NULL: one copy. */
    int first_mb, mb_stride;
    void (*reduce)(void *ctx, float *x, int64_t n);
    void *reduce_ctx;
    /* ZeRO over the copies (--zero 1-3 with --dp D, mt_pipe_dp_options): zero_dp = D (0:
     * off), zero the stage, zero_shard S the ranks of a sharded copy (hybrid sharding; D
     * without it), det the fixed-order reductions.  The units of the rank are padded to
     * S x 512 floats (mt_shard.h) and sharded over its dp_shard group:
     *  - ZeRO-1, and ZeRO-2/3 with contiguous runs (mb_stride 1): the copy sums its leaves
     *    as a whole tree, each unit is reduce-scattered after its last backward;
     *  - ZeRO-2/3 round-robin (mb_stride D): each leaf (a micro-batch's gradient of a
     *    chunk) is reduce-scattered as soon as it is complete, the round's D leaves being a
     *    subtree, and the rounds' shards are summed as the tree over rounds: no whole-stage
     *    tree is kept (one leaf buffer);
     *  - FSDP (3): the parameters too; each unit is all-gathered into a slot before a pass
     *    uses it (the next one prefetched) and stays there until the slot is needed for
     *    another unit or the step ends.
     * With hybrid sharding each reduced shard is then summed over the dp_replica group.
     * The wte replica on the last rank stays whole (summed over dp as DDP; round-robin: per
     * round, at its E).  AdamW runs on the chunks; ZeRO-1/2 all-gather the parameters. */
    int zero_dp, zero, zero_shard, det;
    /* --post-validate (Zero Bubble's optimizer post-validation): each rank updates its stage
     * as soon as its step's compute ends, as if the global norm needs no clipping: it keeps
     * its parameters and the step's gradient (8 bytes per parameter), writes the update's
     * parameters only (the moments left), and starts the next step; the norm, gathered
     * meanwhile, is checked after that next step's compute.  Where it holds the moments are
     * written from the kept gradient (together one AdamW step's bits); where it had to clip
     * (or is not finite) the kept parameters and gradient go back, the update is made with
     * the norm, and the next step's compute runs again: every rank decides alike.  No rank
     * waits for the others between steps, so one step's warm-up overlaps the last one's
     * cool-down; the step's loss and norm are known a step late (mt_pipe_flush).  Needs an
     * untied head (a tied wte's gradient crosses the step) and no ZeRO over copies. */
    int post_validate;
} MtPipeOptions;

/* Fills o's data-parallel fields for copy dp_rank of dp (o->M: the copy's micro-batches; B
 * the accumulation block): round-robin for ZeRO-2/3 as mt_accum_round_robin decides. */
void mt_pipe_dp_options(MtPipeOptions *o, int dp, int dp_rank, int zero, int shard, int det, int B);

typedef struct {
    int stage, l0, l1, embed, head;
    int64_t lo, hi;          /* flat span of its units */
    int64_t loff;            /* where the span starts in the rank's arrays */
    int64_t skip;            /* leading floats whose gradient is not summed here (wte on stage 0) */
    MtActs *sets;            /* views of its pool's sets (the owner's own where pool is this chunk) */
    int pool;                /* the rank's chunk that owns the pool (chunks of one shape share one) */
    int nsets, nfree;        /* the pool's sets; free ones (the owner's count) */
    int *freelist, *slot;    /* the owner's free set indices; micro-batch -> set */
    float **stash;           /* per set, split schedules: what W needs from B (the owner's) */
    int tstep;               /* position in the tree plan */
    int zu0, zu1;            /* ZeRO over copies: its units in the shard map [zu0, zu1) */
    const MtTreeStep *plan;  /* the canonical plan (or the test hook's left-to-right one) */
} MtPipeChunk;

typedef struct {
    MtTrainer *tr;
    MtComm *c;
    MtPipeOptions o;
    MtSchedule sched;
    int P, rank, S, V;
    MtAction *list;
    int nlist;
    MtPipeChunk ch[MT_PIPE_MAX_CHUNKS];
    int unit_rank[MT_MAX_LAYERS + 2];   /* owner of each unit */
    int64_t unit_block[MT_MAX_LAYERS + 2]; /* its first norm block in the owner's block list */
    int64_t max_blocks;                 /* most norm blocks any rank owns */
    MtTreeStep *plan, *ltr;
    int nplan;
    float *gbuf[MT_MAX_TREE + 1];       /* 0: tr->grads, d + 1: tree temporary d (the leaf buffer: NULL when unit by unit) */
    int ngbuf;
    float *ubuf;                        /* the leaf buffer unit by unit: the rank's largest unit (NULL: whole) */
    int apart;                          /* the leaf being computed goes through ubuf */
    MtActs scratch;
    MtWeights w;                        /* views of this rank's parameters (wte: the replica on the last rank) */
    /* transfers */
    float **land;
    MtRequest **land_req;
    int *land_key, nland;
    float **sendb;
    MtRequest **send_req;
    int nsend, send_next;
    /* the tied embedding (pipe_head.c): accumulation blocks of blk micro-batches */
    int blk;
    int64_t ecap;                       /* floats of a block's embedding rows as they travel */
    MtEmbSum esum;                      /* first rank: the block's rows; last rank: its tokens only */
    float **esend;                      /* first rank: the rows on their way (SEND_E), nesend buffers */
    MtRequest **esend_req;              /* block b's from buffer b mod nesend */
    int nesend;
    /* the last rank: the wte replica, its tree over the copy's blocks, the blocks' head sums */
    float *wte, *wte_m, *wte_v, *wbuf[MT_MAX_TREE + 1];
    int nwbuf;
    MtTreeStep *wplan;
    int nwplan;
    float **hslot, **eland;
    float *hleaf;                       /* a block's later micro-batch's head part, then added (blk > 1) */
    float **keep;                       /* KEEP, REDO: per awaiting micro-batch, what H_k needs */
    float *redo;                        /* REDO: one row block's logits (mt_model_head_redo_floats) */
    MtRequest **ereq;
    int *h_mb, *e_posted, nh, wtstep, e_next, e_due; /* h_mb: the block each slot sums, or -1 */
    int defer;                          /* MT_PIPE_HEAD_*: KEEP and REDO compute H_k at its E (one H slot) */
    float *leaf_loss;
    float loss;                         /* the last rank's: the step's (over the copies) */
    double *block_sums;                 /* (max_blocks + 1) x P */
    double *tparts;                     /* with --tp: the norm's per-tensor parts (tp_norm_and_loss) */
    /* ZeRO over copies: the rank's units in its arrays, sharded over dp_shard; the reduced
     * gradient's chunks, their block sums (this rank's, every dp rank's) */
    MtShardMap zmap;
    int zunit[MT_MAX_UNITS];            /* the model unit of each of the map's units */
    float *zstage;                      /* contiguous runs: a unit's reduced chunk on its way */
    int64_t zstage_len;
    double *zblocks;
    int zidx[MT_MAX_UNITS];             /* model unit -> index in zmap (-1: not here) */
    float *sbuf[MT_MAX_TREE + 1];       /* round-robin: the tree over rounds (0: the reduced chunks) */
    int nsbuf;
    float *loss_all;                    /* round-robin, last rank: every copy's leaf losses */
    MtSharded zsh;                      /* the sharded state (mt_sharded.h): reductions, norm blocks,
                                         * AdamW on the chunks, FSDP's unit slots */
    int64_t *rank_times;                /* the ranks' compute time and span, gathered */
    /* this step, for the log */
    double comm_s, busy_s, t_first, t_last;
    double kind_s[MT_PIPE_MAX_CHUNKS][3]; /* compute seconds of F, B, W per chunk, over the run's */
    int kind_n[MT_PIPE_MAX_CHUNKS][3];    /* steps after the first (all when it has only one) */
    int steps_run;
    double bubble;                      /* measured (on world rank 0, after mt_pipe_step) */
    /* post-validation: the gathers of two steps (slot pv_parity: this step's), what the
     * pending update keeps (the parameters before it, its gradient) and its lr and step */
    double *pv_all[2];
    MtRequest *pv_req[2];
    float *pv_save;
    int pv_parity, pv_pending;
    float pv_lr;
    int64_t pv_step, pv_rollbacks;      /* rollbacks: updates made again (their step's next ran twice) */
} MtPipe;

/* Checks the pipeline layout (stage cuts, schedule, M) before any rank starts: MT_EINPUT
 * with one line.  given: P V blocks per stage or NULL; fills o->stage_layers. */
MtStatus mt_pipe_check(MtPipeOptions *o, const MtConfig *cfg, int P, const int *given, int ngiven);
/* Sets tc for this rank's share (lengths of its arrays; no whole-model activations). */
void mt_pipe_configure(MtTrainConfig *tc, const MtPipeOptions *o, int P, int rank);
/* After mt_trainer_init on the configured tc: the list, sets, buffers, views, and the
 * initialisation of this rank's parameters.  MT_ENOMEM on failure. */
MtStatus mt_pipe_init(MtPipe *p, MtTrainer *tr, MtComm *c, const MtPipeOptions *o);
void mt_pipe_free(MtPipe *p);
void mt_pipe_step(MtPipe *p, const MtTokens *data, MtStepStats *st);
/* Post-validation: the pending step checked now (its update made again where it clipped),
 * its stats into st; 1 if there was one.  Before an evaluation, a save or the end. */
int mt_pipe_flush(MtPipe *p, MtStepStats *st);
/* The loss sums of windows [lo, hi) (mt_trainer_eval_windows, mt_train.h), forward through
 * the stages in `passes` passes; every stage gets them from the last.  Collective over pp. */
void mt_pipe_eval_windows(MtPipe *p, const MtTokens *data, int64_t lo, int64_t hi, int passes, double *sums);
/* The pieces this rank writes of a checkpoint (mt_ckpt_par_write; ctx: the MtPipe): every
 * tensor of the units it owns, whole, from its arrays (the same offset in params, m, v). */
int64_t mt_pipe_piece(void *ctx, int q, int k, int64_t *begin, int64_t *end);
/* Reads this rank's parts (its stages; the last rank also the wte replica) of a
 * checkpoint of any layout, and nothing else.  With another technique inside the stages
 * (tensor parallelism), fn names its pieces (offsets in the trainer's table layout) and
 * whole is the checkpoint's table; else both NULL. */
MtStatus mt_pipe_load(MtPipe *p, const char *dir, const MtParam *whole, MtCkptPieces fn, void *ctx);
/* The stage's whole parameters and AdamW moments, laid out as its arrays (the whole
 * stage's floats each): with ZeRO gathered over dp (collective), else copied. */
void mt_pipe_gather_state(MtPipe *p, float *params, float *m, float *v);
/* Floats of the stage's whole arrays (params_len without FSDP). */
int64_t mt_pipe_stage_floats(const MtPipe *p);
/* With ZeRO over copies: the pieces of the sharded arrays (moments; FSDP's parameters)
 * this rank holds (its chunks of its units), at their offsets in the shard. */
int64_t mt_pipe_shard_piece(void *ctx, int q, int k, int64_t *begin, int64_t *end);
/* fn's pieces (ctx) of the tensors this rank owns, moved to its arrays (replica: of the
 * last rank's wte replica instead): what a stage writes or reads with tensor parallelism
 * inside.  ctx: an MtPipeInner. */
typedef struct {
    const MtPipe *p;
    MtCkptPieces fn;
    void *ctx;
    int replica;
    int shard; /* ZeRO: the part of each piece in this rank's chunk, placed in its shard */
} MtPipeInner;
int64_t mt_pipe_inner_piece(void *ctx, int q, int k, int64_t *begin, int64_t *end);
/* Bytes per memory category the executor adds to the trainer's arrays on pipeline rank
 * `rank` (dp_rank: its rank in the dp_shard group), for tc as mt_pipe_configure left it: the tree's
 * temporaries, the last rank's wte replica with its moments, tree and H_k slots, ZeRO's
 * gradient chunks, as mt_pipe_init allocates them (added into bytes; mt_plan.h). */
/* How the last rank holds the head's gradients of the micro-batches awaiting their rows:
 * SLOTS each its H_k; KEEP each its dlogits and ln_f output; REDO each its ln_f output,
 * the logits recomputed at E (see the tied embedding above). */
enum { MT_PIPE_HEAD_SLOTS, MT_PIPE_HEAD_KEEP, MT_PIPE_HEAD_REDO };
/* The last rank's tied head: how many micro-batches' H_k await their rows at once (0 on
 * the other ranks), and how it holds them (*defer: MT_PIPE_HEAD_*). */
int mt_pipe_plan_head(const MtTrainConfig *tc, const MtPipeOptions *o, int P, int rank, int *defer);
void mt_pipe_plan(const MtTrainConfig *tc, const MtPipeOptions *o, int P, int rank, int dp_rank,
                  int64_t bytes[MT_MEM_NCAT]);
/* Bytes pipeline rank `rank` sends per step, as the comm layer counts them, into bytes
 * {dp, tp, pp} (the log's comm; pp with the embed group), for tc as mt_pipe_configure left
 * it, dp copies of the pipeline: its list's sends (activations and their gradients, the
 * embedding's rows), the final wte gradient, the norm's block sums over pp; tp's passes of
 * its units per micro-batch and tp's norm parts; over dp, DDP's sums of its spans or ZeRO's
 * reduce-scatters (per leaf when round-robin), the wte replica's and the loss's sums, the
 * norm's chunk block sums, ZeRO-1/2's parameter all-gather or FSDP's unit gathers as its
 * slots take them along the list.  Pure. */
void mt_pipe_plan_comm(const MtTrainConfig *tc, const MtPipeOptions *o, int P, int rank, int dp, int64_t bytes[3]);
/* World rank of pipeline rank r of the first copy (the mesh puts pp slowest: the world's
 * ranks are P runs of world / P). */
int mt_pipe_world_rank(const MtPipe *p, int r);
/* Floats of the stash for W of one activation set of chunk c (split schedules; else 0). */
int64_t mt_pipe_stash_floats(const MtPipe *p, int c);

#endif
