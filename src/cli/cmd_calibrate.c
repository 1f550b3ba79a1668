/* cmd_calibrate.c - `meshtrain calibrate`: this machine measured as a planner cluster file
 * (docs/planner.md): matrix products over a grid of shapes (the peak and the efficiency
 * curve's half-dimension fitted to them), the fused attention kernel, memory bandwidth, and
 * the collectives between ranks through `meshtrain bench-comm`. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flags.h"
#include "mt_cli.h"
#include "mt_cost.h"
#include "mt_gemm.h"
#include "mt_kernels.h"

/* seconds of the fastest call of fn over 3 rounds of calls adding up to at least `floor`
 * seconds each: the call that nothing else on the machine slowed, as the planner predicts */
typedef void (*Work)(void *ctx);
static double best_time(Work fn, void *ctx, double floor)
{
    fn(ctx); /* warm: pages, packing buffers */
    double best = INFINITY;
    for (int round = 0; round < 3; round++) {
        double t0 = mt_now(), t = t0, dt;
        do {
            fn(ctx);
            double now = mt_now();
            best = fmin(best, now - t);
            t = now;
        } while ((dt = t - t0) < floor);
    }
    return best;
}

typedef struct {
    int m, n, k;
    float *a, *b, *c;
} Gemm;

static void run_gemm(void *p)
{
    Gemm *g = p;
    mt_gemm(0, 0, g->m, g->n, g->k, 1.0f, g->a, g->k, g->b, g->n, 0.0f, g->c, g->n, 0);
}

typedef struct {
    int B, T, C, NH, back;
    float *qkv, *out, *lse, *scratch, *dout, *dqkv;
} Attn;

static void run_attn(void *p)
{
    Attn *a = p;
    if (a->back)
        mt_attention_backward(a->dqkv, a->scratch, a->dout, a->out, a->qkv, a->lse, a->B, a->T, a->C, a->NH);
    else
        mt_attention_forward(a->out, a->lse, a->scratch, a->qkv, a->B, a->T, a->C, a->NH);
}

/* a transformer block's element-wise kernels, forward and backward, on N rows of C: two
 * LayerNorms, GELU over 4C, the residual adds, the bias gradients' column sums */
typedef struct {
    int N, C;
    float *x, *y, *dy, *dx, *h, *dh, *w, *b, *dw, *db, *mean, *rstd, *bias;
} Elem;

static void run_elem(void *p)
{
    Elem *e = p;
    int64_t nc = (int64_t)e->N * e->C;
    for (int i = 0; i < 2; i++) {
        mt_layernorm_forward(e->y, e->mean, e->rstd, e->x, e->w, e->b, e->N, e->C);
        mt_layernorm_backward(e->dx, e->dw, e->db, e->dy, e->x, e->w, e->mean, e->rstd, e->N, e->C, 0);
    }
    mt_gelu_forward(e->dh, e->h, 4 * nc);
    mt_gelu_backward(e->dh, e->h, e->dh, 4 * nc);
    for (int i = 0; i < 2; i++) { /* forward: y = x + branch; backward: dx += dy */
#pragma omp parallel for schedule(static)
        for (int64_t j = 0; j < nc; j++)
            e->y[j] = e->x[j] + e->dx[j];
#pragma omp parallel for schedule(static)
        for (int64_t j = 0; j < nc; j++)
            e->dx[j] += e->dy[j];
    }
    mt_colsum(e->bias, e->h, e->N, 4 * e->C, 0);
    mt_colsum(e->bias, e->dh, e->N, 4 * e->C, 0);
    mt_colsum(e->bias, e->dy, e->N, e->C, 0);
}

static float *fill(int64_t n);

static Elem *elem_new(int N, int C)
{
    Elem *e = malloc(sizeof *e);
    MT_ASSERT(e, "out of memory");
    int64_t nc = (int64_t)N * C;
    *e = (Elem){.N = N, .C = C, .x = fill(nc), .y = fill(nc), .dy = fill(nc), .dx = fill(nc), .h = fill(4 * nc),
                .dh = fill(4 * nc), .w = fill(C), .b = fill(C), .dw = fill(C), .db = fill(C), .mean = fill(N),
                .rstd = fill(N), .bias = fill(4 * C)};
    return e;
}

