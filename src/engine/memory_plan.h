/*
 * memory_plan.h - how an engine divides its memory: the scratch, the KV pool
 * (its storage type and block count) and the host swap pool.
 *
 * A pure function of the options and the model's shape: no allocation, no
 * globals, the same answer for the same inputs, so it can be tested alone
 * (tests/unit/test_memory_plan.c) and the engine only carries it out.
 *
 * The rules: the scratch (the model's forward buffers plus the engine's step
 * buffers) and the backend's own memory (a device backend's scratch, ring,
 * staging pool: backend_ops.own_bytes) come first. With memory.workspace_size the rest is split into a
 * swap pool (swap_size; by default a quarter, none with preempt recompute or
 * swap_size -1) and the KV pool, which must hold at least one full-context
 * sequence. Without it the KV pool holds kv_tokens tokens (at least one full
 * context) and the swap pool defaults to a quarter of it. kv_dtype auto picks
 * the widest storage (f32, f16, q8) in which max_seqs full contexts fit the
 * KV budget, else q8 (f16 when the head size cannot be q8).
 */
#ifndef XLLM_ENGINE_MEMORY_PLAN_H
#define XLLM_ENGINE_MEMORY_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include "model/kv_cache.h"
#include "xllm.h"

/* What the plan needs of the model (this process's part of it). */
typedef struct memory_model {
    int n_layers;                 /* layers held here (a pipeline stage: its own range) */
    int n_kv_heads, head_dim, vocab;
    int max_step_tokens;          /* tokens per forward step (the model's scratch: model.s.max_tokens) */
    size_t step_scratch;          /* the model's forward scratch in bytes (model.s.bytes) */
    size_t backend_bytes;         /* the backend's own memory (backend_ops.own_bytes; 0: none) */
} memory_model;

typedef struct memory_plan {
    int max_seqs;                 /* sequences per step: max_batch_size or the model's, at most max_step_tokens */
    size_t scratch_bytes;         /* the model's scratch + the engine's logits and step buffers */
    size_t backend_bytes;         /* the backend's own (memory_model.backend_bytes), inside the workspace */
    kv_dtype kv_dtype;
    int kv_auto;                  /* kv_dtype auto chose it */
    int64_t block_bytes;          /* one KV block of kv_block_size tokens, every layer held */
    int32_t n_blocks;             /* the KV pool */
    int32_t swap_blocks;          /* the host swap pool */
} memory_plan;

/* The plan for an engine of options eo on a model of options mo (resolved:
 * max_context, kv_block_size, max_batch_seqs, kv_tokens, kv_dtype). Fails
 * with INVALID_ARGUMENT on an unknown kv_dtype or a workspace too small for
 * one full-context sequence (the message gives the sizes). Thread-safe. */
xllm_status memory_plan_make(const memory_model *mm, const xllm_model_options *mo, const xllm_engine_options *eo,
                             memory_plan *out, xllm_error *err);
/* Bytes of a KV block of block_size tokens of every layer held, stored as dt. */
int64_t memory_block_bytes(const memory_model *mm, int block_size, kv_dtype dt);
/* b as "1.5 MiB" (GiB, MiB or KiB). */
void memory_fmt_bytes(char *buf, size_t n, int64_t b);

#endif
