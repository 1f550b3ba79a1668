/* cmd_plan.c - `meshtrain plan`: which layout to run on a described cluster, what it will
 * cost in memory and time, and the train command that runs it (docs/planner.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flags.h"
#include "mt_cli.h"
#include "mt_json.h"
#include "mt_planner.h"
#include "mt_timeline.h"

typedef struct {
    const char *model, *cluster, *precision, *attention, *schedule, *recompute, *svg, *data, *stage_layers, *calibration;
    int layers, heads, dim, seq_len, vocab, batch, nodes, devices, top, json, explain, all, untie, post_validate, no_post_validate;
    int dp, tp, pp, zero, shard, vstages, micro, seqpar, no_seqpar, accum_blocks;
} PlanArgs;

static const struct {
    const char *name;
    int L, NH, C;
} gpt2_sizes[] = {{"gpt2", 12, 12, 768}, {"gpt2-medium", 24, 16, 1024}, {"gpt2-large", 36, 20, 1280},
                  {"gpt2-xl", 48, 25, 1600}};

static const char *verdict_names[] = {"fits", "out of memory", "does not divide", "refused by the engine"};
static const char *recompute_names[] = {"none", "attn", "full"};

static void layout_str(const MtPlanLayout *l, char *b, size_t n)
{
    int k = snprintf(b, n, "dp%d tp%d pp%d z%d", l->dp, l->tp, l->pp, l->zero);
    if (l->shard > 0 && l->shard < l->dp)
        k += snprintf(b + k, n - k, " shard%d", l->shard);
    if (l->seqpar)
        snprintf(b + k, n - k, " sp");
}

static void sched_str(const MtPlanLayout *l, char *b, size_t n)
{
    if (l->pp == 1)
        snprintf(b, n, "-");
    else if (l->V > 1)
        snprintf(b, n, "%s V%d%s", mt_schedule_name(l->sched), l->V, l->post_validate ? " pv" : "");
    else
        snprintf(b, n, "%s%s", mt_schedule_name(l->sched), l->post_validate ? " pv" : "");
}

static void print_json(const MtPlanModel *m, const MtCluster *cl, const MtPlanEntry *e, const char *data)
{
    const MtPlanLayout *l = &e->l;
    char cmd[1024];
    mt_plan_train_flags(m, l, data, cmd, sizeof cmd);
    MtBuf b;
    mt_buf_init(&b);
    mt_buf_printf(&b, "{\"dp\": %d, \"tp\": %d, \"pp\": %d, \"zero\": %d, \"shard_size\": %d, \"schedule\": ", l->dp,
                  l->tp, l->pp, l->zero, l->shard > 0 ? l->shard : l->dp);
    mt_buf_json_str(&b, l->pp > 1 ? mt_schedule_name(l->sched) : NULL);
    mt_buf_printf(&b, ", \"virtual_stages\": %d, \"micro_batch_size\": %d, \"recompute\": \"%s\", "
                  "\"sequence_parallel\": %s, \"post_validate\": %s, \"fits\": %s, \"verdict\": \"%s\", ",
                  l->pp > 1 ? l->V : 1, l->micro, recompute_names[l->recompute], l->seqpar ? "true" : "false",
                  l->post_validate ? "true" : "false",
                  e->verdict == MT_PLAN_OK ? "true" : "false", verdict_names[e->verdict]);
    if (e->verdict != MT_PLAN_OK) {
        mt_buf_printf(&b, "\"why\": ");
        mt_buf_json_str(&b, e->why);
        mt_buf_printf(&b, ", ");
    }
    if (e->verdict == MT_PLAN_OK || e->verdict == MT_PLAN_OOM)
        mt_buf_printf(&b, "\"mem_peak_bytes\": %.0f, \"mem_rank\": %d, \"mem_device_bytes\": %.0f, ", e->mem.peak,
                      e->mem.rank, cl->mem_bytes);
    if (e->verdict == MT_PLAN_OK) {
        const MtStepTime *t = &e->time;
        mt_buf_printf(&b, "\"step_s\": %.6g, \"tokens_per_s\": %.6g, \"tflops_per_device\": %.6g, \"mfu\": %.4f, "
                      "\"breakdown\": {\"time_s\": {\"compute\": %.6g, \"recompute\": %.6g, \"bubble\": %.6g, "
                      "\"tp_exposed\": %.6g, \"dp_exposed\": %.6g, \"pp_send_recv\": %.6g, \"optimizer\": %.6g}, "
                      "\"memory_bytes\": {\"params\": %.0f, \"grads\": %.0f, \"optimizer\": %.0f, \"activations\": "
                      "%.0f, \"comm_buffers\": %.0f, \"workspace\": %.0f}}, ", t->step, e->tokens_per_s, e->tflops,
                      e->mfu, t->compute, t->recompute, t->bubble, t->tp, t->dp, t->pp, t->optimizer,
                      e->mem.bytes[MT_PMEM_PARAMS], e->mem.bytes[MT_PMEM_GRADS], e->mem.bytes[MT_PMEM_OPTIM],
                      e->mem.bytes[MT_PMEM_ACTS], e->mem.bytes[MT_PMEM_COMM], e->mem.bytes[MT_PMEM_WORK]);
    }
    mt_buf_printf(&b, "\"train_flags\": ");
    mt_buf_json_str(&b, cmd);
    mt_buf_printf(&b, "}");
    printf("%s\n", b.failed ? "{}" : b.data);
    mt_buf_free(&b);
}

static void print_row(const MtPlanModel *m, const MtCluster *cl, int i, const MtPlanEntry *e)
{
    char lay[64], sch[32];
    layout_str(&e->l, lay, sizeof lay);
    sched_str(&e->l, sch, sizeof sch);
    printf("%3d  %-22s %4d  %-14s %-5s", i, lay, e->l.micro, sch, recompute_names[e->l.recompute]);
    if (e->verdict == MT_PLAN_OK)
        printf(" %10.4f %12.0f %8.1f %5.1f%% %7.2f/%.0f\n", e->time.step, e->tokens_per_s, e->tflops, 100 * e->mfu,
               e->mem.peak / 1e9, cl->mem_bytes / 1e9);
    else if (e->verdict == MT_PLAN_OOM)
        printf("  %s: %.2f/%.0f GB\n", verdict_names[e->verdict], e->mem.peak / 1e9, cl->mem_bytes / 1e9);
    else
        printf("  %s: %s\n", verdict_names[e->verdict], e->why);
}

static void explain(const MtPlanModel *m, const MtCluster *cl, const MtPlanEntry *e)
{
    const MtStepTime *t = &e->time;
    double parts[] = {t->compute, t->recompute, t->bubble, t->tp, t->dp, t->pp, t->optimizer};
    const char *names[] = {"compute (forward and backward)", "recomputation", "pipeline bubble",
                           "tensor-parallel collectives (exposed)", "data-parallel / ZeRO traffic (exposed)",
                           "pipeline sends and receives", "optimizer (AdamW, the norm)"};
    printf("\nbreakdown of #1, the critical rank's step (%.4f s):\n", t->step);
    for (int k = 0; k < 7; k++)
        printf("  %-40s %10.4f s  %5.1f%%\n", names[k], parts[k], 100 * parts[k] / t->step);
    const char *mn[] = {"parameters", "gradients", "optimizer state", "activations", "communication buffers",
                        "workspace"};
    const MtPlanLayout *l = &e->l;
    int S = l->pp > 1 ? l->pp * l->V : 1;
    double *stage = malloc(sizeof(double) * 3 * (size_t)S);
    MT_ASSERT(stage, "out of memory");
    if (l->pp > 1 && mt_plan_stage_costs(m, l, cl, stage) == MT_OK) {
        printf("per micro-batch, each virtual stage's F, B, W as the simulator takes them (ms; B includes W where the"
               " schedule does not split them):\n");
        for (int v = 0; v < S; v++)
            printf("  stage %3d (rank %3d)  F %9.3f  B %9.3f  W %9.3f\n", v, v % l->pp, 1e3 * stage[3 * v],
                   1e3 * stage[3 * v + 1], 1e3 * stage[3 * v + 2]);
    }
    free(stage);
    printf("memory of the fullest rank (world rank %d), %s:\n", e->mem.rank, mt_prec_name(m->prec));
    for (int k = 0; k < MT_NPMEM; k++)
        printf("  %-40s %12.0f bytes  %8.3f GB\n", mn[k], e->mem.bytes[k], e->mem.bytes[k] / 1e9);
    printf("  %-40s %12.0f bytes  %8.3f GB of %.3f GB\n", "total", e->mem.peak, e->mem.peak / 1e9,
           cl->mem_bytes / 1e9);
}

/* The predicted timeline of a pipeline layout: the schedule's lists simulated with the
 * time model's stage costs, time in milliseconds (at most 64 micro-batches drawn). */
