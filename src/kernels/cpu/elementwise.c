/* elementwise.c - embedding, GELU, fused softmax + cross-entropy, and the vectorisable
 * scalar functions they use.  See mt_kernels.h for the conventions. */
#include "mt_kernels.h"

#include "mathinl.h"

#include <math.h>
#include <omp.h>
#include <string.h>

static int kernel_threads = 1;

void mt_kernels_set_threads(int threads)
{
    kernel_threads = threads > 0 ? threads : 1;
    omp_set_num_threads(kernel_threads);
}

int mt_kernels_threads(void) { return kernel_threads; }

float mt_expf(float x) { return mt_expf_inl(x); }

void mt_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                        int B, int T, int C)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < B * T; n++) {
        const float *e = wte + (int64_t)tokens[n] * C, *p = wpe + (int64_t)(n % T) * C;
        float *o = out + (int64_t)n * C;
        for (int c = 0; c < C; c++)
            o[c] = e[c] + p[c];
    }
}

void mt_channel_range(int C, int *c0, int *c1)
{
    /* contiguous ranges, multiples of 16 channels, one per thread */
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int per = ((C + nt - 1) / nt + 15) / 16 * 16;
    *c0 = t * per < C ? t * per : C;
    *c1 = *c0 + per < C ? *c0 + per : C;
}

void mt_colsum(float *acc, const float *x, int N, int C, int add)
{
#pragma omp parallel
    {
        int c0, c1;
        mt_channel_range(C, &c0, &c1);
        if (!add)
            for (int c = c0; c < c1; c++)
                acc[c] = 0.0f;
        for (int n = 0; n < N; n++) {
            const float *r = x + (int64_t)n * C;
            for (int c = c0; c < c1; c++)
                acc[c] += r[c];
        }
    }
}

void mt_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                         int B, int T, int C)
{
#pragma omp parallel
    {
        int c0, c1;
        mt_channel_range(C, &c0, &c1);
        for (int n = 0; n < B * T; n++) { /* each element's sum in row order, with or without the other */
            const float *d = dout + (int64_t)n * C;
            if (dwte) {
                float *e = dwte + (int64_t)tokens[n] * C;
                for (int c = c0; c < c1; c++)
                    e[c] += d[c];
            }
            if (dwpe) {
                float *p = dwpe + (int64_t)(n % T) * C;
                for (int c = c0; c < c1; c++)
                    p[c] += d[c];
            }
        }
    }
}

/* GELU (tanh form) without cancellation: (1 + tanh(u)) / 2 = sigmoid(2u), so
 * gelu(x) = x * s with s = 1 / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3), and
 * gelu'(x) = s + 2 x s (1 - s) du/dx.  Equal to the tanh form; accurate where it is tiny. */
#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */

/* The GELU loops on explicit vectors: auto-vectorised, GCC if-converted mt_expf_inl's
 * clamps into a second division per vector (measured 1.0 ns per element in L2).  Each
 * lane does the scalar code's operations in its order, so the bits are the scalar code's;
 * the tail runs the scalar code.  16 lanes with AVX-512, 8 elsewhere. */
#if defined(__AVX512F__)
#define GV_LANES 16
typedef float gv __attribute__((vector_size(64)));
typedef int32_t gvi __attribute__((vector_size(64)));
static inline gv gv_max(gv a, gv b)
{
    gvi m = a > b;
    return (gv)((m & (gvi)a) | (~m & (gvi)b));
}
MT_DEFINE_EXPF_VEC(gv_exp, gv, gvi, gv_max)
#else
#define GV_LANES 8
typedef mt_v8 gv;
#define gv_exp mt_expf_v8
#endif

static inline gv gv_load(const float *p)
{
    gv v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void gv_store(float *p, gv v) { memcpy(p, &v, sizeof v); }

static inline float gelu_fwd1(float x)
{
    float u = GELU_S * (x + 0.044715f * x * x * x);
    return x / (1.0f + mt_expf_inl(-2.0f * u));
}

static inline float gelu_bwd1(float x, float dy)
{
    float u = GELU_S * (x + 0.044715f * x * x * x);
    float sg = 1.0f / (1.0f + mt_expf_inl(-2.0f * u));
    float du = GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
    float g = sg + 2.0f * x * sg * (1.0f - sg) * du;
    return g * dy;
}

void mt_gelu_forward(float *out, const float *inp, int64_t n)
{
    int64_t nv = n / GV_LANES;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nv; b++) {
        gv x = gv_load(inp + b * GV_LANES);
        gv u = GELU_S * (x + 0.044715f * x * x * x);
        gv_store(out + b * GV_LANES, x / (1.0f + gv_exp(-2.0f * u)));
    }
    for (int64_t i = nv * GV_LANES; i < n; i++)
        out[i] = gelu_fwd1(inp[i]);
}

void mt_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n)
{
    int64_t nv = n / GV_LANES;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nv; b++) {
        gv x = gv_load(inp + b * GV_LANES);
        gv u = GELU_S * (x + 0.044715f * x * x * x);
        gv sg = 1.0f / (1.0f + gv_exp(-2.0f * u));
        gv du = GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
        gv g = sg + 2.0f * x * sg * (1.0f - sg) * du;
        gv_store(dinp + b * GV_LANES, g * gv_load(dout + b * GV_LANES));
    }
    for (int64_t i = nv * GV_LANES; i < n; i++)
        dinp[i] = gelu_bwd1(inp[i], dout[i]);
}

double mt_crossentropy_fused(float *logits, float *losses, const int32_t *targets, int N, int V,
                             float dscale)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *l = logits + (int64_t)n * V;
        float mx = mt_max_fixed(l, V);
        int t = targets[n], train = dscale != 0.0f;
        float lt = l[t];
        double sum = mt_sum_exp_fixed(l, V, mx, train);
        float lse = mx + (float)log(sum);
        losses[n] = lse - lt;
        if (train) {
            mt_scale_exp(l, V, mx, (float)(1.0 / sum), dscale, 1);
            l[t] -= dscale;
        }
    }
    double total = 0.0;
    for (int n = 0; n < N; n++)
        total += losses[n];
    return total;
}
