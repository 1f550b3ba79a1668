/* mt_mem.h - the categorised allocator.
 *
 * Every large buffer of the engine comes from mt_mem_alloc() with a category, so that
 * the bytes held per category (parameters, gradients, optimizer state, activations,
 * other) and their peaks are known exactly.  Buffers are 64-byte aligned, backed by
 * transparent huge pages where the kernel allows it, and pre-touched (first touch is
 * slow on this kind of machine: see docs/design.md), so they are meant to be
 * allocated once, up front, never inside a training step.
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

typedef struct {
    int64_t cur[MT_MEM_NCAT];   /* bytes held now, per category */
    int64_t peak[MT_MEM_NCAT];  /* most bytes held, per category, since the last reset */
    int64_t total_cur;
    int64_t total_peak;         /* most bytes held in all categories together */
    int64_t fail_after;         /* <0: never fail; else fail when it reaches 0 */
} MtMem;

void mt_mem_init(MtMem *mem);
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
