/* test_memory_plan.c - the engine's memory plan (src/engine/memory_plan.h)
 * alone, with no model and no engine: the scratch, the KV pool's block count
 * and storage, and the swap pool for hand-computed cases (fixed dtype, the
 * context floor, the batch clamp, swap choices, kv_dtype auto's three
 * outcomes and its f16 fallback, a workspace split, one too small, a
 * backend's own memory inside the workspace), errors
 * with their messages, and the same answer twice. */
#include "test.h"
#include "engine/memory_plan.h"

#include <string.h>

/* 2 layers x 2 KV heads x head_dim 64: per token f32 2*2*2*64*4 = 2048 bytes,
 * f16 1024, q8 2*2*2*(64 + 2*2) = 544; vocab 100, 512 tokens per step and a
 * 1000-byte model scratch: scratch = 1000 + (seqs+1)*100*4 + 512*4*4. */
static const memory_model k_mm = {2, 2, 64, 100, 512, 1000, 0};

static xllm_model_options mopts(const char *kv_dtype, int64_t kv_tokens, int max_context, int seqs) {
    xllm_model_options mo = xllm_model_options_default();
    mo.kv_dtype = kv_dtype;
    mo.kv_tokens = kv_tokens;
    mo.max_context = max_context;
    mo.max_batch_seqs = seqs;
    mo.kv_block_size = 16;
    return mo;
}

static void test_fixed(void) {
    xllm_engine_options eo = xllm_engine_options_default(); /* elastic: a swap pool of a quarter */
    xllm_model_options mo = mopts("f32", 1000, 256, 4);
    memory_plan p;
    xllm_error err;
    CHECK(memory_plan_make(&k_mm, &mo, &eo, &p, &err) == XLLM_OK);
    CHECK(p.max_seqs == 4 && p.scratch_bytes == 1000 + 5 * 100 * 4 + 512 * 16);
    CHECK(p.kv_dtype == KV_F32 && !p.kv_auto && p.block_bytes == 16 * 2048);
    CHECK_MSG(p.n_blocks == 63 && p.swap_blocks == 15, "%d blocks, %d swap", p.n_blocks, p.swap_blocks);
    memory_plan q;
    CHECK(memory_plan_make(&k_mm, &mo, &eo, &q, &err) == XLLM_OK && !memcmp(&p, &q, sizeof p)); /* pure */

    mo = mopts("f16", 10, 256, 4); /* fewer tokens than one context: one context */
    CHECK(memory_plan_make(&k_mm, &mo, &eo, &p, &err) == XLLM_OK && p.block_bytes == 16 * 1024);
    CHECK_MSG(p.n_blocks == 16 && p.swap_blocks == 4, "%d blocks, %d swap", p.n_blocks, p.swap_blocks);

    eo.max_batch_size = 1000; /* more sequences than tokens per step: clamped */
    CHECK(memory_plan_make(&k_mm, &mo, &eo, &p, &err) == XLLM_OK && p.max_seqs == 512);
    CHECK(p.scratch_bytes == 1000 + 513 * 100 * 4 + 512 * 16);
}

static void test_swap(void) {
    xllm_engine_options eo = xllm_engine_options_default();
    xllm_model_options mo = mopts("f32", 1000, 256, 4);
    memory_plan p;
    xllm_error err;
    eo.preempt_mode = XLLM_PREEMPT_RECOMPUTE;
    CHECK(memory_plan_make(&k_mm, &mo, &eo, &p, &err) == XLLM_OK && p.swap_blocks == 0 && p.n_blocks == 63);
    eo.preempt_mode = XLLM_PREEMPT_SWAP;
    eo.swap_size = -1;
    CHECK(memory_plan_make(&k_mm, &mo, &eo, &p, &err) == XLLM_OK && p.swap_blocks == 0);
    eo.swap_size = 3 * 32768 + 5;
    CHECK(memory_plan_make(&k_mm, &mo, &eo, &p, &err) == XLLM_OK && p.swap_blocks == 3);
}

static void test_auto(void) {
    xllm_engine_options eo = xllm_engine_options_default();
    memory_plan p;
    xllm_error err;
    /* the budget: the f32 pool of 1024 tokens = 64 blocks = 2 MiB */
    xllm_model_options mo = mopts("auto", 1024, 256, 4); /* 4 x 256 tokens fit in f32 */
    CHECK(memory_plan_make(&k_mm, &mo, &eo, &p, &err) == XLLM_OK && p.kv_auto && p.kv_dtype == KV_F32);
    CHECK(p.n_blocks == 64 && p.swap_blocks == 16);
    mo = mopts("auto", 1024, 512, 4); /* 2048 tokens: f16 */
    CHECK(memory_plan_make(&k_mm, &mo, &eo, &p, &err) == XLLM_OK && p.kv_dtype == KV_F16);
    CHECK(p.n_blocks == 128 && p.swap_blocks == 32);
    mo = mopts("auto", 1024, 1024, 4); /* 4096 tokens fit none: q8, the 2 MiB in q8 blocks of 16 x 544 */
    CHECK(memory_plan_make(&k_mm, &mo, &eo, &p, &err) == XLLM_OK && p.kv_dtype == KV_Q8);
    CHECK_MSG(p.n_blocks == 2097152 / 8704 && p.swap_blocks == 524288 / 8704, "%d blocks, %d swap", p.n_blocks,
              p.swap_blocks);
    memory_model odd = k_mm; /* head_dim 4: q8 cannot store it, f16 instead */
    odd.head_dim = 4;
    CHECK(memory_plan_make(&odd, &mo, &eo, &p, &err) == XLLM_OK && p.kv_dtype == KV_F16);
}

