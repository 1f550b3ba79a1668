/* tp_engine.c - tensor parallelism over the mesh's tp group (see mt_tp_engine.h). */
#include "mt_tp_engine.h"
#include "mt_testhooks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

MtStatus mt_tpe_check(const MtConfig *cfg, int N, int K)
{
    MT_TRY(mt_tp_check(cfg, N));
    if (K == 0)
        return MT_OK;
    if (K < 1 || (K & (K - 1)) != 0 || K > 64)
        return mt_error(MT_EINPUT, "--tp-blocks %d must be a power of two between 1 and 64", K);
    if (K % N != 0)
        return mt_error(MT_EINPUT, "--tp-blocks %d must be a multiple of --tp %d (each rank sums whole blocks)", K, N);
    if (cfg->C % K != 0)
        return mt_error(MT_EINPUT, "--tp-blocks %d must divide the width %d", K, cfg->C);
    return MT_OK;
}

static void tp_allreduce(void *ctx, float *buf, int64_t n)
{
    MtTpe *t = ctx;
    double t0 = mt_now();
    /* two ranks: a + b is b + a, so MPI's own reduction gives the tree's bits, faster */
    mt_allreduce(t->c, MT_GROUP_TP, buf, n, t->ctx.N > 2);
    t->comm_s += mt_now() - t0;
}

static void tp_reduce_scatter(void *ctx, const float *in, float *out, int64_t n)
{
    MtTpe *t = ctx;
    double t0 = mt_now();
    mt_reduce_scatter(t->c, MT_GROUP_TP, in, out, n, t->ctx.N > 2); /* two ranks: as tp_allreduce */
    t->comm_s += mt_now() - t0;
}

static void tp_allgather(void *ctx, const float *in, float *out, int64_t n)
{
    MtTpe *t = ctx;
    double t0 = mt_now();
    mt_allgather(t->c, MT_GROUP_TP, in, out, (int64_t)t->ctx.N * n);
    t->comm_s += mt_now() - t0;
}

void mt_tpe_setup(MtTpe *t, MtComm *c, MtTrainConfig *tc, int N, int K, int seqpar)
{
    memset(t, 0, sizeof *t);
    t->c = N > 1 ? c : NULL;
    int Ke = K > 0 ? K : N;
    t->ctx = (MtTpCtx){.N = N, .r = t->c ? mt_comm_group_rank(c, MT_GROUP_TP) : 0, .K = Ke,
                       .Vp = mt_tp_vocab_of(tc->cfg.V, Ke), .seqpar = seqpar, .comm = t};
    if (t->c) {
        t->ctx.allreduce = tp_allreduce;
        t->ctx.allgather = tp_allgather;
        t->ctx.reduce_scatter = tp_reduce_scatter;
    }
    tc->tp = &t->ctx;
    mt_tp_test_left_to_right(mt_test_hooks.tp_ltr); /* test hook (mt_testhooks.h) */
}

/* the parts (t->parts) all-gathered over the group and combined */
static double combine(MtTpe *t)
{
    MtTrainer *tr = t->tr;
    int n = tr->nparams;
    const double *all = t->parts;
    if (t->c) { /* doubles travel as pairs of floats, bits untouched */
        tp_allgather(t, (const float *)t->parts, (float *)t->all, 2 * (int64_t)n);
        all = t->all;
    }
    return mt_tp_sumsq_combine(tr->table, n, all, t->ctx.N);
}

static double grad_sumsq(void *ctx)
{
    MtTpe *t = ctx;
    mt_tp_sumsq_parts(t->tr->table, t->tr->nparams, t->tr->grads, t->ctx.K / t->ctx.N, t->parts);
    return combine(t);
}

/* From the gradient's block sums (a dp shard's, gathered): with one slice per rank (K = N)
 * a tensor's part is its blocks added in order, as mt_tp_sumsq_parts sums them, when every
 * tensor starts a block (the trainer's table under ZeRO; the padding adds zeros). */
static double grad_sumsq_blocks(void *ctx, const double *blocks)
{
    MtTpe *t = ctx;
    const MtParam *tab = t->tr->table;
    MT_ASSERT(t->ctx.K == t->ctx.N, "block sums give the norm of one slice per rank, not of %d", t->ctx.K / t->ctx.N);
    for (int q = 0; q < t->tr->nparams; q++) {
        MT_ASSERT(tab[q].offset % MT_NORM_BLOCK == 0, "%s does not start a norm block", tab[q].name);
        double s = 0.0;
        for (int64_t b = tab[q].offset / MT_NORM_BLOCK; b * MT_NORM_BLOCK < tab[q].offset + tab[q].numel; b++)
            s += blocks[b];
        t->parts[q] = s;
    }
    return combine(t);
}

