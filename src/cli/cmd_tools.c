/* cmd_tools.c - `meshtrain prepare`, `eval`, `sample`, `bench`, and shared set-up. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flags.h"
#include "mt_checkpoint.h"
#include "mt_cli.h"
#include "mt_fsutil.h"
#include "mt_text.h"
#include "mt_gemm.h"
#include "mt_kernels.h"
#include "mt_backend.h"
#include "mt_launch.h"
#include "mt_rng.h"
#include "mt_train.h"

/* OMP_NUM_THREADS, when set, is the default thread count (as in PyTorch and every OpenMP
 * program; "4,2", OpenMP's nested form, gives its first level).  0 when unset or malformed:
 * a malformed value is ignored, as OpenMP runtimes do (libgomp, loaded with BLIS, warns). */
static int env_threads(void)
{
    const char *v = getenv("OMP_NUM_THREADS");
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || end == v || (*end && *end != ',') || n < 1 || n > 4096)
        return 0;
    return (int)n;
}

int mt_cli_threads(int threads, int local_ranks)
{
    if (threads == 0)
        threads = env_threads();
    if (threads == 0) { /* the machine's cores, shared by the job's ranks on it */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > 0 ? (int)cores / (local_ranks > 0 ? local_ranks : 1) : 1;
        threads = threads > 0 ? threads : 1;
    }
    return threads;
}

int mt_cli_setup_threads(int threads, const char *cmd)
{
    if (threads < 0)
        return mt_error(MT_EINPUT, "meshtrain %s: --threads %d must be >= 0", cmd, threads), -1;
    threads = mt_cli_threads(threads, mt_local_ranks());
    mt_gemm_setup(threads);
    mt_kernels_set_threads(threads);
    return threads;
}

static int comm_up; /* set once the ranks can talk: from then on each rank reports its own errors */

void mt_cli_comm_up(void)
{
    comm_up = 1;
}

/* Before MPI starts, every rank of an `mpirun -np N` job checks the same input and reaches
 * the same verdict: rank 0 prints it, and mpirun ends the job when rank 0 exits.  Another
 * rank waits a moment first; if it is still running, rank 0 did not fail (the ranks see
 * different files), so it speaks for itself. */
static int quiet_rank(void)
{
    if (comm_up || !mt_launched_by_mpi() || mt_launch_rank() == 0)
        return 0;
    sleep(5);
    return 1;
}

int mt_cli_fail(int status)
{
    if (quiet_rank())
        fprintf(stderr, "%s (rank %d)\n", mt_error_msg(), mt_launch_rank());
    else
        fprintf(stderr, "%s\n", mt_error_msg());
    return mt_exit_code((MtStatus)status);
}

int mt_cli_parse(Flag *f, int n, int argc, char **argv, const char *cmd, const char *summary, int *done)
{
    int help;
    *done = 1;
    MtStatus s = mt_flags_parse(f, n, argc, argv, cmd, &help);
    if (s != MT_OK)
        return mt_cli_fail(s);
    if (help) {
        if (!mt_launched_by_mpi() || mt_launch_rank() == 0)
            mt_flags_usage(f, n, cmd, summary);
        return 0;
    }
    *done = 0;
    return 0;
}

/* ---- prepare ---- */


/* ---- prepare: the inputs read and encoded a chunk at a time ---- */

/* the output's tokens, packed in the token file's width (mt_tokens_width) */
typedef struct {
    unsigned char *p;
    int64_t n, cap;
    int w;
} Packed;

/* room in o for n more tokens */
static int room(Packed *o, int64_t n)
{
    if ((o->n + n) * o->w > o->cap) {
        int64_t cap = o->cap ? o->cap : 1 << 20;
        while (cap < (o->n + n) * o->w)
            cap *= 2;
        unsigned char *p = realloc(o->p, (size_t)cap);
        if (!p)
            return 0;
        o->p = p;
        o->cap = cap;
    }
    return 1;
}

/* n tokens (ids, or else bytes) written at d, w bytes each, little-endian whatever
 * the machine's order (a loop per width) */
static void pack_at(unsigned char *d, int w, const int32_t *ids, const unsigned char *bytes, int64_t n)
{
#define PACK(W)                                                 \
    for (int64_t i = 0; i < n; i++) {                           \
        uint32_t v = ids ? (uint32_t)ids[i] : bytes[i];         \
        for (int j = 0; j < (W); j++)                           \
            d[i * (W) + j] = (unsigned char)(v >> (8 * j));     \
    }
    if (w == 1)
        PACK(1)
    else if (w == 2)
        PACK(2)
    else
        PACK(4)
#undef PACK
}

/* n tokens (ids, or else bytes) appended to o */
static int pack(Packed *o, const int32_t *ids, const unsigned char *bytes, int64_t n)
{
    if (!room(o, n))
        return 0;
    pack_at(o->p + o->n * o->w, o->w, ids, bytes, n);
    o->n += n;
    return 1;
}

