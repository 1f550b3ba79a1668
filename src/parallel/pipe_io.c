/* pipe_io.c - a pipeline stage's evaluation and its pieces of checkpoints (see mt_pipeline.h). */
#include "pipe_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mt_checkpoint.h"

int mt_pipe_world_rank(const MtPipe *p, int r) { return r * (mt_comm_size(p->c) / p->P); }

int64_t mt_pipe_stage_floats(const MtPipe *p) { return p->tr->tc.grads_len; }


/* ---- evaluation, checkpoints ---- */

void mt_pipe_eval_windows(MtPipe *p, const MtTokens *data, int64_t lo, int64_t hi, int passes, double *sums)
{
    MtTrainer *tr = p->tr;
    const MtTrainConfig *tc = &tr->tc;
    int T = tc->seq;
    for (int j = 0; j < passes; j++) {
        int real, b = mt_trainer_eval_pass(tr, data, lo, hi, j, &real);
        int64_t n = (int64_t)b * T * tc->cfg.C / (tc->tp && tc->tp->seqpar ? tc->tp->N : 1); /* this rank's rows */
        for (int stage = p->rank; stage < p->S; stage += p->P) {
            MtPipeChunk *ch = &p->ch[stage / p->P];
            MtActs a = ch->sets[0]; /* same buffers, fewer rows */
            a.B = b;
            if (ch->embed) {
                pipe_params_need(p, 0, next_after_embed(ch));
                mt_model_embed_forward(&tc->cfg, &p->w, &a, tr->inputs);
            } else
                mt_recv(p->c, MT_GROUP_PP, a.encoded, n, (stage - 1) % p->P);
            const float *x = a.encoded;
            for (int l = ch->l0; l < ch->l1; l++) {
                pipe_params_need(p, l + 1, next_forward(tc->cfg.L, ch, l));
                mt_model_block_forward(&tc->cfg, &p->w, &a, l, x);
                x = a.res3[l];
            }
            if (ch->head) {
                pipe_params_need(p, tc->cfg.L + 1, -1);
                mt_model_head_forward(&tc->cfg, &p->w, &a, x, tr->targets, 0.0f);
                mt_eval_window_sums(mt_trainer_host_losses(tr, a.losses, (int64_t)real * T), real, T,
                                    sums + (int64_t)j * tc->micro);
            } else
                mt_send(p->c, MT_GROUP_PP, x, n, (stage + 1) % p->P);
        }
    }
    if (hi > lo) /* the doubles travel as pairs of floats, bits untouched */
        mt_broadcast(p->c, MT_GROUP_PP, (float *)sums, 2 * (hi - lo), p->P - 1);
    if (fsdp(p))
        pipe_params_release(p); /* every step starts from empty slots, evaluated or not */
}

int64_t mt_pipe_piece(void *ctx, int q, int k, int64_t *begin, int64_t *end)
{
    const MtPipe *p = ctx;
    const MtParam *t = &p->tr->table[q];
    if (k > 0 || p->unit_rank[t->unit] != p->rank) /* the last rank's wte replica is not its own */
        return -1;
    for (int c = 0; c < p->V; c++)
        if (t->offset >= p->ch[c].lo && t->offset < p->ch[c].hi) {
            *begin = 0;
            *end = t->numel;
            return p->ch[c].loff + (t->offset - p->ch[c].lo);
        }
    MT_ASSERT(0, "%s is not on pipeline rank %d", t->name, p->rank);
    return -1;
}

int64_t mt_pipe_inner_piece(void *ctx, int q, int k, int64_t *begin, int64_t *end)
{
    const MtPipeInner *x = ctx;
    const MtPipe *p = x->p;
    const MtParam *t = &p->tr->table[q];
    int64_t b, e, base = x->replica ? (q == 0 ? 0 : -1) : mt_pipe_piece((void *)p, q, 0, &b, &e);
    if (base < 0)
        return -1;
    int64_t at = x->fn(x->ctx, q, k, begin, end);
    if (at < 0)
        return -1;
    int64_t L = base + (at - t->offset); /* where the piece sits in the stage's arrays */
    if (!x->shard)
        return L;
    const MtShardMap *m = &p->zmap; /* ZeRO: only the part in this rank's chunk, from its shard */
    for (int i = 0; i < m->nunits; i++)
        if (p->zunit[i] == t->unit) {
            int64_t cl = mt_shard_chunk_lo(m, i), lo = L > cl ? L : cl;
            int64_t hi = L + (*end - *begin) < cl + m->chunk[i] ? L + (*end - *begin) : cl + m->chunk[i];
            *begin += lo - L;
            *end = lo < hi ? *begin + (hi - lo) : *begin; /* empty: the next piece may still be here */
            return lo < hi ? m->shard_off[i] + (lo - cl) : 0;
        }
    return -1;
}

MtStatus mt_pipe_load(MtPipe *p, const char *dir, const MtParam *whole, MtCkptPieces fn, void *ctx)
{
    MtTrainer *tr = p->tr;
    int z = p->o.zero_dp > 1, z3 = fsdp(p); /* ZeRO: the moments' chunks (FSDP: the parameters' too) */
    if (fn) { /* another technique's pieces inside the stages */
        MtPipeInner in = {p, fn, ctx, 0, 0}, rep = {p, fn, ctx, 1, 0}, sh = {p, fn, ctx, 0, 1};
        if (!z3)
            MT_TRY(mt_ckpt_load_pieces(dir, whole, tr->nparams, mt_pipe_inner_piece, &in, tr->params, z ? NULL : tr->m,
                                       z ? NULL : tr->v));
        if (z)
            MT_TRY(mt_ckpt_load_pieces(dir, whole, tr->nparams, mt_pipe_inner_piece, &sh, z3 ? tr->params : NULL, tr->m,
                                       tr->v));
        if (p->wte)
            MT_TRY(mt_ckpt_load_pieces(dir, whole, tr->nparams, mt_pipe_inner_piece, &rep, p->wte, p->wte_m, p->wte_v));
        return MT_OK;
    }
    for (int k = 0; k < p->V && !z3; k++) {
        MtPipeChunk *ch = &p->ch[k];
        MT_TRY(mt_ckpt_load_range(dir, tr->table, tr->nparams, ch->lo, ch->hi, tr->params + ch->loff,
                                  z ? NULL : tr->m + ch->loff, z ? NULL : tr->v + ch->loff));
    }
    if (z)
        MT_TRY(mt_ckpt_load_pieces(dir, tr->table, tr->nparams, mt_pipe_shard_piece, p, z3 ? tr->params : NULL, tr->m,
                                   tr->v));
    if (p->wte) /* the replica: wte is the table's first tensor */
        MT_TRY(mt_ckpt_load_range(dir, tr->table, tr->nparams, 0, tr->table[0].numel, p->wte, p->wte_m, p->wte_v));
    return MT_OK;
}

