/* mt_kernels.h - CPU forward/backward kernels of the GPT-2 model (fp32).
 *
 * Conventions (from llm.c): arguments are ordered outputs, inputs, weights, dimensions;
 * the gradient of x is dx; dimension letters: B batch, T time, C channels, NH heads,
 * V vocabulary, N = B*T rows.  Accumulation rule: parameter gradients and the residual
 * stream gradient accumulate (+=); every other activation gradient is overwritten (=).
 *
 * Determinism: no kernel's result depends on the number of OpenMP threads.  Work is
 * split so that each output element is computed by exactly one thread with a fixed
 * formula; reductions over rows (bias, LayerNorm and embedding gradients) are split
 * over channels, and each channel sums its rows in row order.
 */
#ifndef MT_KERNELS_H
#define MT_KERNELS_H

#include <stdint.h>

/* out[n,:] = wte[tokens[n],:] + wpe[n % T,:] */
void mt_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                        int B, int T, int C);
/* dwte[tokens[n]] += dout[n], dwpe[n % T] += dout[n], rows in order; either may be NULL */
void mt_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                         int B, int T, int C);

/* Per row: out = (x - mean) * rstd * w + b, eps 1e-5.  mean, rstd: (N) saved for backward. */
void mt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C);
/* dinp += ..., dw and db += ... (add 1) or = ... (add 0: their old contents are ignored, the
 * same bits as adding to zeros): two independent halves; dinp NULL skips the first, dw NULL
 * (and db) the second (a weight-gradient pass run apart, same bits). */
void mt_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int N, int C, int add);

/* out (N,OC) = residual + bias + inp (N,C) @ w (C,OC); residual and bias may be NULL.
 * `out` may alias `residual`. */
void mt_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                       const float *residual, int N, int C, int OC);
/* dinp (N,C) = dout @ w^T; dw (C,OC) = inp^T @ dout; dbias = colsum(dout); each "=" is "+="
 * where `add` has its flag (MT_ADD_DINP, MT_ADD_DW for dw and dbias).  Assigning gives the
 * bits of adding to zeros, without zeroing first.  dinp, dw and dbias may be NULL (the input
 * and weight halves run apart give the same bits). */
enum { MT_ADD_DINP = 1, MT_ADD_DW = 2 };
void mt_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC, int add);

/* Causal multi-head self-attention, fused (attention.c): the probabilities are never
 * stored.  qkv (B,T,3C) holds q, k, v; out (B,T,C); lse (B,NH,T) keeps each row's
 * log-sum-exp for backward.  scratch: mt_attention_scratch_floats(T, C/NH) floats per
 * thread (OpenMP thread numbers), used by both passes. */
void mt_attention_forward(float *out, float *lse, float *scratch, const float *qkv, int B, int T, int C, int NH);
/* dqkv (B,T,3C) = the gradient of qkv given dout (B,T,C), the forward's out and lse
 * (probabilities recomputed tile by tile); overwritten. */
void mt_attention_backward(float *dqkv, float *scratch, const float *dout, const float *out, const float *qkv,
                           const float *lse, int B, int T, int C, int NH);
int64_t mt_attention_scratch_floats(int T, int hs);

/* GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
void mt_gelu_forward(float *out, const float *inp, int64_t n);
/* dinp = gelu'(inp) * dout (dinp may alias dout) */
void mt_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n);

/* Fused softmax + cross-entropy over logits (N,V).  losses[n] = -log p[n, targets[n]].
 * If dscale != 0, logits are replaced by their gradient dscale * (p - onehot(target)).
 * Returns the sum of the losses, in row order, in double. */
double mt_crossentropy_fused(float *logits, float *losses, const int32_t *targets, int N, int V,
                             float dscale);

/* out[c] (+= if add, else =) the sum over rows n of x[n,c], rows in order (column sums: bias
 * gradients; assigning gives the bits of adding to zeros). */
void mt_colsum(float *out, const float *x, int N, int C, int add);
/* Inside a parallel region: this thread's contiguous range of C channels. */
void mt_channel_range(int C, int *c0, int *c1);

/* exp with relative error below 3e-7, as the kernels vectorise it (exposed for tests). */
float mt_expf(float x);

/* ---- tensor parallelism's element-wise kernels (tp_kernels.c; the blocked sums around
 * them are the model's, mt_tp.h) ---- */

/* out (N,OC) = (resid + bias) + S, either of resid and bias NULL; out may alias resid. */
void mt_tp_rowpar_finish(float *out, const float *S, const float *bias, const float *resid, int N, int OC);
/* S (N,C) = sum over the nb blocks of dout (N, OC) @ w (C, OC)^T.  heads 0: block j is
 * columns [j OC/nb, (j+1) OC/nb); heads 1: OC = 3 Cl holds q | k | v and block j is the
 * columns [j Cl/nb, (j+1) Cl/nb) of each, three products added in the order q, k, v. */
/* The embedding over vocabulary rows [v0, v0 + Vl): out[n] = wte[tokens[n] - v0] for the
 * rank's own tokens, 0 for the others (then summed over the group, and wpe added by
 * mt_tp_embed_finish to rows [row0, row0 + rows) of the flat (B, T) order); backward: dwte
 * rows += dout for the rank's tokens, in row order. */
void mt_tp_embed_lookup(float *out, const int32_t *tokens, const float *wte, int64_t v0, int64_t Vl, int N, int C);
void mt_tp_embed_finish(float *out, const float *wpe, int row0, int rows, int T, int C);
void mt_tp_embed_backward_rows(float *dwte, const float *dout, const int32_t *tokens, int64_t v0, int64_t Vl, int N,
                               int C);

/* The vocabulary-parallel cross-entropy, in three steps around two all-gathers.  logits
 * (N, Vl) hold columns [v0, v0 + Vl) of the padded vocabulary; columns >= V are padding
 * (masked).  1: each row's max over the rank's real columns (-inf if none), into mx (N). */
void mt_tp_xent_max(float *mx, const float *logits, int64_t v0, int64_t Vl, int64_t V, int N);
/* the maxima over ranks of the all-gathered row maxima (nranks x N) */
void mt_tp_xent_reduce_max(float *mx, const float *all, int nranks, int N);
/* 2: given the row maxima mx (N), stats (4 floats per row): the sum of exp(x - mx) over the
 * rank's real columns as the tree over its nb blocks (a double, in the first two floats),
 * then the target logit if v0 <= target < v0 + Vl, else 0, then 0. */
void mt_tp_xent_sums(float *stats, const float *logits, const float *mx, const int32_t *targets, int64_t v0,
                     int64_t Vl, int64_t V, int N, int nb);
/* 3: the ranks' stats (rank-major, nranks x N x 4) combined (sums as the pairwise tree
 * over ranks, target logits added) into losses (N); if dscale != 0 the logits are replaced
 * by dscale (p - onehot), padding 0.  Returns the sum of the losses in row order. */
double mt_tp_xent_finish(float *logits, float *losses, const float *all_stats, int nranks, const float *mx,
                         const int32_t *targets, int64_t v0, int64_t Vl, int64_t V, int N, float dscale);

/* Number of threads the kernels use (OpenMP); set once at start-up. */
void mt_kernels_set_threads(int threads);
int mt_kernels_threads(void);

#endif
