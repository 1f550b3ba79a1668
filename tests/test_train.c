/* test_train.c - the canonical arithmetic of one device:
 *  - initialising any slice of a parameter equals the same slice of the whole;
 *  - the step gradient is the balanced pairwise tree of the micro-batch gradients, bit for bit;
 *  - gradient accumulation over micro-batches matches one big micro-batch within fp32 rounding;
 *  - the gradient norm and a whole training step give the same bits with 1 and 2 threads;
 *  - accumulation blocks (--accum-blocks) sum each block left to right, the blocks as the tree;
 *  - the validation loss has the same bits whatever the micro-batch size and however the
 *    windows are shared among ranks (mt_eval_share), and is the mean token loss;
 *  - an untied head started from wte gives the tied model's gradients (wte's split in two). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mt_gemm.h"
#include "mt_kernels.h"
#include "mt_rng.h"
#include "mt_test.h"
#include "mt_train.h"

static MtTrainConfig small_config(int batch, int micro)
{
    MtTrainConfig tc = {0};
    tc.cfg = (MtConfig){.V = 37, .T = 11, .L = 2, .NH = 3, .C = 24};
    tc.batch = batch;
    tc.micro = micro;
    tc.seq = 11;
    tc.threads = 2;
    tc.seed = 5;
    tc.oc = (MtOptimConfig){.lr = 1e-2f, .min_lr_frac = 0.1f, .warmup = 2, .steps = 10, .beta1 = 0.9f,
                            .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_clip = 1.0f};
    return tc;
}

static void fill_batch(MtTrainer *tr)
{
    int64_t n = (int64_t)tr->tc.batch * tr->tc.seq;
    for (int64_t i = 0; i < n; i++) {
        tr->inputs[i] = (int32_t)(mt_rng_u64(9, 1, (uint64_t)i, 0) % tr->tc.cfg.V);
        tr->targets[i] = (int32_t)(mt_rng_u64(9, 2, (uint64_t)i, 0) % tr->tc.cfg.V);
    }
}

static void test_init_slices(void)
{
    MtConfig cfg = {.V = 101, .T = 17, .L = 3, .NH = 2, .C = 30};
    MtParam table[4 + 12 * 3];
    mt_param_table(&cfg, table);
    int n = mt_param_count(&cfg);
    int checked = 0;
    for (int p = 0; p < n; p++) {
        int64_t N = table[p].numel;
        float *whole = malloc(sizeof(float) * N), *part = malloc(sizeof(float) * N);
        mt_param_init(&table[p], cfg.L, 77, 0, N, whole);
        int64_t cuts[3] = {N / 3, N / 2 + 1, N - 1};
        for (int c = 0; c < 3; c++) {
            int64_t lo = cuts[c] < N ? cuts[c] : 0, hi = N;
            mt_param_init(&table[p], cfg.L, 77, lo, hi, part);
            CHECK(memcmp(part, whole + lo, sizeof(float) * (hi - lo)) == 0, "%s slice [%lld,%lld)",
                  table[p].name, (long long)lo, (long long)hi);
            checked++;
        }
        free(whole);
        free(part);
    }
    CHECK(checked == 3 * n, "every parameter checked");
    /* the draws have the intended distribution: weights N(0, 0.02), LN weights 1, biases 0 */
    float *w = malloc(sizeof(float) * table[0].numel);
    mt_param_init(&table[0], cfg.L, 77, 0, table[0].numel, w);
    double m = 0, v = 0;
    for (int64_t i = 0; i < table[0].numel; i++) m += w[i];
    m /= table[0].numel;
    for (int64_t i = 0; i < table[0].numel; i++) v += (w[i] - m) * (w[i] - m);
    v = sqrt(v / table[0].numel);
    CHECK(fabs(m) < 0.002 && fabs(v - 0.02) < 0.002, "wte mean %g std %g", m, v);
    float one, zero;
    mt_param_init(&table[2], cfg.L, 77, 0, 1, &one);  /* h.0.ln_1.weight */
    mt_param_init(&table[3], cfg.L, 77, 0, 1, &zero); /* h.0.ln_1.bias */
    CHECK(one == 1.0f && zero == 0.0f, "ln weight %g bias %g", one, zero);
    CHECK(strcmp(table[6].name, "transformer.h.0.attn.c_proj.weight") == 0 && table[6].residual_proj,
          "c_proj is a residual projection");
    free(w);
}

