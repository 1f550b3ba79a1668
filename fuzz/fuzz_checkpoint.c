/* The checkpoint readers: the first byte picks config.json (even) or trainer_state.json
 * (odd), the rest is that file; then the config's shape check against a model.safetensors
 * that does not exist must fail cleanly. */
#include "fuzz_common.h"
#include "mt_checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *name = data[0] & 1 ? "trainer_state.json" : "config.json";
    fuzz_file(name, data + 1, size - 1);
    if (data[0] & 1) {
        MtTrainState ts;
        mt_ckpt_read_state(fuzz_dir(), &ts);
    } else {
        MtConfig cfg;
        if (mt_ckpt_read_config(fuzz_dir(), &cfg) == MT_OK && mt_ckpt_check_shapes(fuzz_dir(), &cfg, 0) == MT_OK)
            abort(); /* there is no model.safetensors */
    }
    char path[160];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    remove(path);
    return 0;
}
