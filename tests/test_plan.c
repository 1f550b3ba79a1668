/* test_plan.c - the planner's pieces without MPI: cluster files (built-in and malformed),
 * the links a group spans, collectives on one node against across nodes, the pipeline's
 * extrapolated makespan against the full simulation, the bubble of uniform stages against
 * its closed form, a step never shorter than its compute, the bf16 bytes per parameter, a
 * full node's compute and streaming speeds,
 * and the search agreeing with the engine's rule book on every layout it lists. */
#include <stdlib.h>
#include <string.h>

#include "mt_planner.h"
#include "mt_test.h"

static MtCluster a100(void)
{
    MtCluster cl;
    MtStatus s = mt_cluster_load("a100-80g", &cl);
    CHECK(s == MT_OK, "the built-in a100-80g loads: %s", mt_error_msg());
    return cl;
}

static void test_cluster_files(void)
{
    MtCluster cl = a100();
    CHECK(cl.devices_per_node == 8 && cl.peak[MT_PREC_BF16] == 312e12 && cl.intra.bw > cl.inter.bw,
          "a100-80g: %d per node, %g FLOP/s", cl.devices_per_node, cl.peak[MT_PREC_BF16]);
    MtCluster h;
    CHECK(mt_cluster_load("h100-80g", &h) == MT_OK && h.peak[MT_PREC_BF16] > cl.peak[MT_PREC_BF16], "h100-80g");
    CHECK(mt_cluster_load("tpu-v9", &h) == MT_EINPUT && strstr(mt_error_msg(), "a100-80g"),
          "an unknown name lists the built-in ones: %s", mt_error_msg());
    const char *text = mt_cluster_builtin_text("a100-80g");
    /* a field removed, made negative, mistyped: one line naming the field */
    struct {
        const char *from, *to, *field;
    } bad[] = {{"\"devices_per_node\": 8", "\"nodes_per_device\": 8", "devices_per_node"},
               {"\"memory_bw_gbs\": 2039.0", "\"memory_bw_gbs\": -2039.0", "memory_bw_gbs"},
               {"\"latency_us\": 10.0", "\"latency_us\": \"ten\"", "inter_node.latency_us"},
               {"\"gemm_max\": ", "\"gemm_max\": 1", "efficiency.gemm_max"},
               {"\"bf16\": 312.0", "\"bf16\": 0", "peak_tflops.bf16"}};
    for (int i = 0; i < 5; i++) {
        const char *at = strstr(text, bad[i].from);
        CHECK(at != NULL, "%s is in the file", bad[i].from);
        if (!at)
            continue;
        char buf[8192];
        size_t pre = (size_t)(at - text);
        snprintf(buf, sizeof buf, "%.*s%s%s", (int)pre, text, bad[i].to, at + strlen(bad[i].from));
        MtStatus s = mt_cluster_parse(buf, strlen(buf), "my.json", &h);
        CHECK(s == MT_EINPUT && strstr(mt_error_msg(), "my.json") && strstr(mt_error_msg(), bad[i].field) &&
                  !strchr(mt_error_msg(), '\n'),
              "%s -> %s: %s", bad[i].from, bad[i].to, mt_error_msg());
    }
    CHECK(mt_cluster_parse("[1]", 3, "x.json", &h) == MT_EINPUT, "not an object");
    CHECK(mt_cluster_parse("{", 1, "x.json", &h) == MT_EINPUT && strstr(mt_error_msg(), "x.json"), "bad JSON");
}

static void test_links(void)
{
    MtCluster cl = a100();
    int per;
    MtLink l = mt_cost_group_link(&cl, 8, 1, &per); /* tp 8: one node */
    CHECK(l.bw == cl.intra.bw && per == 8, "tp 8 stays in a node");
    l = mt_cost_group_link(&cl, 32, 8, &per); /* dp 32 over tp 8: one member per node */
    CHECK(l.bw == cl.inter.bw && per == 1, "dp 32 x tp 8 crosses nodes, one per node (%d)", per);
    l = mt_cost_group_link(&cl, 4, 2, &per); /* dp 4 over tp 2: 8 ranks, one node */
    CHECK(l.bw == cl.intra.bw, "dp 4 x tp 2 fits a node");
    l = mt_cost_group_link(&cl, 8, 2, &per); /* dp 8 over tp 2: 16 ranks, 4 per node */
    CHECK(l.bw == cl.inter.bw && per == 4, "dp 8 x tp 2: 4 per node (%d)", per);
    double b = 1e9;
    double in = mt_cost_coll(&cl, cl.intra, MT_COLL_ALLREDUCE, 8, b), out = mt_cost_coll(&cl, cl.inter, MT_COLL_ALLREDUCE, 8, b);
    CHECK(in < out && in > 0, "an all-reduce on one node (%g s) is faster than across nodes (%g s)", in, out);
    CHECK_CLOSE(mt_cost_coll(&cl, cl.inter, MT_COLL_ALLREDUCE, 8, b),
                2 * mt_cost_coll(&cl, cl.inter, MT_COLL_REDUCE_SCATTER, 8, b), 1e-12, 0, "all-reduce = 2 reduce-scatters");
    CHECK(mt_cost_coll(&cl, cl.inter, MT_COLL_ALLREDUCE, 1, b) == 0, "a group of one sends nothing");
    CHECK(mt_cost_coll(&cl, cl.intra, MT_COLL_ALLREDUCE, 8, 2 * b) > mt_cost_coll(&cl, cl.intra, MT_COLL_ALLREDUCE, 8, b),
          "more bytes take longer");
}

