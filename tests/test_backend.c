/* test_backend.c - the backend seam (mt_backend.h) holds: the one-device engine runs on a
 * backend other than the CPU's, and only through it.
 *
 * The "locked" backend below is a device whose memory the host cannot touch: its buffers
 * are pages that stay PROT_NONE except while one of its own functions runs (each unlocks
 * every device page, runs the CPU backend's function, and locks them again).  Host code
 * that reads or writes device memory directly, anywhere in the engine, dies of SIGSEGV
 * with a line that names the address.  On it, the one-device engine trains (left to right,
 * in blocks, with recomputation, with tensor parallelism's blocked sums on one rank),
 * validates, saves and resumes, and every loss, the validation loss and the saved
 * model.safetensors and optimizer.safetensors are the CPU backend's, byte for byte.  The
 * harness itself is checked: a host write into a locked buffer is caught. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mt_backend.h"
#include "mt_engine.h"
#include "mt_gemm.h"
#include "mt_kernels.h"
#include "mt_test.h"

/* ---- the locked device ---- */

#define MAX_REGIONS 4096
static struct {
    char *p;
    size_t len;
} reg[MAX_REGIONS];
static int nreg, depth;
static long page;

static void protect(int prot)
{
    for (int i = 0; i < nreg; i++)
        MT_ASSERT(mprotect(reg[i].p, reg[i].len, prot) == 0, "mprotect");
}

static void enter(void)
{
    if (depth++ == 0)
        protect(PROT_READ | PROT_WRITE);
}

static void leave(void)
{
    if (--depth == 0)
        protect(PROT_NONE);
}

static void on_segv(int sig, siginfo_t *si, void *uc)
{
    char *a = si->si_addr;
    for (int i = 0; i < nreg; i++)
        if (a >= reg[i].p && a < reg[i].p + reg[i].len) {
            char msg[160];
            int n = snprintf(msg, sizeof msg, "host code touched device memory at %p (a %zu-byte device buffer)\n",
                             (void *)a, reg[i].len);
            (void)!write(2, msg, (size_t)n);
            _exit(3);
        }
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
}

static void *dev_alloc(size_t bytes)
{
    size_t len = (bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
    if (len == 0)
        len = (size_t)page;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED || nreg == MAX_REGIONS)
        return NULL;
    reg[nreg].p = p;
    reg[nreg].len = len;
    nreg++;
    if (depth == 0)
        MT_ASSERT(mprotect(p, len, PROT_NONE) == 0, "mprotect");
    return p;
}

static void dev_free(void *ptr, size_t bytes)
{
    if (!ptr)
        return;
    for (int i = 0; i < nreg; i++)
        if (reg[i].p == ptr) {
            munmap(reg[i].p, reg[i].len);
            reg[i] = reg[--nreg];
            return;
        }
    MT_ASSERT(0, "freeing %p, not a device buffer", ptr);
}

/* calls per function of the table, by name */
#define NCOUNT 40
static const char *cname[NCOUNT];
static long ccount[NCOUNT];

static void count(const char *name)
{
    for (int i = 0; i < NCOUNT; i++)
        if (!cname[i] || cname[i] == name) {
            cname[i] = name;
            ccount[i]++;
            return;
        }
}

static long calls(const char *name)
{
    for (int i = 0; i < NCOUNT && cname[i]; i++)
        if (strcmp(cname[i], name) == 0)
            return ccount[i];
    return 0;
}

static const MtBackend *cpu = &mt_backend_cpu;

/* each of the table's functions: unlocked around the CPU backend's */
#define V(fn, params, args)                                                                                            \
    static void l_##fn params                                                                                          \
    {                                                                                                                  \
        static const char nm[] = #fn;                                                                                  \
        count(nm);                                                                                                     \
        enter();                                                                                                       \
        cpu->fn args;                                                                                                  \
        leave();                                                                                                       \
    }
#define R(type, fn, params, args)                                                                                      \
    static type l_##fn params                                                                                          \
    {                                                                                                                  \
        static const char nm[] = #fn;                                                                                  \
        count(nm);                                                                                                     \
        enter();                                                                                                       \
        type r = cpu->fn args;                                                                                         \
        leave();                                                                                                       \
        return r;                                                                                                      \
    }

