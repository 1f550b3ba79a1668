/* prog_stdiff.c - for the shell tests: how far two safetensors files are apart.
 *   prog_stdiff A B   prints, for the tensor where it is largest, the relative difference
 *                     |a - b| / |b| (Euclidean norms over the tensor), then that tensor's
 *                     name; exit 0, or 2 if the files do not hold the same tensors. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mt_safetensors.h"

int main(int argc, char **argv)
{
    MtStFile a, b;
    if (argc != 3 || mt_st_open(argv[1], &a) != MT_OK || mt_st_open(argv[2], &b) != MT_OK) {
        fprintf(stderr, "prog_stdiff: usage: prog_stdiff A B (both readable safetensors files)\n");
        return 2;
    }
    double worst = 0.0;
    const char *where = "-";
    for (int i = 0; i < a.ntensors; i++) {
        const MtStTensor *ta = &a.tensors[i], *tb = mt_st_find(&b, ta->name);
        if (!tb || tb->numel != ta->numel) {
            fprintf(stderr, "prog_stdiff: %s is not in both files with one shape\n", ta->name);
            return 2;
        }
        const float *x = mt_st_f32(&a, ta), *y = mt_st_f32(&b, tb);
        double d = 0.0, n = 0.0;
        for (int64_t k = 0; k < ta->numel; k++) {
            d += ((double)x[k] - y[k]) * ((double)x[k] - y[k]);
            n += (double)y[k] * y[k];
        }
        double rel = n > 0 ? sqrt(d / n) : sqrt(d);
        if (rel > worst) {
            worst = rel;
            where = ta->name;
        }
    }
    printf("%.3e %s\n", worst, where);
    return 0;
}
