/*
 * gguf_write.c - GGUF v3 writer (xllm convert --to gguf).
 *
 * From HF-named tensors, an HF config and the tokenizer.json text: the
 * `<arch>.*` keys llama.cpp reads, tokenizer.ggml.* (a BPE tokenizer with
 * byte fallback becomes a `llama` SentencePiece vocabulary whose scores
 * reproduce the merge ranks: score(piece) = -rank of the first merge that
 * produces it; byte-level BPE becomes `gpt2` with its merges and the
 * pre-tokenizer name of its regex), and the tensors under llama.cpp names in
 * the types GGUF has, llama Q/K rows permuted into llama.cpp's interleaved
 * RoPE layout (whole rows, so quantized rows move as they are). Written to a
 * temporary file next to the destination (base/tmpfile.h: mode 0644 less the
 * umask, removed by xllm_remove_temp_files on an interrupt) and renamed into
 * place.
 */
#include "format/gguf.h"
#include "format/gguf_internal.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"
#include "base/tmpfile.h"
#include "quant/quant.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ALIGN GGUF_DEFAULT_ALIGNMENT
#define GGUF_MAX_NAME 64 /* llama.cpp's limit, NUL included */

/* ------------------------------------------------------------ byte buffer */

typedef struct {
    unsigned char *p;
    size_t len, cap;
    int oom;
    uint64_t n_kv;
} wbuf;

static void wb_put(wbuf *w, const void *src, size_t n) {
    if (w->oom) return;
    if (n > SIZE_MAX - w->len || array_reserve(&w->p, &w->cap, w->len + n, 1, 4096)) {
        w->oom = 1;
        return;
    }
    memcpy(w->p + w->len, src, n);
    w->len += n;
}
static void wb_u32(wbuf *w, uint32_t v) { wb_put(w, &v, 4); }
static void wb_u64(wbuf *w, uint64_t v) { wb_put(w, &v, 8); }
static void wb_str(wbuf *w, const char *s, size_t n) {
    wb_u64(w, n);
    wb_put(w, s, n);
}
static void kv_key(wbuf *w, const char *key, uint32_t type) {
    wb_str(w, key, strlen(key));
    wb_u32(w, type);
    w->n_kv++;
}
static void kv_u32(wbuf *w, const char *key, uint32_t v) { kv_key(w, key, GGUF_U32), wb_u32(w, v); }
static void kv_f32(wbuf *w, const char *key, float v) { kv_key(w, key, GGUF_F32), wb_put(w, &v, 4); }
static void kv_bool(wbuf *w, const char *key, int v) {
    unsigned char b = v ? 1 : 0;
    kv_key(w, key, GGUF_BOOL);
    wb_put(w, &b, 1);
}
static void kv_string(wbuf *w, const char *key, const char *v) { kv_key(w, key, GGUF_STRING), wb_str(w, v, strlen(v)); }
static void kv_arr(wbuf *w, const char *key, uint32_t type, uint64_t n) {
    kv_key(w, key, GGUF_ARRAY);
    wb_u32(w, type);
    wb_u64(w, n);
}

/* ------------------------------------------------------------ config */

typedef struct {
    const cJSON *cfg;
    xllm_error *err;
    xllm_status st;
} cfg_r;

static const cJSON *cfield(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* def < 0: required */
static int64_t cint(cfg_r *r, const char *k, int64_t def, int64_t lo, int64_t hi) {
    const cJSON *v = cfield(r->cfg, k);
    if (!v) {
        if (def < 0 && !r->st) r->st = err_setf(r->err, XLLM_ERR_FORMAT, "gguf_write: config has no \"%s\"", k);
        return def < 0 ? 0 : def;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double)lo ||
        v->valuedouble > (double)hi) {
        if (!r->st)
            r->st = err_setf(r->err, XLLM_ERR_FORMAT, "gguf_write: config \"%s\" must be an integer in [%lld, %lld]",
                                k, (long long)lo, (long long)hi);
        return def < 0 ? 0 : def;
    }
    return (int64_t)v->valuedouble;
}

static double cnum(cfg_r *r, const cJSON *o, const char *k, double def) {
    const cJSON *v = cfield(o, k);
    if (!v) return def;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        if (!r->st) r->st = err_setf(r->err, XLLM_ERR_FORMAT, "gguf_write: config \"%s\" must be a number", k);
        return def;
    }
    return v->valuedouble;
}

/* LongRoPE from an HF config, read as model_config.c reads it (transformers'
 * _compute_longrope_parameters): the two factor sets (rotated values / 2 each),
 * the pretrained context and the cos/sin scale, which llama.cpp takes as
 * rope.scaling.attn_factor (its converter's sqrt(1 + ln s / ln orig)). */
typedef struct {
    float *shrt, *lng; /* one allocation: short then long */
    double orig, attn_factor;
} longrope;

static xllm_status longrope_read(cfg_r *r, const cJSON *config, const cJSON *rs, int rot, int64_t ctx_len,
                                 longrope *lr) {
    int half = rot / 2;
    const char *names[2] = {"short_factor", "long_factor"};
    lr->shrt = mem_malloc_array((size_t)half * 2, sizeof(float));
    if (!lr->shrt) return r->st = err_setf(r->err, XLLM_ERR_OUT_OF_MEMORY, "gguf_write: out of memory");
    lr->lng = lr->shrt + half;
    for (int k = 0; k < 2; k++) {
        const cJSON *a = cfield(rs, names[k]), *e;
        int n = 0;
        if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != half)
            return r->st = err_setf(r->err, XLLM_ERR_FORMAT, "gguf_write: rope_scaling.%s must hold %d numbers",
                                       names[k], half);
        cJSON_ArrayForEach(e, a) {
            if (!cJSON_IsNumber(e) || !(e->valuedouble > 0))
                return r->st = err_setf(r->err, XLLM_ERR_FORMAT, "gguf_write: rope_scaling.%s must be positive",
                                           names[k]);
            (k ? lr->lng : lr->shrt)[n++] = (float)e->valuedouble;
        }
    }
    double orig = cnum(r, config, "original_max_position_embeddings", 0), factor;
    if (orig > 0) factor = (double)ctx_len / orig;
    else orig = cnum(r, rs, "original_max_position_embeddings", (double)ctx_len), factor = cnum(r, rs, "factor", 1);
    double af = cnum(r, rs, "attention_factor", 0);
    if (!(af > 0)) af = factor <= 1 ? 1.0 : sqrt(1 + log(factor) / log(orig));
    if (!(orig >= 1) || !isfinite(af))
        return r->st = err_setf(r->err, XLLM_ERR_FORMAT, "gguf_write: bad longrope rope_scaling");
    lr->orig = orig;
    lr->attn_factor = af;
    return r->st;
}

/* YaRN from an HF config (read as model_config.c's read_yarn) into the keys
 * llama.cpp reads: factor, original context, the betas when not 32 / 1, the
 * cos/sin scale beyond llama.cpp's own 1 + 0.1 ln(factor) as
 * rope.scaling.attn_factor; for DeepSeek (MLA) yarn_log_multiplier = 0.1
 * mscale_all_dim, which llama.cpp reads as cos/sin unscaled and the softmax
 * x mscale(factor, mscale_all_dim)^2 (HF's mscale == mscale_all_dim), or no
 * multiplier: cos/sin x mscale(factor, 1), the softmax x its square (HF's
 * mscale_all_dim 1 without mscale). Other DeepSeek settings are refused. */
typedef struct {
    double factor, orig, beta_fast, beta_slow, attn_factor, log_mul;
} yarn_keys;

static xllm_status yarn_read(cfg_r *r, const cJSON *rs, int mla, int64_t ctx_len, yarn_keys *y) {
    double f = cnum(r, rs, "factor", 0), ms = cnum(r, rs, "mscale", 0), msa = cnum(r, rs, "mscale_all_dim", 0);
    double af = cnum(r, rs, "attention_factor", 0);
    y->factor = f;
    y->orig = cnum(r, rs, "original_max_position_embeddings", (double)ctx_len);
    y->beta_fast = cnum(r, rs, "beta_fast", 0);
    y->beta_slow = cnum(r, rs, "beta_slow", 0);
    if (r->st) return r->st;
    if (!(f > 0) || !(y->orig >= 1) || y->beta_fast < 0 || y->beta_slow < 0 || af < 0)
        return r->st = err_setf(r->err, XLLM_ERR_FORMAT, "gguf_write: bad yarn rope_scaling");
    const cJSON *tr = cfield(rs, "truncate");
    if (tr && !cJSON_IsTrue(tr))
        return r->st = err_setf(r->err, XLLM_ERR_UNSUPPORTED, "gguf_write: yarn with truncate false has no GGUF form");
    double m1 = arch_yarn_mscale(f, 1);
    if (!(af > 0)) af = (ms != 0 && msa != 0) ? arch_yarn_mscale(f, ms) / arch_yarn_mscale(f, msa) : m1;
    y->attn_factor = 1, y->log_mul = 0;
    if (!mla) {
        y->attn_factor = af / m1;
    } else if (msa != 0 && fabs(af - 1) <= 1e-6) {
        y->log_mul = 0.1 * msa;
    } else if (!(msa == 1 && fabs(af - m1) <= 1e-6)) {
        return r->st = err_setf(r->err, XLLM_ERR_UNSUPPORTED,
                                "gguf_write: DeepSeek yarn with cos/sin scale %g and mscale_all_dim %g has no GGUF form "
                                "(llama.cpp reads mscale = mscale_all_dim)", af, msa);
    }
    return XLLM_OK;
}

