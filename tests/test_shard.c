/* test_shard.c - the arithmetic of the data-parallel family, without MPI: shard maps
 * partition every padded unit into equal, norm-block-aligned chunks; the sharded gradient
 * norm (each rank's block sums, added in the canonical order) and AdamW on chunks give the
 * single-device bits; bucket plans cover the units once, in backward order. */
#include <stdlib.h>
#include <string.h>

#include "mt_optim.h"
#include "mt_rng.h"
#include "mt_shard.h"
#include "mt_test.h"

static float noise(uint64_t i, uint64_t stream)
{
    /* wide dynamic range: the order of sums shows in the bits */
    double u = (double)(mt_rng_u64(3, stream, i, 0) >> 11) / 9007199254740992.0;
    double e = (double)(mt_rng_u64(4, stream, i, 0) % 20);
    return (float)((u - 0.5) * pow(2.0, e - 10.0));
}

static void spans(const MtParam *t, int np, int nunits, int64_t total, int64_t *lo, int64_t *hi)
{
    for (int u = 0; u < nunits; u++) {
        int64_t end;
        mt_unit_span(t, np, u, &lo[u], &end);
    }
    for (int u = 0; u < nunits; u++)
        hi[u] = u + 1 < nunits ? lo[u + 1] : total;
}

