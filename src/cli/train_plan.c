/* train_plan.c - `train --plan` and `--plan-ranks`: a layout's bytes and traffic from the
 * layout alone (mt_plan.h), per stage or per rank, and its predicted step time on this
 * machine (the planner's time model on a calibration, docs/planner.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mt_cli.h"
#include "mt_cost.h"
#include "mt_plan.h"
#include "mt_train_plan.h"

/* one line per rank: what the tests and scripts/equivalence.sh read */
static void print_rank(const MtTrainConfig *tc, const MtEngineLayout *l, int r)
{
    int64_t b[MT_MEM_NCAT], cb[3];
    mt_plan_memory(tc, l, r, b);
    mt_plan_comm(tc, l, r, cb);
    int defer, nh = mt_plan_head(tc, l, r, &defer);
    printf("plan rank %d: params %lld grads %lld optimizer %lld activations %lld bytes; sends dp %lld tp %lld pp %lld "
           "bytes per step", r, (long long)b[MT_MEM_PARAMS], (long long)b[MT_MEM_GRADS], (long long)b[MT_MEM_OPTIM],
           (long long)b[MT_MEM_ACTS], (long long)cb[0], (long long)cb[1], (long long)cb[2]);
    int B = mt_accum_block_size(tc);
    if (nh > 0) /* the last stage's tied head (docs/parallelism.md) */
        printf("; tied head: %d block%s of %d micro-batch%s await%s their rows, %s", nh, nh > 1 ? "s" : "", B,
               B > 1 ? "es" : "", nh > 1 ? "" : "s",
               defer == MT_PIPE_HEAD_KEEP   ? "their operands kept (H_k computed when the rows arrive)"
               : defer == MT_PIPE_HEAD_REDO ? "their ln_f outputs kept (H_k recomputed when the rows arrive)"
                                            : "each as its head sum");
    if (nh > 1 && B == 1 && defer == MT_PIPE_HEAD_SLOTS) { /* what --head-recompute would hold instead */
        MtEngineLayout alt = *l;
        int64_t b2[MT_MEM_NCAT];
        alt.po.head_recompute = 1;
        mt_plan_memory(tc, &alt, r, b2);
        printf(" (--head-recompute: grads %lld, activations %lld bytes)", (long long)b2[MT_MEM_GRADS],
               (long long)b2[MT_MEM_ACTS]);
    }
    putchar('\n');
}

static void row(int stage, const char *what, int r, const int64_t *b, const int64_t *cb)
{
    printf("  %5d %-8s %5d %13lld %13lld %13lld %13lld %13lld   %lld/%lld/%lld\n", stage, what, r, (long long)b[MT_MEM_PARAMS],
           (long long)b[MT_MEM_GRADS], (long long)b[MT_MEM_OPTIM], (long long)b[MT_MEM_ACTS],
           (long long)(b[MT_MEM_PARAMS] + b[MT_MEM_GRADS] + b[MT_MEM_OPTIM] + b[MT_MEM_ACTS]), (long long)cb[0],
           (long long)cb[1], (long long)cb[2]);
}

/* the predicted step on a calibration of this machine (run now when none is given) */
static int predict(const MtTrainConfig *tc, const MtEngineLayout *l, const char *calibration)
{
    const char *measured = NULL;
    if (!calibration) {
        printf("calibrating this machine for the predicted step (meshtrain calibrate --threads %d; give --calibration "
               "FILE to skip)\n", tc->threads);
        fflush(stdout);
        if (!(measured = mt_cli_calibrate_now(tc->threads)))
            return mt_cli_fail(mt_error_prefix(MT_EIO, "meshtrain train --plan"));
        calibration = measured;
    }
    MtCluster *cl = malloc(sizeof *cl);
    MT_ASSERT(cl, "out of memory");
    MtStatus s = mt_cluster_read(calibration, cl);
    if (measured)
        unlink(measured);
    if (s != MT_OK) {
        free(cl);
        return mt_cli_fail(mt_error_prefix(s, "meshtrain train --calibration"));
    }
    MtPlanModel m = {.cfg = tc->cfg, .batch = tc->batch, .seq = tc->seq, .prec = MT_PREC_FP32, .attn_fused = 1};
    MtPlanLayout pl = {.dp = l->dp, .tp = l->tp, .pp = l->pp, .zero = l->zero, .shard = l->shard,
                       .sched = l->pp > 1 ? l->po.kind : MT_SCHED_1F1B, .V = l->pp > 1 ? l->po.V : 1,
                       .micro = tc->micro, .recompute = tc->recompute, .seqpar = l->seqpar,
                       .stage_layers = l->pp > 1 && l->po.given ? l->po.stage_layers : NULL,
                       .nstage = l->pp > 1 && l->po.given ? l->pp * l->po.V : 0, .post_validate = l->po.post_validate};
    MtStepTime t;
    if ((s = mt_plan_time(&m, &pl, cl, INFINITY, &t)) != MT_OK) {
        free(cl);
        return mt_cli_fail(mt_error_prefix(s, "meshtrain train --plan"));
    }
    printf("predicted step on %s (%s): %.1f ms = compute %.1f + recomputation %.1f + bubble %.1f + tp %.1f + dp %.1f + "
           "pipeline sends %.1f + optimizer %.1f ms\n", cl->name, calibration == measured ? "calibrated now" : calibration,
           1e3 * t.step, 1e3 * t.compute, 1e3 * t.recompute, 1e3 * t.bubble, 1e3 * t.tp, 1e3 * t.dp, 1e3 * t.pp,
           1e3 * t.optimizer);
    free(cl);
    return 0;
}

int mt_train_plan(const MtTrainConfig *tc, const MtEngineLayout *l, int ranks, const char *calibration)
{
    int world = l->dp * l->tp * l->pp, per = l->dp * l->tp;
    if (ranks) {
        for (int r = 0; r < world; r++)
            print_rank(tc, l, r);
        return 0;
    }
    printf("plan: %d rank%s (dp %d x tp %d x pp %d), bytes per rank from the layout alone (--plan-ranks: every "
           "rank's line)\n", world, world > 1 ? "s" : "", l->dp, l->tp, l->pp);
    printf("  %5s %-8s %5s %13s %13s %13s %13s %13s   %s\n", "stage", "", "rank", "params", "grads", "optimizer",
           "activations", "total", "sends dp/tp/pp per step");
    for (int p = 0; p < l->pp; p++) {
        int64_t most[MT_MEM_NCAT] = {0}, least[MT_MEM_NCAT] = {0}, mc[3] = {0}, lc[3] = {0};
        int hi = -1, lo = -1;
        int64_t hit = 0, lot = 0;
        for (int r = p * per; r < (p + 1) * per; r++) {
            int64_t b[MT_MEM_NCAT], cb[3];
            mt_plan_memory(tc, l, r, b);
            mt_plan_comm(tc, l, r, cb);
            int64_t tot = b[MT_MEM_PARAMS] + b[MT_MEM_GRADS] + b[MT_MEM_OPTIM] + b[MT_MEM_ACTS];
            if (hi < 0 || tot > hit)
                hi = r, hit = tot, memcpy(most, b, sizeof b), memcpy(mc, cb, sizeof cb);
            if (lo < 0 || tot <= lot) /* a tie names the later rank */
                lo = r, lot = tot, memcpy(least, b, sizeof b), memcpy(lc, cb, sizeof cb);
        }
        row(p, "fullest", hi, most, mc);
        if (per > 1)
            row(p, "emptiest", lo, least, lc);
    }
    return predict(tc, l, calibration);
}
