/* cmd_train.c - `meshtrain train`: validate everything, then train, log, evaluate, save. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flags.h"
#include "mt_checkpoint.h"
#include "mt_comm.h"
#include "mt_dp.h"
#include "mt_engine.h"
#include "mt_pipeline.h"
#include "mt_train_plan.h"
#include "mt_tp_engine.h"
#include "mt_launch.h"
#include "mt_cli.h"
#include "mt_fsutil.h"
#include "mt_gemm.h"
#include "mt_kernels.h"
#include "mt_testhooks.h"
#include "mt_train.h"
#include "mt_manifest.h"
#include "mt_series.h"

typedef struct {
    int layers, heads, dim, seq_len, vocab, ctx, untie;
    const char *data, *save, *resume, *log_json, *trace, *calibration, *hostfile;
    int batch, micro, steps, warmup, exit_interval, save_every, eval_every, eval_batches, log_every, threads;
    float lr, min_lr_frac, wd, clip, beta1, beta2;
    int dp, tp, pp, zero, shard, microbatches, vstages, seqpar, deterministic, check_coll, fast_comm, tp_blocks, plan,
        dry_run, accum_blocks, head_recompute, plan_ranks, post_validate, keep, max_restarts, min_ranks;
    float comm_timeout, bucket_mb;
    const char *schedule, *stage_layers, *recompute_mode;
    uint64_t seed;
} TrainArgs;

static int recompute_mode(const char *s)
{
    return strcmp(s, "none") == 0 ? MT_RECOMPUTE_NONE : strcmp(s, "attn") == 0 ? MT_RECOMPUTE_ATTN
         : strcmp(s, "full") == 0 ? MT_RECOMPUTE_FULL : -1;
}

/* The layout's own refusals are the engine's rule book (mt_engine_check, shared with `plan`);
 * the command checks only what it parses itself. */
static MtStatus check_modes(const TrainArgs *a)
{
    if (recompute_mode(a->recompute_mode) < 0)
        return mt_error(MT_EINPUT, "meshtrain train: --recompute %s: must be none, attn or full", a->recompute_mode);
    return MT_OK;
}

/* A refusal caused by a setting of the arithmetic that a resume continued (the flag not
 * given): the message says where the value came from and how to change it. */
static MtStatus kept_setting(MtStatus s, const char *flag, int value, const char *dir)
{
    char why[512];
    snprintf(why, sizeof why, "%s", mt_error_msg());
    return mt_error(s, "%s (--%s %d continues the checkpoint's arithmetic, %s/trainer_state.json; give --%s to "
                    "change it from here on)", why, flag, value, dir, flag);
}

/* A save target must be absent, empty, or a previous meshtrain checkpoint (series: a folder
 * of saves, mt_series_check_target). */
static MtStatus check_save_dir(const char *dir, int series)
{
    char buf[4200];
    snprintf(buf, sizeof buf, "%s", dir);
    char *slash = strrchr(buf, '/');
    if (slash && slash != buf) {
        *slash = 0;
        struct stat st;
        if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
            return mt_error(MT_EINPUT, "meshtrain train: --save %s: parent directory %s does not exist",
                            dir, buf);
    }
    struct stat st;
    if (series) { /* --keep-checkpoints: a folder of saves, made now; a stage beside a save must be writable */
        MtStatus s = mt_series_check_target(dir);
        if (s == MT_OK && mkdir(dir, 0755) != 0 && errno != EEXIST)
            s = mt_error(MT_EINPUT, "cannot create %s: %s", dir, strerror(errno));
        snprintf(buf, sizeof buf, "%s/step-probe", dir);
        if (s == MT_OK)
            s = mt_dir_check_writable(buf);
        return s == MT_OK ? MT_OK : mt_error_prefix(s, "meshtrain train: --save %s", dir);
    }
    if (lstat(dir, &st) == 0 && S_ISDIR(st.st_mode)) { /* lstat: the commit does not follow links */
        snprintf(buf, sizeof buf, "%s/config.json", dir);
        if (access(buf, F_OK) != 0 && rmdir(dir) != 0) /* empty: fine, recreated at save time */
            return mt_error(MT_EINPUT, "meshtrain train: --save %s is a non-empty directory that is not a "
                            "meshtrain checkpoint; refusing to replace it", dir);
    }
    /* an earlier checkpoint is replaced atomically at the end; that the staging directory
     * can be made and written is checked now, not after the run */
    MtStatus s = mt_dir_check_writable(dir);
    return s == MT_OK ? MT_OK : mt_error_prefix(s, "meshtrain train: --save %s", dir);
}

static void fmt_eta(char *out, size_t n, double sec)
{
    if (sec < 60)
        snprintf(out, n, "%.0fs", sec);
    else if (sec < 3600)
        snprintf(out, n, "%dm%02ds", (int)sec / 60, (int)sec % 60);
    else
        snprintf(out, n, "%dh%02dm", (int)sec / 3600, ((int)sec % 3600) / 60);
}

/* Per-rank figures of one step, gathered on rank 0: mem (params, grads, optimizer,
 * activations, peak) and the bytes sent per group (dp, tp, pp). */
#define RANK_FIELDS 9

static void rank_fields(const MtTrainer *tr, const MtComm *c, const MtDp *dp, const MtPipe *pp, const MtTpe *tp,
                        int64_t *f)
{
    const MtMem *m = &tr->mem;
    f[0] = m->peak[MT_MEM_PARAMS];
    f[1] = m->peak[MT_MEM_GRADS];
    f[2] = m->peak[MT_MEM_OPTIM];
    f[3] = m->peak[MT_MEM_ACTS];
    f[4] = m->total_peak;
    f[5] = c ? mt_comm_group_bytes(c, MT_GROUP_DP) + mt_comm_group_bytes(c, MT_GROUP_DP_SHARD) +
                   mt_comm_group_bytes(c, MT_GROUP_DP_REPLICA) : 0;
    f[6] = c ? mt_comm_group_bytes(c, MT_GROUP_TP) : 0;
    f[7] = c ? mt_comm_group_bytes(c, MT_GROUP_PP) + mt_comm_group_bytes(c, MT_GROUP_EMBED) : 0;
    f[8] = (int64_t)(1e6 * (dp ? dp->comm_s : pp ? pp->comm_s : tp ? tp->comm_s : 0.0)); /* microseconds */
}

