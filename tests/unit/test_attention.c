/*
 * test_attention.c - the attention strategies (per (token, head) item,
 * split-KV, shared-KV) give bit-identical results, at every CPU kernel level
 * this machine runs (XLLM_CPU), for the tiny checkpoints of the 7
 * architectures (GQA, one KV head, sliding window 16 in mistral) and
 * stories260k:
 *  - all 300 positions' logits, forced per item in one 300-token prefill
 *    step (the reference), against shared-KV in one step, shared-KV in
 *    37-token chunks with 7-slot KV blocks and 3 threads (tiles cut at chunk,
 *    block and window boundaries), shared-KV one token per step (decode
 *    shaped), split-KV one token per step, and the planner's own choice;
 *  - greedy generation of a batch of prompts of different lengths, prefill
 *    chunked and mixed with decode, forced shared-KV against per item;
 *  - the planner picks shared-KV for a prefill and honours the attention
 *    option (XLLM_ATTN);
 *  - sliding windows of every size against the 128-key chunks (windows
 *    forced through the internal API), two sequences in one batch;
 *  - the same strategy and batch-shape comparisons with the KV cache stored
 *    as q8 and as f16 (kv_dtype; the best level), windows on q8, and a
 *    batch generation on q8 and on f16;
 *  - llama.cpp's arithmetic (attention_f16.c): a batch generation equals each
 *    prompt generated alone, other step size and thread count.
 */
#include "test.h"
#include "xllm.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

#define N_IDS 300

typedef struct run_cfg {
    const char *attn; /* XLLM_ATTN value, NULL: the planner decides */
    int step, block, threads;
} run_cfg;

static const char *g_level; /* the CPU level under test (XLLM_CPU) */
static const char *g_kv;    /* the KV storage under test (kv_dtype; NULL: f32) */

static float *logits_with(const char *dir, const run_cfg *rc, const int32_t *ids, int V) {
    xllm_error err;
    xllm_model_options o = xllm_model_options_default();
    o.attention = rc->attn;
    o.cpu_level = g_level;
    o.no_plan = 1; /* no load-time measurement: thread counts never change results */
    o.max_step_tokens = rc->step;
    o.max_batch_seqs = 1;
    o.n_threads = rc->threads;
    o.kv_block_size = rc->block;
    o.kv_dtype = g_kv;
    xllm_model *m = xllm_model_load(dir, &o, &err);
    CHECK_MSG(m != NULL, "%s: %s", dir, err.message);
    if (!m) return NULL;
    float *out = malloc(sizeof(float) * N_IDS * (size_t)V);
    xllm_status st = xllm_model_logits(m, ids, N_IDS, 1, out, &err);
    CHECK_MSG(st == XLLM_OK, "%s: %s", dir, err.message);
    xllm_model_free(m);
    if (st != XLLM_OK) free(out), out = NULL;
    return out;
}

static void check_logits(const char *rel, const char *level) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", XLLM_SOURCE_DIR, rel);
    const int V = 512; /* every checkpoint here has the stories260k vocabulary */
    int32_t ids[N_IDS];
    for (int i = 0; i < N_IDS; i++) ids[i] = i ? 3 + (i * 37 + i / 7) % 500 : 1;
    static const run_cfg ref = {"per-item", 512, 16, 2};
    static const run_cfg cfgs[] = {
        {"shared", 512, 16, 2}, {"shared", 37, 7, 3}, {"shared", 1, 16, 1}, {"split", 1, 16, 2}, {NULL, 512, 16, 2},
    };
    float *want = logits_with(dir, &ref, ids, V);
    if (!want) return;
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
        float *got = logits_with(dir, &cfgs[c], ids, V);
        if (!got) continue;
        size_t first = 0;
        while (first < (size_t)N_IDS * V && !memcmp(&got[first], &want[first], sizeof(float))) first++;
        CHECK_MSG(first == (size_t)N_IDS * V,
                  "%s at %s, KV %s: XLLM_ATTN=%s step %d block %d threads %d differs from per item at position %zu "
                  "(%.9g vs %.9g)",
                  rel, level, g_kv ? g_kv : "f32", cfgs[c].attn ? cfgs[c].attn : "(planner)", cfgs[c].step, cfgs[c].block, cfgs[c].threads,
                  first / V, first < (size_t)N_IDS * V ? got[first] : 0.0, first < (size_t)N_IDS * V ? want[first] : 0.0);
        free(got);
    }
    free(want);
}