static int cbool(const cJSON *o, const char *k) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, k)); }

/* ------------------------------------------------------------ tensors */

typedef struct {
    char name[GGUF_MAX_NAME];
    uint32_t type, n_dims;
    uint64_t ne[4];
    const unsigned char *data;
    size_t nbytes;
    int64_t rows;       /* for the Q/K row permutation */
    size_t row_bytes;
    int64_t perm_hd;    /* 0: written as is; else head size of the permutation */
    uint64_t offset;
    const unsigned char **parts; /* stacked experts: n_parts pieces of nbytes / n_parts each (owned array) */
    uint64_t n_parts;
    float *owned;       /* data computed here (Gemma's norms + 1), freed with the list */
} out_tensor;

typedef struct {
    out_tensor *t;
    size_t n, cap;
} out_list;

static out_tensor *out_new(out_list *l) {
    if (array_reserve(&l->t, &l->cap, l->n + 1, sizeof *l->t, 64)) return NULL;
    out_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    return t;
}

static int ggml_type_of(const st_tensor *t, uint32_t *type) {
    switch (t->dtype) {
    case XLLM_DT_F32: *type = GGML_F32; return 1;
    case XLLM_DT_F16: *type = GGML_F16; return 1;
    case XLLM_DT_BF16: *type = GGML_BF16; return 1;
    case XLLM_DT_F64: *type = GGML_F64; return 1;
    case XLLM_DT_I8: *type = GGML_I8; return 1;
    case XLLM_DT_I16: *type = GGML_I16; return 1;
    case XLLM_DT_I32: *type = GGML_I32; return 1;
    case XLLM_DT_I64: *type = GGML_I64; return 1;
    case XLLM_DT_Q8: *type = GGML_Q8_0; return t->group == QK;
    case XLLM_DT_Q4: *type = GGML_Q4_0; return t->group == QK;
    case XLLM_DT_Q4M: *type = GGML_Q4_1; return t->group == QK;
    /* llama.cpp's block types: written as stored */
    case XLLM_DT_Q5_0: *type = GGML_Q5_0; return 1;
    case XLLM_DT_Q5_1: *type = GGML_Q5_1; return 1;
    case XLLM_DT_IQ4_NL: *type = GGML_IQ4_NL; return 1;
    case XLLM_DT_Q2_K: *type = GGML_Q2_K; return 1;
    case XLLM_DT_Q3_K: *type = GGML_Q3_K; return 1;
    case XLLM_DT_Q4_K: *type = GGML_Q4_K; return 1;
    case XLLM_DT_Q5_K: *type = GGML_Q5_K; return 1;
    case XLLM_DT_Q6_K: *type = GGML_Q6_K; return 1;
    case XLLM_DT_IQ4_XS: *type = GGML_IQ4_XS; return 1;
    default: return 0;
    }
}

typedef struct {
    const arch_info *A;
    int is_llama, interleaved;
    int64_t heads, kv_heads;
    float norm_offset;  /* added to 1-D norm weights (HF Gemma stores w - 1; GGUF w) */
    int64_t n_experts;
    int64_t mla_nope, mla_v, mla_rank; /* DeepSeek's MLA: qk_nope_head_dim, v_head_dim, kv_lora_rank (0: none) */
} tensor_ctx;

static int ends_with(const char *s, const char *suffix);

static out_tensor *out_find(out_list *l, const char *name) {
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->t[i].name, name)) return &l->t[i];
    return NULL;
}

/* One HF tensor (or a row slice of a fused one) into the output list. */
static xllm_status add_tensor(out_list *l, const tensor_ctx *tc, const st_tensor *t, const char *hf_name,
                              int64_t row0, int64_t nrows, xllm_error *err) {
    uint32_t type;
    if (!ggml_type_of(t, &type)) {
        if (dtype_is_quant(t->dtype))
            return err_setf(err, XLLM_ERR_UNSUPPORTED,
                               "gguf_write: tensor %s is %s with group %d; GGUF holds only group 32 (Q8_0, Q4_0, Q4_1)",
                               t->name, dtype_name(t->dtype), t->group);
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "gguf_write: tensor %s has type %s, which GGUF does not hold",
                           t->name, dtype_name(t->dtype));
    }
    if (t->ndim < 1 || t->ndim > 4)
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "gguf_write: tensor %s has %d dimensions (GGUF: 1 to 4)", t->name,
                           t->ndim);
    int64_t cols = t->shape[t->ndim - 1], rows = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 1) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "gguf_write: tensor %s has an empty dimension", t->name);
        if (d < t->ndim - 1) rows *= t->shape[d];
    }
    size_t row_bytes = quant_row_bytes(t->dtype, t->group, cols);
    if (dtype_is_quant(t->dtype) && !quant_format_ok(t->dtype, t->group, cols))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "gguf_write: tensor %s: bad quantized shape", t->name);
    if (t->ndim == 1) { /* a vector: rows of one element for the permutation */
        rows = cols;
        row_bytes = dtype_is_quant(t->dtype) ? row_bytes : dtype_size(t->dtype);
    }
    size_t want = t->ndim == 1 ? (dtype_is_quant(t->dtype) ? quant_row_bytes(t->dtype, t->group, cols)
                                                                 : (size_t)cols * dtype_size(t->dtype))
                               : (size_t)rows * row_bytes;
    if (t->nbytes != want || !t->data)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "gguf_write: tensor %s: %zu bytes for a shape that needs %zu",
                           t->name, t->nbytes, want);
    if (nrows < 0) row0 = 0, nrows = rows;

    char gname[256];
    int expert;
    const char *name = gguf_name_from_hf(tc->A, hf_name, gname, sizeof gname, &expert) ? gname : hf_name;
    /* (DeepSeek's per-head k_b / v_b stack the heads the same way) */
    int64_t n_stack = strstr(hf_name, "self_attn.k_b_proj.") || strstr(hf_name, "self_attn.v_b_proj.") ? tc->heads
                                                                                                      : tc->n_experts;
    if (expert >= 0) { /* one expert of a stacked [n_experts][rows][cols] tensor */
        if (expert >= n_stack || t->ndim != 2 || nrows != rows)
            return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "gguf_write: expert tensor %s: expert %d of %lld, or "
                               "not a whole matrix", hf_name, expert, (long long)n_stack);
        out_tensor *o = out_find(l, name);
        if (!o) {
            if (!(o = out_new(l))) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "gguf_write: out of memory");
            snprintf(o->name, sizeof o->name, "%s", name);
            o->type = type;
            o->n_dims = 3;
            o->ne[0] = (uint64_t)cols, o->ne[1] = (uint64_t)rows, o->ne[2] = (uint64_t)n_stack;
            o->n_parts = (uint64_t)n_stack;
            o->parts = mem_calloc((size_t)n_stack, sizeof *o->parts);
            o->nbytes = (size_t)n_stack * (size_t)rows * row_bytes;
            if (!o->parts) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "gguf_write: out of memory");
        }
        if (o->type != type || o->ne[0] != (uint64_t)cols || o->ne[1] != (uint64_t)rows || o->parts[expert])
            return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "gguf_write: expert tensor %s differs from its "
                               "siblings (type or shape) or comes twice", hf_name);
        o->parts[expert] = t->data;
        return XLLM_OK;
    }
    out_tensor *o = out_new(l);
    if (!o) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "gguf_write: out of memory");
    if (strlen(name) >= GGUF_MAX_NAME)
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "gguf_write: tensor name %s is too long for GGUF (63 bytes)", name);
    snprintf(o->name, sizeof o->name, "%s", name);
    o->type = type;
    o->n_dims = (uint32_t)t->ndim;
    for (int d = 0; d < t->ndim; d++) o->ne[d] = (uint64_t)t->shape[t->ndim - 1 - d];
    if (t->ndim == 2 && t->shape[0] == 1 && ends_with(hf_name, "shared_expert_gate.weight"))
        o->n_dims = 1; /* llama.cpp's ffn_gate_inp_shexp is a vector */
    if (nrows != rows) { /* a row slice of a fused tensor */
        if (t->ndim > 2) return err_setf(err, XLLM_ERR_INTERNAL, "gguf_write: cannot slice %s", t->name);
        o->ne[t->ndim - 1] = (uint64_t)nrows;
    }
    o->data = (const unsigned char *)t->data + (size_t)row0 * row_bytes;
    o->nbytes = (size_t)nrows * row_bytes;
    o->rows = nrows;
    o->row_bytes = row_bytes;
    if (tc->norm_offset != 0 && t->ndim == 1 && ends_with(hf_name, "norm.weight")) { /* Gemma: GGUF holds 1 + w */
        if (dtype_is_quant(t->dtype))
            return err_setf(err, XLLM_ERR_UNSUPPORTED, "gguf_write: quantized norm %s", hf_name);
        o->owned = mem_malloc_array((size_t)cols, sizeof(float));
        if (!o->owned) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "gguf_write: out of memory");
        dtype_to_f32(t->dtype, t->data, o->owned, (size_t)cols);
        for (int64_t i = 0; i < cols; i++) o->owned[i] += tc->norm_offset;
        o->type = GGML_F32;
        o->data = (const unsigned char *)o->owned;
        o->nbytes = (size_t)cols * sizeof(float);
        o->rows = cols;
        o->row_bytes = sizeof(float);
    }

    /* llama Q/K (weight and bias): HF rotate-half rows -> llama.cpp interleaved pairs */
    size_t nl = strlen(name);
    int is_q = nl > 12 && (strstr(name, ".attn_q.weight") || strstr(name, ".attn_q.bias"));
    int is_k = nl > 12 && (strstr(name, ".attn_k.weight") || strstr(name, ".attn_k.bias"));
    if (tc->is_llama && !tc->interleaved && (is_q || is_k) && t->ndim <= 2) {
        int64_t h = is_q ? tc->heads : tc->kv_heads;
        if (nrows % h || (nrows / h) % 2)
            return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                               "gguf_write: %s has %lld rows, not %lld heads of an even size", t->name,
                               (long long)nrows, (long long)h);
        o->perm_hd = nrows / h;
    }
    return XLLM_OK;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* DeepSeek's whole kv_b_proj (HF: per head [k_nope rows | v rows] x kv_lora)
 * as llama.cpp's MLA GGUFs hold it: attn_k_b, per head the k part
 * transposed ({nope, kv_lora, heads}), and attn_v_b, per head the v part
 * ({kv_lora, v_head, heads}); computed copies. */
