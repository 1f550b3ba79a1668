/* prog_stdiff.c - for the shell tests: how far two safetensors files are apart.
 *   prog_stdiff A B   prints, for the tensor where it is largest, the relative difference
 *                     |a - b| / |b| (Euclidean norms over the tensor), then that tensor's
 *                     name, then the largest such difference of the attention key biases
 *                     (the middle third of every attn.c_attn.bias), which the first figure
 *                     leaves out; exit 0, or 2 if the files do not hold the same tensors.
 * Why the key bias apart: its gradient is exactly zero in exact arithmetic (a constant
 * added to every key shifts a query's scores alike, and the softmax ignores it), so what
 * it holds after training is rounding noise that AdamW scales to lr-sized steps: two runs
 * that sum in different orders drift apart there by design, whatever the layout. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mt_safetensors.h"

static double rel(const float *x, const float *y, int64_t lo, int64_t hi, int64_t skip_lo, int64_t skip_hi)
{
    double d = 0.0, n = 0.0;
    for (int64_t k = lo; k < hi; k++) {
        if (k >= skip_lo && k < skip_hi)
            continue;
        d += ((double)x[k] - y[k]) * ((double)x[k] - y[k]);
        n += (double)y[k] * y[k];
    }
    return n > 0 ? sqrt(d / n) : sqrt(d);
}

int main(int argc, char **argv)
{
    MtStFile a, b;
    if (argc != 3 || mt_st_open(argv[1], &a) != MT_OK || mt_st_open(argv[2], &b) != MT_OK) {
        fprintf(stderr, "prog_stdiff: usage: prog_stdiff A B (both readable safetensors files)\n");
        return 2;
    }
    double worst = 0.0, key = 0.0;
    const char *where = "-";
    for (int i = 0; i < a.ntensors; i++) {
        const MtStTensor *ta = &a.tensors[i], *tb = mt_st_find(&b, ta->name);
        if (!tb || tb->numel != ta->numel) {
            fprintf(stderr, "prog_stdiff: %s is not in both files with one shape\n", ta->name);
            return 2;
        }
        const float *x = mt_st_f32(&a, ta), *y = mt_st_f32(&b, tb);
        int64_t n = ta->numel, k0 = 0, k1 = 0;
        if (strstr(ta->name, ".attn.c_attn.bias")) { /* q | k | v: the middle third apart */
            k0 = n / 3;
            k1 = 2 * n / 3;
            double r = rel(x, y, k0, k1, 0, 0);
            key = r > key ? r : key;
        }
        double r = rel(x, y, 0, n, k0, k1);
        if (r > worst) {
            worst = r;
            where = ta->name;
        }
    }
    printf("%.3e %s (key biases apart: %.3e)\n", worst, where, key);
    return 0;
}