static MtStatus draw(const MtPlanModel *m, const MtCluster *cl, const MtPlanEntry *e, const char *path)
{
    const MtPlanLayout *l = &e->l;
    int P = l->pp, V = P > 1 ? l->V : 1, S = P * V, M = m->batch / l->micro / l->dp;
    if (P == 1)
        return mt_error(MT_EINPUT, "meshtrain plan: --svg: the first layout has no pipeline (--pp 1): nothing to draw");
    int Md = M > 64 ? 64 / P * P : M;
    if (Md < P)
        Md = P;
    double *stage = malloc(sizeof(double) * 3 * (size_t)S);
    MT_ASSERT(stage, "out of memory");
    MT_TRY(mt_plan_stage_costs(m, l, cl, stage));
    for (int i = 0; i < 3 * S; i++)
        stage[i] *= 1e3;
    MtSchedule s = {l->sched, P, Md, V, m->cfg.untied};
    MtAction *lists[MT_MAX_STAGES];
    int n[MT_MAX_STAGES], cap = mt_schedule_max_actions(&s);
    for (int r = 0; r < P; r++) {
        lists[r] = malloc(sizeof(MtAction) * (size_t)cap);
        MT_ASSERT(lists[r], "out of memory");
        n[r] = mt_schedule_build(&s, r, lists[r]);
    }
    MtSimResult res;
    MtStatus st = mt_simulate(&s, lists, n, (MtSimCosts){0, 0, 0, stage, NULL}, &res);
    int nb = 0;
    MtBox *box = st == MT_OK ? mt_timeline_sim_boxes(&res, lists, P, &nb) : NULL;
    if (st == MT_OK) {
        char title[256];
        snprintf(title, sizeof title, "predicted: %s, pp %d, %d of %d micro-batches of %d, %s (ms)",
                 mt_schedule_name(l->sched), P, Md, M, l->micro, cl->name);
        MtTimeline tl = {title, box, nb, P};
        FILE *f = fopen(path, "w");
        if (!f || mt_timeline_svg(f, &tl, 1) != 0)
            st = mt_error(MT_EIO, "meshtrain plan: cannot write --svg %s", path);
        if (f)
            fclose(f);
    }
    free(box);
    mt_sim_free(&res);
    for (int r = 0; r < P; r++)
        free(lists[r]);
    free(stage);
    return st;
}

