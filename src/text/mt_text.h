/* mt_text.h - text into tokens: GPT-2's byte-level BPE (issue 27).  Pure C, no MPI.
 *
 * Pre-tokenizer (pretok.c): GPT-2's split pattern
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * taken leftmost-first, as a hand-written scanner (no regular expression engine, no
 * backtracking).  Letters (\p{L}), numbers (\p{N}) and white space (\s = White_Space) come
 * from the Unicode Character Database that Debian ships, turned into range tables at build
 * time (tools/gen_unicode.c); the version is MT_UNICODE_VERSION (15.0.0 on Debian 12).
 * Invalid UTF-8 (a stray byte, an overlong form, a surrogate, a truncated sequence): each
 * byte that does not start a valid sequence is a piece of its own, and the valid text on
 * either side is split as if it ended and began there (decision: tiktoken sees only valid
 * text, so this is the one choice that keeps decode(encode(x)) == x for every byte string
 * while giving tiktoken's ids wherever the input is valid UTF-8).
 *
 * BPE (bpe.c): ranks over byte strings (tiktoken's rank files: a token's id is its rank);
 * each piece is looked up whole first, then merged pair by pair, the lowest-ranked pair
 * first and the leftmost of equal ranks, as tiktoken merges: in place for short pieces, with
 * a bucket per rank over the parts' lengths for long ones (linear but for sorting buckets
 * filled out of order: a 1 MB piece with no split point costs milliseconds, not hours).
 *
 * Special tokens: with specials allowed (the default, tiktoken's allowed_special="all"),
 * the text of a special token anywhere in the input is that token, and the text between two
 * of them is split as a text of its own (tiktoken's behaviour; Hugging Face's added tokens
 * behave the same for GPT-2's <|endoftext|>, which has no normalisation or stripping).
 * With them not allowed, their text is ordinary text (tiktoken's disallowed_special=()).
 */
#ifndef MT_TEXT_H
#define MT_TEXT_H

#include <stdint.h>

#include "mt_core.h"
#include "mt_json.h" /* MtBuf */

/* ---- Unicode classes and the pre-tokenizer ---- */

enum { MT_UNI_OTHER, MT_UNI_LETTER, MT_UNI_NUMBER, MT_UNI_SPACE };
/* The class of code point cp. */
int mt_uni_class(uint32_t cp);
const char *mt_unicode_version(void);

/* The code point of the valid UTF-8 sequence at s[0..n) and its length in *len; -1 (and
 * *len 1) where s[0] does not start one (strict: no overlong forms, no surrogates, at most
 * U+10FFFF). */
int32_t mt_utf8_next(const unsigned char *s, int64_t n, int *len);

/* The end of the piece that starts at byte i of s[0..n): the pre-tokenizer's pieces are
 * [0, e1), [e1, e2), ... up to n.  s[0..n) is one text (its end is the pattern's end). */
int64_t mt_pretok_next(const unsigned char *s, int64_t n, int64_t i);

/* ---- byte-level BPE ---- */

typedef struct MtBpe MtBpe;

/* An empty vocabulary of room for n tokens. */
MtBpe *mt_bpe_new(int32_t n);
void mt_bpe_free(MtBpe *b);
/* Token `rank` is the bytes s[0..len).  MT_EINPUT on a duplicate string or rank. */
MtStatus mt_bpe_add(MtBpe *b, const unsigned char *s, int len, int32_t rank);
/* A special token: its text and id (outside the ranks). */
MtStatus mt_bpe_add_special(MtBpe *b, const char *text, int32_t id);
/* The rank of s[0..len), or -1. */
int32_t mt_bpe_rank(const MtBpe *b, const unsigned char *s, int len);
/* Tokens (ranks and specials' ids): the largest id + 1. */
int32_t mt_bpe_vocab(const MtBpe *b);

/* Token `id` as bytes (1), or 0 if it is no rank (a special, or a gap). */
int mt_bpe_token(const MtBpe *b, int32_t id, const unsigned char **bytes, int *len);
/* Special token i of mt_bpe_nspecial: its text, and its id in *id. */
int mt_bpe_nspecial(const MtBpe *b);
const char *mt_bpe_special(const MtBpe *b, int i, int32_t *id);
/* The merge that makes token `rank` (two bytes or more): BPE on its bytes with the ranks
 * below its own ends in two parts, *left and *right (tiktoken's converter recovers GPT-2's
 * merges so).  0 if it does not (the token is not reachable by merges). */
int mt_bpe_split(const MtBpe *b, int32_t rank, int32_t *left, int32_t *right);

/* Reads a tiktoken rank file (a line per token: its bytes in base64, a space, its rank),
 * then adds `<|endoftext|>` as the token after the last rank when with_eot (GPT-2's 50256).
 * MT_EINPUT "<path>:<line>: <problem>" on a malformed line, a duplicate, a missing rank. */
MtStatus mt_bpe_read_tiktoken(const char *path, int with_eot, MtBpe **out);

/* ---- Hugging Face's files (hf.c) ----
 * Token strings there are bytes through GPT-2's byte-to-character map (the printable
 * Latin-1 bytes stand for themselves, the other 68 for U+0100 onwards).  A vocabulary's
 * merged tokens must have ids in their merges' order (as GPT-2's and every file
 * `tokenizers`' BpeTrainer writes have): meshtrain merges by that order. */

/* tokenizer.json (BPE model, ByteLevel pre-tokenizer; merges as "a b" or ["a", "b"]; its
 * added tokens marked special become the specials).  MT_EINPUT "<path>: <problem>". */
MtStatus mt_bpe_read_hf(const char *path, MtBpe **out);
/* vocab.json + merges.txt (a "#version" first line is skipped; "# #" is a merge).  Errors
 * name the file and line. */
