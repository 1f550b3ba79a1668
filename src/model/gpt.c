/* gpt.c - GPT-2 parameter table, initialisation, activations and the unit-by-unit
 * forward and backward passes. */
#include "mt_model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mt_backend.h"
#include "mt_rng.h"
#include "mt_tp.h"

MtStatus mt_config_check(const MtConfig *c)
{
    if (c->V < 2 || c->V > (1 << 24))
        return mt_error(MT_EINPUT, "vocab size %d must be between 2 and 16777216", c->V);
    if (c->T < 1 || c->T > 65536)
        return mt_error(MT_EINPUT, "context length %d must be between 1 and 65536", c->T);
    if (c->L < 1 || c->L > MT_MAX_LAYERS)
        return mt_error(MT_EINPUT, "layers %d must be between 1 and %d", c->L, MT_MAX_LAYERS);
    if (c->C < 1 || c->C > 65536)
        return mt_error(MT_EINPUT, "width %d must be between 1 and 65536", c->C);
    if (c->NH < 1 || c->C % c->NH != 0)
        return mt_error(MT_EINPUT, "heads %d must divide the width %d", c->NH, c->C);
    return MT_OK;
}

int mt_param_count(const MtConfig *cfg) { return 4 + 12 * cfg->L + (cfg->untied != 0); }

/* name: len characters and its NUL (LIT: a literal and its length) */
#define LIT(s) s, sizeof s - 1
static void add(MtParam *t, int *i, int64_t *off, const char *name, size_t len, int ndim, int64_t d0,
                int64_t d1, int unit, int decay, int resid)
{
    MtParam *p = &t[(*i)++];
    memset(p, 0, sizeof *p);
    memcpy(p->name, name, len < MT_NAME_MAX ? len + 1 : MT_NAME_MAX - 1);
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = d1;
    p->numel = ndim == 2 ? d0 * d1 : d0;
    p->offset = *off;
    p->unit = unit;
    p->decay = decay;
    p->residual_proj = resid;
    *off += p->numel;
}

int64_t mt_param_table(const MtConfig *cfg, MtParam *t) { return mt_param_table_aligned(cfg, t, 1); }

/* rounds the running offset up to a multiple of align (the end of a unit) */
static void pad_unit(int64_t *off, int64_t align) { *off = (*off + align - 1) / align * align; }

int64_t mt_param_table_aligned(const MtConfig *cfg, MtParam *t, int64_t align)
{
    int i = 0;
    int64_t off = 0, C = cfg->C;
    char n[MT_NAME_MAX];
    add(t, &i, &off, LIT("transformer.wte.weight"), 2, cfg->V, C, 0, 1, 0);
    add(t, &i, &off, LIT("transformer.wpe.weight"), 2, cfg->T, C, 0, 1, 0);
    pad_unit(&off, align);
    for (int l = 0; l < cfg->L; l++) {
        /* "transformer.h.<l>." once per block (the planner builds tables by the thousand) */
        int k = snprintf(n, sizeof n, "transformer.h.%d.", l);
#define P(suffix, nd, d0, d1, dec, res)                                  \
    memcpy(n + k, suffix, sizeof suffix);                                \
    add(t, &i, &off, n, (size_t)k + sizeof suffix - 1, nd, d0, d1, 1 + l, dec, res)
        P("ln_1.weight", 1, C, 0, 0, 0);
        P("ln_1.bias", 1, C, 0, 0, 0);
        P("attn.c_attn.weight", 2, C, 3 * C, 1, 0);
        P("attn.c_attn.bias", 1, 3 * C, 0, 0, 0);
        P("attn.c_proj.weight", 2, C, C, 1, 1);
        P("attn.c_proj.bias", 1, C, 0, 0, 0);
        P("ln_2.weight", 1, C, 0, 0, 0);
        P("ln_2.bias", 1, C, 0, 0, 0);
        P("mlp.c_fc.weight", 2, C, 4 * C, 1, 0);
        P("mlp.c_fc.bias", 1, 4 * C, 0, 0, 0);
        P("mlp.c_proj.weight", 2, 4 * C, C, 1, 1);
        P("mlp.c_proj.bias", 1, C, 0, 0, 0);
#undef P
        pad_unit(&off, align);
    }
    add(t, &i, &off, LIT("transformer.ln_f.weight"), 1, C, 0, cfg->L + 1, 0, 0);
    add(t, &i, &off, LIT("transformer.ln_f.bias"), 1, C, 0, cfg->L + 1, 0, 0);
    if (cfg->untied)
        add(t, &i, &off, LIT("lm_head.weight"), 2, cfg->V, C, cfg->L + 1, 1, 0);
    pad_unit(&off, align);
    return off;
}

void mt_unit_span(const MtParam *t, int nparams, int unit, int64_t *start, int64_t *end)
{
    *start = -1;
    *end = -1;
    for (int p = 0; p < nparams; p++)
        if (t[p].unit == unit) {
            if (*start < 0)
                *start = t[p].offset;
            *end = t[p].offset + t[p].numel;
        }
}

