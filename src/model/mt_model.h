/* mt_model.h - the GPT-2 model: configuration, parameter table, units, forward/backward.
 *
 * Parameters live in one flat float array, in the order of the parameter table (the
 * Hugging Face GPT-2 names and shapes).  The table is the single source of truth for
 * save, load, initialisation, optimizer flags and memory accounting: all are loops over
 * it.  MtWeights is a set of named views into any flat array laid out like the table
 * (parameters, gradients, optimizer moments); views never own memory.
 *
 * Units are the grain of every parallel technique: unit 0 is the embedding (wte, wpe),
 * units 1..L the transformer blocks, unit L+1 the head (ln_f; the LM head is tied to wte,
 * which the embedding unit owns, or with --untie-embeddings has a weight of its own,
 * lm_head.weight (V,C), the head unit's last tensor, as Megatron's
 * --untie-embeddings-and-output-weights and Llama).
 */
#ifndef MT_MODEL_H
#define MT_MODEL_H

#include <stdint.h>

#include "mt_core.h"
#include "mt_mem.h"

typedef struct {
    int V;  /* vocabulary size */
    int T;  /* context length (n_positions) */
    int L;  /* layers */
    int NH; /* heads */
    int C;  /* width */
    int untied; /* the LM head has its own weight, lm_head.weight (0: tied to wte, GPT-2's) */
} MtConfig;

#define MT_NAME_MAX 64

typedef struct {
    char name[MT_NAME_MAX]; /* Hugging Face name, e.g. "transformer.h.0.attn.c_attn.weight" */
    int ndim;
    int64_t shape[2];
    int64_t offset;         /* in floats, into the flat array */
    int64_t numel;
    int unit;               /* 0 embedding, 1..L blocks, L+1 head */
    int decay;              /* AdamW weight decay applies (2-D weights only) */
    int residual_proj;      /* output projection of a residual branch (scaled init) */
} MtParam;

typedef struct {
    float *ln1w, *ln1b;     /* (C) */
    float *qkvw, *qkvb;     /* (C,3C), (3C) */
    float *attprojw, *attprojb; /* (C,C), (C) */
    float *ln2w, *ln2b;     /* (C) */
    float *fcw, *fcb;       /* (C,4C), (4C) */
    float *fcprojw, *fcprojb; /* (4C,C), (C) */
} MtBlockWeights;

#define MT_MAX_LAYERS 256

typedef struct {
    float *wte;             /* (V,C) */
    float *wpe;             /* (T,C) */
    MtBlockWeights h[MT_MAX_LAYERS];
    float *lnfw, *lnfb;     /* (C) */
    float *lmw;             /* (V,C) lm_head.weight, untied models only (else NULL: the head reads
                             * wte; mt_head_weight) */
    /* As gradient views: the blocks' and ln_f's buffers hold no gradient yet, so a backward
     * assigns (=) their one contribution instead of adding it, and nobody zeroes them first
     * (the same bits as adding to zeros).  wte and wpe, which several rows reach, always
     * add.  mt_weights_view clears it. */
    int fresh;
    /* As gradient views: where the embedding's token rows go (NULL: added into wte).
     * mt_weights_view clears it. */
    struct MtEmbSum *esum;
} MtWeights;

/* The token embedding's gradient of an accumulation block (mt_accum.h), apart from the LM
 * head's part.  The tied wte's gradient of a block is the head's part summed over the
 * block's micro-batches as every other gradient, then these rows added once:
 *   - every row reaching the embedding's output is added to its token's row of a compact
 *     table, micro-batch after micro-batch, position after position, each row starting
 *     from zero (mt_embsum_index, mt_embsum_add);
 *   - at the block's end each token's row is added to the block's wte gradient
 *     (mt_embsum_apply), and the table is emptied (mt_embsum_reset).
 * That is how a pipeline sums it with the head on its last rank and the embedding on its
 * first (Megatron's two copies of the tied weight, added once per block rather than once
 * per step), and every layout sums it so.  A table holds tokens [v0, v0 + Vl) only (a
 * tensor-parallel rank's vocabulary rows); its rows are in the order tokens first came.
 * Memory: cap x C floats (gradients), cap = the block's tokens, at most Vl
 * (mt_embsum_cap): at most one wte. */
