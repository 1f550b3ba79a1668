/* sharded.c - sharded state over a group (see mt_sharded.h). */
#include "mt_sharded.h"
#include "mt_backend.h"

#include <string.h>

#include "mt_optim.h"

static void clock_add(MtSharded *s, double since) { *s->comm_s += mt_now() - since; }

void mt_sharded_init(MtSharded *s, MtComm *c, const MtShardMap *map, int det, double *comm_s)
{
    memset(s, 0, sizeof *s);
    s->c = c;
    s->map = map;
    s->det = det;
    s->comm_s = comm_s;
    s->piece = mt_piece_floats(mt_comm_group_size(c, MT_GROUP_DP), MT_PIECE_FLOATS);
    for (int k = 0; k < 4; k++)
        s->slot_unit[k] = -1;
}

void mt_sharded_across_copies(MtSharded *s, float *x, int64_t n)
{
    if (mt_comm_group_size(s->c, MT_GROUP_DP_REPLICA) == 1)
        return;
    double t = mt_now();
    for (int64_t at = 0; at < n; at += s->piece)
        mt_allreduce(s->c, MT_GROUP_DP_REPLICA, x + at, n - at < s->piece ? n - at : s->piece, s->det);
    clock_add(s, t);
}

void mt_sharded_reduce(MtSharded *s, int i, const float *whole, float *dst, float *stage)
{
    const MtShardMap *m = s->map;
    double t = mt_now();
    mt_reduce_scatter(s->c, MT_GROUP_DP_SHARD, whole + m->lo[i], stage ? stage : dst, m->len[i], s->det);
    if (stage)
        mt_be()->copy(dst, stage, m->chunk[i]);
    clock_add(s, t);
    mt_sharded_across_copies(s, dst, m->chunk[i]);
}

void mt_sharded_block_sums(MtSharded *s, float *(*chunk)(void *ctx, int i), void *ctx, double *mine, double *all)
{
    const MtShardMap *m = s->map;
    int64_t nb = m->shard_len / MT_NORM_BLOCK;
    for (int i = 0; i < m->nunits; i++)
        mt_block_sumsq(chunk(ctx, i), m->chunk[i], mine + m->shard_off[i] / MT_NORM_BLOCK);
    double t = mt_now(); /* the doubles travel as pairs of floats, bits untouched */
    mt_allgather(s->c, MT_GROUP_DP_SHARD, (const float *)mine, (float *)all, 2 * nb * m->N);
    clock_add(s, t);
}

void mt_sharded_adamw(MtSharded *s, const MtParam *table, int n, float *(*grad)(void *ctx, int i),
                      float *(*param)(void *ctx, int i), int64_t (*flat)(void *ctx, int i), void *ctx, float *m,
                      float *v, const MtOptimConfig *oc, float lr, int step, double norm)
{
    const MtShardMap *map = s->map;
    for (int i = 0; i < map->nunits; i++) {
        int64_t lo = flat(ctx, i);
        float *g = grad(ctx, i);
        mt_grad_clip(g, map->chunk[i], oc->grad_clip, norm);
        mt_adamw_range(table, n, lo, lo + map->chunk[i], param(ctx, i), g, m + map->shard_off[i],
                       v + map->shard_off[i], oc, lr, step);
    }
}

void mt_sharded_gather_params(MtSharded *s, float *params)
{
    const MtShardMap *m = s->map;
    double t = mt_now();
    for (int i = 0; i < m->nunits; i++)
        mt_allgather(s->c, MT_GROUP_DP_SHARD, params + mt_shard_chunk_lo(m, i), params + m->lo[i], m->len[i]);
    clock_add(s, t);
}

void mt_sharded_slot_start(MtSharded *s, int slot, int i, int key, const float *shard)
{
    if (s->slot_unit[slot] == key)
        return;
    MT_ASSERT(!s->slot_req[slot] && i >= 0, "FSDP slot %d is still being gathered (unit %d)", slot, key);
    double t = mt_now();
    s->slot_req[slot] = mt_iallgather(s->c, MT_GROUP_DP_SHARD, shard + s->map->shard_off[i], s->slot[slot],
                                      s->map->len[i]);
    s->slot_unit[slot] = key;
    clock_add(s, t);
}

float *mt_sharded_slot_wait(MtSharded *s, int slot)
{
    if (s->slot_req[slot]) {
        double t = mt_now();
        mt_wait(s->c, s->slot_req[slot]);
        s->slot_req[slot] = NULL;
        clock_add(s, t);
    }
    return s->slot[slot];
}

void mt_sharded_slot_poll(MtSharded *s)
{
    double t = mt_now();
    for (int k = 0; k < 4; k++)
        if (s->slot_req[k] && mt_test(s->c, s->slot_req[k]))
            s->slot_req[k] = NULL;
    clock_add(s, t);
}

void mt_sharded_slot_release(MtSharded *s)
{
    for (int k = 0; k < 4; k++) {
        MT_ASSERT(!s->slot_req[k], "FSDP slot %d still being gathered at the end of the step", k);
        s->slot_unit[k] = -1;
    }
}
