/* pipe_head.c - the tied embedding on a pipeline's last rank (see mt_pipeline.h): the head's
 * part H_k of each micro-batch's wte gradient, held as pipe_head chose (pipe_internal.h),
 * completed by the first stage's rows (E) and summed into the wte tree in micro-batch order. */
#include "pipe_internal.h"

#include <string.h>

#include "mt_backend.h"

/* Completes the due E (their place in the list has passed) in micro-batch order: the rows
 * of k added to H_k, the leaf into the wte tree.  Waits for the first `wait` of them, then
 * takes only those already arrived. */
void pipe_poll_e(MtPipe *p, int wait)
{
    const MtTrainConfig *tc = &p->tr->tc;
    int64_t VC = p->tr->table[0].numel;
    while (p->e_next < p->e_due) {
        int h = 0;
        while (h < p->nh && p->h_mb[h] != p->e_next)
            h++;
        MT_ASSERT(h < p->nh && p->e_posted[h], "micro-batch %d's head gradient is not awaiting its rows", p->e_next);
        double t = mt_now();
        int ok = pipe_req_done(p, &p->ereq[h], wait > 0);
        pipe_clock_in(p, t);
        if (!ok)
            return;
        p->e_posted[h] = 0;
        float *H = p->hslot[p->defer ? 0 : h];
        if (p->defer) { /* H_k now, from what pipe_keep_head kept */
            mt_be()->zero(H, VC);
            if (p->defer == MT_PIPE_HEAD_KEEP)
                mt_model_head_dwte(&tc->cfg, tc->tp, tc->micro, tc->seq, p->keep[h], H);
            else
                mt_model_head_dwte_redo(&tc->cfg, tc->tp, p->w.wte, tc->micro, tc->seq, p->keep[h],
                                        targets_of(p, p->e_next), head_dscale(tc), p->redo, H);
        }
        if (tc->tp) { /* a tensor-parallel rank adds the rows of its vocabulary slice */
            MtTpLocal lo = mt_tp_local(&tc->cfg, tc->tp, tc->micro * tc->seq);
            mt_be()->tp_embed_backward_rows(H, p->eland[h], tokens_of(p, p->e_next), lo.v0, lo.Vl, tc->micro * tc->seq,
                                            tc->cfg.C);
        } else
            mt_be()->encoder_backward(H, NULL, p->eland[h], tokens_of(p, p->e_next), tc->micro, tc->seq, tc->cfg.C);
        const MtTreeStep *ts = &p->plan[p->wtstep];
        MT_ASSERT(ts->leaf == p->e_next, "embedding leaf %d out of order (plan expects %d)", p->e_next, ts->leaf);
        float *bufs[MT_TREE_MAX_BUFS]; /* the tree's buffers, the leaf buffer being the H slot */
        memcpy(bufs, p->wbuf, sizeof(float *) * (size_t)p->nwbuf);
        if (ts->buf < p->nwbuf)
            mt_be()->copy(p->wbuf[ts->buf], H, VC);
        else
            bufs[ts->buf] = H;
        if (rr(p)) { /* round-robin: the round's leaves over the copies (a subtree), at this E */
            t = mt_now();
            mt_allreduce(p->c, MT_GROUP_DP, bufs[ts->buf], VC, p->o.det);
            pipe_clock_in(p, t);
        }
        p->wtstep = mt_accum_adds(p->plan, p->nplan, p->wtstep, bufs, 0, VC);
        p->h_mb[h] = -1;
        p->e_next++;
        wait--;
    }
}

int pipe_take_hslot(MtPipe *p, int mb)
{
    for (;;) {
        for (int h = 0; h < p->nh; h++)
            if (p->h_mb[h] < 0) {
                p->h_mb[h] = mb;
                return h;
            }
        MT_ASSERT(p->e_next < p->e_due, "all %d head-gradient slots wait for rows not yet due", p->nh);
        pipe_poll_e(p, 1); /* an E whose place in the list has passed: waiting on it cannot deadlock */
    }
}

/* KEEP, REDO: the head of micro-batch mb has run its backward (without dwte); what H_k
 * needs at its E is kept */
void pipe_keep_head(MtPipe *p, const MtActs *s, int mb)
{
    int h = 0;
    while (h < p->nh && p->h_mb[h] != mb)
        h++;
    MT_ASSERT(h < p->nh, "no slot holds micro-batch %d's head", mb);
    if (p->defer == MT_PIPE_HEAD_KEEP)
        mt_model_head_keep(&p->tr->tc.cfg, s, p->keep[h]);
    else
        mt_model_head_keep_inputs(&p->tr->tc.cfg, s, p->keep[h]);
}