void mt_weights_view(const MtConfig *cfg, const MtParam *t, float *base, MtWeights *w)
{
    int i = 0;
    w->wte = base + t[i++].offset;
    w->wpe = base + t[i++].offset;
    for (int l = 0; l < cfg->L; l++) {
        MtBlockWeights *h = &w->h[l];
        float **slots[12] = {&h->ln1w, &h->ln1b, &h->qkvw, &h->qkvb, &h->attprojw, &h->attprojb,
                             &h->ln2w, &h->ln2b, &h->fcw, &h->fcb, &h->fcprojw, &h->fcprojb};
        for (int k = 0; k < 12; k++)
            *slots[k] = base + t[i++].offset;
    }
    w->lnfw = base + t[i++].offset;
    w->lnfb = base + t[i++].offset;
    w->lmw = cfg->untied ? base + t[i++].offset : NULL;
    w->fresh = 0;
    w->esum = NULL;
}

void mt_weights_view_unit(const MtConfig *cfg, const MtParam *t, int nparams, int unit, float *base,
                          MtWeights *w)
{
    int64_t start, end;
    mt_unit_span(t, nparams, unit, &start, &end);
#define AT(i) (base + (t[i].offset - start))
    if (unit == 0) {
        w->wte = AT(0);
        w->wpe = AT(1);
    } else if (unit <= cfg->L) {
        int i = 2 + 12 * (unit - 1);
        MtBlockWeights *h = &w->h[unit - 1];
        float **slots[12] = {&h->ln1w, &h->ln1b, &h->qkvw, &h->qkvb, &h->attprojw, &h->attprojb,
                             &h->ln2w, &h->ln2b, &h->fcw, &h->fcb, &h->fcprojw, &h->fcprojb};
        for (int k = 0; k < 12; k++)
            *slots[k] = AT(i + k);
    } else {
        w->lnfw = AT(2 + 12 * cfg->L);
        w->lnfb = AT(3 + 12 * cfg->L);
        w->lmw = cfg->untied ? AT(4 + 12 * cfg->L) : NULL;
    }
#undef AT
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

void mt_param_init(const MtParam *p, int L, uint64_t seed, int64_t begin, int64_t end, float *dst)
{
    int is_ln = strstr(p->name, ".ln_") != NULL;
    if (ends_with(p->name, ".bias")) {
        memset(dst, 0, sizeof(float) * (size_t)(end - begin));
        return;
    }
    if (is_ln) {
        for (int64_t i = begin; i < end; i++)
            dst[i - begin] = 1.0f;
        return;
    }
    float std = 0.02f;
    if (p->residual_proj)
        std = 0.02f / sqrtf(2.0f * (float)L);
    uint64_t stream = mt_hash_str(p->name);
    for (int64_t i = begin; i < end; i++)
        dst[i - begin] = std * mt_rng_normal(seed, stream, (uint64_t)i);
}

/* ---- activations ---- */

typedef struct {
    float **slot;
    int64_t n;
} Slot;

/* the 13 per-layer buffers, in order; which of them the recompute mode shares */
enum { K_LN1, K_LN1M, K_LN1R, K_QKV, K_ATTY, K_ATT, K_RES2, K_LN2, K_LN2M, K_LN2R, K_FCH, K_FCHG, K_RES3, NK };

static float **layer_buf(MtActs *a, int k)
{
    float **b[NK] = {a->ln1, a->ln1_mean, a->ln1_rstd, a->qkv, a->atty, a->att, a->res2,
                     a->ln2, a->ln2_mean, a->ln2_rstd, a->fch, a->fch_gelu, a->res3};
    return b[k];
}

/* floats of per-layer buffer k (a tensor-parallel rank's share: mt_tp_local) */
static int64_t layer_floats(const MtConfig *cfg, const MtTpLocal *lo, int B, int T, int k)
{
    int64_t N = (int64_t)B * T, C = cfg->C, rows = lo->rows;
    switch (k) {
    case K_LN1M: case K_LN1R: case K_LN2M: case K_LN2R: return rows;
    case K_QKV: return N * 3 * lo->Cl;
    case K_ATTY: return N * lo->Cl;
    case K_ATT: return (int64_t)B * lo->Hl * T; /* the rows' log-sum-exp */
    case K_FCH: case K_FCHG: return N * lo->Fl;
    case K_RES2: case K_RES3: return rows * C;
    default: return N * C; /* ln1, ln2: with sequence parallelism the gathered rows */
    }
}

static int shared_under(int mode, int k)
{
    return mode == MT_RECOMPUTE_FULL ? k != K_RES3 : mode == MT_RECOMPUTE_ATTN ? k == K_ATT : 0;
}

/* Lists every activation buffer of shape sh with its size; used both to size and to carve. */
static int act_slots(const MtConfig *cfg, MtActs *a, int B, int T, int threads, const MtActsShape *sh, Slot *s)
{
    int64_t N = (int64_t)B * T, C = cfg->C;
    MtTpLocal lo = mt_tp_local(cfg, sh->tp, (int)N);
    int k = 0;
#define S(ptr, count) s[k++] = (Slot){&(ptr), (count)}
    if (sh->embed || sh->input)
        S(a->encoded, lo.rows * C);
    for (int l = sh->l0; l < sh->l1; l++)
        for (int b = 0; b < NK; b++)
            if (!shared_under(sh->recompute, b))
                S(layer_buf(a, b)[l], layer_floats(cfg, &lo, B, T, b));
    if (sh->rc_buffers)
        for (int b = 0; b < NK; b++)
            if (shared_under(sh->recompute, b))
                S(a->shared[b], layer_floats(cfg, &lo, B, T, b));
    if (sh->head) {
        S(a->lnf, N * C);
        S(a->lnf_mean, lo.rows);
        S(a->lnf_rstd, lo.rows);
        S(a->logits, N * lo.Vl);
        S(a->losses, N);
    }
    if (sh->scratch) {
        S(a->dres, lo.rows * C);
        S(a->dln, N * C);
        S(a->datty, N * lo.Cl);
        S(a->dqkv, N * 3 * lo.Cl);
        S(a->dfch, N * lo.Fl);
        S(a->datt_scratch, (int64_t)threads * mt_be()->attention_scratch_floats(T, C / cfg->NH));
    }
    if (sh->tp) { /* the blocked sums' scratch (mt_tp.h) */
        S(a->tpsum, N * C);
        for (int d = 0; d < mt_tp_tree_depth(lo.nb); d++)
            S(a->tptmp[d], N * C);
        S(a->tpmx, N);
        S(a->tpstats, 4 * N);
        S(a->tpgather, 4 * N * sh->tp->N);
        S(a->tpcol, 8 * 2 * C);
        if (sh->tp->seqpar) {
            S(a->tpfull, N * C);
            S(a->tprep, 6 * C);
        }
    }
#undef S
    return k;
}

void mt_acts_share(MtActs *a, const MtActs *from)
{
    for (int b = 0; b < NK; b++) {
        if (!shared_under(a->recompute, b))
            continue;
        a->shared[b] = from->shared[b];
        for (int l = a->l0; l < a->l1; l++)
            layer_buf(a, b)[l] = a->shared[b];
    }
}

#define MAX_SLOTS (48 + 13 * MT_MAX_LAYERS)

MtActsShape mt_acts_whole(const MtConfig *cfg) { return (MtActsShape){0, cfg->L, 1, 1, 0, 1, 0, 0}; }

int64_t mt_acts_floats_shape(const MtConfig *cfg, int B, int T, int threads, const MtActsShape *sh)
{
    MtActs a;
    Slot s[MAX_SLOTS];
    int k = act_slots(cfg, &a, B, T, threads, sh, s);
    int64_t total = 0;
    for (int i = 0; i < k; i++)
        total += (s[i].n + 15) / 16 * 16; /* each buffer 64-byte aligned */
    return total;
}

int64_t mt_acts_floats(const MtConfig *cfg, int B, int T, int threads)
{
    MtActsShape sh = mt_acts_whole(cfg);
    return mt_acts_floats_shape(cfg, B, T, threads, &sh);
}

/* Points a's buffers into `block` (mt_acts_floats_shape floats) laid out for shape sh. */
static void carve(MtActs *a, float *block, const MtConfig *cfg, int B, int T, int threads, const MtActsShape *sh)
{
    Slot s[MAX_SLOTS];
    int k = act_slots(cfg, a, B, T, threads, sh, s);
    float *p = block;
    for (int i = 0; i < k; i++) {
        *s[i].slot = p;
        p += (s[i].n + 15) / 16 * 16;
    }
    a->recompute = sh->recompute;
    a->tp = sh->tp;
    a->l0 = sh->l0;
    a->l1 = sh->l1;
    if (sh->rc_buffers)
        mt_acts_share(a, a);
}

MtStatus mt_acts_alloc_shape(MtActs *a, MtMem *mem, const MtConfig *cfg, int B, int T, int threads,
                             const MtActsShape *sh)
{
    memset(a, 0, sizeof *a);
    a->B = B;
    a->T = T;
    a->floats = mt_acts_floats_shape(cfg, B, T, threads, sh);
    a->block = mt_mem_alloc(mem, MT_MEM_ACTS, sizeof(float) * (size_t)a->floats);
    if (!a->block)
        return mt_error(MT_ENOMEM, "cannot allocate %.1f MiB of activations",
                        a->floats * 4.0 / (1 << 20));
    carve(a, a->block, cfg, B, T, threads, sh);
    return MT_OK;
}

void mt_acts_view_shape(MtActs *a, const MtActs *owner, const MtConfig *cfg, int B, int T, int threads,
                        const MtActsShape *sh)
{
    MT_ASSERT(owner->block && mt_acts_floats_shape(cfg, B, T, threads, sh) == owner->floats,
              "an activation view of %lld floats over a set of %lld",
              (long long)mt_acts_floats_shape(cfg, B, T, threads, sh), (long long)owner->floats);
    memset(a, 0, sizeof *a);
    a->B = B;
    a->T = T;
    carve(a, owner->block, cfg, B, T, threads, sh); /* block stays NULL: mt_acts_free leaves the owner's */
}

MtStatus mt_acts_alloc(MtActs *a, MtMem *mem, const MtConfig *cfg, int B, int T, int threads)
{
    MtActsShape sh = mt_acts_whole(cfg);
    return mt_acts_alloc_shape(a, mem, cfg, B, T, threads, &sh);
}

void mt_acts_free(MtActs *a, MtMem *mem)
{
    if (a->block)
        mt_mem_free(mem, MT_MEM_ACTS, a->block, sizeof(float) * (size_t)a->floats);
    a->block = NULL;
}

/* ---- forward and backward, unit by unit ---- */

#define POLL(a)                      \
    do {                             \
        if ((a)->poll)               \
            (a)->poll((a)->poll_ctx); \
    } while (0)

static void block_forward(const MtConfig *cfg, const MtBlockWeights *w, MtActs *a, int l,
                          const float *x)
{
    if (a->tp) {
        mt_tp_block_forward(cfg, w, a, l, x);
        return;
    }
    int B = a->B, T = a->T, C = cfg->C, N = B * T;
    mt_be()->layernorm_forward(a->ln1[l], a->ln1_mean[l], a->ln1_rstd[l], x, w->ln1w, w->ln1b, N, C);
    POLL(a);
    mt_be()->matmul_forward(a->qkv[l], a->ln1[l], w->qkvw, w->qkvb, NULL, N, C, 3 * C);
    POLL(a);
    mt_be()->attention_forward(a->atty[l], a->att[l], a->datt_scratch, a->qkv[l], B, T, C, cfg->NH);
    POLL(a);
    mt_be()->matmul_forward(a->res2[l], a->atty[l], w->attprojw, w->attprojb, x, N, C, C);
    POLL(a);
    mt_be()->layernorm_forward(a->ln2[l], a->ln2_mean[l], a->ln2_rstd[l], a->res2[l], w->ln2w, w->ln2b, N, C);
    POLL(a);
    mt_be()->matmul_forward(a->fch[l], a->ln2[l], w->fcw, w->fcb, NULL, N, C, 4 * C);
    POLL(a);
    mt_be()->gelu_forward(a->fch_gelu[l], a->fch[l], (int64_t)N * 4 * C);
    POLL(a);
    mt_be()->matmul_forward(a->res3[l], a->fch_gelu[l], w->fcprojw, w->fcprojb, a->res2[l], N, 4 * C, C);
    POLL(a);
}

/* On entry a->dres holds the gradient of the block's output; on return, of its input. */
static void block_backward(const MtConfig *cfg, const MtBlockWeights *w, const MtBlockWeights *g,
                           MtActs *a, int l, const float *x, int add)
{
    if (a->tp) {
        mt_tp_block_backward(cfg, w, g, a, l, x, add);
        return;
    }
    int B = a->B, T = a->T, C = cfg->C, N = B * T;
    /* MLP: res3 = res2 + gelu(ln2 @ fc) @ fcproj */
    mt_be()->matmul_backward(a->dfch, g->fcprojw, g->fcprojb, a->dres, a->fch_gelu[l], w->fcprojw, N,
                       4 * C, C, add * MT_BE_ADD_DW);
    POLL(a);
    mt_be()->gelu_backward(a->dfch, a->fch[l], a->dfch, (int64_t)N * 4 * C);
    POLL(a);
    mt_be()->matmul_backward(a->dln, g->fcw, g->fcb, a->dfch, a->ln2[l], w->fcw, N, C, 4 * C, add * MT_BE_ADD_DW);
    POLL(a);
    mt_be()->layernorm_backward(a->dres, g->ln2w, g->ln2b, a->dln, a->res2[l], w->ln2w, a->ln2_mean[l],
                          a->ln2_rstd[l], N, C, add);
    POLL(a);
    /* attention: res2 = x + attn(ln1(x)) @ attproj */
    mt_be()->matmul_backward(a->datty, g->attprojw, g->attprojb, a->dres, a->atty[l], w->attprojw, N, C,
                       C, add * MT_BE_ADD_DW);
    POLL(a);
    mt_be()->attention_backward(a->dqkv, a->datt_scratch, a->datty, a->atty[l], a->qkv[l], a->att[l], B, T, C, cfg->NH);
    POLL(a);
    mt_be()->matmul_backward(a->dln, g->qkvw, g->qkvb, a->dqkv, a->ln1[l], w->qkvw, N, C, 3 * C, add * MT_BE_ADD_DW);
    POLL(a);
    mt_be()->layernorm_backward(a->dres, g->ln1w, g->ln1b, a->dln, x, w->ln1w, a->ln1_mean[l],
                          a->ln1_rstd[l], N, C, add);
    POLL(a);
}

static void hook(const MtUnitHooks *h, MtUnitEvent ev, int unit)
{
    if (h && h->fn)
        h->fn(h->ctx, ev, unit);
}

void mt_model_head_dweight(const MtConfig *cfg, const MtWeights *g, int N, int Vl, const float *dlogits,
                           const float *lnf)
{
    float *dw = mt_head_weight(cfg, g);
    if (!dw) /* NULL: later (mt_model_head_dwte) */
        return;
    if (cfg->untied && g->fresh) /* the head unit's own tensor, assigned as the others: from zero */
        mt_be()->zero(dw, (int64_t)Vl * cfg->C);
    mt_model_head_dwte_rows(cfg, N, Vl, dlogits, lnf, dw);
}
#define head_dweight mt_model_head_dweight

void mt_model_embed_forward(const MtConfig *cfg, const MtWeights *w, MtActs *a, const int32_t *tokens)
{
    if (a->tp) {
        mt_tp_embed_forward(cfg, w, a, tokens);
        return;
    }
    mt_be()->encoder_forward(a->encoded, tokens, w->wte, w->wpe, a->B, a->T, cfg->C);
    POLL(a);
}

void mt_model_block_forward(const MtConfig *cfg, const MtWeights *w, MtActs *a, int l, const float *x)
{
    block_forward(cfg, &w->h[l], a, l, x);
}

double mt_model_head_forward(const MtConfig *cfg, const MtWeights *w, MtActs *a, const float *x,
                             const int32_t *targets, float dscale)
{
    if (a->tp)
        return mt_tp_head_forward(cfg, w, a, x, targets, dscale);
    int N = a->B * a->T, C = cfg->C;
    mt_be()->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, w->lnfw, w->lnfb, N, C);
    POLL(a);
    mt_model_head_logits(cfg, N, cfg->V, a->lnf, mt_head_weight(cfg, w), a->logits); /* (N,V) = lnf @ wte^T (tied) */
    POLL(a);
    return mt_be()->crossentropy_fused(a->logits, a->losses, targets, N, cfg->V, dscale);
}

