/* bpe_train.c - byte-level BPE training, the merges Hugging Face tokenizers' BpeTrainer
 * makes (see mt_text.h for the contract; docs/tokenizer.md for the decisions).
 *
 * 1. Words: every line of every text (its '\n' kept; a text's last line may lack one) cut by
 *    GPT-2's pre-tokenizer, each distinct piece counted, on `threads` threads over runs of
 *    whole lines, the tables then added: exact integers, so the counts, and everything
 *    after, do not depend on the threads.
 * 2. Ids: the special tokens first (in the order given), then the 256 byte tokens in the
 *    order of their characters under GPT-2's byte map (code point order, as BpeTrainer sorts
 *    its alphabet), then each merge's new token.
 * 3. Merges: a pair's count is the sum over words of (its occurrences x the word's count).
 *    A max-heap of (count, pair) entries, each with the words it was pushed for, picks the
 *    largest count, ties to the smaller (left id, right id); an entry whose count is stale
 *    goes back with the current one.  The pair is merged left to right in the entry's words,
 *    the neighbours' counts move, and each pair that gained occurrences gets an entry for
 *    the words it gained them in.  As BpeTrainer: the merged pair's own count is left as it
 *    was, and a merge whose token exists already (another split of the same bytes) keeps
 *    that token's id.  It stops at vocab_size tokens, or when the best count is below 1 or
 *    min_frequency.
 * 4. The list written: BpeTrainer keeps one rank per pair (the last, should a pair be
 *    merged twice), so the merges come out in that order. */
#define _GNU_SOURCE /* qsort_r */
#include "mt_text.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Room for `need` elements of `size` bytes in the array *p of capacity *cap (doubled, from
 * 1024); 0 when out of memory (the array is then as it was). */
static int room(void *p, int64_t *cap, int64_t need, size_t size)
{
    if (need <= *cap)
        return 1;
    int64_t c = *cap > 0 ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *x = realloc(*(void **)p, size * (size_t)c);
    if (!x)
        return 0;
    *(void **)p = x;
    *cap = c;
    return 1;
}

/* ---- a hash of byte strings to counts (the words) ---- */

typedef struct {
    uint64_t h;
    int64_t count;
    int64_t off; /* into blob */
    int32_t len; /* 0: empty */
} WSlot;

typedef struct {
    WSlot *slot;
    int64_t mask, n;
    unsigned char *blob;
    int64_t nblob, capblob;
    int failed;
} Words;

static uint64_t whash(const unsigned char *s, int64_t len)
{
    uint64_t h = 0xCBF29CE484222325ull ^ (uint64_t)len;
    for (int64_t i = 0; i < len; i++)
        h = (h ^ s[i]) * 0x100000001B3ull;
    return h ^ (h >> 29);
}

static int words_init(Words *w, int64_t size)
{
    memset(w, 0, sizeof *w);
    int64_t n = 1024;
    while (n < size)
        n *= 2;
    w->slot = calloc((size_t)n, sizeof(WSlot));
    w->mask = n - 1;
    w->capblob = 1 << 16;
    w->blob = malloc((size_t)w->capblob);
    return w->slot && w->blob;
}

static void words_free(Words *w)
{
    free(w->slot);
    free(w->blob);
}

static int words_grow(Words *w)
{
    int64_t n = 2 * (w->mask + 1);
    WSlot *s = calloc((size_t)n, sizeof(WSlot));
    if (!s)
        return 0;
    for (int64_t i = 0; i <= w->mask; i++)
        if (w->slot[i].len) {
            int64_t j = (int64_t)(w->slot[i].h & (uint64_t)(n - 1));
            while (s[j].len)
                j = (j + 1) & (n - 1);
            s[j] = w->slot[i];
        }
    free(w->slot);
    w->slot = s;
    w->mask = n - 1;
    return 1;
}

