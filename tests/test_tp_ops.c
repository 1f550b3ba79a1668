/* test_tp_ops.c - each tensor-parallel split against the whole, without MPI: every rank's
 * share of a split forward or backward computed in one process on odd sizes, the ranks'
 * partial sums combined in the pairwise order the communication layer uses, and the result
 * compared with one device.  With N dividing K the bits must be those of one device with
 * the same K blocks (memcmp); column splits, attention by heads, the vocabulary split of
 * the embedding and the weight gradients must be those of the unsplit kernel; K = 1 must
 * be within rounding of the unsplit kernel. */
#include <stdlib.h>
#include <string.h>

#include "mt_kernels.h"
#include "mt_optim.h"
#include "mt_rng.h"
#include "mt_gemm.h"
#include "mt_tp.h"
#include "mt_test.h"

enum { B = 2, T = 5, NT = B * T, C = 48, NH = 4, V = 37 };

static MtParam mk(const char *name, int64_t d0, int64_t d1)
{
    MtParam p;
    memset(&p, 0, sizeof p);
    snprintf(p.name, sizeof p.name, "%s", name);
    p.ndim = 2;
    p.shape[0] = d0;
    p.shape[1] = d1;
    p.numel = d0 * d1;
    return p;
}
/* activations and weights split like these parameters */
#define HEADS(d0) mk("h.0.attn.c_attn.weight", (d0), 3 * C)
#define COLS(d0, w) mk("h.0.mlp.c_fc.weight", (d0), (w))
#define ROWS(d0, w) mk("h.0.mlp.c_proj.weight", (d0), (w))
#define VOCAB(d1) mk("transformer.wte.weight", V, (d1))

static float *rnd(int64_t n, uint64_t stream)
{
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        x[i] = mt_rng_normal(11, stream, (uint64_t)i);
    return x;
}

/* rank r's slice of a full tensor laid out like p (zero where the slice is padding) */
static float *slice(const MtParam *p, int N, int r, int64_t Vp, const float *full)
{
    int64_t n = mt_tp_local_numel(p, N, Vp);
    float *out = calloc((size_t)n, sizeof(float));
    for (int k = 0; k < mt_tp_nruns(p, N); k++) {
        int64_t b, e, at;
        mt_tp_run(p, N, r, Vp, k, &b, &e, &at);
        memcpy(out + at, full + b, sizeof(float) * (size_t)(e - b));
    }
    return out;
}

static int same(const float *a, const float *b, int64_t n) { return memcmp(a, b, sizeof(float) * (size_t)n) == 0; }

static double maxrel(const float *a, const float *b, int64_t n)
{
    double m = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        m = d > m ? d : m;
        s = fabs(b[i]) > s ? fabs(b[i]) : s;
    }
    return s > 0 ? m / s : m;
}

static float **bufs(int n, int64_t len)
{
    float **b = calloc(8, sizeof(float *));
    for (int i = 0; i < n; i++)
        b[i] = calloc((size_t)len, sizeof(float));
    return b;
}

static void free_bufs(float **b)
{
    for (int i = 0; i < 8; i++)
        free(b[i]);
    free(b);
}

/* the row-parallel forward of inp (NT, Kin) @ w (Kin, C) + bias + resid; inp split like
 * the columns of its producer, w by rows */
static void check_rowpar(int Kin)
{
    float *inp = rnd((int64_t)NT * Kin, 1), *w = rnd((int64_t)Kin * C, 2), *bias = rnd(C, 3), *res = rnd(NT * C, 4);
    float *whole = malloc(sizeof(float) * NT * C), *ref = malloc(sizeof(float) * NT * C), *got = malloc(sizeof(float) * NT * C);
    mt_matmul_forward(whole, inp, w, bias, res, NT, Kin, C);
    MtParam pin = COLS(NT, Kin), pw = ROWS(Kin, C);
    for (int K = 1; K <= 8; K *= 2) {
        float **tmp = bufs(3, NT * C);
        mt_tp_rowpar_sum(ref, tmp, inp, w, NT, Kin, C, K);
        mt_tp_rowpar_finish(ref, ref, bias, res, NT, C);
        if (K == 1)
            CHECK(maxrel(ref, whole, NT * C) < 1e-6, "rowpar K=1 (Kin %d) off the unsplit product by %g", Kin,
                  maxrel(ref, whole, NT * C));
        for (int N = 1; N <= K; N *= 2) {
            float *parts[8];
            for (int r = 0; r < N; r++) {
                float *ir = slice(&pin, N, r, 0, inp), *wr = slice(&pw, N, r, 0, w);
                parts[r] = malloc(sizeof(float) * NT * C);
                mt_tp_rowpar_sum(parts[r], tmp, ir, wr, NT, Kin / N, C, K / N);
                free(ir);
                free(wr);
            }
            mt_tp_tree_add(parts, N, NT * C);
            mt_tp_rowpar_finish(got, parts[0], bias, res, NT, C);
            CHECK(same(got, ref, NT * C), "rowpar Kin %d N=%d K=%d: not the bits of one device with K blocks", Kin, N,
                  K);
            for (int r = 0; r < N; r++)
                free(parts[r]);
        }
        free_bufs(tmp);
    }
    free(inp), free(w), free(bias), free(res), free(whole), free(ref), free(got);
}

