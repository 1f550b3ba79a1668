/* tp_model.c - the model's passes on a tensor-parallel rank (mt_tp.h): its heads, MLP
 * columns and vocabulary rows, the tp group's collectives between them, and with sequence
 * parallelism the LayerNorm and residual regions on the rank's rows only.
 *
 * Without sequence parallelism every rank holds all N rows of the residual stream: a
 * row-parallel product's partial sums are all-reduced (Megatron's g) and so is a column-
 * parallel product's input gradient (f).  With it, rank r holds rows [r N/n, (r+1) N/n) of
 * the micro-batch's B x T rows (T / n positions' worth; the rows of the flat (B, T) order,
 * which is Megatron's cut of the sequence when B = 1 and the same bytes otherwise): the
 * LayerNorm's output is all-gathered before each column-parallel product, the row-parallel
 * partial sums are reduce-scattered, and in the backward the other way round; the
 * replicated parameters' gradients, now sums over the rank's rows, are all-reduced after
 * each block (and after the head).
 *
 * Rows as blocks: with K blocks, every sum over rows of a replicated parameter's gradient
 * (LayerNorm weights and biases, the row-parallel biases) is the pairwise tree over K blocks
 * of N / K rows, with or without sequence parallelism, so the two give the same bits: a
 * rank with sequence parallelism holds K / n whole blocks. */
#include "mt_tp.h"

#include <string.h>

#include "mt_backend.h"

#define POLL(a)                       \
    do {                              \
        if ((a)->poll)                \
            (a)->poll((a)->poll_ctx); \
    } while (0)

MtTpLocal mt_tp_local(const MtConfig *cfg, const MtTpCtx *tp, int ntok)
{
    if (!tp)
        return (MtTpLocal){cfg->C, cfg->NH, 4 * cfg->C, cfg->V, 0, 1, ntok, 0};
    int64_t Vl = tp->Vp / tp->N;
    int rows = tp->seqpar ? ntok / tp->N : ntok;
    return (MtTpLocal){cfg->C / tp->N, cfg->NH / tp->N, 4 * cfg->C / tp->N, Vl, tp->r * Vl, tp->K / tp->N, rows,
                       tp->seqpar ? tp->r * rows : 0};
}

/* ---- the group's collectives (nothing on one rank) ---- */

static void sum_all(const MtActs *a, float *buf, int64_t n)
{
    if (a->tp->N > 1)
        a->tp->allreduce(a->tp->comm, buf, n);
}

/* full (rows x C, all rows) -> this rank's rows of the sum (sequence parallel) */
static void sum_scatter(const MtActs *a, const float *full, float *mine, int64_t n)
{
    if (a->tp->N > 1)
        a->tp->reduce_scatter(a->tp->comm, full, mine, n);
    else if (mine != full)
        mt_be()->copy(mine, full, n);
}

/* full holds this rank's chunk at its place; gathers the others' (n: per rank) */
static void gather_rows(const MtActs *a, float *full, int64_t n)
{
    if (a->tp->N > 1)
        a->tp->allgather(a->tp->comm, full + (int64_t)a->tp->r * n, full, n);
}

/* ---- rows as K blocks: the replicated parameters' gradients ---- */

/* the LayerNorm's weight and bias gradients (ln) or a bias gradient over the rank's rows,
 * assigned (= : fresh gradients) or added into dw, db */
static void rows_grads(MtActs *a, int ln, float *dw, float *db, const float *dout, const float *inp, const float *mean,
                       const float *rstd, int rows, int C, int add)
{
    int nb = a->tp->K / (a->tp->seqpar ? a->tp->N : 1);
    float *out = a->tpcol, *lvl[8];
    for (int d = 0; d < 7; d++)
        lvl[d] = a->tpcol + (int64_t)(d + 1) * 2 * C;
    mt_tp_rows_grads(out, lvl, ln, dout, inp, mean, rstd, rows, C, nb);
    const float *sw = ln ? out : NULL, *sb = ln ? out + C : out;
    void (*into)(float *, const float *, int64_t) = add ? mt_be()->add : mt_be()->copy;
    if (dw)
        into(dw, sw, C);
    into(db, sb, C);
}

