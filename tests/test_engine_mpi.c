/* test_engine_mpi.c - the engines tested in C (issue 26): under mpiexec with 2 or 4 ranks,
 * each layout of that world size is built with mt_engine_init from its MtEngineLayout,
 * trained for 3 steps on synthetic tokens, and compared with one device's engine (built in
 * the same process, no ranks) at the same accumulation order and tensor-parallel blocks:
 * every step's loss, and the saved model.safetensors and optimizer.safetensors byte for
 * byte.  The layouts run at their default accumulation order (mt_accum_default) and at
 * K = M and a blocked K.  A refactor of the composition is caught here by the layout's
 * name, not by a line of the command's output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mt_engine.h"
#include "mt_gemm.h"
#include "mt_kernels.h"
#include "mt_test.h"

#define STEPS 3

static MtComm *C;
static MtTokens data;
static char dir[256]; /* a temporary directory, the same on every rank */

static MtTrainConfig model(void)
{
    MtTrainConfig tc = {0};
    tc.cfg = (MtConfig){.V = 64, .T = 16, .L = 4, .NH = 4, .C = 32};
    tc.batch = 8;
    tc.micro = 1;
    tc.seq = 16;
    tc.threads = 1;
    tc.seed = 11;
    tc.oc = (MtOptimConfig){.lr = 3e-3f, .min_lr_frac = 0.1f, .warmup = 1, .steps = STEPS, .beta1 = 0.9f,
                            .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_clip = 1.0f};
    return tc;
}