/* the encoder's take (MtEncodeThreads): ids packed at their place after o's n tokens (room
 * made first; o->n moves once all are taken) */
static void take_packed(void *arg, const int32_t *ids, int64_t n, int64_t at)
{
    Packed *o = arg;
    pack_at(o->p + (o->n + at) * o->w, o->w, ids, NULL, n);
}

/* DIR/tokenizer, made beside the encoding: the files rendered on one of its threads (the
 * first chunk's side job), then written into a staging directory beside DIR and made
 * durable on a thread of their own (its fsyncs wait for the disk, not a core); once the
 * tokens are written, the staging directory is committed into place (or removed) */
typedef struct {
    const MtBpe *bpe;
    MtBuf files[MT_HF_NFILES];
    char dir[4300], near[4300]; /* DIR/tokenizer; what the staging directory is named after: DIR/tokenizer if DIR
                                 * exists, else DIR.tokenizer beside it (DIR is made once the tokens are) */
    char stage[4400];           /* the staging directory ("": none made) */
    MtStatus s;
    int rendered, writing;
    pthread_t writer;
    char msg[1024]; /* the error, said again on the thread that reports it */
} TokDir;

static void *tokdir_write(void *arg)
{
    TokDir *t = arg;
    if ((t->s = mt_bpe_put_hf(t->files, t->stage)) == MT_OK)
        t->s = mt_dir_sync(t->stage);
    if (t->s != MT_OK)
        snprintf(t->msg, sizeof t->msg, "%s", mt_error_msg());
    return NULL;
}

static void tokdir_render(void *arg)
{
    TokDir *t = arg;
    t->rendered = 1;
    if ((t->s = mt_bpe_render_hf(t->bpe, t->files)) != MT_OK ||
        (t->s = mt_dir_stage(t->near, t->stage, sizeof t->stage)) != MT_OK) {
        t->stage[0] = 0;
        snprintf(t->msg, sizeof t->msg, "%s", mt_error_msg());
        return;
    }
    t->writing = pthread_create(&t->writer, NULL, tokdir_write, t) == 0;
    if (!t->writing)
        tokdir_write(t);
}

/* DIR/tokenizer's end: waits for its writer, then commits it into place (commit 1) or
 * removes the staging directory; its status */
static MtStatus tokdir_end(TokDir *t, int commit)
{
    if (t->writing)
        pthread_join(t->writer, NULL);
    t->writing = 0;
    MtStatus s = t->s != MT_OK ? mt_error(t->s, "%s", t->msg) : MT_OK;
    if (s == MT_OK && commit && t->stage[0])
        s = mt_dir_commit(t->stage, t->dir);
    else if (t->stage[0])
        mt_dir_remove(t->stage);
    t->stage[0] = 0;
    for (int i = 0; i < MT_HF_NFILES; i++) /* (put frees them; freed twice is a no-op) */
        mt_buf_free(&t->files[i]);
    return s;
}

/* The tokens of the inputs in order into out: each read `chunk` bytes at a time; with a
 * vocabulary, a chunk is encoded (on `threads`) up to the last point where a piece always
 * ends (mt_bpe_cut_after) and the rest carried into the next, so the ids are those of the
 * whole text.  With <|endoftext|> (eot >= 0) each file's text ends at its end and the token
 * follows it; without, the files are one text.  Memory: a chunk of text and its ids, and
 * the packed output, whatever the inputs' sizes. */
static MtStatus encode_inputs(const FlagStrs *in, const MtBpe *bpe, int32_t eot, int threads, int64_t chunk,
                              TokDir *tokdir, Packed *out)
{
    unsigned char *buf = NULL;
    int32_t *ids = NULL;
    int64_t len = 0, cap = 0, icap = 0;
    MtStatus s = MT_OK;
    for (int i = 0; s == MT_OK && i < in->n; i++) {
        FILE *f = fopen(in->v[i], "rb");
        struct stat st;
        if (!f) {
            s = mt_error(MT_EINPUT, "cannot open %s: %s", in->v[i], strerror(errno));
            break;
        }
        if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
            fclose(f);
            s = mt_error(MT_EINPUT, "%s is not a regular file", in->v[i]);
            break;
        }
        for (int eof = 0; s == MT_OK && !eof;) {
            if (len + chunk > cap) { /* in huge pages: a first touch of 4 KiB pages costs more than reading */
                unsigned char *b = mt_mem_host_reserve((size_t)(len + chunk));
                if (!b) {
                    s = mt_error(MT_ENOMEM, "out of memory reading %s", in->v[i]);
                    break;
                }
                if (len)
                    memcpy(b, buf, (size_t)len);
                free(buf);
                buf = b;
                cap = len + chunk;
            }
            int64_t r = (int64_t)fread(buf + len, 1, (size_t)(cap - len), f);
            if (ferror(f)) {
                s = mt_error(MT_EINPUT, "cannot read %s", in->v[i]);
                break;
            }
            len += r;
            eof = feof(f);
            int last = eof && (i == in->n - 1 || eot >= 0); /* the text ends here */
            int64_t cut = len;
            if (!bpe) {
                if (!pack(out, NULL, buf, len))
                    s = mt_error(MT_ENOMEM, "out of memory for the tokens");
                len = 0;
                continue;
            }
            if (!last && (cut = mt_bpe_cut_after(buf, len, len - (len < 2 * chunk ? len : 2 * chunk) / 4)) == len)
                continue; /* no cut point yet: read more */
            MtEncodeThreads how = {threads, take_packed, out, tokdir && !tokdir->rendered ? tokdir_render : NULL,
                                   tokdir};
            if (!room(out, cut)) { /* an id a byte at most */
                s = mt_error(MT_ENOMEM, "out of memory for the tokens");
                break;
            }
            out->n += mt_bpe_encode_threads(bpe, buf, cut, 1, &how, &ids, &icap);
            if (last && eot >= 0 && i < in->n - 1 && !pack(out, &eot, NULL, 1))
                s = mt_error(MT_ENOMEM, "out of memory for the tokens");
            memmove(buf, buf + cut, (size_t)(len - cut));
            len -= cut;
        }
        fclose(f);
    }
    free(buf);
    free(ids);
    return s;
}