V(upload, (void *d, const void *h, size_t n), (d, h, n))
V(download, (void *h, const void *d, size_t n), (h, d, n))
V(copy, (float *d, const float *s, int64_t n), (d, s, n))
V(zero, (float *x, int64_t n), (x, n))
V(add, (float *d, const float *s, int64_t n), (d, s, n))
V(scale, (float *x, int64_t n, float c), (x, n, c))
V(gemm, (int ta, int tb, int m, int n, int k, float al, const float *A, int lda, const float *B, int ldb, float be,
         float *C, int ldc, int th),
  (ta, tb, m, n, k, al, A, lda, B, ldb, be, C, ldc, th))
V(encoder_forward, (float *o, const int32_t *t, const float *e, const float *p, int B, int T, int C),
  (o, t, e, p, B, T, C))
V(encoder_backward, (float *de, float *dp, const float *d, const int32_t *t, int B, int T, int C),
  (de, dp, d, t, B, T, C))
V(layernorm_forward, (float *o, float *m, float *r, const float *i, const float *w, const float *b, int N, int C),
  (o, m, r, i, w, b, N, C))
V(layernorm_backward, (float *di, float *dw, float *db, const float *d, const float *i, const float *w,
                       const float *m, const float *r, int N, int C, int add),
  (di, dw, db, d, i, w, m, r, N, C, add))
V(matmul_forward, (float *o, const float *i, const float *w, const float *b, const float *r, int N, int C, int OC),
  (o, i, w, b, r, N, C, OC))
V(matmul_backward, (float *di, float *dw, float *db, const float *d, const float *i, const float *w, int N, int C,
                    int OC, int add),
  (di, dw, db, d, i, w, N, C, OC, add))
V(attention_forward, (float *o, float *l, float *s, const float *q, int B, int T, int C, int NH),
  (o, l, s, q, B, T, C, NH))
V(attention_backward, (float *dq, float *s, const float *d, const float *o, const float *q, const float *l, int B,
                       int T, int C, int NH),
  (dq, s, d, o, q, l, B, T, C, NH))
V(gelu_forward, (float *o, const float *i, int64_t n), (o, i, n))
V(gelu_backward, (float *di, const float *i, const float *d, int64_t n), (di, i, d, n))
R(double, crossentropy_fused, (float *lg, float *ls, const int32_t *t, int N, int V, float ds), (lg, ls, t, N, V, ds))
V(colsum, (float *o, const float *x, int N, int C, int add), (o, x, N, C, add))
V(tp_embed_lookup, (float *o, const int32_t *t, const float *w, int64_t v0, int64_t Vl, int N, int C),
  (o, t, w, v0, Vl, N, C))
V(tp_embed_finish, (float *o, const float *w, int r0, int rows, int T, int C), (o, w, r0, rows, T, C))
V(tp_embed_backward_rows, (float *dw, const float *d, const int32_t *t, int64_t v0, int64_t Vl, int N, int C),
  (dw, d, t, v0, Vl, N, C))
V(tp_rowpar_finish, (float *o, const float *S, const float *b, const float *r, int N, int OC), (o, S, b, r, N, OC))
V(tp_xent_max, (float *mx, const float *l, int64_t v0, int64_t Vl, int64_t V, int N), (mx, l, v0, Vl, V, N))
V(tp_xent_reduce_max, (float *mx, const float *a, int n, int N), (mx, a, n, N))
V(tp_xent_sums, (float *st, const float *l, const float *mx, const int32_t *t, int64_t v0, int64_t Vl, int64_t V,
                 int N, int nb),
  (st, l, mx, t, v0, Vl, V, N, nb))
R(double, tp_xent_finish, (float *l, float *ls, const float *a, int n, const float *mx, const int32_t *t, int64_t v0,
                           int64_t Vl, int64_t V, int N, float ds),
  (l, ls, a, n, mx, t, v0, Vl, V, N, ds))
V(adamw, (float *p, const float *g, float *m, float *v, int64_t n, const MtAdamwCoef *k), (p, g, m, v, n, k))
V(block_sumsq, (const float *x, int64_t n, double *o), (x, n, o))
V(sync, (void), ())

