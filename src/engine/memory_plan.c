/*
 * memory_plan.c - the engine's memory split (memory_plan.h): scratch, the
 * backend's own memory, KV pool and swap pool, and kv_dtype auto, from the options and the model's
 * shape alone.
 */
#include "engine/memory_plan.h"
#include "base/error.h"

#include <stdio.h>

int64_t memory_block_bytes(const memory_model *mm, int block_size, kv_dtype dt) {
    return (int64_t)block_size * (int64_t)kv_bytes_per_token(dt, mm->n_layers, mm->n_kv_heads, mm->head_dim);
}

void memory_fmt_bytes(char *buf, size_t n, int64_t b) {
    if (b >= ((int64_t)1 << 30)) snprintf(buf, n, "%.2f GiB", (double)b / (double)((int64_t)1 << 30));
    else if (b >= ((int64_t)1 << 20)) snprintf(buf, n, "%.1f MiB", (double)b / (double)((int64_t)1 << 20));
    else snprintf(buf, n, "%.1f KiB", (double)b / 1024.0);
}

/* kv_dtype auto, the load-time choice: the widest storage in which
 * need_tokens fit the KV budget (bytes), else q8 (else f16 when the head size
 * cannot be q8). */
static kv_dtype kv_dtype_auto(const memory_model *mm, int64_t budget, int64_t need_tokens) {
    const kv_dtype order[] = {KV_F32, KV_F16, KV_Q8};
    for (int i = 0; i < 3; i++)
        if (kvq_supported(order[i], mm->head_dim) && need_tokens * memory_block_bytes(mm, 1, order[i]) <= budget)
            return order[i];
    return kvq_supported(KV_Q8, mm->head_dim) ? KV_Q8 : KV_F16;
}

/* The swap pool's bytes: as asked, none (-1, or preemption by recompute
 * only), else a quarter of `base`. */
static int64_t swap_default(const xllm_engine_options *eo, int64_t base) {
    return eo->swap_size > 0 ? eo->swap_size
           : eo->swap_size < 0 || eo->preempt_mode == XLLM_PREEMPT_RECOMPUTE ? 0 : base / 4;
}

static int32_t blocks_for_tokens(int block_size, int64_t tokens) {
    return kv_blocks_for_tokens(&(kv_cache){.block_size = block_size}, (int32_t)tokens);
}

/* KV and swap bytes from the workspace: what the scratch leaves, the swap
 * pool first; too small for one full context is an error. */
static xllm_status split_workspace(const xllm_model_options *mo, const xllm_engine_options *eo, const memory_plan *p,
                                   int32_t min_blocks, int64_t *kv_bytes, int64_t *swap_bytes, xllm_error *err) {
    int64_t fixed = (int64_t)p->scratch_bytes + (int64_t)p->backend_bytes;
    int64_t rest = eo->workspace_size - fixed;
    *swap_bytes = rest > 0 ? swap_default(eo, rest) : 0;
    *kv_bytes = rest - *swap_bytes;
    if (*kv_bytes >= (int64_t)min_blocks * p->block_bytes) return XLLM_OK;
    char ws[32], sc[32], bk[32], need[32], sw[32];
    memory_fmt_bytes(ws, sizeof ws, eo->workspace_size);
    memory_fmt_bytes(sc, sizeof sc, (int64_t)p->scratch_bytes);
    memory_fmt_bytes(bk, sizeof bk, (int64_t)p->backend_bytes);
    memory_fmt_bytes(need, sizeof need, fixed + *swap_bytes + (int64_t)min_blocks * p->block_bytes);
    memory_fmt_bytes(sw, sizeof sw, *swap_bytes);
    return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                       "memory.workspace_size %s is too small: scratch %s + the backend's own memory %s + swap pool "
                       "%s + one full-context sequence (%d tokens, %d KV blocks of %lld bytes) needs at least %s",
                       ws, sc, bk, sw, mo->max_context, min_blocks, (long long)p->block_bytes, need);
}

xllm_status memory_plan_make(const memory_model *mm, const xllm_model_options *mo, const xllm_engine_options *eo,
                             memory_plan *out, xllm_error *err) {
    memory_plan p = {0};
    int B = mo->kv_block_size;
    p.max_seqs = eo->max_batch_size > 0 ? eo->max_batch_size : mo->max_batch_seqs;
    if (p.max_seqs > mm->max_step_tokens) p.max_seqs = mm->max_step_tokens;
    size_t V = (size_t)mm->vocab;
    p.scratch_bytes = mm->step_scratch + ((size_t)p.max_seqs + 1) * V * sizeof(float) +
                      (size_t)mm->max_step_tokens * 4 * sizeof(int32_t);
    p.backend_bytes = mm->backend_bytes;
    /* the KV storage: as asked, or (auto) chosen from the budget */
    p.kv_dtype = KV_F32;
    if (kvq_parse(mo->kv_dtype, &p.kv_dtype, &p.kv_auto))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "kv_dtype '%s' is not f32, f16, q8 or auto", mo->kv_dtype);
    int64_t need_tokens = (int64_t)p.max_seqs * mo->max_context;
    /* the f32 pool of kv_tokens: the budget of auto without a workspace */
    int64_t kv_tokens_f32 = (int64_t)blocks_for_tokens(B, mo->kv_tokens) * memory_block_bytes(mm, B, KV_F32);
    if (p.kv_auto && eo->workspace_size <= 0)
        p.kv_dtype = kv_dtype_auto(mm, kv_tokens_f32, need_tokens);
    if (p.kv_auto && eo->workspace_size > 0) { /* the budget: what the workspace leaves for KV */
        int64_t rest = eo->workspace_size - (int64_t)p.scratch_bytes - (int64_t)p.backend_bytes;
        p.kv_dtype = kv_dtype_auto(mm, rest - swap_default(eo, rest), need_tokens);
    }

    p.block_bytes = memory_block_bytes(mm, B, p.kv_dtype);
    int32_t min_blocks = blocks_for_tokens(B, mo->max_context);
    int64_t kv_bytes, swap_bytes;
    if (eo->workspace_size > 0) {
        xllm_status st = split_workspace(mo, eo, &p, min_blocks, &kv_bytes, &swap_bytes, err);
        if (st) return st;
    } else {
        /* auto: the bytes of the f32 pool of kv_tokens, in the chosen storage */
        kv_bytes = p.kv_auto ? kv_tokens_f32 : (int64_t)blocks_for_tokens(B, mo->kv_tokens) * p.block_bytes;
        if (kv_bytes < (int64_t)min_blocks * p.block_bytes) kv_bytes = (int64_t)min_blocks * p.block_bytes;
        swap_bytes = swap_default(eo, kv_bytes);
    }
    int64_t n_blocks = kv_bytes / p.block_bytes, swap_blocks = swap_bytes / p.block_bytes;
    p.n_blocks = (int32_t)(n_blocks > INT32_MAX / 2 ? INT32_MAX / 2 : n_blocks);
    p.swap_blocks = (int32_t)(swap_blocks > INT32_MAX / 2 ? INT32_MAX / 2 : swap_blocks);
    *out = p;
    return XLLM_OK;
}
