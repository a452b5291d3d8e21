/*
 * tokenizer.h - HuggingFace tokenizer.json tokenizers (internal interface;
 * the public wrappers xllm_tokenizer_* / xllm_tokenize / xllm_detokenize in
 * xllm.h sit on top of it).
 *
 * The pipeline follows HF `tokenizers`: added tokens are split out first, the
 * rest goes normalizer -> pre-tokenizer -> model (BPE) -> post-processor;
 * decoding runs the decoder chain. Each stage is a small tagged component
 * read from tokenizer.json; an unknown component is a load error naming it.
 * A loaded tokenizer may encode and decode from several threads at once.
 */
#ifndef XLLM_TOKENIZER_H
#define XLLM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "xllm.h"

typedef struct tokenizer tokenizer;

/* path: a directory (tokenizer.json [+ tokenizer_config.json]) or a
 * tokenizer.json file. NULL + err on failure. */
tokenizer *tokenizer_load(const char *path, xllm_error *err);
/* The same from tokenizer.json text (and optional tokenizer_config.json text,
 * may be NULL), e.g. blobs inside an .xllm file or synthesized from GGUF;
 * label names the source in messages. The texts need not outlive the call. */
tokenizer *tokenizer_load_text(const char *json, size_t json_len, const char *config_json, size_t config_len,
                               const char *label, xllm_error *err);
void tokenizer_free(tokenizer *t);

/* add_special: apply the post-processor (e.g. BOS). *ids freed with xllm_free. */
xllm_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, int add_special,
                             int32_t **ids, size_t *n_ids, xllm_error *err);
/* flags: XLLM_TOKENIZE_* (include/xllm.h); tokenizer_encode parses special tokens. */
xllm_status tokenizer_encode_ex(const tokenizer *t, const char *text, size_t len, unsigned flags,
                                int32_t **ids, size_t *n_ids, xllm_error *err);
/* text with each special token's text wrapped in U+FDD0 ... U+FDD1 (and any
 * U+FDD0 / U+FDD1 already there replaced by U+FFFD): for XLLM_TOKENIZE_MARKED. */
xllm_status tokenizer_mark_special(const tokenizer *t, const char *text, size_t len, char **out, size_t *out_len,
                                   xllm_error *err);
/* *text NUL-terminated, freed with xllm_free. Ids out of range are an error. */
xllm_status tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n_ids, int skip_special,
                             char **text, size_t *len, xllm_error *err);

int32_t tokenizer_vocab_size(const tokenizer *t);   /* model vocab + added tokens */
int tokenizer_is_special(const tokenizer *t, int32_t id);
const char *tokenizer_id_to_piece(const tokenizer *t, int32_t id); /* NULL if out of range */
int32_t tokenizer_piece_to_id(const tokenizer *t, const char *piece); /* -1 if absent */
/* Every id's bytes as they read inside a text (not at its start: a Metaspace
 * space is kept), byte-fallback <0xXX> and byte-level tokens as their raw
 * bytes; special tokens and holes have none. *bytes holds them all, id i at
 * [(*off)[i], (*off)[i + 1]); *n ids. Both freed with xllm_free. For
 * constrained decoding (src/engine/grammar_mask.c). Thread-safe. */
xllm_status tokenizer_token_bytes(const tokenizer *t, char **bytes, int64_t **off, int32_t *n, xllm_error *err);
int32_t tokenizer_bos_id(const tokenizer *t);  /* -1 if none */
int32_t tokenizer_eos_id(const tokenizer *t);  /* -1 if none */

/*
 * Incremental detokenization for streaming: push one id at a time, get the
 * newly complete text. Never emits half a UTF-8 character, and the text of
 * all pushes concatenated equals tokenizer_decode of all ids (so leading-space
 * rules of Metaspace decoders are honoured). Text is held back while it ends
 * in an unfinished character (byte-fallback or byte-level tokens still arriving); call
 * detok_stream_flush at the end of a sequence. One case cannot be streamed
 * exactly: HF decodes a run of <0xXX> tokens that is not valid UTF-8 as all
 * U+FFFD, so a stray byte token after an already emitted character changes
 * text already out; the stream then stays valid UTF-8 but differs. Skipped
 * special tokens (skip_special) are dropped at push. Allocation happens only
 * when the internal buffers grow.
 */
typedef struct detok_stream detok_stream;
detok_stream *detok_stream_new(const tokenizer *t, int skip_special);
/* Start after a prompt: its last ids become the stream's context (emitted
 * already), so the first pushed id decodes as it does after the prompt in a
 * decode of prompt + completion ("Once upon a" + " time", not "time"). Call
 * before the first push. */
xllm_status detok_stream_seed(detok_stream *s, const int32_t *ids, size_t n, xllm_error *err);
/* Appends the new text to *out (pointer into the stream, valid until the next
 * call) with length *out_len. */
xllm_status detok_stream_push(detok_stream *s, int32_t id, const char **out, size_t *out_len,
                              xllm_error *err);
/* Emit whatever is still held back (an unfinished character at the end
 * shows as U+FFFD, as in a full decode); for the end of a sequence. The stream
 * stays usable. Same *out contract as detok_stream_push. */
xllm_status detok_stream_flush(detok_stream *s, const char **out, size_t *out_len, xllm_error *err);
void detok_stream_free(detok_stream *s);

/* The public xllm_tokenizer handle is the internal tokenizer itself. */
static inline const tokenizer *tokenizer_from_public(const xllm_tokenizer *t) { return (const tokenizer *)t; }
static inline const xllm_tokenizer *tokenizer_to_public(const tokenizer *t) { return (const xllm_tokenizer *)t; }

#endif
