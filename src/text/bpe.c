#define _GNU_SOURCE /* memmem */
/* bpe.c - byte-level BPE over ranks, tiktoken's rank files, encode and decode (see
 * mt_text.h). */
#include "mt_text.h"

#include "mt_mem.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_SPECIALS 64
#define SHORT_PIECE 64 /* below: tiktoken's in-place merge; from here: buckets per rank */
#define WINDOW (1 << 17) /* longer pieces: merged a window at a time (merge_windows) */
#define WINDOW_LAP (1 << 12) /* the windows' overlap */

typedef struct {
    uint32_t off;  /* into blob */
    int32_t len;   /* bytes; 0: empty slot */
    int32_t rank;
    uint32_t tag;  /* the hash's high bits: most misses end without comparing bytes */
} Slot;

struct MtBpe {
    unsigned char *blob; /* every token's bytes */
    int64_t nblob, capblob;
    Slot *slot;          /* open addressing, a power of two */
    int64_t mask;
    int32_t n, cap;      /* tokens added; room by rank */
    int64_t *tok_off;    /* rank -> its bytes in blob (-1: none) */
    int32_t *tok_len;
    int32_t byte_rank[256];
    int nspecial;
    char *special[MAX_SPECIALS];
    int special_len[MAX_SPECIALS];
    int32_t special_id[MAX_SPECIALS];
    int32_t vocab; /* the largest id + 1 */
    int32_t maxlen; /* the longest token's bytes */
};

static uint64_t hash(const unsigned char *s, int len)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)len;
    int i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 29;
    }
    uint64_t w = 0; /* the tail a byte at a time: memcpy of a variable length is a libc call */
    for (int j = 0; i + j < len; j++)
        w |= (uint64_t)s[i + j] << (8 * j);
    h = (h ^ w) * 0x94D049BB133111EBull;
    return h ^ (h >> 31);
}

MtBpe *mt_bpe_new(int32_t n)
{
    MtBpe *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    int64_t size = 1024;
    while (size < 2 * (int64_t)n + 16)
        size *= 2;
    b->slot = calloc((size_t)size, sizeof(Slot));
    b->mask = size - 1;
    b->cap = n > 0 ? n : 1;
    b->tok_off = malloc(sizeof(int64_t) * (size_t)b->cap);
    b->tok_len = calloc((size_t)b->cap, sizeof(int32_t));
    b->capblob = 8 * (int64_t)b->cap + 64;
    b->blob = malloc((size_t)b->capblob);
    if (!b->slot || !b->tok_off || !b->tok_len || !b->blob) {
        mt_bpe_free(b);
        return NULL;
    }
    for (int32_t i = 0; i < b->cap; i++)
        b->tok_off[i] = -1;
    for (int i = 0; i < 256; i++)
        b->byte_rank[i] = -1;
    return b;
}

void mt_bpe_free(MtBpe *b)
{
    if (!b)
        return;
    for (int i = 0; i < b->nspecial; i++)
        free(b->special[i]);
    free(b->slot);
    free(b->tok_off);
    free(b->tok_len);
    free(b->blob);
    free(b);
}

int32_t mt_bpe_rank(const MtBpe *b, const unsigned char *s, int len)
{
    if (len == 1)
        return b->byte_rank[s[0]];
    uint64_t hv = hash(s, len);
    uint32_t tag = (uint32_t)(hv >> 32);
    for (int64_t h = (int64_t)(hv & (uint64_t)b->mask);; h = (h + 1) & b->mask) {
        const Slot *e = &b->slot[h];
        if (e->len == 0)
            return -1;
        if (e->tag == tag && e->len == len && memcmp(b->blob + e->off, s, (size_t)len) == 0)
            return e->rank;
    }
}