/* the column-parallel input gradient of dout (NT, OC) @ w (C, OC)^T */
static void check_colpar(int heads)
{
    int OC = heads ? 3 * C : 4 * C;
    float *dout = rnd((int64_t)NT * OC, 5), *w = rnd((int64_t)C * OC, 6);
    float *whole = malloc(sizeof(float) * NT * C), *ref = malloc(sizeof(float) * NT * C);
    mt_matmul_backward(whole, NULL, NULL, dout, NULL, w, NT, C, OC, 0);
    MtParam pd = heads ? HEADS(NT) : COLS(NT, OC), pw = heads ? HEADS(C) : COLS(C, OC);
    for (int K = 1; K <= 8; K *= 2) {
        float **tmp = bufs(3, NT * C);
        mt_tp_colpar_dinp(ref, tmp, dout, w, NT, C, OC, K, heads);
        if (K == 1)
            CHECK(maxrel(ref, whole, NT * C) < 1e-6, "colpar (heads %d) K=1 off the unsplit product by %g", heads,
                  maxrel(ref, whole, NT * C));
        for (int N = 1; N <= K; N *= 2) {
            float *parts[8];
            for (int r = 0; r < N; r++) {
                float *dr = slice(&pd, N, r, 0, dout), *wr = slice(&pw, N, r, 0, w);
                parts[r] = malloc(sizeof(float) * NT * C);
                mt_tp_colpar_dinp(parts[r], tmp, dr, wr, NT, C, OC / N, K / N, heads);
                free(dr);
                free(wr);
            }
            mt_tp_tree_add(parts, N, NT * C);
            CHECK(same(parts[0], ref, NT * C), "colpar heads %d N=%d K=%d: not the bits of one device with K blocks",
                  heads, N, K);
            for (int r = 0; r < N; r++)
                free(parts[r]);
        }
        free_bufs(tmp);
    }
    free(dout), free(w), free(whole), free(ref);
}