/* BATCH_N greedy requests for 20 tokens (ignoring EOS), prompts of lengths
 * 1..130 made of ids 3 + (k * a + i * b) % 500 after BOS. */
#define BATCH_N 5
static void batch_requests(xllm_request *reqs, int32_t (*prompts)[160], int a, int b) {
    static const int lens[BATCH_N] = {1, 130, 17, 64, 5};
    memset(reqs, 0, sizeof(xllm_request) * BATCH_N);
    for (int i = 0; i < BATCH_N; i++) {
        for (int k = 0; k < lens[i]; k++) prompts[i][k] = k ? 3 + (k * a + i * b) % 500 : 1;
        reqs[i].prompt_ids = prompts[i];
        reqs[i].n_prompt_ids = (size_t)lens[i];
        reqs[i].params = xllm_sampling_params_default();
        reqs[i].params.do_sample = 0;
        reqs[i].params.max_new_tokens = 20;
        reqs[i].params.ignore_eos = 1;
    }
}

/* A batch of prompts (lengths 1..130) generated together, 40 tokens a step:
 * chunked prefill mixed with decode, the same tokens under both strategies. */
static void check_generate(const char *rel, const char *kv) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", XLLM_SOURCE_DIR, rel);
    enum { N = BATCH_N };
    static int32_t prompts[N][160];
    xllm_request reqs[N];
    batch_requests(reqs, prompts, 31, 7);
    xllm_result *res[2];
    const char *modes[2] = {"per-item", "shared"};
    for (int k = 0; k < 2; k++) {
        xllm_error err;
        xllm_model_options o = xllm_model_options_default();
        o.attention = modes[k];
        o.no_plan = 1;
        o.max_step_tokens = 40;
        o.max_batch_seqs = 4;
        o.n_threads = 2;
        o.kv_dtype = kv;
        xllm_model *m = xllm_model_load(dir, &o, &err);
        CHECK_MSG(m != NULL, "%s", err.message);
        if (!m) return;
        CHECK(xllm_generate(m, reqs, N, NULL, NULL, &res[k], &err) == XLLM_OK);
        xllm_model_free(m);
    }
    for (int i = 0; i < N; i++) {
        int same = res[0][i].n_ids == res[1][i].n_ids && res[0][i].n_ids == 20;
        for (size_t k = 0; same && k < res[0][i].n_ids; k++) same = res[0][i].ids[k] == res[1][i].ids[k];
        CHECK_MSG(same, "%s (KV %s): request %d: shared-KV generation differs from per item", rel, kv ? kv : "f32", i);
    }
    xllm_results_free(res[0], N);
    xllm_results_free(res[1], N);
}

/* llama.cpp's arithmetic (arithmetic "llama": attention_f16.c for steps under
 * 64 tokens, f16 KV): a batch of prompts (lengths 1..130, 40 tokens a step,
 * 2 threads) generates what each prompt generates alone on 1 thread, 7 tokens
 * a step: a token's attention does not depend on its batch, split or threads. */
