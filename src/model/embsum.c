/* embsum.c - the token embedding's gradient rows of an accumulation block, summed per token
 * in a compact table (see MtEmbSum in mt_model.h). */
#include "mt_model.h"

#include <stdlib.h>
#include <string.h>

#include "mt_backend.h"

int64_t mt_embsum_cap(int64_t Vl, int64_t block_tokens) { return block_tokens < Vl ? block_tokens : Vl; }

/* a host array of n ints mirrored on the device (the same array where device memory is the host's) */
static int32_t *dev_ints(int64_t n) { return mt_be()->alloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1)); }

MtStatus mt_embsum_init(MtEmbSum *e, MtMem *mem, int64_t v0, int64_t Vl, int C, int64_t cap, int64_t N, int rows)
{
    memset(e, 0, sizeof *e);
    e->v0 = v0;
    e->Vl = Vl;
    e->C = C;
    e->cap = cap;
    e->N = N;
    int host = mt_be()->host_memory;
    e->slot = malloc(sizeof(int32_t) * (size_t)(Vl > 0 ? Vl : 1));
    e->tok = malloc(sizeof(int32_t) * (size_t)(cap > 0 ? cap : 1));
    e->idx = malloc(sizeof(int32_t) * (size_t)(N > 0 ? N : 1));
    e->dtok = host ? e->tok : dev_ints(cap);
    e->didx = host ? e->idx : dev_ints(N);
    if (!e->slot || !e->tok || !e->idx || !e->dtok || !e->didx)
        goto oom;
    for (int64_t v = 0; v < Vl; v++)
        e->slot[v] = -1;
    if (rows == MT_EMBSUM_OWN && !(e->rows = mt_mem_alloc(mem, MT_MEM_GRADS, sizeof(float) * (size_t)(cap * C))))
        goto oom;
    e->own = rows == MT_EMBSUM_OWN;
    return MT_OK;
oom:
    mt_embsum_free(e, mem);
    return mt_error(MT_ENOMEM, "cannot allocate the embedding's gradient rows (%lld tokens of %d)", (long long)cap, C);
}

void mt_embsum_free(MtEmbSum *e, MtMem *mem)
{
    if (e->dtok && e->dtok != e->tok)
        mt_be()->free(e->dtok, sizeof(int32_t) * (size_t)(e->cap > 0 ? e->cap : 1));
    if (e->didx && e->didx != e->idx)
        mt_be()->free(e->didx, sizeof(int32_t) * (size_t)(e->N > 0 ? e->N : 1));
    free(e->slot);
    free(e->tok);
    free(e->idx);
    if (e->own)
        mt_mem_free(mem, MT_MEM_GRADS, e->rows, sizeof(float) * (size_t)(e->cap * e->C));
    memset(e, 0, sizeof *e);
}

void mt_embsum_index(MtEmbSum *e, const int32_t *tokens, int64_t N)
{
    MT_ASSERT(N <= e->N, "%lld positions for an embedding sum of %lld", (long long)N, (long long)e->N);
    int64_t first = e->n;
    for (int64_t i = 0; i < N; i++) {
        int64_t t = (int64_t)tokens[i] - e->v0;
        if (t < 0 || t >= e->Vl) {
            e->idx[i] = -1;
            continue;
        }
        if (e->slot[t] < 0) {
            MT_ASSERT(e->n < e->cap, "more than %lld tokens in one accumulation block", (long long)e->cap);
            e->slot[t] = (int32_t)e->n;
            e->tok[e->n++] = (int32_t)(t + e->v0);
        }
        e->idx[i] = e->slot[t];
    }
    if (e->didx != e->idx)
        mt_be()->upload(e->didx, e->idx, sizeof(int32_t) * (size_t)N);
    if (e->rows && e->n > first) /* the new tokens' rows start from zero */
        mt_be()->zero(e->rows + first * e->C, (e->n - first) * e->C);
    e->nidx = N;
}

void mt_embsum_add(MtEmbSum *e, const float *drows)
{
    mt_be()->tp_embed_backward_rows(e->rows, drows, e->didx, 0, e->n, (int)e->nidx, e->C);
}

void mt_embsum_apply(MtEmbSum *e, const float *rows, float *dwte)
{
    if (e->n == 0)
        return;
    if (e->dtok != e->tok)
        mt_be()->upload(e->dtok, e->tok, sizeof(int32_t) * (size_t)e->n);
    mt_be()->tp_embed_backward_rows(dwte, rows ? rows : e->rows, e->dtok, e->v0, e->Vl, (int)e->n, e->C);
}

void mt_embsum_reset(MtEmbSum *e)
{
    for (int64_t j = 0; j < e->n; j++)
        e->slot[e->tok[j] - e->v0] = -1;
    e->n = 0;
    e->nidx = 0;
}