/* trains e for STEPS steps, the losses into loss, and saves it into dir/name */
static void train(MtEngine *e, float *loss, const char *name)
{
    for (int s = 0; s < STEPS; s++) {
        MtStepStats st;
        mt_engine_step(e, &data, &st);
        loss[s] = st.loss;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    MtStatus s = mt_engine_save(e, path);
    CHECK(s == MT_OK, "save %s: %s", name, mt_error_msg());
}

/* one layout (accum: -1 its default, else --accum-blocks) against one device */
static void layout(const char *name, MtEngineLayout l, int accum)
{
    MtTrainConfig tc = model();
    int M = tc.batch / tc.micro;
    int K = accum >= 0 ? accum : mt_accum_default(l.dp, l.zero, 1, M);
    tc.accum_blocks = K == M ? 0 : K;
    l.det = 1;
    if (l.pp > 1) {
        l.po = (MtPipeOptions){.kind = l.po.kind, .V = l.po.V > 0 ? l.po.V : 1, .M = M / l.dp};
        MT_ASSERT(mt_pipe_check(&l.po, &tc.cfg, l.pp, NULL, 0) == MT_OK, "%s: %s", name, mt_error_msg());
    }
    MtLayout mesh = {.dp = l.dp, .tp = l.tp, .pp = l.pp, .shard = l.shard};
    mt_comm_mesh(C, &mesh);
    MtEngine e;
    MtStatus s = mt_engine_init(&e, &tc, &l, C);
    CHECK(s == MT_OK, "%s: init: %s", name, mt_error_msg());
    if (s != MT_OK)
        return;
    float got[STEPS], want[STEPS];
    train(&e, got, "run");
    mt_engine_free(&e);
    if (mt_comm_rank(C) == 0) { /* one device at the same orders */
        MtEngineLayout one = {.dp = 1, .tp = 1, .pp = 1, .tp_blocks = l.tp > 1 ? (l.tp_blocks ? l.tp_blocks : l.tp) : 0,
                              .det = 1};
        MtEngine ref;
        s = mt_engine_init(&ref, &tc, &one, NULL);
        CHECK(s == MT_OK, "%s: one device: %s", name, mt_error_msg());
        if (s == MT_OK) {
            train(&ref, want, "ref");
            mt_engine_free(&ref);
            for (int k = 0; k < STEPS; k++)
                CHECK(got[k] == want[k], "%s, K %d: step %d loss %.9g, one device %.9g", name, K, k + 1, got[k],
                      want[k]);
            const char *files[] = {"model.safetensors", "optimizer.safetensors"};
            for (int f = 0; f < 2; f++) {
                char a[512], b[512];
                snprintf(a, sizeof a, "%s/run/%s", dir, files[f]);
                snprintf(b, sizeof b, "%s/ref/%s", dir, files[f]);
                CHECK(mt_test_same_file(a, b), "%s, K %d: %s differs from one device's", name, K, files[f]);
            }
            printf("%-44s K %d: 3 losses, model and optimizer as one device's\n", name, K);
        }
    }
    mt_comm_barrier(C);
}

int main(int argc, char **argv)
{
    MtCommOptions opt = {.check = 1, .timeout_s = 120};
    C = mt_comm_init(&argc, &argv, &opt);
    mt_gemm_setup(1);
    mt_kernels_set_threads(1);
    int W = mt_comm_size(C);
    union {
        char path[256];
        float f[64];
    } d = {{0}};
    if (mt_comm_rank(C) == 0)
        MT_ASSERT(mkdtemp(strcpy(d.path, "/tmp/mt_engine_XXXXXX")), "mkdtemp");
    MtLayout flat = {.dp = W, .tp = 1, .pp = 1};
    mt_comm_mesh(C, &flat);
    mt_broadcast(C, MT_GROUP_WORLD, d.f, 64, 0);
    snprintf(dir, sizeof dir, "%s", d.path);
    data.count = 8192;
    data.vocab = 64;
    data.tok = malloc(sizeof(int32_t) * (size_t)data.count);
    MT_ASSERT(data.tok, "out of memory");
    for (int64_t i = 0; i < data.count; i++) /* deterministic, not trivially periodic */
        data.tok[i] = (int32_t)((i * 2654435761u ^ (i >> 3) * 40503u) % 64);
    if (W == 2) {
        for (int z = 0; z <= 3; z++) {
            char name[64];
            snprintf(name, sizeof name, "dp 2 zero %d", z);
            layout(name, (MtEngineLayout){.dp = 2, .tp = 1, .pp = 1, .zero = z}, -1);
            layout(name, (MtEngineLayout){.dp = 2, .tp = 1, .pp = 1, .zero = z}, z >= 2 ? 2 : 0);
        }
        layout("tp 2", (MtEngineLayout){.dp = 1, .tp = 2, .pp = 1}, -1);
        layout("tp 2 sequence-parallel", (MtEngineLayout){.dp = 1, .tp = 2, .pp = 1, .seqpar = 1}, 0);
        layout("pp 2 1f1b", (MtEngineLayout){.dp = 1, .tp = 1, .pp = 2, .po = {.kind = MT_SCHED_1F1B}}, -1);
        layout("pp 2 zb", (MtEngineLayout){.dp = 1, .tp = 1, .pp = 2, .po = {.kind = MT_SCHED_ZB}}, 0);
        layout("pp 2 interleaved", (MtEngineLayout){.dp = 1, .tp = 1, .pp = 2, .po = {.kind = MT_SCHED_INTERLEAVED,
                                                                                         .V = 2}}, 2);
    } else if (W == 4) {
        layout("dp 2 x tp 2 zero 1", (MtEngineLayout){.dp = 2, .tp = 2, .pp = 1, .zero = 1}, -1);
        layout("dp 2 x tp 2 zero 3", (MtEngineLayout){.dp = 2, .tp = 2, .pp = 1, .zero = 3}, 4);
        layout("dp 2 x pp 2", (MtEngineLayout){.dp = 2, .tp = 1, .pp = 2, .po = {.kind = MT_SCHED_1F1B}}, -1);
        layout("dp 2 x pp 2 zero 3", (MtEngineLayout){.dp = 2, .tp = 1, .pp = 2, .zero = 3,
                                                      .po = {.kind = MT_SCHED_ZB}}, -1);
        layout("dp 2 x pp 2 zero 1", (MtEngineLayout){.dp = 2, .tp = 1, .pp = 2, .zero = 1,
                                                      .po = {.kind = MT_SCHED_1F1B}}, 4);
        layout("tp 2 x pp 2", (MtEngineLayout){.dp = 1, .tp = 2, .pp = 2, .po = {.kind = MT_SCHED_1F1B}}, -1);
        layout("dp 4 zero 2 shard 2", (MtEngineLayout){.dp = 4, .tp = 1, .pp = 1, .zero = 2, .shard = 2}, -1);
        layout("dp 4", (MtEngineLayout){.dp = 4, .tp = 1, .pp = 1}, -1);
    } else
        printf("test_engine_mpi: no layouts of %d ranks here (run with 2 or 4)\n", W);
    mt_comm_mesh(C, &flat);
    if (mt_comm_rank(C) == 0) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0, "cannot remove %s", dir);
    }
    free(data.tok);
    int rc = mt_test_done("test_engine_mpi");
    mt_comm_finalize(C);
    return rc;
}