int mt_cmd_prepare(int argc, char **argv)
{
    FlagStrs inputs = {{0}, 0};
    const char *out = NULL, *tokenizer = NULL;
    float val_frac = 0.1f;
    int force = 0, dry = 0, done, threads = 0, read_mb = 16;
    Flag flags[] = {
        {"input", FLAG_STRS, &inputs, "text files (UTF-8 or any bytes), in this order: with --tokenizer, documents "
         "separated by <|endoftext|> where the vocabulary has it; without, joined as they are", "FILE...", 1},
        {"out", FLAG_STR, &out, "output directory (created)", "DIR", 1},
        {"tokenizer", FLAG_STR, &tokenizer, "byte-level BPE vocabulary (a directory, a tokenizer.json or a tiktoken rank "
         "file: meshtrain tokenizer): GPT-2 tokens, the tokenizer's files copied into DIR/tokenizer; not given: one "
         "token per byte", "PATH"},
        {"val-frac", FLAG_FLOAT, &val_frac, "last fraction of the text kept for validation (val.bin)"},
        {"force", FLAG_BOOL, &force, "replace existing train.bin / val.bin"},
        {"read-mb", FLAG_INT, &read_mb, "MiB of text read and encoded at a time: the memory beside the tokens, "
         "whatever the inputs' size (the tokens do not depend on it)", "N"},
        {"threads", FLAG_INT, &threads, "threads that encode with --tokenizer; the ids do not depend on it (0: "
         "OMP_NUM_THREADS if set, else this machine's cores)"},
        {"dry-run", FLAG_BOOL, &dry, MT_HELP_DRY_RUN},
    };
    int n = (int)(sizeof flags / sizeof flags[0]);
    int rc = mt_cli_parse(flags, n, argc, argv, "prepare",
                           "Tokenize a text file (bytes, or byte-level BPE) into DIR/train.bin and DIR/val.bin.", &done);
    if (done)
        return rc;
    const char *input = inputs.n ? inputs.v[0] : NULL;
    if (!input || !out)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain prepare: --input TEXT and --out DIR are required"));
    if (!(val_frac > 0.0f && val_frac < 1.0f))
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain prepare: --val-frac %g must be between 0 and 1", val_frac));
    if (read_mb < 1 || read_mb > 4096)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain prepare: --read-mb %d must be from 1 to 4096", read_mb));
    char tpath[4200], vpath[4200], tmp[4300];
    snprintf(tpath, sizeof tpath, "%s/train.bin", out);
    snprintf(vpath, sizeof vpath, "%s/val.bin", out);
    struct stat ost;
    if (lstat(out, &ost) == 0 && !S_ISDIR(ost.st_mode))
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain prepare: --out %s exists and is not a directory", out));
    if (!force && (access(tpath, F_OK) == 0 || access(vpath, F_OK) == 0))
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain prepare: %s already holds train.bin or val.bin "
                                    "(use --force to replace them)", out));
    MtBpe *bpe = NULL;
    MtStatus s;
    if ((threads = mt_cli_threads(threads, 1)) < 1)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain prepare: --threads must be >= 0"));
    if (tokenizer && (s = mt_bpe_load(tokenizer, &bpe)) != MT_OK)
        return mt_cli_fail(mt_error_prefix(s, "meshtrain prepare"));
    if (dry) {
        mt_bpe_free(bpe);
        for (int i = 0; i < inputs.n; i++)
            if (access(inputs.v[i], R_OK) != 0)
                return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain prepare: cannot read --input %s: %s", inputs.v[i],
                                            strerror(errno)));
        mt_flags_print(flags, n);
        return 0;
    }
    int32_t eot = -1; /* the documents' separator: the vocabulary's <|endoftext|> */
    for (int i = 0; bpe && i < mt_bpe_nspecial(bpe); i++) {
        int32_t id;
        if (strcmp(mt_bpe_special(bpe, i, &id), "<|endoftext|>") == 0)
            eot = id;
    }
    uint32_t vocab = bpe ? (uint32_t)mt_bpe_vocab(bpe) : MT_BYTE_VOCAB;
    Packed tok = {NULL, 0, 0, mt_tokens_width(vocab)};
    int64_t most = inputs.n; /* tokens: at most one a byte, and the separators */
    for (int i = 0; i < inputs.n; i++) {
        struct stat st;
        most += stat(inputs.v[i], &st) == 0 ? (int64_t)st.st_size : 0;
    }
    /* reserved at once: pages the tokens never reach are never touched (no memory), and the
     * output is not copied as it grows */
    if ((tok.p = mt_mem_host_reserve((size_t)(most * tok.w + 1))))
        tok.cap = most * tok.w + 1;
    TokDir td = {.bpe = bpe, .s = MT_OK};
    snprintf(td.dir, sizeof td.dir, "%s/tokenizer", out);
    size_t ol = strlen(out);
    while (ol > 1 && out[ol - 1] == '/')
        ol--;
    if (mt_path_exists(out))
        snprintf(td.near, sizeof td.near, "%s", td.dir);
    else
        snprintf(td.near, sizeof td.near, "%.*s.tokenizer", (int)ol, out);
    s = encode_inputs(&inputs, bpe, eot, threads, (int64_t)read_mb << 20, bpe ? &td : NULL, &tok);
    int64_t ntok = tok.n, nval = (int64_t)(ntok * (double)val_frac);
    if (bpe && s == MT_OK && !td.rendered && ntok >= 64 && nval >= 2) /* (a text too short for parts) */
        tokdir_render(&td);
    if (bpe && s == MT_OK && td.s != MT_OK) /* a vocabulary whose merges cannot be written, or no room */
        s = tokdir_end(&td, 0);
    int ok = s == MT_OK && ntok >= 64 && nval >= 2 && (mkdir(out, 0777) == 0 || errno == EEXIST);
    if (!ok) {
        s = s != MT_OK              ? mt_error_prefix(s, "meshtrain prepare")
            : ntok < 64 || nval < 2 ? mt_error(MT_EINPUT, "meshtrain prepare: %s%s is too short (%lld tokens)", input,
                                               inputs.n > 1 ? " and the rest" : "", (long long)ntok)
                                    : mt_error(MT_EINPUT, "meshtrain prepare: cannot create %s: %s", out,
                                               strerror(errno));
        if (bpe) { /* (its staging directory removed: the message said again after) */
            char why[1024];
            snprintf(why, sizeof why, "%s", mt_error_msg());
            tokdir_end(&td, 0);
            s = mt_error(s, "%s", why);
        }
        free(tok.p);
        mt_bpe_free(bpe);
        return mt_cli_fail(s);
    }
    /* each token file is written beside its final name and renamed into place */
    snprintf(tmp, sizeof tmp, "%s.tmp", tpath);
    if ((s = mt_tokens_write_packed(tmp, tok.p, ntok - nval, vocab)) == MT_OK && rename(tmp, tpath) != 0)
        s = mt_error(MT_EIO, "cannot rename %s: %s", tmp, strerror(errno));
    snprintf(tmp, sizeof tmp, "%s.tmp", vpath);
    if (s == MT_OK && (s = mt_tokens_write_packed(tmp, tok.p + (ntok - nval) * tok.w, nval, vocab)) == MT_OK &&
        rename(tmp, vpath) != 0)
        s = mt_error(MT_EIO, "cannot rename %s: %s", tmp, strerror(errno));
    free(tok.p);
    /* the tokenizer goes with the tokens: DIR/tokenizer, replaced */
    if (bpe) {
        MtStatus st = tokdir_end(&td, s == MT_OK);
        s = s == MT_OK ? st : s;
    }
    mt_bpe_free(bpe);
    if (s != MT_OK)
        return mt_cli_fail(s);
    if (vocab == MT_BYTE_VOCAB && !tokenizer)
        printf("prepared %s: %lld train tokens, %lld val tokens (byte-level, vocab 256)\n", out,
               (long long)(ntok - nval), (long long)nval);
    else
        printf("prepared %s: %lld train tokens, %lld val tokens (byte-level BPE, vocab %u, tokenizer in %s)\n", out,
               (long long)(ntok - nval), (long long)nval, vocab, td.dir);
    return 0;
}

