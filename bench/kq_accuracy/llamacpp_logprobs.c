/*
 * llamacpp_logprobs.c - llama.cpp's log-probabilities of the token after each
 * prompt, with its attention switches exposed, for the accuracy experiment of
 * issue 12 (bench/kq_accuracy/compare.py). Built against a llama.cpp build
 * outside this repository (compare.py's header says how); not part of xLLM.
 *
 *   llamacpp_logprobs MODEL.gguf PROMPTS.txt KTYPE VTYPE FA
 * PROMPTS.txt: one prompt a line, token ids separated by spaces (BOS first).
 * KTYPE / VTYPE: f16 or f32 (the KV cache's type); FA: 1 flash attention on
 * (llama-server's default on CPU), 0 off. Prints one line of V log-softmaxed
 * values per prompt. A fresh context per prompt, one thread, one batch.
 */
#include "llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPTS.txt f16|f32 f16|f32 0|1\n", argv[0]);
        return 2;
    }
    llama_backend_init();
    struct llama_model *m = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!m) return fprintf(stderr, "cannot load %s\n", argv[1]), 1;
    int V = llama_vocab_n_tokens(llama_model_get_vocab(m));
    FILE *f = fopen(argv[2], "r");
    if (!f) return fprintf(stderr, "cannot open %s\n", argv[2]), 1;
    static char line[1 << 16];
    static llama_token ids[4096];
    while (fgets(line, sizeof line, f)) {
        int n = 0;
        char *p = line, *e;
        for (long v; n < 4096 && (v = strtol(p, &e, 10), e != p); p = e) ids[n++] = (llama_token)v;
        if (!n) continue;
        struct llama_context_params cp = llama_context_default_params();
        cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)(n < 256 ? 256 : n);
        cp.n_threads = cp.n_threads_batch = 1;
        cp.type_k = strcmp(argv[3], "f32") ? GGML_TYPE_F16 : GGML_TYPE_F32;
        cp.type_v = strcmp(argv[4], "f32") ? GGML_TYPE_F16 : GGML_TYPE_F32;
        cp.flash_attn_type = atoi(argv[5]) ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
        struct llama_context *c = llama_init_from_model(m, cp);
        if (!c || llama_decode(c, llama_batch_get_one(ids, n))) return fprintf(stderr, "decode failed\n"), 1;
        const float *lg = llama_get_logits_ith(c, -1);
        double mx = lg[0], s = 0;
        for (int i = 1; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
        for (int i = 0; i < V; i++) s += exp(lg[i] - mx);
        for (int i = 0; i < V; i++) printf("%.6f%c", lg[i] - mx - log(s), i + 1 < V ? ' ' : '\n');
        llama_free(c);
    }
    fclose(f);
    llama_model_free(m);
    return 0;
}
