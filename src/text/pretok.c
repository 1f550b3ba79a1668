/* pretok.c - GPT-2's pre-tokenizer as a scanner, and the Unicode classes it reads (see
 * mt_text.h). */
#include "mt_text.h"

#include <pthread.h>

#include "mt_unicode_tables.h" /* generated at build time from Debian's UCD (tools/gen_unicode.c) */

const char *mt_unicode_version(void) { return MT_UNICODE_VERSION; }

static int in_ranges(const uint32_t (*r)[2], int n, uint32_t cp)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid][0])
            hi = mid - 1;
        else if (cp > r[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

#define NR(t) ((int)(sizeof t / sizeof t[0]))

static int class_of(uint32_t cp)
{
    if (in_ranges(mt_uni_letter, NR(mt_uni_letter), cp))
        return MT_UNI_LETTER;
    if (in_ranges(mt_uni_number, NR(mt_uni_number), cp))
        return MT_UNI_NUMBER;
    if (in_ranges(mt_uni_space, NR(mt_uni_space), cp))
        return MT_UNI_SPACE;
    return MT_UNI_OTHER;
}

static unsigned char bmp[0x10000]; /* the tables' classes of the Basic Multilingual Plane, filled once */
static pthread_once_t bmp_once = PTHREAD_ONCE_INIT;
static int bmp_ready;                /* set (release) once bmp is filled: the hot path skips pthread_once */

static void fill_bmp(void)
{
    for (int c = 0; c < 3; c++) {
        static const int cls[3] = {MT_UNI_LETTER, MT_UNI_NUMBER, MT_UNI_SPACE};
        const uint32_t(*r)[2] = c == 0 ? mt_uni_letter : c == 1 ? mt_uni_number : mt_uni_space;
        int n = c == 0 ? NR(mt_uni_letter) : c == 1 ? NR(mt_uni_number) : NR(mt_uni_space);
        for (int i = 0; i < n && r[i][0] < 0x10000; i++)
            for (uint32_t cp = r[i][0]; cp <= r[i][1] && cp < 0x10000; cp++)
                if (bmp[cp] == MT_UNI_OTHER)
                    bmp[cp] = (unsigned char)cls[c];
    }
    __atomic_store_n(&bmp_ready, 1, __ATOMIC_RELEASE);
}

int mt_uni_class(uint32_t cp)
{
    if (cp < 0x10000) {
        if (!__atomic_load_n(&bmp_ready, __ATOMIC_ACQUIRE))
            pthread_once(&bmp_once, fill_bmp);
        return bmp[cp];
    }
    return class_of(cp);
}

int32_t mt_utf8_next(const unsigned char *s, int64_t n, int *len)
{
    unsigned c = s[0];
    *len = 1;
    if (c < 0x80)
        return (int32_t)c;
    int k;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) {
        k = 2;
        cp = c & 0x1F;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        k = 3;
        cp = c & 0x0F;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        k = 4;
        cp = c & 0x07;
        min = 0x10000;
    } else
        return -1;
    if (n < k)
        return -1;
    for (int j = 1; j < k; j++) {
        if ((s[j] & 0xC0) != 0x80)
            return -1;
        cp = cp << 6 | (s[j] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    *len = k;
    return (int32_t)cp;
}

/* the class of the code point at s[i..n) (its length in *len), or -1 at the end or at a
 * byte that starts no valid sequence (which ends the text for the pattern) */
static int cls_at(const unsigned char *s, int64_t n, int64_t i, int *len)
{
    if (i >= n) {
        *len = 0;
        return -1;
    }
    if (s[i] < 0x80) {
        *len = 1;
        return mt_uni_class(s[i]);
    }
    int32_t cp = mt_utf8_next(s + i, n - i, len);
    return cp < 0 ? -1 : mt_uni_class((uint32_t)cp);
}

/* the end of the run of class k from i */
static int64_t run(const unsigned char *s, int64_t n, int64_t i, int k)
{
    int len;
    while (cls_at(s, n, i, &len) == k)
        i += len;
    return i;
}

int64_t mt_pretok_next(const unsigned char *s, int64_t n, int64_t i)
{
    int len;
    int k = cls_at(s, n, i, &len);
    if (k < 0)
        return i + 1; /* a byte of invalid UTF-8: a piece of its own */
    if (s[i] == '\'' && i + 1 < n) { /* 's 't 'm 'd, then 'll 've 're */
        unsigned char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd')
            return i + 2;
        if ((a == 'l' && b == 'l') || (a == 'v' && b == 'e') || (a == 'r' && b == 'e'))
            return i + 3;
    }
    if (s[i] == ' ') { /* " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+" with their space */
        int len2, k2 = cls_at(s, n, i + 1, &len2);
        if (k2 == MT_UNI_LETTER || k2 == MT_UNI_NUMBER || k2 == MT_UNI_OTHER)
            return run(s, n, i + 1 + len2, k2);
    }
    if (k != MT_UNI_SPACE)
        return run(s, n, i + len, k);
    /* white space: "\s+(?!\S)" keeps the run but its last character when text follows; a
     * single character before text is "\s+" */
    int64_t j = i, last = i;
    int count = 0;
    while ((k = cls_at(s, n, j, &len)) == MT_UNI_SPACE) {
        last = j;
        j += len;
        count++;
    }
    if (k < 0) /* the end of the text (or of its valid part) */
        return j;
    return count >= 2 ? last : j;
}