/* with sequence parallelism: the replicated gradients of a block (or of ln_f), sums over
 * the rank's rows, all-reduced over the group in place */
static void sum_replicated(MtActs *a, float **g, int n, int C)
{
    if (!a->tp->seqpar || a->tp->N == 1)
        return;
    for (int i = 0; i < n; i++)
        mt_be()->copy(a->tprep + (int64_t)i * C, g[i], C);
    sum_all(a, a->tprep, (int64_t)n * C);
    for (int i = 0; i < n; i++)
        mt_be()->copy(g[i], a->tprep + (int64_t)i * C, C);
}

/* ---- the passes ---- */

/* out (rows x OC) = resid + bias + this rank's rows of the sum over ranks of
 * inp (ntok, Kin: this rank's part) @ w, blocked */
static void rowpar_forward(MtActs *a, float *out, const float *inp, const float *w, const float *bias,
                           const float *resid, int ntok, int rows, int Kin, int OC, int nb)
{
    mt_tp_rowpar_sum(a->tpsum, a->tptmp, inp, w, ntok, Kin, OC, nb);
    POLL(a);
    const float *S = a->tpsum;
    if (a->tp->seqpar) {
        sum_scatter(a, a->tpsum, a->tpfull, (int64_t)ntok * OC); /* this rank's rows */
        S = a->tpfull;
    } else
        sum_all(a, a->tpsum, (int64_t)ntok * OC);
    mt_be()->tp_rowpar_finish(out, S, bias, resid, rows, OC);
}

void mt_tp_embed_forward(const MtConfig *cfg, const MtWeights *w, MtActs *a, const int32_t *tokens)
{
    int ntok = a->B * a->T, C = cfg->C;
    MtTpLocal lo = mt_tp_local(cfg, a->tp, ntok);
    if (a->tp->seqpar) { /* this rank's vocabulary rows, the others' zeros, scattered by rows */
        mt_be()->tp_embed_lookup(a->tpsum, tokens, w->wte, lo.v0, lo.Vl, ntok, C);
        sum_scatter(a, a->tpsum, a->encoded, (int64_t)ntok * C);
    } else {
        mt_be()->tp_embed_lookup(a->encoded, tokens, w->wte, lo.v0, lo.Vl, ntok, C);
        sum_all(a, a->encoded, (int64_t)ntok * C);
    }
    mt_be()->tp_embed_finish(a->encoded, w->wpe, lo.row0, lo.rows, a->T, C);
    POLL(a);
}

/* LayerNorm of this rank's rows into its chunk of the full buffer, then the others' */
static void ln_gathered(MtActs *a, float *full, float *mean, float *rstd, const float *x, const float *w, const float *b,
                        const MtTpLocal *lo, int C)
{
    mt_be()->layernorm_forward(full + (int64_t)lo->row0 * C, mean, rstd, x, w, b, lo->rows, C);
    if (a->tp->seqpar)
        gather_rows(a, full, (int64_t)lo->rows * C);
}

