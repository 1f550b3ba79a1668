/* mt_backend.h - the one door from the engine to a device: its memory, its copies, its
 * buffer arithmetic, the model's kernels and the optimizer's.
 *
 * Everything above src/kernels (the model, the optimizer, the accumulation order, the
 * techniques) reaches arithmetic on device buffers through the process's backend,
 * mt_be(), and through nothing else: no file above this layer includes a header of
 * src/kernels/cpu.  One process drives one device (as one process drives one GPU in
 * Megatron, DeepSpeed and torchrun), so the backend is a process-wide choice made once at
 * start-up, before any engine is built (mt_backend_set), not an argument of every call.
 * The CPU backend (src/kernels/cpu/backend_cpu.c) is the only one today; a GPU backend
 * fills the same table.
 *
 * Memory: `alloc` returns zeroed device memory (the engine's categorised allocator,
 * mt_mem.h, counts it; buffers are allocated once, up front); only the backend's
 * functions read or write it.  Host data reaches it through `upload` and leaves through
 * `download`; both are complete when they return.  On the CPU device memory is host
 * memory and both are memcpy; the contract is what a GPU backend needs, and a test
 * (test_backend.c) runs the one-device engine on a backend whose memory the host cannot
 * touch, so a bypass is caught by name.
 *
 * Arithmetic: every function gives the same bits on every backend that claims exactness
 * (the CPU's are the reference; their rules are in src/kernels/cpu/mt_kernels.h: outputs
 * first, `add` flags, fixed-order reductions).  Token ids passed to kernels are device
 * memory too.  Scalars that come back (the loss sum) are host values.
 */
#ifndef MT_BACKEND_H
#define MT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

/* The gradient norm's block (mt_optim.h): block_sumsq sums squares in blocks of this many floats. */
#define MT_NORM_BLOCK 512

/* The scalars of one AdamW step (PyTorch's formulation), computed once on the host. */
typedef struct {
    float beta1, beta2, eps;
    float step_size; /* lr / (1 - beta1^t) */
    float bc2_sqrt;  /* sqrt(1 - beta2^t) */
    float decay;     /* 1 - lr * weight_decay for decayed tensors, else 1 */
    int part;        /* what the step writes (MT_ADAMW_*): the same arithmetic whichever */
} MtAdamwCoef;

/* MT_ADAMW_ALL: the parameters and both moments; MT_ADAMW_PARAMS: the parameters only, the
 * moments left as they were (post-validation's update before its check); MT_ADAMW_MOMENTS:
 * the moments only (the same update once checked: its parameters are already written) */
enum { MT_ADAMW_ALL = 0, MT_ADAMW_PARAMS = 1, MT_ADAMW_MOMENTS = 2 };

enum { MT_BE_ADD_DINP = 1, MT_BE_ADD_DW = 2 }; /* matmul_backward's `add` (= MT_ADD_DINP, MT_ADD_DW) */