static const MtBackend locked = {
    .name = "locked",
    .host_memory = 0,
    .alloc = dev_alloc,
    .free = dev_free,
    .upload = l_upload,
    .download = l_download,
    .copy = l_copy,
    .zero = l_zero,
    .add = l_add,
    .scale = l_scale,
    .gemm = l_gemm,
    .encoder_forward = l_encoder_forward,
    .encoder_backward = l_encoder_backward,
    .layernorm_forward = l_layernorm_forward,
    .layernorm_backward = l_layernorm_backward,
    .matmul_forward = l_matmul_forward,
    .matmul_backward = l_matmul_backward,
    .attention_forward = l_attention_forward,
    .attention_backward = l_attention_backward,
    .attention_scratch_floats = mt_attention_scratch_floats, /* arithmetic on sizes only */
    .gelu_forward = l_gelu_forward,
    .gelu_backward = l_gelu_backward,
    .crossentropy_fused = l_crossentropy_fused,
    .colsum = l_colsum,
    .tp_embed_lookup = l_tp_embed_lookup,
    .tp_embed_finish = l_tp_embed_finish,
    .tp_embed_backward_rows = l_tp_embed_backward_rows,
    .tp_rowpar_finish = l_tp_rowpar_finish,
    .tp_xent_max = l_tp_xent_max,
    .tp_xent_reduce_max = l_tp_xent_reduce_max,
    .tp_xent_sums = l_tp_xent_sums,
    .tp_xent_finish = l_tp_xent_finish,
    .adamw = l_adamw,
    .block_sumsq = l_block_sumsq,
    .sync = l_sync,
};

/* ---- the engine on each backend ---- */

#define STEPS 3
static MtTokens data;
static char dir[256];

static MtTrainConfig model(int accum, int recompute)
{
    MtTrainConfig tc = {0};
    tc.cfg = (MtConfig){.V = 64, .T = 16, .L = 2, .NH = 4, .C = 32};
    tc.batch = 4;
    tc.micro = 1;
    tc.seq = 16;
    tc.threads = 2;
    tc.seed = 5;
    tc.accum_blocks = accum;
    tc.recompute = recompute;
    tc.oc = (MtOptimConfig){.lr = 3e-3f, .min_lr_frac = 0.1f, .warmup = 1, .steps = STEPS + 1, .beta1 = 0.9f,
                            .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_clip = 0.05f};
    return tc;
}

typedef struct {
    float loss[STEPS + 1];
    double val;
} Run;

/* STEPS steps, the validation loss, a save into dir/<name>; then a resume from it (a new
 * engine loading the checkpoint) and one more step, saved into dir/<name>-resumed */
static void run(const MtBackend *be, const char *name, MtTrainConfig tc, int tp_blocks, Run *r)
{
    mt_backend_set(be);
    MtEngineLayout one = {.dp = 1, .tp = 1, .pp = 1, .tp_blocks = tp_blocks, .det = 1};
    MtEngine e;
    MtStatus s = mt_engine_init(&e, &tc, &one, NULL);
    MT_ASSERT(s == MT_OK, "%s: %s", name, mt_error_msg());
    MtStepStats st;
    for (int k = 0; k < STEPS; k++) {
        mt_engine_step(&e, &data, &st);
        r->loss[k] = st.loss;
    }
    double sums[8];
    r->val = mt_engine_validate(&e, &data, 6, sums);
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    MT_ASSERT(mt_engine_save(&e, path) == MT_OK, "%s: save: %s", name, mt_error_msg());
    mt_engine_free(&e);
    s = mt_engine_init(&e, &tc, &one, NULL);
    MT_ASSERT(s == MT_OK, "%s: %s", name, mt_error_msg());
    MT_ASSERT(mt_engine_load(&e, path) == MT_OK, "%s: load: %s", name, mt_error_msg());
    e.tr.step = STEPS;
    mt_engine_step(&e, &data, &st);
    r->loss[STEPS] = st.loss;
    snprintf(path, sizeof path, "%s/%s-resumed", dir, name);
    MT_ASSERT(mt_engine_save(&e, path) == MT_OK, "%s: save: %s", name, mt_error_msg());
    mt_engine_free(&e);
    mt_backend_set(NULL);
}