static void elem_free(Elem *e)
{
    float *f[] = {e->x, e->y, e->dy, e->dx, e->h, e->dh, e->w, e->b, e->dw, e->db, e->mean, e->rstd, e->bias};
    for (int i = 0; i < 13; i++)
        free(f[i]);
    free(e);
}

typedef struct {
    float *src, *dst;
    int64_t n;
} Copy;

static void run_copy(void *p)
{
    Copy *c = p;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < c->n; i += 4096) {
        int64_t len = c->n - i < 4096 ? c->n - i : 4096;
        for (int64_t j = 0; j < len; j++)
            c->dst[i + j] = c->src[i + j] * 1.0001f;
    }
}

static float *fill(int64_t n)
{
    float *x = malloc(sizeof(float) * (size_t)n);
    MT_ASSERT(x, "out of memory");
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return x;
}

/* the collectives between `ranks` local ranks: latency (the smallest all-reduce's time per
 * step, from the smallest size whose rate printed above 0.00) and bandwidth (the best bus
 * bandwidth at 1 MiB and above), from bench-comm's table */
static int comm_figures(const char *self, int ranks, double *lat, double *bw)
{
    char cmd[4600];
    snprintf(cmd, sizeof cmd, "'%s' bench-comm --ranks %d --min-kib 1 --max-mib 8 --reps 3 2>/dev/null", self, ranks);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char line[512];
    double best = 0, small = 0;
    while (fgets(line, sizeof line, p)) {
        double size, val;
        char unit[8], op[32];
        if (sscanf(line, "| %lf %7s | %31s | %lf |", &size, unit, op, &val) != 4 || strcmp(op, "allreduce") != 0)
            continue;
        double bytes = size * (strcmp(unit, "MiB") == 0 ? 1048576.0 : 1024.0);
        if (small <= 0 && val > 0) /* the smallest size that printed a rate: busbw = bytes 2 (N-1) / N / time */
            small = bytes * 2.0 * (ranks - 1) / ranks / (val * 1e9) / (2.0 * (ranks - 1));
        if (bytes >= 1048576.0 && val > best)
            best = val;
    }
    int rc = pclose(p);
    if (rc != 0 || best <= 0 || small <= 0)
        return -1;
    *lat = small;
    *bw = best * 1e9;
    return 0;
}

/* A node full of devices: each of its dpn devices (one thread each) running its own
 * products at once (shared caches, memory and clocks) against one alone, and the same for a
 * block's element-wise kernels (the streaming work, which shares the memory's bandwidth and
 * the last cache); best of 6 rounds, alone and together interleaved: the speeds, at most 1 */
static void node_full(int dpn, double *busy, double *busy_mem)
{
    int n = 1024;
    float *bufs[64][3];
    Elem *els[64];
    dpn = dpn < 64 ? dpn : 64;
    for (int d = 0; d < dpn; d++) {
        for (int k = 0; k < 3; k++)
            bufs[d][k] = fill((int64_t)n * n);
        els[d] = elem_new(2048, 256);
    }
    double alone = INFINITY, together = INFINITY, ealone = INFINITY, etogether = INFINITY;
    run_elem(els[0]); /* warm */
    for (int round = 0; round < 6; round++) {
        double t1 = mt_now();
        for (int r = 0; r < 3; r++)
            mt_gemm(0, 0, n, n, n, 1.0f, bufs[0][0], n, bufs[0][1], n, 0.0f, bufs[0][2], n, 1);
        alone = fmin(alone, mt_now() - t1);
        t1 = mt_now();
#pragma omp parallel for num_threads(dpn) schedule(static, 1)
        for (int d = 0; d < dpn; d++)
            for (int r = 0; r < 3; r++)
                mt_gemm(0, 0, n, n, n, 1.0f, bufs[d][0], n, bufs[d][1], n, 0.0f, bufs[d][2], n, 1);
        together = fmin(together, mt_now() - t1);
        t1 = mt_now();
        for (int r = 0; r < 3; r++)
            run_elem(els[0]);
        ealone = fmin(ealone, mt_now() - t1);
        t1 = mt_now();
#pragma omp parallel for num_threads(dpn) schedule(static, 1)
        for (int d = 0; d < dpn; d++)
            for (int r = 0; r < 3; r++)
                run_elem(els[d]); /* the kernels' own parallel loops run on this one thread (nested) */
        etogether = fmin(etogether, mt_now() - t1);
    }
    *busy = fmin(alone / together, 1.0);
    *busy_mem = fmin(ealone / etogether, 1.0);
    for (int d = 0; d < dpn; d++) {
        for (int k = 0; k < 3; k++)
            free(bufs[d][k]);
        elem_free(els[d]);
    }
}

