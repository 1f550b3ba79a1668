/* engine.c - one training engine built from a layout (see mt_engine.h). */
#include "mt_engine.h"

#include "mt_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mt_checkpoint.h"
#include "mt_mesh.h"
#include "mt_schedule.h"

/* ---- the rule book ---- */

static MtStatus check_degrees(const MtEngineRequest *rq, const MtTrainConfig *tc)
{
    const MtConfig *cfg = &tc->cfg;
    MtLayout ml = {.dp = rq->dp, .tp = rq->tp, .pp = rq->pp, .shard = rq->shard};
    int world = rq->dp > 0 && rq->tp > 0 && rq->pp > 0 ? rq->dp * rq->tp * rq->pp : 0;
    MT_TRY(mt_layout_check(&ml, world, cfg->NH, cfg->L, rq->zero, rq->schedule));
    if (rq->tp_blocks > rq->tp && rq->dp > 1 && rq->zero > 0)
        return mt_error(MT_EINPUT, "--zero %d with --tp-blocks %d over --tp %d: the sharded norm takes one slice per "
                        "tp rank (the dp chunks' block sums cannot form %d strided sub-slices' sums); use "
                        "--tp-blocks %d or --zero 0", rq->zero, rq->tp_blocks, rq->tp, rq->tp_blocks / rq->tp, rq->tp);
    if (rq->tp > 1 && rq->fast_comm)
        return mt_error(MT_EINPUT, "--fast-comm with --tp: tensor parallelism always uses the fixed order (its "
                        "replicated parameters must get the same bits on every rank)");
    MT_TRY(mt_tpe_check(cfg, rq->tp, rq->tp_blocks));
    if (rq->pp > 1 && rq->zero > 0 && rq->dp == 1)
        return mt_error(MT_EINPUT, "--zero %d shards over the dp group; with --pp alone there is none", rq->zero);
    if (!(rq->bucket_mb >= 0.0f && rq->bucket_mb <= 4096.0f))
        return mt_error(MT_EINPUT, "--bucket-mb %g must be between 0 and 4096", rq->bucket_mb);
    if (rq->seqpar && rq->tp == 1)
        return mt_error(MT_EINPUT, "--sequence-parallel needs --tp > 1");
    if (rq->seqpar && tc->seq % rq->tp != 0)
        return mt_error(MT_EINPUT, "--sequence-parallel cuts the sequence over the tp ranks: --seq-len %d is not a "
                        "multiple of --tp %d", tc->seq, rq->tp);
    if (rq->pp == 1 && (rq->vstages != 1 || rq->stage_layers || rq->head_recompute))
        return mt_error(MT_EINPUT, "--virtual-stages, --stage-layers and --head-recompute need --pp > 1");
    if (rq->post_validate && rq->pp == 1)
        return mt_error(MT_EINPUT, "--post-validate needs --pp > 1 (it lets a pipeline's steps overlap)");
    if (rq->post_validate && !tc->cfg.untied)
        return mt_error(MT_EINPUT, "--post-validate needs --untie-embeddings: a tied head's wte gradient goes from the "
                        "last stage to the first between steps");
    if (rq->post_validate && rq->zero > 0 && rq->dp > 1)
        return mt_error(MT_EINPUT, "--post-validate with ZeRO over the pipeline's copies is not built (a pipeline "
                        "alone, with --tp, or with DDP copies)");
    return MT_OK;
}

