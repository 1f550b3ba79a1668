/* pipe_head.c - the tied embedding on a pipeline (see mt_pipeline.h): the first rank sums
 * each accumulation block's embedding rows per token and sends them at the block's end; the
 * last rank sums the block's head parts H_k in a slot (held as pipe_head chose,
 * pipe_internal.h), adds the rows when they arrive, and puts the block into the wte tree
 * over the copy's blocks. */
#include "pipe_internal.h"

#include <string.h>

#include "mt_backend.h"

static int block_of(const MtPipe *p, int mb) { return mb / p->blk; }
static int block_last(const MtPipe *p, int mb) { return mb % p->blk == p->blk - 1; }
static int64_t ntok(const MtPipe *p) { return (int64_t)p->tr->tc.micro * p->tr->tc.seq; }

int pipe_hslot_of(const MtPipe *p, int bl)
{
    for (int h = 0; h < p->nh; h++)
        if (p->h_mb[h] == bl)
            return h;
    MT_ASSERT(0, "no head slot sums accumulation block %d", bl);
    return -1;
}

/* ---- the first rank ---- */

void pipe_embed_index(MtPipe *p, int mb) { mt_embsum_index(&p->esum, host_tokens_of(p, mb), ntok(p)); }

void pipe_send_e(MtPipe *p, int mb)
{
    if (!block_last(p, mb))
        return;
    double t = mt_now();
    int k = block_of(p, mb) % p->nesend;
    pipe_req_done(p, &p->esend_req[k], 1); /* the rows this buffer held last have left */
    mt_be()->copy(p->esend[k], p->esum.rows, p->esum.n * p->tr->tc.cfg.C);
    p->esend_req[k] = mt_isend(p->c, MT_GROUP_EMBED, p->esend[k], p->ecap, 1, tag(TAG_E, mb));
    mt_embsum_reset(&p->esum);
    pipe_clock_in(p, t);
}

/* ---- the last rank ---- */

void pipe_recv_e(MtPipe *p, int mb)
{
    if (!block_last(p, mb))
        return;
    int h = pipe_hslot_of(p, block_of(p, mb));
    double t = mt_now();
    p->ereq[h] = mt_irecv(p->c, MT_GROUP_EMBED, p->eland[h], p->ecap, 0, tag(TAG_E, mb));
    p->e_posted[h] = 1;
    pipe_clock_in(p, t);
}

float *pipe_head_begin(MtPipe *p, int mb)
{
    int64_t VC = p->tr->table[0].numel;
    if (mb % p->blk == 0) {
        int h = pipe_take_hslot(p, block_of(p, mb));
        if (p->defer) /* H_k later, at its E, from what pipe_keep_head keeps */
            return NULL;
        mt_be()->zero(p->hslot[h], VC); /* the block's first: assigned */
        return p->hslot[h];
    }
    mt_be()->zero(p->hleaf, VC); /* a later one: apart, then added (pipe_head_end) */
    return p->hleaf;
}

void pipe_head_end(MtPipe *p, int mb)
{
    if (mb % p->blk != 0)
        mt_be()->add(p->hslot[pipe_hslot_of(p, block_of(p, mb))], p->hleaf, p->tr->table[0].numel);
}

/* Completes the due E in micro-batch order: at a block's last, its rows added to its slot
 * and the block into the wte tree.  Waits for the first `wait` of them, then takes only
 * those already arrived. */
void pipe_poll_e(MtPipe *p, int wait)
{
    const MtTrainConfig *tc = &p->tr->tc;
    int64_t VC = p->tr->table[0].numel;
    while (p->e_next < p->e_due) {
        int mb = p->e_next;
        if (!block_last(p, mb)) { /* its head part is in the block's slot already */
            p->e_next++;
            wait--;
            continue;
        }
        int bl = block_of(p, mb), h = pipe_hslot_of(p, bl);
        MT_ASSERT(p->e_posted[h], "block %d's head sum is not awaiting its rows", bl);
        double t = mt_now();
        int ok = pipe_req_done(p, &p->ereq[h], wait > 0);
        pipe_clock_in(p, t);
        if (!ok)
            return;
        p->e_posted[h] = 0;
        float *H = p->hslot[p->defer ? 0 : h];
        if (p->defer) { /* blocks of one: H_k now, from what pipe_keep_head kept */
            mt_be()->zero(H, VC);
            if (p->defer == MT_PIPE_HEAD_KEEP)
                mt_model_head_dwte(&tc->cfg, tc->tp, tc->micro, tc->seq, p->keep[h], H);
            else
                mt_model_head_dwte_redo(&tc->cfg, tc->tp, p->w.wte, tc->micro, tc->seq, p->keep[h],
                                        targets_of(p, mb), head_dscale(tc), p->redo, H);
        }
        mt_embsum_reset(&p->esum); /* the block's tokens in the order the first rank met them */
        for (int k = bl * p->blk; k <= mb; k++)
            mt_embsum_index(&p->esum, host_tokens_of(p, k), ntok(p));
        mt_embsum_apply(&p->esum, p->eland[h], H);
        const MtTreeStep *ts = &p->wplan[p->wtstep];
        MT_ASSERT(ts->leaf == bl, "embedding block %d out of order (plan expects %d)", bl, ts->leaf);
        if (p->wbuf[ts->buf] != H)
            mt_be()->copy(p->wbuf[ts->buf], H, VC);
        if (rr(p)) { /* round-robin: the round's leaves over the copies (a subtree), at this E */
            t = mt_now();
            mt_allreduce(p->c, MT_GROUP_DP, p->wbuf[ts->buf], VC, p->o.det);
            pipe_clock_in(p, t);
        }
        p->wtstep = mt_accum_adds(p->wplan, p->nwplan, p->wtstep, p->wbuf, 0, VC, NULL);
        p->h_mb[h] = -1;
        p->e_next++;
        wait--;
    }
}

int pipe_take_hslot(MtPipe *p, int bl)
{
    for (;;) {
        for (int h = 0; h < p->nh; h++)
            if (p->h_mb[h] < 0) {
                p->h_mb[h] = bl;
                return h;
            }
        MT_ASSERT(p->e_next < p->e_due, "all %d head-sum slots wait for rows not yet due", p->nh);
        pipe_poll_e(p, 1); /* an E whose place in the list has passed: waiting on it cannot deadlock */
    }
}

/* KEEP, REDO (blocks of one micro-batch): the head of micro-batch mb has run its backward
 * (without dwte); what H_k needs at its E is kept */
void pipe_keep_head(MtPipe *p, const MtActs *s, int mb)
{
    int h = pipe_hslot_of(p, block_of(p, mb));
    if (p->defer == MT_PIPE_HEAD_KEEP)
        mt_model_head_keep(&p->tr->tc.cfg, s, p->keep[h]);
    else
        mt_model_head_keep_inputs(&p->tr->tc.cfg, s, p->keep[h]);
}
