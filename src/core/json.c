/* json.c - strict recursive-descent JSON parser and a JSON string builder.
 *
 * Every byte access goes through the parser's bounds (pos < len).  A value is parsed
 * into a caller-provided node; containers grow their child arrays with realloc, and a
 * failure clears whatever was built so far, so nothing leaks on any error path.
 */
#include "mt_json.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct {
    const unsigned char *s;
    size_t len, pos;
} Parser;

static MtStatus fail(size_t at, const char *what)
{
    return mt_error(MT_EINPUT, "invalid JSON at byte %zu: %s", at, what);
}

static MtStatus oom(void) { return mt_error(MT_ENOMEM, "out of memory parsing JSON"); }

static void skip_ws(Parser *p)
{
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

/* Frees what the node owns (not the node itself) and makes it a null. */
static void node_clear(MtJson *j)
{
    free(j->num_text);
    free(j->str);
    for (int i = 0; i < j->n; i++) {
        node_clear(&j->items[i]);
        if (j->keys)
            free(j->keys[i]);
    }
    free(j->items);
    free(j->keys);
    memset(j, 0, sizeof *j);
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if invalid (overlong forms,
 * surrogates and code points above U+10FFFF are invalid). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (n < need + 1)
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t k = 2; k <= need; k++)
        if (s[k] < 0x80 || s[k] > 0xBF)
            return 0;
    return need + 1;
}

static int hex4(const unsigned char *s, unsigned *out)
{
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned char c = s[k];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return 0;
    }
    *out = v;
    return 1;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* p->pos is at the opening quote.  The decoded string is never longer than the raw
 * span (an escape of 6 or 12 bytes becomes at most 3 or 4), so one allocation of the
 * span's size suffices. */
static MtStatus parse_string(Parser *p, char **out)
{
    size_t start = p->pos, end = start + 1;
    while (end < p->len && p->s[end] != '"')
        end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->len)
        return fail(start, "unterminated string");
    char *buf = malloc(end - start);
    if (!buf)
        return oom();
    size_t o = 0, i = start + 1;
    while (i < end) {
        unsigned char c = p->s[i];
        if (c < 0x20) {
            free(buf);
            return fail(i, "control character in string");
        }
        if (c != '\\') {
            size_t k = utf8_seq(p->s + i, end - i);
            if (k == 0) {
                free(buf);
                return fail(i, "invalid UTF-8 in string");
            }
            memcpy(buf + o, p->s + i, k);
            o += k;
            i += k;
            continue;
        }
        /* the scan above guarantees i + 1 < end: a backslash is never the last byte */
        unsigned char e = p->s[i + 1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char repl[] = "\"\\/\b\f\n\r\t";
            buf[o++] = repl[simple - "\"\\/bfnrt"];
            i += 2;
            continue;
        }
        unsigned cp, lo;
        if (e != 'u' || end - i < 6 || !hex4(p->s + i + 2, &cp)) {
            free(buf);
            return fail(i, e == 'u' ? "invalid \\u escape" : "invalid escape in string");
        }
        if (cp == 0) {
            free(buf);
            return fail(i, "\\u0000 in string");
        }
        if (cp >= 0xDC00 && cp <= 0xDFFF) {
            free(buf);
            return fail(i, "lone UTF-16 low surrogate");
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (end - i < 12 || p->s[i + 6] != '\\' || p->s[i + 7] != 'u' || !hex4(p->s + i + 8, &lo) ||
                lo < 0xDC00 || lo > 0xDFFF) {
                free(buf);
                return fail(i, "UTF-16 high surrogate not followed by a low surrogate");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
        }
        o += put_utf8(buf + o, cp);
        i += 6;
    }
    buf[o] = 0;
    p->pos = end + 1;
    *out = buf;
    return MT_OK;
}

static int is_digit(Parser *p)
{
    return p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9';
}

static MtStatus parse_number(Parser *p, MtJson *j)
{
    size_t start = p->pos;
    if (p->s[p->pos] == '-')
        p->pos++;
    if (!is_digit(p))
        return fail(p->pos, "expected a digit");
    if (p->s[p->pos] == '0') {
        p->pos++;
        if (is_digit(p))
            return fail(p->pos, "leading zero in number");
    } else
        while (is_digit(p))
            p->pos++;
    if (p->pos < p->len && p->s[p->pos] == '.') {
        p->pos++;
        if (!is_digit(p))
            return fail(p->pos, "expected a digit after '.'");
        while (is_digit(p))
            p->pos++;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
            p->pos++;
        if (!is_digit(p))
            return fail(p->pos, "expected a digit in the exponent");
        while (is_digit(p))
            p->pos++;
    }
    size_t n = p->pos - start;
    char *text = malloc(n + 1);
    if (!text)
        return oom();
    memcpy(text, p->s + start, n);
    text[n] = 0;
    double v = strtod(text, NULL);
    if (!isfinite(v)) {
        free(text);
        return fail(start, "number out of range");
    }
    j->type = MT_JSON_NUMBER;
    j->number = v;
    j->num_text = text;
    return MT_OK;
}