static void log_json(FILE *f, const MtStepStats *st, double ms, double tps,
                     double val, int64_t nval, double bubble, const int64_t *ranks, int nranks)
{
    fprintf(f, "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"step_ms\": %.3f, "
               "\"tokens_per_s\": %.1f, ",
            (long long)st->step, st->loss, st->lr, st->grad_norm, ms, tps);
    if (!isnan(val))
        fprintf(f, "\"val_loss\": %.17g, \"val_sequences\": %lld, ", val, (long long)nval);
    if (!isnan(bubble))
        fprintf(f, "\"bubble\": %.4f, ", bubble);
    fprintf(f, "\"mem\": [");
    for (int r = 0; r < nranks; r++) {
        const int64_t *x = ranks + r * RANK_FIELDS;
        fprintf(f, "%s{\"params\": %lld, \"grads\": %lld, \"optimizer\": %lld, \"activations\": %lld, "
                   "\"peak\": %lld}", r ? ", " : "", (long long)x[0], (long long)x[1], (long long)x[2],
                (long long)x[3], (long long)x[4]);
    }
    fprintf(f, "], \"comm\": [");
    for (int r = 0; r < nranks; r++) {
        const int64_t *x = ranks + r * RANK_FIELDS;
        fprintf(f, "%s{\"dp\": %lld, \"tp\": %lld, \"pp\": %lld, \"exposed_ms\": %.3f}", r ? ", " : "",
                (long long)x[5], (long long)x[6], (long long)x[7], x[8] / 1e3);
    }
    fprintf(f, "]}\n");
    fflush(f);
}

static MtStatus load_data(const char *dir, const char *name, int required, MtTokens *t)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!required && access(path, F_OK) != 0) {
        memset(t, 0, sizeof *t);
        return MT_OK;
    }
    return mt_tokens_read(path, t);
}

/* Every rank's resident memory grew by at most this while saving or loading (a pipeline's
 * claim: its stages plus one tensor in flight); rank 0 prints them. */
static void rss_report(MtComm *c, const char *what, int64_t before)
{
    int64_t grew = mt_mem_rss_peak() - before, *all = malloc(sizeof(int64_t) * (size_t)mt_comm_size(c));
    MT_ASSERT(all, "out of memory");
    mt_comm_gather_i64(c, &grew, 1, all);
    if (mt_comm_rank(c) == 0) {
        printf("%s: resident memory grew by", what);
        for (int r = 0; r < mt_comm_size(c); r++)
            printf(" %lld", (long long)all[r] / 1024);
        printf(" KiB on ranks 0..%d\n", mt_comm_size(c) - 1);
    }
    free(all);
}

/* Saves a checkpoint (mt_engine_save): every rank writes its own part straight into the
 * files, nothing gathered; each rank's resident memory growth is reported.  Returns 0 or the
 * exit status. */
static int save(MtEngine *e, const char *dir, int root)
{
    int64_t before = mt_mem_rss_mark();
    MtStatus s = mt_engine_save(e, dir);
    if (e->c)
        rss_report(e->c, "checkpoint save", before);
    return s == MT_OK ? 0 : root ? mt_cli_fail(s) : 1;
}

/* A save of the run (--save): the one checkpoint DIR, or with --keep-checkpoints N the save
 * DIR/step-NNNNNNNN and the newest N kept (mt_series.h).  Where it fails the previous save
 * is intact (the new one was staged beside it), and rank 0 says which.  0 or the exit
 * status; *written the path. */
static int save_run(MtEngine *e, const TrainArgs *a, int root, char *written, size_t cap)
{
    if (a->keep > 0)
        mt_series_path(a->save, e->tr.step, written, cap);
    else
        snprintf(written, cap, "%s", a->save);
    int rc = save(e, written, root);
    if (rc == 0 && a->keep > 0 && root) {
        MtStatus s = mt_series_prune(a->save, a->keep);
        if (s != MT_OK)
            fprintf(stderr, "meshtrain train: keeping the newest %d saves of %s: %s\n", a->keep, a->save, mt_error_msg());
    }
    if (rc != 0 && root) {
        int64_t steps[1024];
        char cfg[4300];
        int n = a->keep > 0 ? mt_series_steps(a->save, steps, 1024) : 0;
        snprintf(cfg, sizeof cfg, "%s/config.json", a->save);
        if (n > 0 && steps[n - 1] != e->tr.step) {
            mt_series_path(a->save, steps[n - 1], cfg, sizeof cfg);
            fprintf(stderr, "meshtrain train: the previous save, %s, is intact\n", cfg);
        } else if (a->keep == 0 && access(cfg, F_OK) == 0)
            fprintf(stderr, "meshtrain train: the previous checkpoint in %s is intact\n", a->save);
        else
            fprintf(stderr, "meshtrain train: no earlier save of this run to fall back on\n");
    }
    return rc;
}

/* A pipeline's measured bubble against the simulated one: the schedule's lists run with
 * this run's mean compute time of F, B and W on each stage (rank 0 prints). */
static void pipe_summary(MtPipe *pp, double measured, double exposed_ms)
{
    int V = pp->V, P = pp->P, S = P * V;
    int64_t m64[6 * MT_PIPE_MAX_CHUNKS], *a64 = malloc(sizeof(int64_t) * 6 * (size_t)V * mt_comm_size(pp->c));
    double *stage = malloc(sizeof(double) * 3 * (size_t)S);
    MT_ASSERT(a64 && stage, "out of memory");
    for (int c = 0; c < V; c++)
        for (int k = 0; k < 3; k++) {
            m64[6 * c + k] = (int64_t)(pp->kind_s[c][k] * 1e6); /* microseconds */
            m64[6 * c + 3 + k] = pp->kind_n[c][k];
        }
    mt_comm_gather_i64(pp->c, m64, 6 * V, a64);
    if (mt_comm_rank(pp->c) != 0) {
        free(a64);
        free(stage);
        return;
    }
    for (int r = 0; r < P; r++)
        for (int c = 0; c < V; c++)
            for (int k = 0; k < 3; k++) {
                const int64_t *x = a64 + 6 * ((int64_t)mt_pipe_world_rank(pp, r) * V + c); /* the first copy's */
                stage[3 * (c * P + r) + k] = x[3 + k] > 0 ? x[k] * 1e-6 / (double)x[3 + k] : 0.0;
            }
    free(a64);
    MtSimCosts c = {0, 0, 0, stage, NULL}; /* without a split, B was measured with W inside it */
    MtAction *lists[MT_MAX_STAGES];
    int n[MT_MAX_STAGES];
    for (int r = 0; r < P; r++) {
        lists[r] = malloc(sizeof(MtAction) * (size_t)mt_schedule_max_actions(&pp->sched));
        MT_ASSERT(lists[r], "out of memory");
        n[r] = mt_schedule_build(&pp->sched, r, lists[r]);
    }
    MtSimResult res;
    MtStatus st = mt_simulate(&pp->sched, lists, n, c, &res);
    printf("pipeline %s: measured bubble %.4f, simulated %.4f with this run's costs per stage (ms, F/B/W:",
           mt_schedule_name(pp->sched.kind), measured, st == MT_OK ? res.bubble : NAN);
    for (int s = 0; s < S; s++)
        printf(" %.1f/%.1f/%.1f", 1e3 * stage[3 * s], 1e3 * stage[3 * s + 1], 1e3 * stage[3 * s + 2]);
    printf(")%s; %.1f ms/step inside communication calls on rank 0\n", st == MT_OK ? "" : " (simulation failed)",
           exposed_ms);
    mt_sim_free(&res);
    free(stage);
    for (int r = 0; r < P; r++)
        free(lists[r]);
}