typedef struct MtEmbSum {
    int64_t v0, Vl, cap, N; /* vocabulary rows held; most distinct tokens; most positions per index */
    int C;
    int64_t n;              /* distinct tokens so far */
    int32_t *slot;          /* Vl: token - v0 -> its row, or -1 */
    int32_t *tok, *dtok;    /* cap: row -> token (host; device) */
    int32_t *idx, *didx;    /* the last indexed micro-batch: position -> row or -1 (host; device) */
    int64_t nidx;
    float *rows;            /* cap x C (device), or NULL: a table of tokens only */
    int own;                /* rows allocated here (else lent by the caller, who frees them) */
    int flush;              /* the executor's blocks are single micro-batches: the model applies and
                             * resets it at the end of each backward (mt_model_backward) */
} MtEmbSum;
int64_t mt_embsum_cap(int64_t Vl, int64_t block_tokens);
/* rows: MT_EMBSUM_OWN allocates the cap x C rows (MT_MEM_GRADS from mem); MT_EMBSUM_TOKENS
 * holds none: a table of tokens only (what a receiver of the rows needs to apply them), or
 * one whose caller sets e->rows to floats it lends.  MT_ENOMEM on failure (nothing held). */
enum { MT_EMBSUM_TOKENS, MT_EMBSUM_OWN };
MtStatus mt_embsum_init(MtEmbSum *e, MtMem *mem, int64_t v0, int64_t Vl, int C, int64_t cap, int64_t N, int rows);
void mt_embsum_free(MtEmbSum *e, MtMem *mem);
/* The next micro-batch's N tokens (host): new tokens get rows (zeroed), positions their row. */
void mt_embsum_index(MtEmbSum *e, const int32_t *tokens, int64_t N);
/* Adds the indexed micro-batch's rows (N x C, device) to their tokens' rows, in position order. */
void mt_embsum_add(MtEmbSum *e, const float *drows);
/* dwte (Vl x C) += each token's row: of rows (n x C, received) or, NULL, of the table's own. */
void mt_embsum_apply(MtEmbSum *e, const float *rows, float *dwte);
void mt_embsum_reset(MtEmbSum *e);

/* Checks the configuration; MT_EINPUT with one line naming the problem. */
MtStatus mt_config_check(const MtConfig *cfg);
/* Number of parameter tensors (4 + 12 L, and lm_head.weight when untied). */
int mt_param_count(const MtConfig *cfg);
/* Fills table[0 .. mt_param_count) in flat order; returns the total number of floats. */
int64_t mt_param_table(const MtConfig *cfg, MtParam *table);
/* The same with each unit's span padded with zeros to a multiple of align floats (sharded
 * data parallelism cuts every unit into equal chunks); align 1 is mt_param_table. */
int64_t mt_param_table_aligned(const MtConfig *cfg, MtParam *table, int64_t align);
/* Flat range [start, end) of a unit's tensors (padding excluded). */
void mt_unit_span(const MtParam *table, int nparams, int unit, int64_t *start, int64_t *end);
/* The LM head's weight (or its gradient) in a view: wte when tied, lm_head.weight when not. */
static inline float *mt_head_weight(const MtConfig *cfg, const MtWeights *w) { return cfg->untied ? w->lmw : w->wte; }
/* Named views into a flat array laid out like the table. */
void mt_weights_view(const MtConfig *cfg, const MtParam *table, float *base, MtWeights *w);
/* Points the views of one unit's tensors at base, which holds that unit laid out as in the
 * flat array from the unit's first tensor on (a gathered unit, a unit's gradient buffer). */
void mt_weights_view_unit(const MtConfig *cfg, const MtParam *table, int nparams, int unit, float *base,
                          MtWeights *w);
/* GPT-2 initialisation of elements [begin, end) of parameter p, written to dst[0 .. end-begin):
 * weights ~ N(0, 0.02) (residual projections 0.02/sqrt(2L)), biases 0, LayerNorm weights 1.
 * A pure function of (seed, p->name, element index). */
void mt_param_init(const MtParam *p, int L, uint64_t seed, int64_t begin, int64_t end, float *dst);