static xllm_status add_kv_b(out_list *l, const tensor_ctx *tc, const st_tensor *t, xllm_error *err) {
    int64_t H = tc->heads, nope = tc->mla_nope, vd = tc->mla_v, r = tc->mla_rank;
    uint32_t type;
    if (!ggml_type_of(t, &type) || dtype_is_quant(t->dtype) || t->ndim != 2 || t->shape[0] != H * (nope + vd) ||
        t->shape[1] != r || t->nbytes != (size_t)(H * (nope + vd) * r) * dtype_size(t->dtype))
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "gguf_write: %s must be an F32, F16 or BF16 [%lld, %lld] matrix",
                           t->name, (long long)(H * (nope + vd)), (long long)r);
    char gname[256];
    int expert;
    if (!gguf_name_from_hf(tc->A, t->name, gname, sizeof gname, &expert))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "gguf_write: %s is not a layer tensor", t->name);
    const char *tail = strstr(gname, "attn_kv_b.weight");
    size_t es = dtype_size(t->dtype), rb = (size_t)r * es;
    const unsigned char *src = t->data;
    for (int part = 0; part < 2; part++) {
        out_tensor *o = out_new(l);
        if (!o) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "gguf_write: out of memory");
        snprintf(o->name, sizeof o->name, "%.*s%s", (int)(tail - gname), gname, part ? "attn_v_b.weight" : "attn_k_b.weight");
        int64_t rows = part ? vd : nope;
        o->type = type;
        o->n_dims = 3;
        o->ne[0] = (uint64_t)(part ? r : nope), o->ne[1] = (uint64_t)(part ? vd : r), o->ne[2] = (uint64_t)H;
        o->nbytes = (size_t)(H * rows) * rb;
        unsigned char *d = mem_malloc(o->nbytes);
        if (!d) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "gguf_write: out of memory");
        o->owned = (float *)(void *)d;
        o->data = d;
        for (int64_t h = 0; h < H; h++) {
            const unsigned char *head = src + (size_t)(h * (nope + vd)) * rb;
            if (part) { /* v rows as they are */
                memcpy(d + (size_t)(h * vd) * rb, head + (size_t)nope * rb, (size_t)vd * rb);
                continue;
            }
            for (int64_t a = 0; a < r; a++) /* k_b[h][a][b] = kv_b[h (nope + vd) + b][a] */
                for (int64_t b = 0; b < nope; b++)
                    memcpy(d + ((size_t)(h * r + a) * (size_t)nope + (size_t)b) * es, head + (size_t)b * rb + (size_t)a * es, es);
        }
    }
    return XLLM_OK;
}

/* Fused .xllm tensors (qkv_proj, gate_up_proj) go out as their parts. */
static xllm_status add_hf_tensor(out_list *l, const tensor_ctx *tc, const st_tensor *t, int64_t head_dim, int64_t ff,
                                 xllm_error *err) {
    if (ends_with(t->name, "rotary_emb.inv_freq")) return XLLM_OK;
    if (tc->mla_rank && ends_with(t->name, "self_attn.kv_b_proj.weight")) return add_kv_b(l, tc, t, err);
    const char *fused[] = {"self_attn.qkv_proj.weight", "self_attn.qkv_proj.bias", "mlp.gate_up_proj.weight"};
    char gname[256];
    int expert;
    for (int f = 0; f < 3; f++) {
        if (!ends_with(t->name, fused[f])) continue;
        if (arch_name_from_hf(tc->A, t->name, gname, sizeof gname, &expert)) break; /* the family's own (Phi-3) */
        size_t plen = strlen(t->name) - strlen(fused[f]);
        char name[512];
        int64_t rows = t->shape[0];
        if (t->ndim > 2) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "gguf_write: %s is not a matrix", t->name);
        if (f < 2) {
            int64_t q = tc->heads * head_dim, k = tc->kv_heads * head_dim;
            if (rows != q + 2 * k)
                return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "gguf_write: %s has %lld rows, q/k/v need %lld",
                                   t->name, (long long)rows, (long long)(q + 2 * k));
            const char *part[3] = {"q_proj", "k_proj", "v_proj"};
            int64_t start[3] = {0, q, q + k}, n[3] = {q, k, k};
            for (int p = 0; p < 3; p++) {
                snprintf(name, sizeof name, "%.*sself_attn.%s.%s", (int)plen, t->name, part[p], f == 0 ? "weight" : "bias");
                xllm_status st = add_tensor(l, tc, t, name, start[p], n[p], err);
                if (st) return st;
            }
        } else {
            if (rows != 2 * ff)
                return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "gguf_write: %s has %lld rows, gate+up need %lld",
                                   t->name, (long long)rows, (long long)(2 * ff));
            for (int p = 0; p < 2; p++) {
                snprintf(name, sizeof name, "%.*smlp.%s.weight", (int)plen, t->name, p ? "up_proj" : "gate_proj");
                xllm_status st = add_tensor(l, tc, t, name, p * ff, ff, err);
                if (st) return st;
            }
        }
        return XLLM_OK;
    }
    return add_tensor(l, tc, t, t->name, 0, -1, err);
}

/* ------------------------------------------------------------ tokenizer */

typedef struct {
    char **tok;   /* id -> piece (owned) */
    size_t n;
    float *score;
    int32_t *type;
    char **merges; /* gpt2 only, "a b" (owned) */
    size_t n_merges;
    int spm;
    const char *pre;
    int64_t bos, eos, unk, pad;
    int add_bos, add_eos, space_prefix;
    char *chat_template;
} tok_out;

static void tok_out_free(tok_out *t) {
    for (size_t i = 0; t->tok && i < t->n; i++) xllm_free(t->tok[i]);
    for (size_t i = 0; t->merges && i < t->n_merges; i++) xllm_free(t->merges[i]);
    xllm_free(t->tok);
    xllm_free(t->merges);
    xllm_free(t->score);
    xllm_free(t->type);
    xllm_free(t->chat_template);
}

static const cJSON *find_template(const cJSON *pp) {
    if (!cJSON_IsObject(pp)) return NULL;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(pp, "type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "TemplateProcessing") == 0) return pp;
    if (cJSON_IsString(type) && strcmp(type->valuestring, "Sequence") == 0) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pp, "processors")) {
            const cJSON *t = find_template(e);
            if (t) return t;
        }
    }
    return NULL;
}

/* id of a template SpecialToken item, or -1 */
static int64_t template_special(const cJSON *tp, const cJSON *item) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(item, "SpecialToken");
    const cJSON *id = s ? cJSON_GetObjectItemCaseSensitive(s, "id") : NULL;
    if (!cJSON_IsString(id)) return -1;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tp, "special_tokens"), id->valuestring);
    const cJSON *ids = e ? cJSON_GetObjectItemCaseSensitive(e, "ids") : NULL;
    const cJSON *first = cJSON_IsArray(ids) ? cJSON_GetArrayItem(ids, 0) : NULL;
    return cJSON_IsNumber(first) && first->valuedouble >= 0 ? (int64_t)first->valuedouble : -1;
}