/* column splits, attention by heads and the weight gradients: exact by nature */
static void check_exact_splits(void)
{
    float *x = rnd(NT * C, 7), *wqkv = rnd(C * 3 * C, 8), *bqkv = rnd(3 * C, 9), *wproj = rnd(C * C, 10);
    float *qkv = malloc(sizeof(float) * NT * 3 * C), *atty = malloc(sizeof(float) * NT * C);
    float *att = malloc(sizeof(float) * B * NH * T), *datty = rnd(NT * C, 12); /* the rows' log-sum-exp */
    float *dqkv = malloc(sizeof(float) * NT * 3 * C);
    float *scratch = malloc(sizeof(float) * 8 * mt_attention_scratch_floats(T, C / NH));
    float *dw = malloc(sizeof(float) * C * 3 * C), *db = malloc(sizeof(float) * 3 * C);
    float *dproj = malloc(sizeof(float) * C * C), *dres = rnd(NT * C, 13), *dat = malloc(sizeof(float) * NT * C);
    mt_matmul_forward(qkv, x, wqkv, bqkv, NULL, NT, C, 3 * C);
    mt_attention_forward(atty, att, scratch, qkv, B, T, C, NH);
    mt_attention_backward(dqkv, scratch, datty, atty, qkv, att, B, T, C, NH);
    mt_matmul_backward(NULL, dw, db, dqkv, x, NULL, NT, C, 3 * C, 0);
    mt_matmul_backward(dat, dproj, NULL, dres, atty, wproj, NT, C, C, 0);
    MtParam pq = HEADS(NT), pw = HEADS(C), pb = HEADS(1), pa = COLS(NT, C), pr = ROWS(C, C);
    for (int N = 1; N <= NH; N *= 2) {
        int Cl = C / N, Hl = NH / N;
        for (int r = 0; r < N; r++) {
            float *wr = slice(&pw, N, r, 0, wqkv), *br = slice(&pb, N, r, 0, bqkv), *qr = malloc(sizeof(float) * NT * 3 * Cl);
            float *want = slice(&pq, N, r, 0, qkv);
            mt_matmul_forward(qr, x, wr, br, NULL, NT, C, 3 * Cl);
            CHECK(same(qr, want, NT * 3 * Cl), "c_attn by heads N=%d r=%d: not the whole's columns", N, r);
            float *ar = malloc(sizeof(float) * NT * Cl), *attr = malloc(sizeof(float) * B * Hl * T);
            float *aw = slice(&pa, N, r, 0, atty);
            mt_attention_forward(ar, attr, scratch, want, B, T, Cl, Hl);
            CHECK(same(ar, aw, NT * Cl), "attention of heads N=%d r=%d: not the whole's", N, r);
            int att_ok = 1;
            for (int b = 0; b < B; b++)
                att_ok &= same(attr + (int64_t)b * Hl * T, att + ((int64_t)b * NH + r * Hl) * T, Hl * T);
            CHECK(att_ok, "attention log-sum-exp of heads N=%d r=%d", N, r);
            float *dar = slice(&pa, N, r, 0, datty), *dqr = malloc(sizeof(float) * NT * 3 * Cl);
            mt_attention_backward(dqr, scratch, dar, ar, want, attr, B, T, Cl, Hl);
            float *dqw = slice(&pq, N, r, 0, dqkv);
            CHECK(same(dqr, dqw, NT * 3 * Cl), "attention backward of heads N=%d r=%d", N, r);
            float *dwr = malloc(sizeof(float) * C * 3 * Cl), *dbr = malloc(sizeof(float) * 3 * Cl);
            mt_matmul_backward(NULL, dwr, dbr, dqr, x, NULL, NT, C, 3 * Cl, 0);
            float *dww = slice(&pw, N, r, 0, dw), *dbw = slice(&pb, N, r, 0, db);
            CHECK(same(dwr, dww, C * 3 * Cl) && same(dbr, dbw, 3 * Cl), "c_attn weight gradient N=%d r=%d", N, r);
            /* row-parallel attn.c_proj: its weight gradient and the input gradient of its rows */
            float *wpr = slice(&pr, N, r, 0, wproj), *dpr = malloc(sizeof(float) * Cl * C), *datr = malloc(sizeof(float) * NT * Cl);
            mt_matmul_backward(datr, dpr, NULL, dres, aw, wpr, NT, Cl, C, 0);
            float *dpw = slice(&pr, N, r, 0, dproj), *datw = slice(&pa, N, r, 0, dat);
            CHECK(same(dpr, dpw, Cl * C) && same(datr, datw, NT * Cl), "c_proj rows' gradients N=%d r=%d", N, r);
            free(wr), free(br), free(qr), free(want), free(ar), free(attr), free(aw), free(dar), free(dqr), free(dqw);
            free(dwr), free(dbr), free(dww), free(dbw), free(wpr), free(dpr), free(datr), free(dpw), free(datw);
        }
    }
    free(x), free(wqkv), free(bqkv), free(wproj), free(qkv), free(atty), free(att), free(datty), free(dqkv);
    free(scratch), free(dw), free(db), free(dproj), free(dres), free(dat);
}

