/* gemm_blis.c - mt_gemm on BLIS's native API (general strides, per-call threading). */
#include "mt_gemm.h"

#include <blis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char blas_name[96] = "BLIS";
static int default_threads = 1;

void mt_gemm_setup(int threads)
{
    /* Debian's BLIS falls back to its slow 'generic' kernels on CPUs it does not know
     * (measured: 30 vs 60-180 GFLOP/s).  Pick the widest family this CPU supports;
     * BLIS_ARCH_TYPE takes the numeric id of a sub-configuration, so look it up by name. */
    if (!getenv("BLIS_ARCH_TYPE")) {
        const char *want = NULL;
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
            want = "skx";
        else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
            want = __builtin_cpu_is("amd") ? "zen3" : "haswell";
        for (int id = 0; want && id < BLIS_NUM_ARCHS; id++) {
            if (strcmp(bli_arch_string((arch_t)id), want) == 0) {
                char buf[16];
                snprintf(buf, sizeof buf, "%d", id);
                setenv("BLIS_ARCH_TYPE", buf, 1);
                break;
            }
        }
    }
    default_threads = threads > 0 ? threads : 1;
    bli_thread_set_num_threads(default_threads);
    snprintf(blas_name, sizeof blas_name, "BLIS %s (%s)", bli_info_get_version_str(),
             bli_arch_string(bli_arch_query_id()));
}

const char *mt_gemm_name(void) { return blas_name; }

void mt_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc, int threads)
{
    /* BLIS's small-matrix ("sup") path gives different bits for different thread counts
     * on some shapes (measured: 22x37x24 with B transposed); the packed path does not.
     * So calls that may run on several threads take the packed path.  A call pinned to one
     * thread (threads == 1, from inside a parallel loop: attention) runs single-threaded
     * whatever the process's thread count, so its bits are fixed either way, and it may
     * take sup, whose fixed cost per call is ~1.7 us against ~6.9 us (measured; 4-7% of a
     * training step, which makes thousands of such calls). */
    rntm_t rntm;
    bli_rntm_init(&rntm);
    bli_rntm_set_num_threads(threads > 0 ? threads : default_threads, &rntm);
    if (threads != 1)
        bli_rntm_disable_l3_sup(&rntm);
    bli_sgemm_ex(ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
                 m, n, k, &alpha, (float *)A, lda, 1, (float *)B, ldb, 1, &beta, C, ldc, 1,
                 NULL, &rntm);
}