MtStatus mt_bpe_read_vocab_merges(const char *vocab, const char *merges, MtBpe **out);
/* A tokenizer from `path`: a tiktoken rank file (*.tiktoken, <|endoftext|> added after
 * its last rank), a tokenizer.json, or a directory holding tokenizer.json, else vocab.json
 * and merges.txt. */
MtStatus mt_bpe_load(const char *path, MtBpe **out);
/* Writes dir/tokenizer.json, vocab.json, merges.txt and tokenizer_config.json (the files
 * `transformers` loads; merges recovered by mt_bpe_split). */
MtStatus mt_bpe_write_hf(const MtBpe *b, const char *dir);
/* The same in two halves: the four files' texts (mt_hf_files' order) into memory, then
 * written into dir (which frees them). */
#define MT_HF_NFILES 4
extern const char *const mt_hf_files[MT_HF_NFILES];
MtStatus mt_bpe_render_hf(const MtBpe *b, MtBuf out[MT_HF_NFILES]);
/* The same with the merges given (pairs of ids, in their order) rather than recovered from
 * the ranks (the trainer's: mt_bpe_train). */
MtStatus mt_bpe_render_hf_merges(const MtBpe *b, const int32_t (*merges)[2], int nmerges, MtBuf out[MT_HF_NFILES]);
MtStatus mt_bpe_put_hf(MtBuf files[MT_HF_NFILES], const char *dir);

/* Token ids of text[0..n) into *ids (grown with realloc; *cap its room), specials as above;
 * returns their count. */
int64_t mt_bpe_encode(const MtBpe *b, const unsigned char *text, int64_t n, int allow_special, int32_t **ids,
                      int64_t *cap);
/* The same on `threads` threads: the text cut at points where a piece always ends whatever
 * comes before (a space after a character that is not white space, before a letter), each
 * part encoded alone: the same ids as one thread.  Once all are encoded they are handed
 * over a part at a time, take(take_arg, ids, count, at): `at` is the index of ids[0] among
 * all the ids, and several threads take parts at once (places apart).  side(side_arg), if
 * side is not NULL, runs once on one of the threads beside the parts (work that would
 * otherwise need a thread of its own and a core the parts use).  *ids (room *cap, grown) is
 * the scratch the parts write into: up to `threads` times the text's length.  Returns the
 * ids' count. */
typedef struct {
    int threads;
    void (*take)(void *take_arg, const int32_t *ids, int64_t count, int64_t at);
    void *take_arg;
    void (*side)(void *side_arg);
    void *side_arg;
} MtEncodeThreads;
int64_t mt_bpe_encode_threads(const MtBpe *b, const unsigned char *text, int64_t n, int allow_special,
                              const MtEncodeThreads *how, int32_t **ids, int64_t *cap);
/* The first point at or after i (n if none) where a piece always ends, whatever comes
 * before: text[j] a space after a character that is not white space, before a letter.  The
 * text before it and the text from it encode to the ids of the whole (a special token's
 * text holds no such point unless it holds a space). */
int64_t mt_bpe_cut_after(const unsigned char *text, int64_t n, int64_t i);
/* The ids of one piece (no specials, no splitting) appended to out[*k..]: out has room for
 * len ids. */
void mt_bpe_encode_piece(const MtBpe *b, const unsigned char *piece, int len, int32_t *out, int64_t *k);
/* The merge alone, in place (buckets 0, any length up to 64), the long pieces' (buckets 1), or
 * the long pieces' a window of `buckets` bytes at a time (buckets > 1; overlaps of a quarter of
 * it; encode's windows are 128 KiB): the same ids, every way (for the tests). */
void mt_bpe_merge(const MtBpe *b, const unsigned char *piece, int len, int buckets, int32_t *out, int64_t *k);
/* The bytes of ids[0..n) into *out (grown; *cap its room); returns their count, or -1 if an
 * id is not a token (its index in *bad). */
int64_t mt_bpe_decode(const MtBpe *b, const int32_t *ids, int64_t n, unsigned char **out, int64_t *cap,
                      int64_t *bad);

/* ---- training (bpe_train.c) ----
 * Byte-level BPE trained as Hugging Face tokenizers' BpeTrainer with a ByteLevel
 * pre-tokenizer (add_prefix_space false, its 256-byte initial alphabet) trains from files:
 * the same merges in the same order.  The input unit is the line (each text cut after
 * every '\n', which stays in its line), as its `train(files)` reads them; special tokens in
 * the text are text.  Ids: the specials in the order given, the 256 bytes in their
 * characters' code point order, then the merges' tokens.  Counting runs on `threads`
 * threads; the result does not depend on them. */
typedef struct {
    int32_t vocab_size;        /* specials + 256 + merged tokens at most (BpeTrainer's vocab_size) */
    int64_t min_frequency;     /* a best pair seen fewer times than this ends the merges */
    int threads;
    const char *const *special;
    int nspecial;
} MtBpeTrainOptions;

typedef struct {
    MtBpe *bpe;                /* the vocabulary: specials, bytes and merged tokens by id */
    int32_t (*merges)[2];      /* the merges as BpeTrainer writes them (pairs of ids) */
    int nmerges;
    int64_t words, pieces;     /* distinct words counted; pieces in the text */
    int64_t duplicates;        /* merges that made a token an earlier merge had made */
    int64_t repeated;          /* merges of a pair merged before (BpeTrainer keeps its last) */
} MtBpeTrained;

MtStatus mt_bpe_train(const unsigned char *const *texts, const int64_t *lens, int ntexts, const MtBpeTrainOptions *o,
                      MtBpeTrained *out);
void mt_bpe_trained_free(MtBpeTrained *t);

#endif
