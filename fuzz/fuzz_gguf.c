/* fuzz_gguf.c - libFuzzer harness: the input is a GGUF file, loaded as a model (fuzz_model.h). */
#include "fuzz_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[512];
    fuzz_write("m.gguf", data, size, path, sizeof path);
    fuzz_load_model(path);
    return 0;
}