MtStatus mt_bpe_add(MtBpe *b, const unsigned char *s, int len, int32_t rank)
{
    if (len < 1 || rank < 0 || rank >= b->cap)
        return mt_error(MT_EINPUT, "token %d of %d bytes is outside the vocabulary of %d", rank, len, b->cap);
    if (b->tok_off[rank] >= 0)
        return mt_error(MT_EINPUT, "id %d is given twice", rank);
    uint64_t hv = hash(s, len);
    uint32_t tag = (uint32_t)(hv >> 32);
    int64_t h = (int64_t)(hv & (uint64_t)b->mask);
    for (; b->slot[h].len != 0; h = (h + 1) & b->mask) { /* to the first empty slot: the bytes are new */
        const Slot *e = &b->slot[h];
        if (e->tag == tag && e->len == len && memcmp(b->blob + e->off, s, (size_t)len) == 0)
            return mt_error(MT_EINPUT, "the bytes of id %d are already id %d", rank, e->rank);
    }
    if (b->nblob + len > UINT32_MAX)
        return mt_error(MT_EINPUT, "the vocabulary's tokens exceed 4 GB");
    if (b->nblob + len > b->capblob) {
        int64_t c = 2 * b->capblob + len;
        unsigned char *nb = realloc(b->blob, (size_t)c);
        if (!nb)
            return mt_error(MT_ENOMEM, "out of memory for the vocabulary");
        b->blob = nb;
        b->capblob = c;
    }
    memcpy(b->blob + b->nblob, s, (size_t)len);
    b->slot[h] = (Slot){(uint32_t)b->nblob, len, rank, tag};
    b->tok_off[rank] = b->nblob;
    b->tok_len[rank] = len;
    b->nblob += len;
    if (len == 1)
        b->byte_rank[s[0]] = rank;
    if (len > b->maxlen)
        b->maxlen = len;
    b->n++;
    if (rank + 1 > b->vocab)
        b->vocab = rank + 1;
    return MT_OK;
}

MtStatus mt_bpe_add_special(MtBpe *b, const char *text, int32_t id)
{
    if (b->nspecial == MAX_SPECIALS)
        return mt_error(MT_EINPUT, "more than %d special tokens", MAX_SPECIALS);
    if (id < b->cap && b->tok_off[id] >= 0)
        return mt_error(MT_EINPUT, "special token %s: id %d is a rank", text, id);
    int n = (int)strlen(text);
    if (n == 0 || !(b->special[b->nspecial] = malloc((size_t)n + 1)))
        return mt_error(MT_EINPUT, "special token '%s' cannot be added", text);
    memcpy(b->special[b->nspecial], text, (size_t)n + 1);
    b->special_len[b->nspecial] = n;
    b->special_id[b->nspecial++] = id;
    if (id + 1 > b->vocab)
        b->vocab = id + 1;
    return MT_OK;
}

int32_t mt_bpe_vocab(const MtBpe *b) { return b->vocab; }

int mt_bpe_token(const MtBpe *b, int32_t id, const unsigned char **bytes, int *len)
{
    if (id < 0 || id >= b->cap || b->tok_off[id] < 0)
        return 0;
    *bytes = b->blob + b->tok_off[id];
    *len = b->tok_len[id];
    return 1;
}

int mt_bpe_nspecial(const MtBpe *b) { return b->nspecial; }

const char *mt_bpe_special(const MtBpe *b, int i, int32_t *id)
{
    *id = b->special_id[i];
    return b->special[i];
}

int mt_bpe_split(const MtBpe *b, int32_t rank, int32_t *left, int32_t *right)
{
    const unsigned char *p;
    int len;
    if (!mt_bpe_token(b, rank, &p, &len) || len < 2)
        return 0;
    /* tiktoken's merge with the ranks below `rank` only: part i starts at start[i]; r[i] is
     * the rank of parts i and i + 1 joined (rank: none), updated beside each merge */
    int sbuf[258], *start = len < 257 ? sbuf : malloc(sizeof(int) * (size_t)(len + 1));
    int32_t rbuf[258], *r = len < 257 ? rbuf : malloc(sizeof(int32_t) * (size_t)(len + 1));
    MT_ASSERT(start && r, "out of memory");
    int n = len + 1; /* part starts, the end included */
    for (int i = 0; i <= len; i++)
        start[i] = i;
#define JOINED(i) ((i) + 2 < n ? mt_bpe_rank(b, p + start[i], start[(i) + 2] - start[i]) : -1)
#define BELOW(x) ((x) >= 0 && (x) < rank ? (x) : rank)
    for (int i = 0; i + 2 < n; i++)
        r[i] = BELOW(JOINED(i));
    for (;;) {
        int best = -1;
        int32_t br = rank;
        for (int i = 0; i + 2 < n; i++)
            if (r[i] < br) {
                br = r[i];
                best = i;
            }
        if (best < 0)
            break;
        for (int i = best + 1; i + 1 < n; i++) { /* part best + 1 joins part best */
            start[i] = start[i + 1];
            r[i] = r[i + 1];
        }
        n--;
        if (best + 2 < n)
            r[best] = BELOW(JOINED(best));
        if (best > 0)
            r[best - 1] = BELOW(JOINED(best - 1));
    }
#undef JOINED
#undef BELOW
    int ok = n == 3;
    if (ok) {
        *left = mt_bpe_rank(b, p, start[1]);
        *right = mt_bpe_rank(b, p + start[1], len - start[1]);
    }
    if (start != sbuf)
        free(start);
    if (r != rbuf)
        free(r);
    return ok;
}

