/*
 * test_alloc_fail.c - allocation-failure testing, as SQLite does it: for each
 * operation, make allocation 1, 2, 3, ... fail (mem_fail_at, once) and
 * require every run to end cleanly: either XLLM_ERR_OUT_OF_MEMORY with a
 * message, or success with the same result as without the failure (code that
 * can do without a cache may); never a crash (ASan), never a leak (bytes back
 * to where they were). N walks until the operation needs fewer allocations.
 * cJSON is pointed at mem_malloc here so its allocations fail too.
 *
 * Operations: tokenizer load (+ encode + decode), chat template load (+
 * render), model load (HF directory), the public load of a GGUF file
 * (tests/data/gguf: reader, config from metadata, the tokenizer synthesized
 * from its vocabulary, engine) and of an .xllm file (converted from the tiny
 * llama checkpoint at the start, without failures; verified reader, blobs,
 * its tokenizer, engine), and one generation (public API: xllm_generate on a
 * loaded model).
 */
#include "test.h"
#include "test_env.h"
#include "base/alloc.h"
#include "base/error.h"
#include "model/model.h"
#include "template/template.h"
#include "tokenizer/tokenizer.h"
#include "xllm.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *hook_malloc(size_t n) { return mem_malloc(n); }
static void hook_free(void *p) { xllm_free(p); }

#define TINY XLLM_SOURCE_DIR "/tests/data/tiny/llama"

typedef xllm_status (*op_fn)(char **result, xllm_error *err); /* result: a malloc-ed digest to compare */

/* Walk N over op; returns the number of allocations op makes. */
static long walk(const char *name, op_fn op, int lasting) {
    xllm_error err = {0};
    char *want = NULL;
    size_t base = xllm_allocated_bytes();
    mem_fail_at(0);
    xllm_status st = op(&want, &err);
    CHECK_MSG(!st, "%s without failures: %s", name, err.message);
    if (!lasting)
        CHECK_MSG(xllm_allocated_bytes() == base, "%s without failures leaked %zu bytes", name,
                  xllm_allocated_bytes() - base);
    base = xllm_allocated_bytes(); /* a model keeps scratch made on first use (attention tiles) */
    long n, oom = 0, ok = 0;
    for (n = 1;; n++) {
        char *got = NULL;
        memset(&err, 0, sizeof err);
        mem_fail_at(n);
        st = op(&got, &err);
        int hit = mem_fail_happened();
        mem_fail_at(0);
        CHECK_MSG(xllm_allocated_bytes() == base, "%s, allocation %ld failing: %zu bytes leaked (%s)", name, n,
                  xllm_allocated_bytes() - base, st ? err.message : "success");
        if (st) {
            CHECK_MSG(st == XLLM_ERR_OUT_OF_MEMORY && err.message[0], "%s, allocation %ld failing: status %d \"%s\"",
                      name, n, (int)st, err.message);
            oom++;
        } else {
            CHECK_MSG(want && got && !strcmp(want, got), "%s, allocation %ld failing: success with another result",
                      name, n);
            ok++;
        }
        free(got);
        if (!hit) break;
        if (g_test_failures > 50) break; /* enough said */
    }
    fprintf(stderr, "  %-22s %5ld allocations walked: %ld out-of-memory errors, %ld recovered\n", name, n - 1, oom,
            ok - 1);
    free(want);
    return n - 1;
}

/* ------------------------------------------------------------ operations */

static xllm_status op_tokenizer(char **result, xllm_error *err) {
    tokenizer *t = tokenizer_load(TINY, err);
    if (!t) return err->code;
    int32_t *ids = NULL;
    size_t n = 0;
    char *text = NULL;
    size_t len = 0;
    xllm_status st = tokenizer_encode(t, "Once upon a time, there was a cat.", 34, 1, &ids, &n, err);
    if (!st) st = tokenizer_decode(t, ids, n, 0, &text, &len, err);
    if (!st) {
        *result = malloc(len + 64);
        snprintf(*result, len + 64, "%zu:%s", n, text);
    }
    xllm_free(ids);
    xllm_free(text);
    tokenizer_free(t);
    return st;
}

static xllm_status op_template(char **result, xllm_error *err) {
    xllm_chat_template *t = xllm_chat_template_load(XLLM_SOURCE_DIR "/tests/data/templates/qwen3", err);
    if (!t) return err->code;
    char *out = NULL;
    size_t len = 0;
    xllm_status st = xllm_chat_template_apply(
        t, NULL, "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi\"}, "
           "{\"role\": \"assistant\", \"content\": \"<think>\\nhm\\n</think>\\n\\nHello\"}, "
           "{\"role\": \"user\", \"content\": \"Again\"}]",
        "{\"add_generation_prompt\": true, \"enable_thinking\": false}", &out, &len, err);
    if (!st) *result = strdup(out);
    xllm_free(out);
    xllm_chat_template_free(t);
    return st;
}

