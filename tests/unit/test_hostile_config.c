/*
 * test_hostile_config.c - config.json values an adversary (or a careless
 * edit) might write: each must be refused with an error naming the field,
 * never cast out of range (float -> int conversion of 1e20 is undefined
 * behaviour; clang's UBSan checks it) or accepted into NaN logits, dropped
 * layers or a silently tied head.
 *
 * model_config_parse cases edit the tiny llama config one field at a time;
 * model_load cases put an edited config next to the tiny checkpoints'
 * weights (symlinked) in a temporary directory.
 */
#include "test.h"
#include "base/alloc.h"
#include "model/model.h"
#include "model/model_config.h"
#include "format/safetensors.h"
#include "xllm.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static cJSON *load_json(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return cJSON_Parse(buf);
}

/* Parse the family's config with key set to the JSON value (NULL: removed). */
static void parse_case(const char *family, const char *key, const char *value, const char *want_err) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/tiny/%s/config.json", XLLM_SOURCE_DIR, family);
    cJSON *root = load_json(path);
    CHECK(root != NULL);
    if (!root) return;
    cJSON_DeleteItemFromObjectCaseSensitive(root, key);
    if (value) cJSON_AddItemToObject(root, key, cJSON_Parse(value));
    model_config cfg;
    xllm_error err = {0};
    xllm_status st = model_config_parse(root, NULL, "config.json", "generation_config.json", &cfg, &err);
    if (want_err)
        CHECK_MSG(st && strstr(err.message, want_err), "%s %s=%s: want error with \"%s\", got %s", family, key,
                  value ? value : "(none)", want_err, st ? err.message : "success");
    else
        CHECK_MSG(!st, "%s %s=%s: %s", family, key, value ? value : "(none)", err.message);
    fprintf(stderr, "  %-9s %-22s %-14s %s\n", family, key, value ? value : "(none)", st ? err.message : "ok");
    cJSON_Delete(root);
}

/* model_load of family's weights with the config edited. */
static void load_case(const char *family, const char *key, const char *value, const char *want_err) {
    char src[512], dir[] = "/tmp/xllm-hostile-cfg-XXXXXX", path[600], target[600];
    if (!mkdtemp(dir)) { CHECK(0); return; }
    snprintf(src, sizeof src, "%s/tests/data/tiny/%s", XLLM_SOURCE_DIR, family);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(target, sizeof target, "%s/model.safetensors", src);
    CHECK(symlink(target, path) == 0);
    snprintf(path, sizeof path, "%s/config.json", src);
    cJSON *root = load_json(path);
    cJSON_DeleteItemFromObjectCaseSensitive(root, key);
    if (value) cJSON_AddItemToObject(root, key, cJSON_Parse(value));
    char *text = cJSON_Print(root);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
    free(text);
    cJSON_Delete(root);
    size_t base = xllm_allocated_bytes();
    xllm_error err = {0};
    model *m = model_load(dir, 1, 8, &err);
    if (want_err)
        CHECK_MSG(!m && strstr(err.message, want_err), "load %s %s=%s: want error with \"%s\", got %s", family, key,
                  value ? value : "(none)", want_err, m ? "a model" : err.message);
    else
        CHECK_MSG(m != NULL, "load %s %s=%s: %s", family, key, value ? value : "(none)", err.message);
    fprintf(stderr, "  load %-9s %-22s %-8s %s\n", family, key, value ? value : "(none)", m ? "ok" : err.message);
    model_free(m);
    CHECK_MSG(xllm_allocated_bytes() == base, "load %s %s: leaked", family, key);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
}

/* A NUL inside a JSON string would cut a name or a template short (cJSON's
 * strings end there): refused in config.json, a safetensors header and
 * tokenizer_config.json. */
static void write_text(const char *path, const char *text, size_t len) {
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, len, f);
    fclose(f);
}

