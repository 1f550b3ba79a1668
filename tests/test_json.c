/* test_json.c - the strict JSON parser (valid documents, a table of invalid ones, every
 * prefix of a document) and the MtBuf writer (round trip through the parser).
 * Every parse reads from an exact-size heap copy, so valgrind sees any over-read. */
#include <stdlib.h>
#include <string.h>

#include "mt_json.h"
#include "mt_test.h"

static MtStatus parse_n(const char *text, size_t len, MtJson **out)
{
    char *copy = malloc(len ? len : 1);
    memcpy(copy, text, len);
    MtStatus st = mt_json_parse(copy, len, out);
    free(copy);
    return st;
}

static MtStatus parse(const char *text, MtJson **out) { return parse_n(text, strlen(text), out); }

static void test_scalars(void)
{
    MtJson *j;
    CHECK(parse(" null ", &j) == MT_OK && mt_json_type(j) == MT_JSON_NULL, "null");
    mt_json_free(j);
    CHECK(parse("true", &j) == MT_OK && mt_json_type(j) == MT_JSON_BOOL && mt_json_bool(j) == 1, "true");
    mt_json_free(j);
    CHECK(parse("false", &j) == MT_OK && mt_json_type(j) == MT_JSON_BOOL && mt_json_bool(j) == 0, "false");
    mt_json_free(j);

    struct { const char *text; double v; } nums[] = {
        {"0", 0}, {"-0", 0}, {"42", 42}, {"-17", -17}, {"3.25", 3.25}, {"-0.5", -0.5},
        {"1e3", 1000}, {"1E+3", 1000}, {"2.5e-2", 0.025}, {"-1.5E2", -150}, {"1e-400", 0},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        CHECK(parse(nums[i].text, &j) == MT_OK && mt_json_type(j) == MT_JSON_NUMBER, "%s: %s", nums[i].text,
              mt_error_msg());
        CHECK_CLOSE(mt_json_num(j), nums[i].v, 0, 0, nums[i].text);
        mt_json_free(j);
    }

    struct { const char *text; int ok; int64_t v; } ints[] = {
        {"0", 1, 0}, {"-0", 1, 0}, {"123", 1, 123}, {"-123", 1, -123},
        {"9223372036854775807", 1, INT64_MAX}, {"-9223372036854775808", 1, INT64_MIN},
        {"9007199254740993", 1, 9007199254740993LL}, /* 2^53 + 1: not exact as a double */
        {"9223372036854775808", 0, 0}, {"-9223372036854775809", 0, 0}, {"99999999999999999999", 0, 0},
        {"1.0", 0, 0}, {"1e2", 0, 0}, {"-2.5", 0, 0},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int64_t v = 77;
        CHECK(parse(ints[i].text, &j) == MT_OK, "%s parses", ints[i].text);
        MtStatus st = mt_json_i64(j, &v);
        CHECK((st == MT_OK) == ints[i].ok, "i64(%s): status %d", ints[i].text, st);
        if (ints[i].ok)
            CHECK(v == ints[i].v, "i64(%s) = %lld", ints[i].text, (long long)v);
        else
            CHECK(st == MT_EINPUT && v == 77, "i64(%s) leaves out unchanged", ints[i].text);
        mt_json_free(j);
    }
    CHECK(parse("\"12\"", &j) == MT_OK, "string");
    int64_t v;
    CHECK(mt_json_i64(j, &v) == MT_EINPUT, "i64 of a string");
    CHECK(mt_json_num(j) == 0 && mt_json_str(j) && strcmp(mt_json_str(j), "12") == 0, "string accessors");
    mt_json_free(j);
}

