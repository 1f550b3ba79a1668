/* mt_tp.h - tensor parallelism: how each parameter is split over a tp group of N ranks,
 * and each rank's share of the split products, as pure arithmetic (no MPI; the engine that
 * runs it over a communicator is mt_tpe.h).
 *
 * Megatron's splits, in the Hugging Face Conv1D layout (weights [in, out], y = x W + b):
 *   MT_TP_COLUMNS  mlp.c_fc (weight and bias): rank r holds output columns
 *                  [r OC/N, (r+1) OC/N);
 *   MT_TP_HEADS    attn.c_attn (weight and bias): the q, k and v columns of heads
 *                  [r NH/N, (r+1) NH/N), three ranges of C/N columns at 0, C and 2C,
 *                  held side by side (q | k | v) so the local attention reads them as
 *                  the whole model reads its [3C] rows;
 *   MT_TP_ROWS     attn.c_proj and mlp.c_proj weights: input rows [r K/N, (r+1) K/N);
 *   MT_TP_VOCAB    wte: rows [r Vp/N, (r+1) Vp/N) of the vocabulary padded to Vp (the
 *                  caller's multiple of N); rows >= V are padding, zero in the slice and
 *                  never saved;
 *   MT_TP_REPLICATED  wpe, every LayerNorm, and the row-parallel biases (added once,
 *                  after the partial products are summed).
 *
 * A rank's slice is a list of runs: run k takes the full tensor's flat (row-major) elements
 * [begin, end) to the slice's elements [at, at + end - begin).  Worked example, C = 4,
 * NH = 2, N = 2, rank 1 of attn.c_attn.weight [4, 12]: per row i, q columns 2-3, k columns
 * 6-7, v columns 10-11, so run 3i + j is [12i + 4j + 2, 12i + 4j + 4) at 6i + 2j (a [4, 6]
 * slice: its q | k | v of head 1).
 */
#ifndef MT_TP_H
#define MT_TP_H

#include <stdint.h>

#include "mt_core.h"
#include "mt_model.h"

typedef enum { MT_TP_REPLICATED, MT_TP_COLUMNS, MT_TP_HEADS, MT_TP_ROWS, MT_TP_VOCAB } MtTpSplit;

/* The split of a parameter of the table (by its Hugging Face name). */
MtTpSplit mt_tp_split(const MtParam *p);
const char *mt_tp_split_name(MtTpSplit s);

/* Whether N ranks can split cfg: N >= 1 dividing the heads and 4C.  MT_EINPUT with one
 * line quoting the numbers otherwise. */
MtStatus mt_tp_check(const MtConfig *cfg, int N);

/* V rounded up to a multiple of `multiple` (>= 1). */
int64_t mt_tp_vocab_padded(int64_t V, int64_t multiple);

/* Floats of a rank's slice (the same on every rank; wte's includes its padding rows).
 * Vp: the padded vocabulary (used by MT_TP_VOCAB only). */
int64_t mt_tp_local_numel(const MtParam *p, int N, int64_t Vp);

/* Runs of a rank's slice (the same count on every rank), and run k of rank r. */
int mt_tp_nruns(const MtParam *p, int N);
void mt_tp_run(const MtParam *p, int N, int r, int64_t Vp, int k, int64_t *begin, int64_t *end, int64_t *at);

/* Rank r's slice initialised alone: element for element what mt_param_init gives the
 * whole tensor (a pure function of the full element index), padding rows zero. */
void mt_tp_init_slice(const MtParam *p, int L, uint64_t seed, int N, int r, int64_t Vp, float *dst);

/* A rank's table: the whole table's names, units and flags, each tensor's shape its
 * slice's (wte: Vp/N rows, its padding included), offsets into the rank's flat arrays,
 * each unit padded to a multiple of align (>= 1; data parallelism's shard alignment, as
 * mt_param_table_aligned) and each tensor starting at a multiple of talign (>= 1).
 * Returns the floats of the flat arrays. */
int64_t mt_tp_local_table(const MtConfig *cfg, int N, int64_t Vp, int64_t align, int64_t talign, MtParam *table);