static void words_add(Words *w, const unsigned char *s, int64_t len, uint64_t h, int64_t count)
{
    if (w->failed)
        return;
    int64_t j = (int64_t)(h & (uint64_t)w->mask);
    for (; w->slot[j].len; j = (j + 1) & w->mask)
        if (w->slot[j].h == h && w->slot[j].len == len && memcmp(w->blob + w->slot[j].off, s, (size_t)len) == 0) {
            w->slot[j].count += count;
            return;
        }
    if (!room(&w->blob, &w->capblob, w->nblob + len, 1)) {
        w->failed = 1;
        return;
    }
    memcpy(w->blob + w->nblob, s, (size_t)len);
    w->slot[j] = (WSlot){h, count, w->nblob, (int32_t)len};
    w->nblob += len;
    if (2 * ++w->n > w->mask + 1 && !words_grow(w))
        w->failed = 1;
}

/* ---- counting, a thread per run of lines ---- */

typedef struct {
    const unsigned char *const *texts;
    const int64_t *lens;
    int ntexts;
    int64_t lo, hi; /* byte offsets into the texts laid end to end */
    Words words;
    int64_t pieces;
} Count;

static void count_lines(Count *c, const unsigned char *s, int64_t n)
{
    for (int64_t a = 0; a < n;) { /* a line: up to and with its '\n' */
        const unsigned char *nl = memchr(s + a, '\n', (size_t)(n - a));
        int64_t e = nl ? nl - s + 1 : n;
        for (int64_t i = a; i < e;) {
            int64_t j = mt_pretok_next(s + a, e - a, i - a) + a;
            words_add(&c->words, s + i, j - i, whash(s + i, j - i), 1);
            c->pieces++;
            i = j;
        }
        a = e;
    }
}

static void *count_run(void *arg)
{
    Count *c = arg;
    int64_t base = 0;
    for (int t = 0; t < c->ntexts; base += c->lens[t++]) {
        int64_t a = c->lo > base ? c->lo - base : 0, b = c->hi - base < c->lens[t] ? c->hi - base : c->lens[t];
        if (b > a)
            count_lines(c, c->texts[t] + a, b - a);
    }
    return NULL;
}

/* the offset (texts end to end) of the line start at or after x */
static int64_t line_start(const unsigned char *const *texts, const int64_t *lens, int ntexts, int64_t x)
{
    int64_t base = 0;
    for (int t = 0; t < ntexts; base += lens[t++]) {
        if (x >= base + lens[t])
            continue;
        if (x == base)
            return x;
        const unsigned char *nl = memchr(texts[t] + (x - base - 1), '\n', (size_t)(lens[t] - (x - base - 1)));
        return nl ? base + (nl - texts[t]) + 1 : base + lens[t];
    }
    return base;
}

/* ---- the merge loop's structures ---- */

typedef struct {
    uint64_t key; /* left id << 32 | right id; 0 with count 0: empty */
    int64_t count;
    int used;
} PSlot;

typedef struct {
    PSlot *slot;
    int64_t mask, n;
} Pairs;