/* the fastest of 4 steps of `meshtrain bench`'s model on this many threads, in seconds (0:
 * failed): the planner predicts a step that nothing else on the machine slows (a shared
 * machine's median step moves by 5-10% from minute to minute, its fastest step less) */
static double reference_step(const char *self, int threads, const char *model)
{
    char cmd[4800];
    snprintf(cmd, sizeof cmd, "'%s' bench %s --threads %d --steps 4 --warmup 1 2>/dev/null", self, model, threads);
    FILE *p = popen(cmd, "r");
    if (!p)
        return 0;
    char line[1024];
    double ms = 0;
    while (fgets(line, sizeof line, p)) {
        const char *at = strstr(line, "\"min_ms_per_step\": ");
        if (at)
            ms = atof(at + strlen("\"min_ms_per_step\": "));
    }
    return pclose(p) == 0 ? ms / 1e3 : 0;
}

/* the block's products of a model as the CPU kernels call them, for micro-batches of mb
 * sequences on a tp rank: forward (0 0 N OC C), the input's gradient (0 1 N C OC), the
 * weight's (1 0 C OC N), for qkv, the projection, fc and fc's projection */
static int block_shapes(int C, int T, int mb, int tp, int (*sh)[5])
{
    int N = mb * T, in[4] = {C, C / tp, C, 4 * C / tp}, outd[4] = {3 * C / tp, C, 4 * C / tp, C}, n = 0;
    for (int i = 0; i < 4; i++) {
        int e[3][5] = {{0, 0, N, outd[i], in[i]}, {0, 1, N, in[i], outd[i]}, {1, 0, in[i], outd[i], N}};
        for (int k = 0; k < 3; k++)
            memcpy(sh[n++], e[k], sizeof e[k]);
    }
    return n;
}

typedef struct {
    int ta, tb, m, n, k;
    float *a, *b, *c;
} GemmT;

static void run_gemm_t(void *p)
{
    GemmT *g = p; /* A is m x k (k x m stored when ta), B k x n (n x k stored when tb), row-major */
    mt_gemm(g->ta, g->tb, g->m, g->n, g->k, 1.0f, g->a, g->ta ? g->m : g->k, g->b, g->tb ? g->k : g->n, 0.0f, g->c,
            g->n, 0);
}

const char *mt_cli_calibrate_now(int threads)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/meshtrain-calibration-%d.json", (int)getpid());
    char self[4096], cmd[4400];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        return mt_error(MT_EIO, "cannot find this program's binary to calibrate"), NULL;
    self[len] = 0;
    snprintf(cmd, sizeof cmd, "'%s' calibrate --out '%s' --threads %d >&2", self, path, threads);
    if (system(cmd) != 0) {
        unlink(path);
        return mt_error(MT_EIO, "meshtrain calibrate --threads %d failed", threads), NULL;
    }
    return path;
}