static int recompute_kind(const char *s)
{
    for (int k = 0; k < 3; k++)
        if (strcmp(s, recompute_names[k]) == 0)
            return k;
    return -1;
}

int mt_cmd_plan(int argc, char **argv)
{
    PlanArgs a = {.cluster = "a100-80g", .precision = "bf16", .attention = "fused", .data = "DATA", .seq_len = 1024,
                  .vocab = 50257, .batch = 512, .top = 5, .dp = 1, .tp = 1, .pp = 1, .vstages = 1, .micro = 1,
                  .accum_blocks = -1, .schedule = "1f1b", .recompute = "none"};
    Flag flags[] = {
        {"model", FLAG_STR, &a.model, "gpt2, gpt2-medium, gpt2-large or gpt2-xl (sets --layers --heads --dim; "
         "--seq-len 1024 and --vocab 50257 stay yours)", "NAME"},
        {"layers", FLAG_INT, &a.layers, "transformer blocks (with --heads and --dim, instead of --model)"},
        {"heads", FLAG_INT, &a.heads, "attention heads"},
        {"dim", FLAG_INT, &a.dim, "model width"},
        {"seq-len", FLAG_INT, &a.seq_len, "tokens per sequence"},
        {"vocab", FLAG_INT, &a.vocab, "vocabulary size"},
        {"untie-embeddings", FLAG_BOOL, &a.untie, "the LM head has its own weight (train's --untie-embeddings)"},
        {"post-validate", FLAG_BOOL, &a.post_validate, "fix train's --post-validate on for every pipeline layout (its "
         "steps overlap; needs --untie-embeddings; neither this nor the next given: searched on an untied model's "
         "pipelines)"},
        {"no-post-validate", FLAG_BOOL, &a.no_post_validate, "fix --post-validate off"},
        {"batch-size", FLAG_INT, &a.batch, "sequences per optimizer step, over all devices"},
        {"cluster", FLAG_STR, &a.cluster, "a built-in cluster (a100-80g, h100-80g), this-machine (measured: "
         "--calibration, or meshtrain calibrate run first) or a cluster file (JSON, docs/planner.md)", "NAME|FILE"},
        {"calibration", FLAG_STR, &a.calibration, "with --cluster this-machine: the file meshtrain calibrate wrote "
         "(not given: calibrate now, devices of one thread)", "FILE"},
        {"nodes", FLAG_INT, &a.nodes, "nodes of the cluster to use (or --devices)"},
        {"devices", FLAG_INT, &a.devices, "devices to use (or --nodes)"},
        {"precision", FLAG_STR, &a.precision, "fp32 (every product in fp32, the CPU engine's bytes) or bf16 (mixed "
         "precision: bf16 products and activations, fp32 master weights, gradients and moments)"},
        {"attention", FLAG_STR, &a.attention, "fused (the s x s scores never stored: meshtrain's kernels) or unfused "
         "(stored and streamed, as Megatron-LM without flash attention)"},
        {"dp", FLAG_INT, &a.dp, "fix the data-parallel degree (not given: searched)"},
        {"tp", FLAG_INT, &a.tp, "fix the tensor-parallel degree (not given: searched)"},
        {"pp", FLAG_INT, &a.pp, "fix the pipeline stages (not given: searched)"},
        {"zero", FLAG_INT, &a.zero, "fix the ZeRO stage 0-3 (not given: searched)"},
        {"shard-size", FLAG_INT, &a.shard, "fix hybrid sharding's group (not given: 0, one group of all dp ranks)"},
        {"schedule", FLAG_STR, &a.schedule, "fix the pipeline schedule: naive, gpipe, 1f1b, interleaved, zb or zb2 "
         "(not given: searched)"},
        {"virtual-stages", FLAG_INT, &a.vstages, "fix the chunks per rank of --schedule interleaved (not given: "
         "searched, 2 to 8)"},
        {"micro-batch-size", FLAG_INT, &a.micro, "fix the micro-batch size (not given: searched, divisors of the "
         "batch per dp rank up to 64)"},
        {"stage-layers", FLAG_STR, &a.stage_layers, "fix the pipeline's cut: blocks per virtual stage, e.g. 3,2,2 "
         "(not given: even, the first stages taking the extra blocks)", "a,b,.."},
        {"recompute", FLAG_STR, &a.recompute, "fix recomputation: none, attn or full (not given: searched)"},
        {"sequence-parallel", FLAG_BOOL, &a.seqpar, "fix sequence parallelism on (neither this nor the next given: "
         "searched with --tp > 1)"},
        {"no-sequence-parallel", FLAG_BOOL, &a.no_seqpar, "fix sequence parallelism off"},
        {"accum-blocks", FLAG_INT, &a.accum_blocks, "the accumulation blocks train is given (not given: the "
         "layout's default)", "K", FLAG_COMPUTED},
        {"top", FLAG_INT, &a.top, "layouts to print"},
        {"all", FLAG_BOOL, &a.all, "print every layout considered, those that do not fit or are refused too, "
         "with the reason"},
        {"json", FLAG_BOOL, &a.json, "one JSON object per printed layout on stdout, best first, nothing else"},
        {"explain", FLAG_BOOL, &a.explain, "the first layout's step time and memory by term"},
        {"svg", FLAG_STR, &a.svg, "draw the first layout's predicted pipeline timeline", "FILE"},
        {"data", FLAG_STR, &a.data, "the --data directory written into the train commands", "DIR"},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]), done;
    int rc = mt_cli_parse(flags, nflags, argc, argv, "plan",
                          "Choose a layout: every dp x tp x pp x ZeRO layout, micro-batch size, schedule and\n"
                          "recomputation of a model on a cluster, checked by train's own rules, sized and timed by\n"
                          "the planner's models (docs/planner.md); the fastest that fit first, with their train\n"
                          "commands.", &done);
    if (done)
        return rc;
