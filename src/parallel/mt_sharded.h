/* mt_sharded.h - sharded state over a group: what ZeRO over whole replicas (zero.c) and ZeRO
 * over the copies of a pipeline (pipe_zero.c) do to their units, written once.
 *
 * The state is a list of units (a shard map, mt_shard.h) in some flat arrays: the trainer's
 * whole model, or a pipeline stage's units.  This rank holds chunk `rank` of every unit's
 * moments (and with FSDP its parameters), laid out as the shard (shard_off); gradients and
 * ZeRO-1/2's parameters are whole units (lo, len) or the shard, as the technique keeps them.
 * The operations:
 *   - a unit's gradient reduce-scattered over the shard group into its chunk (in place
 *     through a staging buffer, or into a shard), then with hybrid sharding summed over the
 *     copies (dp_replica), in pieces below Open MPI's large-message cliff;
 *   - the norm's block sums: every unit's chunk as MT_NORM_BLOCK-float blocks, all-gathered,
 *     so that the caller adds every rank's blocks in the single-device order;
 *   - clip and AdamW on every chunk, with the trainer table's element indices;
 *   - ZeRO-1/2: the updated parameters all-gathered unit by unit;
 *   - FSDP: a unit's parameters all-gathered into one of four slots (embedding, head, blocks
 *     by parity, so that the next block's gather runs while this one computes), waited for
 *     when a pass needs them, released after the update.
 * Every call that communicates adds its seconds to *comm_s.
 */
#ifndef MT_SHARDED_H
#define MT_SHARDED_H

#include "mt_comm.h"
#include "mt_shard.h"

/* Open MPI's bandwidth collapses above 16 MiB per call on this kind of machine (it maps
 * fresh memory per call): all-reduces go in pieces of at most 8 MiB.  Each element's sum is
 * the same whatever the piece. */
#define MT_PIECE_FLOATS ((int64_t)2 << 20)

typedef struct {
    MtComm *c;
    const MtShardMap *map; /* the units, over group dp_shard */
    int det;               /* fixed-order reductions */
    int64_t piece;         /* the most floats of one dp_replica all-reduce */
    double *comm_s;        /* the technique's communication clock */
    /* FSDP: gathered units; slot_unit is the caller's key of what a slot holds (-1: none) */
    float *slot[4];
    int64_t slot_len[4];
    int slot_unit[4];
    MtRequest *slot_req[4];
} MtSharded;

/* Sets up s over map (the slots empty and unallocated). */
void mt_sharded_init(MtSharded *s, MtComm *c, const MtShardMap *map, int det, double *comm_s);

/* Hybrid sharding: x (n floats of reduced chunks) summed over the copies, in pieces. */
void mt_sharded_across_copies(MtSharded *s, float *x, int64_t n);
/* Unit i of whole (its span at map->lo[i]) reduce-scattered into dst (its chunk), through
 * stage (a chunk's worth of floats) when dst lies inside whole; then summed over the copies. */
void mt_sharded_reduce(MtSharded *s, int i, const float *whole, float *dst, float *stage);

/* The block sums of this rank's chunks: chunk(ctx, i) is unit i's reduced chunk; mine holds
 * shard_len / MT_NORM_BLOCK doubles (at shard_off / MT_NORM_BLOCK), all N times that (rank
 * r's at r x that).  Collective. */
void mt_sharded_block_sums(MtSharded *s, float *(*chunk)(void *ctx, int i), void *ctx, double *mine, double *all);

/* Clip by norm and AdamW on every unit's chunk: grad(ctx, i) its reduced chunk, param(ctx,
 * i) its parameters, flat(ctx, i) the trainer table's index of its first element; m and v
 * the shard's moments. */
void mt_sharded_adamw(MtSharded *s, const MtParam *table, int n, float *(*grad)(void *ctx, int i),
                      float *(*param)(void *ctx, int i), int64_t (*flat)(void *ctx, int i), void *ctx, float *m,
                      float *v, const MtOptimConfig *oc, float lr, int step, double norm);
/* ZeRO-1/2: every unit's updated chunk (in place in params) all-gathered into its span. */
void mt_sharded_gather_params(MtSharded *s, float *params);

/* FSDP: starts gathering unit i's parameters (this rank's chunk at shard + shard_off[i])
 * into `slot`, now holding `key`; nothing when it already does. */
void mt_sharded_slot_start(MtSharded *s, int slot, int i, int key, const float *shard);
/* Waits for slot's gather; returns the slot. */
float *mt_sharded_slot_wait(MtSharded *s, int slot);
/* Progresses the slots' gathers without waiting. */
void mt_sharded_slot_poll(MtSharded *s);
/* Every slot empty (after the update: they hold old parameters). */
void mt_sharded_slot_release(MtSharded *s);

#endif