static void test_strings(void)
{
    struct { const char *text, *want; } cases[] = {
        {"\"\"", ""},
        {"\"plain\"", "plain"},
        {"\"a\\\"b\\\\c\\/d\"", "a\"b\\c/d"},
        {"\"\\b\\f\\n\\r\\t\"", "\b\f\n\r\t"},
        {"\"caf\\u00e9\"", "caf\xc3\xa9"},
        {"\"caf\xc3\xa9\"", "caf\xc3\xa9"},                       /* raw UTF-8 */
        {"\"\\u20AC\"", "\xe2\x82\xac"},                            /* euro sign, 3 bytes */
        {"\"\\ud83d\\ude00!\"", "\xf0\x9f\x98\x80!"},              /* surrogate pair -> U+1F600 */
        {"\"\\u0041\\u007f\"", "A\x7f"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        MtJson *j;
        MtStatus st = parse(cases[i].text, &j);
        CHECK(st == MT_OK && mt_json_str(j) && strcmp(mt_json_str(j), cases[i].want) == 0, "string %s: %s",
              cases[i].text, st ? mt_error_msg() : "wrong value");
        mt_json_free(j);
    }
}

static void test_nested(void)
{
    const char *doc = "{\"name\": \"gpt\", \"layers\": [1, 2, {\"deep\": [[], {}]}],\n"
                      " \"ok\": true, \"none\": null, \"lr\": 3e-4, \"n\": -12}";
    MtJson *j;
    CHECK(parse(doc, &j) == MT_OK, "nested: %s", mt_error_msg());
    CHECK(mt_json_type(j) == MT_JSON_OBJECT && mt_json_len(j) == 6, "object of 6");
    const char *keys[] = {"name", "layers", "ok", "none", "lr", "n"};
    for (int i = 0; i < 6; i++)
        CHECK(mt_json_key_at(j, i) && strcmp(mt_json_key_at(j, i), keys[i]) == 0, "key %d in file order", i);
    CHECK(mt_json_key_at(j, 6) == NULL && mt_json_at(j, -1) == NULL, "out of range");
    CHECK(strcmp(mt_json_str(mt_json_get(j, "name")), "gpt") == 0, "name");
    const MtJson *layers = mt_json_get(j, "layers");
    CHECK(mt_json_type(layers) == MT_JSON_ARRAY && mt_json_len(layers) == 3, "layers");
    CHECK(mt_json_num(mt_json_at(layers, 1)) == 2, "layers[1]");
    const MtJson *deep = mt_json_get(mt_json_at(layers, 2), "deep");
    CHECK(mt_json_len(deep) == 2 && mt_json_type(mt_json_at(deep, 0)) == MT_JSON_ARRAY &&
              mt_json_len(mt_json_at(deep, 0)) == 0 && mt_json_type(mt_json_at(deep, 1)) == MT_JSON_OBJECT,
          "deep");
    CHECK(mt_json_bool(mt_json_get(j, "ok")) == 1, "ok");
    CHECK(mt_json_get(j, "none") && mt_json_type(mt_json_get(j, "none")) == MT_JSON_NULL, "none present");
    CHECK(mt_json_get(j, "missing") == NULL && mt_json_get(layers, "name") == NULL, "absent / not an object");
    CHECK_CLOSE(mt_json_num(mt_json_get(j, "lr")), 3e-4, 0, 0, "lr");
    int64_t n = 0;
    CHECK(mt_json_i64(mt_json_get(j, "n"), &n) == MT_OK && n == -12, "n");
    CHECK(mt_json_type(NULL) == MT_JSON_NULL && mt_json_len(NULL) == 0 && mt_json_str(NULL) == NULL, "NULL-safe");
    mt_json_free(j);
    mt_json_free(NULL);

    /* depth: 64 nested arrays are fine, 65 are refused */
    char deep64[200], deep65[200];
    memset(deep64, '[', 64);
    memset(deep64 + 64, ']', 64);
    memset(deep65, '[', 65);
    memset(deep65 + 65, ']', 65);
    CHECK(parse_n(deep64, 128, &j) == MT_OK, "depth 64: %s", mt_error_msg());
    mt_json_free(j);
    CHECK(parse_n(deep65, 130, &j) == MT_EINPUT && j == NULL, "depth 65");
    CHECK(strstr(mt_error_msg(), "byte 64") && strstr(mt_error_msg(), "deeper"), "depth message: %s",
          mt_error_msg());
}

static void test_invalid(void)
{
    struct { const char *text; size_t len; const char *why; } bad[] = {
        {"", 0, "empty"},
        {"   ", 0, "only whitespace"},
        {"[1,2,]", 0, "trailing comma in array"},
        {"{\"a\":1,}", 0, "trailing comma in object"},
        {"\"abc", 0, "unterminated string"},
        {"\"abc\\\"", 0, "unterminated after escape"},
        {"{\"a\":1,\"b\":2,\"a\":3}", 0, "duplicate key"},
        {"\"a\tb\"", 0, "bare control character"},
        {"\"a\nb\"", 0, "bare newline"},
        {"01", 0, "leading zero"},
        {"-01", 0, "negative leading zero"},
        {"\"\\ud800\"", 0, "lone high surrogate"},
        {"\"\\udc00\"", 0, "lone low surrogate"},
        {"\"\\ud800\\u0041\"", 0, "high surrogate + non-low"},
        {"1.", 0, "no digit after point"},
        {".5", 0, "no digit before point"},
        {"-", 0, "minus alone"},
        {"1e", 0, "empty exponent"},
        {"1e+", 0, "empty signed exponent"},
        {"+1", 0, "plus sign"},
        {"0x10", 0, "hex"},
        {"NaN", 0, "NaN"},
        {"Infinity", 0, "Infinity"},
        {"1e999", 0, "overflowing number"},
        {"\"\\u0000\"", 0, "escaped NUL"},
        {"\"\\x41\"", 0, "invalid escape"},
        {"\"\\u12G4\"", 0, "bad hex"},
        {"\"\\u12\"", 0, "short \\u"},
        {"[1 2]", 0, "missing comma"},
        {"{\"a\" 1}", 0, "missing colon"},
        {"{a:1}", 0, "unquoted key"},
        {"{1:1}", 0, "number key"},
        {"[1]]", 0, "trailing bracket"},
        {"{} {}", 0, "two documents"},
        {"tru", 0, "truncated literal"},
        {"True", 0, "capitalised literal"},
        {"nul", 0, "truncated null"},
        {"'a'", 0, "single quotes"},
        {"[1] // c", 0, "comment"},
        {"\"\xff\"", 0, "invalid UTF-8 byte"},
        {"\"\xc0\xaf\"", 0, "overlong UTF-8"},
        {"\"\xed\xa0\x80\"", 0, "UTF-8 encoded surrogate"},
        {"\"\xf4\x90\x80\x80\"", 0, "above U+10FFFF"},
        {"\"\xe2\x82\"", 0, "truncated UTF-8"},
        {"[\"a\",\0]", 7, "embedded NUL byte"},
        {"1\0", 2, "trailing NUL"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        MtJson *j = (MtJson *)&j;
        size_t len = bad[i].len ? bad[i].len : strlen(bad[i].text);
        mt_error_clear();
        MtStatus st = parse_n(bad[i].text, len, &j);
        CHECK(st == MT_EINPUT && j == NULL, "%s: status %d", bad[i].why, st);
        CHECK(strncmp(mt_error_msg(), "invalid JSON at byte ", 21) == 0, "%s: message %s", bad[i].why,
              mt_error_msg());
        mt_json_free(st == MT_OK ? j : NULL);
    }
}

/* Every prefix of a document: no crash, and failure unless the prefix is itself a
 * complete document (checked against a hand-written list for the number doc). */
static void test_prefixes(void)
{
    const char *doc = "{\"a\":[1,-2.5e+3,true,false,null,\"x\\u00e9\\ud83d\\ude00\\n\"],\"b\":{\"c\":{}}}";
    size_t n = strlen(doc);
    int ok_count = 0;
    for (size_t len = 0; len <= n; len++) {
        MtJson *j;
        MtStatus st = parse_n(doc, len, &j);
        ok_count += st == MT_OK;
        CHECK((st == MT_OK) == (len == n), "prefix of %zu bytes: status %d", len, st);
        CHECK(st == MT_OK || st == MT_EINPUT, "prefix %zu: status %d", len, st);
        mt_json_free(j);
    }
    CHECK(ok_count == 1, "only the whole document parses");

    const char *num = "-12.5e+7";
    int valid[] = {0, 0, 1, 1, 0, 1, 0, 0, 1}; /* "-1", "-12", "-12.5", "-12.5e+7" */
    for (size_t len = 0; len <= strlen(num); len++) {
        MtJson *j;
        MtStatus st = parse_n(num, len, &j);
        CHECK((st == MT_OK) == valid[len], "number prefix %zu: status %d", len, st);
        mt_json_free(j);
    }
}

static void test_writer(void)
{
    MtBuf b;
    mt_buf_init(&b);
    const char *weird = "q\"uo\\te\n\t\x01\x1f caf\xc3\xa9 /";
    mt_buf_printf(&b, "{");
    mt_buf_json_str(&b, "key with \"quotes\"");
    mt_buf_printf(&b, ":");
    mt_buf_json_str(&b, weird);
    mt_buf_printf(&b, ",\"n\":%lld,\"x\":%.17g,\"arr\":[", (long long)INT64_MIN, 0.1);
    for (int i = 0; i < 1000; i++) /* forces many reallocations */
        mt_buf_printf(&b, "%s%d", i ? "," : "", i);
    mt_buf_printf(&b, "],\"nul\":");
    mt_buf_json_str(&b, NULL);
    mt_buf_printf(&b, "}");
    CHECK(!b.failed && b.data && strlen(b.data) == b.len, "buffer state");

    MtJson *j;
    CHECK(parse_n(b.data, b.len, &j) == MT_OK, "round trip parses: %s", mt_error_msg());
    CHECK(mt_json_str(mt_json_get(j, "key with \"quotes\"")) &&
              strcmp(mt_json_str(mt_json_get(j, "key with \"quotes\"")), weird) == 0,
          "escaped string round trip");
    int64_t n = 0;
    CHECK(mt_json_i64(mt_json_get(j, "n"), &n) == MT_OK && n == INT64_MIN, "int64 min round trip");
    CHECK(mt_json_num(mt_json_get(j, "x")) == 0.1, "%%.17g double round trip");
    const MtJson *arr = mt_json_get(j, "arr");
    CHECK(mt_json_len(arr) == 1000 && mt_json_num(mt_json_at(arr, 999)) == 999, "array round trip");
    CHECK(mt_json_type(mt_json_get(j, "nul")) == MT_JSON_NULL, "NULL string writes null");
    mt_json_free(j);
    mt_buf_free(&b);
    mt_buf_free(&b);
    CHECK(b.data == NULL && b.len == 0, "free twice");
}

int main(void)
{
    test_scalars();
    test_strings();
    test_nested();
    test_invalid();
    test_prefixes();
    test_writer();
    return mt_test_done("test_json");
}
