/* mt_optim.h - AdamW, global-norm gradient clipping, learning-rate schedule.
 *
 * All three work on flat arrays laid out like the parameter table, so that a rank
 * holding a shard of the parameters (ZeRO) runs the same code on its shard.
 *
 * The gradient norm is summed in a fixed order: each tensor in blocks of
 * MT_NORM_BLOCK elements (each block summed in double, in element order), the blocks
 * in order, the tensors in table order.  The thread count does not change it.
 */
#ifndef MT_OPTIM_H
#define MT_OPTIM_H

#include <stdint.h>

#include "mt_model.h"

#define MT_NORM_BLOCK 4096

typedef struct {
    float lr;           /* peak learning rate */
    float min_lr_frac;  /* cosine decays to lr * min_lr_frac */
    int warmup;         /* linear warm-up steps */
    int steps;          /* total steps (end of the cosine) */
    float beta1, beta2, eps, weight_decay;
    float grad_clip;    /* <= 0: no clipping */
} MtOptimConfig;

/* Learning rate at step `step` (0-based): linear warm-up lr*(step+1)/warmup, then cosine
 * from lr to lr*min_lr_frac at step `steps`. */
float mt_lr_at(const MtOptimConfig *oc, int step);

/* Sum of squares of g over the table (fixed order, double). */
double mt_grad_sumsq(const MtParam *table, int nparams, const float *g);

/* Scales g by min(1, clip / (norm + 1e-6)) (PyTorch's clip_grad_norm_). */
void mt_grad_clip(float *g, int64_t n, float clip, double norm);

/* One AdamW step (PyTorch's formulation) on elements [0, n) of a flat array whose
 * element i belongs to the table; t is the 1-based step count for bias correction. */
void mt_adamw_step(const MtParam *table, int nparams, float *params, const float *grads, float *m,
                   float *v, const MtOptimConfig *oc, float lr, int t);

#endif
