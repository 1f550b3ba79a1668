/* mt_optim.h - AdamW, global-norm gradient clipping, learning-rate schedule.
 *
 * All three work on flat arrays laid out like the parameter table, so that a rank
 * holding a shard of the parameters (ZeRO) runs the same code on its shard.
 *
 * The gradient norm is summed in a fixed order: each unit (mt_model.h) in blocks of
 * MT_NORM_BLOCK elements from the unit's first element (each block summed in double in 16
 * fixed lanes, combined in a fixed tree), the blocks in order, the units in order.  The thread count does not
 * change it, and neither does sharding: a data-parallel rank that holds whole blocks of
 * every unit (mt_shard.h) computes its block sums, and the ranks' sums are added in the
 * same order, so every layout gets the same bits.
 */
#ifndef MT_OPTIM_H
#define MT_OPTIM_H

#include <stdint.h>

#include "mt_backend.h" /* MT_NORM_BLOCK */
#include "mt_model.h"
#include "mt_tp.h"


typedef struct {
    float lr;           /* peak learning rate */
    float min_lr_frac;  /* cosine decays to lr * min_lr_frac */
    int warmup;         /* linear warm-up steps */
    int steps;          /* total steps (end of the cosine) */
    float beta1, beta2, eps, weight_decay;
    float grad_clip;    /* <= 0: no clipping */
} MtOptimConfig;

/* The settings in a fixed order, as flags (mt_optim_flags: "lr", "min-lr-frac", ...) and as
 * trainer_state.json keys (mt_optim_keys); mt_optim_bad returns the index of the first one
 * out of range, with its value and the range it needs, or -1.  Ranges are those of the
 * floats the optimizer computes with: a double flag beyond FLT_MAX is refused by the flag
 * parser, an lr of inf here. */
#define MT_OPTIM_NSETTINGS 9
extern const char *const mt_optim_flags[MT_OPTIM_NSETTINGS];
extern const char *const mt_optim_keys[MT_OPTIM_NSETTINGS];
int mt_optim_bad(const MtOptimConfig *o, double *value, const char **want);

/* Learning rate at step `step` (0-based): linear warm-up lr*(step+1)/warmup, then cosine
 * from lr to lr*min_lr_frac at step `steps`. */
float mt_lr_at(const MtOptimConfig *oc, int step);

/* Sum of squares of g over the table (fixed order, double). */
double mt_grad_sumsq(const MtParam *table, int nparams, const float *g);
/* Sums of squares of the ceil(n / MT_NORM_BLOCK) blocks of x, each in 16 fixed lanes. */
void mt_block_sumsq(const float *x, int64_t n, double *out);

/* Scales g by min(1, clip / (norm + 1e-6)) (PyTorch's clip_grad_norm_). */
void mt_grad_clip(float *g, int64_t n, float clip, double norm);

/* One AdamW step (PyTorch's formulation) on elements [0, n) of a flat array whose
 * element i belongs to the table; t is the 1-based step count for bias correction. */
void mt_adamw_step(const MtParam *table, int nparams, float *params, const float *grads, float *m,
                   float *v, const MtOptimConfig *oc, float lr, int t);
/* The same on the flat range [lo, hi) only, held in arrays whose element 0 is flat element
 * lo (a shard); elements of the range that belong to no tensor (padding) are left alone. */
void mt_adamw_range(const MtParam *table, int nparams, int64_t lo, int64_t hi, float *params,
                    const float *grads, float *m, float *v, const MtOptimConfig *oc, float lr, int t);
/* The same writing only part of its results (MT_ADAMW_ALL, MT_ADAMW_PARAMS: the parameters, the
 * moments left; MT_ADAMW_MOMENTS: the moments, the parameters left), each value computed as
 * MT_ADAMW_ALL computes it: PARAMS then MOMENTS from the same state and gradient writes
 * MT_ADAMW_ALL's bits. */
void mt_adamw_range_part(const MtParam *table, int nparams, int64_t lo, int64_t hi, float *params,
                         const float *grads, float *m, float *v, const MtOptimConfig *oc, float lr, int t, int part);

/* The gradient norm under K blocks (tp_norm.c).  One device's sum of squares, defined for any K: each
 * split tensor as the pairwise tree over its K slices (the slices of tp = K), each slice
 * gathered in its local order and summed as blocks of MT_NORM_BLOCK (double each, added in
 * order); a replicated tensor as its blocks; the tensors added in table order.  A rank
 * holding K / N slices of every split tensor computes its subtrees: out[i] for tensor i of
 * its local table (nsub = K / N); mt_tp_sumsq_combine adds the ranks' parts (N x n, rank-
 * major) in the same tree, the replicated ones once (from rank 0's part), and returns the
 * sum of squares. */
void mt_tp_sumsq_parts(const MtParam *local_table, int n, const float *g, int nsub, double *out);
double mt_tp_sumsq_combine(const MtParam *local_table, int n, const double *all, int N);

#endif