/* End of a multi-rank run: bytes each rank sent per group, and the trace. */
static int summary(MtComm *c, const char *trace, int root)
{
    int N = mt_comm_size(c);
    int64_t mine[3] = {mt_comm_total_bytes(c, MT_GROUP_DP) + mt_comm_total_bytes(c, MT_GROUP_DP_SHARD) +
                           mt_comm_total_bytes(c, MT_GROUP_DP_REPLICA), mt_comm_total_bytes(c, MT_GROUP_TP),
                       mt_comm_total_bytes(c, MT_GROUP_PP)};
    int64_t *all = calloc((size_t)N * 3, sizeof(int64_t));
    MT_ASSERT(all, "out of memory");
    mt_comm_gather_i64(c, mine, 3, all);
    if (root) {
        printf("communication, bytes sent over the run:\n  rank        dp          tp          pp\n");
        for (int r = 0; r < N; r++)
            printf("  %4d %11lld %11lld %11lld\n", r, (long long)all[3 * r], (long long)all[3 * r + 1],
                   (long long)all[3 * r + 2]);
    }
    free(all);
    if (trace) {
        MtStatus s = mt_comm_write_trace(c, trace);
        if (s != MT_OK)
            return mt_cli_fail(s);
        if (root)
            printf("trace: %s\n", trace);
    }
    return 0;
}

/* Every setting of the run from the flags (and a checkpoint to resume: its model and, for
 * what the flags leave out, its settings and arithmetic), checked before any large
 * allocation or any file is written: the training configuration, the checkpoint's state,
 * the layout, and whether the accumulation order is the layout's default (acc_default) and
 * the tp blocks the checkpoint's (k_kept).  MT_EINPUT with one line on bad input. */
