/* matmul.c - the linear layer (Conv1D layout, y = x @ W + b) on mt_gemm. */
#include "mt_gemm.h"
#include "mt_kernels.h"

#include <omp.h>
#include <string.h>

void mt_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                       const float *residual, int N, int C, int OC)
{
    /* out starts as residual + bias, then the product is added by the BLAS (beta = 1) */
    if (residual || bias) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            float *o = out + (int64_t)n * OC;
            const float *r = residual ? residual + (int64_t)n * OC : NULL;
            if (r && bias)
                for (int c = 0; c < OC; c++)
                    o[c] = r[c] + bias[c];
            else if (r) {
                if (o != r)
                    memcpy(o, r, sizeof(float) * OC);
            } else
                memcpy(o, bias, sizeof(float) * OC);
        }
    }
    mt_gemm(0, 0, N, OC, C, 1.0f, inp, C, w, OC, (residual || bias) ? 1.0f : 0.0f, out, OC, 0);
}

void mt_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC, int add)
{
    if (dinp) /* dinp (N,C) = dout (N,OC) @ w^T */
        mt_gemm(0, 1, N, C, OC, 1.0f, dout, OC, w, OC, (add & MT_ADD_DINP) ? 1.0f : 0.0f, dinp, C, 0);
    /* dw (C,OC) = inp^T (C,N) @ dout (N,OC) */
    if (dw)
        mt_gemm(1, 0, C, OC, N, 1.0f, inp, C, dout, OC, (add & MT_ADD_DW) ? 1.0f : 0.0f, dw, OC, 0);
    if (dbias)
        mt_colsum(dbias, dout, N, OC, add & MT_ADD_DW);
}