static void nul_cases(void) {
    char dir[] = "/tmp/xllm-hostile-nul-XXXXXX", path[600];
    if (!mkdtemp(dir)) { CHECK(0); return; }
    size_t base = xllm_allocated_bytes();
    /* config.json */
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *cfg = "{\"model_type\": \"llama\\u0000evil\", \"hidden_size\": 8}";
    write_text(path, cfg, strlen(cfg));
    model_config mc;
    xllm_error err = {0};
    CHECK_MSG(model_config_load(dir, &mc, &err) && strstr(err.message, "NUL"), "config: %s", err.message);
    /* a safetensors header whose tensor name hides a NUL */
    const char *hdr = "{\"model.norm.weight\\u0000x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}";
    size_t hl = strlen(hdr), pad = (8 - hl % 8) % 8;
    unsigned char st[512] = {0};
    uint64_t n = hl + pad;
    memcpy(st, &n, 8);
    memcpy(st + 8, hdr, hl);
    memset(st + 8 + hl, ' ', pad);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_text(path, (const char *)st, 8 + n + 4);
    err.message[0] = 0;
    st_archive *a = st_open(path, &err);
    CHECK_MSG(!a && strstr(err.message, "NUL"), "safetensors: %s", a ? "opened" : err.message);
    st_close(a);
    unlink(path);
    /* a chat template with a NUL in it */
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    const char *tc = "{\"chat_template\": \"{{ 'a' }}\\u0000{{ raise_exception('hidden') }}\"}";
    write_text(path, tc, strlen(tc));
    err.message[0] = 0;
    xllm_chat_template *t = xllm_chat_template_load(dir, &err);
    CHECK_MSG(!t && strstr(err.message, "NUL"), "template: %s", t ? "loaded" : err.message);
    xllm_chat_template_free(t);
    fprintf(stderr, "  NUL in config.json, safetensors names, chat template: refused\n");
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
    CHECK(xllm_allocated_bytes() == base);
}

int main(void) {
    nul_cases();
    setenv("XLLM_PLAN", "0", 1);
    parse_case("llama", "eos_token_id", "2", NULL);
    parse_case("llama", "eos_token_id", "1e20", "eos_token_id");
    parse_case("llama", "eos_token_id", "-1e20", "eos_token_id");
    parse_case("llama", "eos_token_id", "2.5", "eos_token_id");
    parse_case("llama", "eos_token_id", "-3", "eos_token_id");
    parse_case("llama", "eos_token_id", "[2, 1e20]", "eos_token_id");
    parse_case("llama", "eos_token_id", "[2, \"x\"]", "eos_token_id");
    parse_case("llama", "bos_token_id", "1e20", "bos_token_id");
    parse_case("llama", "bos_token_id", "1.5", "bos_token_id");
    parse_case("llama", "hidden_size", "1e20", "hidden_size");
    parse_case("llama", "hidden_size", "-64", "hidden_size");
    parse_case("llama", "num_hidden_layers", "1e300", "num_hidden_layers");
    parse_case("llama", "vocab_size", "64.5", "vocab_size");
    parse_case("llama", "max_position_embeddings", "1e20", "max_position_embeddings");
    parse_case("llama", "rope_theta", "0", "rope_theta");
    parse_case("llama", "rope_theta", "-10000", "rope_theta");
    parse_case("llama", "rope_theta", "1e999", "rope_theta"); /* cJSON reads inf */
    parse_case("llama", "rms_norm_eps", "0", "rms_norm_eps");
    parse_case("llama", "rms_norm_eps", "-1e-5", "rms_norm_eps");
    parse_case("llama", "rms_norm_eps", "1e30", "rms_norm_eps");
    parse_case("llama", "rms_norm_eps", "1e-50", "rms_norm_eps"); /* 0 as a float */
    parse_case("llama", "rms_norm_eps", "\"1e-5\"", "rms_norm_eps");
    parse_case("llama", "sliding_window", "-1", "sliding_window");
    parse_case("llama", "rope_scaling", "{\"rope_type\": \"linear\", \"factor\": 0}", "factor");
    parse_case("llama", "rope_scaling", "{\"rope_type\": \"linear\", \"factor\": -2}", "factor");
    parse_case("llama", "rope_scaling", "{\"rope_type\": \"linear\", \"factor\": 1e999}", "factor");
    parse_case("llama", "tie_word_embeddings", "1", "tie_word_embeddings");
    parse_case("qwen2_moe", "mlp_only_layers", "[0]", NULL);
    parse_case("qwen2_moe", "mlp_only_layers", "[0.5]", "mlp_only_layers");
    parse_case("qwen2_moe", "mlp_only_layers", "[1e20]", "mlp_only_layers");
    parse_case("qwen2_moe", "num_experts_per_tok", "1e20", "num_experts_per_tok");
    parse_case("qwen2_moe", "decoder_sparse_step", "0", "decoder_sparse_step");
    parse_case("mixtral", "num_local_experts", "2.5", "num_local_experts");

    load_case("llama", "num_hidden_layers", NULL, "num_hidden_layers"); /* required */
    load_case("llama", "num_hidden_layers", "2", NULL);
    load_case("llama", "num_hidden_layers", "1", "beyond num_hidden_layers");
    load_case("llama", "num_hidden_layers", "3", "model.layers.2");     /* missing tensors */
    load_case("qwen2", "tie_word_embeddings", "false", "no lm_head");   /* qwen2 tiny is tied */
    load_case("qwen2", "tie_word_embeddings", NULL, NULL);              /* not said: tied */
    load_case("llama", "tie_word_embeddings", NULL, NULL);              /* not said, has lm_head: used */
    return test_report("test_hostile_config");
}
