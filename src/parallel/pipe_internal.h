/* pipe_internal.h - what the files of the pipeline share; not an interface for other modules
 * (theirs is mt_pipeline.h).
 *   pipeline.c    the executor: transfers, compute, the step
 *   pipe_head.c   the tied embedding: the block's rows on the first rank, its sums on the last
 *   pipe_setup.c  the stage's layout, configuration, allocation and release
 *   pipe_zero.c   ZeRO and FSDP over the copies of the pipeline
 *   pipe_io.c     evaluation, checkpoint pieces and loads
 *   pipe_plan.c   memory and traffic from the layout alone */
#ifndef PIPE_INTERNAL_H
#define PIPE_INTERNAL_H

#include "mt_pipeline.h"
#include "mt_tp.h"

/* ZeRO over copies: S ranks shard the units (0: off); round-robin leaves; FSDP */
static inline int zero_S(const MtPipeOptions *o) { return o->zero_dp > 1 ? o->zero_shard : 0; }
static inline int rr(const MtPipe *p) { return p->o.mb_stride > 1; }
static inline int fsdp(const MtPipe *p) { return p->o.zero == 3; }

/* which FSDP slot unit u of a model of L blocks uses: embedding, head, blocks by parity */
static inline int unit_slot(int L, int u) { return u == 0 ? 0 : u == L + 1 ? 1 : 2 + (u & 1); }
static inline int slot_of(const MtPipe *p, int u) { return unit_slot(p->tr->tc.cfg.L, u); }

/* floats of a micro-batch's residual stream on this rank (what crosses a stage boundary:
 * with sequence parallelism a tp rank's rows), and of all its rows (the embedding's rows
 * that go from the first stage to the last) */
/* How the last rank holds the head's part of wte's gradient for its nh blocks awaiting
 * their embedding rows (mt_pipeline.h).  Blocks of several micro-batches: SLOTS (each
 * block's running sum).  Blocks of one, whichever holds the fewest floats of:
 *   SLOTS  each its H_k, computed in its backward (nh slots of VC floats);
 *   KEEP   each its dlogits and ln_f output (keep floats), H_k computed at its E into one
 *          slot;
 *   REDO   with --head-recompute (o->head_recompute) only: each its ln_f output (and tp
 *          statistics), H_k recomputed at its E row block by row block into one slot
 *          (scratch: one block's logits): one more logits product per micro-batch.
 * With nh >= 2 and --head-recompute SLOTS is left out, so the gradients stay within one
 * slot.  Ties go to the earlier (less work). */
typedef struct {
    int mode;
    int64_t keep, scratch; /* floats kept per awaiting micro-batch; REDO's scratch */
} PipeHead;
static inline PipeHead pipe_head(const MtTrainConfig *tc, const MtPipeOptions *o, int64_t VC, int nh)
{
    PipeHead slots = {MT_PIPE_HEAD_SLOTS, 0, 0};
    PipeHead keep = {MT_PIPE_HEAD_KEEP, mt_model_head_keep_floats(&tc->cfg, tc->tp, tc->micro, tc->seq), 0};
    PipeHead redo = {MT_PIPE_HEAD_REDO, mt_model_head_inputs_floats(&tc->cfg, tc->tp, tc->micro, tc->seq),
                     mt_model_head_redo_floats(&tc->cfg, tc->tp, tc->micro, tc->seq)};
    if (nh <= 1 || mt_accum_block_size(tc) > 1)
        return slots;
    int64_t fk = nh * keep.keep + VC, fr = nh * redo.keep + redo.scratch + VC;
    if (o->head_recompute)
        return fk <= fr ? keep : redo;
    return fk < nh * VC ? keep : slots;
}
static inline int64_t erows(const MtPipe *p) { return (int64_t)p->tr->tc.micro * p->tr->tc.seq * p->tr->tc.cfg.C; }
/* Whether the rank's leaf buffer (a block's later leaves, --accum-blocks with blocks of
 * several micro-batches) is unit by unit: each unit's gradient in one buffer of the largest
 * unit, added to the block's sum as the unit finishes (the trainer's way), instead of a
 * whole stage's; not on round-robin ranks (no leaf buffer) nor where the test hook's
 * left-to-right order takes the leaf buffer as its sum.  The floats of that buffer. */
int pipe_leaf_units(const MtTrainConfig *tc, const MtPipeOptions *o, int P, int rank);
int64_t pipe_leaf_unit_floats(const MtTrainConfig *tc, const MtPipeOptions *o, int P, int rank);
/* the step's host tokens of micro-batch mb (what an embedding sum is indexed with) */
static inline const int32_t *host_tokens_of(const MtPipe *p, int mb)
{
    return p->tr->host_inputs + (int64_t)mb * p->tr->tc.micro * p->tr->tc.seq;
}
static inline int64_t rows(const MtPipe *p)
{
    const MtTpCtx *tp = p->tr->tc.tp;
    return tp && tp->seqpar ? erows(p) / tp->N : erows(p);
}

/* the step's tokens and targets of micro-batch mb */
static inline const int32_t *tokens_of(const MtPipe *p, int mb)
{
    return p->tr->inputs + (int64_t)mb * p->tr->tc.micro * p->tr->tc.seq;
}