MtStatus mt_engine_check(const MtEngineRequest *rq, MtTrainConfig *tc, MtEngineLayout *l, int *part)
{
    MtStatus s;
    *part = 1;
    MT_TRY(check_degrees(rq, tc));
    *part = 3;
    MtPipeOptions po = {0};
    if (rq->pp > 1) {
        if (tc->batch % tc->micro != 0)
            return mt_error(MT_EINPUT, "batch size %d is not a multiple of the micro-batch size %d", tc->batch,
                            tc->micro);
        MT_TRY(mt_dp_check(rq->dp, tc->batch / tc->micro));
        /* with --dp each copy of the pipeline runs its share of the micro-batches */
        po = (MtPipeOptions){.kind = mt_schedule_kind(rq->schedule), .M = tc->batch / tc->micro / rq->dp,
                             .V = rq->vstages, .head_recompute = rq->head_recompute, .ltr_stage = rq->ltr_stage,
                             .post_validate = rq->post_validate};
        if ((s = mt_pipe_check(&po, &tc->cfg, rq->pp, rq->stage_layers, rq->nstage)) != MT_OK && rq->dp > 1) {
            char why[512];
            snprintf(why, sizeof why, "%s", mt_error_msg());
            return mt_error(s, "%s; counted per copy of the pipeline (--dp %d shares the step's %d micro-batches)",
                            why, rq->dp, tc->batch / tc->micro);
        }
        MT_TRY(s);
    }
    if (tc->batch % tc->micro == 0)
        MT_TRY(mt_dp_check(rq->dp, tc->batch / tc->micro));
    *part = 2;
    int M = tc->batch / tc->micro;
    int K = rq->accum_blocks >= 0 ? rq->accum_blocks
          : tc->batch % tc->micro ? 0 : mt_accum_default(rq->dp, rq->zero, !rq->fast_comm, M);
    /* K blocks of the M micro-batches: K divides M and every dp rank (pipeline copy) owns whole blocks */
    if (K < 0 || (K > 0 && M % K != 0))
        return mt_error(MT_EINPUT, "--accum-blocks %d must divide the step's %d micro-batches (0: one block per "
                        "micro-batch)", K, M);
    if (K > 0 && K % rq->dp != 0)
        return mt_error(MT_EINPUT, "--accum-blocks %d is not a multiple of --dp %d (each dp rank sums whole blocks)",
                        K, rq->dp);
    tc->accum_blocks = K == M ? 0 : K; /* one block per micro-batch is recorded as 0 */
    *l = (MtEngineLayout){.dp = rq->dp, .tp = rq->tp, .pp = rq->pp, .zero = rq->zero, .shard = rq->shard,
                          .tp_blocks = rq->tp_blocks, .seqpar = rq->seqpar, .det = !rq->fast_comm,
                          .bucket_bytes = (int64_t)(rq->bucket_mb * 1048576.0), .po = po};
    *part = 0;
    return MT_OK;
}

/* ---- the composition ---- */

void mt_engine_shape(const MtTrainConfig *tc, const MtEngineLayout *l, int rank, MtEngineShape *x)
{
    memset(x, 0, sizeof *x);
    x->tc = *tc;
    MtLayout mesh = {.dp = l->dp, .tp = l->tp, .pp = l->pp, .shard = l->shard};
    int world = l->dp * l->tp * l->pp;
    if (world > 1) {
        mt_mesh_group(&mesh, MT_GROUP_TP, rank, NULL, &x->tp_rank);
        mt_mesh_group(&mesh, MT_GROUP_PP, rank, NULL, &x->pp_rank);
        mt_mesh_group(&mesh, MT_GROUP_DP, rank, NULL, &x->dp_rank);
        mt_mesh_group(&mesh, l->zero > 0 ? MT_GROUP_DP_SHARD : MT_GROUP_DP, rank, NULL, &x->shard_rank);
    }
    /* 1. tensor parallelism: the rank's slices (--tp-blocks alone: one rank's blocked sums) */
    int K = l->tp_blocks > 0 ? l->tp_blocks : l->tp;
    x->use_tp = l->tp > 1 || l->tp_blocks > 1;
    x->ctx = (MtTpCtx){.N = l->tp, .r = x->tp_rank, .K = K, .Vp = mt_tp_vocab_of(x->tc.cfg.V, K), .seqpar = l->seqpar};
    if (x->use_tp)
        x->tc.tp = &x->ctx;
    /* 2. a pipeline's stage, with data parallelism over its copies; or data parallelism */
    x->po = l->po;
    if (l->pp > 1) {
        x->use_pp = 1;
        x->po.M = x->tc.batch / x->tc.micro / l->dp; /* each copy runs its share of the micro-batches */
        mt_pipe_dp_options(&x->po, l->dp, x->dp_rank, l->zero, l->shard, l->det, mt_accum_block_size(&x->tc));
        mt_pipe_configure(&x->tc, &x->po, l->pp, x->pp_rank);
    } else if (world > 1 && (!x->use_tp || l->dp > 1)) { /* with --tp, each tp rank's share of the batch */
        x->use_dp = 1;
        mt_dp_configure(&x->tc, l->dp, l->shard, l->zero, l->det);
    }
}