void mt_model_head_backward(const MtConfig *cfg, const MtWeights *w, const MtWeights *g, MtActs *a,
                            const float *x)
{
    if (a->tp) {
        mt_tp_head_backward(cfg, w, g, a, x);
        return;
    }
    int N = a->B * a->T, C = cfg->C;
    /* dlogits are in a->logits.  dwte += dlogits^T @ lnf ; dlnf = dlogits @ wte */
    head_dweight(cfg, g, N, cfg->V, a->logits, a->lnf);
    POLL(a);
    mt_be()->gemm(0, 0, N, C, cfg->V, 1.0f, a->logits, cfg->V, mt_head_weight(cfg, w), C, 0.0f, a->dln, C, 0);
    POLL(a);
    mt_be()->zero(a->dres, (int64_t)N * C);
    mt_be()->layernorm_backward(a->dres, g->lnfw, g->lnfb, a->dln, x, w->lnfw, a->lnf_mean, a->lnf_rstd, N, C, !g->fresh);
    POLL(a);
}

/* refills what the recompute mode did not keep of block l's activations (same bits) */
static void recompute(const MtConfig *cfg, const MtWeights *w, MtActs *a, int l, const float *x)
{
    if (a->recompute == MT_RECOMPUTE_FULL)
        block_forward(cfg, &w->h[l], a, l, x);
    else if (a->recompute == MT_RECOMPUTE_ATTN) {
        MtTpLocal lo = mt_tp_local(cfg, a->tp, a->B * a->T);
        mt_be()->attention_forward(a->atty[l], a->att[l], a->datt_scratch, a->qkv[l], a->B, a->T, lo.Cl, lo.Hl);
    }
}

