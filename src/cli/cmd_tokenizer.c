/* cmd_tokenizer.c - meshtrain tokenizer train | import | encode | decode: a byte-level BPE
 * vocabulary trained from text or imported into Hugging Face's files, text to GPT-2 BPE
 * token ids and back (src/text, mt_text.h).  A
 * vocabulary is a tiktoken rank file (GPT-2's: scripts/get-gpt2-tokenizer.sh fetches it
 * through pip and checks its hash; its <|endoftext|> is the id after the last rank), a
 * tokenizer.json, or a directory holding tokenizer.json or vocab.json + merges.txt. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "flags.h"
#include "mt_cli.h"
#include "mt_fsutil.h"
#include "mt_mem.h"
#include "mt_text.h"

/* the whole of a file (mt_file_read), or of stdin for "-" */
static MtStatus read_all(const char *path, unsigned char **out, int64_t *n)
{
    if (strcmp(path, "-") != 0)
        return mt_file_read(path, out, n);
    FILE *f = stdin;
    int64_t cap = 1 << 16, len = 0;
    unsigned char *b = malloc((size_t)cap);
    for (;;) {
        if (!b)
            break;
        size_t got = fread(b + len, 1, (size_t)(cap - len), f);
        len += (int64_t)got;
        if (len < cap)
            break;
        cap *= 2;
        unsigned char *nb = realloc(b, (size_t)cap);
        if (!nb)
            free(b);
        b = nb;
    }
    int err = ferror(f);
    if (!b)
        return mt_error(MT_ENOMEM, "out of memory reading %s", path);
    if (err) {
        free(b);
        return mt_error(MT_EIO, "cannot read %s", path);
    }
    *out = b;
    *n = len;
    return MT_OK;
}

/* the encoder's take (MtEncodeThreads): the ids into place in the array at arg */
static void take_ids(void *arg, const int32_t *ids, int64_t n, int64_t at)
{
    memcpy((int32_t *)arg + at, ids, sizeof(int32_t) * (size_t)n);
}

static int format_of(const char *s)
{
    return strcmp(s, "text") == 0 ? 0 : strcmp(s, "u16") == 0 ? 2 : strcmp(s, "u32") == 0 ? 4 : -1;
}

/* the ids of a text ("1 2 3", any white space) or of little-endian u16/u32 words */
static MtStatus parse_ids(const unsigned char *in, int64_t n, int fmt, int32_t **ids, int64_t *count)
{
    int64_t cap = fmt ? n / fmt + 1 : n / 2 + 1, k = 0;
    int32_t *x = malloc(sizeof(int32_t) * (size_t)cap);
    if (!x)
        return mt_error(MT_ENOMEM, "out of memory for the ids");
    if (fmt) {
        if (n % fmt) {
            free(x);
            return mt_error(MT_EINPUT, "%lld bytes are not whole %d-byte ids", (long long)n, fmt);
        }
        for (int64_t i = 0; i < n; i += fmt)
            x[k++] = fmt == 2 ? (int32_t)(in[i] | in[i + 1] << 8)
                              : (int32_t)((uint32_t)in[i] | (uint32_t)in[i + 1] << 8 | (uint32_t)in[i + 2] << 16 |
                                          (uint32_t)in[i + 3] << 24);
    } else
        for (int64_t i = 0; i < n;) {
            if (in[i] == ' ' || in[i] == '\n' || in[i] == '\t' || in[i] == '\r') {
                i++;
                continue;
            }
            int64_t v = 0, j = i;
            while (j < n && in[j] >= '0' && in[j] <= '9' && v <= INT32_MAX)
                v = v * 10 + (in[j++] - '0');
            if (j == i || v > INT32_MAX || (j < n && !strchr(" \n\t\r", in[j]))) {
                free(x);
                return mt_error(MT_EINPUT, "not a token id at byte %lld", (long long)i);
            }
            x[k++] = (int32_t)v;
            i = j;
        }
    *ids = x;
    *count = k;
    return MT_OK;
}

