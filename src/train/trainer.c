/* trainer.c - single-device training: allocation, canonical accumulation, update. */
#include "mt_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mt_gemm.h"
#include "mt_kernels.h"

static MtStatus check(const MtTrainConfig *tc)
{
    MT_TRY(mt_config_check(&tc->cfg));
    if (tc->seq < 1 || tc->seq > tc->cfg.T)
        return mt_error(MT_EINPUT, "sequence length %d must be between 1 and the context length %d",
                        tc->seq, tc->cfg.T);
    if (tc->batch < 1 || tc->micro < 1)
        return mt_error(MT_EINPUT, "batch size %d and micro-batch size %d must be positive",
                        tc->batch, tc->micro);
    if (tc->batch % tc->micro != 0)
        return mt_error(MT_EINPUT, "batch size %d is not a multiple of the micro-batch size %d",
                        tc->batch, tc->micro);
    int M = tc->batch / tc->micro;
    if (M > (1 << 20))
        return mt_error(MT_EINPUT, "too many micro-batches (%d)", M);
    if (tc->threads < 1 || tc->threads > 1024)
        return mt_error(MT_EINPUT, "threads %d must be between 1 and 1024", tc->threads);
    const MtOptimConfig *o = &tc->oc;
    if (!(o->lr >= 0) || !(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1) ||
        !(o->eps > 0) || !(o->weight_decay >= 0) || o->warmup < 0 || o->steps < 0)
        return mt_error(MT_EINPUT, "optimizer settings out of range (lr %g, warmup %d, weight decay %g)",
                        o->lr, o->warmup, o->weight_decay);
    return MT_OK;
}

static int tree_depth(int M)
{
    int d = 0;
    while ((1 << d) < M)
        d++;
    return d;
}

MtStatus mt_trainer_init(MtTrainer *tr, const MtTrainConfig *tc)
{
    memset(tr, 0, sizeof *tr);
    MT_TRY(check(tc));
    tr->tc = *tc;
    mt_mem_init(&tr->mem);
    if (tc->fail_alloc_after > 0)
        mt_mem_set_fail_after(&tr->mem, tc->fail_alloc_after - 1);
    const MtConfig *cfg = &tc->cfg;
    tr->nparams = mt_param_count(cfg);
    tr->table = calloc((size_t)tr->nparams, sizeof(MtParam));
    int64_t gb = (int64_t)tc->batch * tc->seq;
    tr->inputs = malloc(sizeof(int32_t) * (size_t)gb);
    tr->targets = malloc(sizeof(int32_t) * (size_t)gb);
    if (!tr->table || !tr->inputs || !tr->targets)
        goto oom;
    tr->nfloats = mt_param_table(cfg, tr->table);
    size_t bytes = sizeof(float) * (size_t)tr->nfloats;
    tr->params = mt_mem_alloc(&tr->mem, MT_MEM_PARAMS, bytes);
    tr->grads = mt_mem_alloc(&tr->mem, MT_MEM_GRADS, bytes);
    tr->m = mt_mem_alloc(&tr->mem, MT_MEM_OPTIM, bytes);
    tr->v = mt_mem_alloc(&tr->mem, MT_MEM_OPTIM, bytes);
    if (!tr->params || !tr->grads || !tr->m || !tr->v)
        goto oom;
    tr->ntmp = tree_depth(tc->tree_span > 0 ? tc->tree_span : tc->batch / tc->micro);
    for (int i = 0; i < tr->ntmp; i++)
        if (!(tr->gtmp[i] = mt_mem_alloc(&tr->mem, MT_MEM_GRADS, bytes)))
            goto oom;
    MtStatus s = mt_acts_alloc(&tr->acts, &tr->mem, cfg, tc->micro, tc->seq, tc->threads);
    if (s != MT_OK) {
        mt_trainer_free(tr);
        return s;
    }
    mt_weights_view(cfg, tr->table, tr->params, &tr->w);
    for (int p = 0; p < tr->nparams; p++) {
        const MtParam *pp = &tr->table[p];
        mt_param_init(pp, cfg->L, tc->seed, 0, pp->numel, tr->params + pp->offset);
    }
    return MT_OK;
oom:
    mt_trainer_free(tr);
    return mt_error(MT_ENOMEM, "cannot allocate the training state (%lld parameters)",
                    (long long)tr->nfloats);
}