void mt_model_block_backward(const MtConfig *cfg, const MtWeights *w, const MtWeights *g, MtActs *a, int l,
                             const float *x)
{
    recompute(cfg, w, a, l, x);
    block_backward(cfg, &w->h[l], &g->h[l], a, l, x, !g->fresh);
}

void mt_model_embed_backward(const MtConfig *cfg, float *dwte, float *dwpe, MtActs *a, const int32_t *tokens,
                             MtEmbSum *es)
{
    if (a->tp) {
        mt_tp_embed_backward(cfg, dwte, dwpe, a, tokens, es);
        return;
    }
    if (es)
        mt_embsum_add(es, a->dres);
    mt_be()->encoder_backward(es ? NULL : dwte, dwpe, a->dres, tokens, a->B, a->T, cfg->C);
}

/* ---- backward split into the input gradient (B) and the weight gradient (W) ---- */

int64_t mt_model_stash_floats(const MtConfig *cfg, int B, int T, int blocks, int head, int embed)
{
    return (int64_t)B * T * cfg->C * (11 * blocks + head + embed);
}

/* a block's stash: dres3 (C), dfch (4C), dln2 (C), dres2 (C), dqkv (3C), dln1 (C) per row */
#define STASH_BLOCK 11

void mt_model_block_backward_input(const MtConfig *cfg, const MtWeights *w, MtActs *a, int l, const float *x,
                                   float *stash)
{
    int B = a->B, T = a->T, C = cfg->C, N = B * T;
    const MtBlockWeights *bw = &w->h[l];
    /* the gradients W reads are computed straight into the stash; only the running dres is copied */
    float *s_res3 = stash, *s_fch = s_res3 + (int64_t)N * C, *s_ln2 = s_fch + (int64_t)N * 4 * C,
          *s_res2 = s_ln2 + (int64_t)N * C, *s_qkv = s_res2 + (int64_t)N * C, *s_ln1 = s_qkv + (int64_t)N * 3 * C;
    recompute(cfg, w, a, l, x);
    if (a->tp) {
        mt_tp_block_backward_input(cfg, bw, a, l, x, stash);
        return;
    }
    mt_be()->copy(s_res3, a->dres, (int64_t)N * C);
    mt_be()->matmul_backward(s_fch, NULL, NULL, a->dres, a->fch_gelu[l], bw->fcprojw, N, 4 * C, C, 0);
    POLL(a);
    mt_be()->gelu_backward(s_fch, a->fch[l], s_fch, (int64_t)N * 4 * C);
    mt_be()->matmul_backward(s_ln2, NULL, NULL, s_fch, a->ln2[l], bw->fcw, N, C, 4 * C, 0);
    POLL(a);
    mt_be()->layernorm_backward(a->dres, NULL, NULL, s_ln2, a->res2[l], bw->ln2w, a->ln2_mean[l], a->ln2_rstd[l], N, C, 1);
    mt_be()->copy(s_res2, a->dres, (int64_t)N * C);
    mt_be()->matmul_backward(a->datty, NULL, NULL, a->dres, a->atty[l], bw->attprojw, N, C, C, 0);
    POLL(a);
    mt_be()->attention_backward(s_qkv, a->datt_scratch, a->datty, a->atty[l], a->qkv[l], a->att[l], B, T, C, cfg->NH);
    POLL(a);
    mt_be()->matmul_backward(s_ln1, NULL, NULL, s_qkv, a->ln1[l], bw->qkvw, N, C, 3 * C, 0);
    POLL(a);
    mt_be()->layernorm_backward(a->dres, NULL, NULL, s_ln1, x, bw->ln1w, a->ln1_mean[l], a->ln1_rstd[l], N, C, 1);
    POLL(a);
}

