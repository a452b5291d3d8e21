/*
 * sampler.h - turns one row of logits into the next token id, per request.
 *
 * Order (as HF generate / vLLM): repetition penalty (HF multiplicative, over
 * prompt and output ids), presence/frequency penalties (OpenAI additive, over
 * output ids), then greedy argmax when do_sample is 0 or temperature <= 0;
 * otherwise temperature, top-k, top-p, min-p, and a draw from a seeded
 * per-request RNG (same seed, same output). No allocation per token: scratch
 * is sized once at sampler_init.
 */
#ifndef XLLM_ENGINE_SAMPLER_H
#define XLLM_ENGINE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>
#include "xllm.h"

typedef struct sampler {
    xllm_sampling_params p;
    int32_t vocab;
    uint64_t rng[4];          /* xoshiro256** state */
    uint32_t *out_counts;     /* per-id count of output tokens (frequency/presence) */
    uint8_t *seen;            /* per-id: appeared in prompt or output (repetition) */
    float *scratch_val;       /* vocab-sized scratch for sorting candidates */
    int32_t *scratch_idx;
} sampler;

xllm_status sampler_init(sampler *s, const xllm_sampling_params *p, int32_t vocab, xllm_error *err);
void sampler_free(sampler *s);
/* Register the prompt ids (for repetition_penalty). */
void sampler_set_prompt(sampler *s, const int32_t *ids, size_t n);
/* Pick the next id from logits (modified in place), then record it as output. */
int32_t sampler_sample(sampler *s, float *logits);

#endif