void mt_trainer_free(MtTrainer *tr)
{
    size_t bytes = sizeof(float) * (size_t)tr->nfloats;
    mt_acts_free(&tr->acts, &tr->mem);
    for (int i = 0; i < tr->ntmp; i++) {
        mt_mem_free(&tr->mem, MT_MEM_GRADS, tr->gtmp[i], bytes);
        tr->gtmp[i] = NULL;
    }
    mt_mem_free(&tr->mem, MT_MEM_PARAMS, tr->params, bytes);
    mt_mem_free(&tr->mem, MT_MEM_GRADS, tr->grads, bytes);
    mt_mem_free(&tr->mem, MT_MEM_OPTIM, tr->m, bytes);
    mt_mem_free(&tr->mem, MT_MEM_OPTIM, tr->v, bytes);
    tr->params = tr->grads = tr->m = tr->v = NULL;
    free(tr->table);
    free(tr->inputs);
    free(tr->targets);
    tr->table = NULL;
    tr->inputs = tr->targets = NULL;
}

float mt_trainer_micro_grad(MtTrainer *tr, int k, float *gbuf)
{
    const MtTrainConfig *tc = &tr->tc;
    int64_t off = (int64_t)k * tc->micro * tc->seq;
    double step_tokens = (double)tc->batch * tc->seq;
    MtWeights g;
    memset(gbuf, 0, sizeof(float) * (size_t)tr->nfloats);
    mt_weights_view(&tc->cfg, tr->table, gbuf, &g);
    double sum = mt_model_forward(&tc->cfg, &tr->w, &tr->acts, tr->inputs + off, tr->targets + off,
                                  (float)(1.0 / step_tokens));
    mt_model_backward(&tc->cfg, &tr->w, &g, &tr->acts, tr->inputs + off);
    return (float)(sum / step_tokens);
}

/* S(lo, hi) of the header comment, written into gbuf; returns the loss of the subtree. */
static float accumulate(MtTrainer *tr, int lo, int hi, float *gbuf, int depth)
{
    int64_t n = tr->nfloats;
    if (hi - lo == 1)
        return mt_trainer_micro_grad(tr, lo, gbuf);
    int mid = lo + (hi - lo) / 2;
    float left = accumulate(tr, lo, mid, gbuf, depth + 1);
    float *right_buf = tr->gtmp[depth];
    float right = accumulate(tr, mid, hi, right_buf, depth + 1);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        gbuf[i] += right_buf[i];
    return left + right;
}

float mt_trainer_forward_backward(MtTrainer *tr)
{
    return accumulate(tr, 0, tr->tc.batch / tr->tc.micro, tr->grads, 0);
}

float mt_trainer_forward_backward_range(MtTrainer *tr, int lo, int hi)
{
    MT_ASSERT(tree_depth(hi - lo) <= tr->ntmp, "a range of %d micro-batches needs more tree buffers than the "
              "%d allocated (tree_span)", hi - lo, tr->ntmp);
    return accumulate(tr, lo, hi, tr->grads, 0);
}

void mt_trainer_update(MtTrainer *tr, MtStepStats *st)
{
    const MtOptimConfig *oc = &tr->tc.oc;
    double norm = sqrt(mt_grad_sumsq(tr->table, tr->nparams, tr->grads));
    mt_grad_clip(tr->grads, tr->nfloats, oc->grad_clip, norm);
    float lr = mt_lr_at(oc, (int)tr->step);
    mt_adamw_step(tr->table, tr->nparams, tr->params, tr->grads, tr->m, tr->v, oc, lr,
                  (int)tr->step + 1);
    tr->step++;
    st->grad_norm = (float)norm;
    st->lr = lr;
}

void mt_trainer_step(MtTrainer *tr, const MtTokens *data, MtStepStats *st)
{
    mt_batch_fill(data, tr->tc.seed, tr->step, 0, tr->tc.batch, tr->tc.seq, tr->inputs,
                  tr->targets);
    st->loss = mt_trainer_forward_backward(tr);
    mt_trainer_update(tr, st);
}

double mt_trainer_eval(MtTrainer *tr, const MtTokens *data, int64_t nwin)
{
    const MtTrainConfig *tc = &tr->tc;
    int T = tc->seq, mb = tc->micro;
    double total = 0.0;
    int64_t done = 0;
    while (done < nwin) {
        int b = (int)(nwin - done < mb ? nwin - done : mb);
        for (int k = 0; k < b; k++) {
            int64_t s = (done + k) * T;
            memcpy(tr->inputs + (int64_t)k * T, data->tok + s, sizeof(int32_t) * T);
            memcpy(tr->targets + (int64_t)k * T, data->tok + s + 1, sizeof(int32_t) * T);
        }
        MtActs a = tr->acts; /* same buffers, fewer rows */
        a.B = b;
        total += mt_model_forward(&tc->cfg, &tr->w, &a, tr->inputs, tr->targets, 0.0f);
        done += b;
    }
    return nwin > 0 ? total / ((double)nwin * T) : 0.0;
}