MtStatus mt_tpe_init(MtTpe *t, MtTrainer *tr)
{
    t->tr = tr;
    int n = tr->nparams;
    t->whole = calloc((size_t)n, sizeof(MtParam));
    t->parts = malloc(sizeof(double) * (size_t)n);
    t->all = malloc(sizeof(double) * (size_t)n * t->ctx.N);
    if (!t->whole || !t->parts || !t->all) {
        mt_tpe_free(t);
        return mt_error(MT_ENOMEM, "cannot allocate the tensor-parallel tables");
    }
    mt_param_table(&tr->tc.cfg, t->whole);
    tr->sumsq = grad_sumsq; /* a data-parallel step that updates this trainer clips by it too */
    tr->sumsq_blocks = grad_sumsq_blocks;
    tr->sumsq_ctx = t;
    return MT_OK;
}

void mt_tpe_free(MtTpe *t)
{
    if (t->tr && t->tr->sumsq_ctx == t) {
        t->tr->sumsq = NULL;
        t->tr->sumsq_blocks = NULL;
    }
    free(t->whole);
    free(t->parts);
    free(t->all);
    t->whole = NULL;
    t->parts = t->all = NULL;
}

int64_t mt_tpe_logits_floats(const MtTpe *t)
{
    const MtTrainConfig *tc = &t->tr->tc;
    return (int64_t)tc->micro * tc->seq * (t->ctx.Vp / t->ctx.N);
}

/* the rank's whole slices: the given arrays, or the trainer's own */
static float *local_array(MtTpe *t, float *const state[3], int which)
{
    if (state)
        return state[which];
    return which == 0 ? t->tr->params : which == 1 ? t->tr->m : t->tr->v;
}

void mt_tpe_step(MtTpe *t, const MtTokens *data, MtStepStats *st)
{
    MtTrainer *tr = t->tr;
    const MtTrainConfig *tc = &tr->tc;
    t->comm_s = 0.0;
    mt_trainer_fill(tr, data, 0, tc->batch, 0);
    st->loss = mt_trainer_forward_backward(tr);
    mt_trainer_update(tr, st);
    if (t->ctx.r == 1 && mt_test_hooks.tp_drift) { /* test hook (mt_testhooks.h) */
        float *b = tr->w.lnfb;
        b[0] = nextafterf(b[0], INFINITY);
    }
}

static uint64_t hash(const float *x, int64_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the bytes */
    const unsigned char *b = (const unsigned char *)x;
    for (int64_t i = 0; i < 4 * n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

int mt_tpe_replicas_differ(MtTpe *t, float *const state[3])
{
    MtTrainer *tr = t->tr;
    int n = tr->nparams, N = t->ctx.N, differ = 0;
    if (!t->c)
        return 0;
    uint64_t *mine = calloc(3 * (size_t)n, sizeof(uint64_t)), *all = calloc(3 * (size_t)n * N, sizeof(uint64_t));
    MT_ASSERT(mine && all, "out of memory");
    for (int q = 0; q < n; q++)
        if (mt_tp_split(&tr->table[q]) == MT_TP_REPLICATED)
            for (int which = 0; which < 3; which++)
                mine[3 * q + which] = hash(local_array(t, state, which) + tr->table[q].offset, tr->table[q].numel);
    tp_allgather(t, (const float *)mine, (float *)all, 6 * (int64_t)n);
    for (int q = 0; q < n; q++) {
        int bad = 0;
        for (int r = 1; r < N; r++)
            bad |= memcmp(all + 3 * q, all + 3 * ((int64_t)r * n + q), 3 * sizeof(uint64_t)) != 0;
        differ += bad;
    }
    free(mine);
    free(all);
    return differ;
}

/* ---- checkpoints ---- */

/* piece k of tensor q for this rank: run k of its slice, placed in its local arrays */
int64_t mt_tpe_load_piece(void *ctx, int q, int k, int64_t *begin, int64_t *end)
{
    MtTpe *t = ctx;
    const MtParam *w = &t->whole[q];
    if (k >= mt_tp_nruns(w, t->ctx.N))
        return -1;
    int64_t at;
    mt_tp_run(w, t->ctx.N, t->ctx.r, t->ctx.Vp, k, begin, end, &at);
    return t->tr->table[q].offset + at;
}

int64_t mt_tpe_piece(void *ctx, int q, int k, int64_t *begin, int64_t *end)
{
    MtTpe *t = ctx;
    if (mt_tp_split(&t->whole[q]) == MT_TP_REPLICATED && t->ctx.r != 0)
        return -1; /* written once, by tp rank 0 */
    return mt_tpe_load_piece(ctx, q, k, begin, end);
}

MtStatus mt_tpe_load(MtTpe *t, const char *dir)
{
    MtTrainer *tr = t->tr;
    for (int which = 0; which < 3; which++) /* wte's padding rows stay zero */
        memset(local_array(t, NULL, which), 0, sizeof(float) * (size_t)tr->nfloats);
    return mt_ckpt_load_pieces(dir, t->whole, tr->nparams, mt_tpe_load_piece, t, tr->params, tr->m, tr->v);
}