void mt_model_block_backward_weight(const MtConfig *cfg, const MtWeights *w, const MtWeights *g, MtActs *a, int l,
                                    const float *x, const float *stash)
{
    if (a->recompute == MT_RECOMPUTE_FULL) /* W reads the block's activations too */
        block_forward(cfg, &w->h[l], a, l, x);
    int B = a->B, T = a->T, C = cfg->C, N = B * T;
    const MtBlockWeights *bg = &g->h[l];
    int add = !g->fresh;
    if (a->tp) {
        mt_tp_block_backward_weight(cfg, bg, a, l, x, stash, add);
        return;
    }
    const float *s_res3 = stash, *s_fch = s_res3 + (int64_t)N * C, *s_ln2 = s_fch + (int64_t)N * 4 * C,
                *s_res2 = s_ln2 + (int64_t)N * C, *s_qkv = s_res2 + (int64_t)N * C,
                *s_ln1 = s_qkv + (int64_t)N * 3 * C;
    mt_be()->matmul_backward(NULL, bg->fcprojw, bg->fcprojb, s_res3, a->fch_gelu[l], NULL, N, 4 * C, C, add * MT_BE_ADD_DW);
    POLL(a);
    mt_be()->matmul_backward(NULL, bg->fcw, bg->fcb, s_fch, a->ln2[l], NULL, N, C, 4 * C, add * MT_BE_ADD_DW);
    POLL(a);
    mt_be()->layernorm_backward(NULL, bg->ln2w, bg->ln2b, s_ln2, a->res2[l], NULL, a->ln2_mean[l], a->ln2_rstd[l], N, C, add);
    POLL(a);
    mt_be()->matmul_backward(NULL, bg->attprojw, bg->attprojb, s_res2, a->atty[l], NULL, N, C, C, add * MT_BE_ADD_DW);
    POLL(a);
    mt_be()->matmul_backward(NULL, bg->qkvw, bg->qkvb, s_qkv, a->ln1[l], NULL, N, C, 3 * C, add * MT_BE_ADD_DW);
    POLL(a);
    mt_be()->layernorm_backward(NULL, bg->ln1w, bg->ln1b, s_ln1, x, NULL, a->ln1_mean[l], a->ln1_rstd[l], N, C, add);
    POLL(a);
}

