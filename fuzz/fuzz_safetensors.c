/*
 * fuzz_safetensors.c - libFuzzer harness: the input is config.json, FUZZ_SEP,
 * then model.safetensors; both are written into a checkpoint directory that
 * is loaded as a model (fuzz_model.h).
 */
#include "fuzz_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *a, *b;
    size_t na, nb;
    fuzz_split(data, size, &a, &na, &b, &nb);
    char path[512];
    fuzz_write("config.json", a, na, path, sizeof path);
    fuzz_write("model.safetensors", b, nb, path, sizeof path);
    fuzz_load_model(fuzz_dir());
    return 0;
}