static int has_prepend(const cJSON *nz) {
    if (!cJSON_IsObject(nz)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(nz, "type");
    if (!cJSON_IsString(type)) return 0;
    if (strcmp(type->valuestring, "Prepend") == 0) return 1;
    if (strcmp(type->valuestring, "Sequence") == 0) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(nz, "normalizers")) if (has_prepend(e)) return 1;
    }
    return 0;
}

static int metaspace_prefix(const cJSON *pt) {
    if (!cJSON_IsObject(pt)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(pt, "type");
    if (!cJSON_IsString(type)) return 0;
    if (strcmp(type->valuestring, "Metaspace") == 0) {
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(pt, "prepend_scheme");
        if (cJSON_IsString(ps)) return strcmp(ps->valuestring, "never") != 0;
        const cJSON *ap = cJSON_GetObjectItemCaseSensitive(pt, "add_prefix_space");
        return !cJSON_IsFalse(ap);
    }
    if (strcmp(type->valuestring, "Sequence") == 0) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers")) if (metaspace_prefix(e)) return 1;
    }
    return 0;
}

/* tokenizer.ggml.pre for a byte-level pre-tokenizer, or NULL */
static const char *detect_pre(const cJSON *pt) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(pt, "type");
    if (!cJSON_IsString(type)) return NULL;
    if (strcmp(type->valuestring, "ByteLevel") == 0) {
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(pt, "use_regex");
        return cJSON_IsFalse(ur) ? NULL : "gpt2";
    }
    if (strcmp(type->valuestring, "Sequence") != 0) return NULL;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
    if (cJSON_GetArraySize(list) != 2) return NULL;
    const cJSON *split = cJSON_GetArrayItem(list, 0), *bl = cJSON_GetArrayItem(list, 1);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(split, "type"), *bt = cJSON_GetObjectItemCaseSensitive(bl, "type");
    if (!cJSON_IsString(st) || strcmp(st->valuestring, "Split") != 0 || !cJSON_IsString(bt) ||
        strcmp(bt->valuestring, "ByteLevel") != 0 || !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(bl, "use_regex")))
        return NULL;
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(split, "pattern"), "Regex");
    const cJSON *beh = cJSON_GetObjectItemCaseSensitive(split, "behavior");
    if (!cJSON_IsString(re) || !cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0 ||
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(split, "invert")))
        return NULL;
    if (strcmp(re->valuestring, gguf_regex_llama3) == 0) return "llama-bpe";
    if (strcmp(re->valuestring, gguf_regex_qwen2) == 0) return "qwen2";
    return NULL;
}

static int is_byte_piece(const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    return strlen(s) == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && strchr(hex, s[3]) && strchr(hex, s[4]) &&
           s[5] == '>';
}

/* Split one merges entry ("a b" or ["a", "b"]) into fresh strings. */
static int merge_parts(const cJSON *m, char **a, char **b) {
    *a = *b = NULL;
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' ')) return -1;
        *a = mem_strndup(s, (size_t)(sp - s));
        *b = mem_strdup(sp + 1);
    } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
               cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
        *a = mem_strdup(cJSON_GetArrayItem(m, 0)->valuestring);
        *b = mem_strdup(cJSON_GetArrayItem(m, 1)->valuestring);
    } else {
        return -1;
    }
    if (!*a || !*b) {
        xllm_free(*a);
        xllm_free(*b);
        *a = *b = NULL;
        return -2;
    }
    return 0;
}

/* a simple string -> id hash for the vocabulary */
typedef struct {
    int32_t *slots;
    size_t mask;
    char *const *tok;
} smap;

static int smap_init(smap *m, char *const *tok, size_t n) {
    if (!(m->slots = gguf_slots_new(n, &m->mask))) return -1;
    m->tok = tok;
    for (size_t id = 0; id < n; id++) {
        size_t i = (size_t)gguf_piece_hash(tok[id], strlen(tok[id])) & m->mask;
        while (m->slots[i] >= 0 && strcmp(tok[m->slots[i]], tok[id]) != 0) i = (i + 1) & m->mask;
        if (m->slots[i] < 0) m->slots[i] = (int32_t)id; /* the first id of a duplicated piece */
    }
    return 0;
}
static int32_t smap_get(const smap *m, const char *s) {
    size_t i = (size_t)gguf_piece_hash(s, strlen(s)) & m->mask;
    while (m->slots[i] >= 0) {
        if (strcmp(m->tok[m->slots[i]], s) == 0) return m->slots[i];
        i = (i + 1) & m->mask;
    }
    return -1;
}

static xllm_status tok_oom(xllm_error *err) {
    return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "gguf_write: out of memory converting the tokenizer");
}

/* The tokenizer's kind: a BPE model, SentencePiece-style (byte fallback) or
 * byte-level with a pre-tokenizer GGUF can name. *model: its "model" object. */
static xllm_status tok_kind(const cJSON *root, tok_out *o, const cJSON **model, xllm_error *err) {
    *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *mtype = cJSON_GetObjectItemCaseSensitive(*model, "type");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(*model, "vocab");
    if (!cJSON_IsObject(*model) || (mtype && (!cJSON_IsString(mtype) || strcmp(mtype->valuestring, "BPE") != 0)) ||
        !cJSON_IsObject(vocab))
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "gguf_write: only BPE tokenizers can be written to GGUF");
    o->spm = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(*model, "byte_fallback"));
    if (!o->spm) {
        o->pre = detect_pre(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"));
        if (!o->pre)
            return err_setf(err, XLLM_ERR_UNSUPPORTED,
                               "gguf_write: the tokenizer's pre-tokenizer has no GGUF name (supported: byte fallback "
                               "SentencePiece-style BPE, and byte-level BPE with the GPT-2, Llama 3 or Qwen2 regex)");
    }
    return XLLM_OK;
}

/* Every id's piece and type: the vocab, the added tokens, and "[PADi]" for
 * ids neither names (up to vocab_size: one token per embedding row). */
static xllm_status tok_pieces(const cJSON *root, const cJSON *vocab, int64_t vocab_size, tok_out *o, xllm_error *err) {
    int64_t max_id = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= (1 << 24) || e->valuedouble != floor(e->valuedouble))
            return err_setf(err, XLLM_ERR_FORMAT, "gguf_write: tokenizer vocab entry has a bad id");
        if ((int64_t)e->valuedouble > max_id) max_id = (int64_t)e->valuedouble;
    }
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id"), *ct = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 24) || !cJSON_IsString(ct))
            return err_setf(err, XLLM_ERR_FORMAT, "gguf_write: tokenizer added_tokens entry is malformed");
        if ((int64_t)id->valuedouble > max_id) max_id = (int64_t)id->valuedouble;
    }
    size_t n = (size_t)(max_id + 1);
    if (vocab_size > (int64_t)n) n = (size_t)vocab_size; /* llama.cpp wants one token per embedding row */
    if (n == 0) return err_setf(err, XLLM_ERR_FORMAT, "gguf_write: the tokenizer has no vocabulary");
    o->n = n;
    o->tok = mem_calloc(n, sizeof *o->tok);
    o->score = mem_calloc(n, sizeof *o->score);
    o->type = mem_malloc_array(n, sizeof *o->type);
    if (!o->tok || !o->score || !o->type) return tok_oom(err);
    for (size_t i = 0; i < n; i++) o->type[i] = 1;
    cJSON_ArrayForEach(e, vocab) {
        size_t id = (size_t)e->valuedouble;
        if (o->tok[id])
            return err_setf(err, XLLM_ERR_FORMAT, "gguf_write: tokenizer id %zu is given to two pieces", id);
        if (!(o->tok[id] = mem_strdup(e->string))) return tok_oom(err);
        if (o->spm && is_byte_piece(e->string)) o->type[id] = 6;
    }
    cJSON_ArrayForEach(e, added) {
        size_t id = (size_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
        const char *content = cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring;
        if (o->tok[id] && strcmp(o->tok[id], content) != 0)
            return err_setf(err, XLLM_ERR_FORMAT, "gguf_write: added token %zu (%s) differs from the vocab piece %s",
                               id, content, o->tok[id]);
        if (!o->tok[id] && !(o->tok[id] = mem_strdup(content))) return tok_oom(err);
        o->type[id] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special")) ? 3 : 4;
    }
    for (size_t i = 0; i < n; i++) {
        if (o->tok[i]) continue;
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%zu]", i);
        if (!(o->tok[i] = mem_strdup(pad))) return tok_oom(err);
        o->type[i] = 5;
    }
    return XLLM_OK;
}

/* One merge "a b": byte-level BPE keeps it as GGUF's "a b" string;
 * SentencePiece-style gives the piece a+b its score, -(rank of its first merge). */