void mt_tp_block_forward(const MtConfig *cfg, const MtBlockWeights *w, MtActs *a, int l, const float *x)
{
    int B = a->B, T = a->T, C = cfg->C, N = B * T;
    MtTpLocal lo = mt_tp_local(cfg, a->tp, N);
    ln_gathered(a, a->ln1[l], a->ln1_mean[l], a->ln1_rstd[l], x, w->ln1w, w->ln1b, &lo, C);
    POLL(a);
    mt_be()->matmul_forward(a->qkv[l], a->ln1[l], w->qkvw, w->qkvb, NULL, N, C, 3 * lo.Cl); /* (N, 3Cl) */
    POLL(a);
    mt_be()->attention_forward(a->atty[l], a->att[l], a->datt_scratch, a->qkv[l], B, T, lo.Cl, lo.Hl);
    POLL(a);
    rowpar_forward(a, a->res2[l], a->atty[l], w->attprojw, w->attprojb, x, N, lo.rows, lo.Cl, C, lo.nb);
    POLL(a);
    ln_gathered(a, a->ln2[l], a->ln2_mean[l], a->ln2_rstd[l], a->res2[l], w->ln2w, w->ln2b, &lo, C);
    POLL(a);
    mt_be()->matmul_forward(a->fch[l], a->ln2[l], w->fcw, w->fcb, NULL, N, C, lo.Fl); /* (N, Fl) */
    POLL(a);
    mt_be()->gelu_forward(a->fch_gelu[l], a->fch[l], (int64_t)N * lo.Fl);
    POLL(a);
    rowpar_forward(a, a->res3[l], a->fch_gelu[l], w->fcprojw, w->fcprojb, a->res2[l], N, lo.rows, lo.Fl, C, lo.nb);
    POLL(a);
}

/* the gradient of the block's (or head's) output on all rows: a->dres itself, or gathered */
static const float *all_rows(MtActs *a, const MtTpLocal *lo, int C)
{
    if (!a->tp->seqpar)
        return a->dres;
    mt_be()->copy(a->tpfull + (int64_t)lo->row0 * C, a->dres, (int64_t)lo->rows * C);
    gather_rows(a, a->tpfull, (int64_t)lo->rows * C);
    return a->tpfull;
}

/* The weight and input gradients of a column-parallel product (c_attn, c_fc): the input
 * gradient is the blocked sum over this rank's columns, summed over the group (all rows;
 * with sequence parallelism scattered to this rank's rows) and returned.  (Overlapping the
 * reduction with the weight gradient, computed in slices with the reduction progressed in
 * between, measured slower here: BLIS packs the whole of dout again for every slice.) */
static const float *reduce_dinp(MtActs *a, int N, int C);

static const float *colpar_backward(MtActs *a, float *dw, float *db, const float *dout, const float *inp,
                                    const float *w, int N, int C, int OC, int heads, int add)
{
    mt_be()->matmul_backward(NULL, dw, db, dout, inp, NULL, N, C, OC, add);
    mt_tp_colpar_dinp(a->dln, a->tptmp, dout, w, N, C, OC, a->tp->K / a->tp->N, heads);
    return reduce_dinp(a, N, C);
}

/* the head's input gradient: the blocked sum over this rank's vocabulary rows, reduced */
static const float *colpar_vocab(MtActs *a, const float *wte, int N, int C, int Vl)
{
    mt_tp_vocab_dinp(a->dln, a->tptmp, a->logits, wte, N, C, Vl, a->tp->K / a->tp->N);
    return reduce_dinp(a, N, C);
}

/* a->dln (N,C), this rank's partial input gradient, summed over the group: all rows in
 * place, or with sequence parallelism this rank's rows into a->tpsum; returns which */
static const float *reduce_dinp(MtActs *a, int N, int C)
{
    POLL(a);
    if (!a->tp->seqpar) {
        sum_all(a, a->dln, (int64_t)N * C);
        return a->dln;
    }
    sum_scatter(a, a->dln, a->tpsum, (int64_t)N * C);
    return a->tpsum;
}