/* the extrapolated makespan equals the full simulation's */
static void test_extrapolation(void)
{
    srand(7);
    int kinds[] = {MT_SCHED_GPIPE, MT_SCHED_1F1B, MT_SCHED_INTERLEAVED, MT_SCHED_ZB, MT_SCHED_ZB2};
    double worst = 0;
    for (int k = 0; k < 5; k++)
        for (int P = 2; P <= 8; P *= 2)
            for (int V = 1; V <= (kinds[k] == MT_SCHED_INTERLEAVED ? 2 : 1); V++)
                for (int mult = 9; mult <= 21; mult += 4) {
                    MtSchedule s = {kinds[k], P, mult * P, kinds[k] == MT_SCHED_INTERLEAVED ? 2 : 1};
                    int S = P * s.V;
                    double *stage = malloc(sizeof(double) * 3 * S);
                    for (int i = 0; i < 3 * S; i++) /* uneven stages: the first and last heavier */
                        stage[i] = 1.0 + 0.5 * rand() / RAND_MAX + (i / 3 == 0 || i / 3 == S - 1 ? 0.7 : 0.0);
                    double ex, busy, full, fbusy;
                    CHECK(mt_cost_pipeline(&s, stage, &ex, &busy) == MT_OK, "extrapolated");
                    /* the full simulation: M below the extrapolation's threshold is simulated whole,
                     * so compare with a run of the simulator itself */
                    MtAction *lists[MT_MAX_STAGES];
                    int n[MT_MAX_STAGES];
                    for (int r = 0; r < P; r++) {
                        lists[r] = malloc(sizeof(MtAction) * mt_schedule_max_actions(&s));
                        n[r] = mt_schedule_build(&s, r, lists[r]);
                    }
                    MtSimResult res;
                    CHECK(mt_simulate(&s, lists, n, (MtSimCosts){0, 0, 0, stage, NULL}, &res) == MT_OK, "simulated");
                    full = res.makespan;
                    fbusy = 0;
                    for (int r = 0; r < P; r++)
                        fbusy = res.busy[r] > fbusy ? res.busy[r] : fbusy;
                    double err = fabs(ex - full) / full;
                    worst = err > worst ? err : worst;
                    CHECK(err < 1e-2, "%s P %d M %d V %d: extrapolated %.9g, simulated %.9g", mt_schedule_name(s.kind),
                          P, s.M, s.V, ex, full);
                    CHECK_CLOSE(busy, fbusy, 1e-9, 0, "the busiest rank's time");
                    mt_sim_free(&res);
                    for (int r = 0; r < P; r++)
                        free(lists[r]);
                    free(stage);
                }
    printf("pipeline extrapolation: worst relative error %.3g against the full simulation\n", worst);
}

/* uniform stages: the bubble is the schedule's closed form */
static void test_uniform_bubble(void)
{
    for (int P = 2; P <= 8; P *= 2)
        for (int M = P; M <= 8 * P; M += P) {
            MtSchedule s = {MT_SCHED_1F1B, P, M, 1};
            double stage[3 * 8];
            for (int v = 0; v < P; v++)
                stage[3 * v] = 1.0, stage[3 * v + 1] = 2.0, stage[3 * v + 2] = 0.0;
            double span, busy;
            CHECK(mt_cost_pipeline(&s, stage, &span, &busy) == MT_OK, "1f1b");
            CHECK_CLOSE(1.0 - busy / span, (P - 1.0) / (M + P - 1.0), 1e-9, 1e-12, "1f1b bubble (P-1)/(M+P-1)");
        }
}

