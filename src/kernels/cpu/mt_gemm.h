/* mt_gemm.h - the one door to the BLAS.
 *
 * Row-major single-precision matrix product
 *     C[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C[m,n]
 * where op(X) is X or its transpose (ta, tb), and lda/ldb/ldc are row strides of the
 * matrices as stored.  Backends (chosen at build time, MT_BLAS): BLIS through its native
 * API (default: its results do not depend on the thread count or on slicing rows and
 * columns, see docs/design.md), or any CBLAS (OpenBLAS).
 *
 * `threads`: 0 = the process-wide count set by mt_gemm_setup(); 1 = single-threaded,
 * for calls made from inside a parallel region.  Either way the result does not depend
 * on the process-wide count: threads = 0 calls take BLIS's packed path (invariant to the
 * thread count and to row slices), threads = 1 calls are always single-threaded (and may
 * take BLIS's faster small-matrix path).
 */
#ifndef MT_GEMM_H
#define MT_GEMM_H

void mt_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc, int threads);
/* Sets the thread count and, for BLIS, the kernel family for this CPU (unless the user
 * chose one with BLIS_ARCH_TYPE).  Call once, before any mt_gemm. */
void mt_gemm_setup(int threads);
/* "BLIS 0.9.0 (skx)" or similar, for logs and benchmarks. */
const char *mt_gemm_name(void);

#endif
