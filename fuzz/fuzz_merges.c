/* Hugging Face's vocab.json + merges.txt reader: the input is vocab.json, a NUL byte, then
 * merges.txt (no NUL: all of it is vocab.json and merges.txt is empty). */
#include "fuzz_common.h"
#include "mt_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *z = memchr(data, 0, size);
    size_t nv = z ? (size_t)(z - data) : size;
    char vocab[256];
    snprintf(vocab, sizeof vocab, "%s", fuzz_file("vocab.json", data, nv));
    const char *merges = fuzz_file("merges.txt", z ? z + 1 : data + size, z ? size - nv - 1 : 0);
    MtBpe *b = NULL;
    if (mt_bpe_read_vocab_merges(vocab, merges, &b) == MT_OK)
        mt_bpe_free(b);
    return 0;
}
