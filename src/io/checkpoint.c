/* checkpoint.c - save and load the checkpoint directory. */
#include "mt_checkpoint.h"

#include "mt_text.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mt_fsutil.h"
#include "mt_json.h"
#include "mt_manifest.h"
#include "mt_safetensors.h"

static MtStatus write_text(const char *path, const MtBuf *b)
{
    if (b->failed)
        return mt_error(MT_ENOMEM, "out of memory writing %s", path);
    FILE *f = fopen(path, "wb");
    if (!f)
        return mt_error(MT_EIO, "cannot create %s: %s", path, strerror(errno));
    int ok = fwrite(b->data, 1, b->len, f) == b->len;
    ok = fclose(f) == 0 && ok;
    return ok ? MT_OK : mt_error(MT_EIO, "writing %s failed", path);
}

static MtStatus read_json(const char *path, MtJson **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return mt_error(MT_EINPUT, "cannot open %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0 || n > (1 << 20)) {
        fclose(f);
        return mt_error(MT_EINPUT, "%s: larger than 1 MiB, not a meshtrain JSON file", path);
    }
    char *text = malloc((size_t)n + 1);
    if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) {
        free(text);
        fclose(f);
        return mt_error(MT_EINPUT, "%s: read failed", path);
    }
    fclose(f);
    MtStatus s = mt_json_parse(text, (size_t)n, out);
    free(text);
    if (s != MT_OK)
        return mt_error_prefix(s, "%s", path);
    if (mt_json_type(*out) != MT_JSON_OBJECT) {
        mt_json_free(*out);
        *out = NULL;
        return mt_error(MT_EINPUT, "%s: not a JSON object", path);
    }
    return MT_OK;
}

static MtStatus get_int(const MtJson *obj, const char *key, const char *path, int64_t lo,
                        int64_t hi, int64_t *out)
{
    const MtJson *v = mt_json_get(obj, key);
    if (!v)
        return mt_error(MT_EINPUT, "%s: missing \"%s\"", path, key);
    if (mt_json_i64(v, out) != MT_OK || *out < lo || *out > hi)
        return mt_error(MT_EINPUT, "%s: \"%s\" must be an integer in [%lld, %lld]", path, key,
                        (long long)lo, (long long)hi);
    return MT_OK;
}

static MtStatus get_num(const MtJson *obj, const char *key, const char *path, float *out)
{
    const MtJson *v = mt_json_get(obj, key);
    if (!v || mt_json_type(v) != MT_JSON_NUMBER)
        return mt_error(MT_EINPUT, "%s: missing or non-numeric \"%s\"", path, key);
    *out = (float)mt_json_num(v);
    if (!isfinite(*out)) /* finite in the JSON, inf as the float it is kept in */
        return mt_error(MT_EINPUT, "%s: \"%s\" %g is not a finite float", path, key, mt_json_num(v));
    return MT_OK;
}

typedef char MtEntryName[MT_NAME_MAX + 16];
static const char *const file_meta[] = {"format", "pt"};

/* The entries of model.safetensors (moments 0) or optimizer.safetensors (1): the table's
 * names and shapes, exp_avg.* then exp_avg_sq.* for the moments; NULL when out of memory. */
static MtStEntry *file_entries(const MtParam *table, int nparams, int moments, MtEntryName **names_out)
{
    int n = moments ? 2 * nparams : nparams;
    MtStEntry *e = calloc((size_t)n, sizeof *e);
    MtEntryName *names = calloc((size_t)n, sizeof *names);
    if (!e || !names) {
        free(e);
        free(names);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        const MtParam *t = &table[i % nparams];
        snprintf(names[i], sizeof names[i], "%s%s", !moments ? "" : i < nparams ? "exp_avg." : "exp_avg_sq.", t->name);
        e[i].name = names[i];
        e[i].ndim = t->ndim;
        e[i].shape[0] = t->shape[0];
        e[i].shape[1] = t->shape[1];
    }
    *names_out = names;
    return e;
}

#define MT_GPT2_EOT 50256
#define MT_STR_(x) #x
#define MT_STR(x) MT_STR_(x)

