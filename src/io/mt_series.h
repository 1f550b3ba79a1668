/* mt_series.h - a folder of saves (train --save DIR --keep-checkpoints N): each save is a
 * checkpoint directory DIR/step-NNNNNNNN (the step, 8 digits or more), written as every
 * checkpoint is (staged, its manifest last, swapped in atomically); after a save the newest
 * N are kept.  A resume from DIR takes the newest save whose manifest holds and names each
 * newer one that does not (docs/failures.md).
 */
#ifndef MT_SERIES_H
#define MT_SERIES_H

#include <stdint.h>
#include <stdio.h>

#include "mt_core.h"

/* dir/step-NNNNNNNN */
void mt_series_path(const char *dir, int64_t step, char *out, size_t cap);

/* The steps of dir's saves, ascending (at most cap); -1 when dir cannot be read. */
int mt_series_steps(const char *dir, int64_t *steps, int cap);

/* A save target for a series: absent (made at the first save), or a directory that holds
 * saves (and the stages, step-*.tmp-PID, that a crash may leave) and nothing else. */
MtStatus mt_series_check_target(const char *dir);

/* Removes all but the newest `keep` saves. */
MtStatus mt_series_prune(const char *dir, int keep);

/* What --resume dir reads: dir itself when it is a checkpoint (checked against its manifest
 * where it has one: damaged is MT_EINPUT; without one, *unverified is set), else the newest
 * save of the series dir whose manifest holds; every newer save that does not is named on
 * `notes` (NULL: not printed), one line each.  The path goes to out. */
MtStatus mt_ckpt_resolve(const char *dir, char *out, size_t cap, FILE *notes, int *unverified);

#endif