/* the vocabulary split: embedding, logits, cross-entropy, the head's input gradient */
static void check_vocab(void)
{
    int32_t tok[NT], tgt[NT];
    for (int n = 0; n < NT; n++) {
        tok[n] = (n * 7 + 3) % V;
        tgt[n] = (n * 11 + 36) % V; /* includes the last real row, 36 */
    }
    float *wte = rnd(V * C, 20), *wpe = rnd(T * C, 21), *lnf = rnd(NT * C, 22), *dres = rnd(NT * C, 23);
    float *enc = malloc(sizeof(float) * NT * C), *dwte = calloc(V * C, sizeof(float));
    mt_encoder_forward(enc, tok, wte, wpe, B, T, C);
    mt_encoder_backward(dwte, NULL, dres, tok, B, T, C);
    float *logit1 = malloc(sizeof(float) * NT * V), *loss1 = malloc(sizeof(float) * NT);
    mt_gemm(0, 1, NT, V, C, 1.0f, lnf, C, wte, C, 0.0f, logit1, V, 0);
    double sum1 = mt_crossentropy_fused(logit1, loss1, tgt, NT, V, 0.05f);
    for (int K = 1; K <= 8; K *= 2) {
        int64_t Vp = mt_tp_vocab_of(V, K);
        MtParam pv = VOCAB(C), pl = COLS(NT, Vp);
        float *wp = calloc((size_t)(Vp * C), sizeof(float)); /* the padded wte of one device */
        memcpy(wp, wte, sizeof(float) * V * C);
        /* one device with K blocks */
        float *lref = malloc(sizeof(float) * NT * Vp), *lossref = malloc(sizeof(float) * NT), mx[NT], st[4 * NT];
        mt_gemm(0, 1, NT, (int)Vp, C, 1.0f, lnf, C, wp, C, 0.0f, lref, (int)Vp, 0);
        mt_tp_xent_max(mx, lref, 0, Vp, V, NT);
        mt_tp_xent_sums(st, lref, mx, tgt, 0, Vp, V, NT, K);
        double sref = mt_tp_xent_finish(lref, lossref, st, 1, mx, tgt, 0, Vp, V, NT, 0.05f);
        float **tmp = bufs(3, NT * C), *dref = malloc(sizeof(float) * NT * C);
        mt_tp_vocab_dinp(dref, tmp, lref, wp, NT, C, (int)Vp, K);
        if (K == 1) {
            float l1pad[NT * 64]; /* the unsplit kernel's dlogits, padded like lref */
            int ok = 1;
            for (int n = 0; n < NT; n++)
                for (int v = 0; v < Vp; v++) {
                    l1pad[n * Vp + v] = v < V ? logit1[n * V + v] : 0.0f;
                    ok &= v < V || lref[n * Vp + v] == 0.0f;
                }
            CHECK(ok, "padded logits' gradient not zero");
            CHECK(maxrel(lossref, loss1, NT) < 1e-6 && fabs(sref - sum1) < 1e-6 * fabs(sum1),
                  "vocabulary-parallel loss K=1 off the fused kernel (%g)", maxrel(lossref, loss1, NT));
            CHECK(maxrel(lref, l1pad, NT * Vp) < 1e-6, "dlogits K=1 off the fused kernel by %g",
                  maxrel(lref, l1pad, NT * Vp));
        }
        for (int N = 1; N <= K; N *= 2) {
            int64_t Vl = Vp / N;
            float *allmx = malloc(sizeof(float) * N * NT), *allst = malloc(sizeof(float) * N * 4 * NT), gmx[NT];
            float *wr[8], *lr[8], *parts[8], *embp[8], loss[NT];
            double s = 0;
            for (int r = 0; r < N; r++) {
                wr[r] = slice(&pv, N, r, Vp, wte);
                lr[r] = malloc(sizeof(float) * NT * Vl);
                mt_gemm(0, 1, NT, (int)Vl, C, 1.0f, lnf, C, wr[r], C, 0.0f, lr[r], (int)Vl, 0);
                mt_tp_xent_max(allmx + r * NT, lr[r], r * Vl, Vl, V, NT);
                embp[r] = malloc(sizeof(float) * NT * C);
                mt_tp_embed_lookup(embp[r], tok, wr[r], r * Vl, Vl, NT, C);
            }
            mt_tp_xent_reduce_max(gmx, allmx, N, NT);
            CHECK(same(gmx, mx, NT), "row maxima N=%d K=%d", N, K);
            for (int r = 0; r < N; r++)
                mt_tp_xent_sums(allst + r * 4 * NT, lr[r], gmx, tgt, r * Vl, Vl, V, NT, K / N);
            int dl_ok = 1, dw_ok = 1;
            for (int r = 0; r < N; r++) {
                s = mt_tp_xent_finish(lr[r], loss, allst, N, gmx, tgt, r * Vl, Vl, V, NT, 0.05f);
                CHECK(same(loss, lossref, NT) && s == sref, "losses N=%d K=%d rank %d", N, K, r);
                float *want = slice(&pl, N, r, Vp, lref);
                dl_ok &= same(lr[r], want, NT * Vl);
                free(want);
                parts[r] = malloc(sizeof(float) * NT * C);
                mt_tp_vocab_dinp(parts[r], tmp, lr[r], wr[r], NT, C, (int)Vl, K / N);
                float *dwr = calloc((size_t)(Vl * C), sizeof(float)), *dww = slice(&pv, N, r, Vp, dwte);
                mt_tp_embed_backward_rows(dwr, dres, tok, r * Vl, Vl, NT, C);
                dw_ok &= same(dwr, dww, Vl * C);
                free(dwr), free(dww);
            }
            CHECK(dl_ok, "dlogits N=%d K=%d: not one device's columns", N, K);
            CHECK(dw_ok, "embedding gradient rows N=%d K=%d", N, K);
            mt_tp_tree_add(parts, N, NT * C);
            CHECK(same(parts[0], dref, NT * C), "head input gradient N=%d K=%d: not one device's bits", N, K);
            mt_tp_tree_add(embp, N, NT * C);
            mt_tp_embed_finish(embp[0], wpe, 0, NT, T, C);
            CHECK(same(embp[0], enc, NT * C), "embedding N=%d K=%d: not the unsplit encoder's bits", N, K);
            for (int r = 0; r < N; r++)
                free(wr[r]), free(lr[r]), free(parts[r]), free(embp[r]);
            free(allmx), free(allst);
        }
        free(wp), free(lref), free(lossref), free(dref);
        free_bufs(tmp);
    }
    free(wte), free(wpe), free(lnf), free(dres), free(enc), free(dwte), free(logit1), free(loss1);
}

