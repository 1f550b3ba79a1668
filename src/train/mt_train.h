/* mt_train.h - one device's training state and step.
 *
 * Accumulation.  A step's global batch of `batch` sequences is cut into M = batch / micro
 * micro-batches of `micro` sequences, micro-batch k holding samples [k*micro, (k+1)*micro).
 * The step's gradient (and loss) is the sum of the micro-batch gradients (losses), each
 * already divided by the number of tokens in the whole step, in the order of mt_accum.h:
 * K blocks (tc.accum_blocks; 0 is K = M), each left to right, the blocks as the balanced
 * pairwise tree.  The trainer runs that plan over its leaves (all M, or a data-parallel
 * rank's run of whole blocks).
 */
#ifndef MT_TRAIN_H
#define MT_TRAIN_H

#include "mt_accum.h"
#include "mt_data.h"
#include "mt_mem.h"
#include "mt_model.h"
#include "mt_optim.h"

typedef struct {
    MtConfig cfg;
    MtOptimConfig oc;
    int batch;     /* sequences per step (global) */
    int micro;     /* sequences per micro-batch */
    int seq;       /* training sequence length, <= cfg.T */
    int threads;
    uint64_t seed;
    int tree_span;            /* most micro-batches one call sums (a dp rank's share); 0: all */
    int accum_blocks;         /* K blocks of the step's micro-batches (header); 0: K = M, one per leaf */
    int64_t unit_align;       /* units padded to a multiple of this (mt_param_table_aligned); 0: 1 */
    /* Sharded data parallelism: floats allocated for the parameters, the gradient (and each
     * tree buffer) and each AdamW moment; 0 means the whole flat array.  With a sharded
     * parameter array the trainer initialises nothing (the technique initialises its shard). */
    int64_t params_len, grads_len, optim_len;
    int acts_none;            /* the technique allocates activations (pipeline stages): no whole-model set */
    int inference;            /* eval and sample: parameters and activations only (no gradients, no moments) */
    int recompute;            /* MT_RECOMPUTE_NONE, _ATTN or _FULL (mt_model.h) */
    int64_t fail_alloc_after; /* tests: > 0 makes that allocation (1-based) fail; 0 never */
    int test_nan_step;        /* tests: > 0 puts a NaN into that step's (1-based) gradient before its norm */
    /* Tensor parallelism (mt_tp.h): the trainer holds this rank's slices (mt_tp_local_table,
     * each initialised alone by mt_tp_init_slice) and its activations carry the context.
     * The norm is the technique's (mt_trainer_apply).  NULL: the whole model. */
    const struct MtTpCtx *tp;
    /* The tokenizer every checkpoint carries (a path mt_bpe_load reads; NULL: byte-level). */
    const char *tokenizer;
} MtTrainConfig;

#define MT_MAX_TREE 32

typedef struct {
    MtTrainConfig tc;
    MtMem mem;
    int nparams;
    MtParam *table;
    int64_t nfloats;
    float *params, *grads, *m, *v; /* flat, laid out like the table */
    float *gtmp[MT_MAX_TREE];      /* tree accumulation buffers */
    int ntmp;
    float *ubuf[2];                /* a block's later leaves, unit by unit before each unit is added
                                    * (B > 1): the embedding unit's, the largest other unit's */
    int64_t ulen[2];
    MtWeights lview;               /* such a leaf's gradient views, re-pointed unit by unit */
    int lstep, lspine;             /* its add in the plan; whether it ends the range (the technique's hooks) */
    MtEmbSum esum;                 /* the block's token-embedding rows (mt_model.h), added to the
                                    * block's wte at its end (not with acts_none: the technique's) */
    int blk;                       /* B: micro-batches per accumulation block */
    int span;                      /* most micro-batches one call sums (tc.tree_span, or M); 1: the
                                    * technique keeps its own tree (no tree or leaf buffers here) */
    MtWeights w;
    MtActs acts;
    int32_t *inputs, *targets;     /* one global batch (batch x seq each), on the device */
    int32_t *host_inputs, *host_targets; /* the same, filled on the host (mt_trainer_fill; the
                                    * device arrays themselves where the device is host memory) */
    float *host_losses;            /* a micro-batch's token losses, read on the host (evaluation) */
    int64_t unit_lo[MT_MAX_LAYERS + 2], unit_hi[MT_MAX_LAYERS + 2]; /* padded unit spans */
    int64_t unit_end[MT_MAX_LAYERS + 2]; /* where each unit's tensors end (its padding begins) */
    int nunits;
    MtUnitHooks hooks;             /* seen by forward passes, and by the last leaf's backward */
    MtTreeStep *plan;              /* the accumulation plan of plan_leaves leaves (mt_accum.h) */
    float *plan_loss;              /* its leaves' losses */
    int nplan, plan_leaves, plan_last; /* its steps, leaves, the last leaf's step */
    float *bufs[MT_TREE_MAX_BUFS]; /* the plan's buffers this call: the sum, gtmp (the leaf buffer: ubuf) */
    /* the gradient's sum of squares for mt_trainer_update: set by a technique whose tensors
     * are split over ranks (tensor parallelism); NULL: mt_grad_sumsq over the table */
    double (*sumsq)(void *ctx);
    /* the same from the gradient's sums of squares in blocks of MT_NORM_BLOCK from the flat
     * array's first element (a technique that shards the gradient, ZeRO); NULL: the blocks
     * added in order */
    double (*sumsq_blocks)(void *ctx, const double *blocks);
    void *sumsq_ctx;
    int64_t step;                  /* steps completed */
} MtTrainer;