/* tokenizer import: a vocabulary in, Hugging Face's four files out (a new directory,
 * written beside its place and renamed into it) */
static int import(int argc, char **argv)
{
    const char *from = NULL, *vocab = NULL, *merges = NULL, *out = NULL;
    int dry = 0, done;
    Flag flags[] = {
        {"from", FLAG_STR, &from, "a tiktoken rank file, a tokenizer.json, or a directory of either", "FILE"},
        {"vocab", FLAG_STR, &vocab, "vocab.json (with --merges, instead of --from)", "FILE"},
        {"merges", FLAG_STR, &merges, "merges.txt (with --vocab)", "FILE"},
        {"out", FLAG_STR, &out, "the directory to write (tokenizer.json, vocab.json, merges.txt, "
                                "tokenizer_config.json); must not exist", "DIR", FLAG_REQUIRED},
        {"dry-run", FLAG_BOOL, &dry, MT_HELP_DRY_RUN},
    };
    int n = (int)(sizeof flags / sizeof flags[0]);
    int rc = mt_cli_parse(flags, n, argc, argv, "tokenizer import",
                          "A vocabulary into the files transformers loads (byte-level BPE).", &done);
    if (done)
        return rc;
    if (!out || (!from == !(vocab && merges)) || (!vocab != !merges))
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain tokenizer import: give --out DIR and either --from FILE or "
                                    "--vocab FILE --merges FILE"));
    struct stat st;
    if (stat(out, &st) == 0)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain tokenizer import: %s already exists", out));
    MtBpe *b;
    MtStatus s = from ? mt_bpe_load(from, &b) : mt_bpe_read_vocab_merges(vocab, merges, &b);
    if (s != MT_OK)
        return mt_cli_fail(mt_error_prefix(s, "meshtrain tokenizer import"));
    if (dry) {
        mt_bpe_free(b);
        mt_flags_print(flags, n);
        return 0;
    }
    char tmp[4300];
    if ((s = mt_dir_stage(out, tmp, sizeof tmp)) == MT_OK) {
        if ((s = mt_bpe_write_hf(b, tmp)) == MT_OK)
            s = mt_dir_commit(tmp, out);
        else
            mt_dir_remove(tmp);
    }
    if (s == MT_OK)
        printf("imported %d tokens (%d special) into %s\n", mt_bpe_vocab(b), mt_bpe_nspecial(b), out);
    mt_bpe_free(b);
    return s == MT_OK ? 0 : mt_cli_fail(mt_error_prefix(s, "meshtrain tokenizer import"));
}

/* tokenizer train: a byte-level BPE vocabulary from text files, the merges tokenizers'
 * BpeTrainer makes (mt_bpe_train), into a new directory */