static void check_llama_arith(const char *rel) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", XLLM_SOURCE_DIR, rel);
    enum { N = BATCH_N };
    static int32_t prompts[N][160];
    xllm_request reqs[N];
    batch_requests(reqs, prompts, 29, 5);
    xllm_result *together = NULL, *alone[N] = {NULL};
    for (int k = 0; k < 2; k++) {
        xllm_error err;
        xllm_model_options o = xllm_model_options_default();
        o.arithmetic = "llama";
        o.kv_dtype = "f16";
        o.no_plan = 1;
        o.max_step_tokens = k ? 7 : 40;
        o.max_batch_seqs = 4;
        o.n_threads = k ? 1 : 2;
        xllm_model *m = xllm_model_load(dir, &o, &err);
        CHECK_MSG(m != NULL, "%s", err.message);
        if (!m) return;
        if (!k) CHECK(xllm_generate(m, reqs, N, NULL, NULL, &together, &err) == XLLM_OK);
        for (int i = 0; k && i < N; i++) CHECK(xllm_generate(m, &reqs[i], 1, NULL, NULL, &alone[i], &err) == XLLM_OK);
        xllm_model_free(m);
    }
    for (int i = 0; together && i < N; i++) {
        int same = alone[i] && together[i].n_ids == 20 && alone[i]->n_ids == 20;
        for (size_t k = 0; same && k < 20; k++) same = together[i].ids[k] == alone[i]->ids[k];
        CHECK_MSG(same, "%s (arithmetic llama): request %d: batched generation differs from alone", rel, i);
    }
    if (together) xllm_results_free(together, N);
    for (int i = 0; i < N; i++)
        if (alone[i]) xllm_results_free(alone[i], 1);
}

/* The planner's rule through the internal API: a 300-token prefill uses
 * shared-KV (its buffers are made on the first attention call), and the
 * attention option per-item keeps the per-item strategy. */
static void check_strategy_choice(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/models/stories260k", XLLM_SOURCE_DIR);
    for (int k = 0; k < 2; k++) {
        xllm_error err;
        model_load_options lo = {0};
        lo.n_threads = 1, lo.max_tokens = N_IDS, lo.attention = k ? "per-item" : NULL;
        model *m = model_load_ex(dir, &lo, &err);
        CHECK_MSG(m != NULL, "%s", err.message);
        if (!m) return;
        kv_cache kv;
        CHECK(kv_cache_init(&kv, &m->be, m->cfg.n_layers, m->cfg.n_kv_heads, m->cfg.head_dim, 16, 32, KV_F32, &err) ==
              XLLM_OK);
        int32_t ids[N_IDS], pos[N_IDS], seq[N_IDS], table[32];
        for (int i = 0; i < 32; i++) table[i] = i;
        for (int i = 0; i < N_IDS; i++) ids[i] = 3 + i % 400, pos[i] = i, seq[i] = 0;
        const int32_t *tables[1] = {table};
        fwd_batch b = {N_IDS, ids, pos, seq, tables, 0, NULL};
        CHECK(model_forward(m, &kv, &b, NULL, &err) == XLLM_OK);
        attn_strategy s = cpu_backend_of(&m->be)->attn_last; /* every layer's batch is the same */
        CHECK_MSG(s == (k ? ATTN_PER_ITEM : ATTN_SHARED_KV), "prefill strategy %d (attention %s)", (int)s,
                  k ? "per-item" : "unset");
        kv_cache_free(&kv);
        model_free(m);
    }
}

/* Sliding windows of every size against the chunking (stories260k with its
 * layers' window forced through the internal API: 0, 5, 50, 128, 130, 200):
 * all positions' logits of a 300-token prefill (two sequences in one batch,
 * the second one 3 tokens into a cached prefix) per item and shared-KV, bit
 * for bit (every other window with the KV stored as q8). */