typedef struct {
    float loss, grad_norm, lr;
    int64_t step; /* the step these are of (an engine that reports a step late: 0, none yet) */
} MtStepStats;

/* The trainer's table for tc (offsets into its flat arrays, units padded to unit_align; a
 * tensor-parallel rank's slices): returns the floats of the flat arrays. */
int64_t mt_trainer_table(const MtTrainConfig *tc, MtParam *table);
/* The padded span [lo[u], hi[u]) of every unit (cfg.L + 2 of them) in the flat arrays of
 * that table; returns the floats of its first tensor (wte, or a tp rank's rows of it). */
int64_t mt_trainer_spans(const MtTrainConfig *tc, int64_t *lo, int64_t *hi);
/* Elements [a, b) of the trainer's tensor p as initialisation gives them, into dst (a
 * technique that holds a shard of the parameters initialises it). */
void mt_trainer_param_init(const MtTrainer *tr, int p, int64_t a, int64_t b, float *dst);
/* The shape of the trainer's whole-model activation set for tc (unless tc->acts_none). */
MtActsShape mt_trainer_acts_shape(const MtTrainConfig *tc);
/* Checks tc (MT_EINPUT, one line), then allocates everything and initialises the
 * parameters from tc->seed.  On failure the trainer is freed. */
MtStatus mt_trainer_init(MtTrainer *tr, const MtTrainConfig *tc);
void mt_trainer_free(MtTrainer *tr);
/* Loss and gradient (into tr->grads) of the global batch in tr->inputs / tr->targets,
 * in the accumulation order.  Returns the loss. */
float mt_trainer_forward_backward(MtTrainer *tr);
/* Micro-batches per accumulation block, B = M / K (mt_accum.h). */
int mt_accum_block_size(const MtTrainConfig *tc);
/* The rank's rows of wte: the first token and how many (a tensor-parallel rank's slice). */
int64_t mt_trainer_vocab_first(const MtTrainConfig *tc);
int64_t mt_trainer_vocab_rows(const MtTrainConfig *tc);
/* Floats of one accumulation block's embedding rows (MtEmbSum: the block's distinct tokens,
 * at most the rank's rows of wte, times C); _floats: those the trainer holds (0 for
 * inference and for a technique that sums them itself, acts_none). */
int64_t mt_trainer_esum_block_floats(const MtTrainConfig *tc);
/* Floats of the leaf buffers the trainer holds for tc: a block's later leaves are computed
 * unit by unit, [0] the embedding unit's, [1] the largest other unit's (0, 0: blocks of
 * one leaf, or a technique that keeps its own tree). */
void mt_trainer_leaf_lens(const MtTrainConfig *tc, int64_t len[2]);
int64_t mt_trainer_esum_floats(const MtTrainConfig *tc);
/* The same over micro-batches [lo, hi) only (whole blocks; a data-parallel rank's share,
 * summed by the plan over its own hi - lo leaves); loss and gradient still divided by the tokens of the whole step.
 * With tr->hooks set, the backward of the range's last micro-batch reports each unit's
 * GRADS_DONE after the plan's last adds are done on that unit: from then on the
 * unit's span of tr->grads holds its final sum (gradient buckets start there). */