MtStatus mt_engine_init(MtEngine *e, const MtTrainConfig *tc, const MtEngineLayout *l, MtComm *c)
{
    memset(e, 0, sizeof *e);
    e->l = *l;
    e->c = c;
    MtEngineShape x;
    mt_engine_shape(tc, l, c ? mt_comm_rank(c) : 0, &x);
    e->tc = x.tc;
    e->po = x.po;
    if (x.use_tp) /* the same context, now with the tp group's collectives */
        mt_tpe_setup(&e->tpe, c, &e->tc, l->tp, l->tp_blocks, l->seqpar);
    if (x.use_pp && l->dp > 1) { /* DDP over the copies: the pipeline calls back into data parallelism */
        e->dsum = (MtDpSum){.c = c, .det = l->det};
        e->po.reduce = mt_dp_sum;
        e->po.reduce_ctx = &e->dsum;
    }
    /* 3. the trainer for that shape, then the techniques on it */
    MtStatus s = mt_trainer_init(&e->tr, &e->tc);
    if (s != MT_OK)
        return s;
    if (x.use_tp) {
        if ((s = mt_tpe_init(&e->tpe, &e->tr)) != MT_OK)
            goto fail;
        e->tp = &e->tpe;
    }
    if (x.use_pp) {
        MT_ASSERT(c, "a pipeline needs its ranks");
        if ((s = mt_pipe_init(&e->pipe, &e->tr, c, &e->po)) != MT_OK)
            goto fail;
        e->pp = &e->pipe;
    } else if (x.use_dp) {
        MtDpOptions o = {.zero = l->zero, .det = l->det, .bucket_bytes = l->bucket_bytes, .shard = l->shard};
        if ((s = mt_dp_init(&e->dpe, &e->tr, c, &o)) != MT_OK)
            goto fail;
        e->dp = &e->dpe;
    }
    return MT_OK;
fail:
    mt_engine_free(e);
    return s;
}

void mt_engine_free(MtEngine *e)
{
    if (e->tp)
        mt_tpe_free(e->tp);
    if (e->dp)
        mt_dp_free(e->dp);
    if (e->pp)
        mt_pipe_free(e->pp);
    e->tp = NULL;
    e->dp = NULL;
    e->pp = NULL;
    mt_trainer_free(&e->tr);
}

void mt_engine_step(MtEngine *e, const MtTokens *data, MtStepStats *st)
{
    if (e->tp)
        e->tp->comm_s = 0.0;
    if (e->pp) /* with --dp and --tp inside */
        mt_pipe_step(e->pp, data, st);
    else if (e->dp) /* with --tp, each tp rank's share of the micro-batches */
        mt_dp_step(e->dp, data, st);
    else if (e->tp)
        mt_tpe_step(e->tp, data, st);
    else
        mt_trainer_step(&e->tr, data, st);
    if (!e->pp || !e->pp->o.post_validate)
        st->step = e->tr.step;
}

double mt_engine_comm_s(const MtEngine *e)
{
    return e->pp ? e->pp->comm_s : (e->dp ? e->dp->comm_s : 0.0) + (e->tp ? e->tp->comm_s : 0.0);
}

/* ---- evaluation ---- */

/* The dp ranks (pipeline copies) share the windows (mt_eval_share), each evaluates its share
 * (the tp ranks and stages of one replica the same windows), the windows' sums are gathered
 * over dp (sums: dp x the share), and every rank adds them in window order. */
int mt_engine_flush(MtEngine *e, MtStepStats *st) { return e->pp ? mt_pipe_flush(e->pp, st) : 0; }

double mt_engine_validate(MtEngine *e, const MtTokens *val, int64_t n, double *sums)
{
    MtComm *c = e->c;
    int D = c ? mt_comm_group_size(c, MT_GROUP_DP) : 1, r = c ? mt_comm_group_rank(c, MT_GROUP_DP) : 0, passes;
    int64_t lo, hi, share = mt_eval_share(n, D, r, e->tr.tc.micro, &lo, &hi, &passes);
    double *mine = sums + r * share;
    if (e->pp)
        mt_pipe_eval_windows(e->pp, val, lo, hi, passes, mine);
    else
        mt_trainer_eval_windows(&e->tr, val, lo, hi, passes, mine);
    if (D > 1) /* rank r's chunk of the 2 D share floats is its own share: doubles as float pairs */
        mt_allgather(c, MT_GROUP_DP, (float *)mine, (float *)sums, 2 * D * share);
    return mt_eval_mean(sums, n, e->tr.tc.seq);
}

