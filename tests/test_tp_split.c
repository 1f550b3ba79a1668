/* test_tp_split.c - tensor parallelism's placements, without MPI: for every parameter of
 * small models and every tp size that divides them, the ranks' slices cover each element
 * of a split tensor exactly once (a replicated one on every rank), every slice is filled
 * exactly once and in the documented local layout, a slice initialised alone equals the
 * whole tensor's initialisation there, and bad tp sizes are refused. */
#include <stdlib.h>
#include <string.h>

#include "mt_tp.h"
#include "mt_test.h"

static void check_param(const MtConfig *cfg, const MtParam *p, int N, int64_t Vp, const float *whole)
{
    MtTpSplit s = mt_tp_split(p);
    int64_t local = mt_tp_local_numel(p, N, Vp);
    int *seen = calloc((size_t)p->numel, sizeof(int));
    int *filled = calloc((size_t)local, sizeof(int));
    float *slice = malloc(sizeof(float) * (size_t)local);
    int bad_init = 0, bad_layout = 0;
    for (int r = 0; r < N; r++) {
        memset(filled, 0, sizeof(int) * (size_t)local);
        mt_tp_init_slice(p, cfg->L, 7, N, r, Vp, slice);
        for (int k = 0; k < mt_tp_nruns(p, N); k++) {
            int64_t b, e, at;
            mt_tp_run(p, N, r, Vp, k, &b, &e, &at);
            CHECK(b >= 0 && e <= p->numel && b <= e && at >= 0 && at + (e - b) <= local,
                  "%s N=%d r=%d run %d: [%lld, %lld) at %lld outside", p->name, N, r, k, (long long)b, (long long)e,
                  (long long)at);
            for (int64_t i = b; i < e && i >= 0 && i < p->numel && at + (i - b) < local; i++) {
                seen[i]++;
                filled[at + (i - b)]++;
                bad_init += memcmp(&slice[at + (i - b)], &whole[i], sizeof(float)) != 0;
                /* the documented place of element (row, col) in the slice */
                int64_t OC = p->ndim == 2 ? p->shape[1] : p->shape[0], row = i / OC, col = i % OC, want = -1;
                if (N == 1 || s == MT_TP_REPLICATED || s == MT_TP_ROWS || s == MT_TP_VOCAB)
                    want = i - (s == MT_TP_ROWS || s == MT_TP_VOCAB ? (N > 1 ? r * (local / OC) * OC : 0) : 0);
                else if (s == MT_TP_COLUMNS)
                    want = row * (OC / N) + (col - r * (OC / N));
                else { /* heads: q | k | v of this rank's heads */
                    int64_t C = OC / 3, w = C / N, part = col / C;
                    want = row * 3 * w + part * w + (col % C - r * w);
                }
                bad_layout += want != at + (i - b);
            }
        }
        /* every element of the slice comes from one run, but wte's padding rows, which are zero */
        int64_t once = 0, padding_nonzero = 0, OC = p->ndim == 2 ? p->shape[1] : p->shape[0];
        int64_t rows_real = s == MT_TP_VOCAB ? p->shape[0] - r * (Vp / N) : local / OC;
        rows_real = rows_real < 0 ? 0 : rows_real > local / OC ? local / OC : rows_real;
        for (int64_t j = 0; j < local; j++) {
            once += filled[j] == 1;
            padding_nonzero += !filled[j] && slice[j] != 0.0f;
            CHECK(filled[j] <= 1, "%s N=%d r=%d: slice element %lld written %d times", p->name, N, r, (long long)j,
                  filled[j]);
        }
        CHECK(once == (s == MT_TP_VOCAB ? rows_real * OC : local) && padding_nonzero == 0,
              "%s N=%d r=%d: %lld of %lld slice elements filled, %lld padding elements not zero", p->name, N, r,
              (long long)once, (long long)local, (long long)padding_nonzero);
    }
    int wrong = 0, want = s == MT_TP_REPLICATED || N == 1 ? N : 1;
    for (int64_t i = 0; i < p->numel; i++)
        wrong += seen[i] != want;
    CHECK(wrong == 0, "%s (%s) N=%d: %d elements not held by exactly %d ranks", p->name, mt_tp_split_name(s), N, wrong,
          want);
    CHECK(bad_init == 0, "%s N=%d: %d elements of the slices initialise differently from the whole", p->name, N,
          bad_init);
    CHECK(bad_layout == 0, "%s N=%d: %d elements outside their documented place in the slice", p->name, N, bad_layout);
    free(seen);
    free(filled);
    free(slice);
}

