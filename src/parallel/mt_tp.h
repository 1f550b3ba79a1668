/* mt_tp.h - tensor parallelism's placements: how each parameter is split over a tp group
 * of N ranks, as pure arithmetic (no MPI).  A first piece of issue 9: nothing runs tp yet.
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

#endif