int mt_cmd_calibrate(int argc, char **argv)
{
    const char *out = NULL;
    int threads = 1, ranks = 0, layers = 0, heads = 0, dim = 0, seq = 0, vocab = 256, batch = 0;
    Flag flags[] = {
        {"out", FLAG_STR, &out, "the cluster file to write (JSON, docs/planner.md)", "FILE", FLAG_REQUIRED},
        {"threads", FLAG_INT, &threads, "threads of one rank: what a device of this cluster is"},
        {"ranks", FLAG_INT, &ranks, "ranks for the collectives' measurement (0: this machine's cores / threads, "
         "at least 2)"},
        {"layers", FLAG_INT, &layers, "a model to measure at (with --heads --dim --seq-len --batch-size): its block's "
         "products for every micro-batch size up to 16 dividing the batch and tp 1 and 2, and its step for the "
         "element-wise rate (0: meshtrain bench's default model, products on a grid)"},
        {"heads", FLAG_INT, &heads, "the model's heads"},
        {"dim", FLAG_INT, &dim, "the model's width"},
        {"seq-len", FLAG_INT, &seq, "the model's tokens per sequence"},
        {"vocab", FLAG_INT, &vocab, "the model's vocabulary"},
        {"batch-size", FLAG_INT, &batch, "the model's sequences per step"},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]), done;
    int rc = mt_cli_parse(flags, nflags, argc, argv, "calibrate",
                          "Measure this machine as a planner cluster file (meshtrain plan --cluster FILE): matrix\n"
                          "products, the attention kernel, memory bandwidth, the collectives between ranks.", &done);
    if (done)
        return rc;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (!out)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain calibrate: --out FILE is required"));
    if (threads < 1 || threads > cores)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain calibrate: --threads %d must be between 1 and the %ld cores",
                                    threads, cores));
    if (ranks == 0)
        ranks = cores / threads > 2 ? (int)(cores / threads) : 2;
    int model = layers > 0;
    if (model && (heads < 1 || dim < 1 || dim % heads || seq < 1 || batch < 1 || vocab < 2 || dim > 8192 ||
                  (int64_t)batch * seq > (1 << 20)))
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain calibrate: --layers needs --heads dividing --dim, --seq-len "
                                    "and --batch-size (at most 8192 wide, 2^20 tokens a step)"));
    if (ranks < 2 || ranks > 64)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain calibrate: --ranks %d must be between 2 and 64", ranks));
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", out);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    if (access(slash ? (dir[0] ? dir : "/") : ".", W_OK) != 0)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain calibrate: --out %s: its directory is not writable", out));
    mt_cli_setup_threads(threads, "calibrate");
    double t0 = mt_now();
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        return mt_cli_fail(mt_error(MT_EIO, "meshtrain calibrate: cannot find its own binary"));
    self[len] = 0;
    char mflags[256] = "";
    if (model)
        snprintf(mflags, sizeof mflags, "--layers %d --heads %d --dim %d --seq-len %d --vocab %d --batch-size %d",
                 layers, heads, dim, seq, vocab, batch);
    /* 0. the model's step (3c), a first time: it runs again at the end, and the faster counts */
    double step = reference_step(self, threads, mflags);
    /* 1. matrix products over a grid of shapes: rate = peak x g(m) g(n) g(k) */
    int dims[] = {64, 256, 1024, 2048}; /* the sizes training products have */
    double rates[64], shp[64][3];
    int ns = 0;
    Gemm g = {0};
    g.a = fill(2048 * 2048), g.b = fill(2048 * 2048), g.c = fill(2048 * 2048);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 4; k++) {
                if ((i + j + k) % 2) /* half the grid: every dimension at every size still */
                    continue;
                g.m = dims[i], g.n = dims[j], g.k = dims[k];
                double sec = best_time(run_gemm, &g, 0.04);
                shp[ns][0] = g.m, shp[ns][1] = g.n, shp[ns][2] = g.k;
                rates[ns++] = 2.0 * g.m * g.n * g.k / sec;
            }
    double best_h = 1, best_peak = 0, best_err = INFINITY;
    for (double h = 1; h <= 1024; h *= 1.05) {
        double lsum = 0;
        for (int i = 0; i < ns; i++) {
            double eff = 1;
            for (int d = 0; d < 3; d++)
                eff *= shp[i][d] / (shp[i][d] + h);
            lsum += log(rates[i] / eff);
        }
        double peak = exp(lsum / ns), err = 0;
        for (int i = 0; i < ns; i++) {
            double eff = 1;
            for (int d = 0; d < 3; d++)
                eff *= shp[i][d] / (shp[i][d] + h);
            double e = log(rates[i] / (peak * eff));
            err += e * e;
        }
        if (err < best_err)
            best_err = err, best_h = h, best_peak = peak;
    }
    free(g.a), free(g.b), free(g.c);
    /* 1b. the model's own products, measured (the planner takes them instead of the curve) */
    static int table[512][5];
    static double trate[512];
    int nt = 0;
    if (model) {
        for (int mb = 1; mb <= 16 && mb <= batch; mb++)
            for (int tp = 1; tp <= 2; tp++) {
                if (batch % mb || heads % tp || (4 * dim) % tp)
                    continue;
                int sh[12][5], n = block_shapes(dim, seq, mb, tp, sh);
                for (int i = 0; i < n && nt < 512; i++) {
                    int seen = 0;
                    for (int j = 0; j < nt && !seen; j++)
                        seen = memcmp(table[j], sh[i], sizeof sh[i]) == 0;
                    if (!seen)
                        memcpy(table[nt++], sh[i], sizeof sh[i]);
                }
            }
        int64_t most = 0;
        for (int i = 0; i < nt; i++) {
            int64_t mk = (int64_t)table[i][2] * table[i][4], kn = (int64_t)table[i][4] * table[i][3];
            int64_t mn = (int64_t)table[i][2] * table[i][3];
            most = mk > most ? mk : kn > most ? kn : mn > most ? mn : most;
        }
        GemmT gt = {0};
        gt.a = fill(most), gt.b = fill(most), gt.c = fill(most);
        /* two sweeps over the shapes, a few seconds apart, each shape's faster kept: a
         * neighbour's burst on a shared machine spans consecutive shapes, seldom both sweeps
         * (one sweep of 0.03 s a shape once read 1024-row products 30% slow) */
        for (int sweep = 0; sweep < 2; sweep++)
            for (int i = 0; i < nt; i++) {
                gt.ta = table[i][0], gt.tb = table[i][1], gt.m = table[i][2], gt.n = table[i][3], gt.k = table[i][4];
                double r = 2.0 * gt.m * gt.n * gt.k / best_time(run_gemm_t, &gt, 0.015);
                trate[i] = sweep == 0 || r > trate[i] ? r : trate[i];
            }
        free(gt.a), free(gt.b), free(gt.c);
    }
    /* 1c. a node full of devices (node_full below): measured here and again at the end,
     * the higher speed of the two kept (a neighbour's burst on a shared machine lasts
     * seconds: it once read 54% here and 95% half a minute later) */
    int dpn = cores / threads > 0 ? (int)(cores / threads) : 1;
    double busy = 1.0, busy_mem = 1.0;
    if (dpn > 1 && threads == 1)
        node_full(dpn, &busy, &busy_mem);
    /* 2. the fused attention kernel, its causal FLOPs against that peak (T 256, head size 64) */
    Attn at = {.B = 4, .T = 256, .C = 512, .NH = 8};
    int64_t nq = (int64_t)at.B * at.T * 3 * at.C, no = (int64_t)at.B * at.T * at.C;
    at.qkv = fill(nq), at.dqkv = fill(nq), at.out = fill(no), at.dout = fill(no), at.lse = fill(at.B * at.NH * at.T);
    at.scratch = fill(mt_attention_scratch_floats(at.T, at.C / at.NH) * threads);
    double flops = 4.0 * at.B * at.NH * (double)at.T * at.T * (at.C / at.NH) * 0.5;
    double fwd = best_time(run_attn, &at, 0.05);
    at.back = 1;
    double bwd = best_time(run_attn, &at, 0.05);
    double eff_f = flops / fwd / best_peak, eff_b = 2.5 * flops / bwd / best_peak;
    free(at.qkv), free(at.dqkv), free(at.out), free(at.dout);
    free(at.lse), free(at.scratch);
    /* 3. memory: a streaming copy of 64 MiB with the rank's threads */
    Copy cp = {.n = 16 << 20};
    cp.src = fill(cp.n), cp.dst = fill(cp.n);
    double bw = 2.0 * 4.0 * cp.n / best_time(run_copy, &cp, 0.1);
    free(cp.src), free(cp.dst);
    /* 3b. the element-wise kernels of a block, as the bytes the time model counts for them
     * (docs/planner.md: 72 N C bytes forward in fp32, twice that backward) over their time */
    Elem *el = elem_new(2048, 256);
    double ebw = 3.0 * 72.0 * el->N * el->C / best_time(run_elem, el, 0.1);
    elem_free(el);
    /* 3c. a whole step of the reference model (meshtrain bench's default: 4 layers, width 256,
     * 256 tokens, batch 8) with these threads: what the matrix products and attention do not
     * explain of it is the element-wise work's, at the time model's byte count; the kernels'
     * own rate (3b) where the step leaves nothing to explain; the step runs a second time
     * here, some 10-30 s after the first, and the faster of the two counts */
    double again = reference_step(self, threads, mflags), ebw_kernels = ebw;
    step = step > 0 && again > 0 ? fmin(step, again) : 0; /* the faster of the two times it ran */
    if (step > 0) {
        MtCluster cl = {.devices_per_node = 1, .peak = {best_peak, best_peak}, .mem_bytes = 1e12, .mem_bw = bw,
                        .mem_eff = 1.0, .gemm_max = 1.0, .gemm_half = best_h, .net_eff = 1.0,
                        .attn_fwd = fmin(eff_f, 1.0), .attn_bwd = fmin(eff_b, 1.0), .ew_bw = 1e9};
        for (int i = 0; i < nt; i++) {
            cl.gemm[i].ta = table[i][0], cl.gemm[i].tb = table[i][1], cl.gemm[i].m = table[i][2];
            cl.gemm[i].n = table[i][3], cl.gemm[i].k = table[i][4], cl.gemm[i].rate = trate[i];
        }
        cl.ngemm = nt;
        MtPlanModel m = {.cfg = {.V = 256, .T = 256, .L = 4, .NH = 4, .C = 256}, .batch = 8, .seq = 256,
                         .prec = MT_PREC_FP32, .attn_fused = 1};
        if (model)
            m = (MtPlanModel){.cfg = {.V = vocab, .T = seq, .L = layers, .NH = heads, .C = dim}, .batch = batch,
                              .seq = seq, .prec = MT_PREC_FP32, .attn_fused = 1};
        MtPlanLayout l = {.dp = 1, .tp = 1, .pp = 1, .sched = MT_SCHED_1F1B, .V = 1, .micro = m.batch};
        MtStepTime t1, t2;
        mt_plan_time(&m, &l, &cl, INFINITY, &t1);
        cl.ew_bw = 2e9;
        mt_plan_time(&m, &l, &cl, INFINITY, &t2);
        double per = 2.0 * (t1.step - t2.step) * 1e9, rest = t1.step - per / 1e9; /* bytes; seconds without them */
        if (step > rest * 1.01)
            ebw = per / (step - rest);
    }
    if (dpn > 1 && threads == 1) { /* 1c again, half a minute on */
        double b2, m2;
        node_full(dpn, &b2, &m2);
        busy = fmax(busy, b2), busy_mem = fmax(busy_mem, m2);
    }
    /* 4. the collectives between ranks */
    double lat = 0, nbw = 0;
    if (comm_figures(self, ranks, &lat, &nbw) != 0)
        return mt_cli_fail(mt_error(MT_EIO, "meshtrain calibrate: measuring the collectives (meshtrain bench-comm "
                                    "--ranks %d) failed", ranks));
    double elapsed = mt_now() - t0;
    FILE *f = fopen(out, "w");
    if (!f)
        return mt_cli_fail(mt_error(MT_EIO, "meshtrain calibrate: cannot write %s", out));
    char host[256] = "this machine";
    gethostname(host, sizeof host);
    fprintf(f, "{\n  \"name\": \"this-machine\",\n");
    fprintf(f, "  \"description\": \"%ld cores, devices of %d thread%s each (meshtrain calibrate on %s, %.1f s)\",\n",
            cores, threads, threads == 1 ? "" : "s", host, elapsed);
    fprintf(f, "  \"devices_per_node\": %d,\n", dpn);
    fprintf(f, "  \"device\": {\n    \"peak_tflops\": {\"fp32\": %.6f, \"bf16\": %.6f},\n", best_peak / 1e12,
            best_peak / 1e12);
    fprintf(f, "    \"memory_bytes\": %.0f,\n    \"memory_bw_gbs\": %.3f,\n    \"memory_efficiency\": 1.0,\n"
               "    \"elementwise_bw_gbs\": %.3f,\n    \"threads\": %d,\n    \"node_full_speed\": %.4f,\n"
               "    \"node_full_memory_speed\": %.4f\n  },\n",
            (double)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE) / (cores / threads > 0 ? cores / threads : 1),
            bw / 1e9, ebw / 1e9, threads, busy, busy_mem);
    fprintf(f, "  \"intra_node\": {\"bw_gbs\": %.4f, \"latency_us\": %.3f},\n", nbw / 1e9, lat * 1e6);
    fprintf(f, "  \"inter_node\": {\"bw_gbs\": %.4f, \"latency_us\": %.3f},\n", nbw / 1e9, lat * 1e6);
    fprintf(f, "  \"efficiency\": {\"gemm_max\": 1.0, \"gemm_half_dim\": %.3f, \"network\": 1.0, "
               "\"attention_forward\": %.4f, \"attention_backward\": %.4f", best_h, fmin(eff_f, 1.0),
            fmin(eff_b, 1.0));
    if (nt > 0) {
        fprintf(f, ",\n    \"gemm_table\": [");
        for (int i = 0; i < nt; i++)
            fprintf(f, "%s[%d, %d, %d, %d, %d, %.2f]", i ? ", " : "", table[i][0], table[i][1], table[i][2],
                    table[i][3], table[i][4], trate[i] / 1e9);
        fprintf(f, "]");
    }
    fprintf(f, "},\n");
    fprintf(f, "  \"sources\": {\"all\": \"measured by meshtrain calibrate: %d matrix products (%s; the peak and "
               "gemm_half_dim fitted to them, rms log error %.3f), the fused attention kernel (B 4, T 256, 8 heads "
               "of 64), a 64 MiB copy, a block's element-wise kernels (2048 rows of 256: %.1f GB/s) and meshtrain bench's step (%.1f ms; the element-wise rate is what it leaves unexplained), %s's collectives between %d ranks; bf16 is fp32 on this CPU; memory_bytes "
               "the machine's memory over its devices\"}\n}\n",
            ns, mt_gemm_name(), sqrt(best_err / ns), ebw_kernels / 1e9, step * 1e3, "bench-comm", ranks);
    fclose(f);
    printf("calibrated in %.1f s: matrix products %.1f GFLOP/s peak (half-dimension %.0f), attention forward %.0f%% "
           "and backward %.0f%% of it, memory %.1f GB/s (element-wise kernels %.1f), a full node's devices at %.0f%% of one alone (streaming %.0f%%), all-reduce %.2f GB/s and %.1f us per step: %s\n", elapsed,
           best_peak / 1e9, best_h, 100 * eff_f, 100 * eff_b, bw / 1e9, ebw / 1e9, 100 * busy, 100 * busy_mem, nbw / 1e9, lat * 1e6,
           out);
    return 0;
}