static xllm_status op_model(char **result, xllm_error *err) {
    model *m = model_load(TINY, 1, 8, err);
    if (!m) return err->code;
    char buf[128];
    snprintf(buf, sizeof buf, "%d %d %g", m->cfg.n_layers, m->cfg.vocab, (double)m->final_norm[3]);
    *result = strdup(buf);
    model_free(m);
    return XLLM_OK;
}

/* xllm_model_load of a model file, then its tokenizer encoding a text */
static const char *g_file;
static xllm_status op_file(char **result, xllm_error *err) {
    xllm_model_options o = xllm_model_options_default();
    o.n_threads = 1;
    o.max_context = 64;
    o.max_batch_seqs = 2;
    xllm_model *m = xllm_model_load(g_file, &o, err);
    if (!m) return err->code;
    const xllm_tokenizer *t = xllm_model_tokenizer(m);
    int32_t *ids = NULL;
    size_t n = 0;
    xllm_status st = t ? xllm_tokenize(t, "Once upon a time", 16, 1, &ids, &n, err)
                       : err_setf(err, XLLM_ERR_INTERNAL, "%s: no tokenizer", g_file);
    if (!st) {
        char buf[256];
        int k = snprintf(buf, sizeof buf, "vocab %d ctx %d:", xllm_model_vocab_size(m), xllm_model_context_size(m));
        for (size_t i = 0; i < n && k < 200; i++) k += snprintf(buf + k, sizeof buf - (size_t)k, " %d", ids[i]);
        *result = strdup(buf);
    }
    xllm_free(ids);
    xllm_model_free(m);
    return st;
}

static xllm_model *g_model;

static xllm_status op_generate(char **result, xllm_error *err) {
    xllm_request r = {0};
    r.prompt = "Once upon a time";
    r.params = xllm_sampling_params_default();
    r.params.max_new_tokens = 4;
    r.params.do_sample = 0;
    xllm_result *res = NULL;
    xllm_status st = xllm_generate(g_model, &r, 1, NULL, NULL, &res, err);
    if (st) return st;
    char buf[256];
    int k = snprintf(buf, sizeof buf, "%zu:", res[0].n_ids);
    for (size_t i = 0; i < res[0].n_ids && k < 200; i++) k += snprintf(buf + k, sizeof buf - (size_t)k, " %d", res[0].ids[i]);
    *result = strdup(buf);
    xllm_results_free(res, 1);
    return XLLM_OK;
}

static int has(const char *want, int argc, char **argv) {
    if (argc < 2) return 1;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], want)) return 1;
    return 0;
}

int main(int argc, char **argv) {
    cJSON_Hooks hooks = {hook_malloc, hook_free};
    cJSON_InitHooks(&hooks);
    if (has("tokenizer", argc, argv)) walk("tokenizer load+encode", op_tokenizer, 0);
    if (has("template", argc, argv)) walk("template load+render", op_template, 0);
    if (has("model", argc, argv)) walk("model load", op_model, 0);
    if (has("gguf", argc, argv)) {
        g_file = XLLM_SOURCE_DIR "/tests/data/gguf/stories260k.gguf";
        walk("GGUF load+tokenize", op_file, 0);
    }
    if (has("xllm", argc, argv)) {
        char dir[] = "/tmp/xllm-alloc-fail-XXXXXX", path[64];
        CHECK(mkdtemp(dir) != NULL);
        snprintf(path, sizeof path, "%s/tiny.xllm", dir);
        xllm_error err = {0};
        xllm_convert_options co = xllm_convert_options_default();
        co.dtype = "q8";
        CHECK_MSG(xllm_convert(TINY, path, &co, &err) == XLLM_OK, "convert: %s", err.message);
        g_file = path;
        walk(".xllm load+tokenize", op_file, 0);
        unlink(path);
        rmdir(dir);
    }
    if (has("generate", argc, argv)) {
        xllm_error err = {0};
        xllm_model_options o = *test_env_options();
        o.n_threads = 1;
        g_model = xllm_model_load(TINY, &o, &err);
        CHECK_MSG(g_model != NULL, "%s", err.message);
        if (g_model) walk("generate (4 tokens)", op_generate, 1);
        xllm_model_free(g_model);
    }
    return test_report("test_alloc_fail");
}