void mt_model_head_backward_input(const MtConfig *cfg, const MtWeights *w, MtActs *a, const float *x, float *stash)
{
    if (a->tp) {
        mt_tp_head_backward_input(cfg, w, a, x, stash);
        return;
    }
    int N = a->B * a->T, C = cfg->C;
    mt_be()->gemm(0, 0, N, C, cfg->V, 1.0f, a->logits, cfg->V, mt_head_weight(cfg, w), C, 0.0f, stash, C, 0); /* dlnf, kept for W */
    mt_be()->zero(a->dres, (int64_t)N * C);
    mt_be()->layernorm_backward(a->dres, NULL, NULL, stash, x, w->lnfw, a->lnf_mean, a->lnf_rstd, N, C, 1);
}

void mt_model_head_backward_weight(const MtConfig *cfg, const MtWeights *g, const MtActs *a, const float *x,
                                   const float *stash)
{
    if (a->tp) { /* its row-block sums use the set's scratch */
        mt_tp_head_backward_weight(cfg, g, (MtActs *)a, x, stash);
        return;
    }
    int N = a->B * a->T, C = cfg->C;
    head_dweight(cfg, g, N, cfg->V, a->logits, a->lnf);
    mt_be()->layernorm_backward(NULL, g->lnfw, g->lnfb, stash, x, NULL, a->lnf_mean, a->lnf_rstd, N, C, !g->fresh);
}

