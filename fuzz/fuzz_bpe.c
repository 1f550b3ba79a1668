/* The round trip of the tokenizer: any bytes encode (with and without special tokens) and
 * decode back to themselves, over a byte-level vocabulary with merges across letters,
 * spaces, a two-byte character and the apostrophe.  A difference aborts. */
#include "fuzz_common.h"
#include "mt_text.h"

static MtBpe *vocab(void)
{
    static const char *merges[] = {"he", "ll", "hell", "hello", " w", " wo", "rld", " world", "\xC3\xA9", "caf",
                                   "caf\xC3\xA9", "'s", " the", "th", " t", "e ", "  ", "\n\n", "ab", "abab"};
    int nm = (int)(sizeof merges / sizeof merges[0]);
    MtBpe *b = mt_bpe_new(256 + nm);
    for (int i = 0; i < 256; i++) {
        unsigned char c = (unsigned char)i;
        mt_bpe_add(b, &c, 1, i);
    }
    for (int i = 0; i < nm; i++)
        mt_bpe_add(b, (const unsigned char *)merges[i], (int)strlen(merges[i]), 256 + i);
    mt_bpe_add_special(b, "<|endoftext|>", 256 + nm);
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static MtBpe *b;
    if (!b)
        b = vocab();
    int32_t *ids = NULL;
    unsigned char *back = NULL;
    int64_t icap = 0, bcap = 0, bad;
    for (int sp = 0; sp < 2; sp++) {
        int64_t k = mt_bpe_encode(b, data, (int64_t)size, sp, &ids, &icap);
        int64_t n = mt_bpe_decode(b, ids, k, &back, &bcap, &bad);
        if (n != (int64_t)size || (size && memcmp(back, data, size) != 0))
            abort();
    }
    free(ids);
    free(back);
    return 0;
}