/* ---- checkpoints: every rank its own pieces, nothing gathered ---- */

/* Every rank writes its pieces of the checkpoint into the one pair of files (mt_checkpoint.h):
 * world rank 0 stages the directory and the headers, the staging path goes to every rank,
 * each writes its pieces (pfn for the parameters from P, mfn for the moments from M and V;
 * NULL: none), and rank 0 commits once every rank has written.  c NULL: one rank. */
static MtStatus par_save(MtComm *c, const char *dir, const MtConfig *cfg, const MtParam *table, int n,
                         const MtTrainState *ts, MtCkptPieces pfn, void *pctx, MtCkptPieces mfn, void *mctx,
                         const float *P, const float *M, const float *V)
{
    union {
        char path[4096];
        float f[1024];
    } stage = {{0}};
    int root = !c || mt_comm_rank(c) == 0;
    MtStatus s = root ? mt_ckpt_par_begin(dir, cfg, table, n, ts, stage.path, sizeof stage.path) : MT_OK;
    float bad = s != MT_OK;
    if (c) { /* the path travels as floats, bits untouched */
        mt_broadcast(c, MT_GROUP_WORLD, &bad, 1, 0);
        mt_broadcast(c, MT_GROUP_WORLD, stage.f, 1024, 0);
    }
    if (bad)
        return root ? s : mt_error(MT_EIO, "rank 0 could not stage %s", dir);
    if (pfn)
        s = mt_ckpt_par_write(stage.path, table, n, 0, pfn, pctx, P, NULL);
    if (s == MT_OK && mfn)
        s = mt_ckpt_par_write(stage.path, table, n, 1, mfn, mctx, M, V);
    if (s != MT_OK)
        fprintf(stderr, "meshtrain train: %s\n", mt_error_msg());
    bad = s != MT_OK; /* how many ranks failed */
    if (c)
        mt_allreduce(c, MT_GROUP_WORLD, &bad, 1, 1);
    s = root ? mt_ckpt_par_commit(stage.path, dir, bad == 0) : MT_OK;
    bad = s != MT_OK;
    if (c)
        mt_broadcast(c, MT_GROUP_WORLD, &bad, 1, 0);
    return !bad ? MT_OK : root ? s : mt_error(MT_EIO, "rank 0 could not save %s", dir);
}

