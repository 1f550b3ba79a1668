/* test_kernels.c - every kernel's forward against a float64 reference, and its backward
 * against central finite differences of that reference, on random inputs of odd sizes;
 * then each kernel run with 1 and 2 threads must give the same bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mt_gemm.h"
#include "mt_kernels.h"
#include "mt_rng.h"
#include "mt_test.h"

static uint64_t counter = 0;
static void fill(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = scale * mt_rng_normal(42, 7, counter++);
}
static double *to_d(const float *x, int64_t n)
{
    double *d = malloc(sizeof(double) * n);
    for (int64_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}
/* ||a - b|| / ||b||, with b in double */
static double rel_err(const float *a, const double *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1e-30));
}

/* ---- float64 references ---- */
static void ref_layernorm(double *y, const double *x, const double *w, const double *b, int N, int C)
{
    for (int n = 0; n < N; n++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[n * C + c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[n * C + c] - m) * (x[n * C + c] - m);
        v /= C;
        double s = 1.0 / sqrt(v + 1e-5);
        for (int c = 0; c < C; c++) y[n * C + c] = (x[n * C + c] - m) * s * w[c] + b[c];
    }
}
static void ref_matmul(double *y, const double *x, const double *w, const double *b, const double *r,
                       int N, int C, int OC)
{
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = (b ? b[o] : 0) + (r ? r[n * OC + o] : 0);
            for (int c = 0; c < C; c++) s += x[n * C + c] * w[c * OC + o];
            y[n * OC + o] = s;
        }
}
static void ref_attention(double *y, const double *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH;
    double *p = malloc(sizeof(double) * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + ((int64_t)b * T + t) * 3 * C + h * hs;
                double mx = -1e300, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const double *k = qkv + ((int64_t)b * T + j) * 3 * C + C + h * hs;
                    double s = 0;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    p[j] = s / sqrt((double)hs);
                    mx = p[j] > mx ? p[j] : mx;
                }
                for (int j = 0; j <= t; j++) { p[j] = exp(p[j] - mx); sum += p[j]; }
                for (int i = 0; i < hs; i++) {
                    double s = 0;
                    for (int j = 0; j <= t; j++)
                        s += p[j] / sum * qkv[((int64_t)b * T + j) * 3 * C + 2 * C + h * hs + i];
                    y[((int64_t)b * T + t) * C + h * hs + i] = s;
                }
            }
    free(p);
}
static double ref_gelu1(double x)
{
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double ref_ce(const double *l, const int32_t *tg, int N, int V)
{
    double total = 0;
    for (int n = 0; n < N; n++) {
        double mx = -1e300, s = 0;
        for (int v = 0; v < V; v++) mx = l[n * V + v] > mx ? l[n * V + v] : mx;
        for (int v = 0; v < V; v++) s += exp(l[n * V + v] - mx);
        total += log(s) + mx - l[n * V + tg[n]];
    }
    return total;
}

/* ---- finite differences: d/dx_i sum(f(x) * dy) ---- */
typedef double (*Objective)(void *ctx);
static void fd_grad(Objective f, void *ctx, double *x, int64_t n, double *g)
{
    for (int64_t i = 0; i < n; i++) {
        double h = 1e-5 * (fabs(x[i]) > 1 ? fabs(x[i]) : 1), x0 = x[i];
        x[i] = x0 + h;
        double fp = f(ctx);
        x[i] = x0 - h;
        double fm = f(ctx);
        x[i] = x0;
        g[i] = (fp - fm) / (2 * h);
    }
}
static double dot(const double *a, const double *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---------------- layernorm ---------------- */
typedef struct { double *x, *w, *b, *dy, *y; int N, C; } LnCtx;
static double ln_obj(void *p)
{
    LnCtx *c = p;
    ref_layernorm(c->y, c->x, c->w, c->b, c->N, c->C);
    return dot(c->y, c->dy, (int64_t)c->N * c->C);
}
static void test_layernorm(int N, int C)
{
    int64_t NC = (int64_t)N * C;
    float *x = malloc(4 * NC), *w = malloc(4 * C), *b = malloc(4 * C), *y = malloc(4 * NC),
          *mean = malloc(4 * N), *rstd = malloc(4 * N), *dy = malloc(4 * NC), *dx = calloc(NC, 4),
          *dw = calloc(C, 4), *db = calloc(C, 4);
    fill(x, NC, 2.0f); fill(w, C, 1.0f); fill(b, C, 1.0f); fill(dy, NC, 1.0f);
    for (int64_t i = 0; i < NC; i++) x[i] += 0.5f;
    LnCtx c = {to_d(x, NC), to_d(w, C), to_d(b, C), to_d(dy, NC), malloc(8 * NC), N, C};
    mt_layernorm_forward(y, mean, rstd, x, w, b, N, C);
    ln_obj(&c);
    CHECK(rel_err(y, c.y, NC) < 1e-6, "layernorm forward N=%d C=%d err %g", N, C, rel_err(y, c.y, NC));
    /* dx accumulates: start from a known value */
    for (int64_t i = 0; i < NC; i++) dx[i] = 0.25f;
    mt_layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, N, C, 1);
    for (int64_t i = 0; i < NC; i++) dx[i] -= 0.25f;
    /* add 0 assigns dw and db: over garbage, the bits of adding to zeros */
    float *dw2 = malloc(4 * C), *db2 = malloc(4 * C);
    for (int i = 0; i < C; i++) dw2[i] = db2[i] = NAN;
    mt_layernorm_backward(NULL, dw2, db2, dy, x, w, mean, rstd, N, C, 0);
    CHECK(memcmp(dw2, dw, 4 * C) == 0 && memcmp(db2, db, 4 * C) == 0, "layernorm: assigned dw/db differ from added");
    free(dw2); free(db2);
    double *g = malloc(8 * NC);
    fd_grad(ln_obj, &c, c.x, NC, g);
    CHECK(rel_err(dx, g, NC) < 1e-4, "layernorm dinp err %g", rel_err(dx, g, NC));
    fd_grad(ln_obj, &c, c.w, C, g);
    CHECK(rel_err(dw, g, C) < 1e-4, "layernorm dw err %g", rel_err(dw, g, C));
    fd_grad(ln_obj, &c, c.b, C, g);
    CHECK(rel_err(db, g, C) < 1e-4, "layernorm db err %g", rel_err(db, g, C));
    free(x); free(w); free(b); free(y); free(mean); free(rstd); free(dy); free(dx); free(dw); free(db);
    free(c.x); free(c.w); free(c.b); free(c.dy); free(c.y); free(g);
}

/* ---------------- matmul ---------------- */
typedef struct { double *x, *w, *b, *r, *dy, *y; int N, C, OC; } MmCtx;
static double mm_obj(void *p)
{
    MmCtx *c = p;
    ref_matmul(c->y, c->x, c->w, c->b, c->r, c->N, c->C, c->OC);
    return dot(c->y, c->dy, (int64_t)c->N * c->OC);
}
static void test_matmul(int N, int C, int OC)
{
    int64_t NC = (int64_t)N * C, CO = (int64_t)C * OC, NO = (int64_t)N * OC;
    float *x = malloc(4 * NC), *w = malloc(4 * CO), *b = malloc(4 * OC), *r = malloc(4 * NO),
          *y = malloc(4 * NO), *dy = malloc(4 * NO), *dx = malloc(4 * NC), *dw = calloc(CO, 4),
          *db = calloc(OC, 4);
    fill(x, NC, 1); fill(w, CO, 1); fill(b, OC, 1); fill(r, NO, 1); fill(dy, NO, 1);
    MmCtx c = {to_d(x, NC), to_d(w, CO), to_d(b, OC), to_d(r, NO), to_d(dy, NO), malloc(8 * NO), N, C, OC};
    mt_matmul_forward(y, x, w, b, r, N, C, OC);
    mm_obj(&c);
    CHECK(rel_err(y, c.y, NO) < 1e-6, "matmul forward err %g", rel_err(y, c.y, NO));
    /* in place over the residual, and without bias or residual */
    float *y2 = malloc(4 * NO);
    memcpy(y2, r, 4 * NO);
    mt_matmul_forward(y2, x, w, b, y2, N, C, OC);
    CHECK(memcmp(y2, y, 4 * NO) == 0, "matmul forward in place over the residual differs");
    mt_matmul_forward(y2, x, w, NULL, NULL, N, C, OC);
    double *yd = malloc(8 * NO);
    ref_matmul(yd, c.x, c.w, NULL, NULL, N, C, OC);
    CHECK(rel_err(y2, yd, NO) < 1e-6, "matmul forward without bias err %g", rel_err(y2, yd, NO));
    mt_matmul_backward(dx, dw, db, dy, x, w, N, C, OC, MT_ADD_DW);
    /* without MT_ADD_DW, dw and dbias are assigned: over garbage, the bits of adding to zeros */
    float *dw3 = malloc(4 * CO), *db3 = malloc(4 * OC);
    for (int64_t i = 0; i < CO; i++) dw3[i] = NAN;
    for (int i = 0; i < OC; i++) db3[i] = NAN;
    mt_matmul_backward(NULL, dw3, db3, dy, x, NULL, N, C, OC, 0);
    CHECK(memcmp(dw3, dw, 4 * CO) == 0 && memcmp(db3, db, 4 * OC) == 0, "matmul: assigned dw/dbias differ from added");
    free(dw3); free(db3);
    double *g = malloc(8 * (CO > NO ? (CO > NC ? CO : NC) : (NO > NC ? NO : NC)));
    fd_grad(mm_obj, &c, c.x, NC, g);
    CHECK(rel_err(dx, g, NC) < 1e-4, "matmul dinp err %g", rel_err(dx, g, NC));
    fd_grad(mm_obj, &c, c.w, CO, g);
    CHECK(rel_err(dw, g, CO) < 1e-4, "matmul dw err %g", rel_err(dw, g, CO));
    fd_grad(mm_obj, &c, c.b, OC, g);
    CHECK(rel_err(db, g, OC) < 1e-4, "matmul dbias err %g", rel_err(db, g, OC));
    /* MT_ADD_DINP adds to what dinp held */
    float *dx2 = malloc(4 * NC);
    for (int64_t i = 0; i < NC; i++) dx2[i] = 1.0f;
    memset(dw, 0, 4 * CO);
    mt_matmul_backward(dx2, dw, NULL, dy, x, w, N, C, OC, MT_ADD_DINP | MT_ADD_DW);
    double maxd = 0;
    for (int64_t i = 0; i < NC; i++) maxd = fmax(maxd, fabs(dx2[i] - 1.0f - dx[i]));
    CHECK(maxd < 1e-5, "matmul accumulate: max diff %g", maxd);
    free(x); free(w); free(b); free(r); free(y); free(y2); free(yd); free(dy); free(dx); free(dx2);
    free(dw); free(db); free(c.x); free(c.w); free(c.b); free(c.r); free(c.dy); free(c.y); free(g);
}

/* ---------------- attention ---------------- */
typedef struct { double *qkv, *dy, *y; int B, T, C, NH; } AtCtx;
static double at_obj(void *p)
{
    AtCtx *c = p;
    ref_attention(c->y, c->qkv, c->B, c->T, c->C, c->NH);
    return dot(c->y, c->dy, (int64_t)c->B * c->T * c->C);
}
static void test_attention(int B, int T, int C, int NH)
{
    int64_t n3 = (int64_t)B * T * 3 * C, n = (int64_t)B * T * C;
    float *qkv = malloc(4 * n3), *y = malloc(4 * n), *lse = malloc(4L * B * NH * T), *dy = malloc(4 * n),
          *dqkv = malloc(4 * n3), *scratch = malloc(4 * 8 * mt_attention_scratch_floats(T, C / NH));
    fill(qkv, n3, 1.0f); fill(dy, n, 1.0f);
    AtCtx c = {to_d(qkv, n3), to_d(dy, n), malloc(8 * n), B, T, C, NH};
    mt_attention_forward(y, lse, scratch, qkv, B, T, C, NH);
    at_obj(&c);
    CHECK(rel_err(y, c.y, n) < 1e-6, "attention forward B=%d T=%d C=%d NH=%d err %g", B, T, C, NH,
          rel_err(y, c.y, n));
    mt_attention_backward(dqkv, scratch, dy, y, qkv, lse, B, T, C, NH);
    double *g = malloc(8 * n3);
    fd_grad(at_obj, &c, c.qkv, n3, g);
    CHECK(rel_err(dqkv, g, n3) < 1e-4, "attention dqkv err %g", rel_err(dqkv, g, n3));
    free(qkv); free(y); free(lse); free(dy); free(dqkv); free(scratch); free(c.qkv); free(c.dy);
    free(c.y); free(g);
}

/* ---------------- gelu, cross-entropy, encoder ---------------- */
static void test_gelu(int64_t n)
{
    float *x = malloc(4 * n), *y = malloc(4 * n), *dy = malloc(4 * n), *dx = malloc(4 * n);
    fill(x, n, 3.0f); fill(dy, n, 1.0f);
    x[0] = 0; x[1] = 12; x[2] = -12; x[3] = 1e-4f; x[4] = -5;
    mt_gelu_forward(y, x, n);
    mt_gelu_backward(dx, x, dy, n);
    double ey = 0, eg = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = ref_gelu1(x[i]), h = 1e-5;
        double d = (ref_gelu1(x[i] + h) - ref_gelu1(x[i] - h)) / (2 * h) * dy[i];
        ey = fmax(ey, fabs(y[i] - r) / (fabs(r) + 1e-3));
        eg = fmax(eg, fabs(dx[i] - d) / (fabs(d) + 1e-3));
    }
    CHECK(ey < 2e-6, "gelu forward max rel err %g", ey);
    CHECK(eg < 1e-4, "gelu backward max rel err %g", eg);
    free(x); free(y); free(dy); free(dx);
}

