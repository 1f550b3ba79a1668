/* The fused attention gives the same bits whatever instruction set it was compiled for:
 * the build compiles src/kernels/cpu/attention.c three more times (portable x86-64 without
 * FMA, AVX2 + FMA, AVX-512), with its functions renamed (tests/tests.cmake), and this test
 * runs each variant this CPU can execute against the library's own (-march=native) on odd
 * and model-sized shapes, forward and backward, bit for bit. */
#include "mt_kernels.h"
#include <stdio.h>
#include "mt_test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define VARIANT(sfx)                                                                                          \
    void mt_attention_forward_##sfx(float *out, float *lse, float *scratch, const float *qkv, int B, int T,   \
                                    int C, int NH);                                                            \
    void mt_attention_backward_##sfx(float *dqkv, float *scratch, const float *dout, const float *out,        \
                                     const float *qkv, const float *lse, int B, int T, int C, int NH);        \
    int64_t mt_attention_scratch_floats_##sfx(int T, int hs);
VARIANT(portable)
VARIANT(avx2)
VARIANT(avx512)

typedef struct {
    const char *name;
    int usable;
    void (*fwd)(float *, float *, float *, const float *, int, int, int, int);
    void (*bwd)(float *, float *, const float *, const float *, const float *, const float *, int, int, int, int);
    int64_t (*scratch)(int, int);
} Variant;

static float *randn(int64_t n, uint32_t seed)
{
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 4.0f;
    }
    return x;
}

static void compare(const Variant *v, int B, int T, int C, int NH)
{
    int64_t n = (int64_t)B * T * C, n3 = 3 * n, nl = (int64_t)B * NH * T;
    float *qkv = randn(n3, 7u + T), *dy = randn(n, 11u + C);
    float *y0 = calloc(n, 4), *l0 = calloc(nl, 4), *g0 = calloc(n3, 4), *y1 = calloc(n, 4), *l1 = calloc(nl, 4),
          *g1 = calloc(n3, 4);
    int64_t s0 = 2 * mt_attention_scratch_floats(T, C / NH), s1 = 2 * v->scratch(T, C / NH);
    float *sc0 = calloc(s0, 4), *sc1 = calloc(s1, 4);
    mt_attention_forward(y0, l0, sc0, qkv, B, T, C, NH);
    mt_attention_backward(g0, sc0, dy, y0, qkv, l0, B, T, C, NH);
    v->fwd(y1, l1, sc1, qkv, B, T, C, NH);
    v->bwd(g1, sc1, dy, y1, qkv, l1, B, T, C, NH);
    CHECK(s0 == s1, "%s: scratch %lld floats, native %lld", v->name, (long long)s1, (long long)s0);
    CHECK(memcmp(y0, y1, 4 * (size_t)n) == 0 && memcmp(l0, l1, 4 * (size_t)nl) == 0,
          "%s forward B=%d T=%d C=%d NH=%d: bits differ from the native build", v->name, B, T, C, NH);
    CHECK(memcmp(g0, g1, 4 * (size_t)n3) == 0, "%s backward B=%d T=%d C=%d NH=%d: bits differ from the native build",
          v->name, B, T, C, NH);
    free(qkv), free(dy), free(y0), free(l0), free(g0), free(y1), free(l1), free(g1), free(sc0), free(sc1);
}

int main(void)
{
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && avx2;
    Variant vs[] = {
        {"portable", 1, mt_attention_forward_portable, mt_attention_backward_portable,
         mt_attention_scratch_floats_portable},
        {"avx2", avx2, mt_attention_forward_avx2, mt_attention_backward_avx2, mt_attention_scratch_floats_avx2},
        {"avx512", avx512, mt_attention_forward_avx512, mt_attention_backward_avx512,
         mt_attention_scratch_floats_avx512},
    };
    mt_kernels_set_threads(2);
    int ran = 0;
    for (int i = 0; i < 3; i++) {
        if (!vs[i].usable) {
            printf("test_attention_isa: %s: this CPU cannot run it, skipped\n", vs[i].name);
            continue;
        }
        ran++;
        compare(&vs[i], 2, 5, 12, 3);    /* T below a tile; hs 4 */
        compare(&vs[i], 1, 37, 80, 2);   /* hs 40: whole 16 x 16 blocks and both edges */
        compare(&vs[i], 2, 70, 48, 1);   /* one head, hs 48 */
        compare(&vs[i], 1, 128, 256, 4); /* hs 64, the models' head size */
    }
    CHECK(ran >= 1, "at least the portable variant ran");
    return mt_test_done("test_attention_isa");
}
