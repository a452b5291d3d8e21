/*
 * gguf.h - GGUF v3 files (llama.cpp's format), read and written.
 *
 * Reading turns a GGUF file into what an HF checkpoint directory provides,
 * so every later layer stays format-blind:
 *   - an HF-style config.json object (model_type llama / qwen2 / qwen3, sizes,
 *     rope theta, eps, bos/eos...) built from the `<arch>.*` metadata;
 *   - a tensor archive (zero copy: pointers into the mmap) whose tensors carry
 *     HF names (token_embd.weight -> model.embed_tokens.weight, blk.N.attn_q
 *     -> model.layers.N.self_attn.q_proj, ...) and shapes in HF order
 *     ([rows, cols] = [ne1, ne0]); F32, F16, BF16, Q8_0, Q4_0, Q4_1 map to
 *     XLLM_DT_F32/F16/BF16/Q8/Q4/Q4M with group 32 (same bytes);
 *   - the tokenizer as HF tokenizer.json + tokenizer_config.json text,
 *     synthesized from tokenizer.ggml.* (`llama` SentencePiece vocab with
 *     scores -> BPE with byte fallback and merges ranked by score; `gpt2` ->
 *     byte-level BPE with the pre-tokenizer regex named by tokenizer.ggml.pre);
 *   - rope_interleaved: llama.cpp stores llama-architecture Q/K rows permuted
 *     for interleaved-pair RoPE; the config carries "xllm_rope_interleaved":
 *     true so the forward pass rotates pairs (2i, 2i+1) instead of (i, i+d/2).
 *
 * Writing goes the other way (xllm convert --to gguf) for the types GGUF has,
 * so other engines can run the identical weights.
 */
#ifndef XLLM_FORMAT_GGUF_H
#define XLLM_FORMAT_GGUF_H

#include <cjson/cJSON.h>
#include "format/safetensors.h"
#include "xllm.h"

typedef struct gguf_model {
    st_archive *tensors;        /* HF names; owns the mmap */
    cJSON *config;              /* HF-style config.json object */
    cJSON *generation_config;   /* {"bos_token_id", "eos_token_id"} or NULL */
    char *tokenizer_json;       /* NUL-terminated HF tokenizer.json text, or NULL when the file has no tokenizer */
    char *tokenizer_config_json;/* NUL-terminated tokenizer_config.json text, or NULL */
} gguf_model;

/* Is this path a GGUF file (by its magic)? */
int gguf_is_gguf(const char *path);
/* Open and translate a GGUF file. Errors name the file and the problem
 * (bad magic, unsupported version, truncated metadata, unknown tensor type,
 * unsupported architecture, tensor data out of range). */
xllm_status gguf_open(const char *path, gguf_model *out, xllm_error *err);
void gguf_close(gguf_model *g);

/* Write a GGUF v3 file from n HF-named tensors (data anywhere in memory;
 * unfused names), an HF config object and the tokenizer.json /
 * tokenizer_config.json texts (may be NULL). Tensor types
 * written as stored when GGUF has them (F32, F16, BF16, Q8 g32 -> Q8_0,
 * Q4 g32 -> Q4_0, Q4M g32 -> Q4_1); other quantized layouts are an error.
 * Llama-architecture Q/K rows are permuted into llama.cpp's layout.
 * Written to a temporary file and renamed (atomic). */
xllm_status gguf_write(const char *dest, const st_tensor *tensors, size_t n, const cJSON *config,
                       const char *tokenizer_json, const char *tokenizer_config_json, xllm_error *err);

#endif
