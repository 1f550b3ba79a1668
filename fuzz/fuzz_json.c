/* The JSON parser (config.json, trainer_state.json, safetensors headers) on any bytes. */
#include "fuzz_common.h"
#include "mt_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    MtJson *j = NULL;
    if (mt_json_parse((const char *)data, size, &j) == MT_OK) {
        int64_t x;
        mt_json_i64(j, &x); /* exercised on every parsed value type */
        mt_json_free(j);
    }
    return 0;
}