static MtStatus write_config(const char *tmp, const MtConfig *cfg, const char *tokenizer)
{
    char path[4200], eotbuf[16];
    /* Left out, transformers assumes GPT-2's <|endoftext|> (50256) as both ids.  The byte
     * tokenizer has no such token: null, unless the vocabulary holds GPT-2's.  A BPE
     * tokenizer's files go beside the weights (AutoTokenizer loads them), and its
     * <|endoftext|> is both ids. */
    const char *eot = cfg->V > MT_GPT2_EOT ? MT_STR(MT_GPT2_EOT) : "null";
    if (tokenizer) {
        MtBpe *bpe;
        MT_TRY(mt_bpe_load(tokenizer, &bpe));
        MtStatus s = mt_bpe_write_hf(bpe, tmp);
        eot = "null";
        for (int i = 0; i < mt_bpe_nspecial(bpe); i++) {
            int32_t id;
            if (strcmp(mt_bpe_special(bpe, i, &id), "<|endoftext|>") == 0) {
                snprintf(eotbuf, sizeof eotbuf, "%d", id);
                eot = eotbuf;
            }
        }
        mt_bpe_free(bpe);
        MT_TRY(s);
    }
    MtBuf b;
    mt_buf_init(&b);
    mt_buf_printf(&b,
                  "{\n  \"model_type\": \"gpt2\",\n  \"architectures\": [\"GPT2LMHeadModel\"],\n"
                  "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_embd\": %d,\n  \"n_positions\": %d,\n"
                  "  \"n_ctx\": %d,\n  \"vocab_size\": %d,\n  \"layer_norm_epsilon\": 1e-05,\n"
                  "  \"activation_function\": \"gelu_new\",\n  \"tie_word_embeddings\": %s,\n"
                  "  \"n_inner\": null,\n  \"torch_dtype\": \"float32\",\n"
                  "  \"bos_token_id\": %s,\n  \"eos_token_id\": %s,\n"
                  "  \"meshtrain_tokenizer\": \"%s\"\n}\n",
                  cfg->L, cfg->NH, cfg->C, cfg->T, cfg->T, cfg->V, cfg->untied ? "false" : "true", eot, eot,
                  tokenizer ? "bpe" : "bytes");
    snprintf(path, sizeof path, "%s/config.json", tmp);
    MtStatus s = write_text(path, &b);
    mt_buf_free(&b);
    return s;
}

static MtStatus write_state(const char *tmp, const MtTrainState *ts)
{
    char path[4200];
    const MtOptimConfig *o = &ts->oc;
    MtBuf b;
    mt_buf_init(&b);
    mt_buf_printf(&b,
                  "{\n  \"step\": %lld,\n  \"data_cursor\": %lld,\n  \"seed\": %llu,\n"
                  "  \"batch_size\": %d,\n  \"micro_batch_size\": %d,\n  \"seq_len\": %d,\n  \"tp_blocks\": %d,\n  \"accum_blocks\": %d,\n"
                  "  \"lr\": %.9g,\n  \"min_lr_frac\": %.9g,\n  \"warmup\": %d,\n  \"steps\": %d,\n"
                  "  \"beta1\": %.9g,\n  \"beta2\": %.9g,\n  \"eps\": %.9g,\n"
                  "  \"weight_decay\": %.9g,\n  \"grad_clip\": %.9g\n}\n",
                  (long long)ts->step, (long long)ts->step, (unsigned long long)ts->seed,
                  ts->batch, ts->micro, ts->seq, ts->tp_blocks > 0 ? ts->tp_blocks : 1, ts->accum_blocks, o->lr, o->min_lr_frac,
                  o->warmup, o->steps,
                  o->beta1, o->beta2, o->eps, o->weight_decay, o->grad_clip);
    snprintf(path, sizeof path, "%s/trainer_state.json", tmp);
    MtStatus s = write_text(path, &b);
    mt_buf_free(&b);
    return s;
}

MtStatus mt_ckpt_read_config(const char *dir, MtConfig *cfg)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    MtJson *j;
    MT_TRY(read_json(path, &j));
    int64_t L, NH, C, T, V;
    MtStatus s = MT_OK;
    const char *mt = mt_json_str(mt_json_get(j, "model_type"));
    if (!mt || strcmp(mt, "gpt2") != 0)
        s = mt_error(MT_EINPUT, "%s: model_type must be \"gpt2\"", path);
    if (s == MT_OK) s = get_int(j, "n_layer", path, 1, MT_MAX_LAYERS, &L);
    if (s == MT_OK) s = get_int(j, "n_head", path, 1, 65536, &NH);
    if (s == MT_OK) s = get_int(j, "n_embd", path, 1, 65536, &C);
    if (s == MT_OK) s = get_int(j, "n_positions", path, 1, 65536, &T);
    if (s == MT_OK) s = get_int(j, "vocab_size", path, 2, 1 << 24, &V);
    /* Hugging Face's default is tied; false: lm_head.weight is a tensor of its own */
    const MtJson *tie = mt_json_get(j, "tie_word_embeddings");
    if (s == MT_OK && tie && mt_json_type(tie) != MT_JSON_BOOL)
        s = mt_error(MT_EINPUT, "%s: tie_word_embeddings must be true or false", path);
    int untied = tie && !mt_json_bool(tie);
    mt_json_free(j);
    MT_TRY(s);
    *cfg = (MtConfig){.V = (int)V, .T = (int)T, .L = (int)L, .NH = (int)NH, .C = (int)C, .untied = untied};
    s = mt_config_check(cfg);
    return s == MT_OK ? s : mt_error_prefix(s, "%s", path);
}