static xllm_status tok_merge(tok_out *o, const smap *sm, const char *a, const char *b, size_t k, xllm_error *err) {
    size_t la = strlen(a), lb = strlen(b);
    if (!o->spm) {
        if (strchr(a, ' ') || strchr(b, ' '))
            return err_setf(err, XLLM_ERR_UNSUPPORTED,
                               "gguf_write: tokenizer merge %zu has a piece with a space, which GGUF merges cannot hold", k);
        char *s = mem_malloc(la + lb + 2);
        if (!s) return tok_oom(err);
        memcpy(s, a, la);
        s[la] = ' ';
        memcpy(s + la + 1, b, lb + 1);
        o->merges[o->n_merges++] = s;
        return XLLM_OK;
    }
    char *s = mem_malloc(la + lb + 1);
    if (!s) return tok_oom(err);
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    int32_t id = smap_get(sm, s);
    xllm_free(s);
    if (id >= 0 && isnan(o->score[id])) o->score[id] = -(float)k;
    return XLLM_OK;
}

/* The merges: GGUF's merge list (byte-level) or the pieces' scores
 * (SentencePiece-style, with the space-prefix flag). */
static xllm_status tok_merges(const cJSON *root, const cJSON *merges, const smap *sm, tok_out *o, xllm_error *err) {
    size_t n = o->n, nm = (size_t)cJSON_GetArraySize(merges);
    if (!o->spm) {
        o->merges = mem_calloc(nm ? nm : 1, sizeof *o->merges);
        if (!o->merges) return tok_oom(err);
    } else {
        for (size_t i = 0; i < n; i++) o->score[i] = NAN; /* "not produced by a merge" until seen */
    }
    size_t k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, merges) {
        char *a, *b;
        int r = merge_parts(e, &a, &b);
        if (r == -2) return tok_oom(err);
        if (r) return err_setf(err, XLLM_ERR_FORMAT, "gguf_write: tokenizer merge %zu is malformed", k);
        xllm_status st = tok_merge(o, sm, a, b, k, err);
        xllm_free(a);
        xllm_free(b);
        if (st) return st;
        k++;
    }
    if (o->spm) {
        /* normal pieces no merge produces rank after every merge, in id order;
         * byte, control, unknown and user-defined pieces score 0 (as SentencePiece) */
        for (size_t i = 0; i < n; i++) {
            if (o->type[i] != 1) o->score[i] = 0;
            else if (isnan(o->score[i])) o->score[i] = -(float)(nm + i);
        }
        const cJSON *nz = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
        o->space_prefix = has_prepend(nz) || metaspace_prefix(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"));
    }
    return XLLM_OK;
}

/* BOS / EOS / PAD and the chat template: the post-processor template says
 * whether BOS and EOS are added; config.json, then tokenizer_config.json,
 * name the ids. */
static xllm_status tok_specials(const cJSON *root, const cJSON *config, const cJSON *cfg, const smap *sm, tok_out *o,
                                xllm_error *err) {
    const cJSON *tp = find_template(cJSON_GetObjectItemCaseSensitive(root, "post_processor"));
    int64_t tbos = -1, teos = -1;
    if (tp) {
        const cJSON *single = cJSON_GetObjectItemCaseSensitive(tp, "single");
        int cnt = cJSON_GetArraySize(single);
        if (cnt > 0) tbos = template_special(tp, cJSON_GetArrayItem(single, 0));
        if (cnt > 1) teos = template_special(tp, cJSON_GetArrayItem(single, cnt - 1));
    }
    o->add_bos = tbos >= 0;
    o->add_eos = teos >= 0;
    const cJSON *v = cfield(config, "bos_token_id");
    if (cJSON_IsNumber(v)) o->bos = (int64_t)v->valuedouble;
    v = cfield(config, "eos_token_id");
    if (cJSON_IsArray(v)) v = cJSON_GetArrayItem(v, 0);
    if (cJSON_IsNumber(v)) o->eos = (int64_t)v->valuedouble;
    if (o->bos < 0) o->bos = tbos;
    if (o->eos < 0) o->eos = teos;
    if (tbos >= 0 && o->bos != tbos) o->bos = tbos; /* the token the template adds is the BOS */
    const char *names[3] = {"bos_token", "eos_token", "pad_token"};
    int64_t *dst[3] = {&o->bos, &o->eos, &o->pad};
    for (int i = 0; i < 3 && cJSON_IsObject(cfg); i++) {
        if (*dst[i] >= 0) continue;
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, names[i]);
        if (cJSON_IsObject(t)) t = cJSON_GetObjectItemCaseSensitive(t, "content");
        if (cJSON_IsString(t)) *dst[i] = smap_get(sm, t->valuestring);
    }
    for (int i = 0; i < 3; i++)
        if (*dst[i] >= (int64_t)o->n) *dst[i] = -1;
    if (cJSON_IsObject(cfg)) {
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
        if (cJSON_IsString(ct) && !(o->chat_template = mem_strdup(ct->valuestring))) return tok_oom(err);
    }
    return XLLM_OK;
}

/* tokenizer.json (+ tokenizer_config.json, config.json) as GGUF's tokenizer
 * keys, in steps: the kind, the pieces, the unknown token, the merges, the
 * special tokens. On failure o holds what was built (the caller frees it). */
static xllm_status tokenizer_to_gguf(const char *tok_json, const char *tok_cfg_json, const cJSON *config,
                                     int64_t vocab_size, tok_out *o, xllm_error *err) {
    memset(o, 0, sizeof *o);
    o->bos = o->eos = o->unk = o->pad = -1;
    xllm_status st = XLLM_OK;
    cJSON *root = cJSON_Parse(tok_json), *cfg = tok_cfg_json ? cJSON_Parse(tok_cfg_json) : NULL;
    smap sm = {0};
    const cJSON *model = NULL;
    if (!cJSON_IsObject(root))
        st = err_setf(err, XLLM_ERR_FORMAT, "gguf_write: tokenizer.json is not a JSON object");
    if (!st) st = tok_kind(root, o, &model, err);
    if (!st) st = tok_pieces(root, cJSON_GetObjectItemCaseSensitive(model, "vocab"), vocab_size, o, err);
    if (!st && smap_init(&sm, o->tok, o->n)) st = tok_oom(err);
    if (!st) {
        const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
        if (cJSON_IsString(unk)) {
            o->unk = smap_get(&sm, unk->valuestring);
            if (o->unk >= 0) o->type[o->unk] = 2;
        }
        st = tok_merges(root, cJSON_GetObjectItemCaseSensitive(model, "merges"), &sm, o, err);
    }
    if (!st) st = tok_specials(root, config, cfg, &sm, o, err);
    xllm_free(sm.slots);
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    return st;
}

static void tokenizer_kvs(wbuf *w, const tok_out *t) {
    kv_string(w, "tokenizer.ggml.model", t->spm ? "llama" : "gpt2");
    if (!t->spm) kv_string(w, "tokenizer.ggml.pre", t->pre);
    kv_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, t->n);
    for (size_t i = 0; i < t->n; i++) wb_str(w, t->tok[i], strlen(t->tok[i]));
    if (t->spm) {
        kv_arr(w, "tokenizer.ggml.scores", GGUF_F32, t->n);
        wb_put(w, t->score, t->n * sizeof *t->score);
    }
    kv_arr(w, "tokenizer.ggml.token_type", GGUF_I32, t->n);
    wb_put(w, t->type, t->n * sizeof *t->type);
    if (!t->spm) {
        kv_arr(w, "tokenizer.ggml.merges", GGUF_STRING, t->n_merges);
        for (size_t i = 0; i < t->n_merges; i++) wb_str(w, t->merges[i], strlen(t->merges[i]));
    }
    if (t->bos >= 0) kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)t->bos);
    if (t->eos >= 0) kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)t->eos);
    if (t->unk >= 0) kv_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)t->unk);
    if (t->pad >= 0) kv_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)t->pad);
    kv_bool(w, "tokenizer.ggml.add_bos_token", t->add_bos);
    kv_bool(w, "tokenizer.ggml.add_eos_token", t->add_eos);
    if (t->spm) kv_bool(w, "tokenizer.ggml.add_space_prefix", t->space_prefix);
    if (t->chat_template) kv_string(w, "tokenizer.chat_template", t->chat_template);
}

/* ------------------------------------------------------------ write */

