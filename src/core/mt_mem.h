/* mt_mem.h - the categorised allocator.
 *
 * Every large buffer of the engine comes from mt_mem_alloc() with a category, so that
 * the bytes held per category (parameters, gradients, optimizer state, activations,
 * other) and their peaks are known exactly: device bytes, from the allocator the backend
 * gives (mt_mem_use).  On the host buffers are 64-byte aligned, backed by transparent huge
 * pages where the kernel allows it, and pre-touched (first touch is slow on this kind of
 * machine: see docs/design.md), so they are meant to be allocated once, up front, never
 * inside a training step.
 *
 * A failing allocation returns NULL and leaves the accounting unchanged.
 * mt_mem_set_fail_after(n) makes the n-th next allocation fail (fault injection).
 */
#ifndef MT_MEM_H
#define MT_MEM_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    MT_MEM_PARAMS,
    MT_MEM_GRADS,
    MT_MEM_OPTIM,
    MT_MEM_ACTS,
    MT_MEM_OTHER,
    MT_MEM_NCAT
} MtMemCat;

/* Where the bytes come from: a device's allocator (zeroed memory, or NULL) and its free.
 * Declared here, filled by the backend (mt_backend.h) that owns the device; the host's
 * aligned, pre-touched memory until mt_mem_use. */
typedef void *(*MtMemAllocFn)(size_t bytes);
typedef void (*MtMemFreeFn)(void *ptr, size_t bytes);

typedef struct {
    MtMemAllocFn alloc_fn;
    MtMemFreeFn free_fn;
    int64_t cur[MT_MEM_NCAT];   /* bytes held now, per category */
    int64_t peak[MT_MEM_NCAT];  /* most bytes held, per category, since the last reset */
    int64_t total_cur;
    int64_t total_peak;         /* most bytes held in all categories together */
    int64_t fail_after;         /* <0: never fail; else fail when it reaches 0 */
} MtMem;

void mt_mem_init(MtMem *mem);
/* The host's bytes (the CPU backend's device): aligned, backed by huge pages where the
 * kernel allows it, zeroed and pre-touched; and their free. */
void *mt_mem_host_alloc(size_t bytes);
void mt_mem_host_free(void *ptr, size_t bytes);
/* The same, neither zeroed nor touched: a large buffer filled from its start, whose pages
 * the kernel maps in huge pages as they are first written (free(): it is malloc's).  NULL
 * when out of memory. */
void *mt_mem_host_reserve(size_t bytes);
/* The device the allocations come from (before the first one). */
void mt_mem_use(MtMem *mem, MtMemAllocFn alloc_fn, MtMemFreeFn free_fn);
/* Returns zeroed, aligned memory owned by the caller (free with mt_mem_free), or NULL. */
void *mt_mem_alloc(MtMem *mem, MtMemCat cat, size_t bytes);
/* Accepts NULL. `bytes` must be the size given to mt_mem_alloc. */
void mt_mem_free(MtMem *mem, MtMemCat cat, void *ptr, size_t bytes);
/* Peaks restart from the bytes held now (called at the start of each step). */
void mt_mem_reset_peaks(MtMem *mem);
void mt_mem_set_fail_after(MtMem *mem, int64_t n);
const char *mt_mem_cat_name(MtMemCat cat);

/* The process's resident bytes now, with its peak reset to it (Linux); then the peak since.
 * For claims about everything a phase holds, the allocator's categories or not. -1: unknown. */
int64_t mt_mem_rss_mark(void);
int64_t mt_mem_rss_peak(void);

#endif