/* The vector lanes and the scalar tail give the same bits, so a layout that cuts the
 * buffer elsewhere (tensor parallelism splits 4C) cannot change GELU: each element alone
 * (n = 1 runs the tail) against the whole buffer, over the clamps, tiny values, zeros of
 * both signs, infinities and NaN. */
static void test_gelu_lanes(void)
{
    enum { n = 4099 };
    static float x[n], dy[n], y[n], dx[n];
    fill(x, n, 30.0f);
    fill(dy, n, 1.0f);
    float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-45f, 60.0f, -60.0f, 100.0f, -100.0f, 1e30f, -1e30f,
                       INFINITY, -INFINITY, NAN, 3.9f, -3.9f, 7.5f, -7.5f};
    for (int i = 0; i < (int)(sizeof special / sizeof special[0]); i++)
        x[37 * i + 5] = special[i];
    mt_gelu_forward(y, x, n);
    mt_gelu_backward(dx, x, dy, n);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        float y1, dx1;
        mt_gelu_forward(&y1, &x[i], 1);
        mt_gelu_backward(&dx1, &x[i], &dy[i], 1);
        bad += memcmp(&y1, &y[i], 4) != 0 || memcmp(&dx1, &dx[i], 4) != 0;
    }
    CHECK(bad == 0, "gelu: %d elements differ between the vector lanes and the scalar tail", bad);
}