/* ---- loading a checkpoint for eval and sample ---- */

/* The checkpoint's BPE tokenizer (its tokenizer.json: train wrote it from the data's), or
 * NULL and MT_OK for a byte-level checkpoint. */
static MtStatus ckpt_tokenizer(const char *ckpt, MtBpe **out)
{
    char path[4200];
    *out = NULL;
    snprintf(path, sizeof path, "%s/tokenizer.json", ckpt);
    return access(path, F_OK) == 0 ? mt_bpe_load(path, out) : MT_OK;
}

static MtStatus load_model(const char *dir, int micro, int seq, MtTrainer *tr)
{
    MtTrainConfig tc = {0};
    MT_TRY(mt_ckpt_read_config(dir, &tc.cfg));
    if (seq <= 0)
        seq = tc.cfg.T;
    if (seq > tc.cfg.T)
        return mt_error(MT_EINPUT, "--seq-len %d is longer than the checkpoint's context length %d", seq,
                        tc.cfg.T);
    tc.batch = tc.micro = micro;
    tc.seq = seq;
    tc.threads = mt_kernels_threads();
    tc.oc = (MtOptimConfig){.lr = 0, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
    tc.inference = 1; /* no gradients, no optimizer state */
    MT_TRY(mt_ckpt_check_shapes(dir, &tc.cfg, 0));
    MT_TRY(mt_trainer_init(tr, &tc));
    MtStatus s = mt_ckpt_load_params(dir, tr->table, tr->nparams, tr->params);
    if (s != MT_OK)
        mt_trainer_free(tr);
    return s;
}

int mt_cmd_eval(int argc, char **argv)
{
    const char *ckpt = NULL, *data = NULL, *text = NULL;
    int seq = 0, batch = 8, max_batches = 0, threads = 0, dry = 0, done;
    Flag flags[] = {
        {"ckpt", FLAG_STR, &ckpt, "checkpoint directory", "DIR", 1},
        {"data", FLAG_STR, &data, "token file (this or --text)", "FILE"},
        {"text", FLAG_STR, &text, "plain text file, tokenized with the checkpoint's tokenizer (this or --data)", "FILE"},
        {"seq-len", FLAG_INT, &seq, "window length T (0: the checkpoint's context length)"},
        {"batch-size", FLAG_INT, &batch, "windows per forward pass (the loss does not depend on it)"},
        {"max-batches", FLAG_INT, &max_batches, "at most this many batches, the first windows (0: every window)"},
        {"threads", FLAG_INT, &threads, MT_HELP_THREADS},
        {"dry-run", FLAG_BOOL, &dry, MT_HELP_DRY_RUN},
    };
    int n = (int)(sizeof flags / sizeof flags[0]);
    int rc = mt_cli_parse(flags, n, argc, argv, "eval",
                           "Mean next-token cross-entropy over windows i = 0, 1, ... of length T.", &done);
    if (done)
        return rc;
    if (!ckpt || (!data == !text))
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain eval: --ckpt DIR and exactly one of --data or --text are required"));
    if (batch < 1 || max_batches < 0 || seq < 0 || threads < 0)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain eval: --batch-size must be >= 1, other counts >= 0"));
    if ((threads = mt_cli_setup_threads(threads, "eval")) < 0)
        return mt_cli_fail(MT_EINPUT);
    MtTokens tok = {0};
    MtStatus s;
    MtBpe *bpe = NULL;
    if (data) {
        s = mt_tokens_read(data, &tok);
    } else if ((s = ckpt_tokenizer(ckpt, &bpe)) == MT_OK) { /* the checkpoint's tokenizer (or bytes) */
        unsigned char *bytes;
        int64_t len, cap = 0;
        if ((s = mt_file_read(text, &bytes, &len)) == MT_OK) {
            if (bpe) {
                tok.count = mt_bpe_encode(bpe, bytes, len, 1, &tok.tok, &cap);
                tok.vocab = (uint32_t)mt_bpe_vocab(bpe);
            } else if ((tok.tok = malloc(sizeof(int32_t) * (size_t)(len ? len : 1)))) {
                mt_bytes_encode(bytes, len, tok.tok);
                tok.count = len;
                tok.vocab = MT_BYTE_VOCAB;
            } else
                s = mt_error(MT_ENOMEM, "out of memory");
            free(bytes);
        }
        mt_bpe_free(bpe);
    }
    if (s != MT_OK)
        return mt_cli_fail(mt_error_prefix(s, "meshtrain eval"));
    MtTrainer tr;
    if ((s = load_model(ckpt, batch, seq, &tr)) != MT_OK) {
        mt_tokens_free(&tok);
        return mt_cli_fail(mt_error_prefix(s, "meshtrain eval"));
    }
    int T = tr.tc.seq;
    int64_t nwin = tok.count > 0 ? (tok.count - 1) / T : 0;
    if (max_batches > 0 && nwin > (int64_t)max_batches * batch)
        nwin = (int64_t)max_batches * batch;
    if ((int64_t)tok.vocab > tr.tc.cfg.V)
        rc = mt_cli_fail(mt_error(MT_EINPUT, "meshtrain eval: the data's vocabulary (%u) is larger than the model's (%d)",
                                  tok.vocab, tr.tc.cfg.V));
    else if (nwin < 1)
        rc = mt_cli_fail(mt_error(MT_EINPUT, "meshtrain eval: %lld tokens are fewer than one window of %d + 1",
                                  (long long)tok.count, T));
    else if (dry) {
        seq = T;
        mt_flags_print(flags, n);
    } else {
        double loss = mt_trainer_eval(&tr, &tok, nwin);
        printf("windows %lld of %d tokens\n", (long long)nwin, T);
        printf("loss %.9g\n", loss);
    }
    mt_trainer_free(&tr);
    mt_tokens_free(&tok);
    return rc;
}

/* ---- sample ---- */

#define STREAM_SAMPLE 0x53414D50ull /* "SAMP" */

static int sample_token(const float *logits, int V, float temperature, int top_k, float u, float *probs)
{
    if (temperature <= 0.0f) { /* greedy */
        int best = 0;
        for (int v = 1; v < V; v++)
            best = logits[v] > logits[best] ? v : best;
        return best;
    }
    float kth = -INFINITY;
    if (top_k > 0 && top_k < V) { /* the k-th largest logit, by selection on a copy */
        for (int v = 0; v < V; v++)
            probs[v] = logits[v];
        for (int i = 0; i < top_k; i++) {
            int best = -1;
            for (int v = 0; v < V; v++)
                if (probs[v] != -INFINITY && (best < 0 || probs[v] > probs[best]))
                    best = v;
            kth = probs[best];
            probs[best] = -INFINITY;
        }
    }
    float mx = -INFINITY;
    for (int v = 0; v < V; v++)
        mx = logits[v] > mx ? logits[v] : mx;
    double sum = 0.0;
    for (int v = 0; v < V; v++) {
        probs[v] = logits[v] >= kth ? expf((logits[v] - mx) / temperature) : 0.0f;
        sum += probs[v];
    }
    double acc = 0.0, target = u * sum;
    for (int v = 0; v < V; v++) {
        acc += probs[v];
        if (acc > target && probs[v] > 0)
            return v;
    }
    for (int v = V - 1; v >= 0; v--)
        if (probs[v] > 0)
            return v;
    return 0;
}

int mt_cmd_sample(int argc, char **argv)
{
    const char *ckpt = NULL, *prompt = "";
    int ntok = 200, top_k = 40, threads = 0, dry = 0, done;
    float temperature = 0.8f;
    uint64_t seed = 1;
    Flag flags[] = {
        {"ckpt", FLAG_STR, &ckpt, "checkpoint directory", "DIR", 1},
        {"prompt", FLAG_STR, &prompt, "text to continue (empty: start from a newline)", "TEXT"},
        {"tokens", FLAG_INT, &ntok, "tokens to generate"},
        {"temperature", FLAG_FLOAT, &temperature, "softmax temperature (0: greedy)"},
        {"top-k", FLAG_INT, &top_k, "sample among the k most likely tokens (0: all)"},
        {"seed", FLAG_U64, &seed, "sampling seed (the same seed, the same text)"},
        {"threads", FLAG_INT, &threads, MT_HELP_THREADS},
        {"dry-run", FLAG_BOOL, &dry, MT_HELP_DRY_RUN},
    };
    int n = (int)(sizeof flags / sizeof flags[0]);
    int rc = mt_cli_parse(flags, n, argc, argv, "sample", "Generate text from a checkpoint.", &done);
    if (done)
        return rc;
    if (!ckpt)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain sample: --ckpt DIR is required"));
    if (ntok < 0 || top_k < 0 || temperature < 0 || threads < 0)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain sample: --tokens, --top-k, --temperature must be >= 0"));
    if ((threads = mt_cli_setup_threads(threads, "sample")) < 0)
        return mt_cli_fail(MT_EINPUT);
    MtConfig cfg;
    MtBpe *bpe = NULL;
    MtStatus s = mt_ckpt_read_config(ckpt, &cfg);
    if (s == MT_OK)
        s = ckpt_tokenizer(ckpt, &bpe); /* BPE: its tokens; else each byte is a token */
    if (s != MT_OK)
        return mt_cli_fail(mt_error_prefix(s, "meshtrain sample"));
    if (bpe && mt_bpe_vocab(bpe) > cfg.V) {
        mt_bpe_free(bpe);
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain sample: the checkpoint's tokenizer has %d tokens, its model "
                                    "%d", mt_bpe_vocab(bpe), cfg.V));
    }
    for (const unsigned char *b = (const unsigned char *)prompt; *b && !bpe; b++)
        if (*b >= cfg.V)
            return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain sample: the prompt's byte 0x%02x (at offset %d) is not "
                                        "a token of the checkpoint's vocabulary of %d", *b,
                                        (int)(b - (const unsigned char *)prompt), cfg.V));
    if (dry) {
        mt_bpe_free(bpe);
        if ((s = mt_ckpt_check_shapes(ckpt, &cfg, 0)) != MT_OK)
            return mt_cli_fail(mt_error_prefix(s, "meshtrain sample"));
        mt_flags_print(flags, n);
        return 0;
    }
    MtTrainer tr;
    s = load_model(ckpt, 1, 0, &tr);
    if (s != MT_OK) {
        mt_bpe_free(bpe);
        return mt_cli_fail(mt_error_prefix(s, "meshtrain sample"));
    }
    int T = tr.tc.cfg.T, V = tr.tc.cfg.V;
    int64_t plen = (int64_t)strlen(prompt), total = plen + ntok;
    int32_t *seqbuf = malloc(sizeof(int32_t) * (size_t)(total + 1));
    float *probs = malloc(sizeof(float) * (size_t)V), *row = malloc(sizeof(float) * (size_t)V);
    if (!seqbuf || !probs || !row) {
        free(seqbuf);
        free(probs);
        free(row);
        mt_trainer_free(&tr);
        mt_bpe_free(bpe);
        return mt_cli_fail(mt_error(MT_ENOMEM, "meshtrain sample: out of memory"));
    }
    int64_t len = plen;
    if (bpe) { /* the prompt's tokens (never more than its bytes) */
        int32_t *ids = NULL;
        int64_t cap = 0;
        len = mt_bpe_encode(bpe, (const unsigned char *)prompt, plen, 1, &ids, &cap);
        if (len)
            memcpy(seqbuf, ids, sizeof(int32_t) * (size_t)len);
        free(ids);
    } else
        mt_bytes_encode((const unsigned char *)prompt, plen, seqbuf);
    if (len == 0) { /* an empty prompt starts from a newline (BPE: its <|endoftext|> if it has one) */
        seqbuf[len] = '\n';
        for (int i = 0; bpe && i < mt_bpe_nspecial(bpe); i++) {
            int32_t id;
            if (strcmp(mt_bpe_special(bpe, i, &id), "<|endoftext|>") == 0)
                seqbuf[len] = id;
        }
        if (bpe && seqbuf[len] == '\n') {
            int64_t k = 0;
            mt_bpe_encode_piece(bpe, (const unsigned char *)"\n", 1, seqbuf, &k);
        }
        len++;
    }
    fputs(prompt, stdout);
    unsigned char *out = NULL;
    int64_t ocap = 0, bad;
    for (int i = 0; i < ntok; i++) {
        int64_t start = len > T ? len - T : 0;
        int w = (int)(len - start);
        MtActs a = tr.acts;
        a.T = w; /* the buffers hold a full context; a shorter window uses their front */
        memset(tr.host_targets, 0, sizeof(int32_t) * (size_t)w);
        memcpy(tr.host_inputs, seqbuf + start, sizeof(int32_t) * (size_t)w);
        mt_trainer_upload_tokens(&tr, 0, w);
        mt_model_forward(&tr.tc.cfg, &tr.w, &a, tr.inputs, tr.targets, 0.0f, NULL);
        mt_be()->download(row, a.logits + (int64_t)(w - 1) * V, sizeof(float) * (size_t)V); /* the last position's */
        int next = sample_token(row, V, temperature, top_k,
                                mt_rng_uniform(seed, STREAM_SAMPLE, (uint64_t)i, 0), probs);
        seqbuf[len++] = next;
        int64_t nb = bpe ? mt_bpe_decode(bpe, &seqbuf[len - 1], 1, &out, &ocap, &bad) : -1;
        if (nb >= 0) /* its bytes (a token past the tokenizer's, a padding row, as its id) */
            fwrite(out, 1, (size_t)nb, stdout);
        else if (V <= 256)
            putchar(next);
        else
            printf(" %d", next);
        fflush(stdout);
    }
    putchar('\n');
    free(out);
    free(seqbuf);
    free(probs);
    free(row);
    mt_trainer_free(&tr);
    mt_bpe_free(bpe);
    return 0;
}

