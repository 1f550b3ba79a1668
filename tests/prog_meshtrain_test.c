/* prog_meshtrain_test.c - the test build of the command: meshtrain with its test hooks
 * (mt_testhooks.h) read from the environment, for the tests that must see a wrong order or
 * a fault caught.  The meshtrain command itself reads none of them.
 *   MT_TEST_NAN_STEP=k     step k's gradient gets a NaN (the NaN guard)
 *   MT_TEST_LTR_STAGE=s    pipeline stage s sums its micro-batches left to right
 *   MT_TEST_TP_LTR=1       tensor parallelism's blocked sums left to right
 *   MT_TEST_TP_DRIFT=1     tp rank 1 nudges a replicated parameter after every step
 *   MT_TEST_ACCUM_RTL=1    the trainer's accumulation sums its first block right to left
 *   MT_TEST_ACCUM_SWAP=1   the trainer's accumulation exchanges its first and last leaf
 * Self-launched ranks re-execute this program, and mpirun passes the variables on. */
#include <stdlib.h>

#include "mt_cli.h"
#include "mt_testhooks.h"

static int env_int(const char *name, int off)
{
    const char *v = getenv(name);
    return v ? atoi(v) : off;
}

int main(int argc, char **argv)
{
    mt_test_hooks.nan_step = env_int("MT_TEST_NAN_STEP", 0);
    mt_test_hooks.ltr_stage = env_int("MT_TEST_LTR_STAGE", -1) + 1;
    mt_test_hooks.tp_ltr = env_int("MT_TEST_TP_LTR", 0) != 0;
    mt_test_hooks.tp_drift = env_int("MT_TEST_TP_DRIFT", 0) != 0;
    mt_test_hooks.accum_rtl = env_int("MT_TEST_ACCUM_RTL", 0) != 0;
    mt_test_hooks.accum_swap = env_int("MT_TEST_ACCUM_SWAP", 0) != 0;
    return mt_cli_main(argc, argv);
}
