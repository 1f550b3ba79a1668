/* test_safetensors.c - safetensors round trip, a table of corrupt files, every
 * truncation and thousands of seeded single-byte mutations of a valid file (each must
 * load or fail with MT_EINPUT naming the path, never crash), and the atomic directory
 * commit of mt_fsutil. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mt_fsutil.h"
#include "mt_safetensors.h"
#include "mt_test.h"

static char tmpdir[64];

static void write_bytes(const char *path, const void *bytes, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(bytes, 1, n, fp) != n || fclose(fp) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc(*n ? *n : 1);
    if (fread(b, 1, *n, fp) != *n) {
        free(b);
        b = NULL;
    }
    fclose(fp);
    return b;
}

/* A raw file: 8-byte little-endian `hlen` (the real header length unless given), the
 * header text, then `data_len` bytes of data. */
static size_t make_raw(unsigned char *out, const char *header, uint64_t hlen, size_t data_len)
{
    size_t n = strlen(header);
    if (hlen == (uint64_t)-1)
        hlen = n;
    for (int i = 0; i < 8; i++)
        out[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(out + 8, header, n);
    for (size_t i = 0; i < data_len; i++)
        out[8 + n + i] = (unsigned char)(i * 7 + 1);
    return 8 + n + data_len;
}

/* The file must be refused with MT_EINPUT, a one-line message naming the path (and
 * containing `want` if given), and an empty, closable MtStFile. */
static void expect_bad_file(const char *path, const char *want, const char *what)
{
    MtStFile f;
    mt_error_clear();
    MtStatus st = mt_st_open(path, &f);
    const char *msg = mt_error_msg();
    CHECK(st == MT_EINPUT, "%s: status %d (%s)", what, st, msg);
    CHECK(strstr(msg, path) != NULL, "%s: message names the path: %s", what, msg);
    CHECK(strchr(msg, '\n') == NULL, "%s: one line: %s", what, msg);
    if (want)
        CHECK(strstr(msg, want) != NULL, "%s: message has \"%s\": %s", what, want, msg);
    CHECK(f.ntensors == 0 && f.tensors == NULL && f.buf == NULL && f.meta == NULL && f.path == NULL,
          "%s: file left empty", what);
    mt_st_close(&f);
    mt_st_close(&f);
}

static void expect_bad(const void *bytes, size_t n, const char *want, const char *what)
{
    char path[128];
    snprintf(path, sizeof path, "%s/bad.safetensors", tmpdir);
    write_bytes(path, bytes, n);
    expect_bad_file(path, want, what);
}

static void expect_bad_header(const char *header, size_t data_len, const char *want, const char *what)
{
    unsigned char raw[2048];
    expect_bad(raw, make_raw(raw, header, (uint64_t)-1, data_len), want, what);
}

/* ---- round trip */

static float wte[5 * 3], bias[7], scale[1];

static void fill(void)
{
    for (int i = 0; i < 15; i++)
        wte[i] = (float)i * 0.37f - 2.0f;
    for (int i = 0; i < 7; i++)
        bias[i] = -(float)i / 3.0f;
    bias[3] = -0.0f;
    scale[0] = 1e-30f;
}

static void write_valid(const char *path)
{
    MtStEntry e[3] = {
        {"transformer.wte.weight", 2, {5, 3}, wte},
        {"ln_f.bias", 1, {7}, bias},
        {"scale", 0, {0}, scale},
    };
    const char *meta[] = {"format", "pt", "note", "quote \" and \\ and\nnewline", "step", "42"};
    CHECK(mt_st_write(path, e, 3, meta, 3) == MT_OK, "write: %s", mt_error_msg());
}

static void test_roundtrip(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors", tmpdir);
    fill();
    write_valid(path);

    size_t n;
    unsigned char *raw = read_bytes(path, &n);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | raw[i];
    CHECK((8 + hlen) % 8 == 0, "data section is 8-byte aligned (header %llu)", (unsigned long long)hlen);
    CHECK(n == 8 + hlen + 4 * (15 + 7 + 1), "file size %zu", n);
    CHECK(raw[8] == '{' && (raw[8 + hlen - 1] == ' ' || raw[8 + hlen - 1] == '}'), "header shape");
    free(raw);

    MtStFile f;
    CHECK(mt_st_open(path, &f) == MT_OK, "open: %s", mt_error_msg());
    CHECK(f.ntensors == 3 && f.buf_len == 4 * 23 && strcmp(f.path, path) == 0, "ntensors %d", f.ntensors);
    const char *names[] = {"transformer.wte.weight", "ln_f.bias", "scale"};
    for (int i = 0; i < f.ntensors && i < 3; i++)
        CHECK(strcmp(f.tensors[i].name, names[i]) == 0, "tensor %d in written order", i);
    const MtStTensor *t = mt_st_find(&f, "transformer.wte.weight");
    CHECK(t && t->ndim == 2 && t->shape[0] == 5 && t->shape[1] == 3 && t->numel == 15 && t->begin == 0 &&
              t->end == 60,
          "wte entry");
    CHECK(t && memcmp(mt_st_f32(&f, t), wte, sizeof wte) == 0, "wte bits");
    t = mt_st_find(&f, "ln_f.bias");
    CHECK(t && t->ndim == 1 && t->numel == 7 && memcmp(mt_st_f32(&f, t), bias, sizeof bias) == 0, "bias bits");
    t = mt_st_find(&f, "scale");
    CHECK(t && t->ndim == 0 && t->numel == 1 && memcmp(mt_st_f32(&f, t), scale, 4) == 0, "scalar bits");
    CHECK(mt_st_find(&f, "nope") == NULL, "find absent");
    CHECK(mt_st_meta(&f, "format") && strcmp(mt_st_meta(&f, "format"), "pt") == 0, "meta format");
    CHECK(mt_st_meta(&f, "note") && strcmp(mt_st_meta(&f, "note"), "quote \" and \\ and\nnewline") == 0,
          "meta escapes");
    CHECK(mt_st_meta(&f, "step") && strcmp(mt_st_meta(&f, "step"), "42") == 0, "meta step");
    CHECK(mt_st_meta(&f, "absent") == NULL, "meta absent");
    mt_st_close(&f);
    mt_st_close(&f);
    CHECK(f.ntensors == 0 && f.buf == NULL, "closed");

    /* zero-size tensors, no metadata; and an empty file of no tensors */
    MtStEntry z[3] = {{"a", 2, {0, 4}, NULL}, {"b", 1, {2}, bias}, {"c", 1, {0}, NULL}};
    CHECK(mt_st_write(path, z, 3, NULL, 0) == MT_OK, "write zero-size: %s", mt_error_msg());
    CHECK(mt_st_open(path, &f) == MT_OK, "open zero-size: %s", mt_error_msg());
    CHECK(f.ntensors == 3 && f.meta == NULL && mt_st_meta(&f, "x") == NULL && f.buf_len == 8, "zero-size file");
    t = mt_st_find(&f, "b");
    CHECK(t && memcmp(mt_st_f32(&f, t), bias, 8) == 0, "b bits");
    mt_st_close(&f);
    CHECK(mt_st_write(path, NULL, 0, NULL, 0) == MT_OK, "write empty");
    CHECK(mt_st_open(path, &f) == MT_OK && f.ntensors == 0 && f.buf_len == 0, "open empty: %s", mt_error_msg());
    mt_st_close(&f);

    /* writer refusals */
    MtStEntry dup[2] = {{"x", 1, {1}, scale}, {"x", 1, {1}, scale}};
    CHECK(mt_st_write(path, dup, 2, NULL, 0) == MT_EINPUT, "duplicate names refused");
    MtStEntry badnd[1] = {{"x", 9, {1}, scale}};
    CHECK(mt_st_write(path, badnd, 1, NULL, 0) == MT_EINPUT, "ndim 9 refused");
    MtStEntry neg[1] = {{"x", 1, {-1}, scale}};
    CHECK(mt_st_write(path, neg, 1, NULL, 0) == MT_EINPUT, "negative dim refused");
    char nopath[160];
    snprintf(nopath, sizeof nopath, "%s/no/such/dir/m.safetensors", tmpdir);
    CHECK(mt_st_write(nopath, dup, 1, NULL, 0) == MT_EIO && strstr(mt_error_msg(), nopath), "unwritable: %s",
          mt_error_msg());
}

/* ---- corrupt files */

static void test_anomalies(void)
{
    unsigned char raw[4096];
    expect_bad("", 0, "truncated", "empty file");
    expect_bad("\x10\0\0\0\0", 5, "truncated", "5-byte file");
    expect_bad(raw, make_raw(raw, "{}", 1000, 0), "truncated", "header length larger than file");
    expect_bad(raw, make_raw(raw, "{}", 1ull << 63, 0), "limit", "header length 2^63");
    expect_bad(raw, make_raw(raw, "{}", 200000000, 0), "limit", "header length 200 MB");
    expect_bad_header("{\"a\":", 0, "invalid JSON", "invalid JSON");
    size_t nraw = make_raw(raw, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}_", (uint64_t)-1, 4);
    raw[nraw - 5] = 0; /* the '_' after the header becomes a NUL byte */
    expect_bad(raw, nraw, "invalid JSON", "NUL in header");
    expect_bad_header("[1,2]", 0, "not a JSON object", "header is an array");
    expect_bad_header("{\"w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "F16", "dtype F16");
    expect_bad_header("{\"w\":{\"dtype\":3,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "dtype", "dtype number");
    expect_bad_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "shape needs",
                      "shape/offset mismatch");
    expect_bad_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
                      "truncated: header says 8 bytes of data, file has 4", "offsets past end");
    expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                      12, "overlap", "overlapping");
    expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                      12, "hole", "hole");
    expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "hole",
                      "hole at the start");
    expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "trailing",
                      "trailing bytes");
    expect_bad_header("{}", 4, "trailing", "data without tensors");
    expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0]",
                      "negative dim");
    expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "shape[0]",
                      "fractional dim");
    expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,4]}}", 4,
                      "overflow", "numel overflow");
    expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
                      "9 dimensions", "ndim 9");
    expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8, "end before begin",
                      "begin > end");
    expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, "data_offsets",
                      "three offsets");
    expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,-4]}}", 4, "data_offsets",
                      "negative offset");
    expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "missing field \"data_offsets\"",
                      "missing field");
    expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
                      "unexpected field \"x\"", "extra field");
    expect_bad_header("{\"a\":[1]}", 0, "not an object", "entry not an object");
    expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4, "shape", "shape scalar");
    expect_bad_header("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "empty", "empty name");
    expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                      8, "duplicate key", "duplicate names");
    expect_bad_header("{\"__metadata__\":[1]}", 0, "__metadata__", "metadata not an object");
    expect_bad_header("{\"__metadata__\":{\"step\":42}}", 0, "__metadata__ \"step\"", "metadata number");

    char header[1024], name[300];
    memset(name, 'n', 256);
    name[256] = 0;
    snprintf(header, sizeof header, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", name);
    expect_bad_header(header, 4, "longer than 255", "256-byte name");
    name[255] = 0; /* 255 bytes is fine */
    snprintf(header, sizeof header, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", name);
    char path[128];
    snprintf(path, sizeof path, "%s/ok.safetensors", tmpdir);
    write_bytes(path, raw, make_raw(raw, header, (uint64_t)-1, 4));
    MtStFile f;
    CHECK(mt_st_open(path, &f) == MT_OK && f.ntensors == 1, "255-byte name: %s", mt_error_msg());
    mt_st_close(&f);

    /* names with control characters stay on one line in messages */
    expect_bad_header("{\"a\\nb\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "a?b",
                      "newline in name");

    snprintf(path, sizeof path, "%s/missing.safetensors", tmpdir);
    expect_bad_file(path, "cannot open", "missing file");
    expect_bad_file(tmpdir, "not a regular file", "directory");
}

/* Every truncation of a valid file, then seeded single-byte mutations. */
static void test_truncations_and_mutations(void)
{
    char valid[128], path[128];
    snprintf(valid, sizeof valid, "%s/valid.safetensors", tmpdir);
    snprintf(path, sizeof path, "%s/mut.safetensors", tmpdir);
    write_valid(valid);
    size_t n;
    unsigned char *orig = read_bytes(valid, &n);
    unsigned char *buf = malloc(n);
    CHECK(orig != NULL && n > 100, "read valid file");
    if (!orig)
        return;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | orig[i];

    int trunc_ok = 1;
    for (size_t len = 0; len < n; len++) {
        MtStFile f;
        write_bytes(path, orig, len);
        MtStatus st = mt_st_open(path, &f);
        if (st != MT_EINPUT || !strstr(mt_error_msg(), path) || f.buf != NULL) {
            trunc_ok = 0;
            fprintf(stderr, "truncation to %zu: status %d: %s\n", len, st, mt_error_msg());
        }
        mt_st_close(&f);
    }
    CHECK(trunc_ok, "every truncation of the %zu-byte file is refused", n);

    /* xorshift64: deterministic; 3 of 4 mutations hit the length or the header */
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    int loaded = 0, refused = 0, bad = 0;
    for (int it = 0; it < 4000; it++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        size_t pos = (rng >> 8) % 4 ? (size_t)((rng >> 16) % (8 + hlen)) : (size_t)((rng >> 16) % n);
        unsigned char v = (rng >> 40) & 1 ? (unsigned char)(rng >> 48) : (unsigned char)(orig[pos] ^ (1u << ((rng >> 48) % 8)));
        memcpy(buf, orig, n);
        buf[pos] = v;
        write_bytes(path, buf, n);
        MtStFile f;
        MtStatus st = mt_st_open(path, &f);
        if (st == MT_OK) {
            loaded++;
            /* whatever loads is self-consistent */
            int64_t total = 0;
            for (int i = 0; i < f.ntensors; i++) {
                const MtStTensor *t = &f.tensors[i];
                total += t->end - t->begin;
                if (t->end - t->begin != 4 * t->numel || t->end > (int64_t)f.buf_len)
                    bad++;
            }
            if (total != (int64_t)f.buf_len)
                bad++;
        } else if (st == MT_EINPUT && strstr(mt_error_msg(), path))
            refused++;
        else {
            bad++;
            fprintf(stderr, "mutation %d (byte %zu = 0x%02x): status %d: %s\n", it, pos, v, st, mt_error_msg());
        }
        mt_st_close(&f);
    }
    CHECK(bad == 0, "mutations: %d loaded, %d refused, %d bad", loaded, refused, bad);
    CHECK(loaded > 0 && refused > 1000, "mutations exercised both outcomes: %d loaded, %d refused", loaded, refused);
    printf("mutations: %d loaded, %d refused\n", loaded, refused);
    free(buf);
    free(orig);
}

/* ---- atomic directory commit */

static int count_entries(const char *dir, const char *must_have)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0, found = must_have == NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        n++;
        if (must_have && strcmp(e->d_name, must_have) == 0)
            found = 1;
    }
    closedir(d);
    return found ? n : -2;
}