static void check_windows(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/models/stories260k", XLLM_SOURCE_DIR);
    static const int windows[] = {0, 5, 50, 128, 130, 200};
    enum { T = N_IDS, V = 512 };
    float *out[2];
    for (size_t w = 0; w < sizeof windows / sizeof *windows; w++) {
        for (int k = 0; k < 2; k++) {
            xllm_error err;
            model_load_options lo = {0};
            lo.n_threads = 2, lo.max_tokens = T, lo.attention = k ? "shared" : "per-item";
            model *m = model_load_ex(dir, &lo, &err);
            CHECK_MSG(m != NULL, "%s", err.message);
            if (!m) return;
            for (int l = 0; l < m->cfg.n_layers; l++) m->cfg.layer_window[l] = windows[w];
            kv_cache kv;
            CHECK(kv_cache_init(&kv, &m->be, m->cfg.n_layers, m->cfg.n_kv_heads, m->cfg.head_dim, 16, 64,
                                w % 2 ? KV_Q8 : KV_F32, &err) == XLLM_OK); /* odd windows on q8 KV */
            /* sequence 0: positions 0..249; sequence 1: 0..2 first, then 3..52 in the big batch */
            int32_t ids[T], pos[T], seq[T], out_idx[T], t0[32], t1[32];
            for (int i = 0; i < 32; i++) t0[i] = i, t1[i] = 32 + i;
            const int32_t *tables[2] = {t0, t1};
            for (int i = 0; i < 3; i++) ids[i] = 5 + i, pos[i] = i, seq[i] = 1, out_idx[i] = i;
            fwd_batch pre = {3, ids, pos, seq, tables, 0, NULL};
            CHECK(model_forward(m, &kv, &pre, NULL, &err) == XLLM_OK);
            for (int i = 0; i < T; i++) {
                int s1 = i >= 250;
                ids[i] = 3 + (i * 53) % 500, pos[i] = s1 ? i - 250 + 3 : i, seq[i] = s1, out_idx[i] = i;
            }
            fwd_batch b = {T, ids, pos, seq, tables, T, out_idx};
            out[k] = malloc(sizeof(float) * T * V);
            CHECK(model_forward(m, &kv, &b, out[k], &err) == XLLM_OK);
            CHECK(cpu_backend_of(&m->be)->attn_last == (k ? ATTN_SHARED_KV : ATTN_PER_ITEM));
            kv_cache_free(&kv);
            model_free(m);
        }
        CHECK_MSG(!memcmp(out[0], out[1], sizeof(float) * T * V), "window %d: shared-KV differs from per item",
                  windows[w]);
        free(out[0]);
        free(out[1]);
    }
}

int main(void) {
    const cpu_kernels *levels[8];
    int n_levels = cpu_kernels_all(levels, 8);
    const char *models[] = {"tests/data/tiny/llama", "tests/data/tiny/mistral", "tests/data/tiny/mixtral",
                            "tests/data/tiny/qwen2", "tests/data/tiny/qwen2_moe", "tests/data/tiny/qwen3",
                            "tests/data/tiny/qwen3_moe", "models/stories260k"};
    for (int l = 0; l < n_levels; l++) {
        const char *level = cpu_level_name(levels[l]->level);
        g_level = level;
        for (size_t i = 0; i < sizeof models / sizeof *models; i++) check_logits(models[i], level);
    }
    g_level = NULL;
    /* compressed KV at the best level (every level's f16 / q8 loops are the f32 loops' bits over
     * the dequantized rows: test_kernels): head_dim 8 (q8 groups of 4), 32 with q/k norms */
    static const char *const kv_models[] = {"models/stories260k", "tests/data/tiny/qwen3"};
    static const char *const kvs[] = {"q8", "f16"};
    for (int k = 0; k < 2; k++) {
        g_kv = kvs[k];
        for (size_t i = 0; i < sizeof kv_models / sizeof *kv_models; i++) check_logits(kv_models[i], "best level");
    }
    g_kv = NULL;
    check_generate("models/stories260k", NULL);
    check_generate("tests/data/tiny/mistral", NULL);
    check_generate("models/stories260k", "q8");
    check_generate("models/stories260k", "f16");
    check_llama_arith("models/stories260k");
    check_llama_arith("tests/data/tiny/mistral");
    check_strategy_choice();
    check_windows();
    return test_report("test_attention");
}