static xllm_status write_all(FILE *f, const char *tmp, const void *p, size_t n, uint64_t *pos, xllm_error *err) {
    if (n && fwrite(p, 1, n, f) != n) return err_setf(err, XLLM_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    *pos += n;
    return XLLM_OK;
}

static xllm_status pad(FILE *f, const char *tmp, uint64_t *pos, xllm_error *err) {
    static const unsigned char zeros[ALIGN];
    return write_all(f, tmp, zeros, (size_t)((ALIGN - *pos % ALIGN) % ALIGN), pos, err);
}

/* What a family adds to the common keys (arch.h's row), read from the HF
 * config and checked to be expressible the way llama.cpp reads GGUF. */
typedef struct {
    int64_t experts, used, expert_ff, shared_ff, window;
    double attn_cap, final_cap, rope_swa;
    float norm_offset;
    /* DeepSeek: MLA sizes, routing */
    int64_t q_lora, kv_lora, nope, rope, vd, n_shared, dense_lead, groups, groups_used;
    int sigmoid, norm_w;
    double w_scale;
    int rot; /* values RoPE rotates per head (rope.dimension_count): head_dim, or fewer (partial rotary) */
} fam_keys;

static xllm_status family_check(const arch_info *A, const cJSON *config, int64_t layers, int64_t hidden,
                                int64_t heads, int64_t head_dim, fam_keys *k, xllm_error *err) {
    cfg_r r = {config, err, XLLM_OK};
    memset(k, 0, sizeof *k);
    k->rot = (int)head_dim;
    const char *mt = A->hf_type;
    if (A->mla) { /* llama.cpp's deepseek2: the sizes as keys; routing as it reads it */
        k->q_lora = cint(&r, "q_lora_rank", 0, 0, 1 << 20);
        k->kv_lora = cint(&r, "kv_lora_rank", -1, 2, 1 << 20);
        k->nope = cint(&r, "qk_nope_head_dim", -1, 1, 4096);
        k->rope = cint(&r, "qk_rope_head_dim", -1, 2, 4096);
        k->vd = cint(&r, "v_head_dim", -1, 1, 4096);
        k->experts = cint(&r, "n_routed_experts", -1, 1, 1 << 16);
        k->used = cint(&r, "num_experts_per_tok", -1, 1, 1 << 16);
        k->expert_ff = cint(&r, "moe_intermediate_size", -1, 1, 1 << 22);
        k->n_shared = cint(&r, "n_shared_experts", 0, 0, 64);
        k->dense_lead = cint(&r, "first_k_dense_replace", 0, 0, layers);
        k->w_scale = cnum(&r, config, "routed_scaling_factor", 1.0);
        k->norm_w = cbool(config, "norm_topk_prob");
        const cJSON *sf = cfield(config, "scoring_func"), *tm = cfield(config, "topk_method");
        k->sigmoid = cJSON_IsString(sf) && !strcmp(sf->valuestring, "sigmoid");
        int noaux = cJSON_IsString(tm) && !strcmp(tm->valuestring, "noaux_tc");
        int greedy = !tm || (cJSON_IsString(tm) && !strcmp(tm->valuestring, "greedy"));
        k->groups = noaux ? cint(&r, "n_group", 1, 1, 1024) : 1;
        k->groups_used = noaux ? cint(&r, "topk_group", k->groups, 1, 1024) : 1;
        if (r.st) return r.st;
        if ((!noaux && !greedy) || cint(&r, "moe_layer_freq", 1, 1, 1 << 20) != 1)
            return err_setf(err, XLLM_ERR_UNSUPPORTED, "gguf_write: this %s (topk_method other than greedy or "
                               "noaux_tc, or moe_layer_freq) has no GGUF form llama.cpp reads the same way", mt);
        return r.st;
    }
    if (A->moe != MOE_NONE) {
        k->experts = cint(&r, A->moe == MOE_MIXTRAL ? "num_local_experts" : "num_experts", -1, 1, 1 << 16);
        k->used = cint(&r, "num_experts_per_tok", -1, 1, 1 << 16);
        if (A->moe == MOE_QWEN) {
            k->expert_ff = cint(&r, "moe_intermediate_size", -1, 1, 1 << 22);
            if (A->shared_expert) k->shared_ff = cint(&r, "shared_expert_intermediate_size", 0, 0, 1 << 22);
            if (r.st) return r.st;
            /* llama.cpp renormalizes qwen3moe's top-k weights and never qwen2moe's; every layer is MoE */
            const cJSON *only = cfield(config, "mlp_only_layers");
            if (cbool(config, "norm_topk_prob") != (A->qk_norm != 0) || cint(&r, "decoder_sparse_step", 1, 1, 1 << 20) != 1 ||
                (only && cJSON_GetArraySize(only) > 0))
                return err_setf(err, XLLM_ERR_UNSUPPORTED, "gguf_write: this %s (norm_topk_prob, decoder_sparse_step or "
                                   "mlp_only_layers) has no GGUF form llama.cpp reads the same way", mt);
        }
    }
    if (A->window == ARCH_WIN_EVEN || A->window == ARCH_WIN_PATTERN) {
        k->window = cint(&r, "sliding_window", 0, 0, (int64_t)1 << 30);
        int64_t period = A->window == ARCH_WIN_EVEN ? 2 : cint(&r, "sliding_window_pattern", 6, 1, 1 << 20);
        const cJSON *lt = cfield(config, "layer_types");
        int ok = period == (A->window == ARCH_WIN_EVEN ? 2 : 6);
        for (int64_t l = 0; ok && lt && l < layers; l++) { /* GGUF has the family's own pattern only */
            const cJSON *e = cJSON_GetArrayItem(lt, (int)l);
            int slides = A->window == ARCH_WIN_EVEN ? l % 2 == 0 : (l + 1) % 6 != 0;
            ok = cJSON_IsString(e) && !strcmp(e->valuestring, slides ? "sliding_attention" : "full_attention");
        }
        double qpas = cnum(&r, config, "query_pre_attn_scalar", (double)head_dim);
        int wide = (A->window == ARCH_WIN_EVEN && layers == 46) || (A->window == ARCH_WIN_PATTERN && layers == 62);
        if (!ok || qpas != (wide ? (double)(hidden / heads) : (double)head_dim))
            return err_setf(err, XLLM_ERR_UNSUPPORTED, "gguf_write: this %s's sliding-window pattern or "
                               "query_pre_attn_scalar differs from what llama.cpp assumes for its GGUF form", mt);
    }
    if (A->softcap) {
        k->attn_cap = cnum(&r, config, "attn_logit_softcapping", 0);
        k->final_cap = cnum(&r, config, "final_logit_softcapping", 0);
        if (A->softcap == 2 && (!(k->attn_cap > 0) || !(k->final_cap > 0)))
            return err_setf(err, XLLM_ERR_UNSUPPORTED, "gguf_write: %s without soft-capping has no GGUF form "
                               "(llama.cpp then assumes 50 / 30)", mt);
    }
    if (A->rope_local) k->rope_swa = cnum(&r, config, "rope_local_base_freq", 10000.0);
    k->norm_offset = (float)cnum(&r, config, "xllm_norm_offset", A->norm_offset);
    /* partial rotary: rope.dimension_count = int(head_dim x factor) (arch_rope_dims); llama's rows are
     * permuted for adjacent pairs over the whole head, so only the rotate-half families take it */
    double prf = cnum(&r, config, "partial_rotary_factor", 1.0);
    k->rot = (int)head_dim;
    if (prf != 1.0 && !r.st) {
        k->rot = arch_rope_dims((int)head_dim, prf);
        if (!k->rot)
            return err_setf(err, XLLM_ERR_FORMAT, "gguf_write: partial_rotary_factor %g gives no even number of "
                               "rotated values of head_dim %lld", prf, (long long)head_dim);
        if (A->rope_interleaved_gguf || A->mla)
            return err_setf(err, XLLM_ERR_UNSUPPORTED, "gguf_write: %s with partial_rotary_factor has no GGUF form "
                               "here", A->hf_type);
    }
    return r.st;
}

xllm_status gguf_write(const char *dest, const st_tensor *tensors, size_t n, const cJSON *config,
                       const char *tokenizer_json, const char *tokenizer_config_json, xllm_error *err) {
    if (!dest || (!tensors && n) || !cJSON_IsObject(config))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "gguf_write: bad arguments");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(config, "model_type");
    if (!cJSON_IsString(mt)) return err_setf(err, XLLM_ERR_FORMAT, "gguf_write: config has no model_type");
    const arch_info *A = arch_by_hf(mt->valuestring);
    if (!A || !A->gguf_writable)
        return err_setf(err, XLLM_ERR_UNSUPPORTED,
                           "gguf_write: model_type \"%s\" cannot be written to GGUF (supported: the families of "
                           "src/format/arch.c with a GGUF form, mistral excepted)", mt->valuestring);
    const char *arch = A->gguf_arch;
    cfg_r r = {config, err, XLLM_OK};
    int64_t hidden = cint(&r, "hidden_size", -1, 1, 1 << 20);
    int64_t layers = cint(&r, "num_hidden_layers", -1, 1, 1 << 16);
    int64_t ff = cint(&r, "intermediate_size", -1, 1, 1 << 22);
    int64_t heads = cint(&r, "num_attention_heads", -1, 1, 4096);
    int64_t kv_heads = cint(&r, "num_key_value_heads", heads, 1, 4096);
    int64_t ctx_len = cint(&r, "max_position_embeddings", 2048, 1, (int64_t)1 << 30);
    int64_t vocab = cint(&r, "vocab_size", 0, 0, 1 << 24);
    double eps = cnum(&r, config, "rms_norm_eps", 1e-6), theta = cnum(&r, config, "rope_theta", 10000.0);
    if (r.st) return r.st;
    int64_t head_dim = cint(&r, "head_dim", hidden % heads == 0 ? hidden / heads : -1, 1, 4096);
    if (r.st) return r.st;
    fam_keys fk;
    xllm_status fst = family_check(A, config, layers, hidden, heads, head_dim, &fk, err);
    if (fst) return fst;
    int interleaved = cbool(config, "xllm_rope_interleaved");
    int is_llama = A->rope_interleaved_gguf;
    if (interleaved && !is_llama && !A->mla) /* (DeepSeek's RoPE pairs are adjacent in both forms) */
        return err_setf(err, XLLM_ERR_UNSUPPORTED,
                           "gguf_write: %s with interleaved RoPE rows has no GGUF form", arch);
    if (A->window == ARCH_WIN_QWEN && cbool(config, "use_sliding_window"))
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "gguf_write: %s sliding-window attention has no GGUF form", arch);

    /* rope scaling */
    longrope lr;
    memset(&lr, 0, sizeof lr);
    yarn_keys yk;
    memset(&yk, 0, sizeof yk);
    const char *rope_type = NULL;
    double rfactor = 0, rlow = 1, rhigh = 4, rorig = 8192;
    const cJSON *rs = cfield(config, "rope_scaling");
    if (rs) {
        const cJSON *t = cfield(rs, "rope_type");
        if (!t) t = cfield(rs, "type");
        if (!cJSON_IsString(t)) return err_setf(err, XLLM_ERR_FORMAT, "gguf_write: rope_scaling has no rope_type");
        rope_type = t->valuestring;
        rfactor = cnum(&r, rs, "factor", 0);
        if (strcmp(rope_type, "default") == 0) {
            rope_type = NULL;
        } else if (strcmp(rope_type, "llama3") == 0 && is_llama) {
            rlow = cnum(&r, rs, "low_freq_factor", 1);
            rhigh = cnum(&r, rs, "high_freq_factor", 4);
            rorig = cnum(&r, rs, "original_max_position_embeddings", 8192);
            if (!(rlow > 0 && rhigh > rlow && rorig > 0 && rfactor > 0))
                return err_setf(err, XLLM_ERR_FORMAT, "gguf_write: bad llama3 rope_scaling");
        } else if (strcmp(rope_type, "longrope") == 0 || strcmp(rope_type, "su") == 0) {
            rope_type = "longrope";
            if (longrope_read(&r, config, rs, fk.rot, ctx_len, &lr)) {
                xllm_free(lr.shrt);
                return r.st;
            }
            rfactor = 1;
        } else if (strcmp(rope_type, "yarn") == 0) {
            if (yarn_read(&r, rs, A->mla, ctx_len, &yk)) return r.st;
        } else if (strcmp(rope_type, "linear") != 0) {
            return err_setf(err, XLLM_ERR_UNSUPPORTED,
                               "gguf_write: rope_scaling type \"%s\" has no GGUF form here (supported: linear, "
                               "llama3, longrope, yarn)",
                               rope_type);
        }
        if (rope_type && !(rfactor > 0)) return err_setf(err, XLLM_ERR_FORMAT, "gguf_write: rope_scaling.factor must be > 0");
        if (r.st) return r.st;
    }

    /* tensors */
    xllm_status st = XLLM_OK;
    out_list ol = {0};
    wbuf w = {0};
    tok_out tk;
    memset(&tk, 0, sizeof tk);
    float *rope_freqs = NULL;
    char *tmp = NULL;
    FILE *f = NULL;
    tensor_ctx tc = {A, is_llama, interleaved, heads, kv_heads, fk.norm_offset, fk.experts, fk.nope, fk.vd, fk.kv_lora};
    int has_rope_freqs = 0;
    for (size_t i = 0; i < n && !st; i++) {
        if (!tensors[i].name) {
            st = err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "gguf_write: tensor %zu has no name", i);
            break;
        }
        has_rope_freqs |= strcmp(tensors[i].name, "rope_freqs.weight") == 0;
        st = add_hf_tensor(&ol, &tc, &tensors[i], head_dim, ff, err);
    }
    if (st) goto done;
    for (size_t i = 0; i < ol.n; i++)
        for (uint64_t e = 0; e < ol.t[i].n_parts; e++)
            if (!ol.t[i].parts[e]) {
                st = err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "gguf_write: %s lacks expert %llu", ol.t[i].name,
                                 (unsigned long long)e);
                goto done;
            }
    for (int k = 0; k < 2 && rope_type && strcmp(rope_type, "longrope") == 0; k++) { /* llama.cpp's two tensors */
        out_tensor *o = out_new(&ol);
        if (!o) goto oom;
        snprintf(o->name, sizeof o->name, "%s", k ? "rope_factors_long.weight" : "rope_factors_short.weight");
        o->type = GGML_F32;
        o->n_dims = 1;
        o->ne[0] = (uint64_t)fk.rot / 2;
        o->data = (const unsigned char *)(k ? lr.lng : lr.shrt);
        o->nbytes = (size_t)fk.rot / 2 * sizeof(float);
    }
    if (rope_type && strcmp(rope_type, "llama3") == 0 && !has_rope_freqs) {
        rope_freqs = mem_malloc_array((size_t)head_dim / 2, sizeof *rope_freqs);
        out_tensor *o = rope_freqs ? out_new(&ol) : NULL;
        if (!o) goto oom;
        gguf_llama3_rope_factors(theta, (int)head_dim, rfactor, rlow, rhigh, rorig, rope_freqs);
        snprintf(o->name, sizeof o->name, "rope_freqs.weight");
        o->type = GGML_F32;
        o->n_dims = 1;
        o->ne[0] = (uint64_t)head_dim / 2;
        o->data = (const unsigned char *)rope_freqs;
        o->nbytes = (size_t)head_dim / 2 * sizeof *rope_freqs;
    }
    for (size_t i = 0; i < ol.n; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(ol.t[i].name, ol.t[j].name) == 0) {
                st = err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "gguf_write: two tensors are both %s in GGUF",
                                 ol.t[i].name);
                goto done;
            }
    if (!vocab)
        for (size_t i = 0; i < ol.n; i++)
            if (strcmp(ol.t[i].name, "token_embd.weight") == 0 && ol.t[i].n_dims == 2) vocab = (int64_t)ol.t[i].ne[1];

    /* tokenizer */
    if (tokenizer_json && (st = tokenizer_to_gguf(tokenizer_json, tokenizer_config_json, config, vocab, &tk, err)))
        goto done;

    /* metadata */
    char key[128];