static float *leaf(MtTrainer *tr, int k, float *loss)
{
    float *g = malloc(sizeof(float) * tr->nfloats);
    *loss = mt_trainer_micro_grad(tr, k, g);
    return g;
}

/* The tree written out by hand for M = 1..5, independently of the recursive code. */
static void test_tree_order(int M)
{
    MtTrainConfig tc = small_config(2 * M, 2);
    MtTrainer tr;
    CHECK(mt_trainer_init(&tr, &tc) == MT_OK, "init");
    fill_batch(&tr);
    float loss = mt_trainer_forward_backward(&tr);
    int64_t n = tr.nfloats;
    float *g[5], l[5];
    for (int k = 0; k < M; k++)
        g[k] = leaf(&tr, k, &l[k]);
    float *want = malloc(sizeof(float) * n), want_loss = 0;
    for (int64_t i = 0; i < n; i++) {
        float x = 0;
        switch (M) {
        case 1: x = g[0][i]; break;
        case 2: x = g[0][i] + g[1][i]; break;
        case 3: x = g[0][i] + (g[1][i] + g[2][i]); break;
        case 4: x = (g[0][i] + g[1][i]) + (g[2][i] + g[3][i]); break;
        case 5: x = (g[0][i] + g[1][i]) + (g[2][i] + (g[3][i] + g[4][i])); break;
        }
        want[i] = x;
    }
    switch (M) {
    case 1: want_loss = l[0]; break;
    case 2: want_loss = l[0] + l[1]; break;
    case 3: want_loss = l[0] + (l[1] + l[2]); break;
    case 4: want_loss = (l[0] + l[1]) + (l[2] + l[3]); break;
    case 5: want_loss = (l[0] + l[1]) + (l[2] + (l[3] + l[4])); break;
    }
    CHECK(memcmp(want, tr.grads, sizeof(float) * n) == 0, "M=%d: step gradient is not the pairwise tree", M);
    CHECK(loss == want_loss, "M=%d: loss %.9g, tree of micro losses %.9g", M, loss, want_loss);
    for (int k = 0; k < M; k++) free(g[k]);
    free(want);
    mt_trainer_free(&tr);
}

/* Accumulating 4 micro-batches of 2 matches one micro-batch of 8 within fp32 rounding. */
static void test_accumulation_matches_big_batch(void)
{
    MtTrainConfig a = small_config(8, 2), b = small_config(8, 8);
    MtTrainer ta, tb;
    CHECK(mt_trainer_init(&ta, &a) == MT_OK && mt_trainer_init(&tb, &b) == MT_OK, "init");
    fill_batch(&ta);
    fill_batch(&tb);
    float la = mt_trainer_forward_backward(&ta), lb = mt_trainer_forward_backward(&tb);
    CHECK_CLOSE(la, lb, 1e-6, 0, "loss, 4x2 vs 1x8");
    double num = 0, den = 0;
    for (int64_t i = 0; i < ta.nfloats; i++) {
        num += (ta.grads[i] - tb.grads[i]) * (double)(ta.grads[i] - tb.grads[i]);
        den += (double)tb.grads[i] * tb.grads[i];
    }
    CHECK(sqrt(num / den) < 1e-5, "gradient 4x2 vs 1x8: relative error %g", sqrt(num / den));
    CHECK(den > 0, "gradient is not zero");
    mt_trainer_free(&ta);
    mt_trainer_free(&tb);
}

/* Three full steps with 1 and with 2 threads: same losses, norms and parameters, bit for bit. */
static void test_threads_same_bits(void)
{
    float *params[2];
    float losses[2][3], norms[2][3];
    int64_t n = 0;
    for (int th = 1; th <= 2; th++) {
        mt_gemm_setup(th);
        mt_kernels_set_threads(th);
        MtTrainConfig tc = small_config(6, 2);
        tc.threads = th;
        MtTrainer tr;
        CHECK(mt_trainer_init(&tr, &tc) == MT_OK, "init");
        MtTokens data = {.count = 5000, .vocab = 37};
        data.tok = malloc(sizeof(int32_t) * data.count);
        for (int64_t i = 0; i < data.count; i++)
            data.tok[i] = (int32_t)((i * 7 + i / 37) % 37); /* learnable: mostly +7 mod 37 */
        for (int s = 0; s < 3; s++) {
            MtStepStats st;
            mt_trainer_step(&tr, &data, &st);
            losses[th - 1][s] = st.loss;
            norms[th - 1][s] = st.grad_norm;
        }
        n = tr.nfloats;
        params[th - 1] = malloc(sizeof(float) * n);
        memcpy(params[th - 1], tr.params, sizeof(float) * n);
        mt_tokens_free(&data);
        mt_trainer_free(&tr);
    }
    CHECK(memcmp(losses[0], losses[1], sizeof losses[0]) == 0, "losses differ between 1 and 2 threads");
    CHECK(memcmp(norms[0], norms[1], sizeof norms[0]) == 0, "norms differ between 1 and 2 threads");
    CHECK(memcmp(params[0], params[1], sizeof(float) * n) == 0, "parameters differ between 1 and 2 threads");
    CHECK(losses[0][2] < losses[0][0], "loss decreases over 3 steps (%g -> %g)", losses[0][0], losses[0][2]);
    free(params[0]);
    free(params[1]);
}

