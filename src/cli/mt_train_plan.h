/* mt_train_plan.h - `train --plan` and `--plan-ranks` (train_plan.c). */
#ifndef MT_TRAIN_PLAN_H
#define MT_TRAIN_PLAN_H

#include "mt_engine.h"

/* --plan (ranks 0: per stage, the fullest and emptiest rank, and the predicted step on a
 * calibration of this machine, measured now when calibration is NULL) or --plan-ranks
 * (ranks 1: one line per rank); returns the exit status. */
int mt_train_plan(const MtTrainConfig *tc, const MtEngineLayout *l, int ranks, const char *calibration);

#endif
