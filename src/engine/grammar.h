/*
 * grammar.h - constrained decoding: a compiled context-free grammar, advanced
 * byte by byte, and each step's allowed-token mask over the vocabulary.
 *
 * Every constraint (JSON Schema, json_object, llama.cpp GBNF, a regular
 * expression, each with an optional literal prefix and suffix) compiles into
 * one form (gram): rules whose alternatives are sequences of byte classes and
 * rule references (grammar_build.c). A matcher (grammar_match.c) runs it as a
 * pushdown automaton: a state is a set of parse stacks, hash-consed, so the
 * same parse position is always the same state id and transitions are cached
 * per (state, byte). The mask (grammar_mask.c) walks a trie of the
 * vocabulary's token byte strings from a state, pruning a subtree at the first
 * byte no stack takes, and is cached per state.
 *
 * Files: grammar_build.c (the compiled form and its builder), grammar_utf8.c
 * (code-point sets as UTF-8 byte sequences), grammar_gbnf.c, grammar_regex.c,
 * grammar_json.c (front ends), grammar_match.c, grammar_mask.c.
 *
 * Thread-safety: a gram and a gram_vocab are immutable once built and may be
 * shared by any threads; a gram_matcher (its caches) belongs to one thread at
 * a time (the engine's scheduler thread).
 */
#ifndef XLLM_ENGINE_GRAMMAR_H
#define XLLM_ENGINE_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>
#include "xllm.h"

struct tokenizer;

/* Limits on what a user can ask for. */
#define GRAM_MAX_TEXT (1u << 20)        /* bytes of grammar / schema / regex text */
#define GRAM_MAX_AFFIX 4096             /* bytes of grammar_prefix / grammar_suffix */
#define GRAM_MAX_ELEMS (1u << 21)       /* elements of a compiled grammar */
#define GRAM_MAX_REPEAT 10000           /* a bounded repetition's upper bound */

typedef struct gram gram;
typedef struct gram_vocab gram_vocab;
typedef struct gram_matcher gram_matcher;

/* Compile a constraint (kind: xllm_grammar_kind; text may be NULL for
 * XLLM_GRAMMAR_JSON_OBJECT). An unsupported feature or a malformed text is
 * XLLM_ERR_INVALID_ARGUMENT with a message naming it. */
xllm_status gram_compile(int kind, const char *text, const char *prefix, const char *suffix, gram **out,
                         xllm_error *err);
void gram_free(gram *g);
int gram_n_rules(const gram *g);

/* The vocabulary as byte strings: each id's bytes as they appear inside a
 * text (byte-fallback and byte-level tokens as their bytes); special tokens
 * and ids with no bytes are never allowed by a mask. */
xllm_status gram_vocab_from_tokenizer(const struct tokenizer *t, int32_t vocab, gram_vocab **out, xllm_error *err);
/* From explicit byte strings (tests, benchmarks): bytes[i] may be NULL (never allowed). */
xllm_status gram_vocab_from_bytes(const char *const *bytes, const uint32_t *lens, int32_t vocab, gram_vocab **out,
                                  xllm_error *err);
void gram_vocab_free(gram_vocab *v);
int32_t gram_vocab_size(const gram_vocab *v);
const char *gram_vocab_token(const gram_vocab *v, int32_t id, size_t *len); /* NULL when never allowed */

/* A matcher of g over v (both must outlive it). NULL when out of memory. */
gram_matcher *gram_matcher_new(const gram *g, const gram_vocab *v);
void gram_matcher_free(gram_matcher *m);
const gram_vocab *gram_matcher_vocab(const gram_matcher *m);
/* The state before any output; -1 when out of memory. */
int32_t gram_start(gram_matcher *m);
/* The state after bytes s[0..n) from st; -1 when they leave the language
 * (or out of memory). */
int32_t gram_advance(gram_matcher *m, int32_t st, const char *s, size_t n);
int gram_accepting(const gram_matcher *m, int32_t st);   /* the output so far is complete */
int gram_can_continue(const gram_matcher *m, int32_t st); /* some byte may follow */
/* The allowed ids at st (a bitset of (vocab + 31) / 32 words, valid until the
 * next call on m); NULL when out of memory. */
const uint32_t *gram_mask(gram_matcher *m, int32_t st);
/* Memory held by the matcher's tables; gram_matcher_reset empties them (every
 * state id becomes invalid; the epoch counts resets). */
size_t gram_matcher_bytes(const gram_matcher *m);
void gram_matcher_reset(gram_matcher *m);
uint32_t gram_matcher_epoch(const gram_matcher *m);
#define GRAM_MATCHER_MAX_BYTES ((size_t)256 << 20)

#endif
