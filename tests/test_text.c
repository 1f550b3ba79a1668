/* test_text.c - the tokenizer's pieces without GPT-2's vocabulary (issue 27, mt_text.h):
 * the Unicode classes from the generated tables, strict UTF-8, the pre-tokenizer on every
 * alternative of GPT-2's pattern (its pieces written out by hand from the pattern's
 * leftmost-first rules), the in-place merge and the long merge giving the same ids on random
 * vocabularies and pieces (the long one also against a plain quadratic merge, with tokens
 * of 255 bytes and more), the tiktoken reader on good and broken files, and the round trip
 * decode(encode(x)) == x on random byte strings, invalid UTF-8 included.  The ids against
 * tiktoken itself, on GPT-2's vocabulary, are tests/sh_tokenizer.sh's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mt_test.h"
#include "mt_text.h"

/* the pieces of s, joined by '|' */
static void pieces(const char *s, char *out)
{
    int64_t n = (int64_t)strlen(s), i = 0;
    out[0] = 0;
    while (i < n) {
        int64_t e = mt_pretok_next((const unsigned char *)s, n, i);
        if (i > 0)
            strcat(out, "|");
        strncat(out, s + i, (size_t)(e - i));
        i = e;
    }
}

static void check_pieces(const char *s, const char *want)
{
    char got[1024];
    pieces(s, got);
    CHECK(strcmp(got, want) == 0, "pieces of '%s': got '%s', want '%s'", s, got, want);
}

static uint64_t rng = 88172645463325252ull;
static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)rng;
}

/* a byte-level vocabulary: the 256 bytes, then `merges` random pairs of earlier tokens of
 * at most `maxlen` bytes together; `recent`: first the alphabet's first two letters doubled
 * (aa, aaaa, ... up to maxlen: long runs make long tokens), then half the picks among the
 * last 16 tokens */
static MtBpe *random_vocab_of(int merges, const unsigned char *alphabet, int na, int maxlen, int recent)
{
    MtBpe *b = mt_bpe_new(256 + merges);
    unsigned char *tok[256 + 4096];
    int len[256 + 4096];
    for (int i = 0; i < 256; i++) {
        tok[i] = malloc(1);
        tok[i][0] = (unsigned char)i;
        len[i] = 1;
        MT_ASSERT(mt_bpe_add(b, tok[i], 1, i) == MT_OK, "byte %d", i);
    }
    int n = 256;
    for (int x = 0; recent && x < 2; x++)
        for (int L = 2; L <= maxlen && n < 256 + merges; L *= 2) {
            tok[n] = malloc((size_t)L);
            memset(tok[n], alphabet[x], (size_t)L);
            len[n] = L;
            MT_ASSERT(mt_bpe_add(b, tok[n], L, n) == MT_OK, "run %d", L);
            n++;
        }
    while (n < 256 + merges) {
        int a = (int)(next() % (unsigned)n), c = (int)(next() % (unsigned)n);
        if (recent && n > 272 && next() % 2)
            a = n - 1 - (int)(next() % 16);
        if (recent && n > 272 && next() % 2)
            c = n - 1 - (int)(next() % 16);
        if (len[a] == 1 && !memchr(alphabet, tok[a][0], (size_t)na))
            a = alphabet[next() % (unsigned)na];
        if (len[c] == 1 && !memchr(alphabet, tok[c][0], (size_t)na))
            c = alphabet[next() % (unsigned)na];
        int L = len[a] + len[c];
        if (L > maxlen)
            continue;
        unsigned char *t = malloc((size_t)L);
        memcpy(t, tok[a], (size_t)len[a]);
        memcpy(t + len[a], tok[c], (size_t)len[c]);
        if (mt_bpe_rank(b, t, L) >= 0) {
            free(t);
            continue;
        }
        MT_ASSERT(mt_bpe_add(b, t, L, n) == MT_OK, "merge %d", n);
        tok[n] = t;
        len[n++] = L;
    }
    for (int i = 0; i < n; i++)
        free(tok[i]);
    return b;
}

static MtBpe *random_vocab(int merges, const unsigned char *alphabet, int na)
{
    return random_vocab_of(merges, alphabet, na, 24, 0);
}

/* tiktoken's merge written plainly (quadratic): the lowest rank of two neighbouring parts
 * joined, the leftmost on a tie, until no two parts join into a token */