static uint64_t pkey(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

static uint64_t phash(uint64_t k)
{
    k = (k ^ (k >> 31)) * 0x7FB5D329728EA185ull;
    return k ^ (k >> 27);
}

static int pairs_grow(Pairs *p)
{
    int64_t n = p->mask ? 2 * (p->mask + 1) : 1 << 16;
    PSlot *s = calloc((size_t)n, sizeof(PSlot));
    if (!s)
        return 0;
    for (int64_t i = 0; p->slot && i <= p->mask; i++)
        if (p->slot[i].used) {
            int64_t j = (int64_t)(phash(p->slot[i].key) & (uint64_t)(n - 1));
            while (s[j].used)
                j = (j + 1) & (n - 1);
            s[j] = p->slot[i];
        }
    free(p->slot);
    p->slot = s;
    p->mask = n - 1;
    return 1;
}

/* the slot of key (made, with count 0, if absent: the table may then move, so a slot
 * pointer is good until the next pair_at of a new key); NULL when out of memory */
static PSlot *pair_at(Pairs *p, uint64_t key)
{
    if (!p->slot && !pairs_grow(p))
        return NULL;
    int64_t j = (int64_t)(phash(key) & (uint64_t)p->mask);
    for (; p->slot[j].used; j = (j + 1) & p->mask)
        if (p->slot[j].key == key)
            return &p->slot[j];
    if (2 * (p->n + 1) > p->mask + 1) {
        if (!pairs_grow(p))
            return NULL;
        for (j = (int64_t)(phash(key) & (uint64_t)p->mask); p->slot[j].used; j = (j + 1) & p->mask)
            ;
    }
    p->slot[j] = (PSlot){key, 0, 1};
    p->n++;
    return &p->slot[j];
}

/* heap entries: a count, a pair, and the words it was pushed for (pos[off .. off + n)) */
typedef struct {
    int64_t count;
    uint64_t key;
    int64_t off, n;
} Entry;

static int above(const Entry *a, const Entry *b) /* a pops before b */
{
    return a->count != b->count ? a->count > b->count : a->key < b->key;
}

typedef struct {
    Entry *e;
    int64_t n, cap;
} Heap;

static int heap_push(Heap *h, Entry x)
{
    if (!room(&h->e, &h->cap, h->n + 1, sizeof(Entry)))
        return 0;
    int64_t i = h->n++;
    while (i > 0 && above(&x, &h->e[(i - 1) / 2])) {
        h->e[i] = h->e[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->e[i] = x;
    return 1;
}

static Entry heap_pop(Heap *h)
{
    Entry top = h->e[0], x = h->e[--h->n];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && above(&h->e[c + 1], &h->e[c]))
            c++;
        if (!above(&h->e[c], &x))
            break;
        h->e[i] = h->e[c];
        i = c;
    }
    if (h->n > 0)
        h->e[i] = x;
    return top;
}

/* a growing array of int64 */
typedef struct {
    int64_t *v;
    int64_t n, cap;
} Vec;

static int vec_push(Vec *a, int64_t x)
{
    if (!room(&a->v, &a->cap, a->n + 1, sizeof(int64_t)))
        return 0;
    a->v[a->n++] = x;
    return 1;
}

/* (pair, word) couples, sorted to group the words of each pair */
typedef struct {
    uint64_t key;
    int64_t word;
} Hit;

typedef struct {
    Hit *v;
    int64_t n, cap;
} Hits;

static int hits_push(Hits *a, uint64_t key, int64_t word)
{
    if (!room(&a->v, &a->cap, a->n + 1, sizeof(Hit)))
        return 0;
    a->v[a->n++] = (Hit){key, word};
    return 1;
}

static int hit_cmp(const void *x, const void *y)
{
    const Hit *a = x, *b = y;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return (a->word > b->word) - (a->word < b->word);
}

/* Sorts the hits and pushes an entry per pair with a positive count, its distinct words
 * appended to pos. */
static int push_hits(Hits *hits, Pairs *pairs, Heap *heap, Vec *pos)
{
    if (hits->n > 1)
        qsort(hits->v, (size_t)hits->n, sizeof(Hit), hit_cmp);
    for (int64_t i = 0; i < hits->n;) {
        int64_t j = i, off = pos->n;
        for (; j < hits->n && hits->v[j].key == hits->v[i].key; j++)
            if ((j == i || hits->v[j].word != hits->v[j - 1].word) && !vec_push(pos, hits->v[j].word))
                return 0;
        PSlot *ps = pair_at(pairs, hits->v[i].key);
        if (!ps)
            return 0;
        if (ps->count > 0 && !heap_push(heap, (Entry){ps->count, hits->v[i].key, off, pos->n - off}))
            return 0;
        i = j;
    }
    hits->n = 0;
    return 1;
}

/* one occurrence of pair `gone` in word w (of count cnt) becomes one of pair `made` */
static int change(Pairs *pairs, Hits *hits, uint64_t gone, uint64_t made, int64_t cnt, int64_t w)
{
    PSlot *c = pair_at(pairs, made);
    if (!c || !hits_push(hits, made, w))
        return 0;
    c->count += cnt;
    PSlot *g = pair_at(pairs, gone);
    if (!g)
        return 0;
    g->count -= cnt;
    return 1;
}

/* the byte's token id among the 256, after the specials: its character's place in code
 * point order under GPT-2's byte map (the printable bytes stand for themselves and come
 * first; the other 68 map to U+0100.. in byte order) */
static int32_t byte_id(int c, int nspecial)
{
    int printable = 0, other = 0;
    for (int x = 0; x < c; x++) {
        int p = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
        printable += p;
        other += !p;
    }
    int p = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
    return nspecial + (p ? printable : 188 + other);
}

static int cmp_word(const void *x, const void *y, void *ctx)
{
    const WSlot *a = x, *b = y;
    const unsigned char *blob = ctx;
    int64_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(blob + a->off, blob + b->off, (size_t)n);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

void mt_bpe_trained_free(MtBpeTrained *t)
{
    mt_bpe_free(t->bpe);
    free(t->merges);
    memset(t, 0, sizeof *t);
}

MtStatus mt_bpe_train(const unsigned char *const *texts, const int64_t *lens, int ntexts, const MtBpeTrainOptions *o,
                      MtBpeTrained *out)
{
    memset(out, 0, sizeof *out);
    int S = o->nspecial, T = o->threads > 0 ? o->threads : 1;
    if (o->vocab_size < S + 256)
        return mt_error(MT_EINPUT, "a vocabulary of %d tokens cannot hold %d special tokens and the 256 bytes",
                        o->vocab_size, S);
    /* 1. the words, counted on T threads over runs of lines */
    int64_t total = 0;
    for (int t = 0; t < ntexts; t++)
        total += lens[t];
    Count *c = calloc((size_t)T, sizeof(Count));
    pthread_t *th = calloc((size_t)T, sizeof(pthread_t));
    MtStatus s = c && th ? MT_OK : mt_error(MT_ENOMEM, "out of memory");
    int64_t prev = 0;
    for (int i = 0; s == MT_OK && i < T; i++) {
        int64_t hi = i == T - 1 ? total : line_start(texts, lens, ntexts, total / T * (i + 1));
        c[i] = (Count){texts, lens, ntexts, prev, hi > prev ? hi : prev, {0}, 0};
        prev = c[i].hi;
        if (!words_init(&c[i].words, 1 << 12))
            s = mt_error(MT_ENOMEM, "out of memory");
    }
    int started = 0;
    for (int i = 1; s == MT_OK && i < T; i++, started++)
        if (pthread_create(&th[i], NULL, count_run, &c[i]) != 0)
            break;
    if (s == MT_OK)
        count_run(&c[0]);
    for (int i = 1; i <= started; i++)
        pthread_join(th[i], NULL);
    for (int i = started + 1; s == MT_OK && i < T; i++) /* threads that did not start: here */
        count_run(&c[i]);
    Words *all = s == MT_OK ? &c[0].words : NULL;
    for (int i = 1; s == MT_OK && i < T; i++) {
        for (int64_t j = 0; j <= c[i].words.mask; j++) {
            const WSlot *w = &c[i].words.slot[j];
            if (w->len)
                words_add(all, c[i].words.blob + w->off, w->len, w->h, w->count);
        }
        c[0].pieces += c[i].pieces;
    }
    for (int i = 0; s == MT_OK && i < T; i++)
        if (c[i].words.failed)
            s = mt_error(MT_ENOMEM, "out of memory counting words");
    /* the words in byte order (any order gives the same merges; this one is fixed) */
    WSlot *wl = NULL;
    int64_t nw = 0, nsym = 0;
    if (s == MT_OK && !(wl = malloc(sizeof(WSlot) * (size_t)(all->n + 1))))
        s = mt_error(MT_ENOMEM, "out of memory");
    for (int64_t j = 0; s == MT_OK && j <= all->mask; j++)
        if (all->slot[j].len) {
            wl[nw++] = all->slot[j];
            nsym += all->slot[j].len;
        }
    if (s == MT_OK)
        qsort_r(wl, (size_t)nw, sizeof(WSlot), cmp_word, all->blob);
    /* 2. the vocabulary: specials, the bytes, then the merges' tokens */
    MtBpe *b = s == MT_OK ? mt_bpe_new(o->vocab_size) : NULL;
    if (s == MT_OK && !b)
        s = mt_error(MT_ENOMEM, "out of memory");
    for (int i = 0; s == MT_OK && i < S; i++)
        s = mt_bpe_add_special(b, o->special[i], i);
    int32_t bid[256];
    for (int x = 0; s == MT_OK && x < 256; x++) {
        unsigned char byte = (unsigned char)x;
        bid[x] = byte_id(x, S);
        s = mt_bpe_add(b, &byte, 1, bid[x]);
    }
    /* the words as ids; their counts */
    int32_t *sym = s == MT_OK ? malloc(sizeof(int32_t) * (size_t)(nsym + 1)) : NULL;
    int64_t *woff = s == MT_OK ? malloc(sizeof(int64_t) * (size_t)(nw + 1)) : NULL;
    int32_t *wlen = s == MT_OK ? malloc(sizeof(int32_t) * (size_t)(nw + 1)) : NULL;
    int64_t *wcnt = s == MT_OK ? malloc(sizeof(int64_t) * (size_t)(nw + 1)) : NULL;
    if (s == MT_OK && (!sym || !woff || !wlen || !wcnt))
        s = mt_error(MT_ENOMEM, "out of memory for %lld words", (long long)nw);
    int64_t k = 0;
    for (int64_t w = 0; s == MT_OK && w < nw; w++) {
        woff[w] = k;
        wlen[w] = wl[w].len;
        wcnt[w] = wl[w].count;
        for (int32_t i = 0; i < wl[w].len; i++)
            sym[k++] = bid[all->blob[wl[w].off + i]];
    }
    out->words = nw;
    out->pieces = s == MT_OK ? c[0].pieces : 0;
    free(wl);
    for (int i = 0; c && i < T; i++)
        words_free(&c[i].words);
    free(c);
    free(th);
    /* 3. the pairs counted, an entry per pair with the words holding it */
    Pairs pairs = {0};
    Heap heap = {0};
    Vec pos = {0};
    Hits hits = {0};
    int32_t (*merges)[3] = NULL; /* left, right, new id */
    int64_t nmerge = 0, capmerge = 0;
    for (int64_t w = 0; s == MT_OK && w < nw; w++)
        for (int32_t i = 0; i + 1 < wlen[w]; i++) {
            uint64_t key = pkey(sym[woff[w] + i], sym[woff[w] + i + 1]);
            PSlot *ps = pair_at(&pairs, key);
            if (!ps || !hits_push(&hits, key, w)) {
                s = mt_error(MT_ENOMEM, "out of memory counting pairs");
                break;
            }
            ps->count += wcnt[w];
        }
    if (s == MT_OK && !push_hits(&hits, &pairs, &heap, &pos))
        s = mt_error(MT_ENOMEM, "out of memory counting pairs");
    /* 4. the merges */
    int32_t ntok = S + 256;
    unsigned char *tmp = NULL;
    int64_t captmp = 0;
    while (s == MT_OK && ntok < o->vocab_size && heap.n > 0) {
        Entry top = heap_pop(&heap);
        PSlot *ps = pair_at(&pairs, top.key);
        if (!ps) {
            s = mt_error(MT_ENOMEM, "out of memory");
            break;
        }
        if (top.count != ps->count) { /* stale: back with the current count */
            top.count = ps->count;
            if (!heap_push(&heap, top))
                s = mt_error(MT_ENOMEM, "out of memory");
            continue;
        }
        if (top.count < 1 || top.count < o->min_frequency)
            break;
        int32_t l = (int32_t)(top.key >> 32), r = (int32_t)(top.key & 0xFFFFFFFFu);
        const unsigned char *pl, *pr;
        int ll, lr;
        mt_bpe_token(b, l, &pl, &ll);
        mt_bpe_token(b, r, &pr, &lr);
        if (!room(&tmp, &captmp, ll + lr, 1) || !room(&merges, &capmerge, nmerge + 1, sizeof *merges)) {
            s = mt_error(MT_ENOMEM, "out of memory");
            break;
        }
        memcpy(tmp, pl, (size_t)ll);
        memcpy(tmp + ll, pr, (size_t)lr);
        int32_t id = mt_bpe_rank(b, tmp, ll + lr); /* another split of an existing token: its id */
        out->duplicates += id >= 0;
        if (id < 0 && (s = mt_bpe_add(b, tmp, ll + lr, id = ntok++)) != MT_OK)
            break;
        merges[nmerge][0] = l;
        merges[nmerge][1] = r;
        merges[nmerge++][2] = id;
        /* the pair merged in the entry's words, left to right; the neighbours' counts move */
        for (int64_t q = 0; s == MT_OK && q < top.n; q++) {
            int64_t w = pos.v[top.off + q];
            int32_t *x = sym + woff[w], n = wlen[w], m = 0;
            int64_t cnt = wcnt[w];
            for (int32_t i = 0; i < n; i++) {
                if (!(x[i] == l && i + 1 < n && x[i + 1] == r)) {
                    x[m++] = x[i];
                    continue;
                }
                /* (prev, l) goes, (prev, new) comes; (r, next) goes, (new, next) comes.  The
                 * pairs that go exist (no slot moves); a new one is made first. */
                if (m > 0 && !change(&pairs, &hits, pkey(x[m - 1], l), pkey(x[m - 1], id), cnt, w)) {
                    s = mt_error(MT_ENOMEM, "out of memory");
                    break;
                }
                if (i + 2 < n && !change(&pairs, &hits, pkey(r, x[i + 2]), pkey(id, x[i + 2]), cnt, w)) {
                    s = mt_error(MT_ENOMEM, "out of memory");
                    break;
                }
                x[m++] = id;
                i++;
            }
            if (s == MT_OK)
                wlen[w] = m;
        }
        if (s == MT_OK && !push_hits(&hits, &pairs, &heap, &pos))
            s = mt_error(MT_ENOMEM, "out of memory");
    }
    free(tmp);
    free(pairs.slot);
    free(heap.e);
    free(pos.v);
    free(hits.v);
    free(sym);
    free(woff);
    free(wlen);
    free(wcnt);
    /* 5. one rank per pair, its last (BpeTrainer keeps the merges in a map by pair) */
    if (s == MT_OK && nmerge > 0) {
        out->merges = malloc(sizeof *out->merges * (size_t)nmerge);
        Pairs last = {0};
        for (int64_t i = 0; out->merges && i < nmerge; i++) {
            PSlot *p = pair_at(&last, pkey(merges[i][0], merges[i][1]));
            if (!p)
                break;
            p->count = i + 1;
        }
        for (int64_t i = 0; out->merges && i < nmerge; i++) {
            PSlot *p = pair_at(&last, pkey(merges[i][0], merges[i][1]));
            if (p && p->count == i + 1) {
                out->merges[out->nmerges][0] = merges[i][0];
                out->merges[out->nmerges++][1] = merges[i][1];
            }
        }
        if (!out->merges || last.n < 1)
            s = mt_error(MT_ENOMEM, "out of memory");
        out->repeated = nmerge - out->nmerges;
        free(last.slot);
    }
    free(merges);
    if (s != MT_OK) {
        mt_bpe_free(b);
        mt_bpe_trained_free(out);
        return s;
    }
    out->bpe = b;
    return MT_OK;
}