void mt_tp_block_backward(const MtConfig *cfg, const MtBlockWeights *w, const MtBlockWeights *g, MtActs *a, int l,
                          const float *x, int add)
{
    int B = a->B, T = a->T, C = cfg->C, N = B * T;
    MtTpLocal lo = mt_tp_local(cfg, a->tp, N);
    /* MLP: res3 = res2 + gelu(ln2 @ fc) @ fcproj */
    const float *d = all_rows(a, &lo, C);
    mt_be()->matmul_backward(a->dfch, g->fcprojw, NULL, d, a->fch_gelu[l], w->fcprojw, N, lo.Fl, C, add * MT_BE_ADD_DW);
    rows_grads(a, 0, NULL, g->fcprojb, a->dres, NULL, NULL, NULL, lo.rows, C, add);
    POLL(a);
    mt_be()->gelu_backward(a->dfch, a->fch[l], a->dfch, (int64_t)N * lo.Fl);
    POLL(a);
    const float *dln = colpar_backward(a, g->fcw, g->fcb, a->dfch, a->ln2[l], w->fcw, N, C, lo.Fl, 0, add * MT_BE_ADD_DW);
    POLL(a);
    const float *ln2x = a->res2[l];
    mt_be()->layernorm_backward(a->dres, NULL, NULL, dln, ln2x, w->ln2w, a->ln2_mean[l], a->ln2_rstd[l], lo.rows, C, 1);
    rows_grads(a, 1, g->ln2w, g->ln2b, dln, ln2x, a->ln2_mean[l], a->ln2_rstd[l], lo.rows, C, add);
    POLL(a);
    /* attention: res2 = x + attn(ln1(x)) @ attproj */
    d = all_rows(a, &lo, C);
    mt_be()->matmul_backward(a->datty, g->attprojw, NULL, d, a->atty[l], w->attprojw, N, lo.Cl, C, add * MT_BE_ADD_DW);
    rows_grads(a, 0, NULL, g->attprojb, a->dres, NULL, NULL, NULL, lo.rows, C, add);
    POLL(a);
    mt_be()->attention_backward(a->dqkv, a->datt_scratch, a->datty, a->atty[l], a->qkv[l], a->att[l], B, T, lo.Cl, lo.Hl);
    POLL(a);
    dln = colpar_backward(a, g->qkvw, g->qkvb, a->dqkv, a->ln1[l], w->qkvw, N, C, 3 * lo.Cl, 1, add * MT_BE_ADD_DW);
    POLL(a);
    mt_be()->layernorm_backward(a->dres, NULL, NULL, dln, x, w->ln1w, a->ln1_mean[l], a->ln1_rstd[l], lo.rows, C, 1);
    rows_grads(a, 1, g->ln1w, g->ln1b, dln, x, a->ln1_mean[l], a->ln1_rstd[l], lo.rows, C, add);
    MT_ASSERT(!a->tp->seqpar || !add, "sequence parallelism sums the replicated gradients of fresh buffers only");
    float *rep[6] = {g->ln1w, g->ln1b, g->attprojb, g->ln2w, g->ln2b, g->fcprojb};
    sum_replicated(a, rep, 6, C);
    POLL(a);
}

/* the vocabulary-parallel cross-entropy of this rank's logit columns (mt_tp.h) */
static double xent(const MtConfig *cfg, MtActs *a, const int32_t *targets, float dscale)
{
    const MtTpCtx *tp = a->tp;
    int N = a->B * a->T;
    MtTpLocal lo = mt_tp_local(cfg, tp, N);
    mt_be()->tp_xent_max(a->tpmx, a->logits, lo.v0, lo.Vl, cfg->V, N);
    if (tp->N > 1) {
        tp->allgather(tp->comm, a->tpmx, a->tpgather, N);
        mt_be()->tp_xent_reduce_max(a->tpmx, a->tpgather, tp->N, N);
    }
    mt_be()->tp_xent_sums(a->tpstats, a->logits, a->tpmx, targets, lo.v0, lo.Vl, cfg->V, N, lo.nb);
    const float *all = a->tpstats;
    if (tp->N > 1) {
        tp->allgather(tp->comm, a->tpstats, a->tpgather, 4 * (int64_t)N);
        all = a->tpgather;
    }
    return mt_be()->tp_xent_finish(a->logits, a->losses, all, tp->N, a->tpmx, targets, lo.v0, lo.Vl, cfg->V, N, dscale);
}