static void check_model(MtConfig cfg, int multiple)
{
    int np = mt_param_count(&cfg);
    MtParam *t = malloc(sizeof(MtParam) * (size_t)np);
    mt_param_table(&cfg, t);
    int splits[5] = {0};
    for (int N = 1; N <= cfg.NH; N++) {
        if (mt_tp_check(&cfg, N) != MT_OK)
            continue;
        int64_t Vp = mt_tp_vocab_padded(cfg.V, (int64_t)multiple * N);
        for (int q = 0; q < np; q++) {
            float *whole = malloc(sizeof(float) * (size_t)t[q].numel);
            mt_param_init(&t[q], cfg.L, 7, 0, t[q].numel, whole);
            check_param(&cfg, &t[q], N, Vp, whole);
            free(whole);
            splits[mt_tp_split(&t[q])]++;
        }
    }
    /* per block: 2 heads (c_attn), 2 columns (c_fc), 2 rows (the projections' weights) */
    CHECK(splits[MT_TP_VOCAB] > 0 && splits[MT_TP_HEADS] == splits[MT_TP_ROWS] &&
              splits[MT_TP_COLUMNS] == splits[MT_TP_HEADS],
          "split kinds: %d vocabulary, %d heads, %d columns, %d rows", splits[MT_TP_VOCAB], splits[MT_TP_HEADS],
          splits[MT_TP_COLUMNS], splits[MT_TP_ROWS]);
    free(t);
}

int main(void)
{
    /* the table's splits by name */
    MtConfig cfg = {13, 8, 2, 6, 12};
    MtParam t[4 + 12 * 2];
    mt_param_table(&cfg, t);
    const MtTpSplit want[16] = {MT_TP_VOCAB, MT_TP_REPLICATED, MT_TP_REPLICATED, MT_TP_REPLICATED, MT_TP_HEADS,
                                MT_TP_HEADS, MT_TP_ROWS, MT_TP_REPLICATED, MT_TP_REPLICATED, MT_TP_REPLICATED,
                                MT_TP_COLUMNS, MT_TP_COLUMNS, MT_TP_ROWS, MT_TP_REPLICATED};
    for (int q = 0; q < 14; q++)
        CHECK(mt_tp_split(&t[q]) == want[q], "%s: split %s, want %s", t[q].name, mt_tp_split_name(mt_tp_split(&t[q])),
              mt_tp_split_name(want[q]));
    CHECK(mt_tp_split(&t[4 + 12 * 2 - 1]) == MT_TP_REPLICATED, "ln_f is replicated");

    /* odd sizes: vocabulary 13 (padded), 6 heads over 1, 2, 3, 6 ranks; 3 heads of width 5 */
    check_model(cfg, 4);
    check_model((MtConfig){7, 5, 1, 3, 15}, 1);
    check_model((MtConfig){256, 16, 2, 4, 16}, 64);

    /* the worked example of mt_tp.h: C 4, NH 2, N 2, rank 1 of c_attn.weight [4, 12] */
    MtConfig ex = {8, 4, 1, 2, 4};
    MtParam te[16];
    mt_param_table(&ex, te);
    int64_t b, e, at;
    mt_tp_run(&te[4], 2, 1, 8, 3 * 2 + 1, &b, &e, &at); /* row 2, k */
    CHECK(b == 12 * 2 + 4 + 2 && e == b + 2 && at == 6 * 2 + 2, "worked example: [%lld, %lld) at %lld", (long long)b,
          (long long)e, (long long)at);

    /* padding and bad sizes */
    CHECK(mt_tp_vocab_padded(50257, 64 * 4) == 50432 && mt_tp_vocab_padded(256, 128) == 256 &&
              mt_tp_vocab_padded(13, 4) == 16,
          "vocabulary padding");
    MtConfig c6 = {256, 16, 2, 6, 384};
    CHECK(mt_tp_check(&c6, 2) == MT_OK && mt_tp_check(&c6, 3) == MT_OK && mt_tp_check(&c6, 6) == MT_OK,
          "tp 2, 3, 6 split 6 heads of width 384");
    CHECK(mt_tp_check(&c6, 4) == MT_EINPUT, "tp 4 does not divide 6 heads");
    CHECK(mt_tp_check(&c6, 0) == MT_EINPUT, "tp 0 refused");
    MtConfig c5 = {256, 16, 2, 4, 4}; /* heads 4, 4C = 16: tp 8 divides 4C but not the heads */
    CHECK(mt_tp_check(&c5, 8) == MT_EINPUT, "tp 8 does not divide 4 heads");
    return mt_test_done("test_tp_split");
}