/* one model, N ranks: maps, norm and AdamW against the unsharded table */
static void check_model(const MtConfig *cfg, int N)
{
    int np = mt_param_count(cfg), nunits = cfg->L + 2;
    MtParam *t0 = calloc((size_t)np, sizeof *t0), *t = calloc((size_t)np, sizeof *t);
    int64_t n0 = mt_param_table(cfg, t0), n = mt_param_table_aligned(cfg, t, mt_shard_align(N));
    int64_t lo[MT_MAX_UNITS], hi[MT_MAX_UNITS];
    spans(t, np, nunits, n, lo, hi);
    /* the same tensors, each unit padded at its end only */
    int same = 1;
    for (int p = 0; p < np; p++)
        same &= t[p].numel == t0[p].numel && !strcmp(t[p].name, t0[p].name) && t[p].unit == t0[p].unit &&
                (p == 0 || t[p].unit != t[p - 1].unit || t[p].offset - t[p - 1].offset == t0[p].offset - t0[p - 1].offset);
    CHECK(same, "padded table differs from the plain one beyond unit starts (N=%d)", N);
    /* gradient laid out both ways: zeros in the padding */
    float *g0 = malloc(sizeof(float) * n0), *g = calloc((size_t)n, sizeof(float));
    for (int p = 0; p < np; p++)
        for (int64_t i = 0; i < t[p].numel; i++)
            g0[t0[p].offset + i] = g[t[p].offset + i] = noise((uint64_t)(t0[p].offset + i), 1);
    double want = mt_grad_sumsq(t0, np, g0);
    CHECK(mt_grad_sumsq(t, np, g) == want, "padding changes the norm (N=%d)", N);
    MtShardMap m[8];
    int64_t covered = 0;
    for (int r = 0; r < N; r++) {
        CHECK(mt_shard_map(lo, hi, nunits, N, r, &m[r]) == 0, "map refused (N=%d)", N);
        CHECK(m[r].shard_len * N == n, "shard %lld x %d ranks != %lld floats", (long long)m[r].shard_len, N, (long long)n);
        for (int u = 0; u < nunits; u++) {
            CHECK(m[r].chunk[u] % MT_NORM_BLOCK == 0, "chunk of unit %d not whole blocks", u);
            CHECK(mt_shard_chunk_lo(&m[r], u) == lo[u] + r * (hi[u] - lo[u]) / N, "chunk start");
            CHECK(u == 0 || m[r].shard_off[u] == m[r].shard_off[u - 1] + m[r].chunk[u - 1], "shard not contiguous");
            covered += m[r].chunk[u];
        }
    }
    CHECK(covered == n, "chunks cover %lld of %lld floats", (long long)covered, (long long)n);
    MtShardMap wrong;
    if (N > 1)
        CHECK(mt_shard_map(lo, hi, nunits, N + 1, 0, &wrong) != 0 || (hi[0] - lo[0]) % mt_shard_align(N + 1) == 0,
              "a map for the wrong N accepted");
    /* sharded norm: each rank's block sums, then unit by unit, rank by rank, block by block */
    int64_t nb = m[0].shard_len / MT_NORM_BLOCK;
    double *sums = malloc(sizeof(double) * (size_t)(nb * N));
    for (int r = 0; r < N; r++)
        for (int u = 0; u < nunits; u++)
            mt_block_sumsq(g + mt_shard_chunk_lo(&m[r], u), m[r].chunk[u], sums + r * nb + m[r].shard_off[u] / MT_NORM_BLOCK);
    double got = 0.0;
    for (int u = 0; u < nunits; u++)
        for (int r = 0; r < N; r++)
            for (int64_t k = 0; k < m[r].chunk[u] / MT_NORM_BLOCK; k++)
                got += sums[r * nb + m[r].shard_off[u] / MT_NORM_BLOCK + k];
    CHECK(memcmp(&got, &want, sizeof got) == 0, "sharded norm %.17g != %.17g (N=%d)", got, want, N);
    /* AdamW chunk by chunk == AdamW on the whole array */
    MtOptimConfig oc = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    float *p0 = malloc(sizeof(float) * n0), *m0 = calloc((size_t)n0, 4), *v0 = calloc((size_t)n0, 4);
    float *p = calloc((size_t)n, 4), *mm = calloc((size_t)n, 4), *vv = calloc((size_t)n, 4);
    for (int q = 0; q < np; q++)
        for (int64_t i = 0; i < t[q].numel; i++)
            p0[t0[q].offset + i] = p[t[q].offset + i] = noise((uint64_t)(t0[q].offset + i), 2);
    /* and in two parts, as post-validation makes it: the parameters (moments left as they
     * were), then the moments (parameters left): the same bits */
    float *p2 = calloc((size_t)n, 4), *m2 = calloc((size_t)n, 4), *v2 = calloc((size_t)n, 4);
    memcpy(p2, p, sizeof(float) * (size_t)n);
    int parts_bad = 0;
    for (int step = 1; step <= 2; step++) {
        mt_adamw_step(t0, np, p0, g0, m0, v0, &oc, 1e-3f, step);
        for (int r = 0; r < N; r++)
            for (int u = 0; u < nunits; u++) {
                int64_t a = mt_shard_chunk_lo(&m[r], u), b = a + m[r].chunk[u];
                mt_adamw_range(t, np, a, b, p + a, g + a, mm + a, vv + a, &oc, 1e-3f, step);
                float mbefore = a < b ? m2[a] : 0.0f;
                mt_adamw_range_part(t, np, a, b, p2 + a, g + a, m2 + a, v2 + a, &oc, 1e-3f, step, MT_ADAMW_PARAMS);
                parts_bad += a < b && memcmp(&mbefore, &m2[a], 4) != 0; /* the moments wait */
                float pafter = a < b ? p2[a] : 0.0f;
                mt_adamw_range_part(t, np, a, b, p2 + a, g + a, m2 + a, v2 + a, &oc, 1e-3f, step, MT_ADAMW_MOMENTS);
                parts_bad += a < b && memcmp(&pafter, &p2[a], 4) != 0;
            }
    }
    parts_bad += memcmp(p, p2, sizeof(float) * (size_t)n) != 0 || memcmp(mm, m2, sizeof(float) * (size_t)n) != 0 ||
                 memcmp(vv, v2, sizeof(float) * (size_t)n) != 0;
    CHECK(parts_bad == 0, "AdamW's parameters then moments differ from the whole step (N=%d)", N);
    free(p2); free(m2); free(v2);
    int bad = 0, pad_touched = 0;
    for (int q = 0; q < np; q++)
        for (int64_t i = 0; i < t[q].numel; i++)
            bad += memcmp(&p0[t0[q].offset + i], &p[t[q].offset + i], 4) != 0;
    for (int u = 0; u < nunits; u++) {
        int64_t s, e;
        mt_unit_span(t, np, u, &s, &e);
        for (int64_t i = e; i < hi[u]; i++)
            pad_touched += p[i] != 0.0f || mm[i] != 0.0f;
    }
    CHECK(bad == 0, "AdamW on chunks: %d elements differ (N=%d)", bad, N);
    CHECK(pad_touched == 0, "AdamW wrote %d padding elements", pad_touched);
    /* buckets: every unit once, backward order, contiguous, each closed at the first unit
     * that reaches the size */
    int64_t sizes[] = {0, 1, MT_NORM_BLOCK, (hi[1] - lo[1]) * 2, n};
    for (int k = 0; k < 5; k++) {
        int first[MT_MAX_UNITS], last[MT_MAX_UNITS];
        int nbk = mt_bucket_plan(lo, hi, nunits, sizes[k], first, last);
        int next = nunits - 1, ok = 1;
        for (int b = 0; b < nbk; b++) {
            ok &= last[b] == next && first[b] <= last[b];
            int64_t held = hi[last[b]] - lo[first[b]], before = held - (hi[first[b]] - lo[first[b]]);
            ok &= (held >= sizes[k] || first[b] == 0) && before < sizes[k] + (sizes[k] == 0);
            next = first[b] - 1;
        }
        CHECK(ok && next == -1, "bucket plan for %lld floats", (long long)sizes[k]);
    }
    int64_t piece = mt_piece_floats(N, 2 << 20);
    CHECK(piece % mt_shard_align(N) == 0 && piece <= (2 << 20) && piece > (2 << 20) - mt_shard_align(N), "piece %lld", (long long)piece);
    free(t0); free(t); free(g0); free(g); free(sums);
    free(p0); free(m0); free(v0); free(p); free(mm); free(vv);
}

int main(void)
{
    MtConfig cfgs[] = {{.V = 256, .T = 32, .L = 2, .NH = 2, .C = 32}, {.V = 101, .T = 17, .L = 3, .NH = 2, .C = 30},
                       {.V = 300, .T = 64, .L = 1, .NH = 4, .C = 64}};
    int models = 0;
    for (int c = 0; c < 3; c++)
        for (int N = 1; N <= 8; N++, models++)
            check_model(&cfgs[c], N);
    printf("%d models x rank counts\n", models);
    return mt_test_done("test_shard");
}