double mt_tp_head_forward(const MtConfig *cfg, const MtWeights *w, MtActs *a, const float *x, const int32_t *targets,
                          float dscale)
{
    int N = a->B * a->T, C = cfg->C;
    MtTpLocal lo = mt_tp_local(cfg, a->tp, N);
    ln_gathered(a, a->lnf, a->lnf_mean, a->lnf_rstd, x, w->lnfw, w->lnfb, &lo, C);
    POLL(a);
    /* logits (N, Vl) = lnf @ wte^T: this rank's vocabulary columns of the tied head */
    mt_model_head_logits(cfg, N, (int)lo.Vl, a->lnf, mt_head_weight(cfg, w), a->logits);
    POLL(a);
    return xent(cfg, a, targets, dscale);
}

void mt_tp_head_backward(const MtConfig *cfg, const MtWeights *w, const MtWeights *g, MtActs *a, const float *x)
{
    int N = a->B * a->T, C = cfg->C;
    MtTpLocal lo = mt_tp_local(cfg, a->tp, N);
    int Vl = (int)lo.Vl, add = !g->fresh;
    /* dlogits are in a->logits.  dwte += dlogits^T @ lnf ; dlnf = dlogits @ wte, blocked */
    mt_model_head_dweight(cfg, g, N, Vl, a->logits, a->lnf);
    POLL(a);
    const float *dlnf = colpar_vocab(a, mt_head_weight(cfg, w), N, C, Vl);
    mt_be()->zero(a->dres, (int64_t)lo.rows * C);
    mt_be()->layernorm_backward(a->dres, NULL, NULL, dlnf, x, w->lnfw, a->lnf_mean, a->lnf_rstd, lo.rows, C, 1);
    rows_grads(a, 1, g->lnfw, g->lnfb, dlnf, x, a->lnf_mean, a->lnf_rstd, lo.rows, C, add);
    MT_ASSERT(!a->tp->seqpar || !add, "sequence parallelism sums the replicated gradients of fresh buffers only");
    float *rep[2] = {g->lnfw, g->lnfb};
    sum_replicated(a, rep, 2, C);
    POLL(a);
}

void mt_tp_embed_backward(const MtConfig *cfg, float *dwte, float *dwpe, MtActs *a, const int32_t *tokens,
                          MtEmbSum *es)
{
    int N = a->B * a->T, C = cfg->C;
    MtTpLocal lo = mt_tp_local(cfg, a->tp, N);
    const float *d = all_rows(a, &lo, C); /* this rank's vocabulary rows see every token */
    if (es) /* indexed for this rank's vocabulary rows */
        mt_embsum_add(es, d);
    else if (dwte)
        mt_be()->tp_embed_backward_rows(dwte, d, tokens, lo.v0, lo.Vl, N, C);
    mt_be()->encoder_backward(NULL, dwpe, d, tokens, a->B, a->T, C); /* wpe (replicated) as on one device */
}

/* ---- the split backward (zero-bubble schedules): B, the input gradients, stashing what W
 * needs; W, the weight gradients from the stash.  The same calls on the same inputs as
 * mt_tp_block_backward and mt_tp_head_backward, so the same bits.  Stash of a block, in
 * floats: dres at the MLP (N C), the GELU gradient (N Fl), ln2's input gradient (N C), dres
 * at attention (N C), the q | k | v gradient (N 3 Cl), ln1's input gradient (N C). ---- */

