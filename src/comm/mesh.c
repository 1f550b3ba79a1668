/* mesh.c - rank <-> coordinates, groups, layout validation (no MPI). */
#include "mt_mesh.h"

#include <string.h>

int mt_mesh_size(const MtLayout *l) { return l->pp * l->dp * l->tp; }

MtCoords mt_mesh_coords(const MtLayout *l, int rank)
{
    return (MtCoords){.pp = rank / (l->dp * l->tp), .dp = (rank / l->tp) % l->dp, .tp = rank % l->tp};
}

int mt_mesh_rank(const MtLayout *l, MtCoords c) { return (c.pp * l->dp + c.dp) * l->tp + c.tp; }

int mt_mesh_group(const MtLayout *l, MtGroupKind kind, int rank, int *members, int *index)
{
    MtCoords c = mt_mesh_coords(l, rank);
    int n = 0, at = 0;
#define ADD(cc)                                          \
    do {                                                 \
        int r_ = mt_mesh_rank(l, (cc));                  \
        if (r_ == rank)                                  \
            at = n;                                      \
        if (members)                                     \
            members[n] = r_;                             \
        n++;                                             \
    } while (0)
    switch (kind) {
    case MT_GROUP_TP:
        for (int i = 0; i < l->tp; i++)
            ADD(((MtCoords){c.pp, c.dp, i}));
        break;
    case MT_GROUP_DP:
        for (int i = 0; i < l->dp; i++)
            ADD(((MtCoords){c.pp, i, c.tp}));
        break;
    case MT_GROUP_PP:
        for (int i = 0; i < l->pp; i++)
            ADD(((MtCoords){i, c.dp, c.tp}));
        break;
    case MT_GROUP_EMBED:
        if (c.pp != 0 && c.pp != l->pp - 1) { /* a middle stage holds no embedding: alone */
            ADD(c);
            break;
        }
        ADD(((MtCoords){0, c.dp, c.tp}));
        if (l->pp > 1)
            ADD(((MtCoords){l->pp - 1, c.dp, c.tp}));
        break;
    case MT_GROUP_DP_SHARD: {
        int S = mt_mesh_shard(l), g0 = c.dp / S * S;
        for (int i = 0; i < S; i++)
            ADD(((MtCoords){c.pp, g0 + i, c.tp}));
        break;
    }
    case MT_GROUP_DP_REPLICA: {
        int S = mt_mesh_shard(l);
        for (int i = c.dp % S; i < l->dp; i += S)
            ADD(((MtCoords){c.pp, i, c.tp}));
        break;
    }
    case MT_GROUP_WORLD:
    default:
        for (int i = 0; i < mt_mesh_size(l); i++)
            ADD(mt_mesh_coords(l, i));
        break;
    }
#undef ADD
    if (index)
        *index = at;
    return n;
}

int mt_mesh_group_color(const MtLayout *l, MtGroupKind kind, int rank)
{
    MtCoords c = mt_mesh_coords(l, rank);
    switch (kind) {
    case MT_GROUP_TP: return c.pp * l->dp + c.dp;
    case MT_GROUP_DP: return c.pp * l->tp + c.tp;
    case MT_GROUP_PP: return c.dp * l->tp + c.tp;
    case MT_GROUP_EMBED: /* middle stages are in no embedding group of their own: alone */
        return (c.pp == 0 || c.pp == l->pp - 1) ? c.dp * l->tp + c.tp : l->dp * l->tp + rank;
    case MT_GROUP_DP_SHARD: return (c.pp * l->tp + c.tp) * l->dp + c.dp / mt_mesh_shard(l);
    case MT_GROUP_DP_REPLICA: return (c.pp * l->tp + c.tp) * l->dp + c.dp % mt_mesh_shard(l);
    default: return 0;
    }
}

const char *mt_group_name(MtGroupKind kind)
{
    static const char *names[MT_NGROUPS] = {"tp", "dp", "pp", "embed", "dp_shard", "dp_replica", "world"};
    return kind < MT_NGROUPS ? names[kind] : "?";
}

MtStatus mt_layout_check(const MtLayout *l, int world, int heads, int layers, int zero,
                         const char *schedule)
{
    if (l->dp < 1 || l->tp < 1 || l->pp < 1)
        return mt_error(MT_EINPUT, "layout --dp %d --tp %d --pp %d: every degree must be >= 1", l->dp,
                        l->tp, l->pp);
    long long n = (long long)l->dp * l->tp * l->pp;
    if (n != world)
        return mt_error(MT_EINPUT, "layout --dp %d x --tp %d x --pp %d = %lld ranks, but the world has %d",
                        l->dp, l->tp, l->pp, n, world);
    if (heads % l->tp != 0)
        return mt_error(MT_EINPUT, "layout --tp %d does not divide the %d attention heads", l->tp, heads);
    if (l->pp > layers)
        return mt_error(MT_EINPUT, "layout --pp %d is more pipeline stages than the %d layers", l->pp, layers);
    if (zero < 0 || zero > 3)
        return mt_error(MT_EINPUT, "--zero %d: the stage must be 0, 1, 2 or 3", zero);
    if (l->shard < 0 || (l->shard > 0 && l->dp % l->shard != 0))
        return mt_error(MT_EINPUT, "--shard-size %d must divide --dp %d (hybrid sharding: copies of %d ranks)",
                        l->shard, l->dp, l->shard);
    if (l->shard > 0 && l->shard < l->dp && zero == 0)
        return mt_error(MT_EINPUT, "--shard-size %d needs --zero 1, 2 or 3 (DDP shards nothing)", l->shard);
    static const char *scheds[] = {"naive", "gpipe", "1f1b", "interleaved", "zb", "zb2"};
    int known = 0;
    for (size_t i = 0; i < sizeof scheds / sizeof *scheds; i++)
        known |= strcmp(schedule, scheds[i]) == 0;
    if (!known)
        return mt_error(MT_EINPUT, "--schedule %s: must be naive, gpipe, 1f1b, interleaved, zb or zb2", schedule);
    return MT_OK;
}