float mt_trainer_forward_backward_range(MtTrainer *tr, int lo, int hi);
/* Gradient (into gbuf, overwritten) and loss of micro-batch k alone, both divided by the
 * tokens of the whole step: a block of one leaf (its embedding rows added to wte). */
float mt_trainer_micro_grad(MtTrainer *tr, int k, float *gbuf);
/* The same into gradient views g (which the caller zeroed, and hooks may re-point), with
 * the unit hooks h seeing the forward and backward; the embedding's rows go to g->esum
 * when set (indexed here with the micro-batch's tokens). */
float mt_trainer_micro_grad_views(MtTrainer *tr, int k, const MtWeights *g, const MtUnitHooks *h);
/* Clip (the norm from tr->sumsq when set), AdamW, step += 1. */
void mt_trainer_update(MtTrainer *tr, MtStepStats *st);
/* The same with the gradient norm given (a technique that sums it over ranks). */
void mt_trainer_apply(MtTrainer *tr, double norm, MtStepStats *st);
/* Rows [first, first + rows) of the step's batch (mt_batch_fill) into the host arrays at
 * row `at`, then onto the device: the one way tokens reach tr->inputs / tr->targets. */
void mt_trainer_fill(MtTrainer *tr, const MtTokens *data, int64_t first, int64_t rows, int64_t at);
/* Elements [at, at + n) of the host token arrays onto the device. */
void mt_trainer_upload_tokens(MtTrainer *tr, int64_t at, int64_t n);
/* The token losses of a forward pass (n floats, device) where the host reads them. */
const float *mt_trainer_host_losses(MtTrainer *tr, const float *losses, int64_t n);
/* Fetches the step's batch from data and runs forward_backward + update. */
void mt_trainer_step(MtTrainer *tr, const MtTokens *data, MtStepStats *st);
/* ---- evaluation: a validation loss that does not depend on the layout ----
 * Window i of a token file: inputs tok[iT .. iT+T-1], targets one further (T = tc.seq).
 * Its loss sum is its T token losses added in double in position order; the mean over n
 * windows is their sums added in window order (double), divided by n T.  A token's loss does
 * not depend on the other rows of its forward pass (row-invariant products, per-row
 * kernels), so neither the micro-batch size nor the ranks that evaluate the windows change a
 * bit of the result. */

/* Rank r of D's share of n windows: [*lo, *hi), cut in shares of s = ceil(n / D) (the last
 * ranks' may be short or empty), evaluated in *passes forward passes of at most micro
 * windows: ceil(s / micro), the same on every rank (a forward that gathers parameters,
 * FSDP, must be called as often on each).  Returns s. */
int64_t mt_eval_share(int64_t n, int D, int r, int micro, int64_t *lo, int64_t *hi, int *passes);
/* Pass j of windows [lo, hi) into tr->inputs / tr->targets: returns how many rows it has
 * (at most a micro-batch); *real receives how many are windows of the range (0: window 0
 * stands in, for a rank whose share ran out, and its loss is dropped). */
int mt_trainer_eval_pass(MtTrainer *tr, const MtTokens *data, int64_t lo, int64_t hi, int j, int *real);
/* The loss sums of n windows from their token losses (n x T floats) into sums. */
void mt_eval_window_sums(const float *losses, int n, int T, double *sums);
/* The mean loss of n windows from their sums (window order, double): 0 when n is 0. */
double mt_eval_mean(const double *sums, int64_t n, int T);
/* The loss sums of windows [lo, hi) into sums[0 .. hi-lo), in `passes` forward passes
 * (>= those the range needs; see mt_eval_share). */
void mt_trainer_eval_windows(MtTrainer *tr, const MtTokens *data, int64_t lo, int64_t hi, int passes, double *sums);
/* Mean loss over windows 0 .. nwin-1 on this rank alone: the same bits as any layout's. */
double mt_trainer_eval(MtTrainer *tr, const MtTokens *data, int64_t nwin);

#endif
