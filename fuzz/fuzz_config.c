/*
 * fuzz_config.c - libFuzzer harness for xllm_config_load: the input is the
 * YAML config file. Beyond ASan/UBSan it checks the contract: a failure fills
 * err with its code and a message naming the file and leaves the options as
 * they were; a success gives knowledge entries with a name and a text path,
 * strings that lie in *storage; and every byte allocated is freed again.
 *
 * It needs only libxllm (or just src/api/config_api.c, src/base/alloc.c and
 * src/base/error.c) and libyaml, e.g.
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Iinclude -Isrc fuzz/fuzz_config.c \
 *     src/api/config_api.c src/base/alloc.c src/base/error.c $(pkg-config --cflags --libs yaml-0.1) -o fuzz_config
 *   ./fuzz_config -dict=fuzz/dict/config.dict -max_len=4096 fuzz/corpus/config
 */
#include "xllm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *input_path(void) {
    static char path[256];
    if (!path[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        char dir[200];
        snprintf(dir, sizeof dir, "%s/xllm-fuzz-config-XXXXXX", base);
        if (!mkdtemp(dir)) abort();
        snprintf(path, sizeof path, "%s/engine.yaml", dir);
    }
    return path;
}

static int in_block(const char *s, const char *block, size_t len) {
    return s && s >= block && s < block + len && strlen(s) < (size_t)(block + len - s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = input_path();
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);

    size_t base = xllm_allocated_bytes();
    xllm_engine_options e, e0;
    xllm_model_options m, m0;
    memset(&e, 0, sizeof e);
    memset(&m, 0, sizeof m);
    e.max_batch_size = 7;
    m.n_threads = 3;
    e0 = e;
    m0 = m;
    const char *model = NULL;
    void *storage = NULL;
    xllm_error err;
    xllm_status st = xllm_config_load(path, &e, &m, &model, &storage, &err);
    if (st) {
        if (err.code != st || strncmp(err.message, path, strlen(path)) != 0) {
            fprintf(stderr, "fuzz: bad error report: %d '%s'\n", err.code, err.message);
            abort();
        }
        if (st != XLLM_ERR_INVALID_ARGUMENT && st != XLLM_ERR_FORMAT && st != XLLM_ERR_OUT_OF_MEMORY) abort();
        if (storage || memcmp(&e, &e0, sizeof e) || memcmp(&m, &m0, sizeof m)) abort();
    } else {
        /* the bytes of the string block: up to the end of the last string */
        size_t len = 0;
        const char *block = storage;
        const char *strs[1 + 3 * XLLM_MAX_KNOWLEDGE];
        int n = 0;
        if (model) strs[n++] = model;
        if (e.n_knowledge < 0 || e.n_knowledge > XLLM_MAX_KNOWLEDGE) abort();
        for (int i = 0; i < e.n_knowledge; i++) {
            if (!e.knowledge_name[i] || !e.knowledge_name[i][0] || !e.knowledge_path[i] || !e.knowledge_path[i][0])
                abort();
            strs[n++] = e.knowledge_name[i];
            strs[n++] = e.knowledge_path[i];
            if (e.knowledge_kv_path[i]) strs[n++] = e.knowledge_kv_path[i];
        }
        for (int i = 0; i < n; i++) {
            if (!block) abort();
            size_t end = (size_t)(strs[i] - block) + strlen(strs[i]) + 1;
            if (end > len) len = end;
        }
        for (int i = 0; i < n; i++)
            if (!in_block(strs[i], block, len)) abort();
        if (e.timeout_ms < 0 || e.timeout_ms > 60000 || e.max_batch_size < 1 || e.max_batch_size > 4096) abort();
        xllm_free(storage);
    }
    if (xllm_allocated_bytes() != base) {
        fprintf(stderr, "fuzz: %zu bytes leaked through mem_malloc\n", xllm_allocated_bytes() - base);
        abort();
    }
    return 0;
}
