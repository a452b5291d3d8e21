/*
 * test_models.c - forward-pass conformance against an independent reference.
 *
 * For every tiny architecture (tests/data/tiny/<arch>): all 48 positions'
 * logits within 1e-3 of the float64 PyTorch reference, argmax equal at every
 * position, the 24-token greedy continuation equal; and for stories260k the
 * 200-token greedy continuation of "Once upon a time" (as prompt ids).
 */
#include "test.h"
#include "test_env.h"
#include "xllm.h"
#include "base/file.h"

#include <stdlib.h>
#include <string.h>

static int json_ids(const cJSON *arr, int32_t *out, int cap) {
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) if (n < cap) out[n++] = (int32_t)e->valuedouble;
    return n;
}

static void check_tiny(const char *arch) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/tests/data/tiny/%s", XLLM_SOURCE_DIR, arch);
    xllm_error err;
    xllm_model *m = xllm_model_load(dir, test_env_options(), &err);
    CHECK_MSG(m != NULL, "%s: %s", arch, err.message);
    if (!m) return;
    cJSON *exp;
    snprintf(path, sizeof path, "%s/expected.json", dir);
    CHECK(json_file_load(path, &exp, &err) == XLLM_OK);
    int32_t ids[64], argmax[64], greedy[32];
    int n = json_ids(cJSON_GetObjectItem(exp, "input_ids"), ids, 64);
    int na = json_ids(cJSON_GetObjectItem(exp, "argmax"), argmax, 64);
    int ng = json_ids(cJSON_GetObjectItem(exp, "greedy_24"), greedy, 32);
    CHECK(n == 48 && na == 48 && ng == 24);
    int V = xllm_model_vocab_size(m);
    float *logits = malloc(sizeof(float) * (size_t)n * (size_t)V);
    CHECK(xllm_model_logits(m, ids, (size_t)n, 1, logits, &err) == XLLM_OK);

    char *ref_raw;
    size_t ref_len;
    snprintf(path, sizeof path, "%s/logits_48x512.f32", dir);
    CHECK(file_read_all(path, &ref_raw, &ref_len, &err) == XLLM_OK);
    CHECK(ref_len == sizeof(float) * (size_t)n * (size_t)V);
    const float *ref = (const float *)ref_raw;
    double max_diff = 0;
    int argmax_ok = 1;
    for (int t = 0; t < n; t++) {
        int best = 0;
        for (int v = 0; v < V; v++) {
            double d = fabs((double)logits[t * V + v] - ref[t * V + v]);
            if (d > max_diff) max_diff = d;
            if (logits[t * V + v] > logits[t * V + best]) best = v;
        }
        if (best != argmax[t]) argmax_ok = 0;
    }
    CHECK_MSG(max_diff < 1e-3, "%s: max |logit diff| %g", arch, max_diff);
    CHECK_MSG(argmax_ok, "%s: argmax differs", arch);
    fprintf(stderr, "%-10s max |logit - ref| = %.3g\n", arch, max_diff);

    xllm_request req;
    memset(&req, 0, sizeof req);
    req.prompt_ids = ids;
    req.n_prompt_ids = (size_t)n;
    req.params = xllm_sampling_params_default();
    req.params.do_sample = 0;
    req.params.max_new_tokens = 24;
    req.params.ignore_eos = 1;
    xllm_result *res;
    CHECK(xllm_generate(m, &req, 1, NULL, NULL, &res, &err) == XLLM_OK);
    CHECK(res[0].n_ids == 24);
    int same = res[0].n_ids == 24;
    for (size_t i = 0; same && i < 24; i++) same = res[0].ids[i] == greedy[i];
    CHECK_MSG(same, "%s: greedy_24 differs", arch);
    xllm_results_free(res, 1);
    xllm_free(ref_raw);
    free(logits);
    cJSON_Delete(exp);
    xllm_model_free(m);
}

static void check_stories(void) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/models/stories260k", XLLM_SOURCE_DIR);
    xllm_error err;
    xllm_model *m = xllm_model_load(dir, test_env_options(), &err);
    CHECK_MSG(m != NULL, "%s", err.message);
    if (!m) return;
    cJSON *exp;
    snprintf(path, sizeof path, "%s/expected.json", dir);
    CHECK(json_file_load(path, &exp, &err) == XLLM_OK);
    int32_t prompt[8], want[256];
    int np = json_ids(cJSON_GetObjectItem(exp, "prompt_ids"), prompt, 8);
    int nw = json_ids(cJSON_GetObjectItem(exp, "prompt_greedy_200_ids"), want, 256);
    CHECK(np == 5 && nw == 200);
    xllm_request req;
    memset(&req, 0, sizeof req);
    req.prompt_ids = prompt;
    req.n_prompt_ids = (size_t)np;
    req.params = xllm_sampling_params_default();
    req.params.temperature = 0;
    req.params.max_new_tokens = 200;
    xllm_result *res;
    CHECK(xllm_generate(m, &req, 1, NULL, NULL, &res, &err) == XLLM_OK);
    int same = res[0].n_ids == (size_t)nw;
    for (int i = 0; same && i < nw; i++) same = res[0].ids[i] == want[i];
    CHECK_MSG(same, "stories260k greedy 200 differs (got %zu ids)", res[0].n_ids);
    xllm_results_free(res, 1);
    cJSON_Delete(exp);
    xllm_model_free(m);
}