/* ---- bench ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int mt_cmd_bench(int argc, char **argv)
{
    MtTrainConfig tc = {0};
    int layers = 4, heads = 4, dim = 256, seq = 256, vocab = 256, batch = 8, micro = 0, threads = 0;
    int steps = 10, warmup = 2, dry = 0, done;
    Flag flags[] = {
        {"layers", FLAG_INT, &layers, "transformer blocks"},
        {"heads", FLAG_INT, &heads, "attention heads"},
        {"dim", FLAG_INT, &dim, "width"},
        {"seq-len", FLAG_INT, &seq, "sequence length"},
        {"vocab", FLAG_INT, &vocab, "vocabulary size"},
        {"batch-size", FLAG_INT, &batch, "sequences per step"},
        {"micro-batch-size", FLAG_INT, &micro, "sequences per micro-batch (0: the batch size), summed left to right as train does on one rank"},
        {"threads", FLAG_INT, &threads, MT_HELP_THREADS},
        {"steps", FLAG_INT, &steps, "timed steps"},
        {"warmup", FLAG_INT, &warmup, "untimed steps first"},
        {"dry-run", FLAG_BOOL, &dry, MT_HELP_DRY_RUN},
    };
    int n = (int)(sizeof flags / sizeof flags[0]);
    int rc = mt_cli_parse(flags, n, argc, argv, "bench",
                           "Time full training steps (forward, backward, AdamW) on random tokens.", &done);
    if (done)
        return rc;
    if (steps < 1 || warmup < 0 || threads < 0)
        return mt_cli_fail(mt_error(MT_EINPUT, "meshtrain bench: --steps must be >= 1, --warmup and --threads >= 0"));
    tc.cfg = (MtConfig){.V = vocab, .T = seq, .L = layers, .NH = heads, .C = dim};
    tc.batch = batch;
    tc.micro = micro ? micro : batch;
    tc.accum_blocks = 1; /* left to right, as train on one rank (mt_accum.h) */
    tc.seq = seq;
    tc.seed = 1;
    if ((tc.threads = mt_cli_setup_threads(threads, "bench")) < 0)
        return mt_cli_fail(MT_EINPUT);
    if (dry) {
        micro = tc.micro;
        threads = tc.threads;
        mt_flags_print(flags, n);
        return 0;
    }
    tc.oc = (MtOptimConfig){.lr = 1e-4f, .min_lr_frac = 1.0f, .steps = steps + warmup, .beta1 = 0.9f,
                            .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_clip = 1.0f};
    MtTrainer tr;
    MtStatus s = mt_trainer_init(&tr, &tc);
    if (s != MT_OK)
        return mt_cli_fail(mt_error_prefix(s, "meshtrain bench"));
    MtTokens data = {.count = 1 << 20, .vocab = (uint32_t)vocab};
    data.tok = malloc(sizeof(int32_t) * (size_t)data.count);
    for (int64_t i = 0; data.tok && i < data.count; i++)
        data.tok[i] = (int32_t)(mt_rng_u64(7, 0, (uint64_t)i, 0) % (uint64_t)vocab);
    double *ms = malloc(sizeof(double) * (size_t)steps);
    if (!data.tok || !ms) {
        free(ms);
        mt_tokens_free(&data);
        mt_trainer_free(&tr);
        return mt_cli_fail(mt_error(MT_ENOMEM, "meshtrain bench: out of memory"));
    }
    MtStepStats st;
    for (int i = 0; i < warmup + steps; i++) {
        double t0 = mt_now();
        mt_trainer_step(&tr, &data, &st);
        if (i >= warmup)
            ms[i - warmup] = 1e3 * (mt_now() - t0);
    }
    qsort(ms, (size_t)steps, sizeof(double), cmp_double);
    double med = steps % 2 ? ms[steps / 2] : 0.5 * (ms[steps / 2 - 1] + ms[steps / 2]);
    /* the matrix-product floor: the step's GEMM FLOPs at the rate this BLAS reaches on a
     * product of the model's own shape (N x C times C x 4C), measured here.  Attention
     * counts only the T(T+1)/2 causal scores (and their products with V): the fused kernel
     * computes no others, and no engine needs more, so this is also the least floor. */
    double N = (double)batch * seq, C = dim, hs = (double)dim / heads;
    double dense = 2.0 * N * 12.0 * C * C * layers + 2.0 * N * C * vocab;
    double attn = layers * 2.0 * (2.0 * batch * heads * (double)seq * seq * hs) * (seq + 1.0) / (2.0 * seq);
    double flops = 3.0 * (dense + attn);
    int m = (int)N, k = dim, nn = 4 * dim;
    float *A = tr.acts.fch[0], *Bm = tr.params + tr.table[2 + 8].offset, *Cm = tr.acts.fch_gelu[0];
    mt_gemm(0, 0, m, nn, k, 1.0f, A, k, Bm, nn, 0.0f, Cm, nn, 0);
    double t0 = mt_now();
    int reps = 10;
    for (int r = 0; r < reps; r++)
        mt_gemm(0, 0, m, nn, k, 1.0f, A, k, Bm, nn, 0.0f, Cm, nn, 0);
    double gemm_rate = 2.0 * m * nn * k * reps / (mt_now() - t0);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"engine\": \"meshtrain\", \"ms_per_step\": %.3f, \"min_ms_per_step\": %.3f, \"tokens_per_s\": %.1f, "
           "\"floor_ms\": %.3f, "
           "\"least_floor_ms\": %.3f, \"gemm_gflops\": %.1f, \"threads\": %d, \"blas\": \"%s\", "
           "\"peak_rss_mb\": %.1f, \"accounted_mb\": %.1f, \"loss\": %.6f}\n",
           med, ms[0], N / med * 1e3, flops / gemm_rate * 1e3, flops / gemm_rate * 1e3, gemm_rate / 1e9, tc.threads,
           mt_gemm_name(),
           ru.ru_maxrss / 1024.0, tr.mem.total_peak / 1048576.0, st.loss);
    free(ms);
    mt_tokens_free(&data);
    mt_trainer_free(&tr);
    return 0;
}