static MtStatus save(MtEngine *e, const char *dir)
{
    MtTrainer *tr = &e->tr;
    MtComm *c = e->c;
    MtDp *dp = e->dp;
    MtPipe *pp = e->pp;
    MtTpe *tp = e->tp;
    const MtTrainConfig *tc = &tr->tc;
    float *P = tr->params, *M = tr->m, *V = tr->v;
    MtTrainState ts = {.tokenizer = tc->tokenizer, .step = tr->step, .seed = tc->seed, .batch = tc->batch,
                       .micro = tc->micro, .seq = tc->seq,
                       .tp_blocks = tp ? tp->ctx.K : 1, .accum_blocks = tc->accum_blocks, .oc = tc->oc};
    /* the arithmetic goes with the state */
    if (!tp && (!c || mt_comm_size(c) == 1))
        return mt_ckpt_save(dir, &tc->cfg, tr->table, tr->nparams, P, M, V, &ts);
    if (pp) { /* with --dp, every copy of the pipeline holds the same state: the first one writes */
        int w = mt_comm_group_rank(c, MT_GROUP_DP) == 0;
        MtPipeInner in = {pp, mt_tpe_piece, tp, 0, 0}, sh = {pp, mt_tpe_piece, tp, 0, 1}; /* --tp: the slices */
        MtCkptPieces fn = !w ? NULL : tp ? mt_pipe_inner_piece : mt_pipe_piece;
        void *ctx = tp ? (void *)&in : (void *)pp;
        /* ZeRO: every rank of the first sharded copy writes the moments of its chunks (FSDP:
         * the parameters' too) */
        int z = pp->o.zero_dp > 1, ws = z && mt_comm_group_rank(c, MT_GROUP_DP_REPLICA) == 0;
        MtCkptPieces sfn = !ws ? NULL : tp ? mt_pipe_inner_piece : mt_pipe_shard_piece;
        void *sctx = tp ? (void *)&sh : (void *)pp;
        int z3 = pp->o.zero == 3;
        return par_save(c, dir, &tc->cfg, tp ? tp->whole : tr->table, tr->nparams, &ts, z3 ? sfn : fn,
                        z3 ? sctx : ctx, z ? sfn : fn, z ? sctx : ctx, P, M, V);
    }
    if (tp && dp && dp->o.zero > 0) { /* each rank its slices' runs cut to its ZeRO chunks */
        MtDpInner sh = {dp, mt_tpe_piece, tp, 0};
        int z3 = dp->o.zero == 3, w = dp->rank == 0; /* ZeRO-1/2: the parameters are whole on every dp rank */
        return par_save(c, dir, &tc->cfg, tp->whole, tr->nparams, &ts, z3 ? mt_dp_inner_piece : w ? mt_tpe_piece : NULL,
                        z3 ? (void *)&sh : (void *)tp, mt_dp_inner_piece, &sh, P, M, V);
    }
    if (tp) { /* with --dp, every dp replica holds the same slices: the first one writes */
        int w = !dp || dp->rank == 0;
        return par_save(c, dir, &tc->cfg, tp->whole, tr->nparams, &ts, w ? mt_tpe_piece : NULL, tp,
                        w ? mt_tpe_piece : NULL, tp, P, M, V);
    }
    MtDpPiece pc = {dp, 0, 0}, mc = {dp, 1, 0};
    return par_save(c, dir, &tc->cfg, tr->table, tr->nparams, &ts, mt_dp_piece, &pc, mt_dp_piece, &mc, P, M, V);
}

static MtStatus load(MtEngine *e, const char *dir)
{
    MtTrainer *tr = &e->tr;
    MtDp *dp = e->dp;
    MtTpe *tp = e->tp;
    int zero = dp ? dp->o.zero : 0;
    if (e->pp) /* each stage reads its own tensors only (with --tp, its slices of them) */
        return mt_pipe_load(e->pp, dir, tp ? tp->whole : NULL, tp ? mt_tpe_load_piece : NULL, tp);
    if (tp && zero > 0) { /* each rank its slices' runs of its ZeRO chunks only */
        MtDpInner sh = {dp, mt_tpe_load_piece, tp, 1};
        if (zero == 3)
            return mt_ckpt_load_pieces(dir, tp->whole, tr->nparams, mt_dp_inner_piece, &sh, tr->params, tr->m, tr->v);
        MtStatus s = mt_ckpt_load_pieces(dir, tp->whole, tr->nparams, mt_tpe_load_piece, tp, tr->params, NULL, NULL);
        return s != MT_OK ? s : mt_ckpt_load_pieces(dir, tp->whole, tr->nparams, mt_dp_inner_piece, &sh, NULL, tr->m, tr->v);
    }
    if (tp) /* each rank keeps its slices */
        return mt_tpe_load(tp, dir);
    /* a ZeRO rank reads its chunks only (and ZeRO-1/2 the whole parameters) */
    MtDpPiece mc = {dp, 1, 1};
    if (zero == 3)
        return mt_ckpt_load_pieces(dir, tr->table, tr->nparams, mt_dp_piece, &mc, tr->params, tr->m, tr->v);
    MtStatus s = mt_ckpt_load_params(dir, tr->table, tr->nparams, tr->params);
    if (s != MT_OK)
        return s;
    return zero > 0 ? mt_ckpt_load_pieces(dir, tr->table, tr->nparams, mt_dp_piece, &mc, NULL, tr->m, tr->v)
                    : mt_ckpt_load_moments(dir, tr->table, tr->nparams, tr->m, tr->v);
}

/* A device whose memory the host cannot read: the checkpoint's writer and reader see host
 * copies of the rank's parameters and moments, in the trainer's place for the call.  The
 * pipeline's tied-embedding replica is a buffer of its own, not staged: a pipeline on such a
 * device is the CUDA backend's to wire (docs/design.md, the backend). */
typedef struct {
    float *dev[3];
    size_t bytes[3];
} Staged;