/* Checks every tensor of the table (prefixed) against the file, and reads the pieces that
 * piece() names (mt_checkpoint.h) into base; the rest of the file is not read. */
static MtStatus load_tensors(const char *path, const char *prefix, const MtParam *table, int n, MtCkptPieces piece,
                             void *ctx, float *base)
{
    MtStFile f;
    MT_TRY(mt_st_open_lazy(path, &f));
    MtStatus s = MT_OK;
    for (int i = 0; i < n && s == MT_OK; i++) {
        char name[MT_NAME_MAX + 16];
        snprintf(name, sizeof name, "%s%s", prefix, table[i].name);
        const MtStTensor *t = mt_st_find(&f, name);
        if (!t) {
            s = mt_error(MT_EINPUT, "%s: missing tensor %s", path, name);
            break;
        }
        int same = t->ndim == table[i].ndim;
        for (int d = 0; same && d < t->ndim; d++)
            same = t->shape[d] == table[i].shape[d];
        if (!same) {
            s = mt_error(MT_EINPUT, "%s: tensor %s has shape [%lld%s%lld], the model needs [%lld%s%lld]",
                         path, name, (long long)t->shape[0], t->ndim > 1 ? ", " : "",
                         t->ndim > 1 ? (long long)t->shape[1] : 0LL, (long long)table[i].shape[0],
                         table[i].ndim > 1 ? ", " : "",
                         table[i].ndim > 1 ? (long long)table[i].shape[1] : 0LL);
            break;
        }
        int64_t a, b, at;
        for (int k = 0; s == MT_OK && (at = piece(ctx, i, k, &a, &b)) >= 0; k++)
            if (a < b)
                s = mt_st_read(&f, t, a, b - a, base + at);
    }
    if (s == MT_OK && f.ntensors != n && prefix[0] == 0)
        s = mt_error(MT_EINPUT, "%s: holds %d tensors, the model has %d", path, f.ntensors, n);
    mt_st_close(&f);
    return s;
}

MtStatus mt_ckpt_load_pieces(const char *dir, const MtParam *table, int nparams, MtCkptPieces piece, void *ctx,
                             float *params, float *m, float *v)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (params)
        MT_TRY(load_tensors(path, "", table, nparams, piece, ctx, params));
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    if (m)
        MT_TRY(load_tensors(path, "exp_avg.", table, nparams, piece, ctx, m));
    if (v)
        MT_TRY(load_tensors(path, "exp_avg_sq.", table, nparams, piece, ctx, v));
    return MT_OK;
}

static int64_t no_piece(void *ctx, int i, int k, int64_t *begin, int64_t *end)
{
    (void)ctx, (void)i, (void)k, (void)begin, (void)end;
    return -1;
}

MtStatus mt_ckpt_check_shapes(const char *dir, const MtConfig *cfg, int moments)
{
    int n = mt_param_count(cfg);
    MtParam *table = calloc((size_t)n, sizeof(MtParam));
    if (!table)
        return mt_error(MT_ENOMEM, "out of memory checking %s", dir);
    mt_param_table(cfg, table);
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    MtStatus s = load_tensors(path, "", table, n, no_piece, NULL, NULL);
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    if (s == MT_OK && moments)
        s = load_tensors(path, "exp_avg.", table, n, no_piece, NULL, NULL);
    if (s == MT_OK && moments)
        s = load_tensors(path, "exp_avg_sq.", table, n, no_piece, NULL, NULL);
    free(table);
    return s;
}

/* the flat range [lo, hi) as one piece per tensor */
typedef MtCkptRange Range;

