/*
 * model_api.c - the public model functions of xllm.h: option defaults, load
 * (config + weights + tokenizer + engine), logits and generate.
 *
 * A public xllm_model bundles the model, its tokenizer and one engine (KV pool
 * and step buffers). Calls on one xllm_model must not overlap; separate
 * models are independent.
 */
#include "xllm.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/file.h"
#include "engine/engine.h"
#include "engine/planner.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>

#include <stdlib.h>
#include <string.h>

struct xllm_model {
    model *m;
    tokenizer *tok;
    engine eng;
    char *plan_json;      /* the planner's report (NULL when XLLM_PLAN=0) */
};

#define DEFAULT_MAX_CONTEXT_CAP 8192
#define DEFAULT_KV_BYTES_CAP ((int64_t)1 << 30)
#define MAX_STEP_TOKENS 512
#define PLAN_BUDGET_MS 400

xllm_model_options xllm_model_options_default(void) {
    xllm_model_options o;
    memset(&o, 0, sizeof o);
    return o;
}

/* Fill zeros with defaults that fit this model. */
static void resolve_options(const model_config *c, xllm_model_options *o) {
    if (o->kv_block_size <= 0) o->kv_block_size = 16;
    if (o->max_batch_seqs <= 0) o->max_batch_seqs = 16;
    if (o->max_context <= 0) o->max_context = c->max_positions < DEFAULT_MAX_CONTEXT_CAP ? c->max_positions : DEFAULT_MAX_CONTEXT_CAP;
    if (o->kv_tokens <= 0) {
        int64_t per_token = (int64_t)2 * c->n_layers * c->n_kv_heads * c->head_dim * (int64_t)sizeof(float);
        int64_t want = (int64_t)o->max_context * o->max_batch_seqs;
        int64_t cap = DEFAULT_KV_BYTES_CAP / per_token;
        if (want > cap) want = cap;
        if (want < o->max_context) want = o->max_context;
        o->kv_tokens = want;
    }
}

xllm_model *xllm_model_load(const char *path, const xllm_model_options *opts, xllm_error *err) {
    xllm_error_clear(err);
    if (!path) {
        xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "model path is NULL");
        return NULL;
    }
    int is_dir = xllm_is_dir(path);
    if (!is_dir && !xllm_file_exists(path)) {
        xllm_errorf(err, XLLM_ERR_IO, "%s: no such model (expected a HuggingFace checkpoint directory or an .xllm file)",
                    path);
        return NULL;
    }
    xllm_model_options o = opts ? *opts : xllm_model_options_default();
    const char *prof = getenv("XLLM_PROFILE");
    if (prof && *prof && strcmp(prof, "0")) xllm_profile_enable(1);
    xllm_model *xm = xllm_calloc(1, sizeof *xm);
    if (!xm) {
        xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        return NULL;
    }
    if (o.max_step_tokens <= 0) o.max_step_tokens = MAX_STEP_TOKENS;
    xm->m = model_load(path, o.n_threads, o.max_step_tokens, err);
    if (!xm->m) goto fail;
    char tp[4096];
    xllm_path_join(tp, sizeof tp, path, "tokenizer.json");
    if (is_dir && xllm_file_exists(tp)) {
        xm->tok = tokenizer_load(path, err);
        if (!xm->tok) goto fail;
    } else if (!is_dir && xm->m->tok_json) {
        /* model files (.xllm, GGUF) carry their tokenizer */
        char label[4200];
        snprintf(label, sizeof label, "%s: tokenizer", path);
        xm->tok = tokenizer_load_text(xm->m->tok_json, xm->m->tok_json_len, xm->m->tok_config, xm->m->tok_config_len,
                                      label, err);
        if (!xm->tok) goto fail;
    }
    resolve_options(&xm->m->cfg, &o);
    if (o.max_batch_seqs > o.max_step_tokens) o.max_batch_seqs = o.max_step_tokens; /* one decode token each */
    if (engine_init(&xm->eng, xm->m, xm->tok, &o, err)) goto fail;
    const char *plan = getenv("XLLM_PLAN");
    if (!plan || strcmp(plan, "0")) {
        cJSON *report;
        if (planner_run(xm->m, PLAN_BUDGET_MS, &report, err)) goto fail;
        char *text = cJSON_PrintUnformatted(report);
        cJSON_Delete(report);
        xm->plan_json = text ? xllm_strdup(text) : NULL;
        free(text);
    }
    return xm;
fail:
    if (xm->tok) tokenizer_free(xm->tok);
    model_free(xm->m);
    xllm_free(xm);
    return NULL;
}

void xllm_model_free(xllm_model *xm) {
    if (!xm) return;
    xllm_free(xm->plan_json);
    engine_free(&xm->eng);
    if (xm->tok) tokenizer_free(xm->tok);
    model_free(xm->m);
    xllm_free(xm);
}

const xllm_tokenizer *xllm_model_tokenizer(const xllm_model *xm) { return (const xllm_tokenizer *)xm->tok; }
int32_t xllm_model_vocab_size(const xllm_model *xm) { return xm->m->cfg.vocab; }
int32_t xllm_model_context_size(const xllm_model *xm) { return xm->eng.max_context; }

xllm_status xllm_model_logits(xllm_model *xm, const int32_t *ids, size_t n_ids, int all_positions, float *out,
                              xllm_error *err) {
    xllm_error_clear(err);
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= xm->m->cfg.vocab)
            return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "token id %d at index %zu is outside the vocabulary (0..%d)",
                               ids[i], i, xm->m->cfg.vocab - 1);
    return engine_logits(&xm->eng, ids, n_ids, all_positions, out, err);
}

xllm_status xllm_generate(xllm_model *xm, const xllm_request *requests, size_t n, xllm_token_callback cb, void *user,
                          xllm_result **results, xllm_error *err) {
    xllm_error_clear(err);
    if (!results) return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "results is NULL");
    return engine_generate(&xm->eng, requests, n, cb, user, results, err);
}

xllm_status xllm_model_plan(const xllm_model *xm, char **json, xllm_error *err) {
    xllm_error_clear(err);
    *json = xllm_strdup(xm->plan_json ? xm->plan_json : "{\"planned\":false}");
    return *json ? XLLM_OK : xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
}
