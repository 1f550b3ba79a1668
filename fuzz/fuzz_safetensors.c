/* The safetensors reader: the whole-file and the lazy open, and a read of each tensor. */
#include "fuzz_common.h"
#include "mt_safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file("model.safetensors", data, size);
    MtStFile f;
    if (mt_st_open(path, &f) == MT_OK)
        for (int i = 0; i < f.ntensors; i++)
            (void)mt_st_f32(&f, &f.tensors[i]);
    mt_st_close(&f);
    if (mt_st_open_lazy(path, &f) == MT_OK) {
        float x[4];
        for (int i = 0; i < f.ntensors; i++)
            if (f.tensors[i].numel > 0)
                mt_st_read(&f, &f.tensors[i], 0, f.tensors[i].numel < 4 ? f.tensors[i].numel : 4, x);
        (void)mt_st_meta(&f, "format");
    }
    mt_st_close(&f);
    return 0;
}