static void stage_in(MtEngine *e, Staged *st, int download)
{
    MtTrainer *tr = &e->tr;
    const MtTrainConfig *tc = &tr->tc;
    MT_ASSERT(!e->pp, "a pipeline's checkpoint on the %s backend (its memory is not the host's)", mt_be()->name);
    float **arr[3] = {&tr->params, &tr->m, &tr->v};
    int64_t len[3] = {tc->params_len, tc->optim_len, tc->optim_len};
    for (int k = 0; k < 3; k++) {
        st->dev[k] = *arr[k];
        st->bytes[k] = sizeof(float) * (size_t)(len[k] > 0 ? len[k] : tr->nfloats);
        if (!st->dev[k])
            continue;
        float *h = malloc(st->bytes[k]);
        MT_ASSERT(h, "no host memory to stage %zu bytes of the training state", st->bytes[k]);
        if (download)
            mt_be()->download(h, st->dev[k], st->bytes[k]);
        *arr[k] = h;
    }
}

static void stage_out(MtEngine *e, Staged *st, int upload)
{
    MtTrainer *tr = &e->tr;
    float **arr[3] = {&tr->params, &tr->m, &tr->v};
    for (int k = 0; k < 3; k++) {
        if (!st->dev[k])
            continue;
        if (upload)
            mt_be()->upload(st->dev[k], *arr[k], st->bytes[k]);
        free(*arr[k]);
        *arr[k] = st->dev[k];
    }
}

MtStatus mt_engine_save(MtEngine *e, const char *dir)
{
    if (mt_be()->host_memory)
        return save(e, dir);
    Staged st;
    stage_in(e, &st, 1);
    MtStatus s = save(e, dir);
    stage_out(e, &st, 0);
    return s;
}

MtStatus mt_engine_load(MtEngine *e, const char *dir)
{
    if (mt_be()->host_memory)
        return load(e, dir);
    Staged st;
    stage_in(e, &st, 1); /* what the checkpoint leaves alone (wte's padding rows) stays */
    MtStatus s = load(e, dir);
    stage_out(e, &st, s == MT_OK);
    return s;
}

/* ---- the replica check ---- */

/* A tensor-parallel rank's whole slices when ZeRO shards them over dp (gathered,
 * collective), or a stage's tensors laid out as the whole model's (the others zero; ZeRO's
 * shards gathered): three arrays laid out like the trainer's table, in state; NULL when the
 * trainer holds them so. */
static float *replica_state(MtEngine *e, float *state[3])
{
    MtTrainer *tr = &e->tr;
    if (e->pp) {
        int64_t len = mt_pipe_stage_floats(e->pp);
        float *full = calloc(3 * (size_t)tr->nfloats + 3 * (size_t)len, sizeof(float));
        MT_ASSERT(full, "no memory for the %lld floats of the stage's slices", 3 * (long long)tr->nfloats + 3 * len);
        for (int k = 0; k < 3; k++)
            state[k] = full + k * tr->nfloats;
        float *arr[3] = {full + 3 * tr->nfloats, full + 3 * tr->nfloats + len, full + 3 * tr->nfloats + 2 * len};
        mt_pipe_gather_state(e->pp, arr[0], arr[1], arr[2]); /* whole (ZeRO shards them over dp) */
        for (int q = 0; q < tr->nparams; q++) {
            int64_t b, end, at = mt_pipe_piece(e->pp, q, 0, &b, &end);
            for (int k = 0; at >= 0 && k < 3; k++)
                memcpy(state[k] + tr->table[q].offset, arr[k] + at, sizeof(float) * (size_t)tr->table[q].numel);
        }
        return full;
    }
    if (!e->dp || e->dp->o.zero == 0)
        return NULL;
    float *full = malloc(3 * sizeof(float) * (size_t)tr->nfloats);
    MT_ASSERT(full, "no memory for the %lld floats of the rank's slices", 3 * (long long)tr->nfloats);
    for (int k = 0; k < 3; k++)
        state[k] = full + k * tr->nfloats;
    mt_dp_gather_state(e->dp, state[0], state[1], state[2]);
    return full;
}

int mt_engine_replicas_differ(MtEngine *e)
{
    if (!e->tp || !e->c)
        return 0;
    float *state[3], *full = replica_state(e, state);
    int differ = mt_tpe_replicas_differ(e->tp, full ? state : NULL);
    free(full);
    return differ;
}