typedef struct { double *l; const int32_t *tg; int N, V; } CeCtx;
static double ce_obj(void *p) { CeCtx *c = p; return ref_ce(c->l, c->tg, c->N, c->V); }
static void test_crossentropy(int N, int V)
{
    int64_t nv = (int64_t)N * V;
    float *l = malloc(4 * nv), *losses = malloc(4 * N);
    int32_t *tg = malloc(4 * N);
    fill(l, nv, 3.0f);
    for (int n = 0; n < N; n++) tg[n] = (int32_t)(mt_rng_u64(1, 2, n, 0) % V);
    CeCtx c = {to_d(l, nv), tg, N, V};
    double want = ce_obj(&c);
    float dscale = 1.0f / N;
    double got = mt_crossentropy_fused(l, losses, tg, N, V, dscale);
    CHECK_CLOSE(got, want, 1e-6, 0, "cross-entropy loss");
    double *g = malloc(8 * nv);
    fd_grad(ce_obj, &c, c.l, nv, g);
    for (int64_t i = 0; i < nv; i++) g[i] *= dscale;
    CHECK(rel_err(l, g, nv) < 1e-4, "cross-entropy dlogits err %g", rel_err(l, g, nv));
    free(l); free(losses); free(tg); free(c.l); free(g);
}

