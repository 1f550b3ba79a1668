/* gemm_cblas.c - mt_gemm on any CBLAS (OpenBLAS).  Results may depend on the thread count. */
#include "mt_gemm.h"

#include <cblas.h>
#include <stdio.h>

void openblas_set_num_threads(int);

static int default_threads = 1;

void mt_gemm_setup(int threads)
{
    default_threads = threads > 0 ? threads : 1;
    openblas_set_num_threads(default_threads);
}

const char *mt_gemm_name(void) { return "OpenBLAS (CBLAS)"; }

void mt_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc, int threads)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
