/* safetensors.c - validated reader and fsynced writer of .safetensors (F32 only). */
#define _POSIX_C_SOURCE 200809L
#include "mt_safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian and used in place: big-endian hosts are not supported"
#endif

/* A name fit for a one-line message: at most 64 bytes, control characters as '?'. */
static const char *printable(char out[72], const char *s)
{
    size_t i = 0;
    for (; s[i] && i < 64; i++)
        out[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    strcpy(out + i, s[i] ? "..." : "");
    return out;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* Reads exactly n bytes at offset `off`; 0 on success, else -1 with errno (0 = EOF). */
static int read_full(int fd, void *dst, size_t n, off_t off)
{
    unsigned char *d = dst;
    while (n > 0) {
        ssize_t r = pread(fd, d, n, off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = 0;
            return -1;
        }
        d += r;
        n -= (size_t)r;
        off += r;
    }
    return 0;
}

/* A non-negative int64 from a JSON integer, or -1. */
static int64_t nonneg_int(const MtJson *j)
{
    int64_t v;
    if (mt_json_type(j) != MT_JSON_NUMBER || mt_json_i64(j, &v) != MT_OK || v < 0)
        return -1;
    return v;
}

/* Validates one header entry into `t` (t->name is set by the caller). */
static MtStatus parse_entry(const char *path, const MtJson *v, MtStTensor *t)
{
    char nm[72];
    const char *name = printable(nm, t->name);
    if (mt_json_type(v) != MT_JSON_OBJECT)
        return mt_error(MT_EINPUT, "%s: tensor \"%s\": entry is not an object", path, name);
    static const char *fields[] = {"dtype", "shape", "data_offsets"};
    for (int i = 0; i < mt_json_len(v); i++) {
        const char *k = mt_json_key_at(v, i);
        if (strcmp(k, fields[0]) && strcmp(k, fields[1]) && strcmp(k, fields[2])) {
            char kb[72];
            return mt_error(MT_EINPUT, "%s: tensor \"%s\": unexpected field \"%s\"", path, name, printable(kb, k));
        }
    }
    for (int i = 0; i < 3; i++)
        if (!mt_json_get(v, fields[i]))
            return mt_error(MT_EINPUT, "%s: tensor \"%s\": missing field \"%s\"", path, name, fields[i]);

    const char *dtype = mt_json_str(mt_json_get(v, "dtype"));
    if (!dtype)
        return mt_error(MT_EINPUT, "%s: tensor \"%s\": dtype is not a string", path, name);
    if (strcmp(dtype, "F32") != 0) {
        char db[72];
        return mt_error(MT_EINPUT, "%s: tensor \"%s\": dtype %s is not supported (only F32)", path, name,
                        printable(db, dtype));
    }

    const MtJson *shape = mt_json_get(v, "shape");
    if (mt_json_type(shape) != MT_JSON_ARRAY)
        return mt_error(MT_EINPUT, "%s: tensor \"%s\": shape is not an array", path, name);
    if (mt_json_len(shape) > MT_ST_MAX_DIMS)
        return mt_error(MT_EINPUT, "%s: tensor \"%s\": shape has %d dimensions, at most %d are supported", path,
                        name, mt_json_len(shape), MT_ST_MAX_DIMS);
    t->ndim = mt_json_len(shape);
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        int64_t n = nonneg_int(mt_json_at(shape, d));
        if (n < 0)
            return mt_error(MT_EINPUT, "%s: tensor \"%s\": shape[%d] is not a non-negative integer", path, name, d);
        if (n > 0 && t->numel > INT64_MAX / 4 / n)
            return mt_error(MT_EINPUT, "%s: tensor \"%s\": shape is too large (element count overflows)", path,
                            name);
        t->shape[d] = n;
        t->numel *= n;
    }

    const MtJson *off = mt_json_get(v, "data_offsets");
    int64_t b = nonneg_int(mt_json_at(off, 0)), e = nonneg_int(mt_json_at(off, 1));
    if (mt_json_type(off) != MT_JSON_ARRAY || mt_json_len(off) != 2 || b < 0 || e < 0)
        return mt_error(MT_EINPUT, "%s: tensor \"%s\": data_offsets is not [begin, end] of non-negative integers",
                        path, name);
    if (b > e)
        return mt_error(MT_EINPUT, "%s: tensor \"%s\": data_offsets [%lld, %lld] end before begin", path, name,
                        (long long)b, (long long)e);
    if (e - b != t->numel * 4)
        return mt_error(MT_EINPUT, "%s: tensor \"%s\": data_offsets [%lld, %lld] hold %lld bytes, shape needs %lld",
                        path, name, (long long)b, (long long)e, (long long)(e - b), (long long)(t->numel * 4));
    t->begin = b;
    t->end = e;
    return MT_OK;
}

static int by_begin(const void *a, const void *b)
{
    const MtStTensor *x = *(const MtStTensor *const *)a, *y = *(const MtStTensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* The tensors must tile [0, data_len) exactly, as the format requires. */
static MtStatus check_tiling(const char *path, const MtStFile *f, int64_t data_len)
{
    int64_t max_end = 0;
    for (int i = 0; i < f->ntensors; i++)
        if (f->tensors[i].end > max_end)
            max_end = f->tensors[i].end;
    if (max_end > data_len)
        return mt_error(MT_EINPUT, "%s: truncated: header says %lld bytes of data, file has %lld", path,
                        (long long)max_end, (long long)data_len);
    if (f->ntensors <= 0) {
        if (data_len > 0)
            return mt_error(MT_EINPUT, "%s: %lld trailing bytes after the last tensor", path, (long long)data_len);
        return MT_OK;
    }
    const MtStTensor **order = malloc((size_t)f->ntensors * sizeof *order);
    if (!order)
        return mt_error(MT_ENOMEM, "%s: out of memory", path);
    for (int i = 0; i < f->ntensors; i++)
        order[i] = &f->tensors[i];
    qsort(order, (size_t)f->ntensors, sizeof *order, by_begin);
    MtStatus st = MT_OK;
    int64_t expect = 0;
    char n1[72], n2[72];
    for (int i = 0; i < f->ntensors && st == MT_OK; i++) {
        const MtStTensor *t = order[i];
        if (t->begin < expect)
            st = mt_error(MT_EINPUT, "%s: tensors \"%s\" and \"%s\" overlap (bytes %lld..%lld and %lld..%lld)", path,
                          printable(n1, order[i - 1]->name), printable(n2, t->name), (long long)order[i - 1]->begin,
                          (long long)order[i - 1]->end, (long long)t->begin, (long long)t->end);
        else if (t->begin > expect)
            st = mt_error(MT_EINPUT, "%s: hole in the data section: bytes %lld..%lld belong to no tensor", path,
                          (long long)expect, (long long)t->begin);
        expect = t->end;
    }
    free(order);
    if (st == MT_OK && expect < data_len)
        st = mt_error(MT_EINPUT, "%s: %lld trailing bytes after the last tensor", path, (long long)(data_len - expect));
    return st;
}

/* Validates the parsed header and fills f->tensors; moves __metadata__ into f->meta. */
static MtStatus parse_header(const char *path, MtJson *root, int64_t data_len, MtStFile *f)
{
    if (mt_json_type(root) != MT_JSON_OBJECT)
        return mt_error(MT_EINPUT, "%s: header is not a JSON object", path);
    int n = mt_json_len(root);
    f->tensors = calloc((size_t)(n > 0 ? n : 1), sizeof *f->tensors);
    if (!f->tensors)
        return mt_error(MT_ENOMEM, "%s: out of memory", path);
    for (int i = 0; i < n; i++) {
        const char *key = mt_json_key_at(root, i);
        MtJson *v = &root->items[i];
        char nm[72];
        if (strcmp(key, "__metadata__") == 0) {
            if (v->type != MT_JSON_OBJECT)
                return mt_error(MT_EINPUT, "%s: __metadata__ is not an object", path);
            for (int k = 0; k < v->n; k++)
                if (v->items[k].type != MT_JSON_STRING)
                    return mt_error(MT_EINPUT, "%s: __metadata__ \"%s\" is not a string", path,
                                    printable(nm, v->keys[k]));
            continue;
        }
        size_t len = strlen(key);
        if (len == 0 || len > MT_ST_MAX_NAME)
            return mt_error(MT_EINPUT, "%s: tensor name \"%s\" is %s", path, printable(nm, key),
                            len ? "longer than 255 bytes" : "empty");
        MtStTensor *t = &f->tensors[f->ntensors];
        if (!(t->name = dup_str(key)))
            return mt_error(MT_ENOMEM, "%s: out of memory", path);
        f->ntensors++;
        MT_TRY(parse_entry(path, v, t));
    }
    /* names are unique: the JSON parser refuses duplicate keys */
    MT_TRY(check_tiling(path, f, data_len));
    for (int i = 0; i < n; i++)
        if (strcmp(root->keys[i], "__metadata__") == 0) {
            if (!(f->meta = malloc(sizeof *f->meta)))
                return mt_error(MT_ENOMEM, "%s: out of memory", path);
            *f->meta = root->items[i]; /* move the subtree out of the tree */
            memset(&root->items[i], 0, sizeof root->items[i]);
        }
    return MT_OK;
}

static MtStatus open_file(const char *path, MtStFile *f, int lazy)
{
    memset(f, 0, sizeof *f);
    MtStFile r = {0};
    MtJson *root = NULL;
    char *header = NULL;
    MtStatus st = MT_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0)
        return mt_error(MT_EINPUT, "cannot open %s: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0) {
        st = mt_error(MT_EINPUT, "cannot stat %s: %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = mt_error(MT_EINPUT, "%s: not a regular file", path);
        goto done;
    }
    int64_t size = (int64_t)sb.st_size;
    unsigned char lenbuf[8];
    if (size < 8) {
        st = mt_error(MT_EINPUT, "%s: truncated: %lld bytes, a safetensors file has at least 8", path,
                      (long long)size);
        goto done;
    }
    if (read_full(fd, lenbuf, 8, 0) != 0)
        goto read_error;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | lenbuf[i];
    if (hlen > MT_ST_MAX_HEADER) {
        st = mt_error(MT_EINPUT, "%s: header length %llu is over the %d-byte limit (not a safetensors file?)", path,
                      (unsigned long long)hlen, MT_ST_MAX_HEADER);
        goto done;
    }
    if ((int64_t)hlen > size - 8) {
        st = mt_error(MT_EINPUT, "%s: truncated: header says %llu bytes of header, file has %lld after the length",
                      path, (unsigned long long)hlen, (long long)(size - 8));
        goto done;
    }
    if (!(header = malloc(hlen ? hlen : 1))) {
        st = mt_error(MT_ENOMEM, "%s: out of memory for a %llu-byte header", path, (unsigned long long)hlen);
        goto done;
    }
    if (read_full(fd, header, hlen, 8) != 0)
        goto read_error;
    if ((st = mt_json_parse(header, hlen, &root)) != MT_OK) {
        mt_error_prefix(st, "%s: header", path);
        goto done;
    }
    int64_t data_len = size - 8 - (int64_t)hlen;
    if ((st = parse_header(path, root, data_len, &r)) != MT_OK)
        goto done;
    /* Everything is validated: only now allocate the data section (or keep the file open) */
    r.buf_len = (size_t)data_len;
    r.data_off = 8 + (int64_t)hlen;
    if (lazy) {
        if (!(r.path = dup_str(path))) {
            st = mt_error(MT_ENOMEM, "%s: out of memory", path);
            goto done;
        }
        r.fd = fd + 1;
        fd = -1; /* kept: mt_st_read reads from it */
        goto done;
    }
    if (!(r.buf = malloc(r.buf_len ? r.buf_len : 1)) || !(r.path = dup_str(path))) {
        st = mt_error(MT_ENOMEM, "%s: out of memory for %lld bytes of data", path, (long long)data_len);
        goto done;
    }
    if (read_full(fd, r.buf, r.buf_len, (off_t)(8 + hlen)) != 0)
        goto read_error;
    goto done;

read_error:
    st = mt_error(MT_EINPUT, "%s: read failed: %s", path, errno ? strerror(errno) : "file shrank while reading");
done:
    if (fd >= 0)
        close(fd);
    free(header);
    mt_json_free(root);
    if (st != MT_OK)
        mt_st_close(&r);
    else
        *f = r;
    return st;
}

const MtStTensor *mt_st_find(const MtStFile *f, const char *name)
{
    for (int i = 0; i < f->ntensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

MtStatus mt_st_open(const char *path, MtStFile *f) { return open_file(path, f, 0); }

MtStatus mt_st_open_lazy(const char *path, MtStFile *f) { return open_file(path, f, 1); }

const float *mt_st_f32(const MtStFile *f, const MtStTensor *t) { return (const float *)(f->buf + t->begin); }

MtStatus mt_st_read(const MtStFile *f, const MtStTensor *t, int64_t first, int64_t count, float *dst)
{
    MT_ASSERT(first >= 0 && count >= 0 && first + count <= t->numel, "reading [%lld, %lld) of a tensor of %lld",
              (long long)first, (long long)(first + count), (long long)t->numel);
    if (count == 0)
        return MT_OK;
    int64_t at = t->begin + 4 * first;
    if (f->buf) {
        memcpy(dst, f->buf + at, sizeof(float) * (size_t)count);
        return MT_OK;
    }
    if (f->fd <= 0 || read_full(f->fd - 1, dst, sizeof(float) * (size_t)count, (off_t)(f->data_off + at)) != 0)
        return mt_error(MT_EINPUT, "%s: read failed: %s", f->path, errno ? strerror(errno) : "file shrank while reading");
    return MT_OK;
}

const char *mt_st_meta(const MtStFile *f, const char *key) { return mt_json_str(mt_json_get(f->meta, key)); }

void mt_st_close(MtStFile *f)
{
    if (f->tensors)
        for (int i = 0; i < f->ntensors; i++)
            free(f->tensors[i].name);
    free(f->tensors);
    free(f->buf);
    free(f->path);
    mt_json_free(f->meta);
    if (f->fd > 0)
        close(f->fd - 1);
    memset(f, 0, sizeof *f);
}

/* ---- writer */

/* need_data: the entries carry their data (mt_st_write); else only names and shapes (mt_st_create) */
static MtStatus check_entries(const char *path, const MtStEntry *e, int n, const char *const *kv, int nmeta,
                              int need_data)
{
    char nm[72];
    if (n < 0 || nmeta < 0 || (nmeta > 0 && !kv) || (n > 0 && !e))
        return mt_error(MT_EINPUT, "writing %s: bad arguments (n=%d, nmeta=%d)", path, n, nmeta);
    for (int i = 0; i < n; i++) {
        size_t len = e[i].name ? strlen(e[i].name) : 0;
        if (len == 0 || len > MT_ST_MAX_NAME || strcmp(e[i].name, "__metadata__") == 0)
            return mt_error(MT_EINPUT, "writing %s: tensor %d: name \"%s\" must be 1..255 bytes, not __metadata__",
                            path, i, e[i].name ? printable(nm, e[i].name) : "");
        for (int j = 0; j < i; j++)
            if (strcmp(e[i].name, e[j].name) == 0)
                return mt_error(MT_EINPUT, "writing %s: duplicate tensor name \"%s\"", path, printable(nm, e[i].name));
        if (e[i].ndim < 0 || e[i].ndim > MT_ST_MAX_DIMS)
            return mt_error(MT_EINPUT, "writing %s: tensor \"%s\": ndim %d is not in 0..8", path,
                            printable(nm, e[i].name), e[i].ndim);
        int64_t numel = 1;
        for (int d = 0; d < e[i].ndim; d++) {
            int64_t s = e[i].shape[d];
            if (s < 0 || (s > 0 && numel > INT64_MAX / 4 / s))
                return mt_error(MT_EINPUT, "writing %s: tensor \"%s\": bad shape[%d] = %lld", path,
                                printable(nm, e[i].name), d, (long long)s);
            numel *= s;
        }
        if (need_data && numel > 0 && !e[i].data)
            return mt_error(MT_EINPUT, "writing %s: tensor \"%s\": no data", path, printable(nm, e[i].name));
    }
    for (int i = 0; i < nmeta; i++) {
        if (!kv[2 * i] || !kv[2 * i + 1])
            return mt_error(MT_EINPUT, "writing %s: metadata pair %d has a NULL key or value", path, i);
        for (int j = 0; j < i; j++)
            if (strcmp(kv[2 * i], kv[2 * j]) == 0)
                return mt_error(MT_EINPUT, "writing %s: duplicate metadata key \"%s\"", path, printable(nm, kv[2 * i]));
    }
    return MT_OK;
}

static int64_t entry_bytes(const MtStEntry *e)
{
    int64_t numel = 1;
    for (int d = 0; d < e->ndim; d++)
        numel *= e->shape[d];
    return numel * 4;
}

/* The header (without its 8-byte length) into h, padded so the data starts 8-byte
 * aligned; the entries already checked.  On failure h is freed. */
static MtStatus build_header(const char *path, const MtStEntry *e, int n, const char *const *meta_kv, int nmeta,
                             MtBuf *h)
{
    mt_buf_init(h);
    mt_buf_printf(h, "{");
    if (nmeta > 0) {
        mt_buf_printf(h, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++) {
            mt_buf_printf(h, i ? "," : "");
            mt_buf_json_str(h, meta_kv[2 * i]);
            mt_buf_printf(h, ":");
            mt_buf_json_str(h, meta_kv[2 * i + 1]);
        }
        mt_buf_printf(h, "}%s", n ? "," : "");
    }
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        mt_buf_json_str(h, e[i].name);
        mt_buf_printf(h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < e[i].ndim; d++)
            mt_buf_printf(h, "%s%lld", d ? "," : "", (long long)e[i].shape[d]);
        int64_t bytes = entry_bytes(&e[i]);
        mt_buf_printf(h, "],\"data_offsets\":[%lld,%lld]}%s", (long long)off, (long long)(off + bytes),
                      i + 1 < n ? "," : "");
        off += bytes;
    }
    mt_buf_printf(h, "}");
    while (!h->failed && h->len % 8 != 0) /* data starts 8-byte aligned, as the reference pads */
        mt_buf_printf(h, " ");
    if (h->failed) {
        mt_buf_free(h);
        return mt_error(MT_ENOMEM, "writing %s: out of memory for the header", path);
    }
    if (h->len > MT_ST_MAX_HEADER) {
        size_t len = h->len;
        mt_buf_free(h);
        return mt_error(MT_EINPUT, "writing %s: header of %zu bytes is over the %d-byte limit", path, len,
                        MT_ST_MAX_HEADER);
    }
    return MT_OK;
}

int64_t mt_st_data_start(const MtStEntry *e, int n, const char *const *meta_kv, int nmeta)
{
    MtBuf h;
    if (check_entries("a new file", e, n, meta_kv, nmeta, 0) != MT_OK ||
        build_header("a new file", e, n, meta_kv, nmeta, &h) != MT_OK)
        return -1;
    int64_t start = 8 + (int64_t)h.len;
    mt_buf_free(&h);
    return start;
}

MtStatus mt_st_create(const char *path, const MtStEntry *e, int n, const char *const *meta_kv, int nmeta)
{
    MT_TRY(check_entries(path, e, n, meta_kv, nmeta, 0));
    MtBuf h;
    MT_TRY(build_header(path, e, n, meta_kv, nmeta, &h));
    int64_t size = 8 + (int64_t)h.len;
    for (int i = 0; i < n; i++)
        size += entry_bytes(&e[i]);
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int ok = fd >= 0 && write(fd, lenbuf, 8) == 8 && write(fd, h.data, h.len) == (ssize_t)h.len &&
             ftruncate(fd, (off_t)size) == 0;
    int err = errno;
    if (fd >= 0 && close(fd) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    mt_buf_free(&h);
    if (!ok) {
        unlink(path);
        return mt_error(MT_EIO, "cannot create %s: %s", path, strerror(err));
    }
    return MT_OK;
}

MtStatus mt_st_write(const char *path, const MtStEntry *e, int n, const char *const *meta_kv, int nmeta)
{
    MT_TRY(check_entries(path, e, n, meta_kv, nmeta, 1));
    MtBuf h;
    MT_TRY(build_header(path, e, n, meta_kv, nmeta, &h));
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        int err = errno;
        mt_buf_free(&h);
        return mt_error(MT_EIO, "cannot create %s: %s", path, strerror(err));
    }
    int ok = fwrite(lenbuf, 1, 8, fp) == 8 && fwrite(h.data, 1, h.len, fp) == h.len;
    for (int i = 0; ok && i < n; i++) {
        size_t bytes = (size_t)entry_bytes(&e[i]);
        ok = bytes == 0 || fwrite(e[i].data, 1, bytes, fp) == bytes;
    }
    ok = ok && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    int err = errno;
    if (fclose(fp) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    mt_buf_free(&h);
    if (!ok) {
        unlink(path);
        return mt_error(MT_EIO, "cannot write %s: %s", path, strerror(err));
    }
    return MT_OK;
}