static void compare(const char *what, MtTrainConfig tc, int tp_blocks)
{
    Run c, l;
    char a[128], b[128];
    snprintf(a, sizeof a, "cpu-%s", what);
    snprintf(b, sizeof b, "locked-%s", what);
    for (int i = 0; i < NCOUNT; i++)
        ccount[i] = 0;
    run(cpu, a, tc, tp_blocks, &c);
    run(&locked, b, tc, tp_blocks, &l);
    CHECK(nreg == 0, "%s: %d device buffers left after the engines were freed", what, nreg);
    for (int k = 0; k <= STEPS; k++)
        CHECK(l.loss[k] == c.loss[k], "%s: step %d loss %.9g on the locked device, %.9g on the CPU", what, k + 1,
              l.loss[k], c.loss[k]);
    CHECK(l.val == c.val, "%s: validation loss %.12g, CPU %.12g", what, l.val, c.val);
    const char *sub[] = {"", "-resumed"}, *files[] = {"model.safetensors", "optimizer.safetensors"};
    for (int d = 0; d < 2; d++)
        for (int f = 0; f < 2; f++) {
            char pa[600], pb[600];
            snprintf(pa, sizeof pa, "%s/%s%s/%s", dir, a, sub[d], files[f]);
            snprintf(pb, sizeof pb, "%s/%s%s/%s", dir, b, sub[d], files[f]);
            CHECK(mt_test_same_file(pa, pb), "%s: %s%s differs from the CPU's", what, files[f], sub[d]);
        }
    printf("%-34s %d losses, validation, model and optimizer (saved and resumed) as the CPU's; %ld gemm, "
           "%ld adamw, %ld add calls on the locked device\n",
           what, STEPS + 1, calls("gemm"), calls("adamw"), calls("add"));
}

/* a host write into a locked buffer ends the process with the line (the harness can fail) */
static void harness_catches(void)
{
    fflush(stdout);
    int fd[2];
    MT_ASSERT(pipe(fd) == 0, "pipe");
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        mt_backend_set(&locked);
        MtMem mem;
        mt_mem_init(&mem);
        mt_mem_use(&mem, locked.alloc, locked.free);
        float *x = mt_mem_alloc(&mem, MT_MEM_GRADS, 4096);
        locked.zero(x, 1024); /* through the backend: fine */
        ((volatile float *)x)[7] = 1.0f; /* around it: caught */
        _exit(0);
    }
    close(fd[1]);
    char line[256] = {0};
    ssize_t n = read(fd[0], line, sizeof line - 1);
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 3 && n > 0 && strstr(line, "host code touched device memory at"),
          "a host write into device memory was not caught (status %d, said '%s')", st, line);
    printf("a host write into device memory is caught: %s", line);
}

int main(void)
{
    page = sysconf(_SC_PAGESIZE);
    struct sigaction sa = {0};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    mt_gemm_setup(2);
    mt_kernels_set_threads(2);
    MT_ASSERT(mkdtemp(strcpy(dir, "/tmp/mt_backend_XXXXXX")), "mkdtemp");
    data.count = 4096;
    data.vocab = 64;
    data.tok = malloc(sizeof(int32_t) * (size_t)data.count);
    MT_ASSERT(data.tok, "out of memory");
    for (int64_t i = 0; i < data.count; i++)
        data.tok[i] = (int32_t)((i * 2654435761u ^ (i >> 3) * 40503u) % 64);

    CHECK(mt_backend_find("cpu") == &mt_backend_cpu && mt_be() == &mt_backend_cpu && !mt_backend_find("x"),
          "the CPU backend is the process's until another is set");
    harness_catches();
    compare("K 1 (left to right)", model(1, MT_RECOMPUTE_NONE), 0);
    compare("K 2, full recomputation", model(2, MT_RECOMPUTE_FULL), 0);
    compare("K = M, attention recomputation", model(0, MT_RECOMPUTE_ATTN), 0);
    compare("--tp-blocks 2 on one rank", model(0, MT_RECOMPUTE_NONE), 2);
    CHECK(calls("tp_xent_sums") > 0 && calls("tp_embed_lookup") > 0,
          "the blocked path ran the tensor-parallel kernels on the device (%ld, %ld calls)", calls("tp_xent_sums"),
          calls("tp_embed_lookup"));

    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cannot remove %s", dir);
    free(data.tok);
    return mt_test_done("test_backend");
}