/* Activations of one micro-batch of B sequences of length T (T <= cfg.T). */
typedef struct {
    int B, T;
    float *encoded;                 /* (B,T,C) residual stream into block 0 */
    float *ln1[MT_MAX_LAYERS], *ln1_mean[MT_MAX_LAYERS], *ln1_rstd[MT_MAX_LAYERS];
    float *qkv[MT_MAX_LAYERS];      /* (B,T,3C) */
    float *atty[MT_MAX_LAYERS];     /* (B,T,C) attention output before its projection */
    float *att[MT_MAX_LAYERS];      /* (B,NH,T) each row's log-sum-exp (the fused attention keeps no probabilities) */
    float *res2[MT_MAX_LAYERS];     /* (B,T,C) residual after attention */
    float *ln2[MT_MAX_LAYERS], *ln2_mean[MT_MAX_LAYERS], *ln2_rstd[MT_MAX_LAYERS];
    float *fch[MT_MAX_LAYERS];      /* (B,T,4C) pre-GELU */
    float *fch_gelu[MT_MAX_LAYERS]; /* (B,T,4C) */
    float *res3[MT_MAX_LAYERS];     /* (B,T,C) block output */
    float *lnf, *lnf_mean, *lnf_rstd;
    float *logits;                  /* (B,T,V), replaced by dlogits in training */
    float *losses;                  /* (B,T) */
    /* backward scratch, one layer's worth */
    float *dres, *dln, *datty, *dqkv, *dfch, *datt_scratch;
    float *block;                   /* the one allocation behind all of the above */
    int64_t floats;
    /* activation recomputation: blocks [l0, l1) keep in their own buffers only what the
     * mode keeps; the other per-layer pointers all point at shared[] (one layer's worth),
     * which a block's backward refills by recomputing its forward (or its attention). */
    int recompute, l0, l1;
    float *shared[13];
    /* called between the kernels of a block (a pipeline progresses its transfers there) */
    void (*poll)(void *ctx);
    void *poll_ctx;
    /* tensor parallelism (mt_tp.h): NULL computes the whole model; else this rank's heads,
     * MLP columns and vocabulary rows, its buffers sized for them (with sequence parallelism
     * encoded, res2, res3, the LayerNorm statistics and dres hold the rank's rows only; ln1,
     * ln2 and lnf all rows, gathered), plus the blocked sums' scratch: tpsum (N C), tptmp
     * (tree buffers of N C), tpmx (N), tpstats (4 N), tpgather (4 N x ranks), tpcol (16 C:
     * row-block sums), and with sequence parallelism tpfull (N C) and tprep (6 C) */
    const struct MtTpCtx *tp;
    float *tpsum, *tptmp[8], *tpmx, *tpstats, *tpgather, *tpcol, *tpfull, *tprep;
} MtActs;

/* --recompute: none; attn recomputes the attention (its rows' log-sum-exp, one layer's
 * buffer shared) in each block's backward (Korthikanti et al.'s selective recomputation,
 * which saved the (B,NH,T,T) probabilities before attention was fused; now it saves only
 * B NH T floats a layer); full keeps only each block's output (the next block's input) and
 * recomputes the whole block's forward. */
enum { MT_RECOMPUTE_NONE, MT_RECOMPUTE_ATTN, MT_RECOMPUTE_FULL };

/* Which activations a set holds: blocks [l0, l1), the embedding's output (embed) or a
 * received stage input in its place (input; both in `encoded`), the head's (lnf, logits,
 * losses), and the backward scratch (one layer's worth).  The whole model: mt_acts_whole. */
typedef struct {
    int l0, l1;
    int embed, head, input, scratch;
    int recompute;  /* MT_RECOMPUTE_*: which per-layer buffers are shared */
    int rc_buffers; /* the set holds the shared buffers (else mt_acts_share links another's) */
    const struct MtTpCtx *tp; /* tensor parallelism: this rank's sizes (NULL: whole) */
} MtActsShape;
/* Points a's shared per-layer buffers at those of `from` (which holds them). */
void mt_acts_share(MtActs *a, const MtActs *from);
MtActsShape mt_acts_whole(const MtConfig *cfg);

/* One allocation (category activations) for micro-batches of B x T; NULL-safe free. */
MtStatus mt_acts_alloc(MtActs *a, MtMem *mem, const MtConfig *cfg, int B, int T, int threads);
MtStatus mt_acts_alloc_shape(MtActs *a, MtMem *mem, const MtConfig *cfg, int B, int T, int threads,
                             const MtActsShape *sh);
