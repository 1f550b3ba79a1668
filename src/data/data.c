/* data.c - token files, byte tokenizer, stateless sampler. */
#include "mt_data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mt_rng.h"

#define STREAM_DATA 0x44415441ull /* "DATA" */

static uint64_t rd_u(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void wr_u(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++, v >>= 8)
        p[i] = (unsigned char)v;
}

MtStatus mt_tokens_vocab(const char *path, uint32_t *vocab)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return mt_error(MT_EINPUT, "cannot open token file %s: %s", path, strerror(errno));
    unsigned char h[MT_TOKENS_HEADER];
    int ok = fread(h, 1, sizeof h, f) == sizeof h && memcmp(h, "MTTOKENS", 8) == 0;
    fclose(f);
    if (!ok)
        return mt_error(MT_EINPUT, "%s: not a meshtrain token file", path);
    *vocab = (uint32_t)rd_u(h + 24, 4);
    return MT_OK;
}

MtStatus mt_tokens_read(const char *path, MtTokens *t)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f)
        return mt_error(MT_EINPUT, "cannot open token file %s: %s", path, strerror(errno));
    struct stat st;
    unsigned char h[MT_TOKENS_HEADER];
    MtStatus s = MT_OK;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        s = mt_error(MT_EINPUT, "%s: not a regular file", path);
        goto done;
    }
    if (st.st_size < MT_TOKENS_HEADER || fread(h, 1, sizeof h, f) != sizeof h) {
        s = mt_error(MT_EINPUT, "%s: truncated: shorter than the %d-byte header", path,
                     MT_TOKENS_HEADER);
        goto done;
    }
    if (memcmp(h, "MTTOKENS", 8) != 0) {
        s = mt_error(MT_EINPUT, "%s: not a meshtrain token file (bad magic)", path);
        goto done;
    }
    uint32_t version = (uint32_t)rd_u(h + 8, 4), width = (uint32_t)rd_u(h + 12, 4);
    uint64_t count = rd_u(h + 16, 8);
    uint32_t vocab = (uint32_t)rd_u(h + 24, 4);
    if (version != 1) {
        s = mt_error(MT_EINPUT, "%s: unsupported token file version %u", path, version);
        goto done;
    }
    if (width != 1 && width != 2 && width != 4) {
        s = mt_error(MT_EINPUT, "%s: token width %u is not 1, 2 or 4", path, width);
        goto done;
    }
    if (vocab < 1 || vocab > (1u << 24)) {
        s = mt_error(MT_EINPUT, "%s: vocab size %u out of range", path, vocab);
        goto done;
    }
    uint64_t avail = (uint64_t)st.st_size - MT_TOKENS_HEADER;
    if (count > avail / width || count * width != avail) {
        s = mt_error(MT_EINPUT, "%s: header says %llu tokens of %u bytes, file holds %llu bytes",
                     path, (unsigned long long)count, width, (unsigned long long)avail);
        goto done;
    }
    unsigned char *raw = malloc(avail ? avail : 1);
    t->tok = malloc(sizeof(int32_t) * (count ? count : 1));
    if (!raw || !t->tok) {
        free(raw);
        s = mt_error(MT_ENOMEM, "%s: cannot allocate %llu tokens", path, (unsigned long long)count);
        goto done;
    }
    if (fread(raw, 1, avail, f) != avail) {
        free(raw);
        s = mt_error(MT_EINPUT, "%s: read failed", path);
        goto done;
    }
    for (uint64_t i = 0; i < count; i++) {
        uint64_t v = rd_u(raw + i * width, (int)width);
        if (v >= vocab) {
            free(raw);
            s = mt_error(MT_EINPUT, "%s: token %llu at position %llu is not below the vocab size %u",
                         path, (unsigned long long)v, (unsigned long long)i, vocab);
            goto done;
        }
        t->tok[i] = (int32_t)v;
    }
    free(raw);
    t->count = (int64_t)count;
    t->vocab = vocab;
done:
    fclose(f);
    if (s != MT_OK)
        mt_tokens_free(t);
    return s;
}

int mt_tokens_width(uint32_t vocab) { return vocab <= 256 ? 1 : vocab <= 65536 ? 2 : 4; }

/* a token file's header, then the tokens: tok (converted) or packed (as they are) */
static MtStatus write_tokens(const char *path, const int32_t *tok, const unsigned char *packed, int64_t count,
                             uint32_t vocab)
{
    int width = mt_tokens_width(vocab);
    FILE *f = fopen(path, "wb");
    if (!f)
        return mt_error(MT_EIO, "cannot create %s: %s", path, strerror(errno));
    unsigned char h[MT_TOKENS_HEADER] = {0};
    memcpy(h, "MTTOKENS", 8);
    wr_u(h + 8, 1, 4);
    wr_u(h + 12, (uint64_t)width, 4);
    wr_u(h + 16, (uint64_t)count, 8);
    wr_u(h + 24, vocab, 4);
    int ok = fwrite(h, 1, sizeof h, f) == sizeof h;
    if (packed)
        ok = ok && (count == 0 || fwrite(packed, (size_t)width, (size_t)count, f) == (size_t)count);
    unsigned char buf[4096];
    int64_t per = (int64_t)sizeof buf / width;
    for (int64_t i = 0; !packed && ok && i < count; i += per) {
        int64_t n = count - i < per ? count - i : per;
        for (int64_t j = 0; j < n; j++)
            wr_u(buf + j * width, (uint64_t)tok[i + j], width);
        ok = fwrite(buf, (size_t)width, (size_t)n, f) == (size_t)n;
    }
    ok = (fflush(f) == 0) && ok;
    ok = (fclose(f) == 0) && ok;
    return ok ? MT_OK : mt_error(MT_EIO, "writing %s failed: %s", path, strerror(errno));
}

MtStatus mt_tokens_write(const char *path, const int32_t *tok, int64_t count, uint32_t vocab)
{
    return write_tokens(path, tok, NULL, count, vocab);
}

MtStatus mt_tokens_write_packed(const char *path, const unsigned char *packed, int64_t count, uint32_t vocab)
{
    return write_tokens(path, NULL, packed, count, vocab);
}

void mt_tokens_free(MtTokens *t)
{
    free(t->tok);
    t->tok = NULL;
    t->count = 0;
}

void mt_bytes_encode(const unsigned char *text, int64_t n, int32_t *out)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = text[i];
}

int64_t mt_sample_start(uint64_t seed, int64_t step, int64_t i, int64_t count, int T)
{
    uint64_t span = (uint64_t)(count - T); /* starts 0 .. count-T-1 keep the target in range */
    return (int64_t)(mt_rng_u64(seed, STREAM_DATA, (uint64_t)step, (uint64_t)i) % span);
}

void mt_batch_fill(const MtTokens *t, uint64_t seed, int64_t step, int first, int n, int T,
                   int32_t *inputs, int32_t *targets)
{
    for (int k = 0; k < n; k++) {
        int64_t s = mt_sample_start(seed, step, first + k, t->count, T);
        memcpy(inputs + (int64_t)k * T, t->tok + s, sizeof(int32_t) * T);
        memcpy(targets + (int64_t)k * T, t->tok + s + 1, sizeof(int32_t) * T);
    }
}
