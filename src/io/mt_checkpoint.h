/* mt_checkpoint.h - the checkpoint directory (docs/formats.md):
 *   config.json           Hugging Face GPT-2 configuration
 *   model.safetensors     parameters, Hugging Face names and shapes, F32
 *   optimizer.safetensors AdamW moments: "exp_avg.<name>", "exp_avg_sq.<name>"
 *   trainer_state.json    step, seed, data cursor, optimizer and batch settings
 *   manifest.json         every other file's size and SHA-256, written last (mt_manifest.h)
 * Saving writes a fresh sibling directory and swaps it in atomically, so a crash while
 * saving leaves the previous checkpoint intact.  Loading validates everything and
 * answers MT_EINPUT with "<file>: <problem>" on any mismatch.
 */
#ifndef MT_CHECKPOINT_H
#define MT_CHECKPOINT_H

#include <stdint.h>

#include "mt_model.h"
#include "mt_optim.h"

typedef struct {
    int64_t step;       /* completed steps; also the data cursor of the stateless sampler */
    uint64_t seed;
    int batch, micro, seq;
    int tp_blocks;      /* the arithmetic's K: every tensor-parallel split sum as K blocks (--tp-blocks,
                         * resolved; 1 plain); 0: not recorded (a checkpoint from before it was) */
    int accum_blocks;   /* --accum-blocks K (mt_train.h); 0: one block per micro-batch (also when absent) */
    MtOptimConfig oc;
    const char *tokenizer; /* saving: the tokenizer the checkpoint carries (a path mt_bpe_load reads: its
                            * tokenizer.json, vocab.json, merges.txt, tokenizer_config.json are written
                            * beside the weights); NULL: byte-level.  Not read back. */
} MtTrainState;

/* One rank's save: the whole state from flat arrays laid out like the table (the parallel
 * writer below with every piece its own). */
MtStatus mt_ckpt_save(const char *dir, const MtConfig *cfg, const MtParam *table, int nparams,
                      const float *params, const float *m, const float *v, const MtTrainState *ts);
MtStatus mt_ckpt_read_config(const char *dir, MtConfig *cfg);
/* Checks every tensor and reads the flat range [lo, hi) of the parameters and moments
 * (each destination NULL to skip it; element 0 = flat lo): a rank reads only its part. */
MtStatus mt_ckpt_load_range(const char *dir, const MtParam *table, int nparams, int64_t lo, int64_t hi,
                            float *params, float *m, float *v);
/* The same for any pieces: fn(ctx, p, k, &begin, &end) gives piece k of tensor p (its
 * elements [begin, end), in the tensor's flat order) and returns where it goes in each
 * destination array, or -1 when p has no more pieces.  A tensor-parallel rank reads its
 * slices this way, one read per piece. */
typedef int64_t (*MtCkptPieces)(void *ctx, int p, int k, int64_t *begin, int64_t *end);
MtStatus mt_ckpt_load_pieces(const char *dir, const MtParam *table, int nparams, MtCkptPieces fn, void *ctx,
                             float *params, float *m, float *v);
/* Parallel save: every rank writes its own pieces straight into the one pair of files.
 *   1. one rank: mt_ckpt_par_begin stages the directory (its path into stage), writes
 *      config.json and trainer_state.json, and both safetensors files' headers with the
 *      files sized to their final length (the headers, so every tensor's offset, follow
 *      from the table);
 *   2. every rank, once it knows stage: mt_ckpt_par_write for the parameters (moments 0,
 *      a = params) and the moments (1, a = m, b = v), fn naming its pieces as for a load
 *      (the source offset in a and b); nothing is gathered and no buffer is used;
 *   3. after every rank is done: the first rank, mt_ckpt_par_commit (ok: every rank wrote
 *      its part) fsyncs and swaps the directory in atomically, or removes it.
 * The pieces of all ranks must cover every tensor exactly once. */
MtStatus mt_ckpt_par_begin(const char *dir, const MtConfig *cfg, const MtParam *table, int nparams,
                           const MtTrainState *ts, char *stage, size_t cap);
MtStatus mt_ckpt_par_write(const char *stage, const MtParam *table, int nparams, int moments, MtCkptPieces fn,
                           void *ctx, const float *a, const float *b);
MtStatus mt_ckpt_par_commit(const char *stage, const char *dir, int ok);
/* The pieces of the flat range [lo, hi) of a table (ctx: an MtCkptRange), as
 * mt_ckpt_load_range reads them (destination element 0 = flat lo). */
typedef struct {
    const MtParam *table;
    int64_t lo, hi;
} MtCkptRange;
int64_t mt_ckpt_range_piece(void *ctx, int p, int k, int64_t *begin, int64_t *end);
/* Every tensor of dir's model.safetensors (and with moments, optimizer.safetensors) has the
 * name and shape that cfg's model needs, read from the headers alone: called before the
 * model's memory is allocated, so a config that disagrees with the tensors costs nothing. */
MtStatus mt_ckpt_check_shapes(const char *dir, const MtConfig *cfg, int moments);
MtStatus mt_ckpt_load_params(const char *dir, const MtParam *table, int nparams, float *params);
/* The training state (trainer_state.json). */
MtStatus mt_ckpt_read_state(const char *dir, MtTrainState *ts);
/* The AdamW moments (optimizer.safetensors). */
MtStatus mt_ckpt_load_moments(const char *dir, const MtParam *table, int nparams, float *m, float *v);

#endif