typedef struct MtBackend {
    const char *name; /* "cpu" */
    int host_memory;  /* 1: device memory is host memory (the CPU): a host view of a device
                       * buffer may be the buffer itself, and an upload or download of a
                       * buffer onto itself is a no-op */

    /* ---- memory and copies ---- */
    void *(*alloc)(size_t bytes);                       /* zeroed; NULL when out of memory */
    void (*free)(void *ptr, size_t bytes);              /* accepts NULL */
    void (*upload)(void *dev, const void *host, size_t bytes);
    void (*download)(void *host, const void *dev, size_t bytes);

    /* ---- buffers (floats) ---- */
    void (*copy)(float *dst, const float *src, int64_t n); /* device to device */
    void (*zero)(float *x, int64_t n);
    void (*add)(float *dst, const float *src, int64_t n);  /* dst[i] += src[i] */
    void (*scale)(float *x, int64_t n, float c);           /* x[i] *= c */

    /* ---- the matrix product (row-major, mt_gemm's arguments; threads 1: from inside a
     * parallel region, 0: the process's threads; the bits do not depend on it) ---- */
    void (*gemm)(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B,
                 int ldb, float beta, float *C, int ldc, int threads);

    /* ---- the model's kernels (src/kernels/cpu/mt_kernels.h states each one) ---- */
    void (*encoder_forward)(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B, int T,
                            int C);
    void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T,
                             int C);
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp, const float *w,
                              const float *b, int N, int C);
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                               const float *w, const float *mean, const float *rstd, int N, int C, int add);
    void (*matmul_forward)(float *out, const float *inp, const float *w, const float *bias, const float *residual,
                           int N, int C, int OC);
    void (*matmul_backward)(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                            const float *w, int N, int C, int OC, int add);
    void (*attention_forward)(float *out, float *lse, float *scratch, const float *qkv, int B, int T, int C,
                              int NH);
    void (*attention_backward)(float *dqkv, float *scratch, const float *dout, const float *out, const float *qkv,
                               const float *lse, int B, int T, int C, int NH);
    int64_t (*attention_scratch_floats)(int T, int hs);
    void (*gelu_forward)(float *out, const float *inp, int64_t n);
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, int64_t n);
    /* returns the losses' sum (host); logits become their gradient when dscale != 0 */
    double (*crossentropy_fused)(float *logits, float *losses, const int32_t *targets, int N, int V,
                                 float dscale);
    void (*colsum)(float *out, const float *x, int N, int C, int add);

    /* ---- tensor parallelism's element-wise kernels (the vocabulary-split embedding and
     * cross-entropy, the row-parallel product's finish; mt_kernels.h) ---- */
    void (*tp_embed_lookup)(float *out, const int32_t *tokens, const float *wte, int64_t v0, int64_t Vl, int N,
                            int C);
    void (*tp_embed_finish)(float *out, const float *wpe, int row0, int rows, int T, int C);
    void (*tp_embed_backward_rows)(float *dwte, const float *dout, const int32_t *tokens, int64_t v0, int64_t Vl,
                                   int N, int C);
    void (*tp_rowpar_finish)(float *out, const float *S, const float *bias, const float *resid, int N, int OC);
    void (*tp_xent_max)(float *mx, const float *logits, int64_t v0, int64_t Vl, int64_t V, int N);
    void (*tp_xent_reduce_max)(float *mx, const float *all, int nranks, int N);
    void (*tp_xent_sums)(float *stats, const float *logits, const float *mx, const int32_t *targets, int64_t v0,
                         int64_t Vl, int64_t V, int N, int nb);
    double (*tp_xent_finish)(float *logits, float *losses, const float *all_stats, int nranks, const float *mx,
                             const int32_t *targets, int64_t v0, int64_t Vl, int64_t V, int N, float dscale);

    /* ---- the optimizer ---- */
    /* one AdamW step on n elements of one tensor (params, grads, moments) */
    void (*adamw)(float *params, const float *grads, float *m, float *v, int64_t n, const MtAdamwCoef *k);
    /* out[b] (host) = the sum of squares of block b of x (MT_NORM_BLOCK floats, the last one
     * short), in double, in the fixed lanes of mt_optim.h */
    void (*block_sumsq)(const float *x, int64_t n, double *out);

    /* waits for the device's queued work (a no-op on the CPU) */
    void (*sync)(void);
} MtBackend;

extern const MtBackend mt_backend_cpu;

/* The process's backend (the CPU's until mt_backend_set). */
extern const MtBackend *mt_backend_now;
static inline const MtBackend *mt_be(void) { return mt_backend_now; }
/* Chooses the process's backend; call before building any engine (its buffers belong to the
 * backend that allocated them). */
void mt_backend_set(const MtBackend *be);
/* The backend named `name` ("cpu"), or NULL. */
const MtBackend *mt_backend_find(const char *name);

#endif
