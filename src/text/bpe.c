#define _GNU_SOURCE /* memmem */
/* bpe.c - byte-level BPE over ranks, tiktoken's rank files, encode and decode (see
 * mt_text.h). */
#include "mt_text.h"

#include "mt_mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SPECIALS 64
#define SHORT_PIECE 64 /* below: tiktoken's in-place merge; from here: the heap */

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
    uint64_t w = 0;
    memcpy(&w, s + i, (size_t)(len - i));
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
    if (mt_bpe_rank(b, s, len) >= 0)
        return mt_error(MT_EINPUT, "the bytes of id %d are already id %d", rank, mt_bpe_rank(b, s, len));
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
    uint64_t hv = hash(s, len);
    int64_t h = (int64_t)(hv & (uint64_t)b->mask);
    while (b->slot[h].len != 0)
        h = (h + 1) & b->mask;
    b->slot[h] = (Slot){(uint32_t)b->nblob, len, rank, (uint32_t)(hv >> 32)};
    b->tok_off[rank] = b->nblob;
    b->tok_len[rank] = len;
    b->nblob += len;
    if (len == 1)
        b->byte_rank[s[0]] = rank;
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

MtStatus mt_bpe_read_tiktoken(const char *path, int with_eot, MtBpe **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return mt_error(MT_EINPUT, "%s: cannot be read", path);
    int32_t lines = 0;
    int c, last = '\n';
    while ((c = fgetc(f)) != EOF) {
        lines += c == '\n';
        last = c;
    }
    lines += last != '\n';
    rewind(f);
    MtBpe *b = mt_bpe_new(lines + 1);
    if (!b) {
        fclose(f);
        return mt_error(MT_ENOMEM, "%s: out of memory for %d tokens", path, lines);
    }
    char line[4096];
    unsigned char tok[3072];
    MtStatus s = MT_OK;
    int32_t ln = 0;
    while (s == MT_OK && fgets(line, sizeof line, f)) {
        ln++;
        size_t L = strlen(line);
        if (L == sizeof line - 1 && line[L - 1] != '\n') {
            s = mt_error(MT_EINPUT, "%s:%d: line too long", path, ln);
            break;
        }
        while (L && (line[L - 1] == '\n' || line[L - 1] == '\r'))
            line[--L] = 0;
        char *sp = strchr(line, ' ');
        char *end = NULL;
        long r = sp ? strtol(sp + 1, &end, 10) : -1;
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
    fclose(f);
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

/* the same on a long piece: parts as a linked list, pairs in a bucket per rank (a pair's
 * entry: its left part's start and that part's stamp, stale once the stamp moved on).  The
 * lowest non-empty rank is merged first, its entries in the order of their starts (leftmost
 * first, as the in-place merge); a merge makes pairs of other ranks only (a longer string),
 * and where one is lower the bucket is left for it, so the order is always (rank, start).
 * Linear in the piece but for the sorting of buckets filled out of order. */
typedef struct {
    int start, stamp;
} Ent;

typedef struct {
    Ent *e;
    int n, cap, unsorted;
} Bucket;

static int ent_cmp(const void *x, const void *y)
{
    const Ent *a = x, *b = y;
    return a->start != b->start ? (a->start > b->start) - (a->start < b->start)
                                : (a->stamp > b->stamp) - (a->stamp < b->stamp);
}

/* the buckets of one long piece: one per rank, the ranks that hold entries as bits (so the
 * next one is found a word at a time) and the ranks that have storage (what to free): a
 * piece of a few hundred bytes does not pay for every rank of the vocabulary */
typedef struct {
    Bucket *bk;
    uint64_t *live;
    int32_t *used;
    int32_t nused, capused, V;
} Pairs;

static void bucket_push(Pairs *ps, int32_t r, int start, int stamp, int32_t *low)
{
    Bucket *q = &ps->bk[r];
    if (q->n == q->cap) {
        if (q->cap == 0) {
            if (ps->nused == ps->capused) {
                ps->capused = ps->capused ? 2 * ps->capused : 64;
                ps->used = realloc(ps->used, sizeof(int32_t) * (size_t)ps->capused);
                MT_ASSERT(ps->used, "out of memory to merge a long piece");
            }
            ps->used[ps->nused++] = r;
        }
        q->cap = q->cap ? 2 * q->cap : 8;
        q->e = realloc(q->e, sizeof(Ent) * (size_t)q->cap);
        MT_ASSERT(q->e, "out of memory to merge a long piece");
    }
    q->unsorted |= q->n > 0 && start < q->e[q->n - 1].start;
    q->e[q->n++] = (Ent){start, stamp};
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

/* part i of a long piece: bytes [i, nxt) while alive, the previous live part, the stamp of
 * its pair with the next; together, so that a merge touches one or two cache lines */
typedef struct {
    int nxt, prv, stamp;
} Part;

static void merge_long(const MtBpe *b, const unsigned char *p, int len, int32_t *out, int64_t *k)
{
    size_t bytes = sizeof(Part) * (size_t)(len + 1); /* len: the end */
    Part *pt = mt_mem_host_reserve(bytes); /* huge pages, every element set below: a first touch costs more than the merge */
    int32_t V = b->cap, low = V; /* no bucket below `low` holds an entry */
    Pairs ps = {calloc((size_t)V, sizeof(Bucket)), calloc((size_t)(V + 63) / 64, sizeof(uint64_t)), NULL, 0, 0, V};
    Bucket *bk = ps.bk;
    MT_ASSERT(pt && bk && ps.live, "out of memory to merge a piece of %d bytes", len);
    for (int i = 0; i <= len; i++)
        pt[i] = (Part){i + 1, i - 1, 0};
    for (int i = 0; i + 2 <= len; i++) {
        int32_t r = mt_bpe_rank(b, p + i, 2);
        if (r >= 0)
            bucket_push(&ps, r, i, 0, &low);
    }
    while ((low = next_live(&ps, low)) < V) {
        int32_t r = low;
        Bucket *q = &bk[r];
        if (q->unsorted)
            qsort(q->e, (size_t)q->n, sizeof(Ent), ent_cmp);
        q->unsorted = 0;
        int e = 0;
        for (; e < q->n && low == r; e++) {
            int i = q->e[e].start;
            Part *a = &pt[i];
            if (q->e[e].stamp != a->stamp || a->nxt >= len)
                continue; /* stale: the part has changed since */
            int j = a->nxt; /* merge part j into part i */
            a->nxt = pt[j].nxt;
            if (a->nxt <= len)
                pt[a->nxt].prv = i;
            pt[j].stamp = -1;
            a->stamp++;
            if (a->nxt < len) { /* the pair (i, next) */
                int32_t r2 = mt_bpe_rank(b, p + i, pt[a->nxt].nxt - i);
                if (r2 >= 0)
                    bucket_push(&ps, r2, i, a->stamp, &low);
            }
            if (a->prv >= 0) { /* the pair (previous, i) */
                Part *c = &pt[a->prv];
                c->stamp++;
                int32_t r2 = mt_bpe_rank(b, p + a->prv, a->nxt - a->prv);
                if (r2 >= 0)
                    bucket_push(&ps, r2, a->prv, c->stamp, &low);
            }
        }
        /* the bucket's entries taken leave it; a lower rank pushed meanwhile goes first */
        q = &bk[r];
        memmove(q->e, q->e + e, sizeof(Ent) * (size_t)(q->n - e));
        q->n -= e;
        if (q->n == 0)
            ps.live[r >> 6] &= ~((uint64_t)1 << (r & 63));
    }
    for (int i = 0; i < len; i = pt[i].nxt)
        out[(*k)++] = mt_bpe_rank(b, p + i, pt[i].nxt - i);
    for (int32_t u = 0; u < ps.nused; u++)
        free(bk[ps.used[u]].e);
    free(ps.used);
    free(ps.live);
    free(bk);
    free(pt);
}

void mt_bpe_merge(const MtBpe *b, const unsigned char *piece, int len, int heap, int32_t *out, int64_t *k)
{
    MT_ASSERT(heap || len <= SHORT_PIECE, "the in-place merge takes pieces of at most %d bytes, not %d", SHORT_PIECE,
              len);
    if (heap)
        merge_long(b, piece, len, out, k);
    else
        merge_short(b, piece, len, out, k);
}

void mt_bpe_encode_piece(const MtBpe *b, const unsigned char *piece, int len, int32_t *out, int64_t *k)
{
    int32_t r = mt_bpe_rank(b, piece, len);
    if (r >= 0)
        out[(*k)++] = r;
    else if (len <= SHORT_PIECE)
        merge_short(b, piece, len, out, k);
    else
        merge_long(b, piece, len, out, k);
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
static int64_t encode_plain(const MtBpe *b, const unsigned char *s, int64_t n, int32_t **ids, int64_t *cap,
                            int64_t k)
{
    for (int64_t i = 0; i < n;) {
        int64_t e = mt_pretok_next(s, n, i);
        MT_ASSERT(e > i && e - i < INT32_MAX, "a piece of %lld bytes", (long long)(e - i));
        MT_ASSERT(grow(ids, cap, k + (e - i)), "out of memory for %lld token ids", (long long)(k + e - i));
        mt_bpe_encode_piece(b, s + i, (int)(e - i), *ids, &k);
        i = e;
    }
    return k;
}

int64_t mt_bpe_encode(const MtBpe *b, const unsigned char *text, int64_t n, int allow_special, int32_t **ids,
                      int64_t *cap)
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
        k = encode_plain(b, text + at, first - at, ids, cap, k);
        MT_ASSERT(grow(ids, cap, k + 1), "out of memory for %lld token ids", (long long)(k + 1));
        (*ids)[k++] = b->special_id[which];
        at = first + b->special_len[which];
    }
    return encode_plain(b, text + at, n - at, ids, cap, k);
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

int64_t mt_bpe_encode_threads(const MtBpe *b, const unsigned char *text, int64_t n, int allow_special, int threads,
                              int32_t **ids, int64_t *cap)
{
    int parts = threads > 1 && n > (1 << 20) ? 4 * threads : 1; /* more parts than threads: even loads */
    for (int i = 0; i < b->nspecial; i++)
        if (allow_special && strchr(b->special[i], ' '))
            parts = 1; /* a special's text could span a cut */
    if (n > *cap) { /* at most an id a byte: room for all, in huge pages, before any is written */
        int32_t *x = mt_mem_host_reserve(sizeof(int32_t) * (size_t)n);
        MT_ASSERT(x, "out of memory for %lld token ids", (long long)n);
        free(*ids);
        *ids = x;
        *cap = n;
    }
    if (parts == 1)
        return mt_bpe_encode(b, text, n, allow_special, ids, cap);
    int64_t *at = malloc(sizeof(int64_t) * (size_t)(parts + 1));
    int32_t **pid = calloc((size_t)parts, sizeof(int32_t *));
    int64_t *pn = calloc((size_t)parts, sizeof(int64_t)), *pcap = calloc((size_t)parts, sizeof(int64_t));
    MT_ASSERT(at && pid && pn && pcap, "out of memory for %d parts", parts);
    at[0] = 0;
    for (int k = 1; k < parts; k++) {
        int64_t c = mt_bpe_cut_after(text, n, n / parts * k);
        at[k] = c > at[k - 1] ? c : at[k - 1];
    }
    at[parts] = n;
    /* part k writes its ids where its text starts (room for an id a byte), then they move
     * down into place, in order */
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int k = 0; k < parts; k++) {
        pid[k] = *ids + at[k];
        pcap[k] = at[k + 1] - at[k];
        pn[k] = mt_bpe_encode(b, text + at[k], at[k + 1] - at[k], allow_special, &pid[k], &pcap[k]);
        MT_ASSERT(pid[k] == *ids + at[k], "part %d's ids outgrew its text", k);
    }
    int64_t total = 0;
    for (int k = 0; k < parts; k++) {
        if (pn[k] && total != at[k])
            memmove(*ids + total, pid[k], sizeof(int32_t) * (size_t)pn[k]);
        total += pn[k];
    }
    free(at);
    free(pid);
    free(pn);
    free(pcap);
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