static inline const int32_t *targets_of(const MtPipe *p, int mb)
{
    return p->tr->targets + (int64_t)mb * p->tr->tc.micro * p->tr->tc.seq;
}

/* the loss gradient's scale: the mean over the step's tokens */
static inline float head_dscale(const MtTrainConfig *tc) { return (float)(1.0 / ((double)tc->batch * tc->seq)); }

/* the activation sets: the one backward scratch (with the recompute buffers), and a set of
 * chunk ch's blocks, embedding or received input, head */
static inline MtActsShape scratch_shape(const MtTrainConfig *tc)
{
    return (MtActsShape){0, 0, 0, 0, 0, 1, tc->recompute, 1, tc->tp};
}
static inline MtActsShape set_shape(const MtTrainConfig *tc, const MtPipeChunk *ch)
{
    return (MtActsShape){ch->l0, ch->l1, ch->embed, ch->head, !ch->embed, 0, tc->recompute, 0, tc->tp};
}

/* the unit after block l's in a forward through chunk ch (-1: none) */
static inline int next_forward(int L, const MtPipeChunk *ch, int l)
{
    return l + 1 < ch->l1 ? l + 2 : ch->head ? L + 1 : -1;
}

/* the unit after the embedding's in a forward through chunk ch, and after the head's in
 * its backward (-1: none; an end chunk may hold no block) */
static inline int next_after_embed(const MtPipeChunk *ch) { return ch->l1 > ch->l0 ? ch->l0 + 1 : -1; }
static inline int next_after_head(const MtPipeChunk *ch) { return ch->l1 > ch->l0 ? ch->l1 : -1; }

/* norm blocks (MT_NORM_BLOCK floats) of unit u */
static inline int64_t nblocks(const MtTrainer *tr, int u)
{
    return (tr->unit_hi[u] - tr->unit_lo[u] + MT_NORM_BLOCK - 1) / MT_NORM_BLOCK;
}

/* message tags: activations, gradients, the embedding's rows, the final wte gradient */
#define TAG_F 0
#define TAG_B 1
#define TAG_E 2
#define TAG_WTE 3
static inline int tag(int kind, int mb) { return kind * 8192 + mb; }

/* ---- pipe_setup.c ---- */
/* chunk c of rank: its stage, units uf..ul and blocks */
void pipe_chunk_units(const MtPipeOptions *o, int L, int P, int rank, int c, MtPipeChunk *ch, int *uf, int *ul);
/* chunks of one key have sets of one shape (as many blocks, the same ends) and share a pool */
static inline int pipe_set_key(const MtPipeChunk *ch) { return 4 * (ch->l1 - ch->l0) + 2 * ch->embed + ch->head; }
/* the sets of each of rank's chunks' pools (mt_schedule_pool_sets: 0 where a chunk shares another's) */
void pipe_pool_sets(const MtPipeOptions *o, const MtSchedule *s, int L, int rank, const MtAction *list, int n,
                    int *sets);
/* the model units chunk ch holds: uf..ul */
void pipe_units(const MtPipe *p, const MtPipeChunk *ch, int *uf, int *ul);
/* n floats in the trainer's memory accounting (category cat), and their release */
float *pipe_alloc(MtPipe *p, MtMemCat cat, int64_t n);
void pipe_free_buf(MtPipe *p, MtMemCat cat, float *x, int64_t n);

/* ---- pipeline.c ---- */
/* adds now - since to the step's communication time; returns now */
double pipe_clock_in(MtPipe *p, double since);
/* whether request *r is done (waiting for it with wait); clears it when done */
int pipe_req_done(MtPipe *p, MtRequest **r, int wait);
/* progresses the step's transfers (the activation sets' poll hook) */
void pipe_poll(void *ctx);

/* ---- pipe_head.c ---- */
/* completes the due E in micro-batch order (waits for the first `wait` of them) */
void pipe_poll_e(MtPipe *p, int wait);
/* a head slot for block bl (waiting on due E while none is free) */
int pipe_take_hslot(MtPipe *p, int bl);
/* the slot that sums block bl */
int pipe_hslot_of(const MtPipe *p, int bl);
/* the last rank's head part of micro-batch mb: where its backward writes it (the block's
 * slot, or the leaf buffer), and its addition to the slot after */
float *pipe_head_begin(MtPipe *p, int mb);
void pipe_head_end(MtPipe *p, int mb);
/* first rank: the block's sum indexed for micro-batch mb (its rows are added next); SEND_E of mb */
void pipe_embed_index(MtPipe *p, int mb);
void pipe_send_e(MtPipe *p, int mb);
/* last rank: RECV_E of mb */
void pipe_recv_e(MtPipe *p, int mb);
/* KEEP, REDO: keeps what micro-batch mb's H_k needs at its E */
void pipe_keep_head(MtPipe *p, const MtActs *s, int mb);

/* ---- pipe_zero.c ---- */
MtStatus pipe_zero_init(MtPipe *p);
float *pipe_gchunk(MtPipe *p, int i);
void pipe_params_need(MtPipe *p, int u, int next);
void pipe_params_release(MtPipe *p);
void pipe_leaf_reduce(MtPipe *p, MtPipeChunk *ch);
void pipe_zero_blocks(MtPipe *p, double *mine, MtRequest **wte);
void pipe_zero_reduce(MtPipe *p);
void pipe_zero_update(MtPipe *p, double norm, float lr);

#endif