void mt_tp_block_backward_input(const MtConfig *cfg, const MtBlockWeights *w, MtActs *a, int l, const float *x,
                                float *stash)
{
    int B = a->B, T = a->T, C = cfg->C, N = B * T;
    MtTpLocal lo = mt_tp_local(cfg, a->tp, N);
    int nb = a->tp->K / a->tp->N, R = lo.rows; /* R: this rank's rows of the residual stream */
    float *s_res3 = stash, *s_fch = s_res3 + (int64_t)N * C, *s_ln2 = s_fch + (int64_t)N * lo.Fl,
          *s_res2 = s_ln2 + (int64_t)N * C, *s_qkv = s_res2 + (int64_t)N * C, *s_ln1 = s_qkv + (int64_t)N * 3 * lo.Cl;
    const float *d = all_rows(a, &lo, C); /* every row (gathered with sequence parallelism) */
    mt_be()->copy(s_res3, d, (int64_t)N * C);
    mt_be()->matmul_backward(s_fch, NULL, NULL, d, a->fch_gelu[l], w->fcprojw, N, lo.Fl, C, 0);
    POLL(a);
    mt_be()->gelu_backward(s_fch, a->fch[l], s_fch, (int64_t)N * lo.Fl);
    mt_tp_colpar_dinp(a->dln, a->tptmp, s_fch, w->fcw, N, C, lo.Fl, nb, 0);
    const float *dln = reduce_dinp(a, N, C); /* this rank's rows */
    mt_be()->copy(s_ln2, dln, (int64_t)R * C);
    mt_be()->layernorm_backward(a->dres, NULL, NULL, dln, a->res2[l], w->ln2w, a->ln2_mean[l], a->ln2_rstd[l], R, C, 1);
    d = all_rows(a, &lo, C);
    mt_be()->copy(s_res2, d, (int64_t)N * C);
    POLL(a);
    mt_be()->matmul_backward(a->datty, NULL, NULL, d, a->atty[l], w->attprojw, N, lo.Cl, C, 0);
    POLL(a);
    mt_be()->attention_backward(s_qkv, a->datt_scratch, a->datty, a->atty[l], a->qkv[l], a->att[l], B, T, lo.Cl, lo.Hl);
    POLL(a);
    mt_tp_colpar_dinp(a->dln, a->tptmp, s_qkv, w->qkvw, N, C, 3 * lo.Cl, nb, 1);
    dln = reduce_dinp(a, N, C);
    mt_be()->copy(s_ln1, dln, (int64_t)R * C);
    mt_be()->layernorm_backward(a->dres, NULL, NULL, dln, x, w->ln1w, a->ln1_mean[l], a->ln1_rstd[l], R, C, 1);
    POLL(a);
}

void mt_tp_block_backward_weight(const MtConfig *cfg, const MtBlockWeights *g, MtActs *a, int l, const float *x,
                                 const float *stash, int add)
{
    int N = a->B * a->T, C = cfg->C;
    MtTpLocal lo = mt_tp_local(cfg, a->tp, N);
    const float *s_res3 = stash, *s_fch = s_res3 + (int64_t)N * C, *s_ln2 = s_fch + (int64_t)N * lo.Fl,
                *s_res2 = s_ln2 + (int64_t)N * C, *s_qkv = s_res2 + (int64_t)N * C,
                *s_ln1 = s_qkv + (int64_t)N * 3 * lo.Cl;
    int R = lo.rows;
    int64_t mine = (int64_t)lo.row0 * C; /* this rank's rows of the gathered ones */
    mt_be()->matmul_backward(NULL, g->fcprojw, NULL, s_res3, a->fch_gelu[l], NULL, N, lo.Fl, C, add * MT_BE_ADD_DW);
    rows_grads(a, 0, NULL, g->fcprojb, s_res3 + mine, NULL, NULL, NULL, R, C, add);
    POLL(a);
    mt_be()->matmul_backward(NULL, g->fcw, g->fcb, s_fch, a->ln2[l], NULL, N, C, lo.Fl, add * MT_BE_ADD_DW);
    rows_grads(a, 1, g->ln2w, g->ln2b, s_ln2, a->res2[l], a->ln2_mean[l], a->ln2_rstd[l], R, C, add);
    POLL(a);
    mt_be()->matmul_backward(NULL, g->attprojw, NULL, s_res2, a->atty[l], NULL, N, lo.Cl, C, add * MT_BE_ADD_DW);
    rows_grads(a, 0, NULL, g->attprojb, s_res2 + mine, NULL, NULL, NULL, R, C, add);
    POLL(a);
    mt_be()->matmul_backward(NULL, g->qkvw, g->qkvb, s_qkv, a->ln1[l], NULL, N, C, 3 * lo.Cl, add * MT_BE_ADD_DW);
    rows_grads(a, 1, g->ln1w, g->ln1b, s_ln1, x, a->ln1_mean[l], a->ln1_rstd[l], R, C, add);
    MT_ASSERT(!a->tp->seqpar || !add, "sequence parallelism sums the replicated gradients of fresh buffers only");
    float *rep[6] = {g->ln1w, g->ln1b, g->attprojb, g->ln2w, g->ln2b, g->fcprojb};
    sum_replicated(a, rep, 6, C);
    POLL(a);
}

