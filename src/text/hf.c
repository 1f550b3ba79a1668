/* hf.c - Hugging Face's tokenizer files: tokenizer.json, vocab.json + merges.txt, and
 * tokenizer_config.json (see mt_text.h). */
#include "mt_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mt_json.h"

/* GPT-2's byte-to-character map: the printable Latin-1 bytes stand for themselves, the
 * others, in byte order, for U+0100 onwards */
static uint32_t byte_cp[256];
static int16_t cp_byte[0x144];

static void byte_map(void)
{
    if (byte_cp['!'])
        return;
    for (int i = 0; i < 0x144; i++)
        cp_byte[i] = -1;
    int k = 0;
    for (int c = 0; c < 256; c++) {
        int printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
        byte_cp[c] = printable ? (uint32_t)c : (uint32_t)(256 + k++);
        cp_byte[byte_cp[c]] = (int16_t)c;
    }
}

/* the token's string: its bytes through the map, as UTF-8, into out (room 2 len + 1) */
static void show(const unsigned char *s, int len, char *out)
{
    int k = 0;
    for (int i = 0; i < len; i++) {
        uint32_t cp = byte_cp[s[i]];
        if (cp < 0x80)
            out[k++] = (char)cp;
        else {
            out[k++] = (char)(0xC0 | cp >> 6);
            out[k++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    out[k] = 0;
}

/* a token string back to bytes; -1 if a character is not one of the map's */
static int unshow(const char *str, unsigned char *out, int cap)
{
    const unsigned char *s = (const unsigned char *)str;
    int64_t n = (int64_t)strlen(str);
    int k = 0;
    for (int64_t i = 0; i < n;) {
        int len;
        int32_t cp = mt_utf8_next(s + i, n - i, &len);
        if (cp < 0 || cp >= 0x144 || cp_byte[cp] < 0 || k == cap)
            return -1;
        out[k++] = (unsigned char)cp_byte[cp];
        i += len;
    }
    return k;
}

static MtStatus read_text(const char *path, char **out, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return mt_error(MT_EINPUT, "%s: cannot be read", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    char *b = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (!b || fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        fclose(f);
        return mt_error(MT_EINPUT, "%s: cannot be read", path);
    }
    fclose(f);
    b[len] = 0;
    *out = b;
    *n = (size_t)len;
    return MT_OK;
}

static MtStatus parse_file(const char *path, MtJson **j)
{
    char *text;
    size_t n;
    MT_TRY(read_text(path, &text, &n));
    MtStatus s = mt_json_parse(text, n, j);
    free(text);
    if (s != MT_OK) {
        char why[200];
        snprintf(why, sizeof why, "%s", mt_error_msg());
        return mt_error(MT_EINPUT, "%s: %s", path, why);
    }
    return MT_OK;
}

typedef struct {
    const char *str;
    int32_t id;
    int special;
} Entry;

/* a vocabulary (strings and ids; the specials' ids given apart) and its merges, checked */
static MtStatus build(const char *vpath, const MtJson *vocab, const int32_t *sp_id, const char **sp_text, int nsp,
                      const char *mpath, const char *const *ma, const char *const *mb, const int *mline, int nm,
                      MtBpe **out)
{
    byte_map();
    int nv = mt_json_len(vocab);
    if (mt_json_type(vocab) != MT_JSON_OBJECT || nv == 0)
        return mt_error(MT_EINPUT, "%s: the vocabulary is not an object of token strings and ids", vpath);
    int64_t maxid = -1;
    for (int i = 0; i < nv; i++) {
        int64_t id;
        if (mt_json_i64(mt_json_at(vocab, i), &id) != MT_OK || id < 0 || id >= (1 << 24))
            return mt_error(MT_EINPUT, "%s: token '%.40s' has no id from 0 to 16777215", vpath, mt_json_key_at(vocab, i));
        maxid = id > maxid ? id : maxid;
    }
    for (int i = 0; i < nsp; i++)
        maxid = sp_id[i] > maxid ? sp_id[i] : maxid;
    MtBpe *b = mt_bpe_new((int32_t)maxid + 1);
    if (!b)
        return mt_error(MT_ENOMEM, "%s: out of memory", vpath);
    MtStatus s = MT_OK;
    unsigned char bytes[1024];
    for (int i = 0; s == MT_OK && i < nv; i++) {
        int64_t id;
        mt_json_i64(mt_json_at(vocab, i), &id);
        int special = 0;
        for (int j = 0; j < nsp; j++)
            special |= sp_id[j] == id;
        if (special)
            continue;
        int len = unshow(mt_json_key_at(vocab, i), bytes, (int)sizeof bytes);
        if (len <= 0)
            s = mt_error(MT_EINPUT, "%s: token '%.40s' is not a byte-level token (GPT-2's byte map)", vpath,
                         mt_json_key_at(vocab, i));
        else if (mt_bpe_add(b, bytes, len, (int32_t)id) != MT_OK) {
            char why[200];
            snprintf(why, sizeof why, "%s", mt_error_msg());
            s = mt_error(MT_EINPUT, "%s: token '%.40s': %s", vpath, mt_json_key_at(vocab, i), why);
        }
    }
    for (int c = 0; s == MT_OK && c < 256; c++) {
        unsigned char x = (unsigned char)c;
        if (mt_bpe_rank(b, &x, 1) < 0)
            s = mt_error(MT_EINPUT, "%s: byte 0x%02x has no token (a byte-level vocabulary needs all 256)", vpath, c);
    }
    for (int i = 0; s == MT_OK && i < nsp; i++)
        if (mt_bpe_add_special(b, sp_text[i], sp_id[i]) != MT_OK) {
            char why[200];
            snprintf(why, sizeof why, "%s", mt_error_msg());
            s = mt_error(MT_EINPUT, "%s: %s", vpath, why);
        }
    /* the merges: both parts and their concatenation tokens, the results' ids rising; a
     * merge that makes a token an earlier merge made (another split of the same bytes, as
     * BpeTrainer can write) adds nothing: meshtrain ranks a token by its id */
    int32_t last = -1, nmulti = 0, nmade = 0;
    unsigned char *made = calloc((size_t)maxid + 1, 1);
    if (!made)
        s = mt_error(MT_ENOMEM, "%s: out of memory", vpath);
    for (int32_t id = 0; s == MT_OK && id <= maxid; id++) {
        const unsigned char *p;
        int len;
        nmulti += mt_bpe_token(b, id, &p, &len) && len > 1;
    }
    for (int k = 0; s == MT_OK && k < nm; k++) {
        unsigned char x[1024];
        int la = unshow(ma[k], x, 512), lb = la > 0 ? unshow(mb[k], x + la, 512) : -1;
        int32_t ra = la > 0 ? mt_bpe_rank(b, x, la) : -1, rb = lb > 0 ? mt_bpe_rank(b, x + la, lb) : -1;
        int32_t r = ra >= 0 && rb >= 0 ? mt_bpe_rank(b, x, la + lb) : -1;
        if (ra < 0 || rb < 0)
            s = mt_error(MT_EINPUT, "%s:%d: merge '%.40s %.40s': '%.40s' is not in the vocabulary", mpath, mline[k], ma[k],
                         mb[k], ra < 0 ? ma[k] : mb[k]);
        else if (r < 0)
            s = mt_error(MT_EINPUT, "%s:%d: merge '%.40s %.40s': their concatenation is not in the vocabulary", mpath,
                         mline[k], ma[k], mb[k]);
        else if (made[r])
            continue;
        else if (r <= last)
            s = mt_error(MT_EINPUT, "%s:%d: merge '%.40s %.40s' makes id %d after id %d: meshtrain needs the merged "
                         "tokens' ids in their merges' order", mpath, mline[k], ma[k], mb[k], r, last);
        else {
            made[r] = 1;
            nmade++;
            last = r;
        }
    }
    free(made);
    if (s == MT_OK && nmade != nmulti)
        s = mt_error(MT_EINPUT, "%s: %d merges make %d tokens for %d tokens of more than one byte", mpath, nm, nmade,
                     nmulti);
    if (s != MT_OK) {
        mt_bpe_free(b);
        return s;
    }
    *out = b;
    return MT_OK;
}

MtStatus mt_bpe_read_hf(const char *path, MtBpe **out)
{
    MtJson *j;
    *out = NULL;
    MT_TRY(parse_file(path, &j));
    const MtJson *model = mt_json_get(j, "model"), *vocab = mt_json_get(model, "vocab"),
                 *merges = mt_json_get(model, "merges"), *added = mt_json_get(j, "added_tokens");
    MtStatus s = MT_OK;
    if (!mt_json_str(mt_json_get(model, "type")) || strcmp(mt_json_str(mt_json_get(model, "type")), "BPE") != 0)
        s = mt_error(MT_EINPUT, "%s: model.type is not \"BPE\"", path);
    else if (mt_json_type(merges) != MT_JSON_ARRAY)
        s = mt_error(MT_EINPUT, "%s: model.merges is not an array", path);
    int nsp = 0, nm = mt_json_len(merges), na = mt_json_len(added);
    int32_t *sp_id = malloc(sizeof(int32_t) * (size_t)(na + 1));
    const char **sp_text = malloc(sizeof(char *) * (size_t)(na + 1));
    const char **ma = malloc(sizeof(char *) * (size_t)(nm + 1)), **mb = malloc(sizeof(char *) * (size_t)(nm + 1));
    char **owned = calloc((size_t)nm + 1, sizeof(char *));
    int *mline = malloc(sizeof(int) * (size_t)(nm + 1));
    if (!sp_id || !sp_text || !ma || !mb || !owned || !mline)
        s = mt_error(MT_ENOMEM, "%s: out of memory", path);
    for (int i = 0; s == MT_OK && i < na; i++) {
        const MtJson *t = mt_json_at(added, i);
        int64_t id;
        if (!mt_json_bool(mt_json_get(t, "special")))
            continue;
        if (!mt_json_str(mt_json_get(t, "content")) || mt_json_i64(mt_json_get(t, "id"), &id) != MT_OK || id < 0 ||
            id >= (1 << 24))
            s = mt_error(MT_EINPUT, "%s: added token %d has no content or id", path, i);
        else {
            sp_id[nsp] = (int32_t)id;
            sp_text[nsp++] = mt_json_str(mt_json_get(t, "content"));
        }
    }
    for (int k = 0; s == MT_OK && k < nm; k++) { /* ["a", "b"] or "a b" */
        const MtJson *m = mt_json_at(merges, k);
        mline[k] = k + 1;
        if (mt_json_len(m) == 2 && mt_json_str(mt_json_at(m, 0)) && mt_json_str(mt_json_at(m, 1))) {
            ma[k] = mt_json_str(mt_json_at(m, 0));
            mb[k] = mt_json_str(mt_json_at(m, 1));
        } else if (mt_json_str(m) && strchr(mt_json_str(m), ' ') && (owned[k] = strdup(mt_json_str(m)))) {
            char *sp = strchr(owned[k], ' ');
            *sp = 0;
            ma[k] = owned[k];
            mb[k] = sp + 1;
        } else
            s = mt_error(MT_EINPUT, "%s: merge %d is neither \"a b\" nor [\"a\", \"b\"]", path, k + 1);
    }
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s: model.merges", path);
    if (s == MT_OK)
        s = build(path, vocab, sp_id, sp_text, nsp, mpath, ma, mb, mline, nm, out);
    for (int k = 0; owned && k < nm; k++)
        free(owned[k]);
    free(owned);
    free(sp_id);
    free(sp_text);
    free(ma);
    free(mb);
    free(mline);
    mt_json_free(j);
    return s;
}

MtStatus mt_bpe_read_vocab_merges(const char *vpath, const char *mpath, MtBpe **out)
{
    *out = NULL;
    MtJson *j;
    MT_TRY(parse_file(vpath, &j));
    char *text;
    size_t n;
    MtStatus s = read_text(mpath, &text, &n);
    if (s != MT_OK) {
        mt_json_free(j);
        return s;
    }
    int cap = 1024, nm = 0;
    const char **ma = malloc(sizeof(char *) * (size_t)cap), **mb = malloc(sizeof(char *) * (size_t)cap);
    int *mline = malloc(sizeof(int) * (size_t)cap);
    int line = 0;
    for (char *p = text; s == MT_OK && p < text + n;) {
        char *e = memchr(p, '\n', (size_t)(text + n - p));
        if (!e)
            e = text + n;
        *e = 0;
        line++;
        if (e > p && e[-1] == '\r')
            e[-1] = 0;
        if (!(line == 1 && strncmp(p, "#version", 8) == 0) && *p) {
            char *sp = strchr(p, ' ');
            if (!sp || sp == p || !sp[1] || strchr(sp + 1, ' '))
                s = mt_error(MT_EINPUT, "%s:%d: want two tokens separated by one space, got '%.60s'", mpath, line, p);
            else {
                if (nm == cap) {
                    cap *= 2;
                    ma = realloc(ma, sizeof(char *) * (size_t)cap);
                    mb = realloc(mb, sizeof(char *) * (size_t)cap);
                    mline = realloc(mline, sizeof(int) * (size_t)cap);
                    MT_ASSERT(ma && mb && mline, "out of memory for %d merges", cap);
                }
                *sp = 0;
                ma[nm] = p;
                mb[nm] = sp + 1;
                mline[nm++] = line;
            }
        }
        p = e + 1;
    }
    /* GPT-2's <|endoftext|>: in vocab.json, a special by its form */
    int32_t sp_id[1];
    const char *sp_text[1] = {"<|endoftext|>"};
    int64_t eid = -1;
    int nsp = mt_json_i64(mt_json_get(j, "<|endoftext|>"), &eid) == MT_OK ? 1 : 0;
    sp_id[0] = (int32_t)eid;
    if (s == MT_OK)
        s = build(vpath, j, sp_id, sp_text, nsp, mpath, ma, mb, mline, nm, out);
    free(ma);
    free(mb);
    free(mline);
    free(text);
    mt_json_free(j);
    return s;
}

MtStatus mt_bpe_load(const char *path, MtBpe **out)
{
    struct stat st;
    size_t n = strlen(path);
    if (stat(path, &st) != 0)
        return mt_error(MT_EINPUT, "%s: no such tokenizer (a .tiktoken file, a tokenizer.json or a directory)", path);
    if (!S_ISDIR(st.st_mode))
        return n > 9 && strcmp(path + n - 9, ".tiktoken") == 0 ? mt_bpe_read_tiktoken(path, 1, out)
                                                                : mt_bpe_read_hf(path, out);
    char a[4200], b[4200];
    snprintf(a, sizeof a, "%s/tokenizer.json", path);
    if (stat(a, &st) == 0)
        return mt_bpe_read_hf(a, out);
    snprintf(a, sizeof a, "%s/vocab.json", path);
    snprintf(b, sizeof b, "%s/merges.txt", path);
    if (stat(a, &st) == 0 && stat(b, &st) == 0)
        return mt_bpe_read_vocab_merges(a, b, out);
    return mt_error(MT_EINPUT, "%s: holds neither tokenizer.json nor vocab.json and merges.txt", path);
}

/* ---- writing ---- */

static MtStatus put(const char *dir, const char *name, const MtBuf *buf)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || buf->failed || fwrite(buf->data, 1, buf->len, f) != buf->len || fclose(f) != 0)
        return mt_error(MT_EIO, "cannot write %s", path);
    return MT_OK;
}

const char *const mt_hf_files[MT_HF_NFILES] = {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"};

/* a merge of tokens l and r into merges.txt and the JSON list */
static void emit_merge(const MtBpe *b, int32_t l, int32_t r, char *str, int64_t half, MtBuf *mtxt, MtBuf *merges,
                       int *firstm)
{
    const unsigned char *pl, *pr;
    int ll, lr;
    mt_bpe_token(b, l, &pl, &ll);
    mt_bpe_token(b, r, &pr, &lr);
    show(pl, ll, str);
    show(pr, lr, str + half);
    mt_buf_printf(mtxt, "%s %s\n", str, str + half);
    mt_buf_printf(merges, *firstm ? "[" : ", [");
    mt_buf_json_str(merges, str);
    mt_buf_printf(merges, ", ");
    mt_buf_json_str(merges, str + half);
    mt_buf_printf(merges, "]");
    *firstm = 0;
}

MtStatus mt_bpe_render_hf(const MtBpe *b, MtBuf out[MT_HF_NFILES]) { return mt_bpe_render_hf_merges(b, NULL, 0, out); }

MtStatus mt_bpe_render_hf_merges(const MtBpe *b, const int32_t (*given)[2], int ngiven, MtBuf out[MT_HF_NFILES])
{
    byte_map();
    int32_t V = mt_bpe_vocab(b);
    int64_t longest = 0; /* two shown tokens side by side: 2 UTF-8 bytes per byte */
    for (int32_t id = 0; id < V; id++) {
        const unsigned char *p;
        int len;
        if (mt_bpe_token(b, id, &p, &len) && len > longest)
            longest = len;
    }
    for (int i = 0; i < mt_bpe_nspecial(b); i++) {
        int32_t sid;
        int64_t len = (int64_t)strlen(mt_bpe_special(b, i, &sid));
        longest = len > longest ? len : longest;
    }
    int64_t half = 2 * longest + 8;
    char *str = malloc((size_t)(2 * half));
    MtBuf merges;
    MtBuf *tj = &out[0], *vocab_ = &out[1], *mtxt_ = &out[2], *cfg_ = &out[3];
    for (int i = 0; i < MT_HF_NFILES; i++)
        mt_buf_init(&out[i]);
    mt_buf_init(&merges);
#define vocab (*vocab_)
#define mtxt (*mtxt_)
#define cfg (*cfg_)
    MtStatus s = str ? MT_OK : mt_error(MT_ENOMEM, "out of memory");
    const char *eot = NULL;
    mt_buf_printf(&vocab, "{");
    mt_buf_printf(&mtxt, "#version: 0.2\n");
    mt_buf_printf(&merges, "[");
    int first = 1, firstm = 1;
    for (int32_t id = 0; s == MT_OK && id < V; id++) {
        const unsigned char *p;
        int len;
        const char *text = NULL;
        for (int i = 0; i < mt_bpe_nspecial(b); i++) {
            int32_t sid;
            const char *t = mt_bpe_special(b, i, &sid);
            if (sid == id)
                text = t;
        }
        if (text) { /* a special: its text through the map */
            show((const unsigned char *)text, (int)strlen(text), str);
            eot = strcmp(text, "<|endoftext|>") == 0 ? text : eot;
        } else if (mt_bpe_token(b, id, &p, &len))
            show(p, len, str);
        else
            continue;
        mt_buf_printf(&vocab, first ? "" : ", ");
        mt_buf_json_str(&vocab, str);
        mt_buf_printf(&vocab, ": %d", id);
        first = 0;
        int32_t l, r;
        if (!given && !text && len > 1) {
            if (!mt_bpe_split(b, id, &l, &r)) {
                s = mt_error(MT_EINPUT, "token %d is not reachable by merges of lower ranks", id);
                break;
            }
            emit_merge(b, l, r, str, half, &mtxt, &merges, &firstm);
        }
    }
    for (int k = 0; s == MT_OK && k < ngiven; k++)
        emit_merge(b, given[k][0], given[k][1], str, half, &mtxt, &merges, &firstm);
    mt_buf_printf(&vocab, "}");
    mt_buf_printf(&merges, "]");
    mt_buf_printf(tj, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [");
    for (int i = 0; i < mt_bpe_nspecial(b); i++) {
        int32_t sid;
        const char *t = mt_bpe_special(b, i, &sid);
        mt_buf_printf(tj, "%s{\"id\": %d, \"content\": ", i ? ", " : "", sid);
        mt_buf_json_str(tj, t);
        mt_buf_printf(tj, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, "
                           "\"special\": true}");
    }
    mt_buf_printf(tj, "],\n  \"normalizer\": null,\n"
                       "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": "
                       "true, \"use_regex\": true},\n"
                       "  \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": "
                       "false, \"use_regex\": true},\n"
                       "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, "
                       "\"use_regex\": true},\n"
                       "  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
                       "\"continuing_subword_prefix\": \"\", \"end_of_word_suffix\": \"\", \"fuse_unk\": false, "
                       "\"byte_fallback\": false, \"ignore_merges\": false,\n    \"vocab\": ");
    if (vocab.data)
        mt_buf_printf(tj, "%s", vocab.data);
    mt_buf_printf(tj, ",\n    \"merges\": ");
    if (merges.data)
        mt_buf_printf(tj, "%s", merges.data);
    mt_buf_printf(tj, "\n  }\n}\n");
    mt_buf_printf(&cfg, "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"add_prefix_space\": false,\n"
                        "  \"model_max_length\": 1024,\n  \"clean_up_tokenization_spaces\": false");
    if (eot)
        mt_buf_printf(&cfg, ",\n  \"bos_token\": \"%s\",\n  \"eos_token\": \"%s\",\n  \"unk_token\": \"%s\"", eot, eot,
                      eot);
    mt_buf_printf(&cfg, "\n}\n");
    mt_buf_printf(&vocab, "\n");
#undef vocab
#undef mtxt
#undef cfg
    free(str);
    mt_buf_free(&merges);
    for (int i = 0; s == MT_OK && i < MT_HF_NFILES; i++)
        if (out[i].failed)
            s = mt_error(MT_ENOMEM, "out of memory for %s", mt_hf_files[i]);
    if (s != MT_OK)
        for (int i = 0; i < MT_HF_NFILES; i++)
            mt_buf_free(&out[i]);
    return s;
}

MtStatus mt_bpe_put_hf(MtBuf files[MT_HF_NFILES], const char *dir)
{
    MtStatus s = MT_OK;
    for (int i = 0; s == MT_OK && i < MT_HF_NFILES; i++)
        s = put(dir, mt_hf_files[i], &files[i]);
    for (int i = 0; i < MT_HF_NFILES; i++)
        mt_buf_free(&files[i]);
    return s;
}

MtStatus mt_bpe_write_hf(const MtBpe *b, const char *dir)
{
    MtBuf files[MT_HF_NFILES];
    MT_TRY(mt_bpe_render_hf(b, files));
    return mt_bpe_put_hf(files, dir);
}