static void test_encoder(int B, int T, int C, int V)
{
    int64_t n = (int64_t)B * T * C;
    int32_t *tok = malloc(4L * B * T);
    for (int i = 0; i < B * T; i++) tok[i] = (int32_t)(mt_rng_u64(3, 3, i, 0) % V);
    float *wte = malloc(4L * V * C), *wpe = malloc(4L * T * C), *y = malloc(4 * n), *dy = malloc(4 * n),
          *dwte = calloc((size_t)V * C, 4), *dwpe = calloc((size_t)T * C, 4);
    fill(wte, (int64_t)V * C, 1); fill(wpe, (int64_t)T * C, 1); fill(dy, n, 1);
    mt_encoder_forward(y, tok, wte, wpe, B, T, C);
    int bad = 0;
    for (int i = 0; i < B * T; i++)
        for (int c = 0; c < C; c++)
            bad += y[(int64_t)i * C + c] != wte[(int64_t)tok[i] * C + c] + wpe[(int64_t)(i % T) * C + c];
    CHECK(bad == 0, "encoder forward: %d wrong elements", bad);
    mt_encoder_backward(dwte, dwpe, dy, tok, B, T, C);
    double *rw = calloc((size_t)V * C, 8), *rp = calloc((size_t)T * C, 8);
    for (int i = 0; i < B * T; i++)
        for (int c = 0; c < C; c++) {
            rw[(int64_t)tok[i] * C + c] += dy[(int64_t)i * C + c];
            rp[(int64_t)(i % T) * C + c] += dy[(int64_t)i * C + c];
        }
    CHECK(rel_err(dwte, rw, (int64_t)V * C) < 1e-6, "encoder dwte");
    CHECK(rel_err(dwpe, rp, (int64_t)T * C) < 1e-6, "encoder dwpe");
    free(tok); free(wte); free(wpe); free(y); free(dy); free(dwte); free(dwpe); free(rw); free(rp);
}