/* ---- the split products (tp_ops.c) ----
 *
 * A rank computes with its slices: heads [r NH/N, (r+1) NH/N) of attention, columns
 * [r 4C/N, (r+1) 4C/N) of the MLP, vocabulary rows [r Vp/N, (r+1) Vp/N) of wte.  Column
 * splits are exact by nature (each output element is the whole model's).  Every sum whose
 * terms are split is defined as K fixed blocks of the split dimension (heads, columns,
 * vocabulary rows), each block's partial computed alone, the K partials added as a
 * balanced pairwise tree S(lo, hi) = S(lo, mid) + S(mid, hi), mid = lo + (hi - lo) / 2.
 * With N dividing K (both powers of two), rank r's K/N blocks are the whole subtree
 * [r K/N, (r+1) K/N); the fixed-order all-reduce of the communication layer, which sums
 * the ranks in the same pairwise order, forms the upper levels, so any N gives the bits of
 * one device with the same K.  The split sums:
 *   row-parallel forward      out = (resid + bias) + S, S = sum over blocks of inp_j @ W_j
 *                             (attn.c_proj: blocks of heads; mlp.c_proj: of columns);
 *   column-parallel input grad dinp = sum over blocks of dout_j @ W_j^T (c_attn: the q, k
 *                             and v columns of a block of heads, three products added in
 *                             that order; c_fc: a block of columns);
 *   the head's input gradient dlnf = sum over blocks of dlogits_j @ wte_j (vocabulary);
 *   the sum of exponentials   of the cross-entropy (double, each block in column order).
 * Scratch: each tree needs ceil(log2(K/N)) buffers of the output's size.
 */
typedef struct MtTpCtx {
    int N, r;   /* ranks in the tp group, this rank */
    int K;      /* blocks of every split sum; N divides K */
    int64_t Vp; /* padded vocabulary: a multiple of 64 K, rows >= V are zero padding */
    int seqpar; /* sequence parallelism (tp_model.c): rank r holds rows [r n/N, (r+1) n/N) */
    /* over the tp group; NULL when N == 1.  allreduce: sum in the pairwise order over
     * group ranks.  allgather: in (n floats) from every rank, rank-major in out (N n; in may
     * be the rank's own chunk of out).  reduce_scatter: out gets rank r's chunk (n / N
     * floats) of the sum of in (n), in the same order. */
    void (*allreduce)(void *comm, float *buf, int64_t n);
    void (*allgather)(void *comm, const float *in, float *out, int64_t n);
    void (*reduce_scatter)(void *comm, const float *in, float *out, int64_t n);
    void *comm;
} MtTpCtx;

/* A rank's share of a micro-batch of ntok rows: attention width and heads, MLP width, its
 * vocabulary columns [v0, v0 + Vl), the blocks of a split sum it computes, and its rows of
 * the residual stream [row0, row0 + rows) (all of them without sequence parallelism).
 * tp NULL: the whole model. */
typedef struct {
    int Cl, Hl, Fl;
    int64_t Vl, v0;
    int nb;
    int rows, row0;
} MtTpLocal;
MtTpLocal mt_tp_local(const MtConfig *cfg, const MtTpCtx *tp, int ntok);

/* The model's passes on a tp rank (tp_model.c), called by mt_model_* when the activations
 * carry a context; the same contracts as theirs (mt_model.h). */
void mt_tp_embed_forward(const MtConfig *cfg, const MtWeights *w, MtActs *a, const int32_t *tokens);
void mt_tp_block_forward(const MtConfig *cfg, const MtBlockWeights *w, MtActs *a, int l, const float *x);
double mt_tp_head_forward(const MtConfig *cfg, const MtWeights *w, MtActs *a, const float *x, const int32_t *targets,
                          float dscale);
void mt_tp_head_backward(const MtConfig *cfg, const MtWeights *w, const MtWeights *g, MtActs *a, const float *x);
void mt_tp_block_backward(const MtConfig *cfg, const MtBlockWeights *w, const MtBlockWeights *g, MtActs *a, int l,
                          const float *x, int add);
void mt_tp_embed_backward(const MtConfig *cfg, float *dwte, float *dwpe, MtActs *a, const int32_t *tokens,
                          MtEmbSum *es);
/* The split backward of zero-bubble schedules (mt_model.h's _input / _weight): the bits of
 * mt_tp_block_backward and mt_tp_head_backward.  With sequence parallelism W sums the
 * replicated gradients over the group (a collective). */
void mt_tp_block_backward_input(const MtConfig *cfg, const MtBlockWeights *w, MtActs *a, int l, const float *x,
                                float *stash);