/* Post-validation's overlapped steps: the saving never makes a step shorter than its
 * busiest rank's compute and is never negative */
static void test_overlap(void)
{
    int runs = 0;
    for (int k = MT_SCHED_GPIPE; k < MT_NSCHED; k++)
        for (int P = 2; P <= 8; P *= 2)
            for (int M = P; M <= 4 * P; M += P) {
                int V = k == MT_SCHED_INTERLEAVED ? 2 : 1, S = P * V;
                MtSchedule s = {k, P, M, V, 1};
                double stage[3 * 16], span, busy, saving, work = 0;
                for (int v = 0; v < S; v++) {
                    stage[3 * v] = 1.0 + 0.25 * (v % 3), stage[3 * v + 1] = 2.0, stage[3 * v + 2] = 1.0;
                    if (!mt_schedule_split(k))
                        stage[3 * v + 1] += stage[3 * v + 2], stage[3 * v + 2] = 0.0;
                }
                for (int r = 0; r < P; r++) {
                    double w = 0;
                    for (int c = 0; c < V; c++)
                        w += stage[3 * (c * P + r)] + stage[3 * (c * P + r) + 1] + stage[3 * (c * P + r) + 2];
                    work = w > work ? w : work;
                }
                CHECK(mt_cost_pipeline(&s, stage, &span, &busy) == MT_OK &&
                      mt_cost_pipeline_overlap(&s, stage, &saving) == MT_OK, "%s P%d M%d", mt_schedule_name(k), P, M);
                CHECK(saving >= -1e-9 && span - saving >= M * work - 1e-9, "%s P%d M%d: saving %g of %g (work %g)",
                      mt_schedule_name(k), P, M, saving, span, M * work);
                runs++;
            }
    /* F = B = W = 1: one step of zb or zb2 takes 3M + P - 1; overlapped, zb2 (M >= 2P, its
     * 2P sets) runs at 3M, the bubble gone, while zb (ZB-H1) keeps it: its first stage waits
     * inside the step, for its first backward */
    for (int P = 2; P <= 8; P *= 2)
        for (int M = 2 * P; M <= 4 * P; M += P)
            for (int k = MT_SCHED_ZB; k <= MT_SCHED_ZB2; k++) {
                MtSchedule s = {k, P, M, 1, 1};
                double stage[3 * 8], span, busy, saving;
                for (int v = 0; v < 3 * P; v++)
                    stage[v] = 1.0;
                CHECK(mt_cost_pipeline(&s, stage, &span, &busy) == MT_OK &&
                      mt_cost_pipeline_overlap(&s, stage, &saving) == MT_OK, "%s", mt_schedule_name(k));
                CHECK(fabs(span - (3.0 * M + P - 1)) < 1e-9, "%s P%d M%d: one step %g", mt_schedule_name(k), P, M, span);
                double want = k == MT_SCHED_ZB2 ? 3.0 * M : 3.0 * M + P - 1;
                CHECK(fabs(span - saving - want) < 1e-9, "%s P%d M%d: a step overlapped %g, want %g", mt_schedule_name(k),
                      P, M, span - saving, want);
            }
    CHECK(runs >= 40, "%d overlapped schedules", runs);
}

static MtPlanModel model(int L, int NH, int C, int T, int V, int batch, int prec)
{
    return (MtPlanModel){.cfg = {.V = V, .T = T, .L = L, .NH = NH, .C = C}, .batch = batch, .seq = T, .prec = prec,
                         .attn_fused = 1};
}

/* every fitting layout: the terms add up, nothing hides compute, and the bf16 arrays hold
 * 18 bytes per parameter without sharding */