#define AK(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    kv_string(&w, "general.architecture", arch);
    {
        const cJSON *nm = cfield(config, "_name_or_path");
        const char *base = strrchr(dest, '/');
        base = base ? base + 1 : dest;
        char name[256];
        if (cJSON_IsString(nm) && nm->valuestring[0]) snprintf(name, sizeof name, "%s", nm->valuestring);
        else snprintf(name, sizeof name, "%s", base);
        char *dot = strrchr(name, '.');
        if (dot && dot != name && strcmp(dot, ".gguf") == 0) *dot = 0;
        kv_string(&w, "general.name", name);
    }
    kv_u32(&w, "general.alignment", ALIGN);
    {
        /* file type: the type holding most matrix bytes */
        size_t bytes[40] = {0};
        int any_quant = 0;
        for (size_t i = 0; i < ol.n; i++) {
            if (ol.t[i].n_dims >= 2 && ol.t[i].type < 40) bytes[ol.t[i].type] += ol.t[i].nbytes;
            any_quant |= ol.t[i].type != GGML_F32 && ol.t[i].type != GGML_F16 && ol.t[i].type != GGML_BF16 &&
                         ol.t[i].type < GGML_I8;
        }
        uint32_t best = 0;
        for (uint32_t t = 0; t < 40; t++)
            if (bytes[t] > bytes[best]) best = t;
        /* llama.cpp's LLAMA_FTYPE_MOSTLY_* (K-quants: the _M mix of that type) */
        uint32_t ftype = best == GGML_F16 ? 1 : best == GGML_Q4_0 ? 2 : best == GGML_Q4_1 ? 3 : best == GGML_Q8_0 ? 7
                       : best == GGML_Q5_0 ? 8 : best == GGML_Q5_1 ? 9 : best == GGML_Q2_K ? 10
                       : best == GGML_Q3_K ? 12 : best == GGML_Q4_K ? 15 : best == GGML_Q5_K ? 17
                       : best == GGML_Q6_K ? 18 : best == GGML_IQ4_NL ? 25 : best == GGML_IQ4_XS ? 30
                       : best == GGML_BF16 ? 32 : 0;
        kv_u32(&w, "general.file_type", ftype);
        if (any_quant) kv_u32(&w, "general.quantization_version", 2);
    }
    kv_u32(&w, AK("context_length"), (uint32_t)ctx_len);
    kv_u32(&w, AK("embedding_length"), (uint32_t)hidden);
    kv_u32(&w, AK("block_count"), (uint32_t)layers);
    kv_u32(&w, AK("feed_forward_length"), (uint32_t)ff);
    kv_u32(&w, AK("attention.head_count"), (uint32_t)heads);
    kv_u32(&w, AK("attention.head_count_kv"), (uint32_t)(A->mla ? 1 : kv_heads));
    kv_u32(&w, AK("rope.dimension_count"), (uint32_t)(A->mla ? fk.rope : fk.rot));
    if (A->mla) { /* the latent row as key / value, the per-head sizes as *_mla (llama.cpp's MLA files) */
        if (fk.q_lora) kv_u32(&w, AK("attention.q_lora_rank"), (uint32_t)fk.q_lora);
        kv_u32(&w, AK("attention.kv_lora_rank"), (uint32_t)fk.kv_lora);
        kv_u32(&w, AK("attention.key_length"), (uint32_t)(fk.kv_lora + fk.rope));
        kv_u32(&w, AK("attention.value_length"), (uint32_t)fk.kv_lora);
        kv_u32(&w, AK("attention.key_length_mla"), (uint32_t)(fk.nope + fk.rope));
        kv_u32(&w, AK("attention.value_length_mla"), (uint32_t)fk.vd);
        kv_u32(&w, AK("leading_dense_block_count"), (uint32_t)fk.dense_lead);
        kv_u32(&w, AK("expert_shared_count"), (uint32_t)fk.n_shared);
        kv_f32(&w, AK("expert_weights_scale"), (float)fk.w_scale);
        kv_bool(&w, AK("expert_weights_norm"), fk.norm_w);
        kv_u32(&w, AK("expert_gating_func"), fk.sigmoid ? 2 : 1);
        if (fk.groups > 1) {
            kv_u32(&w, AK("expert_group_count"), (uint32_t)fk.groups);
            kv_u32(&w, AK("expert_group_used_count"), (uint32_t)fk.groups_used);
        }
    } else if (!is_llama || head_dim * heads != hidden) {
        kv_u32(&w, AK("attention.key_length"), (uint32_t)head_dim);
        kv_u32(&w, AK("attention.value_length"), (uint32_t)head_dim);
    }
    kv_f32(&w, AK("attention.layer_norm_rms_epsilon"), (float)eps);
    if (fk.experts) {
        kv_u32(&w, AK("expert_count"), (uint32_t)fk.experts);
        kv_u32(&w, AK("expert_used_count"), (uint32_t)fk.used);
    }
    if (fk.expert_ff) kv_u32(&w, AK("expert_feed_forward_length"), (uint32_t)fk.expert_ff);
    if (fk.shared_ff) kv_u32(&w, AK("expert_shared_feed_forward_length"), (uint32_t)fk.shared_ff);
    if (fk.window) kv_u32(&w, AK("attention.sliding_window"), (uint32_t)fk.window);
    if (fk.attn_cap > 0) kv_f32(&w, AK("attn_logit_softcapping"), (float)fk.attn_cap);
    if (fk.final_cap > 0) kv_f32(&w, AK("final_logit_softcapping"), (float)fk.final_cap);
    if (fk.rope_swa > 0) kv_f32(&w, AK("rope.freq_base_swa"), (float)fk.rope_swa);
    kv_f32(&w, AK("rope.freq_base"), (float)theta);
    if (vocab) kv_u32(&w, AK("vocab_size"), (uint32_t)vocab);
    if (rope_type && strcmp(rope_type, "linear") == 0) {
        kv_string(&w, AK("rope.scaling.type"), "linear");
        kv_f32(&w, AK("rope.scaling.factor"), (float)rfactor);
    } else if (rope_type && strcmp(rope_type, "yarn") == 0) {
        kv_string(&w, AK("rope.scaling.type"), "yarn");
        kv_f32(&w, AK("rope.scaling.factor"), (float)yk.factor);
        kv_u32(&w, AK("rope.scaling.original_context_length"), (uint32_t)yk.orig);
        if (yk.beta_fast > 0 && yk.beta_fast != 32) kv_f32(&w, AK("rope.scaling.yarn_beta_fast"), (float)yk.beta_fast);
        if (yk.beta_slow > 0 && yk.beta_slow != 1) kv_f32(&w, AK("rope.scaling.yarn_beta_slow"), (float)yk.beta_slow);
        if (fabs(yk.attn_factor - 1) > 1e-7) kv_f32(&w, AK("rope.scaling.attn_factor"), (float)yk.attn_factor);
        if (yk.log_mul != 0) kv_f32(&w, AK("rope.scaling.yarn_log_multiplier"), (float)yk.log_mul);
    } else if (rope_type && strcmp(rope_type, "longrope") == 0) { /* the factor tensors, and these two */
        kv_f32(&w, AK("rope.scaling.attn_factor"), (float)lr.attn_factor);
        kv_u32(&w, AK("rope.scaling.original_context_length"), (uint32_t)lr.orig);
    } else if (rope_type) { /* llama3: rope_freqs.weight; the parameters for readers that want them back */
        kv_f32(&w, AK("rope.scaling.low_freq_factor"), (float)rlow);
        kv_f32(&w, AK("rope.scaling.high_freq_factor"), (float)rhigh);
        kv_u32(&w, AK("rope.scaling.original_context_length"), (uint32_t)rorig);
    }