static MtStatus resolve(TrainArgs *a, const Flag *flags, int nflags, MtTrainConfig *tc, MtTrainState *rs,
                        MtEngineLayout *layout, int *acc_default, int *k_kept)
{
    MtStatus s;
    *acc_default = *k_kept = 0;
    if (!a->data)
        return mt_error(MT_EINPUT, "meshtrain train: --data DIR is required");
    if (a->steps < 0 || a->warmup < 0 || a->save_every < 0 || a->exit_interval < 0 || a->eval_every < 0 ||
        a->eval_batches < 0 || a->log_every < 0)
        return mt_error(MT_EINPUT, "meshtrain train: step counts must be >= 0");
    if (!a->resume && a->vocab == 0) { /* the model's vocabulary is the data's */
        char path[4200];
        uint32_t v;
        snprintf(path, sizeof path, "%s/train.bin", a->data);
        if ((s = mt_tokens_vocab(path, &v)) != MT_OK)
            return mt_error_prefix(s, "meshtrain train");
        a->vocab = (int)v;
    }
    tc->cfg = (MtConfig){.V = a->vocab, .T = a->ctx ? a->ctx : a->seq_len, .L = a->layers, .NH = a->heads,
                         .C = a->dim, .untied = a->untie};
    if (a->max_restarts < 0 || (a->max_restarts > 0 && !a->save))
        return mt_error(MT_EINPUT, "meshtrain train: --max-restarts %d: %s", a->max_restarts,
                        a->max_restarts < 0 ? "must be >= 0" : "needs --save DIR (a restart resumes from its newest save)");
    if (a->min_ranks < 0 || (a->min_ranks > 0 && (a->max_restarts == 0 || !a->hostfile)))
        return mt_error(MT_EINPUT, "meshtrain train: --min-ranks %d: %s", a->min_ranks,
                        a->min_ranks < 0 ? "must be >= 0" : "needs --max-restarts and --hostfile (the hosts a restart may drop)");
    if (a->hostfile && access(a->hostfile, R_OK) != 0)
        return mt_error(MT_EINPUT, "meshtrain train: --hostfile %s: %s", a->hostfile, strerror(errno));
    if (a->hostfile)
        setenv("MT_HOSTFILE", a->hostfile, 1); /* mt_launch: the ranks on those hosts */
    if (a->keep < 0 || (a->keep > 0 && !a->save))
        return mt_error(MT_EINPUT, "meshtrain train: --keep-checkpoints %d: %s", a->keep,
                        a->keep < 0 ? "must be >= 0" : "needs --save DIR");
    if (a->resume) { /* a checkpoint, or the newest intact save of a folder of them (mt_series.h) */
        static char resumed[4200];
        /* said once: by the process started by hand, or by rank 0 of a world it did not start */
        int unverified, say = !mt_launched_by_mpi() || (mt_launch_rank() == 0 && !getenv("MT_RESUME_SAID"));
        if ((s = mt_ckpt_resolve(a->resume, resumed, sizeof resumed, say ? stdout : NULL, &unverified)) != MT_OK)
            return mt_error_prefix(s, "meshtrain train: --resume");
        if (unverified && say)
            fprintf(stdout, "meshtrain train: --resume %s: no %s (written before meshtrain wrote them, or made "
                    "elsewhere): not checked\n", a->resume, MT_MANIFEST);
        if (strcmp(resumed, a->resume) != 0 && say)
            printf("meshtrain train: resuming from %s\n", resumed);
        a->resume = resumed;
    }
    if (a->resume) {
        if ((s = mt_ckpt_read_config(a->resume, &tc->cfg)) != MT_OK ||
            (s = mt_ckpt_read_state(a->resume, rs)) != MT_OK)
            return mt_error_prefix(s, "meshtrain train");
        /* the checkpoint defines the model: flags that repeat it are welcome, a conflict is not */
        const char *model_flags[] = {"layers", "heads", "dim", "vocab", "context"};
        const char *keys[] = {"n_layer", "n_head", "n_embd", "vocab_size", "n_positions"};
        int given[] = {a->layers, a->heads, a->dim, a->vocab, a->ctx};
        int saved[] = {tc->cfg.L, tc->cfg.NH, tc->cfg.C, tc->cfg.V, tc->cfg.T};
        if (a->untie && !tc->cfg.untied)
            return mt_error(MT_EINPUT, "meshtrain train: --untie-embeddings conflicts with the checkpoint's tied "
                            "head (%s/config.json: tie_word_embeddings true); drop the flag", a->resume);
        for (int i = 0; i < 5; i++)
            if (mt_flag_find(flags, nflags, model_flags[i])->set && given[i] != saved[i])
                return mt_error(MT_EINPUT, "meshtrain train: --%s %d conflicts with the checkpoint's %s %d "
                                "(%s/config.json); drop the flag to continue its model", model_flags[i],
                                given[i], keys[i], saved[i], a->resume);
        /* settings not given on the command line continue those of the checkpoint */
#define KEEP(flag, field, value) \
    if (!mt_flag_find(flags, nflags, flag)->set) field = value
        KEEP("batch-size", a->batch, rs->batch);
        KEEP("micro-batch-size", a->micro, rs->micro);
        KEEP("seq-len", a->seq_len, rs->seq);
        KEEP("seed", a->seed, rs->seed);
        KEEP("lr", a->lr, rs->oc.lr);
        KEEP("min-lr-frac", a->min_lr_frac, rs->oc.min_lr_frac);
        KEEP("warmup", a->warmup, rs->oc.warmup);
        KEEP("steps", a->steps, rs->oc.steps);
        KEEP("weight-decay", a->wd, rs->oc.weight_decay);
        KEEP("beta1", a->beta1, rs->oc.beta1);
        KEEP("beta2", a->beta2, rs->oc.beta2);
        KEEP("grad-clip", a->clip, rs->oc.grad_clip);
        if (rs->tp_blocks > 0) /* the arithmetic continues: a resumed run sums in the blocks it summed in */
            KEEP("tp-blocks", a->tp_blocks, rs->tp_blocks);
        KEEP("accum-blocks", a->accum_blocks, rs->accum_blocks);
#undef KEEP
    }
    if (tc->cfg.T < a->seq_len)
        return mt_error(MT_EINPUT, "meshtrain train: --seq-len %d is longer than the context length %d",
                        a->seq_len, tc->cfg.T);
    if (a->microbatches < 0 || (a->microbatches > 0 && a->batch % a->microbatches != 0))
        return mt_error(MT_EINPUT, "meshtrain train: --microbatches %d must be positive and divide "
                        "--batch-size %d", a->microbatches, a->batch);
    if (a->microbatches > 0) { /* either determines the other; both must agree */
        if (mt_flag_find(flags, nflags, "micro-batch-size")->set && a->micro * a->microbatches != a->batch)
            return mt_error(MT_EINPUT, "meshtrain train: --microbatches %d contradicts --batch-size %d / "
                            "--micro-batch-size %d = %d micro-batches", a->microbatches, a->batch, a->micro,
                            a->micro > 0 ? a->batch / a->micro : 0);
        a->micro = a->batch / a->microbatches;
    }
    if (!a->micro && a->dp > 1) { /* as in DDP: each dp rank gets one micro-batch of batch / dp */
        if (a->batch % a->dp != 0)
            return mt_error(MT_EINPUT, "meshtrain train: --batch-size %d does not split over --dp %d "
                            "(each rank takes batch / dp sequences)", a->batch, a->dp);
        a->micro = a->batch / a->dp;
    }
    tc->batch = a->batch;
    tc->micro = a->micro ? a->micro : a->batch;
    tc->recompute = recompute_mode(a->recompute_mode) > 0 ? recompute_mode(a->recompute_mode) : 0;
    tc->seq = a->seq_len;
    tc->seed = a->seed;
    /* the tokenizer the checkpoints carry: the data's (prepare --tokenizer), else the resumed checkpoint's */
    static char tok[4300];
    snprintf(tok, sizeof tok, "%s/tokenizer/tokenizer.json", a->data);
    if (access(tok, R_OK) == 0)
        snprintf(tok, sizeof tok, "%s/tokenizer", a->data);
    else if (a->resume && (snprintf(tok, sizeof tok, "%s/tokenizer.json", a->resume), access(tok, R_OK) == 0))
        snprintf(tok, sizeof tok, "%s", a->resume);
    else
        tok[0] = 0;
    tc->tokenizer = tok[0] ? tok : NULL;
    tc->oc = (MtOptimConfig){.lr = a->lr, .min_lr_frac = a->min_lr_frac, .warmup = a->warmup,
                             .steps = a->steps, .beta1 = a->beta1, .beta2 = a->beta2, .eps = 1e-8f,
                             .weight_decay = a->wd, .grad_clip = a->clip};
    double bad;
    const char *want;
    int k = mt_optim_bad(&tc->oc, &bad, &want);
    if (k >= 0) { /* named as the user set it: a flag, or the checkpoint's setting that continues */
        const Flag *f = mt_flag_find(flags, nflags, mt_optim_flags[k]);
        if (f && f->set)
            return mt_error(MT_EINPUT, "meshtrain train: --%s %g is out of range (want %s)",
                            mt_optim_flags[k], bad, want);
        return mt_error(MT_EINPUT, "meshtrain train: %s%s%s %g is out of range (want %s)",
                        a->resume ? a->resume : "", a->resume ? "/trainer_state.json: " : "the default ",
                        mt_optim_keys[k], bad, want);
    }
    tc->test_nan_step = mt_test_hooks.nan_step; /* test hook (mt_testhooks.h): that step's gradient gets a NaN */
    if ((tc->threads = mt_cli_setup_threads(a->threads, "train")) < 0)
        return MT_EINPUT;
    if ((s = mt_config_check(&tc->cfg)) != MT_OK)
        return mt_error_prefix(s, "meshtrain train");
    if (a->resume && (s = mt_ckpt_check_shapes(a->resume, &tc->cfg, 1)) != MT_OK) /* before any allocation */
        return mt_error_prefix(s, "meshtrain train");
    *k_kept = a->resume && rs->tp_blocks > 0 && !mt_flag_find(flags, nflags, "tp-blocks")->set;
    if ((s = check_modes(a)) != MT_OK)
        return s;
    int given[MT_MAX_STAGES], ngiven = 0;
    if (a->pp > 1 && a->stage_layers &&
        (s = mt_flags_int_list("stage-layers", a->stage_layers, given, MT_MAX_STAGES, &ngiven)) != MT_OK)
        return mt_error_prefix(s, "meshtrain train");
    *acc_default = a->accum_blocks < 0 && !mt_flag_find(flags, nflags, "accum-blocks")->set;
    if (*acc_default) /* not given, nor continued from a checkpoint */
        a->accum_blocks = tc->batch % tc->micro ? 0
                                                : mt_accum_default(a->dp, a->zero, !a->fast_comm, tc->batch / tc->micro);
    MtEngineRequest rq = {.dp = a->dp, .tp = a->tp, .pp = a->pp, .zero = a->zero, .shard = a->shard,
                          .tp_blocks = a->tp_blocks, .seqpar = a->seqpar, .fast_comm = a->fast_comm,
                          .schedule = a->schedule, .vstages = a->vstages, .stage_layers = a->stage_layers ? given : NULL,
                          .nstage = ngiven, .head_recompute = a->head_recompute, .bucket_mb = a->bucket_mb,
                          .accum_blocks = a->accum_blocks,
                          .ltr_stage = mt_test_hooks.ltr_stage, /* test hook (mt_testhooks.h): a wrong order */
                          .post_validate = a->post_validate};
    int part;
    if ((s = mt_engine_check(&rq, tc, layout, &part)) != MT_OK) {
        s = mt_error_prefix(s, "meshtrain train");
        if (part == 1 && *k_kept)
            return kept_setting(s, "tp-blocks", a->tp_blocks, a->resume);
        if (part == 2 && a->resume && rs->accum_blocks > 0 && !mt_flag_find(flags, nflags, "accum-blocks")->set)
            return kept_setting(s, "accum-blocks", a->accum_blocks, a->resume);
        return s;
    }
    return MT_OK;
}

/* The run's banner on rank 0: the ranks and techniques, the model, the batch, what a resume
 * continues, the accumulation order and where it came from, tensor parallelism, the
 * validation set and the memory the engine holds. */