static void test_search(void)
{
    MtCluster cl = a100();
    MtPlanModel m = model(8, 16, 1024, 1024, 50257, 64, MT_PREC_BF16);
    MtPlanFixed fx = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    MtPlanResult r;
    CHECK(mt_plan_search(&m, &cl, 16, &fx, 0, &r) == MT_OK && r.fits > 100, "search: %d fit", r.fits);
    int bad = 0;
    for (int i = 0; i < r.n; i++) {
        const MtPlanEntry *e = &r.e[i];
        if (e->verdict != MT_PLAN_OK)
            continue;
        const MtStepTime *t = &e->time;
        double sum = t->compute + t->recompute + t->bubble + t->tp + t->dp + t->pp + t->optimizer;
        bad += !(t->step >= t->compute + t->recompute) || fabs(sum - t->step) > 1e-9 * t->step || t->dp < 0 ||
               t->bubble < 0;
        if (i > 0 && r.e[i - 1].verdict == MT_PLAN_OK)
            bad += r.e[i - 1].time.step > t->step; /* fastest first */
    }
    CHECK(bad == 0, "%d layouts whose terms do not add up, hide compute or are out of order", bad);
    /* the rule book: every layout listed is the engine's verdict, and the search's first is
     * a layout the engine runs */
    for (int i = 0; i < r.n && i < 2000; i++) {
        MtPlanEntry again;
        mt_plan_one(&m, &cl, &r.e[i].l, -1, INFINITY, &again);
        CHECK(again.verdict == r.e[i].verdict, "layout %d evaluated twice agrees", i);
    }
    mt_plan_result_free(&r);
    /* one device: 2 (bf16) + 4 (master) params, 8 moments, at least 4 for gradients */
    MtPlanLayout one = {.dp = 1, .tp = 1, .pp = 1, .sched = MT_SCHED_1F1B, .V = 1, .micro = 1};
    MtPlanEntry e;
    mt_plan_one(&m, &cl, &one, -1, INFINITY, &e);
    double N = 12.0 * 8 * 1024 * 1024 + 13.0 * 8 * 1024 + 50257.0 * 1024 + 1024.0 * 1024 + 2 * 1024;
    CHECK(e.verdict == MT_PLAN_OK, "one device fits: %s", e.why);
    CHECK_CLOSE(e.mem.bytes[MT_PMEM_PARAMS], 6 * N, 1e-3, 0, "bf16 parameters: 6 bytes each");
    CHECK_CLOSE(e.mem.bytes[MT_PMEM_OPTIM], 8 * N, 1e-3, 0, "moments: 8 bytes each");
    CHECK(e.mem.bytes[MT_PMEM_GRADS] >= 4 * N * 0.999, "gradients: at least 4 bytes each");
    /* ZeRO-1 over 8 shards the moments and the masters */
    MtPlanLayout z1 = {.dp = 8, .tp = 1, .pp = 1, .zero = 1, .sched = MT_SCHED_1F1B, .V = 1, .micro = 1};
    MtPlanEntry ez;
    mt_plan_one(&m, &cl, &z1, -1, INFINITY, &ez);
    CHECK(ez.verdict == MT_PLAN_OK && ez.mem.bytes[MT_PMEM_OPTIM] < e.mem.bytes[MT_PMEM_OPTIM] / 7,
          "ZeRO-1 over 8: moments %g of %g", ez.mem.bytes[MT_PMEM_OPTIM], e.mem.bytes[MT_PMEM_OPTIM]);
    /* full recomputation holds less than none, and costs time */
    MtPlanLayout rc = one;
    rc.recompute = MT_RECOMPUTE_FULL;
    MtPlanEntry er;
    mt_plan_one(&m, &cl, &rc, -1, INFINITY, &er);
    CHECK(er.mem.bytes[MT_PMEM_ACTS] < e.mem.bytes[MT_PMEM_ACTS] && er.time.recompute > 0 &&
              er.time.step > e.time.step, "full recomputation: %g vs %g bytes", er.mem.bytes[MT_PMEM_ACTS],
          e.mem.bytes[MT_PMEM_ACTS]);
    /* post-validation in bf16 keeps the pending update's gradient, 4 bytes a parameter (the
     * update goes to the bf16 copy, the master waits for the check), counted as optimizer
     * state; its steps overlap, zb2's bubble mostly gone; its optimizer makes two passes */
    MtPlanModel um = m;
    um.cfg.untied = 1;
    um.batch = 64;
    MtPlanLayout p0 = {.dp = 1, .tp = 1, .pp = 4, .sched = MT_SCHED_ZB2, .V = 1, .micro = 1}, p1 = p0;
    p1.post_validate = 1;
    MtPlanEntry e0, e1;
    mt_plan_one(&um, &cl, &p0, -1, INFINITY, &e0);
    mt_plan_one(&um, &cl, &p1, -1, INFINITY, &e1);
    CHECK(e0.verdict == MT_PLAN_OK && e1.verdict == MT_PLAN_OK && e0.mem.rank == e1.mem.rank, "pp 4 zb2 untied: %s %s",
          e0.why, e1.why);
    CHECK_CLOSE(e1.mem.bytes[MT_PMEM_OPTIM] - e0.mem.bytes[MT_PMEM_OPTIM], e0.mem.bytes[MT_PMEM_PARAMS] * 4.0 / 6.0,
                1e-9, 0, "post-validation's kept gradient: 4 bytes a parameter");
    CHECK(e1.mem.bytes[MT_PMEM_PARAMS] == e0.mem.bytes[MT_PMEM_PARAMS], "the parameters as without");
    CHECK(e1.time.bubble < 0.5 * e0.time.bubble && e1.time.step < e0.time.step && e1.time.optimizer > e0.time.optimizer,
          "post-validated zb2: bubble %g vs %g s, step %g vs %g s", e1.time.bubble, e0.time.bubble, e1.time.step,
          e0.time.step);
    /* the search tries both where the model is untied, neither where tied */
    MtPlanFixed pf = {-1, -1, 4, 0, -1, MT_SCHED_ZB2, -1, 1, 0, -1, -1, NULL, 0, -1};
    MtPlanResult pr;
    int with = 0, without = 0;
    CHECK(mt_plan_search(&um, &cl, 4, &pf, 0, &pr) == MT_OK, "untied search");
    for (int i = 0; i < pr.n; i++)
        with += pr.e[i].l.post_validate, without += !pr.e[i].l.post_validate;
    CHECK(with == 1 && without == 1 && pr.e[0].l.post_validate, "untied pp 4 zb2: %d with, %d without, first %d", with,
          without, pr.e[0].l.post_validate);
    mt_plan_result_free(&pr);
    CHECK(mt_plan_search(&m, &cl, 4, &pf, 0, &pr) == MT_OK && pr.n == 1 && !pr.e[0].l.post_validate,
          "tied: %d layouts", pr.n);
    mt_plan_result_free(&pr);
    /* tp 8 across two nodes' worth of ranks is slower than inside one */
    MtPlanModel big = model(8, 16, 4096, 2048, 51200, 64, MT_PREC_BF16);
    MtPlanLayout tp8 = {.dp = 2, .tp = 8, .pp = 1, .sched = MT_SCHED_1F1B, .V = 1, .micro = 1};
    MtPlanLayout tp16 = {.dp = 1, .tp = 16, .pp = 1, .sched = MT_SCHED_1F1B, .V = 1, .micro = 1};
    MtPlanEntry a, b;
    mt_plan_one(&big, &cl, &tp8, -1, INFINITY, &a);
    mt_plan_one(&big, &cl, &tp16, -1, INFINITY, &b);
    CHECK(a.verdict == MT_PLAN_OK && b.verdict == MT_PLAN_OK && b.time.tp > 4 * a.time.tp,
          "tp 16 crosses nodes: exposed tp %g s against tp 8's %g s", b.time.tp, a.time.tp);
}

