/*
 * fuzz_model.h - the body shared by the model-file harnesses (GGUF, .xllm,
 * safetensors + config.json): load the file the way `xllm run` does
 * (model_load: container parse, config validation, tensor binding and shape
 * checks, repacking), then the tokenizer it carries. Invariants checked beyond
 * ASan/UBSan: a failure fills the error (code and message), a success leaves
 * it clear, and every byte allocated through mem_malloc is freed again.
 */
#ifndef XLLM_FUZZ_MODEL_H
#define XLLM_FUZZ_MODEL_H

#include "fuzz_util.h"
#include "base/alloc.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "xllm.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    setenv("XLLM_PLAN", "0", 1);   /* no load-time timing of kernels per input */
    return 0;
}

/* Load path as a model; returns nothing, aborts on a broken invariant. */
static void fuzz_load_model(const char *path) {
    size_t base = xllm_allocated_bytes();
    xllm_error err = {0};
    model *m = model_load(path, 1, 8, &err);
    if (!m) {
        if (!err.code || !err.message[0]) abort(); /* a failure must say why */
    } else {
        if (err.code) abort();
        if (m->tok_json) {
            xllm_error terr = {0};
            tokenizer *t = tokenizer_load_text(m->tok_json, m->tok_json_len, m->tok_config, m->tok_config_len, "fuzz",
                                               &terr);
            if (t) {
                int32_t *ids = NULL;
                size_t n = 0;
                if (!tokenizer_encode(t, "Hello world", 11, 1, &ids, &n, &terr)) {
                    char *text = NULL;
                    size_t len = 0;
                    if (!tokenizer_decode(t, ids, n, 0, &text, &len, &terr)) xllm_free(text);
                    xllm_free(ids);
                }
                tokenizer_free(t);
            } else if (!terr.code || !terr.message[0]) {
                abort();
            }
        }
        model_free(m);
    }
    if (xllm_allocated_bytes() != base) {
        fprintf(stderr, "fuzz: %zu bytes leaked through mem_malloc\n", xllm_allocated_bytes() - base);
        abort();
    }
}

#endif