#undef AK
    if (tokenizer_json) tokenizer_kvs(&w, &tk);

    /* tensor infos */
    uint64_t data_pos = 0;
    for (size_t i = 0; i < ol.n; i++) {
        out_tensor *o = &ol.t[i];
        wb_str(&w, o->name, strlen(o->name));
        wb_u32(&w, o->n_dims);
        for (uint32_t d = 0; d < o->n_dims; d++) wb_u64(&w, o->ne[d]);
        wb_u32(&w, o->type);
        data_pos = (data_pos + ALIGN - 1) / ALIGN * ALIGN;
        o->offset = data_pos;
        wb_u64(&w, o->offset);
        data_pos += o->nbytes;
    }
    if (w.oom) goto oom;

    /* the file */
    size_t dl = strlen(dest);
    tmp = mem_malloc(dl + 16);
    if (!tmp) goto oom;
    int fd = tmpfile_create(dest, tmp, dl + 16);
    if (fd < 0) {
        st = err_setf(err, XLLM_ERR_IO, "%s: cannot create a temporary file next to it: %s", dest, strerror(errno));
        goto done;
    }
    f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        st = err_setf(err, XLLM_ERR_IO, "%s: %s", tmp, strerror(errno));
        goto done;
    }
    uint64_t pos = 0;
    unsigned char head[24];
    memcpy(head, "GGUF", 4);
    uint32_t version = 3;
    uint64_t nt = ol.n;
    memcpy(head + 4, &version, 4);
    memcpy(head + 8, &nt, 8);
    memcpy(head + 16, &w.n_kv, 8);
    if ((st = write_all(f, tmp, head, sizeof head, &pos, err))) goto done;
    if ((st = write_all(f, tmp, w.p, w.len, &pos, err))) goto done;
    if ((st = pad(f, tmp, &pos, err))) goto done;
    uint64_t data_start = pos;
    for (size_t i = 0; i < ol.n; i++) {
        const out_tensor *o = &ol.t[i];
        if ((st = pad(f, tmp, &pos, err))) goto done;
        if (pos - data_start != o->offset) {
            st = err_setf(err, XLLM_ERR_INTERNAL, "gguf_write: offset bookkeeping error at %s", o->name);
            goto done;
        }
        if (o->n_parts) {
            for (uint64_t e = 0; e < o->n_parts; e++)
                if ((st = write_all(f, tmp, o->parts[e], o->nbytes / o->n_parts, &pos, err))) goto done;
        } else if (!o->perm_hd) {
            if ((st = write_all(f, tmp, o->data, o->nbytes, &pos, err))) goto done;
        } else {
            for (int64_t row = 0; row < o->rows; row++) {
                int64_t src = gguf_qk_src_row(row, o->perm_hd);
                if ((st = write_all(f, tmp, o->data + (size_t)src * o->row_bytes, o->row_bytes, &pos, err))) goto done;
            }
        }
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        st = err_setf(err, XLLM_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        goto done;
    }
    if (fclose(f) != 0) {
        f = NULL;
        st = err_setf(err, XLLM_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
        goto done;
    }
    f = NULL;
    if (rename(tmp, dest) != 0) {
        st = err_setf(err, XLLM_ERR_IO, "%s: cannot rename into place: %s", dest, strerror(errno));
        goto done;
    }
    tmpfile_forget(tmp);
    tmp[0] = 0;
    goto done;
oom:
    st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "gguf_write: out of memory");
done:
    if (f) fclose(f);
    if (tmp && tmp[0]) {
        unlink(tmp);
        tmpfile_forget(tmp);
    }
    xllm_free(tmp);
    for (size_t i = 0; i < ol.n; i++) {
        xllm_free(ol.t[i].parts);
        xllm_free(ol.t[i].owned);
    }
    xllm_free(ol.t);
    xllm_free(w.p);
    xllm_free(rope_freqs);
    xllm_free(lr.shrt);
    tok_out_free(&tk);
    return st;
}