/* a full node: node_full_speed slows the products, node_full_memory_speed the streaming
 * work (the optimizer), each only where the layout fills the node */
static void test_node_full(void)
{
    MtCluster cl = a100();
    cl.devices_per_node = 2;
    MtPlanModel m = model(2, 4, 256, 256, 256, 8, MT_PREC_FP32);
    MtPlanLayout one = {.dp = 1, .tp = 1, .pp = 1, .sched = MT_SCHED_1F1B, .V = 1, .micro = 8};
    MtPlanLayout two = one;
    two.dp = 2, two.micro = 4;
    MtStepTime a1, a2, b1, b2, c2;
    CHECK(mt_plan_time(&m, &one, &cl, INFINITY, &a1) == MT_OK && mt_plan_time(&m, &two, &cl, INFINITY, &a2) == MT_OK,
          "the reference times");
    cl.node_full = 0.5;
    CHECK(mt_plan_time(&m, &one, &cl, INFINITY, &b1) == MT_OK && mt_plan_time(&m, &two, &cl, INFINITY, &b2) == MT_OK,
          "node_full_speed 0.5");
    CHECK(b1.step == a1.step, "one device of two does not fill the node: %g vs %g s", b1.step, a1.step);
    CHECK(b2.compute > 1.5 * a2.compute && b2.optimizer == a2.optimizer,
          "two of two at half compute speed: compute %g -> %g s, optimizer %g -> %g s", a2.compute, b2.compute,
          a2.optimizer, b2.optimizer);
    cl.node_full = 0, cl.node_full_mem = 0.5;
    CHECK(mt_plan_time(&m, &two, &cl, INFINITY, &c2) == MT_OK, "node_full_memory_speed 0.5");
    CHECK_CLOSE(c2.optimizer, 2 * a2.optimizer, 1e-12, 0, "the optimizer streams at half speed");
    CHECK(c2.compute > a2.compute && c2.compute < b2.compute,
          "only the element-wise part of compute slows: %g < %g < %g s", a2.compute, c2.compute, b2.compute);
}

int main(void)
{
    test_overlap();
    test_cluster_files();
    test_links();
    test_extrapolation();
    test_uniform_bubble();
    test_search();
    test_node_full();
    return mt_test_done("test_plan");
}
