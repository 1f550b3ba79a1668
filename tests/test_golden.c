/* test_golden.c - meshtrain against PyTorch.  tests/golden/ holds a checkpoint that
 * meshtrain wrote (ckpt/), a token file, and what PyTorch computed from them
 * (expected.safetensors, by tests/golden/make_golden.py; regenerate with
 * scripts/make-golden.sh): the loss, every parameter gradient, the parameters after one
 * clipped AdamW step, and the loss after that step.  meshtrain must match each within
 * 1e-5: scalars relative, tensors as max |ours - theirs| / max |theirs| per tensor.
 * Checked three times: one micro-batch; one micro-batch per sequence summed as the pairwise
 * tree (--accum-blocks 0); and one per sequence summed left to right (K = 1, the order
 * PyTorch, Megatron and DeepSpeed accumulate micro-batches in). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mt_checkpoint.h"
#include "mt_gemm.h"
#include "mt_kernels.h"
#include "mt_safetensors.h"
#include "mt_test.h"
#include "mt_train.h"

#define DIR "tests/golden"
#define TOL 1e-5

static double tensor_err(const float *got, const float *want, int64_t n)
{
    double maxd = 0, maxw = 0;
    for (int64_t i = 0; i < n; i++) {
        maxd = fmax(maxd, fabs((double)got[i] - want[i]));
        maxw = fmax(maxw, fabs((double)want[i]));
    }
    return maxw > 0 ? maxd / maxw : maxd;
}

static float scalar(const MtStFile *f, const char *name)
{
    const MtStTensor *t = mt_st_find(f, name);
    MT_ASSERT(t && t->numel == 1, "golden file lacks scalar %s", name);
    return mt_st_f32(f, t)[0];
}

static float meta_f(const MtStFile *f, const char *key)
{
    const char *v = mt_st_meta(f, key);
    MT_ASSERT(v, "golden file lacks metadata %s", key);
    return strtof(v, NULL);
}

static void run(const MtStFile *exp, const MtTokens *tok, int micro, int accum_blocks)
{
    MtTrainConfig tc = {0};
    MT_ASSERT(mt_ckpt_read_config(DIR "/ckpt", &tc.cfg) == MT_OK, "%s", mt_error_msg());
    int B = (int)meta_f(exp, "batch"), T = (int)meta_f(exp, "seq");
    tc.batch = B;
    tc.micro = micro;
    tc.accum_blocks = accum_blocks;
    tc.seq = T;
    tc.threads = 2;
    tc.oc = (MtOptimConfig){.lr = meta_f(exp, "lr"), .min_lr_frac = 1.0f, .warmup = 0, .steps = 0,
                            .beta1 = meta_f(exp, "beta1"), .beta2 = meta_f(exp, "beta2"),
                            .eps = meta_f(exp, "eps"), .weight_decay = meta_f(exp, "weight_decay"),
                            .grad_clip = meta_f(exp, "grad_clip")};
    MtTrainer tr;
    CHECK(mt_trainer_init(&tr, &tc) == MT_OK, "init: %s", mt_error_msg());
    CHECK(mt_ckpt_load_params(DIR "/ckpt", tr.table, tr.nparams, tr.params) == MT_OK, "load: %s", mt_error_msg());
    MT_ASSERT(tok->count >= (int64_t)B * T + 1, "golden token file too short");
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            tr.inputs[b * T + t] = tok->tok[b * T + t];
            tr.targets[b * T + t] = tok->tok[b * T + t + 1];
        }
    float loss = mt_trainer_forward_backward(&tr);
    CHECK_CLOSE(loss, scalar(exp, "loss"), TOL, 0, "loss");
    double worst = 0, wte = 0;
    for (int p = 0; p < tr.nparams; p++) {
        char name[128];
        snprintf(name, sizeof name, "grad.%s", tr.table[p].name);
        const MtStTensor *t = mt_st_find(exp, name);
        CHECK(t && t->numel == tr.table[p].numel, "golden gradient %s", name);
        if (!t)
            continue;
        double e = tensor_err(tr.grads + tr.table[p].offset, mt_st_f32(exp, t), t->numel);
        worst = fmax(worst, e);
        wte = p == 0 ? e : wte; /* the tied embedding: its two parts meet once per accumulation block */
        CHECK(e < TOL, "micro %d: %s relative error %g", micro, name, e);
    }
    printf("micro-batch %d, %s: loss %.8f (torch %.8f), worst gradient error %.4e (wte %.4e)\n", micro,
           B / micro == 1 ? "one micro-batch" : accum_blocks == 1 ? "left to right (K = 1)" : "the pairwise tree",
           loss, scalar(exp, "loss"), worst, wte);
    /* (1) our AdamW on PyTorch's gradients */
    float *params0 = malloc(sizeof(float) * tr.nfloats), *ours = malloc(sizeof(float) * tr.nfloats);
    memcpy(params0, tr.params, sizeof(float) * tr.nfloats);
    for (int p = 0; p < tr.nparams; p++) {
        char name[128];
        snprintf(name, sizeof name, "grad.%s", tr.table[p].name);
        const MtStTensor *t = mt_st_find(exp, name);
        if (t)
            memcpy(ours + tr.table[p].offset, tr.grads + tr.table[p].offset, sizeof(float) * t->numel),
            memcpy(tr.grads + tr.table[p].offset, mt_st_f32(exp, t), sizeof(float) * t->numel);
    }
    MtStepStats st;
    mt_trainer_update(&tr, &st);
    CHECK_CLOSE(st.grad_norm, scalar(exp, "grad_norm"), TOL, 0, "grad norm of PyTorch's gradients");
    worst = 0;
    for (int p = 0; p < tr.nparams; p++) {
        char name[128];
        snprintf(name, sizeof name, "step1.%s", tr.table[p].name);
        const MtStTensor *t = mt_st_find(exp, name);
        CHECK(t && t->numel == tr.table[p].numel, "golden parameter %s", name);
        if (!t)
            continue;
        double e = tensor_err(tr.params + tr.table[p].offset, mt_st_f32(exp, t), t->numel);
        worst = fmax(worst, e);
        CHECK(e < TOL, "AdamW on PyTorch's gradients: %s relative error %g", name, e);
    }
    printf("  AdamW on PyTorch's gradients: worst parameter error %.2e\n", worst);
    /* (2) our whole step: our gradients, our clipping, our AdamW */
    memcpy(tr.params, params0, sizeof(float) * tr.nfloats);
    memcpy(tr.grads, ours, sizeof(float) * tr.nfloats);
    memset(tr.m, 0, sizeof(float) * tr.nfloats);
    memset(tr.v, 0, sizeof(float) * tr.nfloats);
    tr.step = 0;
    mt_trainer_update(&tr, &st);
    CHECK_CLOSE(st.grad_norm, scalar(exp, "grad_norm"), TOL, 0, "grad norm");
    CHECK(st.grad_norm > tc.oc.grad_clip, "the golden step exercises clipping (norm %g, clip %g)",
          st.grad_norm, tc.oc.grad_clip);
    double coef = fmin(1.0, tc.oc.grad_clip / (scalar(exp, "grad_norm") + 1e-6));
    int64_t loose = 0;
    for (int p = 0; p < tr.nparams; p++) {
        char gname[128], pname[128];
        snprintf(gname, sizeof gname, "grad.%s", tr.table[p].name);
        snprintf(pname, sizeof pname, "step1.%s", tr.table[p].name);
        const MtStTensor *tg = mt_st_find(exp, gname), *tp = mt_st_find(exp, pname);
        if (!tg || !tp)
            continue;
        const float *g = mt_st_f32(exp, tg), *w = mt_st_f32(exp, tp), *x = tr.params + tr.table[p].offset;
        double maxw = 0, maxg = 0;
        for (int64_t i = 0; i < tp->numel; i++) {
            maxw = fmax(maxw, fabs(w[i]));
            maxg = fmax(maxg, fabs(g[i]) * coef);
        }
        double dg = TOL * maxg, lr = tc.oc.lr, eps = tc.oc.eps;
        int64_t bad = 0;
        for (int64_t i = 0; i < tp->numel; i++) {
            double gi = fabs(g[i]) * coef;
            double allow = gi <= dg ? 2 * lr : lr * eps * dg / ((gi + eps) * (gi + eps));
            double d = fabs((double)x[i] - w[i]);
            loose += d > TOL * maxw; /* needed the widened tolerance */
            bad += d > TOL * maxw + allow;
        }
        CHECK(bad == 0, "micro %d: %s after our AdamW step: %lld elements out of tolerance", micro,
              pname, (long long)bad);
    }
    printf("  our whole step: %lld of %lld elements needed the widened tolerance (|g| near eps)\n",
           (long long)loose, (long long)tr.nfloats);
    CHECK(loose < tr.nfloats / 1000, "widened tolerance needed by too many elements (%lld)", (long long)loose);
    free(params0);
    free(ours);
    float loss2 = mt_trainer_forward_backward(&tr);
    CHECK_CLOSE(loss2, scalar(exp, "loss2"), TOL, 0, "loss after one step");
    printf("  loss after the step %.8f (torch %.8f)\n", loss2, scalar(exp, "loss2"));
    mt_trainer_free(&tr);
}

int main(void)
{
    mt_gemm_setup(2);
    mt_kernels_set_threads(2);
    MtStFile exp;
    MtTokens tok;
    if (mt_st_open(DIR "/expected.safetensors", &exp) != MT_OK ||
        mt_tokens_read(DIR "/tokens.bin", &tok) != MT_OK) {
        fprintf(stderr, "FAIL: %s (regenerate with scripts/make-golden.sh)\n", mt_error_msg());
        return 1;
    }
    run(&exp, &tok, (int)meta_f(&exp, "batch"), 0);
    run(&exp, &tok, 1, 0);
    run(&exp, &tok, 1, 1);
    mt_st_close(&exp);
    mt_tokens_free(&tok);
    return mt_test_done("test_golden");
}
