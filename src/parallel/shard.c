/* shard.c - chunks, shards and buckets of the flat parameter array (see mt_shard.h). */
#include "mt_shard.h"

#include <string.h>

int mt_shard_map(const int64_t *unit_lo, const int64_t *unit_hi, int nunits, int N, int rank,
                 MtShardMap *m)
{
    memset(m, 0, sizeof *m);
    m->nunits = nunits;
    m->N = N;
    m->rank = rank;
    int64_t align = mt_shard_align(N);
    for (int u = 0; u < nunits; u++) {
        m->lo[u] = unit_lo[u];
        m->len[u] = unit_hi[u] - unit_lo[u];
        if (m->len[u] % align != 0 || m->lo[u] % align != 0)
            return -1;
        m->chunk[u] = m->len[u] / N;
        m->shard_off[u] = m->shard_len;
        m->shard_len += m->chunk[u];
        if (u > 0 && u < nunits - 1 && m->len[u] > m->max_block_len)
            m->max_block_len = m->len[u];
    }
    return 0;
}

int mt_bucket_plan(const int64_t *unit_lo, const int64_t *unit_hi, int nunits, int64_t bucket_floats,
                   int *first, int *last)
{
    int nb = 0;
    int64_t held = 0;
    for (int u = nunits - 1; u >= 0; u--) {
        if (held == 0)
            last[nb] = u;
        held += unit_hi[u] - unit_lo[u];
        if (held >= bucket_floats || u == 0) {
            first[nb++] = u;
            held = 0;
        }
    }
    return nb;
}

int64_t mt_piece_floats(int N, int64_t max_floats)
{
    int64_t align = mt_shard_align(N);
    int64_t p = max_floats / align * align;
    return p > 0 ? p : align;
}
