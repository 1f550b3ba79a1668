/* test_mesh.c - the mesh arithmetic against a brute-force enumerator, for every layout of
 * up to 64 ranks and for large ones (thousands of ranks); the worked example of the
 * header; and every refused layout. */
#include <stdlib.h>
#include <string.h>

#include "mt_mesh.h"
#include "mt_test.h"

/* Brute force: all ranks s (in rank order) that share with r the coordinates the group
 * keeps fixed.  Rank order equals group order because the free coordinate grows with s. */
static int brute(const MtLayout *l, MtGroupKind k, int r, int *out)
{
    int n = 0, N = l->dp * l->tp * l->pp;
    int cp = r / (l->dp * l->tp), cd = (r / l->tp) % l->dp, ct = r % l->tp;
    for (int s = 0; s < N; s++) {
        int sp = s / (l->dp * l->tp), sd = (s / l->tp) % l->dp, st = s % l->tp;
        int in = 0;
        switch (k) {
        case MT_GROUP_TP: in = sp == cp && sd == cd; break;
        case MT_GROUP_DP: in = sp == cp && st == ct; break;
        case MT_GROUP_PP: in = sd == cd && st == ct; break;
        case MT_GROUP_EMBED:
            in = (cp == 0 || cp == l->pp - 1) ? sd == cd && st == ct && (sp == 0 || sp == l->pp - 1) : s == r;
            break;
        case MT_GROUP_DP_SHARD: in = sp == cp && st == ct && sd / mt_mesh_shard(l) == cd / mt_mesh_shard(l); break;
        case MT_GROUP_DP_REPLICA: in = sp == cp && st == ct && sd % mt_mesh_shard(l) == cd % mt_mesh_shard(l); break;
        default: in = 1;
        }
        if (in)
            out[n++] = s;
    }
    return n;
}

static int check_layout(const MtLayout *l, int pairs)
{
    int N = mt_mesh_size(l), bad = 0;
    int *a = malloc(sizeof(int) * N), *b = malloc(sizeof(int) * N);
    for (int r = 0; r < N; r++) {
        MtCoords c = mt_mesh_coords(l, r);
        bad += mt_mesh_rank(l, c) != r || c.tp >= l->tp || c.dp >= l->dp || c.pp >= l->pp;
        for (int k = 0; k < MT_NGROUPS; k++) {
            int idx = -1;
            int n = mt_mesh_group(l, k, r, a, &idx), m = brute(l, k, r, b);
            if (pairs && (n != m || memcmp(a, b, sizeof(int) * n) != 0) && bad < 3)
                fprintf(stderr, "  group %s of rank %d: %d vs brute %d members\n", mt_group_name(k), r, n, m);
            bad += n != m || memcmp(a, b, sizeof(int) * n) != 0 || idx < 0 || idx >= n || a[idx] != r;
            if (!pairs)
                continue;
            /* same color exactly when same group */
            for (int s = 0; s < N; s++) {
                int same = 0;
                for (int i = 0; i < n; i++)
                    same |= a[i] == s;
                bad += same != (mt_mesh_group_color(l, k, r) == mt_mesh_group_color(l, k, s));
            }
        }
    }
    free(a);
    free(b);
    return bad;
}

int main(void)
{
    int layouts = 0;
    for (int dp = 1; dp <= 64; dp++)
        for (int tp = 1; dp * tp <= 64; tp++)
            for (int pp = 1; dp * tp * pp <= 64; pp++) {
                for (int S = 0; S <= dp; S++) { /* every shard size that divides dp */
                    if (S > 0 && dp % S != 0)
                        continue;
                    MtLayout l = {dp, tp, pp, S};
                    int bad = check_layout(&l, 1);
                    CHECK(bad == 0, "layout dp %d tp %d pp %d shard %d: %d mismatches", dp, tp, pp, S, bad);
                    layouts++;
                }
            }
    MtLayout big[] = {{8, 16, 32}, {64, 8, 8}, {1, 8, 512}, {4096, 1, 1}};
    for (int i = 0; i < 4; i++)
        CHECK(check_layout(&big[i], 0) == 0, "large layout %d", i);
    printf("%d layouts up to 64 ranks, 4 of 4096 ranks\n", layouts);

    /* the worked example of mt_mesh.h */
    MtLayout ex = {.dp = 2, .tp = 4, .pp = 2};
    int m[16];
    CHECK(mt_mesh_group(&ex, MT_GROUP_TP, 9, m, NULL) == 4 && m[0] == 8 && m[3] == 11, "tp group of 9");
    CHECK(mt_mesh_group(&ex, MT_GROUP_DP, 10, m, NULL) == 2 && m[0] == 10 && m[1] == 14, "dp group of 10");
    CHECK(mt_mesh_group(&ex, MT_GROUP_PP, 7, m, NULL) == 2 && m[0] == 7 && m[1] == 15, "pp group of 7");
    MtCoords c = mt_mesh_coords(&ex, 13);
    CHECK(c.pp == 1 && c.dp == 1 && c.tp == 1, "rank 13 coordinates");
    CHECK(mt_mesh_group(&ex, MT_GROUP_EMBED, 13, m, NULL) == 2 && m[0] == 5 && m[1] == 13, "embed group of 13");

    /* refused layouts */
    struct { MtLayout l; int world, heads, layers, zero; const char *sched, *want; } bad[] = {
        {{2, 2, 2}, 6, 4, 4, 0, "1f1b", "= 8 ranks, but the world has 6"},
        {{1, 3, 1}, 3, 4, 4, 0, "1f1b", "does not divide the 4 attention heads"},
        {{1, 1, 5}, 5, 4, 4, 0, "1f1b", "more pipeline stages than the 4 layers"},
        {{0, 1, 1}, 0, 4, 4, 0, "1f1b", "every degree must be >= 1"},
        {{1, 1, 1}, 1, 4, 4, 4, "1f1b", "must be 0, 1, 2 or 3"},
        {{1, 1, 1}, 1, 4, 4, 0, "spiral", "must be naive, gpipe"},
        {{4, 1, 1, 3}, 4, 4, 4, 3, "1f1b", "--shard-size 3 must divide --dp 4"},
        {{4, 1, 1, 2}, 4, 4, 4, 0, "1f1b", "needs --zero 1, 2 or 3"},
    };
    for (int i = 0; i < 8; i++) {
        MtStatus s = mt_layout_check(&bad[i].l, bad[i].world, bad[i].heads, bad[i].layers, bad[i].zero,
                                     bad[i].sched);
        CHECK(s == MT_EINPUT && strstr(mt_error_msg(), bad[i].want), "refusal %d: %s", i, mt_error_msg());
    }
    MtLayout ok = {2, 2, 2};
    CHECK(mt_layout_check(&ok, 8, 4, 4, 3, "zb") == MT_OK, "a valid layout passes");
    MtLayout hybrid = {4, 2, 1, 2};
    CHECK(mt_layout_check(&hybrid, 8, 4, 4, 3, "1f1b") == MT_OK, "a hybrid-sharded layout passes");
    return mt_test_done("test_mesh");
}