static MtStatus parse_value(Parser *p, MtJson *j, int depth);

/* Appends an empty child slot (and a key slot for objects); returns it or NULL. */
static MtJson *push_child(MtJson *j, int *cap, int with_key)
{
    if (j->n == *cap) {
        if (*cap > INT_MAX / 2)
            return NULL;
        int nc = *cap ? 2 * *cap : 4;
        MtJson *items = realloc(j->items, (size_t)nc * sizeof *items);
        if (!items)
            return NULL;
        j->items = items;
        if (with_key) {
            char **keys = realloc(j->keys, (size_t)nc * sizeof *keys);
            if (!keys)
                return NULL;
            j->keys = keys;
        }
        *cap = nc;
    }
    MtJson *c = &j->items[j->n];
    memset(c, 0, sizeof *c);
    if (with_key)
        j->keys[j->n] = NULL;
    j->n++;
    return c;
}

static MtStatus parse_array(Parser *p, MtJson *j, int depth)
{
    int cap = 0;
    j->type = MT_JSON_ARRAY;
    p->pos++; /* '[' */
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ']') {
        p->pos++;
        return MT_OK;
    }
    for (;;) {
        MtJson *c = push_child(j, &cap, 0);
        if (!c)
            return oom();
        MT_TRY(parse_value(p, c, depth));
        skip_ws(p);
        if (p->pos >= p->len)
            return fail(p->pos, "unexpected end of input in array");
        if (p->s[p->pos] == ']') {
            p->pos++;
            return MT_OK;
        }
        if (p->s[p->pos] != ',')
            return fail(p->pos, "expected ',' or ']'");
        p->pos++;
    }
}

typedef struct {
    const char *key;
    size_t pos;
} KeyRef;

static int keyref_cmp(const void *a, const void *b)
{
    const KeyRef *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c)
        return c;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Sorting the keys finds a duplicate in O(n log n) even in a hostile header with
 * millions of keys; the error names the byte of the second occurrence. */
static MtStatus check_duplicates(const MtJson *j, const size_t *kpos)
{
    if (j->n < 2)
        return MT_OK;
    KeyRef *refs = malloc((size_t)j->n * sizeof *refs);
    if (!refs)
        return oom();
    for (int i = 0; i < j->n; i++)
        refs[i] = (KeyRef){j->keys[i], kpos[i]};
    qsort(refs, (size_t)j->n, sizeof *refs, keyref_cmp);
    MtStatus st = MT_OK;
    for (int i = 1; i < j->n && st == MT_OK; i++)
        if (strcmp(refs[i - 1].key, refs[i].key) == 0)
            st = fail(refs[i].pos, "duplicate key in object");
    free(refs);
    return st;
}

static MtStatus parse_object(Parser *p, MtJson *j, int depth)
{
    int cap = 0, kcap = 0;
    size_t *kpos = NULL;
    MtStatus st = MT_OK;
    j->type = MT_JSON_OBJECT;
    p->pos++; /* '{' */
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == '}') {
        p->pos++;
        return MT_OK;
    }
    for (;;) {
        skip_ws(p);
        if (p->pos >= p->len || p->s[p->pos] != '"') {
            st = fail(p->pos, p->pos >= p->len ? "unexpected end of input in object" : "expected a string key");
            break;
        }
        MtJson *c = push_child(j, &cap, 1);
        if (c && j->n > kcap) {
            size_t *nk = realloc(kpos, (size_t)cap * sizeof *kpos);
            if (nk) {
                kpos = nk;
                kcap = cap;
            } else
                c = NULL;
        }
        if (!c) {
            st = oom();
            break;
        }
        kpos[j->n - 1] = p->pos;
        if ((st = parse_string(p, &j->keys[j->n - 1])) != MT_OK)
            break;
        skip_ws(p);
        if (p->pos >= p->len || p->s[p->pos] != ':') {
            st = fail(p->pos, "expected ':' after key");
            break;
        }
        p->pos++;
        if ((st = parse_value(p, c, depth)) != MT_OK)
            break;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == '}') {
            p->pos++;
            st = check_duplicates(j, kpos);
            break;
        }
        if (p->pos >= p->len || p->s[p->pos] != ',') {
            st = fail(p->pos, p->pos >= p->len ? "unexpected end of input in object" : "expected ',' or '}'");
            break;
        }
        p->pos++;
    }
    free(kpos);
    return st;
}

static MtStatus match_literal(Parser *p, const char *lit)
{
    size_t n = strlen(lit);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, lit, n) != 0)
        return fail(p->pos, "invalid literal");
    p->pos += n;
    return MT_OK;
}

