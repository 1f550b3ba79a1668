/* mt_mesh.h - the device mesh: pure arithmetic of ranks, coordinates and groups.
 *
 * World = pp x dp x tp ranks.  TP varies fastest (a TP group is tp consecutive ranks, so
 * it shares a node's fast links), then DP, then PP:
 *     rank = (pp_rank * dp + dp_rank) * tp + tp_rank
 * Groups of a rank: tp (same pp, dp), dp (same pp, tp), pp (same dp, tp: the pipeline),
 * embed (the first and last stage of that pipeline, which share the tied embedding; one
 * member when pp = 1; a middle stage is alone in its own), world.  Members are listed in group-rank order.
 * Hybrid sharding cuts each dp group into dp / shard groups of `shard` consecutive dp ranks:
 * dp_shard (the ranks that shard a model copy among them) and dp_replica (the ranks that
 * hold the same shard in each copy: same dp rank modulo shard).  shard 0 means dp.
 *
 * Worked example, 16 ranks as pp = 2, dp = 2, tp = 4:
 *     tp groups: [0 1 2 3] [4 5 6 7] [8 9 10 11] [12 13 14 15]
 *     dp groups: [0 4] [1 5] [2 6] [3 7] [8 12] [9 13] [10 14] [11 15]
 *     pp groups: [0 8] [1 9] [2 10] [3 11] [4 12] [5 13] [6 14] [7 15]
 *     rank 13 = (pp 1, dp 1, tp 1); its embed group is [5 13].
 * No MPI here: everything is tested exhaustively in one process.
 */
#ifndef MT_MESH_H
#define MT_MESH_H

#include "mt_core.h"

typedef struct {
    int dp, tp, pp;
    int shard; /* dp ranks per sharded copy (hybrid sharding); 0: all dp ranks */
} MtLayout;

typedef struct {
    int pp, dp, tp;
} MtCoords;

typedef enum {
    MT_GROUP_TP,
    MT_GROUP_DP,
    MT_GROUP_PP,
    MT_GROUP_EMBED,
    MT_GROUP_DP_SHARD,
    MT_GROUP_DP_REPLICA,
    MT_GROUP_WORLD,
    MT_NGROUPS
} MtGroupKind;

/* the layout's shard group size (shard, or dp when 0) */
static inline int mt_mesh_shard(const MtLayout *l) { return l->shard > 0 ? l->shard : l->dp; }

int mt_mesh_size(const MtLayout *l);
MtCoords mt_mesh_coords(const MtLayout *l, int rank);
int mt_mesh_rank(const MtLayout *l, MtCoords c);
/* Writes the members of rank's group of this kind (if members != NULL) and returns their
 * number; *index (if not NULL) receives rank's position in the group. */
int mt_mesh_group(const MtLayout *l, MtGroupKind kind, int rank, int *members, int *index);
/* A stable id of rank's group of this kind, the same for every member (for MPI_Comm_split). */
int mt_mesh_group_color(const MtLayout *l, MtGroupKind kind, int rank);
const char *mt_group_name(MtGroupKind kind);

/* Everything a layout must satisfy before any group exists: every degree >= 1, their
 * product equal to the world size, tp dividing the heads, pp at most the layers, a known
 * ZeRO stage and schedule, a shard size dividing dp.  MT_EINPUT with one line quoting the
 * numbers. */
MtStatus mt_layout_check(const MtLayout *l, int world, int heads, int layers, int zero,
                         const char *schedule);

#endif