void mt_tp_head_backward_input(const MtConfig *cfg, const MtWeights *w, MtActs *a, const float *x, float *stash)
{
    int N = a->B * a->T, C = cfg->C;
    MtTpLocal lo = mt_tp_local(cfg, a->tp, N);
    const float *dlnf = colpar_vocab(a, mt_head_weight(cfg, w), N, C, (int)lo.Vl); /* this rank's rows */
    mt_be()->copy(stash, dlnf, (int64_t)lo.rows * C); /* kept for W */
    mt_be()->zero(a->dres, (int64_t)lo.rows * C);
    mt_be()->layernorm_backward(a->dres, NULL, NULL, dlnf, x, w->lnfw, a->lnf_mean, a->lnf_rstd, lo.rows, C, 1);
    POLL(a);
}

void mt_tp_head_backward_weight(const MtConfig *cfg, const MtWeights *g, MtActs *a, const float *x, const float *stash)
{
    int N = a->B * a->T, C = cfg->C;
    MtTpLocal lo = mt_tp_local(cfg, a->tp, N);
    int Vl = (int)lo.Vl;
    mt_model_head_dweight(cfg, g, N, Vl, a->logits, a->lnf);
    rows_grads(a, 1, g->lnfw, g->lnfb, stash, x, a->lnf_mean, a->lnf_rstd, lo.rows, C, !g->fresh);
    MT_ASSERT(!a->tp->seqpar || g->fresh, "sequence parallelism sums the replicated gradients of fresh buffers only");
    float *rep[2] = {g->lnfw, g->lnfb};
    sum_replicated(a, rep, 2, C);
    POLL(a);
}

const float *mt_tp_all_rows(const MtConfig *cfg, MtActs *a)
{
    MtTpLocal lo = mt_tp_local(cfg, a->tp, a->B * a->T);
    return all_rows(a, &lo, cfg->C);
}

/* ---- what the passes above send (mt_tp.h) ---- */

int64_t mt_tp_plan_micro_bytes(const MtConfig *cfg, const MtTpCtx *tp, int64_t ntok, int embed, int l0, int l1, int head,
                               int recompute, int split)
{
    int64_t N = tp ? tp->N : 1, C = cfg->C;
    if (N <= 1)
        return 0;
    int64_t ar = 8 * (N - 1) * ntok * C / N; /* an all-reduce, or an all-gather plus a reduce-scatter */
    int64_t rep = tp->seqpar ? 8 * (N - 1) * 6 * C / N : 0, rep_head = tp->seqpar ? 8 * (N - 1) * 2 * C / N : 0;
    int reruns = recompute == MT_RECOMPUTE_FULL ? (split ? 2 : 1) : 0;
    int64_t bytes = (int64_t)(l1 - l0) * ((4 + 2 * reruns) * ar + rep);
    if (embed)
        bytes += ar;
    if (head)
        bytes += ar + 20 * (N - 1) * ntok + rep_head;
    return bytes;
}

int64_t mt_tp_plan_step_bytes(const MtTpCtx *tp, int nparams)
{
    return tp && tp->N > 1 ? 8 * (int64_t)(tp->N - 1) * nparams : 0;
}