static void test_scalar_functions(void)
{
    double e1 = 0;
    for (int i = -8700; i <= 8000; i++) {
        float x = i * 0.01f;
        e1 = fmax(e1, fabs(mt_expf(x) - exp(x)) / exp(x));
    }
    CHECK(e1 < 3e-7, "mt_expf max relative error %g", e1);
    CHECK(mt_expf(-200.0f) < 1e-37f && mt_expf(200.0f) > 1e34f, "mt_expf saturates");
}

/* ---- the same bits with 1 and 2 threads, on sizes where the split matters ---- */
static void test_thread_independence(void)
{
    int B = 3, T = 37, C = 48, NH = 3, N = B * T, V = 67;
    int64_t NC = (int64_t)N * C;
    float *x = malloc(4 * NC), *w = malloc(4L * C * 4 * C), *b = malloc(4L * 4 * C),
          *dy = malloc(4L * N * 4 * C), *qkv = malloc(4 * NC * 3), *l = malloc(4L * N * V);
    int32_t *tg = malloc(4L * N);
    fill(x, NC, 1); fill(w, (int64_t)C * 4 * C, 1); fill(b, 4 * C, 1); fill(dy, (int64_t)N * 4 * C, 1);
    fill(qkv, NC * 3, 1); fill(l, (int64_t)N * V, 2);
    for (int i = 0; i < N; i++) tg[i] = i % V;
    float *out[2][8];
    for (int th = 1; th <= 2; th++) {
        mt_kernels_set_threads(th);
        mt_gemm_setup(th);
        float **o = out[th - 1];
        o[0] = malloc(4L * N * 4 * C); o[1] = calloc((size_t)C * 4 * C, 4); o[2] = calloc(4 * C, 4);
        o[3] = malloc(4 * NC); o[4] = malloc(4L * B * NH * T); o[5] = malloc(4 * NC * 3);
        o[6] = malloc(4L * N * V); o[7] = calloc(NC, 4);
        float *scratch = malloc(4 * 8 * mt_attention_scratch_floats(T, C / NH)), *mean = malloc(4L * N), *rstd = malloc(4L * N),
              *dwl = calloc(C, 4), *dbl = calloc(C, 4);
        mt_matmul_forward(o[0], x, w, b, NULL, N, C, 4 * C);
        mt_matmul_backward(o[7], o[1], o[2], dy, x, w, N, C, 4 * C, MT_ADD_DINP | MT_ADD_DW);
        mt_attention_forward(o[3], o[4], scratch, qkv, B, T, C, NH);
        mt_attention_backward(o[5], scratch, o[3], o[3], qkv, o[4], B, T, C, NH);
        memcpy(o[6], l, 4L * N * V);
        mt_crossentropy_fused(o[6], mean, tg, N, V, 0.5f);
        mt_layernorm_forward(o[3], mean, rstd, x, b, b + C, N, C);
        mt_layernorm_backward(o[7], dwl, dbl, o[3], x, b, mean, rstd, N, C, 1);
        memcpy(o[2], dwl, 4L * C);
        free(scratch); free(mean); free(rstd); free(dwl); free(dbl);
    }
    int64_t sizes[8] = {(int64_t)N * 4 * C, (int64_t)C * 4 * C, C, NC, (int64_t)B * NH * T, NC * 3,
                        (int64_t)N * V, NC};
    for (int k = 0; k < 8; k++) {
        CHECK(memcmp(out[0][k], out[1][k], 4 * sizes[k]) == 0, "output %d differs between 1 and 2 threads", k);
        free(out[0][k]);
        free(out[1][k]);
    }
    free(x); free(w); free(b); free(dy); free(qkv); free(l); free(tg);
}

