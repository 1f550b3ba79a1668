/* mt_json.h - a small, strict JSON parser for untrusted input, and a string builder
 * for writing JSON.
 *
 * The parser accepts exactly RFC 8259 JSON and nothing else: no comments, no trailing
 * commas, no NaN/Infinity, no leading zeros, no control characters or invalid UTF-8 in
 * strings, no lone UTF-16 surrogates, no "\u0000" (strings are NUL-terminated), no
 * duplicate keys in an object (a safetensors header must be unambiguous), nesting at
 * most 64 deep, and nothing but whitespace after the document.  It never reads past
 * `len`; the text need not be NUL-terminated.  Numbers whose value overflows a double
 * (1e999) are refused.  strtod is used for number values: the process must run in the
 * "C" numeric locale (the default unless someone calls setlocale).
 *
 * A parsed document is a tree of MtJson nodes owned by the caller (mt_json_free).
 * Read it through the accessors; the fields are documented for modules that must
 * take a subtree out of a tree (move the node, then zero the slot it came from).
 * Memory: about 50 bytes per node plus the strings.
 */
#ifndef MT_JSON_H
#define MT_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "mt_core.h"

typedef enum { MT_JSON_NULL, MT_JSON_BOOL, MT_JSON_NUMBER, MT_JSON_STRING, MT_JSON_ARRAY, MT_JSON_OBJECT } MtJsonType;

typedef struct MtJson MtJson;
struct MtJson {
    MtJsonType type;
    int boolean;    /* MT_JSON_BOOL: 0 or 1 */
    double number;  /* MT_JSON_NUMBER: the value as a double */
    char *num_text; /* MT_JSON_NUMBER: the source text ("-12", "1.5e3"), for exact integers */
    char *str;      /* MT_JSON_STRING: unescaped UTF-8, NUL-terminated, no embedded NUL */
    int n;          /* MT_JSON_ARRAY / MT_JSON_OBJECT: number of children */
    MtJson *items;  /* children, in file order */
    char **keys;    /* MT_JSON_OBJECT: keys[i] names items[i]; unique */
};

/* Parses `len` bytes of `text`.  On success *out is a tree owned by the caller.
 * On failure *out is NULL and the status is MT_EINPUT with the message
 * "invalid JSON at byte N: <what>" (N counts from 0), or MT_ENOMEM. */
MtStatus mt_json_parse(const char *text, size_t len, MtJson **out);
/* Accepts NULL. */
void mt_json_free(MtJson *j);

/* Accessors.  All accept NULL and then answer as for a missing value. */
MtJsonType mt_json_type(const MtJson *j);                   /* MT_JSON_NULL for NULL */
const MtJson *mt_json_get(const MtJson *obj, const char *key); /* NULL if absent or not an object */
int mt_json_len(const MtJson *j);                            /* children of an array/object, else 0 */
const MtJson *mt_json_at(const MtJson *j, int i);            /* NULL if out of range */
const char *mt_json_key_at(const MtJson *obj, int i);        /* NULL if not an object or out of range */
const char *mt_json_str(const MtJson *j);                    /* NULL if not a string */
double mt_json_num(const MtJson *j);                         /* 0 if not a number */
int mt_json_bool(const MtJson *j);                           /* 0 if not a boolean */
/* MT_OK and *out set if `j` is a JSON integer (no fraction, no exponent) that fits in
 * int64_t ("-0" is 0); otherwise MT_EINPUT with a message and *out unchanged. */
MtStatus mt_json_i64(const MtJson *j, int64_t *out);

/* A growing, NUL-terminated string for writing JSON (or anything).  An allocation
 * failure sets `failed`; later appends are ignored, so check `failed` once at the end.
 * `data` is NULL until something is appended. */
typedef struct {
    char *data;
    size_t len, cap;
    int failed;
} MtBuf;

void mt_buf_init(MtBuf *b);
void mt_buf_printf(MtBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends `s` (UTF-8) as a quoted JSON string, escaping '"', '\\' and control
 * characters.  NULL appends `null`. */
void mt_buf_json_str(MtBuf *b, const char *s);
/* Frees the data and re-initialises; can be called twice. */
void mt_buf_free(MtBuf *b);

#endif
