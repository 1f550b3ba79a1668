/* mt_shard.h - how the data-parallel family cuts the flat parameter array (pure).
 *
 * Units (mt_model.h) are the grain.  With N data-parallel ranks the parameter table is
 * built with every unit padded to a multiple of mt_shard_align(N) = N * MT_NORM_BLOCK
 * floats (mt_param_table_aligned), so unit u's padded span [lo_u, lo_u + len_u) splits into
 * N equal chunks of chunk_u = len_u / N floats, each a whole number of gradient-norm
 * blocks.  Rank r owns chunk r of every unit: flat [lo_u + r chunk_u, lo_u + (r+1) chunk_u).
 * Its shard (ZeRO's optimizer state, ZeRO-2/3 gradients, FSDP parameters) is the
 * concatenation of its chunks in unit order: chunk u sits at shard_off_u.
 *
 * Buckets (DDP): units are taken in reverse order (the order backward finishes them) and a
 * bucket closes as soon as it holds at least the bucket size; a bucket is the flat range of
 * units [first, last], contiguous because units are.
 */
#ifndef MT_SHARD_H
#define MT_SHARD_H

#include <stdint.h>

#include "mt_model.h"
#include "mt_optim.h"

#define MT_MAX_UNITS (MT_MAX_LAYERS + 2)

typedef struct {
    int nunits, N, rank;
    int64_t lo[MT_MAX_UNITS], len[MT_MAX_UNITS]; /* padded unit spans in the flat array */
    int64_t chunk[MT_MAX_UNITS];                 /* len / N */
    int64_t shard_off[MT_MAX_UNITS];             /* rank's chunk of unit u in its shard */
    int64_t shard_len;                           /* sum of the chunks */
    int64_t max_block_len;                       /* longest block unit (1 .. nunits-2) */
} MtShardMap;

static inline int64_t mt_shard_align(int N) { return (int64_t)N * MT_NORM_BLOCK; }

/* From the padded spans [lo_u, hi_u) of a table built with mt_shard_align(N).  Returns 0, or
 * -1 if a span is not a multiple of the alignment (the table was built for another N). */
int mt_shard_map(const int64_t *unit_lo, const int64_t *unit_hi, int nunits, int N, int rank,
                 MtShardMap *m);

/* Flat range of rank r's chunk of unit u. */
static inline int64_t mt_shard_chunk_lo(const MtShardMap *m, int u) { return m->lo[u] + m->rank * m->chunk[u]; }

/* Buckets in the order they complete: bucket b holds units first[b] .. last[b]
 * (first[b] <= last[b]; bucket 0 ends with the last unit).  Returns the number of buckets.
 * bucket_floats <= 0: one bucket per unit. */
int mt_bucket_plan(const int64_t *unit_lo, const int64_t *unit_hi, int nunits, int64_t bucket_floats,
                   int *first, int *last);

/* Largest piece of one collective call, a multiple of N * MT_NORM_BLOCK floats at or below
 * max_floats (at least one alignment): pieces of an aligned span then split it evenly. */
int64_t mt_piece_floats(int N, int64_t max_floats);

#endif