/* A set of shape sh over the memory of `owner` (a set of as many floats, of another shape
 * with the same buffers: blocks [l0, l1) of another chunk of as many blocks); freeing it
 * frees nothing, the owner's memory stays the owner's. */
void mt_acts_view_shape(MtActs *a, const MtActs *owner, const MtConfig *cfg, int B, int T, int threads,
                        const MtActsShape *sh);
void mt_acts_free(MtActs *a, MtMem *mem);
/* Floats that mt_acts_alloc(_shape) takes (pure; used by memory formulas). */
int64_t mt_acts_floats(const MtConfig *cfg, int B, int T, int threads);
int64_t mt_acts_floats_shape(const MtConfig *cfg, int B, int T, int threads, const MtActsShape *sh);

/* Unit events of a forward and backward pass, in the order they happen, for the techniques
 * that move a unit's parameters or gradients (FSDP gathers, gradient buckets):
 *   forward:  PARAMS_NEED 0, then per block l: PARAMS_NEED l, PARAMS_DONE l; PARAMS_NEED L+1
 *             (the tied head uses unit 0, still held); without a backward (dscale 0) then
 *             PARAMS_DONE L+1, PARAMS_DONE 0.
 *   backward: BACKWARD_BEGIN (unit L+1), GRADS_NEED L+1, GRADS_NEED 0, head; PARAMS_DONE 0, PARAMS_DONE L+1,
 *             GRADS_DONE L+1; per block l = L..1: PARAMS_NEED l, GRADS_NEED l, PARAMS_DONE l,
 *             GRADS_DONE l; encoder; GRADS_DONE 0.
 * After GRADS_DONE u the micro-batch's gradient of unit u is final.  A hook may re-point
 * the unit's views in the MtWeights the pass reads (mt_weights_view_unit). */
typedef enum { MT_PARAMS_NEED, MT_PARAMS_DONE, MT_GRADS_NEED, MT_GRADS_DONE, MT_BACKWARD_BEGIN } MtUnitEvent;

typedef struct {
    void (*fn)(void *ctx, MtUnitEvent ev, int unit);
    void *ctx;
} MtUnitHooks;

/* Forward of one micro-batch: tokens and targets (B*T each).  If dscale != 0 the logits
 * are replaced by the loss gradient scaled by dscale (= 1 / tokens in the step).
 * Returns the sum of the token losses (double, row order). */
double mt_model_forward(const MtConfig *cfg, const MtWeights *w, MtActs *a, const int32_t *tokens,
                        const int32_t *targets, float dscale, const MtUnitHooks *h);
/* Backward of the micro-batch whose forward ran with dscale != 0: parameter gradients
 * accumulate (+=) into g (the blocks' and ln_f's are assigned if g->fresh). */
void mt_model_backward(const MtConfig *cfg, const MtWeights *w, const MtWeights *g, MtActs *a,
                       const int32_t *tokens, const MtUnitHooks *h);

/* The same passes unit by unit, for techniques that run units apart (pipeline stages).
 * mt_model_forward / mt_model_backward are exactly these in sequence:
 *   forward:  embed_forward (into a->encoded); block_forward l (x: the block's input);
 *             head_forward (x: the last block's output), returns the loss sum;
 *   backward: head_backward (g->wte += the LM head's part, or g->lmw = it untied; a->dres = d loss / d x);
 *             block_backward l (a->dres: d output in, d input out); embed_backward (dwte
 *             and dwpe += the rows of a->dres; either may be NULL). */
void mt_model_embed_forward(const MtConfig *cfg, const MtWeights *w, MtActs *a, const int32_t *tokens);
void mt_model_block_forward(const MtConfig *cfg, const MtWeights *w, MtActs *a, int l, const float *x);
double mt_model_head_forward(const MtConfig *cfg, const MtWeights *w, MtActs *a, const float *x,
                             const int32_t *targets, float dscale);
void mt_model_head_backward(const MtConfig *cfg, const MtWeights *w, const MtWeights *g, MtActs *a,
                            const float *x);
void mt_model_block_backward(const MtConfig *cfg, const MtWeights *w, const MtWeights *g, MtActs *a, int l,
                             const float *x);