static int64_t range_piece(void *ctx, int i, int k, int64_t *begin, int64_t *end)
{
    const Range *r = ctx;
    const MtParam *t = &r->table[i];
    int64_t a = t->offset > r->lo ? t->offset : r->lo;
    int64_t b = t->offset + t->numel < r->hi ? t->offset + t->numel : r->hi;
    if (k > 0 || a >= b)
        return -1;
    *begin = a - t->offset;
    *end = b - t->offset;
    return a - r->lo;
}

static int64_t table_end(const MtParam *table, int n) { return table[n - 1].offset + table[n - 1].numel; }

MtStatus mt_ckpt_load_range(const char *dir, const MtParam *table, int nparams, int64_t lo, int64_t hi,
                            float *params, float *m, float *v)
{
    Range r = {table, lo, hi};
    return mt_ckpt_load_pieces(dir, table, nparams, range_piece, &r, params, m, v);
}

MtStatus mt_ckpt_load_params(const char *dir, const MtParam *table, int nparams, float *params)
{
    return mt_ckpt_load_range(dir, table, nparams, 0, table_end(table, nparams), params, NULL, NULL);
}

MtStatus mt_ckpt_read_state(const char *dir, MtTrainState *ts)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    MtJson *j;
    MT_TRY(read_json(path, &j));
    int64_t step, seed, batch, micro, seq, warmup, steps, tp_blocks = 0, accum_blocks = 0;
    MtStatus s = get_int(j, "step", path, 0, INT32_MAX, &step);
    if (s == MT_OK && mt_json_get(j, "tp_blocks")) /* absent from older checkpoints: 0, not recorded */
        s = get_int(j, "tp_blocks", path, 1, 65536, &tp_blocks);
    if (s == MT_OK && mt_json_get(j, "accum_blocks"))
        s = get_int(j, "accum_blocks", path, 0, 1 << 20, &accum_blocks);
    if (s == MT_OK) s = get_int(j, "seed", path, 0, INT64_MAX, &seed);
    if (s == MT_OK) s = get_int(j, "batch_size", path, 1, INT32_MAX, &batch);
    if (s == MT_OK) s = get_int(j, "micro_batch_size", path, 1, INT32_MAX, &micro);
    if (s == MT_OK) s = get_int(j, "seq_len", path, 1, 65536, &seq);
    if (s == MT_OK) s = get_int(j, "warmup", path, 0, INT32_MAX, &warmup);
    if (s == MT_OK) s = get_int(j, "steps", path, 0, INT32_MAX, &steps);
    MtOptimConfig o = {0};
    if (s == MT_OK) s = get_num(j, "lr", path, &o.lr);
    if (s == MT_OK) s = get_num(j, "min_lr_frac", path, &o.min_lr_frac);
    if (s == MT_OK) s = get_num(j, "beta1", path, &o.beta1);
    if (s == MT_OK) s = get_num(j, "beta2", path, &o.beta2);
    if (s == MT_OK) s = get_num(j, "eps", path, &o.eps);
    if (s == MT_OK) s = get_num(j, "weight_decay", path, &o.weight_decay);
    if (s == MT_OK) s = get_num(j, "grad_clip", path, &o.grad_clip);
    mt_json_free(j);
    MT_TRY(s);
    o.warmup = (int)warmup;
    o.steps = (int)steps;
    *ts = (MtTrainState){.step = step, .seed = (uint64_t)seed, .batch = (int)batch,
                         .micro = (int)micro, .seq = (int)seq, .tp_blocks = (int)tp_blocks,
                         .accum_blocks = (int)accum_blocks, .oc = o};
    return MT_OK;
}

MtStatus mt_ckpt_load_moments(const char *dir, const MtParam *table, int nparams, float *m, float *v)
{
    return mt_ckpt_load_range(dir, table, nparams, 0, table_end(table, nparams), NULL, m, v);
}

/* ---- parallel save (mt_checkpoint.h) ---- */

