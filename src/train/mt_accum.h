/* mt_accum.h - the accumulation order: how a step's micro-batch gradients (and losses) are
 * summed, as a plan that every technique runs (the trainer, data parallelism, ZeRO, pipeline
 * stages, tensor-parallel ranks).  Pure: integers and float arrays, no ranks.
 *
 * A step's M micro-batches (the leaves, in the order of the samples) are cut into K
 * contiguous blocks of B = M / K (--accum-blocks K, K dividing M):
 *   - inside a block the leaves are added left to right: the first is assigned to the
 *     block's buffer, each later one is computed into the leaf buffer and then added (BLIS
 *     splits the inner dimension of a product, so accumulating in place with beta = 1 would
 *     be another sum);
 *   - the tied embedding's wte is the one exception to "each leaf whole": a leaf holds the
 *     LM head's part only, and the rows that reach the token embedding are summed per
 *     token over the whole block and added to the block's sum at its end (MtEmbSum,
 *     mt_model.h), so that a pipeline's last rank never waits on the first;
 *   - the K block sums form the balanced pairwise tree over the block index:
 *       S(lo, hi) = block lo                      if hi - lo == 1
 *                 = S(lo, mid) + S(mid, hi),  mid = lo + (hi - lo) / 2   otherwise,
 *     evaluated depth first, the left sum in the caller's buffer and the right one in a
 *     temporary of its depth.
 * K = M (B = 1) is the full pairwise tree; K = 1 is PyTorch's, Megatron's and DeepSpeed's
 * order (one buffer, left to right).  Memory: the sum, ceil(log2 K) tree temporaries and,
 * when B > 1, the leaf buffer.
 *
 * Which layouts give one device's bits.  A rank (or a copy of a pipeline) that owns whole
 * blocks forming a subtree sums them with the same plan over its own leaves, and the
 * fixed-order reductions over ranks (a tree over group ranks) form the upper levels.  So a
 * layout with D data-parallel ranks (D dividing K, a power of two or equal to K) reproduces one device run
 * with the same K.  The default K (mt_accum_default) is the data-parallel width D: each
 * rank sums its contiguous run left to right, DDP's memory (the gradient and one leaf
 * buffer), and one device reproduces it with --accum-blocks D.
 *
 * ZeRO-2 and FSDP over data parallelism keep only a shard of the gradient; with B = 1 they
 * reduce-scatter every leaf as it finishes (round j gives rank r micro-batch j D + r; the
 * round's D leaves are a subtree of the full tree when M / D is a power of two) and sum the
 * rounds' shards as the tree over rounds, holding ceil(log2(M / D)) shards.  That is K = M,
 * their default.  With B > 1 (an order summed left to right inside blocks) a leaf cannot be
 * reduced before its block is complete, so they take contiguous runs and hold the whole
 * gradient until the end of the step, as ZeRO-1 does: exact, at ZeRO-1's gradient memory.
 * The dual order (a tree over the D ranks inside each round, the rounds added left to right)
 * would keep shards at any M but is a third order that no --accum-blocks K reproduces on
 * one device; it is not built.
 */
#ifndef MT_ACCUM_H
#define MT_ACCUM_H

#include <stdint.h>

/* ceil(log2 n) for n >= 1: the depth of the pairwise tree over n leaves */
int mt_accum_depth(int n);
/* B = M / K, the leaves per block (K = 0: one block per leaf, B = 1) */
int mt_accum_block(int M, int K);
/* The buffers beside the sum that summing `span` leaves in blocks of B needs:
 * ceil(log2(span / B)) + (B > 1); 0 for a span of one leaf. */
int mt_accum_buffers(int span, int B);
/* The default K for D data-parallel ranks (or pipeline copies) over M micro-batches:
 * M (recorded as 0) where ZeRO-2/3 reduce round-robin (mt_accum_round_robin at B = 1),
 * else D. */
int mt_accum_default(int D, int zero, int det, int M);
/* Whether ZeRO-2/3 over D ranks reduce each leaf as it finishes (round-robin) rather than
 * taking contiguous runs: only with B = 1, and when that is exact (M / D a power of two) or
 * the fixed order was not asked for. */
int mt_accum_round_robin(int D, int zero, int det, int M, int B);

/* ---- the plan ----
 * The order over M leaves in blocks of B as steps: a leaf is written into buffer buf (0 =
 * the result, d + 1 = tree temporary d, 1 + ceil(log2(M / B)) = the leaf buffer); an add
 * sums buffer src into buffer dst; a block's end marks its sum complete in buffer buf,
 * before the tree adds it (there the executor adds the token embedding's rows of the block,
 * MtEmbSum in mt_model.h).  Leaves come in order 0 .. M-1; the steps listed after leaf k
 * are those due before leaf k + 1. */
typedef struct {
    int leaf; /* >= 0: leaf index; -1: an add; MT_TREE_END: a block's end */
    int buf;  /* leaf: its buffer; add: dst; end: the block's sum */
    int src;  /* add: src; end: the block's index */
} MtTreeStep;
#define MT_TREE_END (-2)
#define MT_TREE_MAX_BUFS 34 /* buffers a plan of up to 2^32 leaves can name */

/* Steps a plan of M leaves may hold (leaves, adds and block ends): the size of its array. */
int mt_tree_plan_max(int M);
/* Fills steps (at most mt_tree_plan_max(M)) for M leaves in blocks of B (B divides M);
 * returns their number. */
int mt_tree_plan_blocks(int M, int B, MtTreeStep *steps);
int mt_tree_plan(int M, MtTreeStep *steps); /* B = 1 */
/* Buffers the plan uses beside the result: ceil(log2(M / B)) + (B > 1). */
int mt_tree_temps_blocks(int M, int B);
int mt_tree_temps(int M);
/* What an executor does at a block's end, on elements [off, off + n) of the block's sum
 * (NULL, or fn NULL: nothing). */
typedef struct {
    void (*fn)(void *ctx, float *sum, int64_t off, int64_t n);
    void *ctx;
} MtAccumEnd;
/* The executor: the leaf at step `at` is in its buffer; runs the steps that follow it on
 * elements [off, off + n) of bufs (indexed by the plan's buffer numbers) and returns the
 * position of the next leaf (or nsteps).  A technique that finishes a leaf unit by unit
 * calls it once per unit with the unit's span and the same `at`. */
int mt_accum_adds(const MtTreeStep *steps, int nsteps, int at, float *const *bufs, int64_t off, int64_t n,
                  const MtAccumEnd *end);
/* The plan's steps run on one float per leaf: the step's loss, summed exactly as its
 * gradients are. */
float mt_tree_plan_sum(const MtTreeStep *steps, int n, const float *x);
/* The full pairwise tree (B = 1) over x[0 .. n-1], n >= 1. */
float mt_accum_tree_sum(const float *x, int n);

#endif