/* ---- tiktoken's rank files ---- */

static int b64(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
         : c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* standard base64 with padding into out; the byte count, or -1 */
static int unbase64(const char *s, int n, unsigned char *out)
{
    if (n == 0 || n % 4 != 0)
        return -1;
    int k = 0;
    for (int i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int j = 0; j < 4; j++) {
            if (s[i + j] == '=' && i + 4 == n && j >= 2) {
                v[j] = 0;
                pad++;
            } else if ((v[j] = b64((unsigned char)s[i + j])) < 0 || pad)
                return -1;
        }
        unsigned w = (unsigned)(v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3]);
        out[k++] = (unsigned char)(w >> 16);
        if (pad < 2)
            out[k++] = (unsigned char)(w >> 8);
        if (pad < 1)
            out[k++] = (unsigned char)w;
    }
    return k;
}

#define TIKTOKEN_LINE 4095 /* a line's bytes (its '\n' aside) must stay below this */

MtStatus mt_bpe_read_tiktoken(const char *path, int with_eot, MtBpe **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    struct stat st;
    char *text = NULL;
    if (f && fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && (text = malloc((size_t)st.st_size + 1)) &&
        fread(text, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        free(text);
        text = NULL;
    }
    if (f)
        fclose(f);
    if (!text)
        return mt_error(MT_EINPUT, "%s: cannot be read", path);
    int64_t size = (int64_t)st.st_size;
    text[size] = 0;
    int32_t lines = 0; /* a last line without '\n' counts */
    for (const char *q = text; (q = memchr(q, '\n', (size_t)(text + size - q))); q++)
        lines++;
    lines += size > 0 && text[size - 1] != '\n';
    MtBpe *b = mt_bpe_new(lines + 1);
    if (!b) {
        free(text);
        return mt_error(MT_ENOMEM, "%s: out of memory for %d tokens", path, lines);
    }
    unsigned char tok[TIKTOKEN_LINE];
    MtStatus s = MT_OK;
    int32_t ln = 0;
    for (char *line = text, *next; s == MT_OK && line < text + size; line = next) {
        ln++;
        char *nl = memchr(line, '\n', (size_t)(text + size - line));
        next = nl ? nl + 1 : text + size;
        int64_t L = (nl ? nl : text + size) - line;
        if (L >= TIKTOKEN_LINE) {
            s = mt_error(MT_EINPUT, "%s:%d: line too long", path, ln);
            break;
        }
        while (L && line[L - 1] == '\r')
            L--;
        line[L] = 0; /* the line alone, as a string */
        char *sp = memchr(line, ' ', (size_t)L);
        char *end = NULL;
        long r = -1;
        if (sp) { /* the rank: plain digits at once, anything else as strtol reads it */
            char *d = sp + 1;
            for (r = 0; *d >= '0' && *d <= '9' && d - sp < 10; d++)
                r = 10 * r + (*d - '0');
            end = d;
            if (*d || d == sp + 1)
                r = strtol(sp + 1, &end, 10);
        }
        int nb = sp ? unbase64(line, (int)(sp - line), tok) : -1;
        if (!sp || !end || end == sp + 1 || *end || r < 0)
            s = mt_error(MT_EINPUT, "%s:%d: want '<base64> <rank>', got '%.60s'", path, ln, line);
        else if (nb < 0)
            s = mt_error(MT_EINPUT, "%s:%d: bad base64 '%.*s'", path, ln, (int)(sp - line) > 60 ? 60 : (int)(sp - line),
                         line);
        else if (r >= lines)
            s = mt_error(MT_EINPUT, "%s:%d: rank %ld is beyond the file's %d tokens", path, ln, r, lines);
        else if (mt_bpe_add(b, tok, nb, (int32_t)r) != MT_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", mt_error_msg());
            s = mt_error(MT_EINPUT, "%s:%d: %s", path, ln, why);
        }
    }
    free(text);
    /* every line gave a distinct rank below the line count: the ranks are 0 .. ln - 1 */
    if (s == MT_OK && ln == 0)
        s = mt_error(MT_EINPUT, "%s: no tokens", path);
    for (int i = 0; s == MT_OK && i < 256; i++)
        if (b->byte_rank[i] < 0)
            s = mt_error(MT_EINPUT, "%s: byte 0x%02x has no token (a byte-level vocabulary needs all 256)", path, i);
    if (s == MT_OK && with_eot)
        s = mt_bpe_add_special(b, "<|endoftext|>", ln);
    if (s != MT_OK) {
        mt_bpe_free(b);
        return s;
    }
    *out = b;
    return MT_OK;
}

/* ---- encoding ---- */

/* tiktoken's merge on a short piece: parts[i] starts a part; pair i's rank is that of the
 * bytes from parts[i] to parts[i + 2] */
static void merge_short(const MtBpe *b, const unsigned char *p, int len, int32_t *out, int64_t *k)
{
    int start[SHORT_PIECE + 1];
    int32_t rank[SHORT_PIECE + 1], tok[SHORT_PIECE + 1]; /* pair i's rank, part i's token */
    int n = len + 1; /* parts, the last one the end */
    for (int i = 0; i <= len; i++) {
        start[i] = i;
        tok[i] = i < len ? b->byte_rank[p[i]] : -1;
    }
    for (int i = 0; i + 2 < n; i++)
        rank[i] = mt_bpe_rank(b, p + i, 2);
    for (;;) {
        int best = -1;
        int32_t br = INT32_MAX;
        for (int i = 0; i + 2 < n; i++)
            if (rank[i] >= 0 && rank[i] < br) {
                br = rank[i];
                best = i;
            }
        if (best < 0)
            break;
        tok[best] = br;
        for (int i = best + 1; i + 1 < n; i++) { /* part best + 1 joins part best */
            start[i] = start[i + 1];
            rank[i] = rank[i + 1];
            tok[i] = tok[i + 1];
        }
        n--;
        if (best + 2 < n)
            rank[best] = mt_bpe_rank(b, p + start[best], start[best + 2] - start[best]);
        else
            rank[best] = -1;
        if (best > 0)
            rank[best - 1] = mt_bpe_rank(b, p + start[best - 1], start[best + 1] - start[best - 1]);
    }
    for (int i = 0; i + 1 < n; i++)
        out[(*k)++] = tok[i];
}

/* the same on a long piece.  Parts by their lengths: a part starting at i holds at[i].s
 * bytes (0 where no part starts), and the one ending at e holds at[e].e (read at ends
 * only), so a merge and its neighbours touch a few nearby bytes, not a linked list spread
 * over the piece.  Pairs wait in a bucket per rank as their left part's start; an entry is
 * live while the two parts from there still span its token's length (the boundaries only
 * go, so a pair that changed never comes back).  The lowest non-empty rank is merged
 * first, its entries in the order of their starts (leftmost first, as the in-place merge);
 * a merge makes pairs of other ranks only (a longer string), and where one is lower the
 * bucket is left for it, so the order is always (rank, start).  Linear in the piece but
 * for the sorting of buckets filled out of order. */
typedef struct {
    int32_t *e;
    int32_t head, n, cap, unsorted; /* entries [head, n) are waiting */
} Bucket;

static int int_cmp(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* the buckets of long pieces: one per rank, the ranks that hold entries as bits (so the
 * next one is found a word at a time) and the ranks that have storage.  Made at the first
 * long piece of an encode and kept for the next ones (every bucket is empty after a piece;
 * their storage stays), freed at the encode's end: a text of many pieces just over 64 bytes
 * pays for the vocabulary's buckets once. */
typedef struct {
    Bucket *bk;
    uint64_t *live;
    int32_t *used;
    int32_t nused, capused, V;
} Pairs;

static void pairs_free(Pairs *ps)
{
    for (int32_t u = 0; ps->bk && u < ps->nused; u++)
        free(ps->bk[ps->used[u]].e);
    free(ps->used);
    free(ps->live);
    free(ps->bk);
    *ps = (Pairs){0};
}

static void bucket_push(Pairs *ps, int32_t r, int32_t start, int32_t *low)
{
    Bucket *q = &ps->bk[r];
    if (q->n == q->cap) {
        if (q->head > q->n / 2) { /* taken entries fill half: drop them rather than grow */
            memmove(q->e, q->e + q->head, sizeof(int32_t) * (size_t)(q->n - q->head));
            q->n -= q->head;
            q->head = 0;
        } else {
            if (q->cap == 0) {
                if (ps->nused == ps->capused) {
                    ps->capused = ps->capused ? 2 * ps->capused : 64;
                    ps->used = realloc(ps->used, sizeof(int32_t) * (size_t)ps->capused);
                    MT_ASSERT(ps->used, "out of memory to merge a long piece");
                }
                ps->used[ps->nused++] = r;
            }
            q->cap = q->cap ? 2 * q->cap : 8;
            q->e = realloc(q->e, sizeof(int32_t) * (size_t)q->cap);
            MT_ASSERT(q->e, "out of memory to merge a long piece");
        }
    }
    q->unsorted |= q->n > q->head && start < q->e[q->n - 1];
    q->e[q->n++] = start;
    ps->live[r >> 6] |= (uint64_t)1 << (r & 63);
    *low = r < *low ? r : *low;
}

/* the lowest rank >= r whose bucket holds entries; V if none */
static int32_t next_live(const Pairs *ps, int32_t r)
{
    int32_t w = r >> 6, nw = (ps->V + 63) >> 6;
    if (r >= ps->V)
        return ps->V;
    uint64_t bits = ps->live[w] & (~(uint64_t)0 << (r & 63));
    while (!bits && ++w < nw)
        bits = ps->live[w];
    return bits ? (int32_t)(w * 64 + __builtin_ctzll(bits)) : ps->V;
}

/* a long piece's parts by their lengths, a byte each: the part that starts at i holds
 * s[i] bytes (0 where none starts), the one that ends at e holds e[e] (read at ends only).
 * A part is a token, so 255 and up happen only with a vocabulary of long tokens: then the
 * byte says 255 and the length is in `big` (pages reserved, touched only where written). */
typedef struct {
    uint8_t s, e;
} Span;

typedef struct {
    Span *at;
    int32_t (*big)[2]; /* NULL unless some token has 255 bytes or more */
} Spans;

static inline int32_t span_s(const Spans *v, int32_t i)
{
    int32_t x = v->at[i].s;
    return x < 255 ? x : v->big[i][0];
}

static inline int32_t span_e(const Spans *v, int32_t i)
{
    int32_t x = v->at[i].e;
    return x < 255 ? x : v->big[i][1];
}

static inline void span_set(Spans *v, int32_t start, int32_t n)
{
    v->at[start].s = (uint8_t)(n < 255 ? n : 255);
    v->at[start + n - 1].e = (uint8_t)(n < 255 ? n : 255);
    if (n >= 255) {
        v->big[start][0] = n;
        v->big[start + n - 1][1] = n;
    }
}

/* room for the parts of a piece of len bytes: huge pages, every element of `at` set before
 * it is read (a first touch costs more than the merge) */
static Spans spans_new(const MtBpe *b, int len)
{
    Spans v = {mt_mem_host_reserve(sizeof(Span) * (size_t)len),
               b->maxlen >= 255 ? mt_mem_host_reserve(sizeof(int32_t[2]) * (size_t)len) : NULL};
    MT_ASSERT(v.at && (v.big || b->maxlen < 255), "out of memory to merge a piece of %d bytes", len);
    return v;
}

/* the merge of a long piece in the parts' room v (for len bytes at least) */
static void merge_in(const MtBpe *b, Pairs *ps, Spans v, const unsigned char *p, int len, int32_t *out, int64_t *k)
{
    int32_t V = b->cap, low = V; /* no bucket below `low` holds an entry */
    if (!ps->bk)
        *ps = (Pairs){calloc((size_t)V, sizeof(Bucket)), calloc((size_t)(V + 63) / 64, sizeof(uint64_t)), NULL, 0, 0, V};
    Bucket *bk = ps->bk;
    MT_ASSERT(bk && ps->live, "out of memory to merge a piece of %d bytes", len);
    memset(v.at, 1, sizeof(Span) * (size_t)len);
    for (int i = 0; i + 2 <= len; i++) {
        int32_t r = mt_bpe_rank(b, p + i, 2);
        if (r >= 0)
            bucket_push(ps, r, i, &low);
    }
    while ((low = next_live(ps, low)) < V) {
        int32_t r = low, want = b->tok_len[r];
        Bucket *q = &bk[r];
        if (q->unsorted)
            qsort(q->e + q->head, (size_t)(q->n - q->head), sizeof(int32_t), int_cmp);
        q->unsorted = 0;
        int32_t e = q->head;
        for (; e < q->n && low == r; e++) {
            int32_t i = q->e[e], a = span_s(&v, i);
            if (a == 0 || i + a >= len || a + span_s(&v, i + a) != want)
                continue; /* stale: the parts from i have changed since */
            int32_t nx = i + want; /* the part at i + a joins the part at i */
            v.at[i + a].s = 0;
            span_set(&v, i, want);
            if (nx < len) { /* the pair (i, next) */
                int32_t r2 = mt_bpe_rank(b, p + i, want + span_s(&v, nx));
                if (r2 >= 0)
                    bucket_push(ps, r2, i, &low);
            }
            if (i > 0) { /* the pair (previous, i) */
                int32_t pv = i - span_e(&v, i - 1);
                int32_t r2 = mt_bpe_rank(b, p + pv, nx - pv);
                if (r2 >= 0)
                    bucket_push(ps, r2, pv, &low);
            }
        }
        /* the bucket's entries taken leave it; a lower rank pushed meanwhile goes first */
        q = &bk[r];
        q->head = e;
        if (q->head == q->n) {
            q->head = q->n = 0;
            ps->live[r >> 6] &= ~((uint64_t)1 << (r & 63));
        }
    }
    for (int i = 0, n; i < len; i += n)
        out[(*k)++] = mt_bpe_rank(b, p + i, n = span_s(&v, i));
}

static void merge_long(const MtBpe *b, Pairs *ps, const unsigned char *p, int len, int32_t *out, int64_t *k)
{
    Spans v = spans_new(b, len);
    merge_in(b, ps, v, p, len, out, k);
    free(v.at);
    free(v.big);
}

/* a merged part's bytes: its token's, or 1 for a byte the vocabulary lacks */
static inline int part_len(const MtBpe *b, int32_t id) { return id >= 0 ? b->tok_len[id] : 1; }

/* The ids of a piece longer than a window, a window at a time, so that a merge's parts stay
 * in cache (a 10 MB piece's parts and buckets do not).  Exact, by two facts of the merge
 * (lowest rank first, leftmost of equal ranks; a boundary once merged over never returns):
 *  - if the ids of a text have a boundary at x, they are the ids of its text before x
 *    followed by those of its text from x (the merges on either side, in the same order, are
 *    the whole run of that side alone: no pair across x is ever the lowest);
 *  - if the ids of L = T[0, e) have a boundary at s < e and those of R = T[s, n) a boundary
 *    at e, the ids of T have boundaries at s and e.  Before the first merge across s or e,
 *    the merges inside L are a prefix of L's own run (each was the lowest pair of T, so of
 *    L), and those inside R of R's; a first merge across s is then L's next merge, across e
 *    R's next one, and neither run ever makes it.
 * The window [ws, we) has its ids at out[c0, *k); the next one, R, starts at s, the last
 * boundary of those ids at most `lap` before we.  Where R's ids and the window's share a
 * boundary e in (s, we], the window's ids up to e are those of T[0, e) (the first fact), so
 * the ids of T up to s are the window's and from s R's (the second).  Where they share none
 * (never seen on real text), the rest of the piece from ws is merged whole: the same ids, at
 * the old cost. */
static void merge_windows(const MtBpe *b, Pairs *ps, const unsigned char *p, int len, int win, int lap,
                          int32_t *out, int64_t *k)
{
    Spans v = spans_new(b, win);
    int *ends = malloc(sizeof(int) * (size_t)(lap + b->maxlen + 1)); /* the window's boundaries in (s, we] */
    MT_ASSERT(ends, "out of memory to merge a piece of %d bytes", len);
    int64_t c0 = *k;
    int ws = 0, we = win < len ? win : len;
    merge_in(b, ps, v, p, we, out, k);
    while (we < len) {
        int64_t cs = c0; /* the ids from s */
        int s = ws, nends = 0;
        for (int64_t i = c0; i < *k && s + part_len(b, out[i]) <= we - lap; i++) {
            s += part_len(b, out[i]);
            cs = i + 1;
        }
        for (int64_t i = cs, e = s; i < *k; i++)
            ends[nends++] = (int)(e += part_len(b, out[i]));
        int ne = s + win < len ? s + win : len, ok = 0;
        int64_t ck = cs;
        if (s > ws) {
            merge_in(b, ps, v, p + s, ne - s, out, &ck);
            int e = s;
            for (int64_t i = cs, j = 0; i < ck && !ok && e < we; i++) {
                e += part_len(b, out[i]);
                while (j < nends && ends[j] < e)
                    j++;
                ok = j < nends && ends[j] == e;
            }
        }
        if (!ok) {
            *k = c0;
            merge_long(b, ps, p + ws, len - ws, out, k);
            break;
        }
        c0 = cs;
        ws = s;
        we = ne;
        *k = ck;
    }
    free(ends);
    free(v.at);
    free(v.big);
}

void mt_bpe_merge(const MtBpe *b, const unsigned char *piece, int len, int buckets, int32_t *out, int64_t *k)
{
    MT_ASSERT(buckets || len <= SHORT_PIECE, "the in-place merge takes pieces of at most %d bytes, not %d", SHORT_PIECE,
              len);
    if (buckets) {
        Pairs ps = {0};
        if (buckets > 1 && len > buckets)
            merge_windows(b, &ps, piece, len, buckets, buckets / 4, out, k);
        else
            merge_long(b, &ps, piece, len, out, k);
        pairs_free(&ps);
    } else
        merge_short(b, piece, len, out, k);
}

static void encode_piece(const MtBpe *b, Pairs *ps, const unsigned char *piece, int len, int32_t *out, int64_t *k)
{
    int32_t r = mt_bpe_rank(b, piece, len);
    if (r >= 0)
        out[(*k)++] = r;
    else if (len <= SHORT_PIECE)
        merge_short(b, piece, len, out, k);
    else if (len > WINDOW)
        merge_windows(b, ps, piece, len, WINDOW, WINDOW_LAP, out, k);
    else
        merge_long(b, ps, piece, len, out, k);
}

void mt_bpe_encode_piece(const MtBpe *b, const unsigned char *piece, int len, int32_t *out, int64_t *k)
{
    Pairs ps = {0};
    encode_piece(b, &ps, piece, len, out, k);
    pairs_free(&ps);
}

static int grow(int32_t **ids, int64_t *cap, int64_t need)
{
    if (need <= *cap)
        return 1;
    int64_t c = *cap > 0 ? *cap : 1024;
    while (c < need)
        c *= 2;
    int32_t *x = realloc(*ids, sizeof(int32_t) * (size_t)c);
    if (!x)
        return 0;
    *ids = x;
    *cap = c;
    return 1;
}

/* the text s[0..n) without specials */
static int64_t encode_plain(const MtBpe *b, Pairs *ps, const unsigned char *s, int64_t n, int32_t **ids,
                            int64_t *cap, int64_t k)
{
    for (int64_t i = 0; i < n;) {
        int64_t e = mt_pretok_next(s, n, i);
        MT_ASSERT(e > i && e - i < INT32_MAX, "a piece of %lld bytes", (long long)(e - i));
        MT_ASSERT(grow(ids, cap, k + (e - i)), "out of memory for %lld token ids", (long long)(k + e - i));
        encode_piece(b, ps, s + i, (int)(e - i), *ids, &k);
        i = e;
    }
    return k;
}

/* mt_bpe_encode with the long pieces' buckets in ps (made at the first, kept) */
static int64_t encode_text(const MtBpe *b, Pairs *ps, const unsigned char *text, int64_t n, int allow_special,
                           int32_t **ids, int64_t *cap)
{
    int64_t k = 0, at = 0;
    while (allow_special && b->nspecial > 0 && at < n) {
        int64_t first = n; /* the next special's text, the longest one where several start there */
        int which = -1;
        for (int j = 0; j < b->nspecial; j++) {
            const unsigned char *m = memmem(text + at, (size_t)(n - at), b->special[j], (size_t)b->special_len[j]);
            int64_t pos = m ? m - text : n;
            if (pos < first || (pos == first && m && which >= 0 && b->special_len[j] > b->special_len[which])) {
                first = pos;
                which = j;
            }
        }
        if (which < 0)
            break;
        k = encode_plain(b, ps, text + at, first - at, ids, cap, k);
        MT_ASSERT(grow(ids, cap, k + 1), "out of memory for %lld token ids", (long long)(k + 1));
        (*ids)[k++] = b->special_id[which];
        at = first + b->special_len[which];
    }
    return encode_plain(b, ps, text + at, n - at, ids, cap, k);
}

int64_t mt_bpe_encode(const MtBpe *b, const unsigned char *text, int64_t n, int allow_special, int32_t **ids,
                      int64_t *cap)
{
    Pairs ps = {0};
    int64_t k = encode_text(b, &ps, text, n, allow_special, ids, cap);
    pairs_free(&ps);
    return k;
}

/* the first cut point at or after i: text[j] a space, text[j - 1] a character that is not
 * white space (an ASCII one, or the last byte of a valid sequence), text[j + 1] a letter
 * (ASCII, or a valid sequence of class letter); n if none */
int64_t mt_bpe_cut_after(const unsigned char *t, int64_t n, int64_t i)
{
    for (int64_t j = i > 1 ? i : 1; j + 1 < n; j++) {
        if (t[j] != ' ')
            continue;
        unsigned char p = t[j - 1];
        if (p >= 0xC0 || (p < 0x80 && mt_uni_class(p) == MT_UNI_SPACE))
            continue; /* before: white space, or a lead byte (a truncated sequence) */
        if (p >= 0x80) { /* a continuation byte: find its sequence's start and check it */
            int64_t s = j - 1;
            while (s > 0 && j - s < 4 && (t[s] & 0xC0) == 0x80)
                s--;
            int len;
            int32_t cp = mt_utf8_next(t + s, n - s, &len);
            if (cp < 0 || s + len != j || mt_uni_class((uint32_t)cp) == MT_UNI_SPACE)
                continue;
        }
        int len;
        int32_t c = mt_utf8_next(t + j + 1, n - j - 1, &len);
        if (c >= 0 && mt_uni_class((uint32_t)c) == MT_UNI_LETTER)
            return j;
    }
    return n;
}

int64_t mt_bpe_encode_threads(const MtBpe *b, const unsigned char *text, int64_t n, int allow_special,
                              const MtEncodeThreads *how, int32_t **ids, int64_t *cap)
{
    int threads = how->threads > 1 ? how->threads : 1;
    int parts = threads > 1 && n > (1 << 20) ? 16 * threads : 1; /* more parts than threads: even loads */
    for (int i = 0; i < b->nspecial; i++)
        if (allow_special && strchr(b->special[i], ' '))
            parts = 1; /* a special's text could span a cut */
    int64_t room = parts == 1 ? n : threads * n; /* at most an id a byte, a thread's parts apart */
    if (room > *cap) { /* in huge pages, reserved before any is written: a page is touched when written */
        int32_t *x = mt_mem_host_reserve(sizeof(int32_t) * (size_t)room);
        MT_ASSERT(x, "out of memory for %lld token ids", (long long)room);
        free(*ids);
        *ids = x;
        *cap = room;
    }
    if (parts == 1) {
        if (how->side)
            how->side(how->side_arg);
        int64_t k = mt_bpe_encode(b, text, n, allow_special, ids, cap);
        how->take(how->take_arg, *ids, k, 0);
        return k;
    }
    int64_t *at = malloc(sizeof(int64_t) * (size_t)(parts + 1)), *used = calloc((size_t)threads, sizeof(int64_t));
    int32_t **pid = calloc((size_t)parts, sizeof(int32_t *));
    int64_t *pn = calloc((size_t)parts, sizeof(int64_t));
    Pairs *tps = calloc((size_t)threads, sizeof(Pairs)); /* a thread's buckets serve all its parts */
    MT_ASSERT(at && used && pid && pn && tps, "out of memory for %d parts", parts);
    at[0] = 0;
    for (int k = 1; k < parts; k++) { /* (no cut after the last: the rest are empty, not scanned again) */
        int64_t c = at[k - 1] == n ? n : mt_bpe_cut_after(text, n, n / parts * k);
        at[k] = c > at[k - 1] ? c : at[k - 1];
    }
    at[parts] = n;
    /* thread t appends its parts' ids to its own n ids of room from *ids + t n, so the pages
     * written are about as many as the ids; the side job is the first item handed out, so
     * the parts fill the other threads while it runs and no thread waits for a core */
    int first = how->side ? -1 : 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int k = first; k < parts; k++) {
        if (k < 0) {
            how->side(how->side_arg);
            continue;
        }
        int t = omp_get_thread_num();
        int32_t *mine = *ids + (int64_t)t * n + used[t];
        int64_t pcap = n - used[t];
        pid[k] = mine;
        pn[k] = encode_text(b, &tps[t], text + at[k], at[k + 1] - at[k], allow_special, &pid[k], &pcap);
        MT_ASSERT(pid[k] == mine, "part %d's ids outgrew its room", k);
        used[t] += pn[k];
    }
    int64_t total = 0;
    for (int k = 0; k < parts; k++) { /* where each part's ids go, then they go there at once */
        int64_t c = pn[k];
        pn[k] = total;
        total += c;
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int k = 0; k < parts; k++)
        how->take(how->take_arg, pid[k], (k + 1 < parts ? pn[k + 1] : total) - pn[k], pn[k]);
    for (int t = 0; t < threads; t++)
        pairs_free(&tps[t]);
    free(tps);
    free(at);
    free(used);
    free(pid);
    free(pn);
    return total;
}

int64_t mt_bpe_decode(const MtBpe *b, const int32_t *ids, int64_t n, unsigned char **out, int64_t *cap, int64_t *bad)
{
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *s = NULL;
        int len = 0;
        int32_t id = ids[i];
        if (id >= 0 && id < b->cap && b->tok_off[id] >= 0) {
            s = b->blob + b->tok_off[id];
            len = b->tok_len[id];
        } else
            for (int j = 0; j < b->nspecial; j++)
                if (b->special_id[j] == id) {
                    s = (const unsigned char *)b->special[j];
                    len = b->special_len[j];
                }
        if (!s) {
            *bad = i;
            return -1;
        }
        if (k + len > *cap) {
            int64_t c = *cap > 0 ? *cap : 4096;
            while (c < k + len)
                c *= 2;
            unsigned char *x = realloc(*out, (size_t)c);
            MT_ASSERT(x, "out of memory for %lld decoded bytes", (long long)c);
            *out = x;
            *cap = c;
        }
        memcpy(*out + k, s, (size_t)len);
        k += len;
    }
    return k;
}
