/* mt_data.h - token files, the byte-level tokenizer, and the batch sampler.
 *
 * Token file (little-endian):  32-byte header, then `count` tokens of `token_bytes` each.
 *   offset 0  char[8]  magic "MTTOKENS"
 *   offset 8  u32      version (1)
 *   offset 12 u32      token_bytes (1, 2 or 4)
 *   offset 16 u64      count
 *   offset 24 u32      vocab_size (every token is below it)
 *   offset 28 u32      reserved (0)
 *
 * The sampler is stateless: sample i of step s starts at a position drawn by the
 * counter-based generator from (seed, s, i), so the batches of a step are the same on
 * every run, after a resume, and whichever rank asks for them.
 */
#ifndef MT_DATA_H
#define MT_DATA_H

#include <stdint.h>

#include "mt_core.h"

typedef struct {
    int32_t *tok;      /* count tokens, widened to int32 (owned) */
    int64_t count;
    uint32_t vocab;
} MtTokens;

#define MT_TOKENS_HEADER 32

/* Reads and validates a token file.  MT_EINPUT ("<path>: <problem>") on bad input. */
MtStatus mt_tokens_read(const char *path, MtTokens *t);
/* The vocabulary size in a token file's header, without reading its tokens. */
MtStatus mt_tokens_vocab(const char *path, uint32_t *vocab);
/* Writes a token file (smallest token width that holds vocab); MT_EIO on failure. */
MtStatus mt_tokens_write(const char *path, const int32_t *tok, int64_t count, uint32_t vocab);
/* The same from tokens already in the file's width (mt_tokens_width: 1, 2 or 4 bytes each,
 * little-endian), as prepare keeps them. */
int mt_tokens_width(uint32_t vocab);
MtStatus mt_tokens_write_packed(const char *path, const unsigned char *packed, int64_t count, uint32_t vocab);
void mt_tokens_free(MtTokens *t);

/* Byte-level tokenizer: one token per byte, vocabulary 256. */
#define MT_BYTE_VOCAB 256
void mt_bytes_encode(const unsigned char *text, int64_t n, int32_t *out);

/* Start position of sample i of step s, in [0, count - T - 1]. */
int64_t mt_sample_start(uint64_t seed, int64_t step, int64_t i, int64_t count, int T);
/* Inputs and targets (count x T each) of samples [first, first + n) of step s. */
void mt_batch_fill(const MtTokens *t, uint64_t seed, int64_t step, int first, int n, int T,
                   int32_t *inputs, int32_t *targets);

#endif
