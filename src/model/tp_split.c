/* tp_split.c - tensor parallelism's placements: which part of each parameter a tp rank
 * holds (pure; see mt_tp.h). */
#include "mt_tp.h"

#include <stdlib.h>
#include <string.h>


static int ends_with(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

MtTpSplit mt_tp_split(const MtParam *p)
{
    size_t n = strlen(p->name);
    if (strcmp(p->name, "transformer.wte.weight") == 0 || strcmp(p->name, "lm_head.weight") == 0)
        return MT_TP_VOCAB; /* an untied head's weight is split as wte (vocabulary-parallel) */
    if (ends_with(p->name, n, ".attn.c_attn.weight") || ends_with(p->name, n, ".attn.c_attn.bias"))
        return MT_TP_HEADS;
    if (ends_with(p->name, n, ".mlp.c_fc.weight") || ends_with(p->name, n, ".mlp.c_fc.bias"))
        return MT_TP_COLUMNS;
    if (ends_with(p->name, n, ".c_proj.weight")) /* attn.c_proj and mlp.c_proj; their biases are replicated */
        return MT_TP_ROWS;
    return MT_TP_REPLICATED;
}

const char *mt_tp_split_name(MtTpSplit s)
{
    static const char *names[] = {"replicated", "columns", "heads", "rows", "vocabulary"};
    return s >= MT_TP_REPLICATED && s <= MT_TP_VOCAB ? names[s] : "?";
}

MtStatus mt_tp_check(const MtConfig *cfg, int N)
{
    if (N < 1)
        return mt_error(MT_EINPUT, "--tp %d must be 1 or more", N);
    if (cfg->NH % N != 0)
        return mt_error(MT_EINPUT, "--tp %d must divide the %d heads (each rank computes whole heads)", N, cfg->NH);
    if ((4 * cfg->C) % N != 0)
        return mt_error(MT_EINPUT, "--tp %d must divide the MLP width 4 x %d = %d", N, cfg->C, 4 * cfg->C);
    return MT_OK;
}

int64_t mt_tp_vocab_padded(int64_t V, int64_t multiple) { return (V + multiple - 1) / multiple * multiple; }

/* rows and columns of a parameter as a matrix (a vector is one row) */
static int64_t nrows(const MtParam *p) { return p->ndim == 2 ? p->shape[0] : 1; }
static int64_t ncols(const MtParam *p) { return p->ndim == 2 ? p->shape[1] : p->shape[0]; }

int64_t mt_tp_local_numel(const MtParam *p, int N, int64_t Vp)
{
    switch (mt_tp_split(p)) {
    case MT_TP_REPLICATED:
        return p->numel;
    case MT_TP_VOCAB:
        return Vp / N * ncols(p);
    default:
        return p->numel / N;
    }
}

int mt_tp_nruns(const MtParam *p, int N)
{
    switch (mt_tp_split(p)) {
    case MT_TP_COLUMNS:
        return N > 1 ? (int)nrows(p) : 1;
    case MT_TP_HEADS:
        return N > 1 ? 3 * (int)nrows(p) : 1;
    default:
        return 1;
    }
}

void mt_tp_run(const MtParam *p, int N, int r, int64_t Vp, int k, int64_t *begin, int64_t *end, int64_t *at)
{
    int64_t R = nrows(p), OC = ncols(p);
    MtTpSplit s = N > 1 ? mt_tp_split(p) : MT_TP_REPLICATED;
    *begin = *end = *at = 0;
    switch (s) {
    case MT_TP_REPLICATED:
        *begin = 0;
        *end = p->numel;
        return;
    case MT_TP_ROWS: /* rows [r R/N, (r+1) R/N) in one piece */
        *begin = r * (R / N) * OC;
        *end = *begin + (R / N) * OC;
        return;
    case MT_TP_VOCAB: { /* the real rows of [r Vp/N, (r+1) Vp/N); the rest is padding */
        int64_t lo = r * (Vp / N), hi = lo + Vp / N;
        lo = lo < R ? lo : R;
        hi = hi < R ? hi : R;
        *begin = lo * OC;
        *end = hi * OC;
        return;
    }
    case MT_TP_COLUMNS: { /* row k's columns [r OC/N, (r+1) OC/N) */
        int64_t w = OC / N;
        *begin = k * OC + r * w;
        *end = *begin + w;
        *at = k * w;
        return;
    }
    case MT_TP_HEADS: { /* row k/3's part k%3 (q, k or v): columns [r C/N, (r+1) C/N) of it */
        int64_t C = OC / 3, w = C / N, row = k / 3, part = k % 3;
        *begin = row * OC + part * C + r * w;
        *end = *begin + w;
        *at = row * 3 * w + part * w;
        return;
    }
    }
}

void mt_tp_init_slice(const MtParam *p, int L, uint64_t seed, int N, int r, int64_t Vp, float *dst)
{
    memset(dst, 0, sizeof(float) * (size_t)mt_tp_local_numel(p, N, Vp));
    for (int k = 0; k < mt_tp_nruns(p, N); k++) {
        int64_t b, e, at;
        mt_tp_run(p, N, r, Vp, k, &b, &e, &at);
        if (e > b)
            mt_param_init(p, L, seed, b, e, dst + at);
    }
}

int64_t mt_tp_local_table(const MtConfig *cfg, int N, int64_t Vp, int64_t align, int64_t talign, MtParam *t)
{
    int n = mt_param_count(cfg);
    mt_param_table(cfg, t);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        MtParam *p = &t[i];
        if (i > 0 && p->unit != t[i - 1].unit)
            off = (off + align - 1) / align * align;
        off = (off + talign - 1) / talign * talign;
        switch (mt_tp_split(p)) {
        case MT_TP_VOCAB:
            p->shape[0] = Vp / N;
            break;
        case MT_TP_ROWS:
            p->shape[0] /= N;
            break;
        case MT_TP_COLUMNS:
        case MT_TP_HEADS:
            p->shape[p->ndim - 1] /= N;
            break;
        default:
            break;
        }
        p->numel = p->ndim == 2 ? p->shape[0] * p->shape[1] : p->shape[0];
        p->offset = off;
        off += p->numel;
    }
    return (off + align - 1) / align * align;
}