MtStatus mt_ckpt_par_begin(const char *dir, const MtConfig *cfg, const MtParam *table, int nparams,
                           const MtTrainState *ts, char *stage, size_t cap)
{
    char path[4200];
    MT_TRY(mt_dir_stage(dir, stage, cap));
    MtStatus s = write_config(stage, cfg, ts->tokenizer);
    if (s == MT_OK)
        s = write_state(stage, ts);
    for (int moments = 0; moments < 2 && s == MT_OK; moments++) {
        MtEntryName *names;
        MtStEntry *e = file_entries(table, nparams, moments, &names);
        snprintf(path, sizeof path, "%s/%s", stage, moments ? "optimizer.safetensors" : "model.safetensors");
        s = e ? mt_st_create(path, e, moments ? 2 * nparams : nparams, file_meta, 1)
              : mt_error(MT_ENOMEM, "out of memory writing %s", path);
        if (e) {
            free(e);
            free(names);
        }
    }
    if (s != MT_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", mt_error_msg());
        mt_dir_remove(stage);
        return mt_error(s, "saving checkpoint %s: %s", dir, msg);
    }
    return MT_OK;
}

/* the pieces fn names of every entry of a file from the arrays x[0] (and x[1]: exp_avg_sq) */
static MtStatus write_pieces(const char *path, const MtParam *table, int nparams, int moments, MtCkptPieces fn,
                             void *ctx, const float *const x[2])
{
    int n = moments ? 2 * nparams : nparams;
    MtEntryName *names;
    MtStEntry *e = file_entries(table, nparams, moments, &names);
    if (!e)
        return mt_error(MT_ENOMEM, "out of memory writing %s", path);
    int64_t at = mt_st_data_start(e, n, file_meta, 1);
    free(e);
    free(names);
    if (at < 0)
        return mt_error(MT_EINPUT, "writing %s: the table's header cannot be written", path);
    int fd = open(path, O_WRONLY);
    if (fd < 0)
        return mt_error(MT_EIO, "cannot open %s to write: %s", path, strerror(errno));
    int ok = 1;
    for (int i = 0; ok && i < n; i++) {
        const MtParam *t = &table[i % nparams];
        const float *src = x[i / nparams];
        int64_t b, end, from;
        for (int k = 0; ok && (from = fn(ctx, i % nparams, k, &b, &end)) >= 0; k++) {
            const char *p = (const char *)(src + from);
            size_t len = sizeof(float) * (size_t)(end - b);
            off_t where = (off_t)(at + 4 * (b));
            while (ok && len > 0) { /* pwrite may write less than asked */
                ssize_t w = pwrite(fd, p, len, where);
                ok = w > 0;
                p += ok ? w : 0;
                where += ok ? w : 0;
                len -= ok ? (size_t)w : 0;
            }
        }
        at += 4 * t->numel;
    }
    int err = errno;
    if (close(fd) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    return ok ? MT_OK : mt_error(MT_EIO, "cannot write %s: %s", path, strerror(err));
}

MtStatus mt_ckpt_par_write(const char *stage, const MtParam *table, int nparams, int moments, MtCkptPieces fn,
                           void *ctx, const float *a, const float *b)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", stage, moments ? "optimizer.safetensors" : "model.safetensors");
    const float *x[2] = {a, b};
    return write_pieces(path, table, nparams, moments, fn, ctx, x);
}

MtStatus mt_ckpt_par_commit(const char *stage, const char *dir, int ok)
{
    MtStatus s = ok ? mt_manifest_write(stage) : MT_OK; /* last, inside the stage the swap makes whole */
    if (ok && s == MT_OK)
        s = mt_dir_commit(stage, dir);
    if (!ok || s != MT_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ok ? mt_error_msg() : "a rank could not write its part");
        mt_dir_remove(stage);
        return mt_error(ok ? s : MT_EIO, "saving checkpoint %s: %s", dir, msg);
    }
    return MT_OK;
}

int64_t mt_ckpt_range_piece(void *ctx, int p, int k, int64_t *begin, int64_t *end)
{
    return range_piece(ctx, p, k, begin, end);
}

MtStatus mt_ckpt_save(const char *dir, const MtConfig *cfg, const MtParam *table, int nparams,
                      const float *params, const float *m, const float *v, const MtTrainState *ts)
{
    char stage[4096];
    MT_TRY(mt_ckpt_par_begin(dir, cfg, table, nparams, ts, stage, sizeof stage));
    Range whole = {table, 0, table_end(table, nparams)}; /* one rank writes every piece */
    MtStatus s = mt_ckpt_par_write(stage, table, nparams, 0, range_piece, &whole, params, NULL);
    if (s == MT_OK)
        s = mt_ckpt_par_write(stage, table, nparams, 1, range_piece, &whole, m, v);
    if (s != MT_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", mt_error_msg());
        mt_dir_remove(stage);
        return mt_error(s, "saving checkpoint %s: %s", dir, msg);
    }
    return mt_ckpt_par_commit(stage, dir, 1);
}