/* mt_gemm: a call with threads = 0 gives the same bits whether the process runs 1 or 2
 * threads, and a block of rows computed alone equals the same rows of the whole product; a
 * call pinned to one thread gives the same bits whatever the process's count.  Every
 * transpose combination, odd shapes. */
static void test_gemm_invariance(void)
{
    int shapes[][3] = {{22, 37, 24}, {24, 72, 22}, {111, 192, 48}, {37, 29, 409}, {300, 257, 64}, {5, 3, 2}};
    for (int s = 0; s < 6; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                size_t mn = (size_t)m * n;
                float *A = malloc(4L * m * k), *B = malloc(4L * k * n), *C[5];
                for (int i = 0; i < 5; i++)
                    C[i] = malloc(4 * mn);
                fill(A, (int64_t)m * k, 1);
                fill(B, (int64_t)k * n, 1);
                int lda = ta ? m : k, ldb = tb ? k : n;
                int r0 = m / 3, rows = m - r0; /* rows [r0, m) alone: A's rows start at r0 */
                const float *Ar = ta ? A + r0 : A + (int64_t)r0 * k;
                mt_gemm_setup(1);
                mt_gemm(ta, tb, m, n, k, 1.0f, A, lda, B, ldb, 0.0f, C[0], n, 0);
                mt_gemm(ta, tb, m, n, k, 1.0f, A, lda, B, ldb, 0.0f, C[1], n, 1);
                mt_gemm_setup(2);
                mt_gemm(ta, tb, m, n, k, 1.0f, A, lda, B, ldb, 0.0f, C[2], n, 0);
                mt_gemm(ta, tb, m, n, k, 1.0f, A, lda, B, ldb, 0.0f, C[3], n, 1);
                mt_gemm(ta, tb, rows, n, k, 1.0f, Ar, lda, B, ldb, 0.0f, C[4], n, 0);
                CHECK(memcmp(C[0], C[2], 4 * mn) == 0, "gemm %dx%dx%d ta%d tb%d: 1 vs 2 process threads", m, n, k, ta, tb);
                CHECK(memcmp(C[1], C[3], 4 * mn) == 0, "gemm %dx%dx%d ta%d tb%d: pinned call differs", m, n, k, ta, tb);
                CHECK(memcmp(C[4], C[2] + (int64_t)r0 * n, 4L * rows * n) == 0,
                      "gemm %dx%dx%d ta%d tb%d: row slice differs", m, n, k, ta, tb);
                double e = 0;
                for (size_t i = 0; i < mn; i++)
                    e = fmax(e, fabs(C[1][i] - C[0][i]) / (1 + fabs(C[0][i])));
                CHECK(e < 1e-4, "gemm %dx%dx%d: the two paths disagree by %g", m, n, k, e);
                free(A); free(B);
                for (int i = 0; i < 5; i++)
                    free(C[i]);
            }
    mt_gemm_setup(2);
}

int main(void)
{
    mt_gemm_setup(2);
    mt_kernels_set_threads(2);
    test_scalar_functions();
    test_layernorm(7, 13);
    test_layernorm(5, 40);
    test_matmul(7, 13, 11);
    test_matmul(9, 17, 33);
    test_attention(2, 5, 12, 3);   /* T below one query tile (4) and one key block (16) */
    test_attention(1, 9, 8, 1);    /* one head */
    test_attention(2, 37, 48, 4);  /* T past two key blocks, not a multiple of the tile; hs 12 */
    test_attention(1, 21, 80, 5);  /* hs 16, one key block and a tail */
    test_attention(2, 37, 80, 2);  /* hs 40: whole 16 x 16 transposed blocks with both edges */
    test_gelu(1001);
    test_gelu_lanes();
    test_crossentropy(7, 29);
    test_encoder(3, 7, 19, 23);
    test_thread_independence();
    test_gemm_invariance();
    return mt_test_done("test_kernels");
}