/* the head's vocabulary columns on this rank */
static int64_t head_cols(const MtConfig *cfg, const MtTpCtx *tp, int N)
{
    return tp ? mt_tp_local(cfg, tp, N).Vl : cfg->V;
}

int mt_model_head_rows(const MtConfig *cfg) { return cfg->C; }

/* one row block of r rows: its logits (r, Vl) = lnf @ wte^T; dwte += its dlogits^T @ lnf.  The
 * whole head and the recomputation (mt_model_head_dwte_redo) make these same calls. */
static void block_logits(int r, int Vl, int C, const float *lnf, const float *wte, float *logits)
{
    mt_be()->gemm(0, 1, r, Vl, C, 1.0f, lnf, C, wte, C, 0.0f, logits, Vl, 0);
}

static void block_dwte(int r, int Vl, int C, const float *dlogits, const float *lnf, float *dwte)
{
    mt_be()->gemm(1, 0, Vl, C, r, 1.0f, dlogits, Vl, lnf, C, 1.0f, dwte, C, 0);
}

void mt_model_head_logits(const MtConfig *cfg, int N, int Vl, const float *lnf, const float *wte, float *logits)
{
    int C = cfg->C, R = mt_model_head_rows(cfg);
    for (int n0 = 0; n0 < N; n0 += R)
        block_logits(N - n0 < R ? N - n0 : R, Vl, C, lnf + (int64_t)n0 * C, wte, logits + (int64_t)n0 * Vl);
}

void mt_model_head_dwte_rows(const MtConfig *cfg, int N, int Vl, const float *dlogits, const float *lnf, float *dwte)
{
    int C = cfg->C, R = mt_model_head_rows(cfg);
    for (int n0 = 0; n0 < N; n0 += R)
        block_dwte(N - n0 < R ? N - n0 : R, Vl, C, dlogits + (int64_t)n0 * Vl, lnf + (int64_t)n0 * C, dwte);
}

int64_t mt_model_head_keep_floats(const MtConfig *cfg, const MtTpCtx *tp, int B, int T)
{
    int64_t N = (int64_t)B * T;
    return N * (head_cols(cfg, tp, (int)N) + cfg->C);
}

void mt_model_head_keep(const MtConfig *cfg, const MtActs *a, float *keep)
{
    int64_t N = (int64_t)a->B * a->T, Vl = head_cols(cfg, a->tp, (int)N);
    mt_be()->copy(keep, a->logits, N * Vl);
    mt_be()->copy(keep + N * Vl, a->lnf, N * cfg->C);
}

void mt_model_head_dwte(const MtConfig *cfg, const MtTpCtx *tp, int B, int T, const float *keep, float *dwte)
{
    int N = B * T, Vl = (int)head_cols(cfg, tp, N);
    mt_model_head_dwte_rows(cfg, N, Vl, keep, keep + (int64_t)N * Vl, dwte);
}

/* ---- the tied head's weight gradient recomputed: what is kept is ln_f's output and, with
 * tensor parallelism, the cross-entropy's row maxima and gathered sums (no collective
 * runs again); a row block's logits, its dlogits (the same kernels on the same rows) and
 * its product into dwte, block by block ---- */

int64_t mt_model_head_inputs_floats(const MtConfig *cfg, const MtTpCtx *tp, int B, int T)
{
    int64_t N = (int64_t)B * T;
    return N * cfg->C + (tp ? N + 4 * N * tp->N : 0);
}