/* `depth` counts the containers around `j`; a container inside 64 others is refused. */
static MtStatus parse_value(Parser *p, MtJson *j, int depth)
{
    skip_ws(p);
    if (p->pos >= p->len)
        return fail(p->pos, "unexpected end of input");
    unsigned char c = p->s[p->pos];
    if ((c == '[' || c == '{') && depth >= MAX_DEPTH)
        return fail(p->pos, "nesting deeper than 64");
    switch (c) {
    case '[': return parse_array(p, j, depth + 1);
    case '{': return parse_object(p, j, depth + 1);
    case '"':
        j->type = MT_JSON_STRING;
        return parse_string(p, &j->str);
    case 't':
        j->type = MT_JSON_BOOL;
        j->boolean = 1;
        return match_literal(p, "true");
    case 'f':
        j->type = MT_JSON_BOOL;
        return match_literal(p, "false");
    case 'n': return match_literal(p, "null");
    default:
        if (c == '-' || (c >= '0' && c <= '9'))
            return parse_number(p, j);
        return fail(p->pos, "unexpected character");
    }
}

MtStatus mt_json_parse(const char *text, size_t len, MtJson **out)
{
    *out = NULL;
    MtJson *root = calloc(1, sizeof *root);
    if (!root)
        return oom();
    Parser p = {(const unsigned char *)text, text ? len : 0, 0};
    MtStatus st = parse_value(&p, root, 0);
    if (st == MT_OK) {
        skip_ws(&p);
        if (p.pos != p.len)
            st = fail(p.pos, "trailing characters after the document");
    }
    if (st != MT_OK) {
        mt_json_free(root);
        return st;
    }
    *out = root;
    return MT_OK;
}

void mt_json_free(MtJson *j)
{
    if (!j)
        return;
    node_clear(j);
    free(j);
}

MtJsonType mt_json_type(const MtJson *j) { return j ? j->type : MT_JSON_NULL; }

const MtJson *mt_json_get(const MtJson *obj, const char *key)
{
    if (!obj || obj->type != MT_JSON_OBJECT || !key)
        return NULL;
    for (int i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0)
            return &obj->items[i];
    return NULL;
}

int mt_json_len(const MtJson *j)
{
    return j && (j->type == MT_JSON_ARRAY || j->type == MT_JSON_OBJECT) ? j->n : 0;
}

const MtJson *mt_json_at(const MtJson *j, int i)
{
    return i >= 0 && i < mt_json_len(j) ? &j->items[i] : NULL;
}

const char *mt_json_key_at(const MtJson *obj, int i)
{
    return obj && obj->type == MT_JSON_OBJECT && i >= 0 && i < obj->n ? obj->keys[i] : NULL;
}

const char *mt_json_str(const MtJson *j) { return j && j->type == MT_JSON_STRING ? j->str : NULL; }
double mt_json_num(const MtJson *j) { return j && j->type == MT_JSON_NUMBER ? j->number : 0.0; }
int mt_json_bool(const MtJson *j) { return j && j->type == MT_JSON_BOOL ? j->boolean : 0; }

MtStatus mt_json_i64(const MtJson *j, int64_t *out)
{
    if (!j || j->type != MT_JSON_NUMBER)
        return mt_error(MT_EINPUT, "expected an integer, got a non-number");
    const char *s = j->num_text;
    int neg = *s == '-';
    s += neg;
    /* magnitude limit: 2^63 - 1, or 2^63 for a negative number */
    uint64_t limit = (uint64_t)INT64_MAX + (uint64_t)neg, v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return mt_error(MT_EINPUT, "expected an integer, got %.64s", j->num_text);
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (limit - d) / 10)
            return mt_error(MT_EINPUT, "integer %.64s does not fit in 64 bits", j->num_text);
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v; /* 0 - 2^63 wraps to INT64_MIN, as intended */
    return MT_OK;
}

/* ---- writer */

void mt_buf_init(MtBuf *b) { memset(b, 0, sizeof *b); }

static int reserve(MtBuf *b, size_t extra)
{
    if (b->failed)
        return 0;
    if (b->len + extra + 1 <= b->cap)
        return 1;
    size_t nc = b->cap ? b->cap : 64;
    while (nc < b->len + extra + 1)
        nc *= 2;
    char *d = realloc(b->data, nc);
    if (!d) {
        b->failed = 1;
        return 0;
    }
    b->data = d;
    b->cap = nc;
    return 1;
}

void mt_buf_printf(MtBuf *b, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    if (n < 0)
        b->failed = 1;
    else if (reserve(b, (size_t)n)) {
        vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
    va_end(ap);
}

void mt_buf_json_str(MtBuf *b, const char *s)
{
    if (!s) {
        mt_buf_printf(b, "null");
        return;
    }
    /* worst case: every byte becomes a 6-byte \u00XX escape */
    size_t n = strlen(s);
    if (n > (SIZE_MAX - 3) / 6 || !reserve(b, 6 * n + 2)) {
        b->failed = 1;
        return;
    }
    char *o = b->data + b->len;
    *o++ = '"';
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        const char *esc = NULL;
        switch (*c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        }
        if (esc) {
            memcpy(o, esc, 2);
            o += 2;
        } else if (*c < 0x20)
            o += sprintf(o, "\\u%04x", *c);
        else
            *o++ = (char)*c;
    }
    *o++ = '"';
    *o = 0;
    b->len = (size_t)(o - b->data);
}

void mt_buf_free(MtBuf *b)
{
    free(b->data);
    mt_buf_init(b);
}