/* the sequence split: a rank's rows of the LayerNorm, of the embedding's positions, and the
 * replicated gradients as row blocks, against the whole */
static void check_rows(int R)
{
    enum { TT = 4 }; /* R / 4 sequences of 4 */
    float *x = rnd(R * C, 50), *w = rnd(C, 51), *b = rnd(C, 52), *dout = rnd(R * C, 53), *wpe = rnd(TT * C, 54);
    float *y = malloc(sizeof(float) * R * C), mean[16], rstd[16], *dx = calloc((size_t)R * C, sizeof(float));
    float dw[C], db[C], bsum[C];
    mt_layernorm_forward(y, mean, rstd, x, w, b, R, C);
    mt_layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, R, C, 0);
    mt_colsum(bsum, dout, R, C, 0);
    float *lvl[8];
    for (int d = 0; d < 8; d++)
        lvl[d] = malloc(sizeof(float) * 2 * C);
    for (int K = 1; K <= 8; K *= 2) {
        float ref[2 * C], refb[C];
        mt_tp_rows_grads(ref, lvl, 1, dout, x, mean, rstd, R, C, K);
        mt_tp_rows_grads(refb, lvl, 0, dout, NULL, NULL, NULL, R, C, K);
        if (K == 1)
            CHECK(same(ref, dw, C) && same(ref + C, db, C) && same(refb, bsum, C),
                  "one row block is not the unsplit LayerNorm and bias gradient");
        else
            CHECK(maxrel(ref, dw, C) < 1e-5 && maxrel(ref + C, db, C) < 1e-5 && maxrel(refb, bsum, C) < 1e-5,
                  "row blocks K=%d off the unsplit gradients", K);
        for (int N = 1; N <= K; N *= 2) {
            if (R % N != 0) /* sequence parallelism needs the rows to split evenly */
                continue;
            int rows = R / N;
            float *part[8], *partb[8];
            int fwd = 1;
            for (int r = 0; r < N; r++) {
                int64_t o = (int64_t)r * rows * C;
                float *yr = malloc(sizeof(float) * rows * C), mr[16], sr[16], *dxr = calloc((size_t)rows * C, sizeof(float));
                mt_layernorm_forward(yr, mr, sr, x + o, w, b, rows, C);
                mt_layernorm_backward(dxr, NULL, NULL, dout + o, x + o, w, mr, sr, rows, C, 1);
                fwd &= same(yr, y + o, rows * C) && same(mr, mean + r * rows, rows) && same(dxr, dx + o, rows * C);
                part[r] = malloc(sizeof(float) * 2 * C);
                partb[r] = malloc(sizeof(float) * C);
                mt_tp_rows_grads(part[r], lvl, 1, dout + o, x + o, mr, sr, rows, C, K / N);
                mt_tp_rows_grads(partb[r], lvl, 0, dout + o, NULL, NULL, NULL, rows, C, K / N);
                /* the embedding's positions of these rows */
                float *e = malloc(sizeof(float) * rows * C), *ew = calloc((size_t)R * C, sizeof(float));
                memset(e, 0, sizeof(float) * (size_t)rows * C);
                mt_tp_embed_finish(e, wpe, r * rows, rows, TT, C);
                mt_tp_embed_finish(ew, wpe, 0, R, TT, C);
                fwd &= same(e, ew + o, rows * C);
                free(yr), free(dxr), free(e), free(ew);
            }
            CHECK(fwd, "a rank's rows (N=%d): LayerNorm forward, input gradient or positions differ from the whole", N);
            mt_tp_tree_add(part, N, 2 * C);
            mt_tp_tree_add(partb, N, C);
            CHECK(same(part[0], ref, 2 * C) && same(partb[0], refb, C),
                  "row-block gradients N=%d K=%d: not one device's bits", N, K);
            for (int r = 0; r < N; r++)
                free(part[r]), free(partb[r]);
        }
    }
    for (int d = 0; d < 8; d++)
        free(lvl[d]);
    free(x), free(w), free(b), free(dout), free(wpe), free(y), free(dx);
}