void mt_model_head_keep_inputs(const MtConfig *cfg, const MtActs *a, float *keep)
{
    int64_t N = (int64_t)a->B * a->T;
    mt_be()->copy(keep, a->lnf, N * cfg->C);
    if (a->tp) {
        mt_be()->copy(keep + N * cfg->C, a->tpmx, N);
        mt_be()->copy(keep + N * cfg->C + N, a->tp->N > 1 ? a->tpgather : a->tpstats, 4 * N * a->tp->N);
    }
}

int64_t mt_model_head_redo_floats(const MtConfig *cfg, const MtTpCtx *tp, int B, int T)
{
    int64_t R = mt_model_head_rows(cfg);
    return R * head_cols(cfg, tp, B * T) + R + (tp ? 4 * R * tp->N : 0);
}

void mt_model_head_dwte_redo(const MtConfig *cfg, const MtTpCtx *tp, const float *wte, int B, int T,
                             const float *keep, const int32_t *targets, float dscale, float *scratch, float *dwte)
{
    int N = B * T, C = cfg->C, R = mt_model_head_rows(cfg), Vl = (int)head_cols(cfg, tp, N);
    const float *lnf = keep, *mx = keep + (int64_t)N * C, *all = mx + N;
    float *logits = scratch, *losses = scratch + (int64_t)R * Vl, *stats = losses + R;
    for (int n0 = 0; n0 < N; n0 += R) {
        int r = N - n0 < R ? N - n0 : R;
        block_logits(r, Vl, C, lnf + (int64_t)n0 * C, wte, logits);
        if (tp) { /* the block's rows of each rank's statistics, as the kernel reads them */
            MtTpLocal lo = mt_tp_local(cfg, tp, N);
            for (int q = 0; q < tp->N; q++)
                mt_be()->copy(stats + (int64_t)q * r * 4, all + ((int64_t)q * N + n0) * 4, 4 * (int64_t)r);
            mt_be()->tp_xent_finish(logits, losses, stats, tp->N, mx + n0, targets + n0, lo.v0, Vl, cfg->V, r, dscale);
        } else
            mt_be()->crossentropy_fused(logits, losses, targets + n0, r, Vl, dscale);
        block_dwte(r, Vl, C, logits, lnf + (int64_t)n0 * C, dwte);
    }
}

double mt_model_forward(const MtConfig *cfg, const MtWeights *w, MtActs *a, const int32_t *tokens,
                        const int32_t *targets, float dscale, const MtUnitHooks *h)
{
    int L = cfg->L;
    hook(h, MT_PARAMS_NEED, 0); /* kept until the tied head has run */
    mt_model_embed_forward(cfg, w, a, tokens);
    if (cfg->untied && dscale != 0.0f) /* the head has its own weight */
        hook(h, MT_PARAMS_DONE, 0);
    const float *x = a->encoded;
    for (int l = 0; l < L; l++) {
        hook(h, MT_PARAMS_NEED, l + 1);
        block_forward(cfg, &w->h[l], a, l, x);
        hook(h, MT_PARAMS_DONE, l + 1);
        x = a->res3[l];
    }
    hook(h, MT_PARAMS_NEED, L + 1);
    double loss = mt_model_head_forward(cfg, w, a, x, targets, dscale);
    if (dscale == 0.0f) { /* no backward follows */
        hook(h, MT_PARAMS_DONE, L + 1);
        hook(h, MT_PARAMS_DONE, 0);
    }
    return loss;
}

void mt_model_backward(const MtConfig *cfg, const MtWeights *w, const MtWeights *g, MtActs *a,
                       const int32_t *tokens, const MtUnitHooks *h)
{
    int L = cfg->L;
    hook(h, MT_BACKWARD_BEGIN, L + 1);
    hook(h, MT_GRADS_NEED, L + 1);
    if (!cfg->untied) /* the tied head adds into wte's gradient */
        hook(h, MT_GRADS_NEED, 0);
    mt_model_head_backward(cfg, w, g, a, L > 0 ? a->res3[L - 1] : a->encoded);
    if (!cfg->untied)
        hook(h, MT_PARAMS_DONE, 0); /* the encoder's backward needs no parameters */
    hook(h, MT_PARAMS_DONE, L + 1);
    hook(h, MT_GRADS_DONE, L + 1);
    for (int l = L - 1; l >= 0; l--) {
        hook(h, MT_PARAMS_NEED, l + 1);
        hook(h, MT_GRADS_NEED, l + 1);
        mt_model_block_backward(cfg, w, g, a, l, l > 0 ? a->res3[l - 1] : a->encoded);
        hook(h, MT_PARAMS_DONE, l + 1);
        hook(h, MT_GRADS_DONE, l + 1);
    }
    if (cfg->untied)
        hook(h, MT_GRADS_NEED, 0);
    mt_model_embed_backward(cfg, g->wte, g->wpe, a, tokens, g->esum);
    if (g->esum && g->esum->flush) { /* a block of one micro-batch: its rows join wte now */
        mt_embsum_apply(g->esum, NULL, g->wte);
        mt_embsum_reset(g->esum);
    }
    hook(h, MT_GRADS_DONE, 0);
}