#define SET(name) (mt_flag_find(flags, nflags, name)->set)
    MtPlanModel m = {.batch = a.batch, .seq = a.seq_len};
    if (a.model) {
        int k = -1;
        for (int i = 0; i < 4; i++)
            if (strcmp(a.model, gpt2_sizes[i].name) == 0)
                k = i;
        if (k < 0)
            return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain plan: --model %s: must be gpt2, gpt2-medium, "
                                        "gpt2-large or gpt2-xl", a.model));
        if (SET("layers") || SET("heads") || SET("dim"))
            return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain plan: --model %s sets --layers, --heads and --dim; "
                                        "give one or the other", a.model));
        a.layers = gpt2_sizes[k].L, a.heads = gpt2_sizes[k].NH, a.dim = gpt2_sizes[k].C;
    } else if (!a.layers || !a.heads || !a.dim)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain plan: give --model or all of --layers, --heads and --dim"));
    m.cfg = (MtConfig){.V = a.vocab, .T = a.seq_len, .L = a.layers, .NH = a.heads, .C = a.dim, .untied = a.untie};
    MtStatus s = mt_config_check(&m.cfg);
    if (s != MT_OK)
        return mt_cli_fail(mt_error_prefix(s, "meshtrain plan"));
    if (a.batch < 1)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain plan: --batch-size %d must be >= 1", a.batch));
    if ((m.prec = mt_prec_kind(a.precision)) < 0)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain plan: --precision %s: must be fp32 or bf16", a.precision));
    if (strcmp(a.attention, "fused") && strcmp(a.attention, "unfused"))
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain plan: --attention %s: must be fused or unfused",
                                    a.attention));
    m.attn_fused = strcmp(a.attention, "fused") == 0;
    MtCluster cl;
    const char *measured = NULL;
    if (strcmp(a.cluster, "this-machine") == 0 && !a.calibration) { /* measure now, devices of one thread */
        if (!(measured = mt_cli_calibrate_now(1)))
            return mt_cli_fail(mt_error_prefix(MT_EIO, "meshtrain plan: --cluster this-machine"));
        a.calibration = measured;
    }
    if (a.calibration && strcmp(a.cluster, "this-machine") != 0)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain plan: --calibration is for --cluster this-machine"));
    s = a.calibration ? mt_cluster_read(a.calibration, &cl) : mt_cluster_load(a.cluster, &cl);
    if (measured)
        unlink(measured);
    if (s != MT_OK)
        return mt_cli_fail(mt_error_prefix(s, "meshtrain plan"));
    if (SET("nodes") == SET("devices"))
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain plan: give one of --nodes N and --devices N"));
    int devices = SET("nodes") ? a.nodes * cl.devices_per_node : a.devices;
    if (devices < 1 || (SET("nodes") && a.nodes < 1) || devices > (1 << 20))
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain plan: %s %d: must be between 1 and %d devices",
                                    SET("nodes") ? "--nodes" : "--devices", SET("nodes") ? a.nodes : a.devices,
                                    1 << 20));
    MtPlanFixed fx = {.dp = SET("dp") ? a.dp : -1, .tp = SET("tp") ? a.tp : -1, .pp = SET("pp") ? a.pp : -1,
                      .zero = SET("zero") ? a.zero : -1, .shard = SET("shard-size") ? a.shard : -1,
                      .sched = -1, .V = SET("virtual-stages") ? a.vstages : -1,
                      .micro = SET("micro-batch-size") ? a.micro : -1, .recompute = -1,
                      .seqpar = a.seqpar ? 1 : a.no_seqpar ? 0 : -1, .accum_blocks = SET("accum-blocks") ? a.accum_blocks : -1,
                      .post_validate = a.post_validate ? 1 : a.no_post_validate ? 0 : -1};
    int given[MT_MAX_STAGES];
    if (a.stage_layers) {
        if ((s = mt_flags_int_list("stage-layers", a.stage_layers, given, MT_MAX_STAGES, &fx.nstage)) != MT_OK)
            return mt_cli_fail(mt_error_prefix(s, "meshtrain plan"));
        fx.stage_layers = given;
    }
    if (SET("schedule") && (fx.sched = mt_schedule_kind(a.schedule)) < 0)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain plan: --schedule %s: must be naive, gpipe, 1f1b, "
                                    "interleaved, zb or zb2", a.schedule));
    if (SET("recompute") && (fx.recompute = recompute_kind(a.recompute)) < 0)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain plan: --recompute %s: must be none, attn or full",
                                    a.recompute));
    const char *deg[] = {"dp", "tp", "pp", "micro-batch-size", "virtual-stages", "top"};
    int degv[] = {a.dp, a.tp, a.pp, a.micro, a.vstages, a.top};
    for (int k = 0; k < 6; k++)
        if ((SET(deg[k]) || k == 5) && degv[k] < 1)
            return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain plan: --%s %d must be >= 1", deg[k], degv[k]));
    long long fixed = (long long)(fx.dp > 0 ? fx.dp : 1) * (fx.tp > 0 ? fx.tp : 1) * (fx.pp > 0 ? fx.pp : 1);
    if (devices % fixed != 0 || (fx.dp > 0 && fx.tp > 0 && fx.pp > 0 && fixed != devices))
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain plan: the fixed degrees (%s%s%s) make %lld devices, which "
                                    "%s the %d devices asked for", SET("dp") ? "--dp " : "", SET("tp") ? "--tp " : "",
                                    SET("pp") ? "--pp" : "", fixed, devices % fixed ? "does not divide" : "are not",
                                    devices));
    if (a.post_validate && a.no_post_validate)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain plan: --post-validate contradicts --no-post-validate"));
    if (a.seqpar && a.no_seqpar)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain plan: --sequence-parallel contradicts --no-sequence-parallel"));
    if (fx.seqpar == 1 && fx.tp == 1)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain plan: --sequence-parallel needs --tp > 1"));
    if (fx.V > 1 && fx.sched >= 0 && fx.sched != MT_SCHED_INTERLEAVED)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain plan: --virtual-stages %d needs --schedule interleaved",
                                    fx.V));
    if (fx.V > 1 && fx.sched < 0)
        fx.sched = MT_SCHED_INTERLEAVED;
    MtPlanResult r;
    if ((s = mt_plan_search(&m, &cl, devices, &fx, a.all ? 0 : a.top, &r)) != MT_OK)
        return mt_cli_fail(mt_error_prefix(s, "meshtrain plan"));
    if (r.fits == 0 && !a.all) {
        const MtPlanEntry *best = NULL; /* the smallest memory reached, or the first refusal */
        for (int i = 0; i < r.n && !best; i++)
            if (r.e[i].verdict == MT_PLAN_OOM)
                best = &r.e[i];
        char lay[64], sch[32];
        if (best) {
            layout_str(&best->l, lay, sizeof lay);
            sched_str(&best->l, sch, sizeof sch);
            mt_error(MT_EINPUT, "meshtrain plan: no layout of %d devices fits in %.2f GB per device: the smallest "
                     "peak is %.2f GB (%s, micro-batch %d, %s, recompute %s)", devices, cl.mem_bytes / 1e9,
                     best->mem.peak / 1e9, lay, best->l.micro, sch, recompute_names[best->l.recompute]);
        } else
            mt_error(MT_EINPUT, "meshtrain plan: the engine refuses every layout of %d devices: %s", devices,
                     r.e[0].why);
        mt_plan_result_free(&r);
        return mt_cli_fail(MT_EINPUT);
    }
    int shown = a.all ? r.n : (a.top < r.fits ? a.top : r.fits);
    if (a.json) {
        for (int i = 0; i < shown; i++)
            print_json(&m, &cl, &r.e[i], a.data);
    } else {
        printf("meshtrain plan: %d layers, %d heads, width %d, seq %d, vocab %d, batch %d; %d devices of %s "
               "(%d per node), %s, %s attention\n", a.layers, a.heads, a.dim, a.seq_len, a.vocab, a.batch, devices,
               cl.name, cl.devices_per_node, mt_prec_name(m.prec), a.attention);
        printf("  #  layout                   mb  schedule       recomp     step s     tokens/s  TFLOP/s   MFU  "
               "peak GB\n");
        for (int i = 0; i < shown; i++)
            print_row(&m, &cl, i + 1, &r.e[i]);
        printf("train commands:\n");
        for (int i = 0; i < shown && i < r.fits; i++) {
            char cmd[1024];
            mt_plan_train_flags(&m, &r.e[i].l, a.data, cmd, sizeof cmd);
            printf("  #%d  %s\n", i + 1, cmd);
        }
        printf("considered %d layouts in %.2f s: %d fit, %d out of memory, %d do not divide, %d refused by the "
               "engine\n", r.n, r.seconds, r.counts[MT_PLAN_OK], r.counts[MT_PLAN_OOM], r.counts[MT_PLAN_NODIV],
               r.counts[MT_PLAN_REFUSED]);
        if (a.explain && r.fits > 0)
            explain(&m, &cl, &r.e[0]);
    }
    if (a.svg && r.fits > 0 && (s = draw(&m, &cl, &r.e[0], a.svg)) != MT_OK) {
        mt_plan_result_free(&r);
        return mt_cli_fail(s);
    }
    mt_plan_result_free(&r);
    return 0;
#undef SET
}