static void banner(const TrainArgs *a, const Flag *flags, int nflags, const MtEngine *e, const MtTrainState *rs,
                   int acc_default, int k_kept, int64_t val_windows)
{
    const MtTrainer *tr = &e->tr;
    const MtTrainConfig *tc = &tr->tc;
    const MtTpe *tpp = e->tp;
    const MtDp *dpp = e->dp;
    const MtComm *comm = e->c;
    int nranks = comm ? mt_comm_size(comm) : 1;
    static const char *zero_names[] = {"DDP", "ZeRO-1", "ZeRO-2", "FSDP (ZeRO-3)"};
    if (comm && tpp)
        printf("meshtrain train: %d ranks (dp %d x tp %d x pp %d), tensor parallel%s%s%s, fixed-order reductions\n",
               nranks, a->dp, a->tp, a->pp, a->seqpar ? " with sequence parallelism" : "", dpp ? ", over dp: " : "",
               dpp ? zero_names[a->zero] : "");
    else if (comm)
        printf("meshtrain train: %d ranks (dp %d x tp %d x pp %d), %s%s, %s reductions\n", nranks, a->dp, a->tp, a->pp,
               zero_names[a->zero], a->shard > 0 && a->shard < a->dp ? " sharded within copies of --shard-size ranks" : "",
               a->fast_comm ? "fast" : "fixed-order");
    int64_t nparams = tr->nfloats; /* the whole model's (a tp rank holds its slices) */
    for (int q = 0; tpp && q < tr->nparams; q++)
        nparams += tpp->whole[q].numel - tr->table[q].numel;
    printf("meshtrain train: %d layers, %d heads, width %d, context %d, vocab %d: %.2fM parameters\n",
           tc->cfg.L, tc->cfg.NH, tc->cfg.C, tc->cfg.T, tc->cfg.V, nparams / 1e6);
    printf("  batch %d x %d tokens (micro-batch %d), %d step%s from step %lld, %d thread%s, %s\n", tc->batch, tc->seq,
           tc->micro, a->steps, a->steps == 1 ? "" : "s", (long long)tr->step, tc->threads, tc->threads == 1 ? "" : "s",
           mt_gemm_name());
    if (a->resume) { /* what the arithmetic continues (mt_checkpoint.h: trainer_state.json) */
        int K = tpp ? tpp->ctx.K : 1;
        printf("  resumed %s at step %lld; split sums in %d block%s: ", a->resume, (long long)rs->step, K, K == 1 ? "" : "s");
        if (rs->tp_blocks == 0)
            printf("the checkpoint does not record its own\n");
        else if (rs->tp_blocks == K)
            printf("%s\n", k_kept ? "the checkpoint's, continued" : "as the checkpoint");
        else
            printf("--tp-blocks changes the checkpoint's %d from here on\n", rs->tp_blocks);
    }
    { /* the accumulation order (mt_accum.h), and where it came from */
        int M = tc->batch / tc->micro, B = mt_accum_block_size(tc), K = M / B;
        int kept = a->resume && !mt_flag_find(flags, nflags, "accum-blocks")->set;
        printf("  accumulation: %d micro-batch%s in %d block%s of %d (%s): %s\n", M, M == 1 ? "" : "es", K,
               K == 1 ? "" : "s", B, B == 1 && K > 1 ? "the pairwise tree" : K == 1 ? "left to right"
               : "each left to right, the blocks as a pairwise tree",
               kept ? "the checkpoint's, continued" : acc_default ? "the default for this layout" : "--accum-blocks");
    }
    if (tpp)
        printf("  tensor parallel: tp %d, %d blocks per split sum, vocabulary padded to %lld; logits %.2f MiB per rank "
               "(micro-batch x %d x %lld)\n", tpp->ctx.N, tpp->ctx.K, (long long)tpp->ctx.Vp,
               mt_tpe_logits_floats(tpp) * 4.0 / 1048576.0, tc->seq, (long long)(tpp->ctx.Vp / tpp->ctx.N));
    if (val_windows > 0)
        printf("  validation: %lld sequence%s of %d tokens (--eval-batches %d x batch %d, at most val.bin's), %s\n",
               (long long)val_windows, val_windows == 1 ? "" : "s", tc->seq, a->eval_batches, tc->batch,
               a->eval_every > 0 ? "every --eval-every steps and at the end" : "at the end");
    else
        printf("  validation: none (%s)\n", a->eval_batches == 0 ? "--eval-batches 0" : "no val.bin, or shorter than "
               "one sequence");
    printf("  memory: params %.1f MiB, grads %.1f MiB, optimizer %.1f MiB, activations %.1f MiB\n",
           tr->mem.cur[MT_MEM_PARAMS] / 1048576.0, tr->mem.cur[MT_MEM_GRADS] / 1048576.0,
           tr->mem.cur[MT_MEM_OPTIM] / 1048576.0, tr->mem.cur[MT_MEM_ACTS] / 1048576.0);
}