/* the tree is not a left-to-right sum: on these data the two differ (so the bit checks can fail) */
static void check_order_matters(void)
{
    int64_t n = 4096;
    float *p[4], *lr = calloc((size_t)n, sizeof(float));
    for (int j = 0; j < 4; j++) {
        p[j] = rnd(n, 30 + j);
        for (int64_t i = 0; i < n; i++)
            lr[i] += p[j][i];
    }
    mt_tp_tree_add(p, 4, n);
    CHECK(!same(p[0], lr, n), "the pairwise tree and a left-to-right sum agree on every element");
    for (int j = 0; j < 4; j++)
        free(p[j]);
    free(lr);
}

/* the gradient norm: N ranks' parts combined give one device's sum of squares with K blocks */
static void check_norm(void)
{
    MtConfig cfg = {.V = V, .T = T, .L = 2, .NH = NH, .C = C};
    int np = mt_param_count(&cfg);
    MtParam *whole = calloc((size_t)np, sizeof(MtParam)), *loc = calloc((size_t)np, sizeof(MtParam));
    for (int K = 1; K <= 4; K *= 2) {
        int64_t Vp = mt_tp_vocab_of(V, K), n1 = mt_tp_local_table(&cfg, 1, Vp, 1, 1, whole);
        float *g = rnd(n1, 40);
        for (int64_t i = (int64_t)V * C; i < Vp * C; i++)
            g[i] = 0.0f;
        double one[64 + 12 * 2], *all = malloc(sizeof(double) * 4 * (size_t)np);
        mt_tp_sumsq_parts(whole, np, g, K, one);
        double want = mt_tp_sumsq_combine(whole, np, one, 1);
        double plain = mt_grad_sumsq(whole, np, g);
        CHECK(fabs(want - plain) <= 1e-12 * plain, "K=%d norm %.17g off the plain sum %.17g", K, want, plain);
        for (int N = 1; N <= K; N *= 2) {
            int64_t nl = mt_tp_local_table(&cfg, N, Vp, 1, 1, loc);
            for (int r = 0; r < N; r++) {
                float *gl = calloc((size_t)nl, sizeof(float));
                for (int i = 0; i < np; i++) {
                    float *sl = slice(&whole[i], N, r, Vp, g + whole[i].offset);
                    CHECK(mt_tp_local_numel(&whole[i], N, Vp) == loc[i].numel, "local table numel of %s", loc[i].name);
                    memcpy(gl + loc[i].offset, sl, sizeof(float) * (size_t)loc[i].numel);
                    free(sl);
                }
                mt_tp_sumsq_parts(loc, np, gl, K / N, all + (int64_t)r * np);
                free(gl);
            }
            double got = mt_tp_sumsq_combine(loc, np, all, N);
            CHECK(memcmp(&got, &want, sizeof got) == 0, "norm N=%d K=%d: %.17g, one device %.17g", N, K, got, want);
        }
        free(g), free(all);
    }
    free(whole), free(loc);
}

int main(void)
{
    mt_kernels_set_threads(1);
    check_rowpar(C);
    check_rowpar(4 * C);
    check_colpar(1);
    check_colpar(0);
    check_exact_splits();
    check_vocab();
    check_order_matters();
    check_norm();
    check_rows(16);
    check_rows(12); /* blocks of uneven rows for K = 8 */
    return mt_test_done("test_tp_ops");
}