static void test_lr_schedule(void)
{
    MtOptimConfig oc = {.lr = 1.0f, .min_lr_frac = 0.1f, .warmup = 4, .steps = 14};
    CHECK_CLOSE(mt_lr_at(&oc, 0), 0.25, 1e-7, 0, "warm-up step 0");
    CHECK_CLOSE(mt_lr_at(&oc, 3), 1.0, 1e-7, 0, "end of warm-up");
    CHECK_CLOSE(mt_lr_at(&oc, 9), 0.55, 1e-6, 0, "cosine midpoint");
    CHECK_CLOSE(mt_lr_at(&oc, 14), 0.1, 1e-6, 0, "cosine end");
    CHECK_CLOSE(mt_lr_at(&oc, 20), 0.1, 1e-6, 0, "after the end");
}

/* The block's embedding rows: each token's row summed from zero in (micro-batch, position)
 * order, tokens outside the slice [v0, v0 + Vl) left out, rows in the order tokens came,
 * and applied only to the rows of the tokens seen. */
static void test_embsum(void)
{
    MtMem mem;
    mt_mem_init(&mem);
    MtEmbSum es;
    enum { C = 2 };
    CHECK(mt_embsum_init(&es, &mem, 2, 5, C, 5, 4, MT_EMBSUM_OWN) == MT_OK, "init");
    const int32_t t1[4] = {3, 9, 3, 2}, t2[4] = {6, 3, 0, 2};
    const float r1[4 * C] = {1e8f, 1, 5, 5, -1e8f, 1, 7, -0.0f};
    const float r2[4 * C] = {2, 2, 1, 1e8f, 9, 9, 0.5f, 0.25f};
    mt_embsum_index(&es, t1, 4);
    mt_embsum_add(&es, r1);
    mt_embsum_index(&es, t2, 4);
    mt_embsum_add(&es, r2);
    CHECK(es.n == 3 && es.tok[0] == 3 && es.tok[1] == 2 && es.tok[2] == 6, "tokens %lld: %d %d %d", (long long)es.n,
          es.tok[0], es.tok[1], es.tok[2]);
    volatile float z = 0.0f;
    float want[3 * C] = {((z + 1e8f) + -1e8f) + 1, ((z + 1) + 1) + 1e8f, (z + 7) + 0.5f, (z + -0.0f) + 0.25f,
                         z + 2, z + 2};
    CHECK(memcmp(es.rows, want, sizeof want) == 0, "rows %g %g %g %g %g %g", es.rows[0], es.rows[1], es.rows[2],
          es.rows[3], es.rows[4], es.rows[5]);
    float dwte[5 * C], before[5 * C];
    for (int i = 0; i < 5 * C; i++)
        dwte[i] = before[i] = i % 3 ? (float)i * 0.1f : -0.0f;
    mt_embsum_apply(&es, NULL, dwte);
    int ok = 1;
    for (int v = 0; v < 5; v++)
        for (int c = 0; c < C; c++) {
            int j = v + 2 == 3 ? 0 : v + 2 == 2 ? 1 : v + 2 == 6 ? 2 : -1;
            float w = j < 0 ? before[v * C + c] : before[v * C + c] + want[j * C + c];
            ok &= memcmp(&dwte[v * C + c], &w, sizeof w) == 0;
        }
    CHECK(ok, "applied rows");
    mt_embsum_reset(&es);
    mt_embsum_index(&es, t2, 4);
    CHECK(es.n == 3 && es.tok[0] == 6 && es.idx[2] == -1 && es.idx[1] == 1, "after reset: %lld tokens, first %d",
          (long long)es.n, es.tok[0]);
    mt_embsum_free(&es, &mem);
    CHECK(mem.cur[MT_MEM_GRADS] == 0, "rows freed");
}