void mt_tp_block_backward_weight(const MtConfig *cfg, const MtBlockWeights *g, MtActs *a, int l, const float *x,
                                 const float *stash, int add);
void mt_tp_head_backward_input(const MtConfig *cfg, const MtWeights *w, MtActs *a, const float *x, float *stash);
void mt_tp_head_backward_weight(const MtConfig *cfg, const MtWeights *g, MtActs *a, const float *x, const float *stash);
/* a->dres of every row of the micro-batch: itself, or with sequence parallelism gathered
 * over the group (a collective) into the set's buffer. */
const float *mt_tp_all_rows(const MtConfig *cfg, MtActs *a);

/* Bytes a rank of the tp group sends (the comm layer's count: an all-reduce 2 (N-1)/N of its
 * bytes, an all-gather or reduce-scatter (N-1)/N of the whole) per micro-batch of ntok rows
 * through the units it runs: the embedding (embed), blocks [l0, l1), the head (head), with
 * `recompute` (MT_RECOMPUTE_*) and the split backward (split: full recomputation reruns a
 * block's forward in B and in W).  Per unit, ar = an all-reduce of ntok C floats:
 *   embedding ar (its lookup; with sequence parallelism a reduce-scatter, and the gather
 *   of the backward's rows), block 4 ar (+ 2 ar per rerun; sequence parallelism adds the
 *   all-reduce of the 6 C replicated gradients), head ar + 20 (N-1) ntok (the row maxima and
 *   the 4 row sums all-gathered; sequence parallelism adds 2 C replicated gradients).
 * 0 with one rank.  Pure. */
int64_t mt_tp_plan_micro_bytes(const MtConfig *cfg, const MtTpCtx *tp, int64_t ntok, int embed, int l0, int l1, int head,
                               int recompute, int split);
/* Per step: the norm's per-tensor parts (2 floats each) all-gathered. */
int64_t mt_tp_plan_step_bytes(const MtTpCtx *tp, int nparams);

/* The padded vocabulary of K blocks: V rounded up to a multiple of 64 K. */
static inline int64_t mt_tp_vocab_of(int64_t V, int K) { return mt_tp_vocab_padded(V, 64 * (int64_t)K); }
/* ceil(log2(n)): the tree buffers of n blocks */
int mt_tp_tree_depth(int n);

/* S (N,OC) = sum over the nb blocks of inp (N, Kin) @ w (Kin, OC), block j being input
 * rows [j Kin/nb, (j+1) Kin/nb); tmp: mt_tp_tree_depth(nb) buffers of N OC floats. */
void mt_tp_rowpar_sum(float *S, float **tmp, const float *inp, const float *w, int N, int Kin, int OC, int nb);
void mt_tp_colpar_dinp(float *S, float **tmp, const float *dout, const float *w, int N, int C, int OC, int nb,
                       int heads);
/* S (N,C) = sum over the nb blocks of dlogits (N, Vl) @ wte (Vl, C), block j being rows
 * [j Vl/nb, (j+1) Vl/nb). */
void mt_tp_vocab_dinp(float *S, float **tmp, const float *dlogits, const float *wte, int N, int C, int Vl, int nb);
/* The sums over `rows` rows of a replicated parameter's gradient as nb blocks, block j
 * being rows [j rows / nb, (j+1) rows / nb) (so a rank holding rows / N rows of a multiple
 * of N holds whole blocks of the whole's K = nb N): ln 1, out (2C) = [dw | db] of a
 * LayerNorm (dout, its input inp, its row statistics); ln 0, out (C) = the column sums of
 * dout (a bias).  lvl: mt_tp_tree_depth(nb) buffers of 2C floats. */
void mt_tp_rows_grads(float *out, float **lvl, int ln, const float *dout, const float *inp, const float *mean,
                      const float *rstd, int rows, int C, int nb);
/* Test hook: on != 0 makes every blocked product sum its blocks left to right (a wrong
 * order that the bit-for-bit tests must catch; MT_TEST_TP_LTR=1 for build/meshtrain-test). */
void mt_tp_test_left_to_right(int on);
/* Adds buffers in place as the pairwise tree over nb of them: parts[0] = S(0, nb). */
void mt_tp_tree_add(float **parts, int nb, int64_t n);

/* The element-wise kernels around these sums (the vocabulary-split embedding and
 * cross-entropy, the row-parallel product's finish) are the backend's: mt_backend.h. */

#endif
