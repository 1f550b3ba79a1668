/* fuzz_common.h - helpers of the fuzz targets: the readers under test take paths, so an
 * input is written to a file in a private temporary directory first. */
#ifndef MT_FUZZ_COMMON_H
#define MT_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* the process's scratch directory (made once, removed at exit) */
static const char *fuzz_dir(void);

static char fuzz_dir_path[64];

static void fuzz_dir_remove(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir_path);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz: cannot remove %s\n", fuzz_dir_path);
}

static const char *fuzz_dir(void)
{
    if (!fuzz_dir_path[0]) {
        snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "/tmp/mt-fuzz-XXXXXX");
        if (!mkdtemp(fuzz_dir_path))
            abort();
        atexit(fuzz_dir_remove);
    }
    return fuzz_dir_path;
}

/* data -> <scratch>/name; returns the path (static storage) */
static __attribute__((unused)) const char *fuzz_file(const char *name, const uint8_t *data, size_t size)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
        abort();
    return path;
}

#endif