static int train(int argc, char **argv)
{
    FlagStrs inputs = {{0}, 0}, specials = {{0}, 0};
    const char *out = NULL;
    int vocab = 0, threads = 0, dry = 0, done;
    uint64_t minf = 0;
    Flag flags[] = {
        {"input", FLAG_STRS, &inputs, "text files, read as lines (each with its newline), as tokenizers' "
         "train(files) reads them", "FILE...", FLAG_REQUIRED},
        {"vocab-size", FLAG_INT, &vocab, "tokens in all: the special tokens, the 256 bytes and the merges' tokens",
         "N", FLAG_REQUIRED},
        {"out", FLAG_STR, &out, "the directory to write (tokenizer.json, vocab.json, merges.txt, "
                                "tokenizer_config.json); must not exist", "DIR", FLAG_REQUIRED},
        {"special", FLAG_STRS, &specials, "special tokens, given ids 0, 1, .. in this order (none by default; "
         "GPT-2's is <|endoftext|>)", "TOKEN..."},
        {"min-frequency", FLAG_U64, &minf, "the merges stop at a best pair seen fewer times than this"},
        {"threads", FLAG_INT, &threads, "threads that count the words; the merges do not depend on it (0: "
         "OMP_NUM_THREADS if set, else this machine's cores)"},
        {"dry-run", FLAG_BOOL, &dry, MT_HELP_DRY_RUN},
    };
    int n = (int)(sizeof flags / sizeof flags[0]);
    int rc = mt_cli_parse(flags, n, argc, argv, "tokenizer train",
                          "A byte-level BPE vocabulary trained on text (the merges of Hugging Face tokenizers' "
                          "BpeTrainer).", &done);
    if (done)
        return rc;
    const char *cmd = "meshtrain tokenizer train";
    if (!inputs.n || !out || vocab == 0)
        return mt_cli_fail(mt_error(MT_EINPUT, "%s: --input FILE..., --vocab-size N and --out DIR are required", cmd));
    if (vocab < specials.n + 256 || vocab > (1 << 24))
        return mt_cli_fail(mt_error(MT_EINPUT, "%s: --vocab-size %d must be from %d (the %d special tokens and the 256 "
                                    "bytes) to 16777216", cmd, vocab, specials.n + 256, specials.n));
    for (int i = 0; i < specials.n; i++) {
        if (!specials.v[i][0])
            return mt_cli_fail(mt_error(MT_EINPUT, "%s: --special: a special token cannot be empty", cmd));
        for (int j = 0; j < i; j++)
            if (strcmp(specials.v[i], specials.v[j]) == 0)
                return mt_cli_fail(mt_error(MT_EINPUT, "%s: --special %s is given twice", cmd, specials.v[i]));
    }
    if ((threads = mt_cli_threads(threads, 1)) < 1)
        return mt_cli_fail(mt_error(MT_EINPUT, "%s: --threads must be >= 0", cmd));
    struct stat st;
    if (stat(out, &st) == 0)
        return mt_cli_fail(mt_error(MT_EINPUT, "%s: %s already exists", cmd, out));
    unsigned char *texts[FLAG_STRS_MAX] = {0};
    int64_t lens[FLAG_STRS_MAX] = {0}, total = 0;
    MtStatus s = MT_OK;
    for (int i = 0; s == MT_OK && i < inputs.n; i++)
        if ((s = mt_file_read(inputs.v[i], &texts[i], &lens[i])) == MT_OK)
            total += lens[i];
    if (s == MT_OK && dry) {
        mt_flags_print(flags, n);
        for (int i = 0; i < inputs.n; i++)
            free(texts[i]);
        return 0;
    }
    MtBpeTrained t;
    MtBpeTrainOptions o = {vocab, (int64_t)minf, threads, specials.v, specials.n};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (s == MT_OK)
        s = mt_bpe_train((const unsigned char *const *)texts, lens, inputs.n, &o, &t);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    for (int i = 0; i < inputs.n; i++)
        free(texts[i]);
    if (s != MT_OK)
        return mt_cli_fail(mt_error_prefix(s, "%s", cmd));
    char tmp[4300];
    MtBuf files[MT_HF_NFILES];
    if ((s = mt_bpe_render_hf_merges(t.bpe, t.merges, t.nmerges, files)) == MT_OK &&
        (s = mt_dir_stage(out, tmp, sizeof tmp)) == MT_OK) {
        if ((s = mt_bpe_put_hf(files, tmp)) == MT_OK)
            s = mt_dir_commit(tmp, out);
        else
            mt_dir_remove(tmp);
    } else if (s == MT_OK)
        for (int i = 0; i < MT_HF_NFILES; i++)
            mt_buf_free(&files[i]);
    if (s == MT_OK)
        printf("trained %d tokens (%d special, 256 bytes, %d merges%s) on %.1f MB: %lld pieces, %lld distinct, on %d "
               "thread%s in %.2f s: %s\n", mt_bpe_vocab(t.bpe), specials.n, t.nmerges,
               t.duplicates ? ", some making a token again" : "", (double)total / 1e6, (long long)t.pieces,
               (long long)t.words, threads, threads > 1 ? "s" : "",
               (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec), out);
    mt_bpe_trained_free(&t);
    return s == MT_OK ? 0 : mt_cli_fail(mt_error_prefix(s, "%s", cmd));
}

