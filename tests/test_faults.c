/* test_faults.c - the categorised allocator's accounting and fault injection, and a
 * trainer that cannot get its memory failing cleanly (status, message, nothing held). */
#include <string.h>

#include "mt_mem.h"
#include "mt_test.h"
#include "mt_train.h"

static void test_accounting(void)
{
    MtMem m;
    mt_mem_init(&m);
    void *a = mt_mem_alloc(&m, MT_MEM_PARAMS, 1000);
    void *b = mt_mem_alloc(&m, MT_MEM_ACTS, 3u << 20);
    CHECK(a && b, "allocations succeed");
    CHECK(((uintptr_t)a & 63) == 0 && ((uintptr_t)b & 63) == 0, "64-byte aligned");
    CHECK(((unsigned char *)b)[12345] == 0, "zeroed");
    CHECK(m.cur[MT_MEM_PARAMS] == 1000 && m.cur[MT_MEM_ACTS] == (3 << 20), "bytes per category");
    CHECK(m.total_peak == 1000 + (3 << 20), "total peak %lld", (long long)m.total_peak);
    mt_mem_free(&m, MT_MEM_ACTS, b, 3u << 20);
    CHECK(m.cur[MT_MEM_ACTS] == 0 && m.peak[MT_MEM_ACTS] == (3 << 20), "peak survives the free");
    mt_mem_reset_peaks(&m);
    CHECK(m.peak[MT_MEM_ACTS] == 0 && m.total_peak == 1000, "reset peaks to what is held");
    mt_mem_free(&m, MT_MEM_ACTS, NULL, 5); /* NULL is accepted and changes nothing */
    CHECK(m.cur[MT_MEM_ACTS] == 0, "free(NULL) changes nothing");
    mt_mem_set_fail_after(&m, 1);
    void *c = mt_mem_alloc(&m, MT_MEM_GRADS, 64), *d = mt_mem_alloc(&m, MT_MEM_GRADS, 64);
    CHECK(c != NULL && d == NULL, "the second allocation after fail_after(1) fails");
    CHECK(m.cur[MT_MEM_GRADS] == 64, "a failed allocation is not counted");
    mt_mem_free(&m, MT_MEM_GRADS, c, 64);
    mt_mem_free(&m, MT_MEM_PARAMS, a, 1000);
    CHECK(m.total_cur == 0, "everything returned");
}

/* Every allocation of the trainer failing in turn: init returns MT_EINPUT (a size the user
 * asked for: exit 2) with a message naming the size, and leaves nothing allocated. */
static void test_trainer_out_of_memory(void)
{
    MtTrainConfig tc = {0};
    tc.cfg = (MtConfig){.V = 32, .T = 8, .L = 2, .NH = 2, .C = 16};
    tc.batch = 8;
    tc.micro = 2; /* 4 micro-batches: 2 tree buffers, so 7 categorised allocations */
    tc.seq = 8;
    tc.threads = 1;
    tc.oc = (MtOptimConfig){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
    int failures = 0;
    for (int k = 0; k < 7; k++) {
        tc.fail_alloc_after = k + 1; /* 1-based: the k-th allocation fails */
        MtTrainer tr;
        MtStatus s = mt_trainer_init(&tr, &tc);
        CHECK(s == MT_EINPUT, "allocation %d failing: status %d", k, s);
        CHECK(strstr(mt_error_msg(), "cannot allocate") != NULL && strstr(mt_error_msg(), " MiB for the ") != NULL,
              "message: %s", mt_error_msg());
        CHECK(tr.mem.total_cur == 0, "allocation %d failing leaves %lld bytes held", k,
              (long long)tr.mem.total_cur);
        failures += s != MT_OK;
    }
    CHECK(failures == 7, "each injected failure is reported");
    tc.fail_alloc_after = 0;
    MtTrainer tr;
    CHECK(mt_trainer_init(&tr, &tc) == MT_OK, "no injection: init succeeds");
    mt_trainer_free(&tr);
    mt_trainer_free(&tr); /* freeing twice is harmless */
}

/* eval and sample (tc.inference): parameters and activations only */
static void test_inference_state(void)
{
    MtTrainConfig tc = {0};
    tc.cfg = (MtConfig){.V = 32, .T = 8, .L = 2, .NH = 2, .C = 16};
    tc.batch = tc.micro = 2;
    tc.seq = 8;
    tc.threads = 1;
    tc.inference = 1;
    tc.oc = (MtOptimConfig){.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
    MtTrainer tr;
    CHECK(mt_trainer_init(&tr, &tc) == MT_OK, "inference init: %s", mt_error_msg());
    CHECK(tr.params && !tr.grads && !tr.m && !tr.v && tr.ntmp == 0, "no gradients, moments or tree buffers");
    CHECK(tr.mem.cur[MT_MEM_GRADS] == 0 && tr.mem.cur[MT_MEM_OPTIM] == 0 && tr.mem.cur[MT_MEM_ACTS] > 0,
          "grads %lld optimizer %lld activations %lld bytes", (long long)tr.mem.cur[MT_MEM_GRADS],
          (long long)tr.mem.cur[MT_MEM_OPTIM], (long long)tr.mem.cur[MT_MEM_ACTS]);
    mt_trainer_free(&tr);
}

int main(void)
{
    test_accounting();
    test_trainer_out_of_memory();
    test_inference_state();
    return mt_test_done("test_faults");
}