/* 8 different prompts generated in one call give exactly the tokens each
 * gives alone (greedy), for a dense and a MoE model; also with a small step
 * budget so prefill is chunked and mixed with decode. */
static void check_batch_equivalence(const char *rel, int max_seqs, int step_tokens) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", XLLM_SOURCE_DIR, rel);
    xllm_error err;
    xllm_model_options o = *test_env_options();
    o.max_batch_seqs = max_seqs;
    o.max_step_tokens = step_tokens;
    xllm_model *m = xllm_model_load(dir, &o, &err);
    CHECK_MSG(m != NULL, "%s", err.message);
    if (!m) return;
    enum { N = 8 };
    int32_t prompts[N][40];
    xllm_request reqs[N];
    unsigned seed = 12345;
    for (int i = 0; i < N; i++) {
        int len = 1 + i * 5;
        prompts[i][0] = 1;
        for (int k = 1; k < len; k++) {
            seed = seed * 1103515245u + 12345u;
            prompts[i][k] = 3 + (int32_t)((seed >> 8) % 500);
        }
        memset(&reqs[i], 0, sizeof reqs[i]);
        reqs[i].prompt_ids = prompts[i];
        reqs[i].n_prompt_ids = (size_t)len;
        reqs[i].params = xllm_sampling_params_default();
        reqs[i].params.do_sample = 0;
        reqs[i].params.max_new_tokens = 10 + 3 * i;
        reqs[i].params.ignore_eos = 1;
    }
    xllm_result *batch, *alone;
    CHECK(xllm_generate(m, reqs, N, NULL, NULL, &batch, &err) == XLLM_OK);
    for (int i = 0; i < N; i++) {
        CHECK(xllm_generate(m, &reqs[i], 1, NULL, NULL, &alone, &err) == XLLM_OK);
        int same = alone[0].n_ids == batch[i].n_ids && batch[i].n_ids == (size_t)(10 + 3 * i);
        for (size_t k = 0; same && k < alone[0].n_ids; k++) same = alone[0].ids[k] == batch[i].ids[k];
        CHECK_MSG(same, "%s: request %d differs between batched and alone", rel, i);
        xllm_results_free(alone, 1);
    }
    xllm_results_free(batch, N);
    xllm_model_free(m);
}

/* The two attention strategies (per (token, head) item, and split-KV across
 * threads) fold the same chunk partials in the same order: bit-identical
 * logits, here over 300 positions one token per step (decode-shaped). */
static void check_attention_strategies(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/models/stories260k", XLLM_SOURCE_DIR);
    int32_t ids[300];
    for (int i = 0; i < 300; i++) ids[i] = i ? 3 + (i * 37) % 500 : 1;
    float *out[2];
    const char *modes[2] = {"per-item", "split"};
    for (int k = 0; k < 2; k++) {
        setenv("XLLM_ATTN", modes[k], 1);
        xllm_error err;
        xllm_model_options o = *test_env_options();
        o.max_step_tokens = 1;
        o.max_batch_seqs = 1;
        o.n_threads = 2;
        xllm_model *m = xllm_model_load(dir, &o, &err);
        CHECK_MSG(m != NULL, "%s", err.message);
        if (!m) return;
        out[k] = malloc(sizeof(float) * 300 * 512);
        CHECK(xllm_model_logits(m, ids, 300, 1, out[k], &err) == XLLM_OK);
        xllm_model_free(m);
    }
    unsetenv("XLLM_ATTN");
    CHECK_MSG(memcmp(out[0], out[1], sizeof(float) * 300 * 512) == 0, "split-KV attention differs from per-item");
    free(out[0]);
    free(out[1]);
}

int main(void) {
    const char *archs[] = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"};
    for (size_t i = 0; i < sizeof archs / sizeof *archs; i++) check_tiny(archs[i]);
    check_stories();
    check_attention_strategies();
    check_batch_equivalence("models/stories260k", 0, 0);
    check_batch_equivalence("models/stories260k", 3, 7); /* chunked prefill mixed with decode */
    check_batch_equivalence("tests/data/tiny/qwen2_moe", 0, 0);
    check_batch_equivalence("tests/data/tiny/qwen2_moe", 5, 9);
    check_batch_equivalence("tests/data/tiny/mistral", 4, 11);
    return test_report("test_models");
}