/* micro-batch k's gradient with wte's head part only; its embedding rows go to es (a
 * block's sum, indexed here) */
static float *head_leaf(MtTrainer *tr, int k, MtEmbSum *es, float *loss)
{
    float *g = calloc((size_t)tr->nfloats, sizeof(float));
    MtWeights v;
    mt_weights_view(&tr->tc.cfg, tr->table, g, &v);
    v.fresh = 1;
    v.esum = es;
    *loss = mt_trainer_micro_grad_views(tr, k, &v, NULL);
    return g;
}

/* Accumulation blocks written out by hand (M = 6): K = 1 left to right, K = 2 two blocks of
 * three, K = 3 three blocks of two (the tree over blocks: (b0) + ((b1) + (b2))), K = 6 the
 * plain tree, each block's embedding rows added to its wte at its end; the gradient buffers
 * the trainer holds are 1 + ceil(log2 K) + (B > 1); and a DDP-like range of whole blocks is
 * the subtree. */
static void test_accum_blocks(void)
{
    enum { M = 6 };
    const int Ks[] = {1, 2, 3, 6};
    for (int q = 0; q < 4; q++) {
        int K = Ks[q], B = M / K;
        MtTrainConfig tc = small_config(2 * M, 2);
        tc.accum_blocks = K;
        MtTrainer tr;
        CHECK(mt_trainer_init(&tr, &tc) == MT_OK, "init K %d", K);
        fill_batch(&tr);
        float loss = mt_trainer_forward_backward(&tr);
        int64_t n = tr.nfloats, C = tc.cfg.C;
        float *g[M], l[M], *b[M];
        MtEmbSum es;
        CHECK(mt_embsum_init(&es, &tr.mem, 0, tc.cfg.V, (int)C, tc.cfg.V, 2 * 11, MT_EMBSUM_OWN) == MT_OK, "embedding sum");
        for (int k = 0; k < M; k++) /* the blocks: head parts left to right, then the rows */
            g[k] = head_leaf(&tr, k, &es, &l[k]);
        mt_embsum_reset(&es);
        for (int j = 0; j < K; j++) {
            b[j] = malloc(sizeof(float) * n);
            for (int64_t i = 0; i < n; i++) {
                float x = g[j * B][i];
                for (int k = j * B + 1; k < (j + 1) * B; k++)
                    x += g[k][i];
                b[j][i] = x;
            }
            for (int k = j * B; k < (j + 1) * B; k++) { /* the block's rows, summed per token */
                float *scratch = head_leaf(&tr, k, &es, &(float){0});
                free(scratch);
            }
            for (int64_t r = 0; r < es.n; r++)
                for (int64_t c = 0; c < C; c++)
                    b[j][tr.table[0].offset + es.tok[r] * C + c] += es.rows[r * C + c];
            mt_embsum_reset(&es);
        }
        float *want = malloc(sizeof(float) * n), want_loss = 0;
        for (int64_t i = 0; i < n; i++)
            want[i] = K == 1 ? b[0][i]
                    : K == 2 ? b[0][i] + b[1][i]
                    : K == 3 ? b[0][i] + (b[1][i] + b[2][i])
                             : (b[0][i] + (b[1][i] + b[2][i])) + (b[3][i] + (b[4][i] + b[5][i]));
        want_loss = K == 1 ? ((((l[0] + l[1]) + l[2]) + l[3]) + l[4]) + l[5]
                  : K == 2 ? ((l[0] + l[1]) + l[2]) + ((l[3] + l[4]) + l[5])
                  : K == 3 ? (l[0] + l[1]) + ((l[2] + l[3]) + (l[4] + l[5]))
                           : (l[0] + (l[1] + l[2])) + (l[3] + (l[4] + l[5]));
        CHECK(memcmp(want, tr.grads, sizeof(float) * n) == 0, "K=%d: the step gradient is not the blocks' order", K);
        CHECK(loss == want_loss, "K=%d: loss %.9g, by hand %.9g", K, loss, want_loss);
        int depth = K == 1 ? 0 : K == 2 ? 1 : K == 3 ? 2 : 3;
        CHECK(mt_accum_block_size(&tc) == B && tr.ntmp == depth && (tr.ubuf[0] != NULL) == (B > 1) &&
              mt_accum_buffers(M, B) == depth + (B > 1), "K=%d: %d tree buffers, leaf buffers %d", K, tr.ntmp,
              tr.ubuf[0] != NULL);
        if (K == 2) { /* the second block alone, as a rank of dp 2 sums it */
            mt_trainer_forward_backward_range(&tr, 3, 6);
            CHECK(memcmp(tr.grads, b[1], sizeof(float) * n) == 0, "K=2: the range [3, 6) is not its block");
        }
        if (K == 1) { /* the rows matter: without them wte differs */
            int differs = 0;
            for (int64_t i = 0; i < tr.table[0].numel; i++)
                differs |= tr.grads[i] != ((((g[0][i] + g[1][i]) + g[2][i]) + g[3][i]) + g[4][i]) + g[5][i];
            CHECK(differs, "K=1: wte's gradient has no embedding rows");
        }
        for (int k = 0; k < M; k++)
            free(g[k]);
        for (int j = 0; j < K; j++)
            free(b[j]);
        free(want);
        mt_embsum_free(&es, &tr.mem);
        mt_trainer_free(&tr);
    }
    MtTrainConfig bad = small_config(12, 2);
    bad.accum_blocks = 4; /* 4 does not divide 6 */
    MtTrainer tr;
    CHECK(mt_trainer_init(&tr, &bad) == MT_EINPUT, "K 4 of 6 micro-batches accepted");
}