static int64_t plain_merge(const MtBpe *b, const unsigned char *p, int n, int32_t *out)
{
    int *start = malloc(sizeof(int) * (size_t)(n + 1)), m = n + 1;
    for (int i = 0; i <= n; i++)
        start[i] = i;
    for (;;) {
        int best = -1;
        int32_t br = INT32_MAX;
        for (int i = 0; i + 2 < m; i++) {
            int32_t r = mt_bpe_rank(b, p + start[i], start[i + 2] - start[i]);
            if (r >= 0 && r < br) {
                br = r;
                best = i;
            }
        }
        if (best < 0)
            break;
        memmove(start + best + 1, start + best + 2, sizeof(int) * (size_t)(m - best - 2));
        m--;
    }
    for (int i = 0; i + 1 < m; i++)
        out[i] = mt_bpe_rank(b, p + start[i], start[i + 1] - start[i]);
    free(start);
    return m - 1;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    MT_ASSERT(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

/* a tiktoken file of the 256 bytes (rank = byte) plus `extra` lines */
static void tiktoken_file(const char *path, const char *extra)
{
    static const char *b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    FILE *f = fopen(path, "w");
    MT_ASSERT(f, "cannot write %s", path);
    for (int i = 0; i < 256; i++)
        fprintf(f, "%c%c== %d\n", b64[i >> 2], b64[(i & 3) << 4], i);
    fputs(extra, f);
    fclose(f);
}

int main(void)
{
    /* the classes, from the Unicode Character Database's tables */
    CHECK(mt_uni_class('A') == MT_UNI_LETTER && mt_uni_class('z') == MT_UNI_LETTER && mt_uni_class(0xE9) == MT_UNI_LETTER &&
              mt_uni_class(0x416) == MT_UNI_LETTER && mt_uni_class(0x4E2D) == MT_UNI_LETTER &&
              mt_uni_class(0x5D0) == MT_UNI_LETTER,
          "letters: A z é Ж 中 א");
    CHECK(mt_uni_class('7') == MT_UNI_NUMBER && mt_uni_class(0x663) == MT_UNI_NUMBER && mt_uni_class(0xBD) == MT_UNI_NUMBER &&
              mt_uni_class(0x216B) == MT_UNI_NUMBER && mt_uni_class(0x967) == MT_UNI_NUMBER,
          "numbers: 7, Arabic-Indic 3, ½, Roman XII, Devanagari 1");
    CHECK(mt_uni_class(' ') == MT_UNI_SPACE && mt_uni_class('\t') == MT_UNI_SPACE && mt_uni_class('\r') == MT_UNI_SPACE &&
              mt_uni_class(0xA0) == MT_UNI_SPACE && mt_uni_class(0x3000) == MT_UNI_SPACE &&
              mt_uni_class(0x2028) == MT_UNI_SPACE && mt_uni_class(0x85) == MT_UNI_SPACE,
          "White_Space: space, tab, CR, NBSP, ideographic space, line separator, NEL");
    CHECK(mt_uni_class(0x200B) == MT_UNI_OTHER && mt_uni_class(0x1F642) == MT_UNI_OTHER && mt_uni_class('\'') == MT_UNI_OTHER &&
              mt_uni_class(0x1C) == MT_UNI_OTHER && mt_uni_class(0x200D) == MT_UNI_OTHER,
          "other: zero-width space, an emoji, apostrophe, U+001C (not White_Space), ZWJ");
    printf("Unicode %s\n", mt_unicode_version());

    /* strict UTF-8 */
    int len;
    CHECK(mt_utf8_next((const unsigned char *)"\xC3\xA9", 2, &len) == 0xE9 && len == 2, "é");
    CHECK(mt_utf8_next((const unsigned char *)"\xF0\x9F\x99\x82", 4, &len) == 0x1F642 && len == 4, "an emoji");
    const char *bad[] = {"\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\x80", "\xE2\x82", "\xFF"};
    for (int i = 0; i < 7; i++)
        CHECK(mt_utf8_next((const unsigned char *)bad[i], (int64_t)strlen(bad[i]), &len) < 0 && len == 1,
              "invalid sequence %d taken", i);

    /* the pattern's alternatives, leftmost-first */
    check_pieces("Hello world", "Hello| world");
    check_pieces("it's they'll we've I'm you're he'd don't", "it|'s| they|'ll| we|'ve| I|'m| you|'re| he|'d| don|'t");
    check_pieces("IT'S 'tis ''s", "IT|'|S| '|tis| ''|s"); /* the contractions are lower case only */
    check_pieces("abc123 45 x", "abc|123| 45| x");
    check_pieces("a  b", "a| | b");
    check_pieces("a   b", "a|  | b");
    check_pieces("a\n\nb", "a|\n|\n|b");
    check_pieces("x \t y", "x| \t| y");
    check_pieces("end   ", "end|   ");
    check_pieces("hi!!! ...", "hi|!!!| ...");
    check_pieces(" !x", " !|x");
    check_pieces("caf\xC3\xA9 na\xC3\xAFve", "caf\xC3\xA9| na\xC3\xAFve");
    check_pieces("a\xC2\xA0\x62", "a|\xC2\xA0|b");
    check_pieces("tab\tx", "tab|\t|x");
    check_pieces("a\r\n\r\nb", "a|\r\n\r|\n|b");
    /* invalid bytes: a piece each; the valid text on either side ends and begins there */
    check_pieces("ab\xFF" "cd", "ab|\xFF|cd");
    check_pieces("a  \x80 b", "a|  |\x80| b");

    /* the two merges agree */
    unsigned char alpha[] = "abcdxyz";
    for (int v = 0; v < 6; v++) {
        MtBpe *b = random_vocab(50 + 150 * v, alpha, 7);
        int agree = 1;
        for (int t = 0; t < 300; t++) {
            unsigned char p[64];
            int n = 2 + (int)(next() % 63);
            for (int i = 0; i < n; i++)
                p[i] = alpha[next() % 7];
            int32_t a[64], c[64];
            int64_t ka = 0, kc = 0;
            mt_bpe_merge(b, p, n, 0, a, &ka);
            mt_bpe_merge(b, p, n, 1, c, &kc);
            agree &= ka == kc && memcmp(a, c, sizeof(int32_t) * (size_t)ka) == 0;
            /* and the ids spell the piece */
            unsigned char *back = NULL;
            int64_t cap = 0, badi, nb = mt_bpe_decode(b, a, ka, &back, &cap, &badi);
            agree &= nb == n && memcmp(back, p, (size_t)n) == 0;
            free(back);
        }
        CHECK(agree, "vocabulary %d: the in-place and the long merge differ, or the ids do not spell the piece", v);
        mt_bpe_free(b);
    }

    /* the long merge against the plain one on long pieces, with tokens up to 1500 bytes (a
     * part of 255 bytes and more is stored apart) */
    for (int v = 0; v < 3; v++) {
        MtBpe *b = random_vocab_of(400 + 600 * v, (const unsigned char *)"ab", 2, 1500, 1);
        int agree = 1, longest = 0;
        for (int t = 0; t < 4; t++) {
            int n = 1000 + (int)(next() % 3000);
            unsigned char *p = malloc((size_t)n);
            for (int i = 0; i < n;) { /* runs of one letter and copies of long tokens */
                const unsigned char *tb;
                int tl, id = 256 + (int)(next() % (unsigned)(mt_bpe_vocab(b) - 256));
                if (next() % 2 && mt_bpe_token(b, id, &tb, &tl))
                    for (int j = 0; j < tl && i < n; j++)
                        p[i++] = tb[j];
                else
                    for (int j = 0, r = 1 + (int)(next() % 1200); j < r && i < n; j++)
                        p[i++] = "ab"[next() % 2 * (t % 2)];
            }
            int32_t *a = malloc(sizeof(int32_t) * (size_t)n), *c = malloc(sizeof(int32_t) * (size_t)n);
            int64_t ka = plain_merge(b, p, n, a), kc = 0;
            mt_bpe_merge(b, p, n, 1, c, &kc);
            agree &= ka == kc && memcmp(a, c, sizeof(int32_t) * (size_t)ka) == 0;
            for (int64_t i = 0; i < ka; i++) {
                const unsigned char *tb;
                int tl;
                if (mt_bpe_token(b, a[i], &tb, &tl) && tl > longest)
                    longest = tl;
            }
            free(p);
            free(a);
            free(c);
        }
        CHECK(agree, "vocabulary %d of long tokens: the long merge differs from the plain one", v);
        CHECK(v == 0 || longest >= 255, "vocabulary %d: no token of 255 bytes or more was used (longest %d)", v,
              longest);
        mt_bpe_free(b);
    }

    /* a window at a time against the plain merge: windows of 12 to 400 bytes over pieces of
     * 1000 to 4000 (many windows each), with short tokens (the windows splice) and with
     * tokens up to 1500 bytes (a window shares no boundary with the next: the rest merged
     * whole) */
    for (int v = 0; v < 4; v++) {
        MtBpe *b = v < 2 ? random_vocab(300 + 900 * v, alpha, 7)
                         : random_vocab_of(400 + 600 * v, (const unsigned char *)"ab", 2, 1500, 1);
        int agree = 1;
        for (int t = 0; t < 12; t++) {
            int n = 1000 + (int)(next() % 3000), win = (int[]){12, 33, 64, 150, 400}[t % 5];
            unsigned char *p = malloc((size_t)n);
            for (int i = 0; i < n; i++)
                p[i] = v < 2 ? alpha[next() % 7] : "ab"[next() % 2 * (t % 3 != 0)];
            int32_t *a = malloc(sizeof(int32_t) * (size_t)n), *c = malloc(sizeof(int32_t) * (size_t)n);
            int64_t ka = plain_merge(b, p, n, a), kc = 0;
            mt_bpe_merge(b, p, n, win, c, &kc);
            agree &= ka == kc && memcmp(a, c, sizeof(int32_t) * (size_t)ka) == 0;
            free(p);
            free(a);
            free(c);
        }
        CHECK(agree, "vocabulary %d: the merge a window at a time differs from the plain one", v);
        mt_bpe_free(b);
    }

    /* the round trip on random bytes (invalid UTF-8 and specials' text included) */
    MtBpe *b = random_vocab(800, (const unsigned char *)"ab \xC3\xA9'\n", 7);
    CHECK(mt_bpe_add_special(b, "<|endoftext|>", 1056) == MT_OK, "a special token");
    int32_t *ids = NULL;
    unsigned char *back = NULL;
    int64_t icap = 0, bcap = 0, fails = 0;
    for (int t = 0; t < 2000; t++) {
        unsigned char s[300];
        int n = (int)(next() % 300);
        for (int i = 0; i < n; i++) {
            uint32_t r = next() % 16;
            s[i] = r < 6 ? "ab 'x\n"[r] : r < 8 ? (unsigned char)(0xC3 + (r & 1)) : r < 10 ? 0xA9 : (unsigned char)next();
        }
        if (n > 20 && t % 3 == 0)
            memcpy(s + n / 2, "<|endoftext|>", 13);
        for (int sp = 0; sp < 2; sp++) {
            int64_t k = mt_bpe_encode(b, s, n, sp, &ids, &icap), badi;
            int64_t m = mt_bpe_decode(b, ids, k, &back, &bcap, &badi);
            fails += m != n || (n && memcmp(back, s, (size_t)n) != 0);
        }
    }
    CHECK(fails == 0, "%lld of 4000 random byte strings did not decode to themselves", (long long)fails);
    int64_t k = mt_bpe_encode(b, (const unsigned char *)"a<|endoftext|>b", 15, 1, &ids, &icap);
    CHECK(k == 3 && ids[1] == 1056, "the special's text is the special token (%lld ids)", (long long)k);
    k = mt_bpe_encode(b, (const unsigned char *)"a<|endoftext|>b", 15, 0, &ids, &icap);
    int has = 0;
    for (int64_t i = 0; i < k; i++)
        has |= ids[i] == 1056;
    CHECK(!has && k > 3, "not allowed, the special's text is text");
    free(ids);
    free(back);
    mt_bpe_free(b);

    /* the tiktoken reader: a good file, then one broken line each */
    char dir[] = "/tmp/mt_text_XXXXXX", path[64];
    MT_ASSERT(mkdtemp(dir), "mkdtemp");
    snprintf(path, sizeof path, "%s/v.tiktoken", dir);
    tiktoken_file(path, "YWI= 256\nYWJj 257\n");
    MtBpe *v = NULL;
    MtStatus s = mt_bpe_read_tiktoken(path, 1, &v);
    CHECK(s == MT_OK && mt_bpe_vocab(v) == 259 && mt_bpe_rank(v, (const unsigned char *)"abc", 3) == 257,
          "a good file: %s", s == MT_OK ? "" : mt_error_msg());
    mt_bpe_free(v);
    struct {
        const char *extra, *want;
    } broken[] = {
        {"YWI= x\n", ":257: want '<base64> <rank>'"},
        {"YW*= 256\n", ":257: bad base64"},
        {"YWI= 256\nYWI= 257\n", ":258: the bytes of id 257 are already id 256"},
        {"YWI= 256\nYWJj 256\n", ":258: id 256 is given twice"},
        {"YWI= 300\n", ":257: rank 300 is beyond"},
        {"YWI=\n", ":257: want '<base64> <rank>'"},
    };
    for (int i = 0; i < 6; i++) {
        tiktoken_file(path, broken[i].extra);
        v = NULL;
        s = mt_bpe_read_tiktoken(path, 1, &v);
        CHECK(s == MT_EINPUT && v == NULL && strstr(mt_error_msg(), broken[i].want) && strstr(mt_error_msg(), path),
              "broken file %d: status %d, '%s' (want '%s')", i, s, mt_error_msg(), broken[i].want);
    }
    write_file(path, "YQ== 0\n");
    s = mt_bpe_read_tiktoken(path, 1, &v);
    CHECK(s == MT_EINPUT && strstr(mt_error_msg(), "byte 0x00 has no token"), "a vocabulary without every byte: %s",
          mt_error_msg());
    unlink(path);
    rmdir(dir);
    return mt_test_done("test_text");
}
