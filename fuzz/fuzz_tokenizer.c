/*
 * fuzz_tokenizer.c - libFuzzer harness: the input is tokenizer.json, FUZZ_SEP,
 * then a text. The tokenizer is loaded from the text of the first part; the
 * second is encoded (with and without special tokens), the ids decoded back
 * (plain and skipping specials) and streamed through the incremental
 * detokenizer; the text's bytes, read as ids, are decoded too (out-of-range
 * ids must be an error, not a read).
 */
#include "fuzz_util.h"
#include "base/alloc.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *a, *b;
    size_t na, nb;
    fuzz_split(data, size, &a, &na, &b, &nb);
    size_t base = xllm_allocated_bytes();
    xllm_error err = {0};
    tokenizer *t = tokenizer_load_text((const char *)a, na, NULL, 0, "fuzz", &err);
    if (!t) {
        if (!err.code || !err.message[0]) abort();
    } else {
        int32_t vocab = tokenizer_vocab_size(t);
        for (int special = 0; special < 2; special++) {
            int32_t *ids = NULL;
            size_t n = 0;
            if (tokenizer_encode(t, (const char *)b, nb, special, &ids, &n, &err)) continue;
            for (size_t i = 0; i < n; i++)
                if (ids[i] < 0 || ids[i] >= vocab) abort(); /* an id the model cannot look up */
            char *text = NULL;
            size_t len = 0;
            if (!tokenizer_decode(t, ids, n, special, &text, &len, &err)) xllm_free(text);
            detok_stream *s = detok_stream_new(t, special);
            if (s) {
                const char *out;
                size_t out_len;
                for (size_t i = 0; i < n; i++)
                    if (detok_stream_push(s, ids[i], &out, &out_len, &err)) break;
                detok_stream_flush(s, &out, &out_len, &err);
                detok_stream_free(s);
            }
            xllm_free(ids);
        }
        size_t nid = nb / 4;
        if (nid) {
            int32_t *raw = mem_malloc_array(nid, sizeof *raw);
            if (raw) {
                memcpy(raw, b, nid * sizeof *raw);
                char *text = NULL;
                size_t len = 0;
                if (!tokenizer_decode(t, raw, nid, 1, &text, &len, &err)) xllm_free(text);
                xllm_free(raw);
            }
        }
        tokenizer_free(t);
    }
    if (xllm_allocated_bytes() != base) {
        fprintf(stderr, "fuzz: %zu bytes leaked through mem_malloc\n", xllm_allocated_bytes() - base);
        abort();
    }
    return 0;
}