/* The validation loss of 23 windows: the same bits with micro-batches of 1, 2, 3, 4, 7 and
 * 23 windows, and when 1..5 ranks each evaluate their share (mt_eval_share) and the sums
 * are put together as the dp gather does; each share's passes are the same count on every
 * rank, and the shares cover every window once.  Summing the token losses in one chain
 * across a pass (as one device did before) changes the last bits with the pass size. */
static void test_eval_layout_free(void)
{
    enum { NW = 23, SEQ = 11 };
    MtTokens data = {malloc(sizeof(int32_t) * (NW * SEQ + 1)), NW * SEQ + 1, 37};
    for (int64_t i = 0; i < data.count; i++)
        data.tok[i] = (int32_t)(mt_rng_u64(13, 3, (uint64_t)i, 0) % 37);
    const int micros[] = {1, 2, 3, 4, 7, NW};
    double ref = 0.0, sums[NW + 8];
    for (int m = 0; m < 6; m++) {
        MtTrainConfig tc = small_config(micros[m], micros[m]);
        MtTrainer tr;
        CHECK(mt_trainer_init(&tr, &tc) == MT_OK, "init");
        double mean = mt_trainer_eval(&tr, &data, NW);
        if (m == 0)
            ref = mean;
        CHECK(memcmp(&mean, &ref, sizeof mean) == 0, "micro %d: loss %.17g, micro 1: %.17g", micros[m], mean, ref);
        if (micros[m] == NW) { /* the mean token loss, as the forward's own sum gives it (to rounding) */
            MtActs a = tr.acts;
            a.B = NW;
            memcpy(tr.inputs, data.tok, sizeof(int32_t) * NW * SEQ);
            memcpy(tr.targets, data.tok + 1, sizeof(int32_t) * NW * SEQ);
            double total = mt_model_forward(&tc.cfg, &tr.w, &a, tr.inputs, tr.targets, 0.0f, &tr.hooks);
            CHECK_CLOSE(mean, total / (NW * SEQ), 1e-12, 0, "mean token loss");
            CHECK(mean > 2.0 && mean < 6.0, "loss %g of a 37-token vocabulary at initialisation", mean);
        }
        for (int D = 1; D <= 5; D++) {
            int covered[NW] = {0}, passes0 = -1;
            memset(sums, 0, sizeof sums);
            for (int r = 0; r < D; r++) {
                int64_t lo, hi;
                int passes;
                int64_t share = mt_eval_share(NW, D, r, micros[m], &lo, &hi, &passes);
                CHECK(share * D >= NW && share * D < NW + D && hi - lo <= share && passes * micros[m] >= share,
                      "D %d rank %d: share %lld [%lld, %lld), %d passes", D, r, (long long)share, (long long)lo,
                      (long long)hi, passes);
                CHECK(passes0 < 0 || passes == passes0, "D %d: rank %d makes %d passes, rank 0 %d", D, r, passes, passes0);
                passes0 = passes;
                for (int64_t i = lo; i < hi; i++)
                    covered[i]++;
                mt_trainer_eval_windows(&tr, &data, lo, hi, passes, sums + r * share);
            }
            int once = 1;
            for (int i = 0; i < NW; i++)
                once &= covered[i] == 1;
            CHECK(once, "D %d: the shares do not cover every window once", D);
            double mean_d = mt_eval_mean(sums, NW, SEQ);
            CHECK(memcmp(&mean_d, &ref, sizeof ref) == 0, "micro %d, %d ranks: loss %.17g, one rank %.17g", micros[m],
                  D, mean_d, ref);
        }
        mt_trainer_free(&tr);
    }
    free(data.tok);
}

