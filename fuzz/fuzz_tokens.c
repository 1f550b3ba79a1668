/* The token-file reader (train.bin, val.bin). */
#include "fuzz_common.h"
#include "mt_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    MtTokens t;
    if (mt_tokens_read(fuzz_file("train.bin", data, size), &t) == MT_OK)
        mt_tokens_free(&t);
    return 0;
}