int mt_cmd_train(int full_argc, char **full_argv)
{
    int argc = full_argc - 2;
    char **argv = full_argv + 2;
    TrainArgs a = {.layers = 4, .heads = 4, .dim = 128, .seq_len = 128, .vocab = 0, .ctx = 0,
                   .batch = 16, .micro = 0, .steps = 200, .warmup = 20, .lr = 1e-3f,
                   .min_lr_frac = 0.1f, .wd = 0.1f, .clip = 1.0f, .beta1 = 0.9f, .beta2 = 0.95f,
                   .eval_every = 100, .eval_batches = 8, .log_every = 10, .threads = 0,
                   .dp = 1, .tp = 1, .pp = 1, .vstages = 1, .schedule = "1f1b", .recompute_mode = "none", .seed = 1337,
                   .comm_timeout = 60.0f, .bucket_mb = 25.0f, .accum_blocks = -1};
    Flag flags[] = {
        {"layers", FLAG_INT, &a.layers, "transformer blocks L"},
        {"heads", FLAG_INT, &a.heads, "attention heads (dividing --dim)"},
        {"dim", FLAG_INT, &a.dim, "width C (channels)"},
        {"seq-len", FLAG_INT, &a.seq_len, "training sequence length T"},
        {"context", FLAG_INT, &a.ctx, "context length n_positions, >= --seq-len (0: --seq-len)"},
        {"vocab", FLAG_INT, &a.vocab, "vocabulary size, at least the data's (0: the data's: train.bin's header)"},
        {"untie-embeddings", FLAG_BOOL, &a.untie, "the LM head gets its own weight (lm_head.weight) instead of "
         "reusing wte, as Megatron's --untie-embeddings-and-output-weights (a resumed run keeps its checkpoint's)"},
        {"data", FLAG_STR, &a.data, "directory with train.bin (and val.bin for the validation loss): meshtrain prepare",
         "DIR", 1},
        {"batch-size", FLAG_INT, &a.batch, "sequences per optimizer step, over all ranks (global)"},
        {"micro-batch-size", FLAG_INT, &a.micro, "sequences per forward/backward pass (0: batch / --microbatches when "
         "that is given, else batch / dp: one micro-batch per dp rank, as DDP)"},
        {"microbatches", FLAG_INT, &a.microbatches, "micro-batches per step M; either this or --micro-batch-size sets "
         "the other (0: batch / micro-batch size)"},
        {"lr", FLAG_FLOAT, &a.lr, "peak learning rate (linear warm-up, then cosine)"},
        {"min-lr-frac", FLAG_FLOAT, &a.min_lr_frac, "the cosine decays to lr x this at --steps"},
        {"warmup", FLAG_INT, &a.warmup, "linear warm-up steps"},
        {"weight-decay", FLAG_FLOAT, &a.wd, "AdamW decoupled weight decay (2-D weights only)"},
        {"beta1", FLAG_FLOAT, &a.beta1, "AdamW beta1"},
        {"beta2", FLAG_FLOAT, &a.beta2, "AdamW beta2"},
        {"grad-clip", FLAG_FLOAT, &a.clip, "global gradient-norm clip (0: off)"},
        {"steps", FLAG_INT, &a.steps, "total optimizer steps, counted from the start (a resumed run ends there too)"},
        {"seed", FLAG_U64, &a.seed, "seed of the initialisation and the data order"},
        {"threads", FLAG_INT, &a.threads, MT_HELP_THREADS},
        {"save", FLAG_STR, &a.save, "checkpoint directory written at the end (replaced atomically)", "DIR"},
        {"save-every", FLAG_INT, &a.save_every, "also save every N steps (0: only at the end)"},
        {"max-restarts", FLAG_INT, &a.max_restarts, "with --save, started by hand: a job that fails (a rank killed, "
         "a timeout) is started again from the newest intact save, up to N times, each restart said with its cause"},
        {"hostfile", FLAG_STR, &a.hostfile, "started by hand: the ranks on these hosts (mpirun --hostfile; MT_MPIRUN "
         "names another mpirun, such as scripts/hosts.sh's)", "FILE"},
        {"min-ranks", FLAG_INT, &a.min_ranks, "with --max-restarts and --hostfile: a restart drops the hosts that do not "
         "answer (MT_HOST_PROBE HOST true; default ssh) and goes on with --dp shrunk to the ranks left, if at least N"},
        {"keep-checkpoints", FLAG_INT, &a.keep, "with --save: DIR holds the saves, DIR/step-NNNNNNNN, the newest N "
         "kept (0: DIR is the one checkpoint, replaced at each save); --resume DIR takes the newest intact one"},
        {"exit-interval", FLAG_INT, &a.exit_interval, "stop (and save) once the step is a multiple of N (0: never)"},
        {"resume", FLAG_STR, &a.resume, "continue this checkpoint (checked against its manifest), or the newest intact "
         "save of a folder of them (--keep-checkpoints): weights, moments, step, data position; settings not given "
         "continue the checkpoint's", "DIR"},
        {"eval-every", FLAG_INT, &a.eval_every, "validation loss every N steps and at the end (0: only at the end)"},
        {"eval-batches", FLAG_INT, &a.eval_batches, "validation set: the first N x --batch-size sequences of val.bin "
         "(at most what it holds), the same on every layout (0: no validation)"},
        {"log-every", FLAG_INT, &a.log_every, "progress line every N steps (0: only the first, the last and those "
         "evaluated)"},
        {"log-json", FLAG_STR, &a.log_json, "one JSON object per step to this file", "FILE"},
        {"dp", FLAG_INT, &a.dp, "data-parallel degree; the job has dp x tp x pp ranks: started by hand, meshtrain "
         "launches them on this machine through mpirun; under mpirun -np N, N must be dp x tp x pp"},
        {"tp", FLAG_INT, &a.tp, "tensor-parallel degree (dividing --heads)"},
        {"pp", FLAG_INT, &a.pp, "pipeline stages (at most --layers)"},
        {"zero", FLAG_INT, &a.zero, "with --dp: 0 DDP, 1 ZeRO-1 (optimizer state sharded), 2 ZeRO-2 (+ gradients), "
         "3 FSDP (+ parameters)"},
        {"shard-size", FLAG_INT, &a.shard, "hybrid sharding: ZeRO shards over groups of this many dp ranks and "
         "replicates across them (0: one group of all)"},
        {"bucket-mb", FLAG_FLOAT, &a.bucket_mb, "DDP gradient bucket in MiB (0: one bucket per unit)"},
        {"schedule", FLAG_STR, &a.schedule, "pipeline schedule with --pp: naive, gpipe, 1f1b, interleaved, zb or zb2"},
        {"virtual-stages", FLAG_INT, &a.vstages, "model chunks per rank for --schedule interleaved"},
        {"stage-layers", FLAG_STR, &a.stage_layers, "blocks per pipeline stage, e.g. 3,2,2 (not given: even, the "
         "first stages take the extra blocks)", "a,b,.."},
        {"recompute", FLAG_STR, &a.recompute_mode, "activation recomputation: none, attn or full"},
        {"head-recompute", FLAG_BOOL, &a.head_recompute, "with --pp: the last stage keeps only the ln_f output of each "
         "micro-batch awaiting its embedding rows and recomputes its logits then (one more logits product each), "
         "rather than its head gradient: its gradients stay within 2x its parameters plus a unit (same bits)"},
        {"post-validate", FLAG_BOOL, &a.post_validate, "with --pp and --untie-embeddings: each stage updates as soon as "
         "its step ends, as if the global norm needs no clipping, and checks that after the next step (an update that "
         "had to clip is made again and that step run again: the same bits); no barrier between steps (Zero Bubble's "
         "optimizer post-validation); a step is logged when the next one ends"},
        {"sequence-parallel", FLAG_BOOL, &a.seqpar, "with --tp: LayerNorms and residuals split over the sequence"},
        {"tp-blocks", FLAG_INT, &a.tp_blocks, "bit-exact TP: every split sum as K fixed blocks, a power of two and a "
         "multiple of --tp (0: K = --tp)"},
        {"accum-blocks", FLAG_INT, &a.accum_blocks, "the step's micro-batches summed as K contiguous blocks, each "
         "left to right, the blocks as a pairwise tree; K divides the micro-batches and is a multiple of --dp (not "
         "given: K = --dp, each rank's share left to right in 2 gradient buffers, PyTorch's order on one rank; "
         "ZeRO-2/3 over --dp: one block per micro-batch, their round-robin order; 0: one block per micro-batch, "
         "the full tree)", "K", FLAG_COMPUTED},
        {"deterministic", FLAG_BOOL, &a.deterministic, "fixed-order reductions (the default; kept for clarity)"},
        {"fast-comm", FLAG_BOOL, &a.fast_comm, "MPI's own reductions instead of the fixed order (not bit-exact)"},
        {"comm-timeout", FLAG_FLOAT, &a.comm_timeout, "seconds a rank waits in one operation before it stops the job"},
        {"check-collectives", FLAG_BOOL, &a.check_coll, "every collective first checks that its group agrees"},
        {"trace", FLAG_STR, &a.trace, "Chrome trace of the run's communication (one row per rank)", "FILE"},
        {"plan", FLAG_BOOL, &a.plan, "print each stage's fullest and emptiest rank's planned bytes (memory and "
         "traffic) and the step time predicted on this machine (meshtrain calibrate, run first unless "
         "--calibration is given), and exit"},
        {"plan-ranks", FLAG_BOOL, &a.plan_ranks, "print every rank's planned bytes, one line each, and exit"},
        {"calibration", FLAG_STR, &a.calibration, "with --plan: this machine's calibration (meshtrain calibrate "
         "--out FILE)", "FILE"},
        {"dry-run", FLAG_BOOL, &a.dry_run, MT_HELP_DRY_RUN},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]);
    int done;
    int prc = mt_cli_parse(flags, nflags, argc, argv, "train",
                           "Train a GPT-2 model on a prepared token directory (meshtrain prepare).\n"
                           "Layouts: --dp, --tp and --pp make a job of dp x tp x pp ranks. Started by hand, meshtrain\n"
                           "launches them on this machine through mpirun (adding --oversubscribe, and\n"
                           "--allow-run-as-root as root); under mpirun -np N (a cluster, a hostfile) it uses that world.\n"
                           "Every layout gives the bits of one rank (tp: of one rank with --tp-blocks K).", &done);
    if (done)
        return prc;
    MtTrainConfig tc = {0};
    MtTrainState rs = {0};
    MtEngineLayout layout;
    int acc_default = 0, k_kept = 0;
    MtStatus s = resolve(&a, flags, nflags, &tc, &rs, &layout, &acc_default, &k_kept);
    if (s != MT_OK)
        return mt_cli_fail(s);
    if (a.plan || a.plan_ranks) /* the bytes from the layout alone, before anything runs */
        return mt_train_plan(&tc, &layout, a.plan_ranks, a.calibration);
    if (a.save && (s = check_save_dir(a.save, a.keep > 0)) != MT_OK)
        return mt_cli_fail(s);
    MtTokens train = {0}, val = {0};
    if ((s = load_data(a.data, "train.bin", 1, &train)) != MT_OK ||
        (s = load_data(a.data, "val.bin", 0, &val)) != MT_OK)
        return mt_cli_fail(mt_error_prefix(s, "meshtrain train"));
    int rc = 0;
    char saved_to[4300] = "";
    MtComm *comm = NULL;
    int64_t *fields = NULL;
    double *val_sums = NULL; /* validation: the windows' loss sums */
    if ((int64_t)train.vocab > tc.cfg.V) {
        rc = mt_cli_fail(mt_error(MT_EINPUT, "meshtrain train: the data's vocabulary (%u) is larger than "
                                  "the model's (%d)", train.vocab, tc.cfg.V));
        goto out_data;
    }
    if (train.count < (int64_t)a.seq_len + 2) {
        rc = mt_cli_fail(mt_error(MT_EINPUT, "meshtrain train: %s/train.bin holds %lld tokens, fewer than "
                                  "one sequence of %d", a.data, (long long)train.count, a.seq_len + 1));
        goto out_data;
    }
    /* ---- ranks: re-executed under mpirun when started by hand with several ---- */
    int ranks = a.dp * a.tp * a.pp;
    if (a.dry_run) { /* every setting as the ranks will run it */
        a.layers = tc.cfg.L, a.heads = tc.cfg.NH, a.dim = tc.cfg.C, a.vocab = tc.cfg.V, a.ctx = tc.cfg.T;
        a.micro = tc.micro, a.microbatches = tc.batch / tc.micro;
        a.tp_blocks = a.tp_blocks ? a.tp_blocks : a.tp;
        a.threads = mt_cli_threads(a.threads, mt_launched_by_mpi() ? mt_local_ranks() : ranks);
        mt_flags_print(flags, nflags);
        goto out_data;
    }
    if (a.max_restarts > 0 && !mt_launched_by_mpi() && !getenv("MT_SUPERVISED")) { /* restart.c */
        mt_tokens_free(&train);
        mt_tokens_free(&val);
        MtSupervise sv = {a.save, a.log_json, a.hostfile, a.max_restarts, a.min_ranks, a.dp, a.tp, a.pp};
        return mt_train_supervise(full_argc, full_argv, &sv);
    }
    if (ranks > 1 && !mt_launched_by_mpi()) {
        mt_tokens_free(&train);
        mt_tokens_free(&val);
        setenv("MT_RESUME_SAID", "1", 1); /* the ranks (this machine's mpirun passes its environment on) */
        static char resume_eq[4300];
        snprintf(resume_eq, sizeof resume_eq, "--resume=%s", a.resume ? a.resume : "");
        for (int i = 2; a.resume && i < full_argc; i++) /* the save it chose, so the ranks read that one */
            if (strcmp(full_argv[i], "--resume") == 0 && i + 1 < full_argc)
                full_argv[++i] = (char *)a.resume;
            else if (strncmp(full_argv[i], "--resume=", 9) == 0)
                full_argv[i] = resume_eq;
        return mt_launch(full_argc, full_argv, ranks) == 0 ? 0 : 1;
    }
    if (mt_launched_by_mpi()) {
        MtCommOptions opt = {.check = a.check_coll, .timeout_s = a.comm_timeout, .trace = a.trace != NULL};
        comm = mt_comm_init(&full_argc, &full_argv, &opt);
        mt_cli_comm_up();
        MtLayout l = {.dp = a.dp, .tp = a.tp, .pp = a.pp, .shard = a.shard};
        if ((s = mt_layout_check(&l, mt_comm_size(comm), tc.cfg.NH, tc.cfg.L, a.zero, a.schedule)) != MT_OK) {
            if (mt_comm_rank(comm) == 0)
                fprintf(stderr, "meshtrain train: %s (started with mpirun -np %d)\n", mt_error_msg(),
                        mt_comm_size(comm));
            mt_comm_barrier(comm); /* every rank reaches the same verdict; none leaves before rank 0 has said it */
            exit(2);
        }
        mt_comm_mesh(comm, &l);
    }
    int root = !comm || mt_comm_rank(comm) == 0;
    char who[128]; /* errors from here on name the rank that had them */
    snprintf(who, sizeof who, "meshtrain train%s%s", comm ? " " : "", comm ? mt_comm_label(comm) : "");
    if (a.trace && !comm)
        printf("meshtrain train: one rank, no communication: --trace %s is not written\n", a.trace);
    int nranks = comm ? mt_comm_size(comm) : 1;
    fields = calloc((size_t)nranks * RANK_FIELDS, sizeof(int64_t));
    MtEngine eng; /* the layout's techniques composed once (mt_engine.h) */
    if (!fields || (s = mt_engine_init(&eng, &tc, &layout, comm)) != MT_OK) {
        rc = mt_cli_fail(mt_error_prefix(fields ? s : MT_ENOMEM, "%s", who));
        goto out_data;
    }
    MtTrainer *tr = &eng.tr;
    MtTpe *tpp = eng.tp;
    MtPipe *pp = eng.pp;
    MtDp *dpp = eng.dp;
    if (a.resume) { /* every rank reads its own pieces only */
        int64_t before = mt_mem_rss_mark();
        s = mt_engine_load(&eng, a.resume);
        if (comm)
            rss_report(comm, "checkpoint load", before);
        if (s != MT_OK) {
            rc = mt_cli_fail(mt_error_prefix(s, "%s", who));
            goto out_trainer;
        }
        tr->step = rs.step;
    }
    FILE *jf = NULL;
    if (root && a.log_json && !(jf = fopen(a.log_json, a.resume ? "a" : "w"))) {
        rc = mt_cli_fail(mt_error(MT_EINPUT, "meshtrain train: cannot open --log-json %s: %s", a.log_json,
                                  strerror(errno)));
        goto out_trainer;
    }
    /* the validation set: --eval-batches global batches of sequences, whatever the layout */
    int64_t nval = val.count > 0 ? (val.count - 1) / a.seq_len : 0;
    int64_t val_windows = (int64_t)a.eval_batches * tc.batch;
    if (val_windows > nval)
        val_windows = nval;
    int val_dp = comm ? mt_comm_group_size(comm, MT_GROUP_DP) : 1;
    if (val_windows > 0 && !(val_sums = calloc((size_t)val_dp * (size_t)((val_windows + val_dp - 1) / val_dp),
                                               sizeof(double)))) {
        rc = mt_cli_fail(mt_error(MT_ENOMEM, "%s: no memory for %lld validation sums", who, (long long)val_windows));
        goto out_trainer;
    }
    if (!root)
        freopen("/dev/null", "w", stdout); /* rank 0 speaks for the job; errors still reach stderr */
    banner(&a, flags, nflags, &eng, &rs, acc_default, k_kept, val_windows);
    fflush(stdout);
    double t_total = 0.0, exposed_total = 0.0, bubble_total = 0.0;
    int64_t timed = 0;
    MtStepStats st = {0};
    double dt_late = 0.0; /* post-validation: the time of the step whose stats come with the next */
    int stop = 0;
    while (tr->step < a.steps && !stop) {
        mt_mem_reset_peaks(&tr->mem);
        if (comm)
            mt_comm_reset_counters(comm);
        double t0 = mt_now();
        mt_engine_step(&eng, &train, &st);
        double dt = mt_now() - t0;
        t_total += dt;
        timed++;
        exposed_total += mt_engine_comm_s(&eng);
        if (pp && timed > 1) /* the first step faults its memory in */
            bubble_total += pp->bubble;
        int last = tr->step == a.steps || (a.exit_interval > 0 && tr->step % a.exit_interval == 0);
        int eval_now = val_windows > 0 && ((a.eval_every > 0 && tr->step % a.eval_every == 0) || last);
        int save_now = a.save && a.save_every > 0 && tr->step % a.save_every == 0 && !last;
        /* the steps to report: this one, or with post-validation the one before (and this
         * one too where it must be complete now: an evaluation, a save, the end) */
        MtStepStats rep[2];
        double rep_dt[2];
        int nrep = 0;
        if (st.step == tr->step)
            rep[nrep] = st, rep_dt[nrep++] = dt;
        else {
            if (st.step > 0)
                rep[nrep] = st, rep_dt[nrep++] = dt_late;
            dt_late = dt;
            if ((last || eval_now || save_now) && mt_engine_flush(&eng, &rep[nrep]))
                rep_dt[nrep++] = dt;
        }
        for (int k = 0; k < nrep && !stop; k++) {
            const MtStepStats *sp = &rep[k];
            int now = sp->step == tr->step; /* the step just run (an evaluation may follow it) */
            if (!isfinite(sp->loss) || !isfinite(sp->grad_norm)) { /* every rank has the same loss and norm */
                if (root)
                    fprintf(stderr, "meshtrain train: step %lld: loss %g, gradient norm %g: not finite; stopping "
                            "without saving (the last checkpoint, if any, is kept)\n", (long long)sp->step, sp->loss,
                            sp->grad_norm);
                rc = 1;
                stop = 1;
                break;
            }
            double tps = (double)tc.batch * tc.seq / rep_dt[k];
            if (a.log_json) { /* this step's figures, before an evaluation adds to them */
                rank_fields(tr, comm, dpp, pp, tpp, fields);
                if (comm)
                    mt_comm_gather_i64(comm, fields, RANK_FIELDS, fields);
            }
            double vl = NAN;
            if (now && eval_now)
                vl = mt_engine_validate(&eng, &val, val_windows, val_sums);
            if (jf)
                log_json(jf, sp, rep_dt[k] * 1e3, tps, vl, val_windows, pp ? pp->bubble : NAN, fields, nranks);
            if ((a.log_every > 0 && sp->step % a.log_every == 0) || (now && last) || !isnan(vl) || sp->step == 1) {
                char eta[32];
                fmt_eta(eta, sizeof eta, (a.steps - sp->step) * (t_total / timed));
                printf("step %5lld/%d | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tok/s | eta %s",
                       (long long)sp->step, a.steps, sp->loss, sp->lr, sp->grad_norm, rep_dt[k] * 1e3, tps, eta);
                if (!isnan(vl))
                    printf(" | val %.4f", vl);
                printf("\n");
                fflush(stdout);
            }
        }
        if (stop)
            break;
        if (last && tr->step != a.steps)
            break; /* --exit-interval */
        if (save_now && (rc = save_run(&eng, &a, root, saved_to, sizeof saved_to)) != 0)
            break;
    }
    if (rc == 0 && tpp && comm) { /* the replicated parameters must not drift apart */
        int differ = mt_engine_replicas_differ(&eng);
        if (differ) {
            if (root)
                fprintf(stderr, "meshtrain train: %d replicated tensors differ across the %d tp ranks at step %lld\n",
                        differ, tpp->ctx.N, (long long)tr->step);
            rc = 1;
        } else
            printf("tensor parallel: every replicated tensor (parameters and moments) is identical on the %d tp "
                   "ranks at step %lld\n", tpp->ctx.N, (long long)tr->step);
    }
    if (rc == 0 && a.save && (rc = save_run(&eng, &a, root, saved_to, sizeof saved_to)) == 0)
        printf("saved checkpoint %s (step %lld)\n", saved_to, (long long)tr->step);
    if (timed > 0)
        printf("done: %lld steps, %.1f ms/step on average\n", (long long)timed, 1e3 * t_total / timed);
    if (timed > 0 && pp)
        pipe_summary(pp, timed > 1 ? bubble_total / (timed - 1) : pp->bubble, 1e3 * exposed_total / timed);
    if (timed > 0 && pp && pp->o.post_validate)
        printf("post-validation: %lld of %lld updates made again (their norm clipped), the step after each run "
               "twice\n", (long long)pp->pv_rollbacks, (long long)timed);
    if (timed > 0 && (dpp || (tpp && comm)))
        printf("rank 0: %.1f ms/step inside %s during the step (%.1f%% of it, not overlapped)\n",
               1e3 * exposed_total / timed,
               dpp && tpp ? "dp and tp communication calls" : dpp ? "communication calls" : "tensor-parallel collectives",
               100.0 * exposed_total / t_total);
    if (comm && rc == 0)
        rc = summary(comm, a.trace, root);
    if (jf)
        fclose(jf);
out_trainer:
    free(val_sums);
    mt_engine_free(&eng);
out_data:
    free(fields);
    mt_tokens_free(&train);
    mt_tokens_free(&val);
    if (comm && rc == 0)
        mt_comm_finalize(comm);
    return rc;
}
