/*
 * engine.h - runs requests on a model: admission, batching, sampling, stops.
 *
 * An engine owns the paged KV pool and the per-step buffers. engine_generate
 * is a continuous-batching loop: each step it packs one decode token from
 * every running sequence plus prefill chunks of newly admitted ones into a
 * single flattened batch (up to max_step_tokens), runs one forward pass,
 * samples, checks stops and streams text; finished sequences free their KV
 * blocks and waiting requests are admitted at once. A request is admitted only
 * when its whole KV need (prompt + max_new_tokens, capped by the context) is
 * free, so a running sequence never runs out of blocks.
 */
#ifndef XLLM_ENGINE_H
#define XLLM_ENGINE_H

#include "model/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "xllm.h"

typedef struct engine {
    model *m;
    const tokenizer *tok;          /* may be NULL: then no text, no stop strings */
    kv_cache kv;
    int max_context;
    int max_seqs;
    int max_step_tokens;
    /* per-step buffers, sized once */
    int32_t *tokens, *pos, *seq, *out_idx;
    const int32_t **tables;
    float *logits;                 /* [max_seqs][vocab] */
} engine;

/* opts: resolved options (no zeros). */
xllm_status engine_init(engine *e, model *m, const tokenizer *tok, const xllm_model_options *opts, xllm_error *err);
void engine_free(engine *e);

xllm_status engine_generate(engine *e, const xllm_request *reqs, size_t n, xllm_token_callback cb, void *user,
                            xllm_result **results, xllm_error *err);
xllm_status engine_logits(engine *e, const int32_t *ids, size_t n, int all_positions, float *out, xllm_error *err);

#endif