int mt_cmd_tokenizer(int argc, char **argv)
{
    const char *sub = argc > 0 ? argv[0] : "";
    int encode = strcmp(sub, "encode") == 0;
    if (strcmp(sub, "import") == 0)
        return import(argc - 1, argv + 1);
    if (strcmp(sub, "train") == 0)
        return train(argc - 1, argv + 1);
    if (!encode && strcmp(sub, "decode") != 0) {
        if (strcmp(sub, "--help") != 0 && strcmp(sub, "-h") != 0)
            return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain tokenizer: '%s' is not a subcommand (train, import, "
                                        "encode or decode; meshtrain tokenizer --help)", sub));
        printf("usage: meshtrain tokenizer train|import|encode|decode [flags]   (meshtrain tokenizer SUB --help: its "
               "flags)\n"
               "  train    a byte-level BPE vocabulary from text files (the merges of tokenizers' BpeTrainer)\n"
               "  import   a vocabulary (tiktoken ranks, tokenizer.json, vocab.json + merges.txt) into the files\n"
               "           transformers loads\n"
               "  encode   text (UTF-8 or any bytes) to GPT-2 byte-level BPE token ids\n"
               "  decode   token ids back to the bytes\n");
        return 0;
    }
    const char *tok = NULL, *input = "-", *out = "-", *format = "text";
    int no_special = 0, dry = 0, done, threads = 0;
    Flag flags[] = {
        {"tokenizer", FLAG_STR, &tok, "the vocabulary: a directory (tokenizer.json, or vocab.json + merges.txt), a "
         "tokenizer.json, or a tiktoken rank file (GPT-2's: scripts/get-gpt2-tokenizer.sh)", "PATH", 1},
        {"input", FLAG_STR, &input, encode ? "the text (-: standard input)" : "the ids (-: standard input)", "FILE"},
        {"out", FLAG_STR, &out, encode ? "the ids (-: standard output)" : "the bytes (-: standard output)", "FILE"},
        {"format", FLAG_STR, &format, "ids as text (decimal, one space between, one line), u16 or u32 (little-endian)",
         "text|u16|u32"},
        {"no-special", FLAG_BOOL, &no_special,
         "encode the text of <|endoftext|> as text (tiktoken's disallowed_special=()); by default it is the token"},
        {"threads", FLAG_INT, &threads, "threads that encode (the text cut where a piece always ends); the ids do not "
         "depend on it (0: OMP_NUM_THREADS if set, else this machine's cores)"},
        {"dry-run", FLAG_BOOL, &dry, MT_HELP_DRY_RUN},
    };
    int n = (int)(sizeof flags / sizeof flags[0]);
    if (!encode) { /* --no-special and --threads are encode's: --dry-run takes their place */
        flags[n - 3] = flags[n - 1];
        n -= 2;
    }
    char cmd[32];
    snprintf(cmd, sizeof cmd, "tokenizer %s", sub);
    int rc = mt_cli_parse(flags, n, argc - 1, argv + 1, cmd,
                          encode ? "Text to GPT-2 byte-level BPE token ids (exactly tiktoken's on valid UTF-8)."
                                 : "Token ids back to the bytes of their text.",
                          &done);
    if (done)
        return rc;
    int fmt = format_of(format);
    if (!tok)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain %s: --tokenizer FILE is required", cmd));
    if (fmt < 0)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain %s: --format %s is not text, u16 or u32", cmd, format));
    if ((threads = mt_cli_threads(threads, 1)) < 1)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain %s: --threads must be >= 0", cmd));
    MtBpe *b;
    MtStatus s = mt_bpe_load(tok, &b);
    if (s != MT_OK)
        return mt_cli_fail(mt_error_prefix(s, "meshtrain tokenizer"));
    if (fmt == 2 && mt_bpe_vocab(b) > 65536) {
        mt_bpe_free(b);
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain %s: %d tokens do not fit u16", cmd, mt_bpe_vocab(b)));
    }
    if (dry) {
        mt_bpe_free(b);
        mt_flags_print(flags, n);
        return 0;
    }
    unsigned char *in = NULL;
    int64_t len = 0;
    if ((s = read_all(input, &in, &len)) != MT_OK) {
        mt_bpe_free(b);
        return mt_cli_fail(mt_error_prefix(s, "meshtrain tokenizer"));
    }
    int32_t *ids = NULL;
    int64_t nids = 0, cap = 0;
    unsigned char *bytes = NULL;
    int64_t nbytes = 0;
    if (encode && threads == 1)
        nids = mt_bpe_encode(b, in, len, !no_special, &ids, &cap);
    else if (encode) { /* the ids gathered from the parts' scratch into their own array */
        int32_t *scratch = NULL;
        int64_t scap = 0;
        ids = mt_mem_host_reserve(sizeof(int32_t) * (size_t)(len > 0 ? len : 1));
        MT_ASSERT(ids, "out of memory for %lld token ids", (long long)len);
        MtEncodeThreads how = {threads, take_ids, ids, NULL, NULL};
        nids = mt_bpe_encode_threads(b, in, len, !no_special, &how, &scratch, &scap);
        free(scratch);
    } else {
        if ((s = parse_ids(in, len, fmt, &ids, &nids)) == MT_OK) {
            int64_t bad;
            nbytes = mt_bpe_decode(b, ids, nids, &bytes, &cap, &bad);
            if (nbytes < 0)
                s = mt_error(MT_EINPUT, "%s: id %d (the %lld-th) is not a token of %s", input, ids[bad],
                             (long long)bad + 1, tok);
        }
    }
    free(in);
    FILE *f = s != MT_OK ? NULL : strcmp(out, "-") == 0 ? stdout : fopen(out, "wb");
    if (s == MT_OK && !f)
        s = mt_error(MT_EINPUT, "cannot write %s: %s", out, strerror(errno));
    if (s == MT_OK && encode) { /* the ids formatted into one buffer, written at once */
        unsigned char *buf = malloc((size_t)(nids > 0 ? nids : 1) * 12 + 1);
        int64_t k = 0;
        for (int64_t i = 0; buf && i < nids; i++) {
            uint32_t v = (uint32_t)ids[i];
            if (fmt) {
                for (int j = 0; j < fmt; j++)
                    buf[k++] = (unsigned char)(v >> (8 * j));
                continue;
            }
            char d[12];
            int nd = 0;
            do
                d[nd++] = (char)('0' + v % 10);
            while ((v /= 10) > 0);
            if (i)
                buf[k++] = ' ';
            while (nd)
                buf[k++] = (unsigned char)d[--nd];
        }
        if (buf && !fmt)
            buf[k++] = '\n';
        if (!buf || fwrite(buf, 1, (size_t)k, f) != (size_t)k)
            s = mt_error(MT_EIO, "cannot write %s", out);
        free(buf);
    } else if (s == MT_OK)
        fwrite(bytes, 1, (size_t)nbytes, f);
    if (f && ((f != stdout && fclose(f) != 0) || (f == stdout && fflush(f) != 0)))
        s = mt_error(MT_EIO, "cannot write %s", out);
    free(ids);
    free(bytes);
    mt_bpe_free(b);
    return s == MT_OK ? 0 : mt_cli_fail(mt_error_prefix(s, "meshtrain tokenizer"));
}
