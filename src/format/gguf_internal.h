/*
 * gguf_internal.h - what gguf.c (reader), gguf_tok.c (tokenizer synthesis)
 * and gguf_write.c (writer) share: the parsed key/value table with typed,
 * bounds-checked accessors, the tensor name map, the Q/K row permutation and
 * the Llama-3 RoPE frequency factors.
 */
#ifndef XLLM_FORMAT_GGUF_INTERNAL_H
#define XLLM_FORMAT_GGUF_INTERNAL_H

#include "format/arch.h"
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "xllm.h"

/* GGUF value types */
enum {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6,
    GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12,
    GGUF_NTYPES = 13
};

/* ggml tensor types xllm maps (others are named in errors only) */
enum {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q5_0 = 6, GGML_Q5_1 = 7, GGML_Q8_0 = 8,
    GGML_Q2_K = 10, GGML_Q3_K = 11, GGML_Q4_K = 12, GGML_Q5_K = 13, GGML_Q6_K = 14, GGML_IQ4_NL = 20,
    GGML_IQ4_XS = 23, GGML_I8 = 24, GGML_I16 = 25,
    GGML_I32 = 26, GGML_I64 = 27, GGML_F64 = 28, GGML_BF16 = 30
};

#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct gguf_str {
    const char *p; /* into the file; not NUL-terminated */
    size_t len;
} gguf_str;

typedef struct gguf_kv {
    gguf_str key;
    uint32_t type;
    const unsigned char *val; /* scalars: the value; strings: the u64 length; arrays: the first element */
    uint32_t arr_type;        /* arrays only */
    uint64_t arr_n;
} gguf_kv;

/* The key/value table of one file, with a sticky error: an accessor that
 * finds a value of the wrong type records an error naming the file and the
 * key, and every later call is a no-op returning "absent". */
typedef struct gguf_ctx {
    const char *path;
    gguf_kv *kv;
    size_t n_kv;
    xllm_error *err;
    xllm_status st;
} gguf_ctx;

/* The tokenizer conversions' piece -> id maps (gguf_tok.c, gguf_write.c): open
 * addressing over a power-of-two table of at least twice count slots, all -1
 * (NULL when out of memory; *mask = size - 1), keyed by FNV-1a + fmix64. */
uint64_t gguf_piece_hash(const char *p, size_t n);
int32_t *gguf_slots_new(size_t count, size_t *mask);

size_t gguf_type_size(uint32_t type); /* fixed-size value types; 0 for string / array */
const gguf_kv *gguf_find(const gguf_ctx *c, const char *key);
/* 1 found (and of a usable type), 0 absent or error (c->st set on a wrong type). */
int gguf_get_int(gguf_ctx *c, const char *key, int64_t *out);   /* any integer type or bool */
int gguf_get_num(gguf_ctx *c, const char *key, double *out);    /* any number; f32 as its shortest decimal */
int gguf_get_bool(gguf_ctx *c, const char *key, int *out);
int gguf_get_str(gguf_ctx *c, const char *key, gguf_str *out);
/* An array of strings: *out (mem_malloc) holds *n views into the file. */
int gguf_get_str_array(gguf_ctx *c, const char *key, gguf_str **out, size_t *n);
/* An array of numbers: element i as double / int64. */
int gguf_get_num_array(gguf_ctx *c, const char *key, const gguf_kv **out);
double gguf_arr_num(const gguf_kv *kv, uint64_t i);
int64_t gguf_arr_int(const gguf_kv *kv, uint64_t i);
/* The shortest decimal that reads back as f (so 1e-5f reads as 1e-05). */
double gguf_f32_to_double(float f);

/* Tensor names: GGUF <-> HF in family a (arch.h: its layer names; the
 * embedding, final norm and output are the same in every family). Returns 0
 * when the name is not a known one (keep it as is), else writes the
 * translation: to_hf returns 2 for a tensor that stacks the experts (out:
 * expert e's name), 1 otherwise; from_hf sets *expert to the HF name's
 * expert index (-1: none). */
int gguf_name_to_hf(const arch_info *a, const char *gguf, int e, char *out, size_t cap);
int gguf_name_from_hf(const arch_info *a, const char *hf, char *out, size_t cap, int *expert);

/* Llama Q/K layout: within each head of d rows, GGUF row 2i + j holds HF row
 * j * d/2 + i (i < d/2, j in {0, 1}). */
static inline int64_t gguf_qk_src_row(int64_t gguf_row, int64_t head_dim) {
    int64_t h = gguf_row / head_dim, r = gguf_row % head_dim, half = head_dim / 2;
    return h * head_dim + (r % 2) * half + r / 2;
}

/* Llama-3 RoPE scaling as per-frequency factors (what llama.cpp stores in
 * rope_freqs.weight): out[i] for i < dim/2. */
void gguf_llama3_rope_factors(double theta, int dim, double factor, double low, double high, double orig,
                              float *out);

/* Tokenizer synthesis from tokenizer.ggml.* (gguf_tok.c). No tokenizer in the
 * file: both outputs NULL and XLLM_OK. Outputs are mem_malloc-ed text. */
xllm_status gguf_tok_synthesize(gguf_ctx *c, int64_t model_max_length, char **tokenizer_json,
                                char **tokenizer_config_json);

/* Known pre-tokenizer regexes (HF tokenizer.json form). */
extern const char *const gguf_regex_llama3;
extern const char *const gguf_regex_qwen2;

#endif
