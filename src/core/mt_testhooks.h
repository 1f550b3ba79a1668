/* mt_testhooks.h - the mutations and faults that tests inject into a real run, reached only
 * through the test build of the command (build/meshtrain-test, tests/prog_meshtrain_test.c,
 * which reads them from MT_TEST_* variables before it hands over to the same main).  The
 * meshtrain command never sets them: no environment variable changes what it computes.
 *
 * Every field 0 is off.  They are process state, set once before any work starts and only
 * read afterwards. */
#ifndef MT_TESTHOOKS_H
#define MT_TESTHOOKS_H

typedef struct {
    int nan_step;  /* > 0: that step's (1-based) gradient gets a NaN before its norm (the NaN guard) */
    int ltr_stage; /* > 0: pipeline stage ltr_stage - 1 sums its micro-batches left to right */
    int tp_ltr;    /* tensor parallelism's blocked sums left to right (mt_tp_test_left_to_right) */
    int tp_drift;  /* tp rank 1 nudges a replicated parameter after each step (the replica check) */
    int accum_rtl;  /* the first accumulation block's micro-batches filled in reverse: summed right to left */
    int accum_swap; /* the first and the last micro-batch of a step exchanged: two leaves swapped */
} MtTestHooks;

extern MtTestHooks mt_test_hooks;

#endif