/* embed_backward: with es (indexed for these tokens) the token rows go to it instead of dwte */
void mt_model_embed_backward(const MtConfig *cfg, float *dwte, float *dwpe, MtActs *a, const int32_t *tokens,
                             MtEmbSum *es);

/* Backward split in two halves (zero-bubble schedules), together the same bits as the
 * passes above: *_input computes the gradient of the input (a->dres) and stashes what the
 * weight gradient needs; *_weight, later, the parameter gradients from the stash and the
 * activations.  Stash floats: mt_model_stash_floats (11 N C per block, N C for the head's
 * and for the embedding's, which is a->dres itself: the caller copies it). */
int64_t mt_model_stash_floats(const MtConfig *cfg, int B, int T, int blocks, int head, int embed);
void mt_model_block_backward_input(const MtConfig *cfg, const MtWeights *w, MtActs *a, int l, const float *x,
                                   float *stash);
void mt_model_block_backward_weight(const MtConfig *cfg, const MtWeights *w, const MtWeights *g, MtActs *a, int l,
                                    const float *x, const float *stash);
void mt_model_head_backward_input(const MtConfig *cfg, const MtWeights *w, MtActs *a, const float *x, float *stash);
void mt_model_head_backward_weight(const MtConfig *cfg, const MtWeights *g, const MtActs *a, const float *x,
                                   const float *stash);

/* The tied head's products run in row blocks of mt_model_head_rows (C rows: a block's
 * logits take as many floats as wte): the logits a block at a time, and dwte +=
 * dlogits^T @ ln_f as one product per block, added in block order.  That order is part of
 * the canonical arithmetic (every layout sums the head's part of dwte so), and it lets a
 * pipeline recompute one micro-batch's head gradient in a block's memory (below). */
int mt_model_head_rows(const MtConfig *cfg);
void mt_model_head_logits(const MtConfig *cfg, int N, int Vl, const float *lnf, const float *wte, float *logits);
void mt_model_head_dwte_rows(const MtConfig *cfg, int N, int Vl, const float *dlogits, const float *lnf, float *dwte);
/* The head's weight gradient of a backward into g: wte's (tied: added, as wte always adds)
 * or lm_head's (untied: assigned where g->fresh, as every tensor of a unit of its own);
 * nothing where mt_head_weight(cfg, g) is NULL (later: below). */
void mt_model_head_dweight(const MtConfig *cfg, const MtWeights *g, int N, int Vl, const float *dlogits,
                           const float *lnf);

/* The tied head's weight gradient later (a pipeline's last stage, whose leaf waits for the
 * first stage's rows: mt_pipeline.h).  With g->wte NULL the head's backward (whole or W)
 * leaves dwte out.  Two ways to add it later, each the same products on the same operands,
 * the same bits:
 *   keep: mt_model_head_keep copies the head's dlogits and ln_f output
 *         (mt_model_head_keep_floats) and mt_model_head_dwte adds dlogits^T @ ln_f;
 *   redo: mt_model_head_keep_inputs copies ln_f's output and, with tensor parallelism, the
 *         cross-entropy's statistics (mt_model_head_inputs_floats), and
 *         mt_model_head_dwte_redo recomputes each row block's logits and dlogits in a
 *         scratch of mt_model_head_redo_floats before its product: one more logits product
 *         (N V C / tp multiply-adds) for far fewer floats kept. */
int64_t mt_model_head_keep_floats(const MtConfig *cfg, const struct MtTpCtx *tp, int B, int T);
void mt_model_head_keep(const MtConfig *cfg, const MtActs *a, float *keep);
void mt_model_head_dwte(const MtConfig *cfg, const struct MtTpCtx *tp, int B, int T, const float *keep, float *dwte);
int64_t mt_model_head_inputs_floats(const MtConfig *cfg, const struct MtTpCtx *tp, int B, int T);
void mt_model_head_keep_inputs(const MtConfig *cfg, const MtActs *a, float *keep);
int64_t mt_model_head_redo_floats(const MtConfig *cfg, const struct MtTpCtx *tp, int B, int T);
void mt_model_head_dwte_redo(const MtConfig *cfg, const struct MtTpCtx *tp, const float *wte, int B, int T,
                             const float *keep, const int32_t *targets, float dscale, float *scratch, float *dwte);

#endif