/* An untied head (--untie-embeddings) whose lm_head starts equal to wte computes what the
 * tied model does: the same loss and, bit for bit, the same gradient of every tensor, the
 * tied wte's being the sum of the untied wte's (the embedding rows) and lm_head's (the
 * head's part) when the step is one accumulation block (the tied sum is the block's head
 * parts, then its rows: with more blocks the two are grouped otherwise); the table gains
 * lm_head.weight (V, C) as the head unit's last tensor. */
static void test_untied_head(int micro)
{
    MtTrainConfig a = small_config(6, micro), b = small_config(6, micro);
    a.accum_blocks = b.accum_blocks = 1; /* one block: wte's is its head part, then its rows (mt_accum.h) */
    b.cfg.untied = 1;
    CHECK(mt_param_count(&b.cfg) == mt_param_count(&a.cfg) + 1, "untied: one tensor more");
    MtTrainer tt, tu;
    CHECK(mt_trainer_init(&tt, &a) == MT_OK && mt_trainer_init(&tu, &b) == MT_OK, "init");
    const MtParam *head = &tu.table[tu.nparams - 1], *wte = &tu.table[0];
    CHECK(strcmp(head->name, "lm_head.weight") == 0 && head->unit == b.cfg.L + 1 && head->ndim == 2 &&
          head->shape[0] == b.cfg.V && head->shape[1] == b.cfg.C && head->decay, "lm_head.weight: the head's (V, C)");
    CHECK(memcmp(tu.params + head->offset, tu.params + wte->offset, sizeof(float) * (size_t)wte->numel) != 0,
          "lm_head is initialised apart from wte");
    memcpy(tu.params + head->offset, tu.params + wte->offset, sizeof(float) * (size_t)wte->numel);
    fill_batch(&tt);
    fill_batch(&tu);
    float lt = mt_trainer_forward_backward(&tt), lu = mt_trainer_forward_backward(&tu);
    CHECK(lt == lu, "loss: tied %.9g, untied from wte %.9g", lt, lu);
    int same = 0;
    for (int q = 0; q < tt.nparams; q++) {
        const MtParam *x = &tt.table[q], *y = &tu.table[q];
        CHECK(strcmp(x->name, y->name) == 0, "table %d: %s vs %s", q, x->name, y->name);
        if (q == 0)
            continue;
        same += memcmp(tt.grads + x->offset, tu.grads + y->offset, sizeof(float) * (size_t)x->numel) == 0;
    }
    CHECK(same == tt.nparams - 1, "%d of %d tensors other than wte have the tied model's gradient", same,
          tt.nparams - 1);
    int64_t bad = 0, rows = 0;
    for (int64_t i = 0; i < wte->numel; i++) {
        float sum = tu.grads[head->offset + i] + tu.grads[wte->offset + i];
        bad += memcmp(&sum, &tt.grads[i], sizeof sum) != 0;
        rows += tu.grads[wte->offset + i] != 0.0f;
    }
    CHECK(bad == 0, "tied wte gradient != untied wte + lm_head in %lld of %lld elements", (long long)bad,
          (long long)wte->numel);
    CHECK(rows > 0 && rows < wte->numel, "the untied wte gradient holds the embedding rows only (%lld nonzero)",
          (long long)rows);
    mt_trainer_free(&tt);
    mt_trainer_free(&tu);
}

int main(void)
{
    mt_gemm_setup(2);
    mt_kernels_set_threads(2);
    test_init_slices();
    for (int M = 1; M <= 5; M++)
        test_tree_order(M);
    test_accumulation_matches_big_batch();
    test_lr_schedule();
    test_threads_same_bits();
    test_eval_layout_free();
    test_embsum();
    test_accum_blocks();
    test_untied_head(6);
    test_untied_head(2);
    return mt_test_done("test_train");
}
