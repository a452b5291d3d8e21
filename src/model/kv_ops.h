/*
 * kv_ops.h - the operations that move KV contents between blocks of a pool
 * (kv_cache.h) and its host swap pool, as a vocabulary others can repeat.
 *
 * The block manager (src/engine) decides which blocks hold what; when it
 * moves data - a copy-on-write copy, a swap out, a swap in - it reports the
 * operation through a kv_mirror_fn. A pipeline's other stages (src/pipeline)
 * repeat the same operations, in order, on their own pools of the same block
 * count before the next forward pass, so their block tables stay identical.
 * This header is the KV cache's side of that contract: the pipeline needs
 * only it, never the engine.
 */
#ifndef XLLM_MODEL_KV_OPS_H
#define XLLM_MODEL_KV_OPS_H

#include <stdint.h>

typedef enum kv_op { KV_OP_COPY = 1, KV_OP_SWAP_OUT = 2, KV_OP_SWAP_IN = 3 } kv_op;
/* COPY: (dst block, src block, slots); SWAP_OUT: (block, host block, 0); SWAP_IN: (block, host block, 0).
 * Called on the thread that owns the pool (the engine's scheduler thread). */
typedef void (*kv_mirror_fn)(void *ctx, kv_op op, int32_t a, int32_t b, int32_t n);

#endif
