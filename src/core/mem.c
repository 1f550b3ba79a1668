/* mem.c - categorised, aligned, pre-touched allocations with accounting. */
#include "mt_mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define ALIGN 64
#define HUGE_MIN (2u << 20) /* ask for huge pages from 2 MiB up */

/* aligned (2 MiB from 2 MiB up, with huge pages asked for), untouched; *padded: its size */
static void *reserve(size_t bytes, size_t *padded)
{
    size_t align = bytes >= HUGE_MIN ? HUGE_MIN : ALIGN;
    *padded = (bytes + align - 1) / align * align;
    if (*padded == 0)
        *padded = align;
    void *p = NULL;
    if (posix_memalign(&p, align, *padded) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (*padded >= HUGE_MIN)
        madvise(p, *padded, MADV_HUGEPAGE);
#endif
    return p;
}

void *mt_mem_host_reserve(size_t bytes)
{
    size_t padded;
    return reserve(bytes, &padded);
}

void *mt_mem_host_alloc(size_t bytes)
{
    size_t padded;
    void *p = reserve(bytes, &padded);
    if (p)
        memset(p, 0, padded);
    return p;
}

void mt_mem_host_free(void *p, size_t bytes) { free(p); }

void mt_mem_init(MtMem *mem)
{
    memset(mem, 0, sizeof *mem);
    mem->fail_after = -1;
    mt_mem_use(mem, mt_mem_host_alloc, mt_mem_host_free);
}

void mt_mem_use(MtMem *mem, MtMemAllocFn alloc_fn, MtMemFreeFn free_fn)
{
    mem->alloc_fn = alloc_fn;
    mem->free_fn = free_fn;
}

void *mt_mem_alloc(MtMem *mem, MtMemCat cat, size_t bytes)
{
    if (mem->fail_after == 0)
        return NULL;
    if (mem->fail_after > 0)
        mem->fail_after--;
    void *p = mem->alloc_fn(bytes);
    if (!p)
        return NULL;
    mem->cur[cat] += (int64_t)bytes;
    mem->total_cur += (int64_t)bytes;
    if (mem->cur[cat] > mem->peak[cat])
        mem->peak[cat] = mem->cur[cat];
    if (mem->total_cur > mem->total_peak)
        mem->total_peak = mem->total_cur;
    return p;
}

void mt_mem_free(MtMem *mem, MtMemCat cat, void *ptr, size_t bytes)
{
    if (!ptr)
        return;
    mem->free_fn(ptr, bytes);
    mem->cur[cat] -= (int64_t)bytes;
    mem->total_cur -= (int64_t)bytes;
}

void mt_mem_reset_peaks(MtMem *mem)
{
    for (int c = 0; c < MT_MEM_NCAT; c++)
        mem->peak[c] = mem->cur[c];
    mem->total_peak = mem->total_cur;
}

void mt_mem_set_fail_after(MtMem *mem, int64_t n) { mem->fail_after = n; }

const char *mt_mem_cat_name(MtMemCat cat)
{
    static const char *names[MT_MEM_NCAT] = {"params", "grads", "optimizer", "activations", "other"};
    return cat < MT_MEM_NCAT ? names[cat] : "?";
}

/* a "Vm...:   N kB" line of /proc/self/status, in bytes; -1 if unknown */
static int64_t status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int64_t v = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0) {
            v = strtoll(line + n + 1, NULL, 10) * 1024;
            break;
        }
    if (f)
        fclose(f);
    return v;
}

int64_t mt_mem_rss_mark(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f); /* resets the peak resident size to the current one */
        fclose(f);
    }
    return status_kb("VmRSS");
}

int64_t mt_mem_rss_peak(void) { return status_kb("VmHWM"); }