static void test_dir_commit(void)
{
    char root[128], final[160], tmp[256], p[320];
    snprintf(root, sizeof root, "%s/runs", tmpdir);
    CHECK(mkdir(root, 0755) == 0, "mkdir runs");
    snprintf(final, sizeof final, "%s/ckpt", root);

    /* first commit: final does not exist */
    CHECK(!mt_path_exists(final), "final absent");
    CHECK(mt_dir_stage(final, tmp, sizeof tmp) == MT_OK, "stage: %s", mt_error_msg());
    char want[256];
    snprintf(want, sizeof want, "%s.tmp-%ld", final, (long)getpid());
    CHECK(strcmp(tmp, want) == 0 && mt_path_exists(tmp) && count_entries(tmp, NULL) == 0, "staged %s", tmp);
    snprintf(p, sizeof p, "%s/model.safetensors", tmp);
    fill();
    write_valid(p);
    snprintf(p, sizeof p, "%s/old.txt", tmp);
    write_bytes(p, "old", 3);
    CHECK(mt_dir_commit(tmp, final) == MT_OK, "commit 1: %s", mt_error_msg());
    CHECK(!mt_path_exists(tmp) && count_entries(final, "model.safetensors") == 2, "after commit 1");
    CHECK(count_entries(root, "ckpt") == 1, "only ckpt in runs/");

    /* second commit over it, with different contents and a subdirectory; a stale
     * staging directory of the same name is cleared first */
    CHECK(mkdir(tmp, 0755) == 0, "stale tmp");
    snprintf(p, sizeof p, "%s/stale", tmp);
    write_bytes(p, "x", 1);
    CHECK(mt_dir_stage(final, tmp, sizeof tmp) == MT_OK && count_entries(tmp, NULL) == 0, "stage clears stale");
    snprintf(p, sizeof p, "%s/new.txt", tmp);
    write_bytes(p, "new contents", 12);
    snprintf(p, sizeof p, "%s/sub", tmp);
    CHECK(mkdir(p, 0755) == 0, "mkdir sub");
    snprintf(p, sizeof p, "%s/sub/inner", tmp);
    write_bytes(p, "in", 2);
    CHECK(mt_dir_commit(tmp, final) == MT_OK, "commit 2: %s", mt_error_msg());
    CHECK(!mt_path_exists(tmp), "no tmp left behind");
    CHECK(count_entries(final, "new.txt") == 2 && count_entries(final, "sub") == 2, "final has the new files");
    snprintf(p, sizeof p, "%s/model.safetensors", final);
    CHECK(!mt_path_exists(p), "old files gone");
    size_t n;
    snprintf(p, sizeof p, "%s/new.txt", final);
    unsigned char *b = read_bytes(p, &n);
    CHECK(b && n == 12 && memcmp(b, "new contents", 12) == 0, "new contents");
    free(b);
    CHECK(count_entries(root, "ckpt") == 1, "only ckpt in runs/ after commit 2");

    /* trailing slash: the staging dir is still a sibling */
    char slashed[170];
    snprintf(slashed, sizeof slashed, "%s/", final);
    CHECK(mt_dir_stage(slashed, tmp, sizeof tmp) == MT_OK && strcmp(tmp, want) == 0, "stage with slash: %s", tmp);
    CHECK(mt_dir_commit(tmp, final) == MT_OK && count_entries(final, NULL) == 0 && !mt_path_exists(tmp),
          "commit of an empty dir");

    /* refusals */
    char small[8];
    CHECK(mt_dir_stage(final, small, sizeof small) == MT_EINPUT, "tmp_cap too small");
    snprintf(p, sizeof p, "%s/file", root);
    write_bytes(p, "f", 1);
    CHECK(mt_dir_stage(final, tmp, sizeof tmp) == MT_OK, "stage 4");
    CHECK(mt_dir_commit(tmp, p) == MT_EINPUT, "commit over a regular file refused: %s", mt_error_msg());
    CHECK(mt_dir_remove(tmp) == MT_OK && !mt_path_exists(tmp), "remove staged");
    CHECK(mt_dir_remove(tmp) == MT_OK, "remove missing is fine");
    CHECK(mt_dir_remove(p) == MT_EINPUT, "remove of a file refused");

    /* removal does not follow symbolic links */
    char outside[200], victim[260], linkdir[200], lnk[260];
    snprintf(outside, sizeof outside, "%s/outside", tmpdir);
    CHECK(mkdir(outside, 0755) == 0, "mkdir outside");
    snprintf(victim, sizeof victim, "%s/keep", outside);
    write_bytes(victim, "k", 1);
    snprintf(linkdir, sizeof linkdir, "%s/withlink", root);
    CHECK(mkdir(linkdir, 0755) == 0, "mkdir withlink");
    snprintf(lnk, sizeof lnk, "%s/link", linkdir);
    CHECK(symlink(outside, lnk) == 0, "symlink");
    CHECK(mt_dir_remove(linkdir) == MT_OK && !mt_path_exists(linkdir), "remove dir with a link");
    CHECK(mt_path_exists(victim), "link target untouched");
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mt_st_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_roundtrip();
    test_anomalies();
    test_truncations_and_mutations();
    test_dir_commit();
    CHECK(mt_dir_remove(tmpdir) == MT_OK && !mt_path_exists(tmpdir), "cleanup: %s", mt_error_msg());
    return mt_test_done("test_safetensors");
}
