/* adamw.c - AdamW, gradient norm and clipping, learning-rate schedule. */
#include "mt_optim.h"

#include "mt_backend.h"

#include <math.h>
#include <stdlib.h>

const char *const mt_optim_flags[MT_OPTIM_NSETTINGS] = {"lr", "min-lr-frac", "warmup", "steps", "beta1",
                                                       "beta2", "eps", "weight-decay", "grad-clip"};
const char *const mt_optim_keys[MT_OPTIM_NSETTINGS] = {"lr", "min_lr_frac", "warmup", "steps", "beta1",
                                                      "beta2", "eps", "weight_decay", "grad_clip"};

int mt_optim_bad(const MtOptimConfig *o, double *value, const char **want)
{
    const double x[MT_OPTIM_NSETTINGS] = {o->lr, o->min_lr_frac, o->warmup, o->steps, o->beta1,
                                          o->beta2, o->eps, o->weight_decay, o->grad_clip};
    const int ok[MT_OPTIM_NSETTINGS] = {
        isfinite(o->lr) && o->lr >= 0,
        o->min_lr_frac >= 0 && o->min_lr_frac <= 1,
        o->warmup >= 0,
        o->steps >= 0,
        o->beta1 >= 0 && o->beta1 < 1,
        o->beta2 >= 0 && o->beta2 < 1,
        isfinite(o->eps) && o->eps > 0,
        isfinite(o->weight_decay) && o->weight_decay >= 0,
        isfinite(o->grad_clip),
    };
    static const char *const wants[MT_OPTIM_NSETTINGS] = {
        "a finite float >= 0", "0 to 1", ">= 0", ">= 0", "0 <= beta1 < 1", "0 <= beta2 < 1",
        "a finite float > 0", "a finite float >= 0", "a finite float (<= 0: no clipping)"};
    for (int k = 0; k < MT_OPTIM_NSETTINGS; k++)
        if (!ok[k]) {
            *value = x[k];
            *want = wants[k];
            return k;
        }
    return -1;
}

float mt_lr_at(const MtOptimConfig *oc, int step)
{
    if (oc->warmup > 0 && step < oc->warmup)
        return oc->lr * (float)(step + 1) / (float)oc->warmup;
    float min_lr = oc->lr * oc->min_lr_frac;
    int span = oc->steps - oc->warmup;
    if (span <= 0)
        return oc->lr;
    double frac = (double)(step - oc->warmup) / span;
    if (frac > 1.0)
        frac = 1.0;
    return min_lr + 0.5f * (oc->lr - min_lr) * (float)(1.0 + cos(M_PI * frac));
}

void mt_block_sumsq(const float *x, int64_t n, double *out) { mt_be()->block_sumsq(x, n, out); }

double mt_grad_sumsq(const MtParam *table, int nparams, const float *g)
{
    int nunits = table[nparams - 1].unit + 1;
    int64_t maxnb = 1;
    for (int u = 0; u < nunits; u++) {
        int64_t lo, hi;
        mt_unit_span(table, nparams, u, &lo, &hi);
        int64_t nb = (hi - lo + MT_NORM_BLOCK - 1) / MT_NORM_BLOCK;
        maxnb = nb > maxnb ? nb : maxnb;
    }
    double *partial = malloc(sizeof(double) * (size_t)maxnb); /* small: one double per block */
    MT_ASSERT(partial, "out of memory for %lld block sums", (long long)maxnb);
    double total = 0.0;
    for (int u = 0; u < nunits; u++) {
        int64_t lo, hi;
        mt_unit_span(table, nparams, u, &lo, &hi);
        int64_t nb = (hi - lo + MT_NORM_BLOCK - 1) / MT_NORM_BLOCK;
        mt_block_sumsq(g + lo, hi - lo, partial);
        for (int64_t b = 0; b < nb; b++)
            total += partial[b];
    }
    free(partial);
    return total;
}

void mt_grad_clip(float *g, int64_t n, float clip, double norm)
{
    if (clip <= 0.0f)
        return;
    double coef = clip / (norm + 1e-6);
    if (coef >= 1.0)
        return;
    mt_be()->scale(g, n, (float)coef);
}

void mt_adamw_range(const MtParam *table, int nparams, int64_t lo, int64_t hi, float *params,
                    const float *grads, float *m, float *v, const MtOptimConfig *oc, float lr, int t)
{
    mt_adamw_range_part(table, nparams, lo, hi, params, grads, m, v, oc, lr, t, MT_ADAMW_ALL);
}

void mt_adamw_range_part(const MtParam *table, int nparams, int64_t lo, int64_t hi, float *params,
                         const float *grads, float *m, float *v, const MtOptimConfig *oc, float lr, int t, int part)
{
    MtAdamwCoef k = {oc->beta1, oc->beta2, oc->eps, 0.0f, 0.0f, 1.0f, part};
    float bc1 = 1.0f - powf(oc->beta1, (float)t), bc2 = 1.0f - powf(oc->beta2, (float)t);
    k.step_size = lr / bc1;
    k.bc2_sqrt = sqrtf(bc2);
    for (int p = 0; p < nparams; p++) {
        int64_t a = table[p].offset > lo ? table[p].offset : lo;
        int64_t b = table[p].offset + table[p].numel < hi ? table[p].offset + table[p].numel : hi;
        if (a >= b)
            continue;
        int64_t off = a - lo;
        k.decay = table[p].decay ? 1.0f - lr * oc->weight_decay : 1.0f;
        mt_be()->adamw(params + off, grads + off, m + off, v + off, b - a, &k);
    }
}

void mt_adamw_step(const MtParam *table, int nparams, float *params, const float *grads, float *m,
                   float *v, const MtOptimConfig *oc, float lr, int t)
{
    const MtParam *last = &table[nparams - 1];
    mt_adamw_range(table, nparams, 0, last->offset + last->numel, params, grads, m, v, oc, lr, t);
}