static void test_workspace(void) {
    xllm_engine_options eo = xllm_engine_options_default();
    xllm_model_options mo = mopts("f32", 1000, 256, 4);
    memory_plan p;
    xllm_error err;
    int64_t scratch = 1000 + 5 * 100 * 4 + 512 * 16;
    eo.workspace_size = scratch + 40 * 32768; /* a quarter swap (10 blocks), the rest KV (30) */
    CHECK(memory_plan_make(&k_mm, &mo, &eo, &p, &err) == XLLM_OK);
    CHECK_MSG(p.n_blocks == 30 && p.swap_blocks == 10, "%d blocks, %d swap", p.n_blocks, p.swap_blocks);
    mo.kv_dtype = "auto"; /* 4 x 256 tokens need 2 MiB of f32, 1 MiB of f16; the KV budget is 960 KiB: q8 */
    CHECK(memory_plan_make(&k_mm, &mo, &eo, &p, &err) == XLLM_OK && p.kv_dtype == KV_Q8);
    mo.kv_dtype = "f32";
    eo.workspace_size = scratch + 20 * 32768; /* 15 KV blocks < one context of 16 */
    CHECK(memory_plan_make(&k_mm, &mo, &eo, &p, &err) == XLLM_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err.message, "memory.workspace_size") && strstr(err.message, "too small") &&
              strstr(err.message, "16 KV blocks of 32768 bytes"), "%s", err.message);
}

/* A device backend's own memory (backend_ops.own_bytes) comes out of the
 * workspace before the swap and KV pools; a workspace that cannot hold it is
 * the same clear error, naming it. */
static void test_backend_bytes(void) {
    xllm_engine_options eo = xllm_engine_options_default();
    xllm_model_options mo = mopts("f32", 1000, 256, 4);
    memory_plan p;
    xllm_error err;
    memory_model dev = k_mm;
    dev.backend_bytes = 8 * 32768 + 100;
    int64_t scratch = 1000 + 5 * 100 * 4 + 512 * 16;
    eo.workspace_size = scratch + 40 * 32768; /* the backend takes 8 blocks' worth + 100 bytes: 31 blocks + rest */
    CHECK(memory_plan_make(&dev, &mo, &eo, &p, &err) == XLLM_OK && p.backend_bytes == dev.backend_bytes);
    /* rest = 32 * 32768 - 100: swap a quarter (262119 bytes: 7 blocks), KV the rest (786357 bytes: 23) */
    CHECK_MSG(p.n_blocks == 23 && p.swap_blocks == 7, "%d blocks, %d swap", p.n_blocks, p.swap_blocks);
    CHECK(scratch + (int64_t)p.backend_bytes + (int64_t)(p.n_blocks + p.swap_blocks) * p.block_bytes <= eo.workspace_size);
    mo.kv_dtype = "auto"; /* the KV budget, 786357 bytes, holds 4 x 256 tokens in neither f32 nor f16: q8 */
    CHECK(memory_plan_make(&dev, &mo, &eo, &p, &err) == XLLM_OK && p.kv_dtype == KV_Q8);
    mo.kv_dtype = "f32";
    eo.swap_size = -1;
    dev.backend_bytes = 25 * 32768; /* 15 KV blocks left < one context of 16 */
    CHECK(memory_plan_make(&dev, &mo, &eo, &p, &err) == XLLM_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err.message, "too small") && strstr(err.message, "the backend's own memory 800.0 KiB"), "%s",
              err.message);
    dev.backend_bytes = (size_t)eo.workspace_size * 2; /* more than the whole workspace: the error, no overflow */
    CHECK(memory_plan_make(&dev, &mo, &eo, &p, &err) == XLLM_ERR_INVALID_ARGUMENT);
    mo.kv_dtype = "auto";
    CHECK(memory_plan_make(&dev, &mo, &eo, &p, &err) == XLLM_ERR_INVALID_ARGUMENT);
}

static void test_errors(void) {
    xllm_engine_options eo = xllm_engine_options_default();
    xllm_model_options mo = mopts("f8", 1000, 256, 4);
    memory_plan p;
    xllm_error err;
    CHECK(memory_plan_make(&k_mm, &mo, &eo, &p, &err) == XLLM_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err.message, "kv_dtype 'f8'") != NULL, "%s", err.message);
}

int main(void) {
    test_fixed();
    test_swap();
    test_auto();
    test_workspace();
    test_backend_bytes();
    test_errors();
    return test_report("test_memory_plan");
}
