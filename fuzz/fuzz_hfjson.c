/* Hugging Face's tokenizer.json reader (meshtrain tokenizer --tokenizer, import --from). */
#include "fuzz_common.h"
#include "mt_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    MtBpe *b = NULL;
    if (mt_bpe_read_hf(fuzz_file("tokenizer.json", data, size), &b) == MT_OK)
        mt_bpe_free(b);
    return 0;
}
