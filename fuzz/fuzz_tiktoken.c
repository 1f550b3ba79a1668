/* The tiktoken rank-file reader (meshtrain tokenizer --tokenizer). */
#include "fuzz_common.h"
#include "mt_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    MtBpe *b = NULL;
    if (mt_bpe_read_tiktoken(fuzz_file("v.tiktoken", data, size), 1, &b) == MT_OK)
        mt_bpe_free(b);
    return 0;
}
