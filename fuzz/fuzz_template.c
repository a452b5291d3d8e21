/*
 * fuzz_template.c - libFuzzer harness: the input is a chat template, FUZZ_SEP,
 * then the messages JSON (an empty second part renders with one user
 * message). The template is compiled and rendered with
 * add_generation_prompt true and with a bos_token, as HF's
 * apply_chat_template passes them. Beyond ASan/UBSan: an error fills its
 * message, the output length matches the NUL-terminated text, and every byte
 * allocated is freed again.
 */
#include "fuzz_util.h"
#include "base/alloc.h"
#include "template/template.h"

static const char k_default_messages[] = "[{\"role\":\"user\",\"content\":\"Hi\"}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *a, *b;
    size_t na, nb;
    fuzz_split(data, size, &a, &na, &b, &nb);
    size_t base = xllm_allocated_bytes();
    char *messages = nb ? fuzz_cstr(b, nb) : fuzz_cstr((const uint8_t *)k_default_messages, strlen(k_default_messages));
    xllm_error err = {0};
    tpl_template *t = tpl_compile((const char *)a, na, &err);
    if (!t) {
        if (!err.code || !err.message[0]) abort();
    } else {
        char *out = NULL;
        size_t len = 0;
        xllm_status st = tpl_render(t, messages, "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}",
                                    "{\"add_generation_prompt\":true}", &out, &len, &err);
        if (st) {
            if (err.code != st || !err.message[0]) abort();
        } else {
            if (!out || out[len] != 0) abort();
            xllm_free(out);
        }
        tpl_free(t);
    }
    free(messages);
    if (xllm_allocated_bytes() != base) {
        fprintf(stderr, "fuzz: %zu bytes leaked through mem_malloc\n", xllm_allocated_bytes() - base);
        abort();
    }
    return 0;
}
