/*
 * test_fixture.h - the pieces the fixture-comparison tests share
 * (test_arch_models, test_yarn_models, test_kquant_models): each loads a model,
 * runs the fixture's prompts and compares the log-probabilities and greedy
 * tokens with llama-server's stored ones. Here: the log-softmax, the prompt's
 * ids from the JSON, the model options (ours or llama.cpp's arithmetic), a
 * greedy continuation and its comparison with the stored
 * tokens. The tolerances and what is compared stay in each test.
 *
 * Header-only (static inline, like test_env.h); failures go through test.h's
 * CHECK. Not thread-safe: test.h's counters are plain globals.
 */
#ifndef XLLM_TEST_FIXTURE_H
#define XLLM_TEST_FIXTURE_H

#include "test.h"
#include "xllm.h"
#include "base/file.h" /* cJSON */

#include <math.h>
#include <stdint.h>
#include <string.h>

/* x[0..n) := log softmax(x), summed in double. */
static inline void fixture_log_softmax(float *x, int n) {
    double mx = x[0];
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double s = 0;
    for (int i = 0; i < n; i++) s += exp((double)x[i] - mx);
    double l = mx + log(s);
    for (int i = 0; i < n; i++) x[i] = (float)((double)x[i] - l);
}

/* The token ids of a JSON array into ids (at most cap); returns how many. */
static inline int fixture_ids(const cJSON *arr, int32_t *ids, int cap) {
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) if (n < cap) ids[n++] = (int32_t)e->valuedouble;
    return n;
}

/* Loads path with 2 threads and no planner; llama: llama.cpp's arithmetic
 * and its f16 KV cache. A failure is a CHECK failure naming name; NULL then. */
static inline xllm_model *fixture_load(const char *path, int llama, const char *name) {
    xllm_model_options o = xllm_model_options_default();
    o.n_threads = 2;
    o.no_plan = 1;
    if (llama) o.arithmetic = "llama", o.kv_dtype = "f16";
    xllm_error err;
    xllm_model *m = xllm_model_load(path, &o, &err);
    CHECK_MSG(m != NULL, "%s: %s", name, err.message);
    return m;
}

/* The prompt's "ids" (at most cap) into ids and the log-probabilities of
 * its last position (vocab V) into lp; returns the prompt's length. A failed
 * forward is a CHECK failure. */
static inline int fixture_prompt_logprobs(xllm_model *m, const cJSON *prompt, int32_t *ids, int cap, float *lp, int V) {
    int n = fixture_ids(cJSON_GetObjectItem(prompt, "ids"), ids, cap);
    xllm_error err;
    CHECK(xllm_model_logits(m, ids, (size_t)n, 0, lp, &err) == XLLM_OK);
    fixture_log_softmax(lp, V);
    return n;
}

/* The greedy continuation of ids[0..n): max_new tokens, not stopping at eos.
 * NULL (and a CHECK failure) when generation fails; free with
 * xllm_results_free(res, 1). */
static inline xllm_result *fixture_greedy(xllm_model *m, const int32_t *ids, int n, int max_new) {
    xllm_request r = {.prompt_ids = ids, .n_prompt_ids = (size_t)n, .params = xllm_sampling_params_default()};
    r.params.do_sample = 0, r.params.max_new_tokens = max_new, r.params.ignore_eos = 1;
    xllm_result *res = NULL;
    xllm_error err;
    CHECK(xllm_generate(m, &r, 1, NULL, NULL, &res, &err) == XLLM_OK);
    return res;
}

/* Whether res holds exactly the n tokens of want. eos >= 0: llama-server's
 * ignore_eos masks the eos token, ours only does not stop at it, so where
 * ours is eos and want's is not, agreeing up to there is agreeing. */
static inline int fixture_greedy_agrees(const xllm_result *res, const cJSON *want, int n, int eos) {
    int same = res->n_ids == (size_t)n;
    for (int i = 0; same && i < n; i++) {
        int32_t w = (int32_t)cJSON_GetArrayItem(want, i)->valuedouble;
        if (eos >= 0 && res->ids[i] == eos && w != eos) break;
        same = res->ids[i] == w;
    }
    return same;
}

/* fixture_greedy of nw tokens compared with want's first nw (eos: as
 * fixture_greedy_agrees): 1 agrees, 0 differs, -1 generation failed (a CHECK
 * failure already). */
static inline int fixture_greedy_matches(xllm_model *m, const int32_t *ids, int n, const cJSON *want, int nw, int eos) {
    xllm_result *res = fixture_greedy(m, ids, n, nw);
    if (!res) return -1;
    int same = fixture_greedy_agrees(res, want, nw, eos);
    xllm_results_free(res, 1);
    return same;
}

#endif
