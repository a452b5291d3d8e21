/*
 * gguf.c - GGUF v2/v3 reader: header, metadata and tensor table validated
 * against the file size (a corrupt, truncated or foreign file is an error
 * naming the file and the problem, never an out-of-range read), tensors
 * added zero-copy to an st_archive under their HF names, and the HF config
 * built from the `<arch>.*` keys. The tokenizer is synthesized by gguf_tok.c.
 *
 * Layout (little-endian): "GGUF", u32 version, u64 tensor_count,
 * u64 kv_count, kv_count x (string key, u32 type, value), tensor_count x
 * (string name, u32 n_dims, u64 ne[n_dims] (ne[0] innermost), u32 ggml type,
 * u64 offset), padding to general.alignment (default 32), tensor data (each
 * offset relative to the data start, aligned). A string is a u64 length and
 * that many bytes; an array is u32 element type, u64 count, the elements.
 */
#include "format/gguf.h"
#include "format/gguf_internal.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"
#include "quant/quant.h"
#include "quant/kquant.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint16_t rd_u16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t rd_u32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd_u64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

size_t gguf_type_size(uint32_t t) {
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

static const char *type_name(uint32_t t) {
    static const char *names[GGUF_NTYPES] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                                             "string", "array", "u64", "i64", "f64"};
    return t < GGUF_NTYPES ? names[t] : "?";
}

/* A name or key from the file, printable and bounded, for messages. */
static const char *show(const char *p, size_t len, char *buf, size_t cap) {
    size_t n = 0, max = cap - 4;
    for (size_t i = 0; i < len && n < max; i++) {
        unsigned char ch = (unsigned char)p[i];
        buf[n++] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
    }
    if (len > max) memcpy(buf + n, "...", 3), n += 3;
    buf[n] = 0;
    return buf;
}

/* ------------------------------------------------------------- accessors */

const gguf_kv *gguf_find(const gguf_ctx *c, const char *key) {
    size_t n = strlen(key);
    for (size_t i = 0; i < c->n_kv; i++)
        if (c->kv[i].key.len == n && memcmp(c->kv[i].key.p, key, n) == 0) return &c->kv[i];
    return NULL;
}

static int wrong(gguf_ctx *c, const char *key, const gguf_kv *kv, const char *want) {
    if (!c->st)
        c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: metadata \"%s\" must be %s (it is a%s %s)", c->path, key,
                            want, kv->type == GGUF_ARRAY || kv->type == GGUF_I8 || kv->type == GGUF_I16 ||
                            kv->type == GGUF_I32 || kv->type == GGUF_I64 ? "n" : "", type_name(kv->type));
    return 0;
}

static int is_int_type(uint32_t t) {
    return t == GGUF_U8 || t == GGUF_I8 || t == GGUF_U16 || t == GGUF_I16 || t == GGUF_U32 || t == GGUF_I32 ||
           t == GGUF_U64 || t == GGUF_I64 || t == GGUF_BOOL;
}
static int is_num_type(uint32_t t) { return is_int_type(t) || t == GGUF_F32 || t == GGUF_F64; }

static int64_t scalar_int(const unsigned char *p, uint32_t t) {
    switch (t) {
    case GGUF_U8: case GGUF_BOOL: return *p;
    case GGUF_I8: return (int8_t)*p;
    case GGUF_U16: return rd_u16(p);
    case GGUF_I16: return (int16_t)rd_u16(p);
    case GGUF_U32: return rd_u32(p);
    case GGUF_I32: return (int32_t)rd_u32(p);
    case GGUF_U64: { uint64_t v = rd_u64(p); return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v; }
    case GGUF_I64: return (int64_t)rd_u64(p);
    default: return 0;
    }
}

double gguf_f32_to_double(float f) {
    if (!isfinite(f)) return (double)f;
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        double d = strtod(buf, NULL);
        if ((float)d == f) return d;
    }
    return (double)f;
}

static double scalar_num(const unsigned char *p, uint32_t t) {
    if (t == GGUF_F32) {
        float f;
        memcpy(&f, p, 4);
        return gguf_f32_to_double(f);
    }
    if (t == GGUF_F64) {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    if (t == GGUF_U64) return (double)rd_u64(p);
    return (double)scalar_int(p, t);
}

int gguf_get_int(gguf_ctx *c, const char *key, int64_t *out) {
    if (c->st) return 0;
    const gguf_kv *kv = gguf_find(c, key);
    if (!kv) return 0;
    if (!is_int_type(kv->type)) return wrong(c, key, kv, "an integer");
    if (kv->type == GGUF_U64 && rd_u64(kv->val) > (uint64_t)INT64_MAX) return wrong(c, key, kv, "below 2^63");
    *out = scalar_int(kv->val, kv->type);
    return 1;
}

int gguf_get_num(gguf_ctx *c, const char *key, double *out) {
    if (c->st) return 0;
    const gguf_kv *kv = gguf_find(c, key);
    if (!kv) return 0;
    if (!is_num_type(kv->type)) return wrong(c, key, kv, "a number");
    *out = scalar_num(kv->val, kv->type);
    if (!isfinite(*out)) {
        if (!c->st) c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: metadata \"%s\" is not finite", c->path, key);
        return 0;
    }
    return 1;
}

int gguf_get_bool(gguf_ctx *c, const char *key, int *out) {
    if (c->st) return 0;
    const gguf_kv *kv = gguf_find(c, key);
    if (!kv) return 0;
    if (!is_int_type(kv->type)) return wrong(c, key, kv, "a bool");
    *out = scalar_int(kv->val, kv->type) != 0;
    return 1;
}

int gguf_get_str(gguf_ctx *c, const char *key, gguf_str *out) {
    if (c->st) return 0;
    const gguf_kv *kv = gguf_find(c, key);
    if (!kv) return 0;
    if (kv->type != GGUF_STRING) return wrong(c, key, kv, "a string");
    out->len = (size_t)rd_u64(kv->val); /* validated at parse */
    out->p = (const char *)kv->val + 8;
    return 1;
}

int gguf_get_str_array(gguf_ctx *c, const char *key, gguf_str **out, size_t *n) {
    *out = NULL;
    *n = 0;
    if (c->st) return 0;
    const gguf_kv *kv = gguf_find(c, key);
    if (!kv) return 0;
    if (kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING) return wrong(c, key, kv, "an array of strings");
    gguf_str *v = mem_malloc_array(kv->arr_n ? (size_t)kv->arr_n : 1, sizeof *v);
    if (!v) {
        c->st = err_setf(c->err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory reading \"%s\"", c->path, key);
        return 0;
    }
    const unsigned char *p = kv->val; /* every element was bounds-checked at parse */
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        v[i].len = (size_t)rd_u64(p);
        v[i].p = (const char *)p + 8;
        p += 8 + v[i].len;
    }
    *out = v;
    *n = (size_t)kv->arr_n;
    return 1;
}

int gguf_get_num_array(gguf_ctx *c, const char *key, const gguf_kv **out) {
    *out = NULL;
    if (c->st) return 0;
    const gguf_kv *kv = gguf_find(c, key);
    if (!kv) return 0;
    if (kv->type != GGUF_ARRAY || !is_num_type(kv->arr_type)) return wrong(c, key, kv, "an array of numbers");
    *out = kv;
    return 1;
}

double gguf_arr_num(const gguf_kv *kv, uint64_t i) {
    const unsigned char *p = kv->val + i * gguf_type_size(kv->arr_type);
    if (kv->arr_type == GGUF_F32) {
        float f;
        memcpy(&f, p, 4);
        return (double)f;
    }
    return scalar_num(p, kv->arr_type);
}

int64_t gguf_arr_int(const gguf_kv *kv, uint64_t i) {
    uint32_t t = kv->arr_type;
    const unsigned char *p = kv->val + i * gguf_type_size(t);
    if (t == GGUF_F32 || t == GGUF_F64) {
        double d = gguf_arr_num(kv, i);
        return isfinite(d) && fabs(d) < 9e18 ? (int64_t)d : 0;
    }
    return scalar_int(p, t);
}

/* ------------------------------------------------------------ tensor names */

static const struct { const char *g, *h; } k_global[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};
int gguf_name_to_hf(const arch_info *a, const char *g, int e, char *out, size_t cap) {
    for (size_t i = 0; i < sizeof k_global / sizeof *k_global; i++)
        if (strcmp(g, k_global[i].g) == 0) return snprintf(out, cap, "%s", k_global[i].h) < (int)cap;
    return arch_name_to_hf(a, g, e, out, cap);
}

int gguf_name_from_hf(const arch_info *a, const char *h, char *out, size_t cap, int *expert) {
    *expert = -1;
    for (size_t i = 0; i < sizeof k_global / sizeof *k_global; i++)
        if (strcmp(h, k_global[i].h) == 0) return snprintf(out, cap, "%s", k_global[i].g) < (int)cap;
    return arch_name_from_hf(a, h, out, cap, expert);
}

void gguf_llama3_rope_factors(double theta, int dim, double factor, double low, double high, double orig,
                              float *out) {
    const double pi = 3.14159265358979323846;
    for (int i = 0; i < dim / 2; i++) {
        double freq = 1.0 / pow(theta, (double)(2 * i) / dim), wavelen = 2 * pi / freq, r;
        if (wavelen < orig / high) {
            r = 1.0;
        } else if (wavelen > orig / low) {
            r = factor;
        } else {
            double smooth = (orig / wavelen - low) / (high - low);
            r = 1.0 / ((1 - smooth) / factor + smooth);
        }
        out[i] = (float)r;
    }
}

/* ------------------------------------------------------------- parsing */

typedef struct { const unsigned char *p, *end; } cursor;

static int cur_u32(cursor *c, uint32_t *v) {
    if (c->end - c->p < 4) return -1;
    *v = rd_u32(c->p);
    c->p += 4;
    return 0;
}
static int cur_u64(cursor *c, uint64_t *v) {
    if (c->end - c->p < 8) return -1;
    *v = rd_u64(c->p);
    c->p += 8;
    return 0;
}
static int cur_str(cursor *c, gguf_str *s) {
    uint64_t n;
    if (cur_u64(c, &n) || (uint64_t)(c->end - c->p) < n) return -1;
    s->p = (const char *)c->p;
    s->len = (size_t)n;
    c->p += n;
    return 0;
}

enum { V_OK = 0, V_TRUNC, V_TYPE, V_DEEP };

/* Skip one value of `type`; arrays may nest (up to 4 levels). */
static int skip_value(cursor *c, uint32_t type, int depth, uint32_t *bad_type) {
    size_t sz = gguf_type_size(type);
    if (sz) {
        if ((size_t)(c->end - c->p) < sz) return V_TRUNC;
        c->p += sz;
        return V_OK;
    }
    if (type == GGUF_STRING) {
        gguf_str s;
        return cur_str(c, &s) ? V_TRUNC : V_OK;
    }
    if (type != GGUF_ARRAY) {
        *bad_type = type;
        return V_TYPE;
    }
    if (depth >= 4) return V_DEEP;
    uint32_t et;
    uint64_t n;
    if (cur_u32(c, &et) || cur_u64(c, &n)) return V_TRUNC;
    if (et >= GGUF_NTYPES) {
        *bad_type = et;
        return V_TYPE;
    }
    size_t esz = gguf_type_size(et);
    size_t left = (size_t)(c->end - c->p);
    if (esz) {
        if (n > left / esz) return V_TRUNC;
        c->p += n * esz;
        return V_OK;
    }
    if (n > left / (et == GGUF_STRING ? 8 : 12)) return V_TRUNC; /* smallest possible element */
    for (uint64_t i = 0; i < n; i++) {
        int r = skip_value(c, et, depth + 1, bad_type);
        if (r) return r;
    }
    return V_OK;
}

typedef struct {
    gguf_str name;
    char *cname;          /* NUL-terminated copy */
    uint32_t n_dims, type;
    uint64_t ne[4];
    uint64_t offset, nbytes;
    dtype_t dtype;
} tinfo;

static const char *ggml_type_name(uint32_t t) {
    static const char *names[] = {
        "F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K",
        "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S",
        "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16", "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8",
        "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
    return t < sizeof names / sizeof *names ? names[t] : "unknown";
}

/* Values per block of a quantized type as GGUF stores it. */
static int gguf_block_elems(dtype_t t) { return dtype_is_kq(t) ? kq_block_elems(t) : QK; }

static int map_ggml_type(uint32_t t, dtype_t *dt) {
    switch (t) {
    case GGML_F32: *dt = XLLM_DT_F32; return 1;
    case GGML_F16: *dt = XLLM_DT_F16; return 1;
    case GGML_BF16: *dt = XLLM_DT_BF16; return 1;
    case GGML_Q8_0: *dt = XLLM_DT_Q8; return 1;
    case GGML_Q4_0: *dt = XLLM_DT_Q4; return 1;
    case GGML_Q4_1: *dt = XLLM_DT_Q4M; return 1;
    case GGML_Q5_0: *dt = XLLM_DT_Q5_0; return 1;
    case GGML_Q5_1: *dt = XLLM_DT_Q5_1; return 1;
    case GGML_IQ4_NL: *dt = XLLM_DT_IQ4_NL; return 1;
    case GGML_Q2_K: *dt = XLLM_DT_Q2_K; return 1;
    case GGML_Q3_K: *dt = XLLM_DT_Q3_K; return 1;
    case GGML_Q4_K: *dt = XLLM_DT_Q4_K; return 1;
    case GGML_Q5_K: *dt = XLLM_DT_Q5_K; return 1;
    case GGML_Q6_K: *dt = XLLM_DT_Q6_K; return 1;
    case GGML_IQ4_XS: *dt = XLLM_DT_IQ4_XS; return 1;
    case GGML_I8: *dt = XLLM_DT_I8; return 1;
    case GGML_I16: *dt = XLLM_DT_I16; return 1;
    case GGML_I32: *dt = XLLM_DT_I32; return 1;
    case GGML_I64: *dt = XLLM_DT_I64; return 1;
    case GGML_F64: *dt = XLLM_DT_F64; return 1;
    default: return 0;
    }
}

static int cmp_kv_key(const void *a, const void *b) {
    const gguf_kv *x = *(const gguf_kv *const *)a, *y = *(const gguf_kv *const *)b;
    size_t n = x->key.len < y->key.len ? x->key.len : y->key.len;
    int r = memcmp(x->key.p, y->key.p, n);
    return r ? r : (x->key.len > y->key.len) - (x->key.len < y->key.len);
}

static int cmp_tinfo_offset(const void *a, const void *b) {
    const tinfo *x = *(const tinfo *const *)a, *y = *(const tinfo *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Grow *arr (elements of `size` bytes) to hold index i, the new elements
 * zeroed; capacity doubles, so memory follows what was actually parsed, not
 * what the header claims. */
static int grow(void **arr, size_t *cap, uint64_t i, size_t size) {
    size_t old = *cap;
    if (i >= SIZE_MAX || array_reserve(arr, cap, (size_t)i + 1, size, 64)) return -1;
    if (*cap > old) memset((char *)*arr + old * size, 0, (*cap - old) * size);
    return 0;
}

static xllm_status parse_kvs(const char *path, cursor *cur, gguf_kv **kvp, uint64_t n_kv, xllm_error *err) {
    char sbuf[96];
    size_t cap = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        if (grow((void **)kvp, &cap, i, sizeof **kvp))
            return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        gguf_kv *e = &(*kvp)[i];
        if (cur_str(cur, &e->key))
            return err_setf(err, XLLM_ERR_FORMAT, "%s: truncated: metadata key %llu runs past the end of the file",
                               path, (unsigned long long)i);
        if (e->key.len == 0 || memchr(e->key.p, 0, e->key.len))
            return err_setf(err, XLLM_ERR_FORMAT, "%s: metadata key %llu is empty or holds a NUL byte", path,
                               (unsigned long long)i);
        const char *k = show(e->key.p, e->key.len, sbuf, sizeof sbuf);
        if (cur_u32(cur, &e->type))
            return err_setf(err, XLLM_ERR_FORMAT, "%s: truncated in metadata \"%s\"", path, k);
        if (e->type >= GGUF_NTYPES)
            return err_setf(err, XLLM_ERR_FORMAT, "%s: metadata \"%s\" has unknown value type %u", path, k, e->type);
        const unsigned char *start = cur->p;
        uint32_t bad = 0;
        int r = skip_value(cur, e->type, 0, &bad);
        if (r == V_TRUNC)
            return err_setf(err, XLLM_ERR_FORMAT, "%s: truncated: metadata \"%s\" runs past the end of the file",
                               path, k);
        if (r == V_TYPE)
            return err_setf(err, XLLM_ERR_FORMAT, "%s: metadata \"%s\" holds unknown value type %u", path, k, bad);
        if (r == V_DEEP)
            return err_setf(err, XLLM_ERR_FORMAT, "%s: metadata \"%s\": arrays nested too deeply", path, k);
        e->val = start;
        if (e->type == GGUF_ARRAY) {
            e->arr_type = rd_u32(start);
            e->arr_n = rd_u64(start + 4);
            e->val = start + 12;
        }
    }
    /* keys are unique */
    gguf_kv *kv = *kvp;
    if (n_kv > 1) {
        const gguf_kv **order = mem_malloc_array((size_t)n_kv, sizeof *order);
        if (!order) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        for (uint64_t i = 0; i < n_kv; i++) order[i] = &kv[i];
        qsort(order, (size_t)n_kv, sizeof *order, cmp_kv_key);
        for (uint64_t i = 1; i < n_kv; i++)
            if (cmp_kv_key(&order[i - 1], &order[i]) == 0) {
                xllm_status st = err_setf(err, XLLM_ERR_FORMAT, "%s: duplicate metadata key \"%s\"", path,
                                             show(order[i]->key.p, order[i]->key.len, sbuf, sizeof sbuf));
                xllm_free(order);
                return st;
            }
        xllm_free(order);
    }
    return XLLM_OK;
}

static xllm_status parse_tensor_infos(const char *path, cursor *cur, tinfo **tip, uint64_t n, xllm_error *err) {
    char sbuf[96];
    size_t cap = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (grow((void **)tip, &cap, i, sizeof **tip))
            return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        tinfo *t = &(*tip)[i];
        if (cur_str(cur, &t->name))
            return err_setf(err, XLLM_ERR_FORMAT, "%s: truncated: tensor info %llu runs past the end of the file",
                               path, (unsigned long long)i);
        const char *nm = show(t->name.p, t->name.len, sbuf, sizeof sbuf);
        if (t->name.len == 0 || t->name.len > 1023 || memchr(t->name.p, 0, t->name.len))
            return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor %llu has an empty, overlong or NUL-holding name",
                               path, (unsigned long long)i);
        if (cur_u32(cur, &t->n_dims))
            return err_setf(err, XLLM_ERR_FORMAT, "%s: truncated in the info of tensor %s", path, nm);
        if (t->n_dims < 1 || t->n_dims > 4)
            return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor %s has %u dimensions (1 to 4 allowed)", path, nm,
                               t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (cur_u64(cur, &t->ne[d]))
                return err_setf(err, XLLM_ERR_FORMAT, "%s: truncated in the info of tensor %s", path, nm);
        if (cur_u32(cur, &t->type) || cur_u64(cur, &t->offset))
            return err_setf(err, XLLM_ERR_FORMAT, "%s: truncated in the info of tensor %s", path, nm);
    }
    return XLLM_OK;
}

/* Sizes, types, alignment and placement of every tensor. */
static xllm_status check_tensors(const char *path, tinfo *ti, uint64_t n, uint64_t data_start, size_t size,
                                 uint64_t alignment, xllm_error *err) {
    char sbuf[96];
    uint64_t data_size = data_start <= size ? size - data_start : 0;
    for (uint64_t i = 0; i < n; i++) {
        tinfo *t = &ti[i];
        const char *nm = show(t->name.p, t->name.len, sbuf, sizeof sbuf);
        if (!map_ggml_type(t->type, &t->dtype))
            return err_setf(err, XLLM_ERR_UNSUPPORTED,
                               "%s: tensor %s has GGML type %s (%u), which xllm does not support "
                               "(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, "
                               "IQ4_NL, IQ4_XS)", path, nm, ggml_type_name(t->type),
                               t->type);
        uint64_t nelem = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            if (t->ne[d] == 0 || t->ne[d] > ((uint64_t)1 << 40) || nelem > ((uint64_t)1 << 52) / t->ne[d])
                return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor %s has an impossible shape", path, nm);
            nelem *= t->ne[d];
        }
        size_t elem_align;
        if (dtype_is_quant(t->dtype)) {
            int blk = gguf_block_elems(t->dtype);
            if (t->ne[0] % (uint64_t)blk)
                return err_setf(err, XLLM_ERR_FORMAT,
                                   "%s: tensor %s: %s rows of %llu elements are not whole blocks of %d", path, nm,
                                   ggml_type_name(t->type), (unsigned long long)t->ne[0], blk);
            t->nbytes = (nelem / t->ne[0]) * quant_row_bytes(t->dtype, blk, (int64_t)t->ne[0]);
            elem_align = 2;
        } else {
            elem_align = dtype_size(t->dtype);
            t->nbytes = nelem * elem_align;
        }
        if (t->offset % alignment)
            return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor %s: offset %llu is not a multiple of the alignment %llu",
                               path, nm, (unsigned long long)t->offset, (unsigned long long)alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return err_setf(err, XLLM_ERR_FORMAT,
                               "%s: tensor %s: data [%llu, +%llu) lies outside the file (data section is %llu bytes; "
                               "truncated?)", path, nm, (unsigned long long)t->offset,
                               (unsigned long long)t->nbytes, (unsigned long long)data_size);
        if ((data_start + t->offset) % elem_align)
            return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor %s: data is not aligned for %s", path, nm,
                               ggml_type_name(t->type));
    }
    /* The tensors tile the data section: in offset order each starts where
     * the one before ends (rounded up to the alignment) and the last ends the
     * file (up to its padding). A tensor whose stated type or shape gives
     * more bytes than that overlaps its neighbour; fewer bytes leave a hole
     * of whole alignment units, which is what a type relabelled to a smaller
     * one (Q8_0 as Q4_0, F32 as F16) looks like. Every GGUF llama.cpp writes
     * tiles so. (A relabelling between types of the same size, F16 as BF16 or
     * Q4_0 as IQ4_NL, leaves no trace in the sizes and cannot be caught.) */
    if (n > 0) {
        tinfo **order = mem_malloc_array((size_t)n, sizeof *order);
        if (!order) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        for (uint64_t i = 0; i < n; i++) order[i] = &ti[i];
        qsort(order, (size_t)n, sizeof *order, cmp_tinfo_offset);
        xllm_status st = XLLM_OK;
        char b2[96];
        for (uint64_t i = 0; i <= n && !st; i++) {
            const tinfo *a = i ? order[i - 1] : NULL, *b = i < n ? order[i] : NULL;
            uint64_t end = a ? a->offset + a->nbytes : 0, next = b ? b->offset : data_size;
            if (a && b && end > next) {
                st = err_setf(err, XLLM_ERR_FORMAT, "%s: tensors %s and %s overlap", path,
                                 show(a->name.p, a->name.len, sbuf, sizeof sbuf), show(b->name.p, b->name.len, b2, sizeof b2));
            } else if (next - end >= alignment) {
                const tinfo *t = a ? a : b;
                const char *nm = show(t->name.p, t->name.len, sbuf, sizeof sbuf);
                if (!a)
                    st = err_setf(err, XLLM_ERR_FORMAT,
                                     "%s: %llu bytes of tensor data before the first tensor (%s at offset %llu) belong to "
                                     "no tensor", path, (unsigned long long)next, nm, (unsigned long long)next);
                else
                    st = err_setf(err, XLLM_ERR_FORMAT,
                                     "%s: tensor %s: type %s and its shape give %llu bytes, but %llu bytes lie between "
                                     "its offset and %s%s (a relabelled type or shape?)", path, nm,
                                     ggml_type_name(t->type), (unsigned long long)t->nbytes,
                                     (unsigned long long)(next - t->offset), b ? "tensor " : "the end of the file",
                                     b ? show(b->name.p, b->name.len, b2, sizeof b2) : "");
            }
        }
        xllm_free(order);
        return st;
    }
    return XLLM_OK;
}

static const tinfo *find_tensor(const tinfo *ti, uint64_t n, const char *name) {
    for (uint64_t i = 0; i < n; i++)
        if (strcmp(ti[i].cname, name) == 0) return &ti[i];
    return NULL;
}

/* ------------------------------------------------------------- config */

typedef struct {
    gguf_ctx *c;
    const char *arch;
    cJSON *cfg;
    int oom;
    const tinfo *ti; /* the tensor list, for keys llama.cpp infers from tensors */
    uint64_t nt;
} cfg_b;

static void put_num(cfg_b *b, const char *k, double v) { b->oom |= !cJSON_AddNumberToObject(b->cfg, k, v); }
static void put_bool(cfg_b *b, const char *k, int v) { b->oom |= !cJSON_AddBoolToObject(b->cfg, k, v); }
static void put_str(cfg_b *b, const char *k, const char *v) { b->oom |= !cJSON_AddStringToObject(b->cfg, k, v); }

/* <arch>.suffix as an integer in [lo, hi]; required when def < 0. */
static int64_t arch_int(cfg_b *b, const char *suffix, int64_t def, int64_t lo, int64_t hi) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", b->arch, suffix);
    int64_t v;
    gguf_ctx *c = b->c;
    if (!gguf_get_int(c, key, &v)) {
        if (!c->st && def < 0) {
            const gguf_kv *kv = gguf_find(c, key);
            if (kv && kv->type == GGUF_ARRAY)
                c->st = err_setf(c->err, XLLM_ERR_UNSUPPORTED,
                                    "%s: metadata \"%s\" is per-layer (an array); xllm needs one value", c->path, key);
            else
                c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: missing metadata \"%s\"", c->path, key);
        }
        return def < 0 ? 0 : def;
    }
    if (v < lo || v > hi) {
        if (!c->st)
            c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: metadata \"%s\" = %lld is outside [%lld, %lld]", c->path,
                                key, (long long)v, (long long)lo, (long long)hi);
        return def < 0 ? 0 : def;
    }
    return v;
}

static int arch_num(cfg_b *b, const char *suffix, double *out) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", b->arch, suffix);
    return gguf_get_num(b->c, key, out);
}

/* Llama 3 RoPE scaling stored as rope_freqs.weight: find (factor, low, high,
 * original context) reproducing the stored factors. */
static void rope_from_freqs(cfg_b *b, const tinfo *rf, const unsigned char *data, int head_dim, double theta) {
    gguf_ctx *c = b->c;
    int half = head_dim / 2; /* head_dim: the rotated values per head (rope.dimension_count) */
    if (rf->dtype != XLLM_DT_F32 || rf->n_dims != 1 || rf->ne[0] != (uint64_t)half) {
        c->st = err_setf(c->err, XLLM_ERR_UNSUPPORTED,
                            "%s: rope_freqs.weight must be %d f32 values (rope.dimension_count / 2)", c->path, half);
        return;
    }
    float *r = mem_malloc_array((size_t)half * 2, sizeof *r);
    if (!r) {
        c->st = err_setf(c->err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", c->path);
        return;
    }
    float *want = r + half;
    memcpy(r, data + rf->offset, (size_t)half * sizeof *r);
    double factor = 0;
    int all_one = 1;
    for (int i = 0; i < half; i++) {
        if (!(r[i] > 0) || !isfinite(r[i])) factor = NAN;
        if (r[i] > factor) factor = r[i];
        if (r[i] != 1.0f) all_one = 0;
    }
    if (all_one) {
        xllm_free(r);
        return;
    }
    /* candidates: the file's own keys, Llama 3.1/3.2's values, a fit of the ramp */
    double cand[3][3];
    int nc = 0;
    double low = 1, high = 4, orig = 8192;
    int has_orig = arch_num(b, "rope.scaling.original_context_length", &orig);
    int has_low = arch_num(b, "rope.scaling.low_freq_factor", &low);
    int has_high = arch_num(b, "rope.scaling.high_freq_factor", &high);
    if (has_orig || has_low || has_high) cand[nc][0] = low, cand[nc][1] = high, cand[nc][2] = orig, nc++;
    cand[nc][0] = 1, cand[nc][1] = 4, cand[nc][2] = 8192, nc++;
    {
        /* on the ramp, s = (1/r - 1/f) / (1 - 1/f) = A x - B with x = 1/wavelen; with low = 1:
         * high = 1 + 1/B, orig = A / B */
        const double pi = 3.14159265358979323846;
        int i0 = -1, i1 = -1;
        for (int i = 0; i < half; i++)
            if (r[i] > 1.0001f && r[i] < factor * 0.9999) {
                if (i0 < 0) i0 = i;
                else i1 = i;
            }
        if (i0 >= 0 && i1 >= 0 && factor > 1) {
            double x0 = 1.0 / pow(theta, (double)(2 * i0) / head_dim) / (2 * pi);
            double x1 = 1.0 / pow(theta, (double)(2 * i1) / head_dim) / (2 * pi);
            double s0 = (1 / r[i0] - 1 / factor) / (1 - 1 / factor), s1 = (1 / r[i1] - 1 / factor) / (1 - 1 / factor);
            double A = (s0 - s1) / (x0 - x1), B = A * x0 - s0;
            if (isfinite(A) && isfinite(B) && A > 0 && B > 0)
                cand[nc][0] = 1, cand[nc][1] = 1 + 1 / B, cand[nc][2] = A / B, nc++;
        }
    }
    int found = -1;
    for (int k = 0; k < nc && found < 0 && isfinite(factor); k++) {
        if (!(cand[k][0] > 0 && cand[k][1] > cand[k][0] && cand[k][2] > 0)) continue;
        gguf_llama3_rope_factors(theta, head_dim, factor, cand[k][0], cand[k][1], cand[k][2], want);
        int ok = 1;
        for (int i = 0; i < half && ok; i++) ok = fabs((double)want[i] - r[i]) <= 1e-4 * fabs((double)r[i]) + 1e-6;
        if (ok) found = k;
    }
    xllm_free(r);
    if (found < 0) {
        c->st = err_setf(c->err, XLLM_ERR_UNSUPPORTED,
                            "%s: rope_freqs.weight holds per-frequency RoPE factors that are not Llama 3 rope scaling; "
                            "not supported", c->path);
        return;
    }
    cJSON *rs = cJSON_AddObjectToObject(b->cfg, "rope_scaling");
    if (!rs) {
        b->oom = 1;
        return;
    }
    b->oom |= !cJSON_AddStringToObject(rs, "rope_type", "llama3");
    b->oom |= !cJSON_AddNumberToObject(rs, "factor", gguf_f32_to_double((float)factor));
    b->oom |= !cJSON_AddNumberToObject(rs, "low_freq_factor", cand[found][0]);
    b->oom |= !cJSON_AddNumberToObject(rs, "high_freq_factor", cand[found][1]);
    b->oom |= !cJSON_AddNumberToObject(rs, "original_max_position_embeddings", cand[found][2]);
}

/* YaRN as llama.cpp reads it: rope.scaling.factor, original_context_length
 * (default: the context length), yarn_beta_fast / yarn_beta_slow (32 / 1)
 * and rope.scaling.attn_factor (1), a further cos/sin scale on top of YaRN's
 * own 1 + 0.1 ln(factor). DeepSeek (MLA families) stores mscale_all_dim as
 * rope.scaling.yarn_log_multiplier = 0.1 mscale_all_dim: llama.cpp then
 * takes mscale = mscale_all_dim (cos/sin unscaled) and the softmax scale x
 * mscale(factor, mscale_all_dim)^2; without it, cos/sin x mscale(factor, 1)
 * and the softmax scale x its square, which is HF's mscale_all_dim = 1
 * without mscale. Becomes HF's rope_scaling {"rope_type": "yarn", ...}. */
static xllm_status yarn_config(cfg_b *b, const arch_info *A, double factor, int64_t ctx_len) {
    gguf_ctx *c = b->c;
    double orig = (double)ctx_len, bf = 0, bs = 0, af = 1, lm = 0;
    arch_num(b, "rope.scaling.original_context_length", &orig);
    int has_bf = arch_num(b, "rope.scaling.yarn_beta_fast", &bf), has_bs = arch_num(b, "rope.scaling.yarn_beta_slow", &bs);
    arch_num(b, "rope.scaling.attn_factor", &af);
    if (A->mla) arch_num(b, "rope.scaling.yarn_log_multiplier", &lm);
    if (!(orig >= 1) || (has_bf && !(bf > 0)) || (has_bs && !(bs > 0)) || !(af > 0) || !isfinite(af) || !isfinite(lm) ||
        fabs(lm) > 100)
        return c->st = err_setf(c->err, XLLM_ERR_FORMAT,
                                "%s: yarn needs rope.scaling.original_context_length >= 1, positive yarn_beta_fast, "
                                "yarn_beta_slow and attn_factor, and |yarn_log_multiplier| <= 100", c->path);
    if (A->mla && af != 1.0)
        return c->st = err_setf(c->err, XLLM_ERR_UNSUPPORTED,
                                "%s: rope.scaling.attn_factor %g with yarn in a DeepSeek (MLA) file is not supported",
                                c->path, af);
    cJSON *o = cJSON_AddObjectToObject(b->cfg, "rope_scaling");
    if (!o) return b->oom = 1, XLLM_OK;
    b->oom |= !cJSON_AddStringToObject(o, "rope_type", "yarn");
    b->oom |= !cJSON_AddNumberToObject(o, "factor", gguf_f32_to_double((float)factor));
    b->oom |= !cJSON_AddNumberToObject(o, "original_max_position_embeddings", orig);
    if (has_bf) b->oom |= !cJSON_AddNumberToObject(o, "beta_fast", gguf_f32_to_double((float)bf));
    if (has_bs) b->oom |= !cJSON_AddNumberToObject(o, "beta_slow", gguf_f32_to_double((float)bs));
    if (A->mla) {
        double m = lm != 0 ? gguf_f32_to_double((float)lm / 0.1f) : 1.0; /* llama.cpp divides in float */
        if (lm != 0) b->oom |= !cJSON_AddNumberToObject(o, "mscale", m);
        b->oom |= !cJSON_AddNumberToObject(o, "mscale_all_dim", m);
    } else if (af != 1.0) {
        b->oom |= !cJSON_AddNumberToObject(o, "attention_factor", af * arch_yarn_mscale(factor, 1));
    }
    return XLLM_OK;
}

/* LongRoPE (Phi-3 128k) as llama.cpp's converter stores it: the factor sets
 * as rope_factors_long / rope_factors_short (rope.dimension_count / 2 f32 each), the
 * pretrained context as rope.scaling.original_context_length (default: the
 * context length) and the cos/sin scale as rope.scaling.attn_factor (llama.cpp's
 * default 1). Becomes HF's rope_scaling {"rope_type": "longrope", ...} with
 * the attention factor given, so HF's default formula is not applied on top. */
static xllm_status longrope_config(cfg_b *b, const tinfo *rl, const tinfo *rs, const unsigned char *data, int rot,
                                   int64_t ctx_len) {
    gguf_ctx *c = b->c;
    int half = rot / 2; /* the rotated values per head / 2 (rope.dimension_count / 2) */
    const tinfo *t2[2] = {rs, rl};
    for (int k = 0; k < 2; k++)
        if (t2[k]->dtype != XLLM_DT_F32 || t2[k]->n_dims != 1 || t2[k]->ne[0] != (uint64_t)half)
            return c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: %s must be %d f32 values (rope.dimension_count / 2)",
                                       c->path, k ? "rope_factors_long" : "rope_factors_short", half);
    double orig = (double)ctx_len, af = 1.0;
    arch_num(b, "rope.scaling.original_context_length", &orig);
    arch_num(b, "rope.scaling.attn_factor", &af);
    if (!(orig >= 1) || !(af > 0) || !isfinite(af))
        return c->st = err_setf(c->err, XLLM_ERR_FORMAT,
                                   "%s: LongRoPE needs rope.scaling.original_context_length >= 1 and a positive "
                                   "rope.scaling.attn_factor", c->path);
    cJSON *o = cJSON_AddObjectToObject(b->cfg, "rope_scaling");
    if (!o) return b->oom = 1, XLLM_OK;
    b->oom |= !cJSON_AddStringToObject(o, "rope_type", "longrope");
    const char *names[2] = {"short_factor", "long_factor"};
    for (int k = 0; k < 2; k++) {
        cJSON *a = cJSON_AddArrayToObject(o, names[k]);
        if (!a) return b->oom = 1, XLLM_OK;
        for (int i = 0; i < half; i++) {
            float v;
            memcpy(&v, data + t2[k]->offset + (size_t)i * 4, 4);
            b->oom |= !cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v));
        }
    }
    b->oom |= !cJSON_AddNumberToObject(o, "original_max_position_embeddings", orig);
    b->oom |= !cJSON_AddNumberToObject(o, "attention_factor", gguf_f32_to_double((float)af));
    return XLLM_OK;
}

/* Multi-head latent attention (DeepSeek-V2/V3 as llama.cpp writes them): the
 * HF config's q_lora_rank (0 without attn_q_a: a plain attn_q), kv_lora_rank,
 * qk_nope / qk_rope / v_head_dim. llama.cpp's newer files give the per-head
 * sizes as key_length_mla / value_length_mla (key_length is then the latent
 * row, kv_lora_rank + rope); older ones as key_length / value_length. */
static xllm_status mla_config(cfg_b *b, const tinfo *ti, uint64_t nt, int64_t key_len, int64_t val_len,
                              int64_t rope_dim) {
    gguf_ctx *c = b->c;
    int64_t kv_lora = arch_int(b, "attention.kv_lora_rank", -1, 2, 1 << 20);
    int64_t q_lora = arch_int(b, "attention.q_lora_rank", 0, 0, 1 << 20);
    int64_t k_mla = arch_int(b, "attention.key_length_mla", 0, 1, 4096);
    int64_t v_mla = arch_int(b, "attention.value_length_mla", 0, 1, 4096);
    if (c->st) return c->st;
    if (k_mla) key_len = k_mla;
    if (v_mla) val_len = v_mla;
    if (!key_len || !val_len || !rope_dim || rope_dim >= key_len)
        return err_setf(c->err, XLLM_ERR_FORMAT, "%s: MLA needs attention.key_length(_mla) > rope.dimension_count "
                           "and attention.value_length(_mla)", c->path);
    if (!find_tensor(ti, nt, "blk.0.attn_q_a.weight")) q_lora = 0; /* V2-Lite: attn_q */
    if (q_lora) put_num(b, "q_lora_rank", (double)q_lora);
    put_num(b, "kv_lora_rank", (double)kv_lora);
    put_num(b, "qk_nope_head_dim", (double)(key_len - rope_dim));
    put_num(b, "qk_rope_head_dim", (double)rope_dim);
    put_num(b, "v_head_dim", (double)val_len);
    return c->st;
}

/* The family's own keys (arch.h's row A): MoE sizes, Gemma's soft-caps,
 * window pattern, local RoPE base and attention scale, as llama.cpp reads them. */
static xllm_status family_config(cfg_b *b, const arch_info *A, int64_t hidden, int64_t heads, int64_t layers,
                                 int64_t head_dim, int64_t ff, int64_t window) {
    gguf_ctx *c = b->c;
    if (A->moe != MOE_NONE) {
        int64_t experts = arch_int(b, "expert_count", -1, 1, 1 << 16);
        int64_t used = arch_int(b, "expert_used_count", -1, 1, 1 << 16);
        if (c->st) return c->st;
        if (A->moe == MOE_MIXTRAL) {
            put_num(b, "num_local_experts", (double)experts);
        } else if (A->moe == MOE_DEEPSEEK) { /* llama.cpp's reading of its keys, as HF's config says it */
            put_num(b, "n_routed_experts", (double)experts);
            put_num(b, "moe_intermediate_size", (double)arch_int(b, "expert_feed_forward_length", -1, 1, 1 << 22));
            put_num(b, "n_shared_experts", (double)arch_int(b, "expert_shared_count", 0, 0, 64));
            put_num(b, "first_k_dense_replace", (double)arch_int(b, "leading_dense_block_count", 0, 0, layers));
            int64_t gating = arch_int(b, "expert_gating_func", 1, 0, 16);
            int64_t groups = arch_int(b, "expert_group_count", 0, 0, 1024);
            int64_t groups_used = arch_int(b, "expert_group_used_count", groups, 0, 1024);
            double scale = 0;
            int norm = 0;
            arch_num(b, "expert_weights_scale", &scale);
            char key[160];
            snprintf(key, sizeof key, "%s.expert_weights_norm", b->arch);
            if (gguf_find(c, key) && !gguf_get_bool(c, key, &norm) && !c->st)
                c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: %s must be a bool", c->path, key);
            if (c->st) return c->st;
            if (gating > 2)
                return err_setf(c->err, XLLM_ERR_UNSUPPORTED, "%s: expert_gating_func %lld is not supported "
                                   "(supported: 1 softmax, 2 sigmoid)", c->path, (long long)gating);
            if (!(scale >= 0 && scale <= 1e4))
                return err_setf(c->err, XLLM_ERR_FORMAT, "%s: expert_weights_scale must be in [0, 1e4]", c->path);
            put_str(b, "scoring_func", gating == 2 ? "sigmoid" : "softmax");
            /* llama.cpp: a group's score is its two best summed, the bias (when the file has it) only chooses:
             * HF's noaux_tc; a missing bias is zero */
            int biased = find_tensor(b->ti, b->nt, "blk.0.exp_probs_b.bias") != NULL;
            for (int64_t l = 0; l < layers && !biased; l++) {
                char n[64];
                snprintf(n, sizeof n, "blk.%lld.exp_probs_b.bias", (long long)l);
                biased = find_tensor(b->ti, b->nt, n) != NULL;
            }
            put_str(b, "topk_method", groups > 1 || biased ? "noaux_tc" : "greedy");
            put_num(b, "n_group", (double)(groups > 1 ? groups : 1));
            put_num(b, "topk_group", (double)(groups > 1 ? groups_used : 1));
            put_num(b, "routed_scaling_factor", scale > 0 ? scale : 1.0);
            put_bool(b, "norm_topk_prob", norm);
        } else {
            put_num(b, "num_experts", (double)experts);
            /* llama.cpp's fallbacks when the sizes are absent: ff / used and ff */
            put_num(b, "moe_intermediate_size", (double)arch_int(b, "expert_feed_forward_length", ff / used, 1, 1 << 22));
            if (A->shared_expert)
                put_num(b, "shared_expert_intermediate_size",
                        (double)arch_int(b, "expert_shared_feed_forward_length", ff, 0, 1 << 22));
            /* llama.cpp renormalizes the top-k weights of qwen3moe, not of qwen2moe */
            put_bool(b, "norm_topk_prob", A->qk_norm != 0);
        }
        put_num(b, "num_experts_per_tok", (double)used);
    }
    if (A->norm_offset != 0) put_num(b, "xllm_norm_offset", 0); /* GGUF stores the multiplier itself */
    if (A->act == ARCH_ACT_GELU_TANH) put_str(b, "hidden_activation", "gelu_pytorch_tanh");
    if (A->window == ARCH_WIN_EVEN || A->window == ARCH_WIN_PATTERN) {
        if (window > 0) put_num(b, "sliding_window", (double)window);
        /* llama.cpp scales q by 1 / sqrt(head size), except Gemma 2 27B (46 layers) and Gemma 3 27B (62) */
        int wide = (A->window == ARCH_WIN_EVEN && layers == 46) || (A->window == ARCH_WIN_PATTERN && layers == 62);
        put_num(b, "query_pre_attn_scalar", wide ? (double)(hidden / heads) : (double)head_dim);
    }
    if (A->softcap) {
        /* llama.cpp's defaults when the keys are absent (softcap 2), or none (1) */
        double attn = A->softcap == 2 ? 50.0 : 0, final = A->softcap == 2 ? 30.0 : 0;
        arch_num(b, "attn_logit_softcapping", &attn);
        arch_num(b, "final_logit_softcapping", &final);
        if (!(attn >= 0) || !(final >= 0))
            return err_setf(c->err, XLLM_ERR_FORMAT, "%s: soft-capping values must not be negative", c->path);
        if (attn > 0) put_num(b, "attn_logit_softcapping", attn);
        if (final > 0) put_num(b, "final_logit_softcapping", final);
    }
    if (A->rope_local) {
        double swa = 10000.0;
        arch_num(b, "rope.freq_base_swa", &swa);
        if (!(swa > 0)) return err_setf(c->err, XLLM_ERR_FORMAT, "%s: rope.freq_base_swa must be positive", c->path);
        put_num(b, "rope_local_base_freq", swa);
    }
    if (A->window == ARCH_WIN_PATTERN) { /* period, or one bool per layer */
        char key[160];
        snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", A->gguf_arch);
        const gguf_kv *arr = NULL, *kv = gguf_find(c, key);
        int64_t period;
        if (kv && kv->type != GGUF_ARRAY && gguf_get_int(c, key, &period)) {
            if (period < 1 || period > (1 << 20))
                return err_setf(c->err, XLLM_ERR_FORMAT, "%s: %s = %lld is not a period", c->path, key,
                                   (long long)period);
            put_num(b, "sliding_window_pattern", (double)period);
        } else if (kv && gguf_get_num_array(c, key, &arr)) {
            if (arr->arr_n != (uint64_t)layers)
                return err_setf(c->err, XLLM_ERR_FORMAT, "%s: %s has %llu entries for %lld layers", c->path, key,
                                   (unsigned long long)arr->arr_n, (long long)layers);
            cJSON *lt = cJSON_AddArrayToObject(b->cfg, "layer_types");
            b->oom |= !lt;
            for (uint64_t i = 0; lt && i < arr->arr_n; i++)
                b->oom |= !cJSON_AddItemToArray(lt, cJSON_CreateString(gguf_arr_int(arr, i) ? "sliding_attention"
                                                                                             : "full_attention"));
        }
    }
    return c->st;
}

static xllm_status build_config(gguf_ctx *c, const arch_info *A, const tinfo *ti, uint64_t nt,
                                const unsigned char *data, size_t n_tokens, gguf_model *out) {
    const char *arch = A->gguf_arch;
    cfg_b b = {c, arch, cJSON_CreateObject(), 0, ti, nt};
    if (!b.cfg) return err_setf(c->err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", c->path);
    out->config = b.cfg;
    int is_llama = A->rope_interleaved_gguf; /* llama's layout (and its rope_freqs): llama and Mixtral */
    cJSON *archs = cJSON_AddArrayToObject(b.cfg, "architectures");
    b.oom |= !archs || !cJSON_AddItemToArray(archs, cJSON_CreateString(A->hf_class));
    put_str(&b, "model_type", A->hf_type);

    int64_t hidden = arch_int(&b, "embedding_length", -1, 1, 1 << 20);
    int64_t layers = arch_int(&b, "block_count", -1, 1, 1 << 16);
    int64_t ff = arch_int(&b, "feed_forward_length", -1, 1, 1 << 22);
    int64_t heads = arch_int(&b, "attention.head_count", -1, 1, 4096);
    int64_t kv_heads = arch_int(&b, "attention.head_count_kv", heads, 1, 4096);
    int64_t ctx_len = arch_int(&b, "context_length", 2048, 1, (int64_t)1 << 30);
    int64_t key_len = arch_int(&b, "attention.key_length", 0, 1, 4096);
    int64_t val_len = arch_int(&b, "attention.value_length", 0, 1, 4096);
    int64_t rope_dim = arch_int(&b, "rope.dimension_count", 0, 1, 4096);
    int64_t experts = arch_int(&b, "expert_count", 0, 0, 1 << 16);
    int64_t window = arch_int(&b, "attention.sliding_window", 0, 0, (int64_t)1 << 30);
    double eps = 0, theta = 10000.0;
    if (!c->st && !arch_num(&b, "attention.layer_norm_rms_epsilon", &eps) && !c->st)
        c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: missing metadata \"%s.attention.layer_norm_rms_epsilon\"",
                            c->path, arch);
    arch_num(&b, "rope.freq_base", &theta);
    if (c->st) return c->st;
    if (!(eps > 0) || !(theta > 0))
        return err_setf(c->err, XLLM_ERR_FORMAT, "%s: rms epsilon and rope.freq_base must be positive", c->path);
    int64_t head_dim = key_len;
    if (!head_dim) {
        if (hidden % heads)
            return err_setf(c->err, XLLM_ERR_FORMAT,
                               "%s: embedding_length %lld is not a multiple of head_count %lld and there is no "
                               "attention.key_length", c->path, (long long)hidden, (long long)heads);
        head_dim = hidden / heads;
    }
    if (A->mla) { /* DeepSeek's sizes; the checks below are about plain attention */
        if (mla_config(&b, ti, nt, key_len, val_len, rope_dim)) return c->st;
        val_len = rope_dim = 0;
    }
    if (val_len && val_len != head_dim)
        return err_setf(c->err, XLLM_ERR_UNSUPPORTED,
                           "%s: attention.value_length %lld differs from key_length %lld; not supported", c->path,
                           (long long)val_len, (long long)head_dim);
    (void)experts; /* the row was chosen by it (arch_by_gguf) */
    if (find_tensor(ti, nt, "blk.0.rope_factors_long.weight") || find_tensor(ti, nt, "blk.0.rope_factors_short.weight"))
        return err_setf(c->err, XLLM_ERR_UNSUPPORTED,
                           "%s: per-layer LongRoPE factors (blk.N.rope_factors_*) are not supported; llama.cpp's "
                           "converter writes one rope_factors_long / rope_factors_short pair", c->path);
    /* rope.dimension_count below the head size: RoPE over the first rope_dim values of each head
     * (llama.cpp's n_rot; Phi-4-mini), HF's partial_rotary_factor (arch_rope_dims gives it back) */
    if (rope_dim &&
        (rope_dim > head_dim || arch_rope_dims((int)head_dim, (double)rope_dim / (double)head_dim) != rope_dim))
        return err_setf(c->err, XLLM_ERR_FORMAT,
                           "%s: rope.dimension_count %lld must be even and at most the head size %lld", c->path,
                           (long long)rope_dim, (long long)head_dim);
    int64_t rot = rope_dim ? rope_dim : head_dim;

    const tinfo *emb = find_tensor(ti, nt, "token_embd.weight");
    int64_t vocab = 0;
    if (emb && emb->n_dims == 2) vocab = (int64_t)emb->ne[1];
    else if (n_tokens) vocab = (int64_t)n_tokens;
    else vocab = arch_int(&b, "vocab_size", -1, 1, 1 << 24);
    if (c->st) return c->st;

    put_num(&b, "hidden_size", (double)hidden);
    put_num(&b, "num_hidden_layers", (double)layers);
    put_num(&b, "intermediate_size", (double)ff);
    put_num(&b, "num_attention_heads", (double)heads);
    put_num(&b, "num_key_value_heads", (double)kv_heads);
    put_num(&b, "head_dim", (double)head_dim);
    if (rot < head_dim) put_num(&b, "partial_rotary_factor", (double)rot / (double)head_dim);
    put_num(&b, "rms_norm_eps", eps);
    put_num(&b, "rope_theta", theta);
    put_num(&b, "max_position_embeddings", (double)ctx_len);
    put_num(&b, "vocab_size", (double)vocab);
    if (A->act == ARCH_ACT_SILU) put_str(&b, "hidden_act", "silu");
    put_bool(&b, "tie_word_embeddings", find_tensor(ti, nt, "output.weight") == NULL);
    if (!A->qkv_bias) {
        put_bool(&b, "attention_bias", find_tensor(ti, nt, "blk.0.attn_q.bias") != NULL);
        put_bool(&b, "mlp_bias", find_tensor(ti, nt, "blk.0.ffn_gate.bias") != NULL);
    } else {
        put_bool(&b, "use_sliding_window", 0);
    }
    put_bool(&b, "xllm_rope_interleaved", is_llama);
    /* llama: a window on every layer (Mistral); llama.cpp ignores the key for qwen2/qwen3 and phi3, so do we */
    if (window > 0 && A->window == ARCH_WIN_ALL) put_num(&b, "sliding_window", (double)window);
    if (family_config(&b, A, hidden, heads, layers, head_dim, ff, window)) return c->st;

    /* rope scaling */
    gguf_str st;
    char key[160];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    double factor = 0;
    int linear = 0, yarn = 0;
    if (gguf_get_str(c, key, &st)) {
        if ((st.len == 6 && memcmp(st.p, "linear", 6) == 0) || (st.len == 4 && memcmp(st.p, "yarn", 4) == 0)) {
            linear = st.len == 6, yarn = st.len == 4;
            if (!arch_num(&b, "rope.scaling.factor", &factor) || !(factor > 0))
                if (!c->st)
                    c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: %s rope scaling without a positive factor",
                                        c->path, yarn ? "yarn" : "linear");
        } else if (!(st.len == 4 && memcmp(st.p, "none", 4) == 0)) {
            char sbuf[96];
            return err_setf(c->err, XLLM_ERR_UNSUPPORTED,
                               "%s: rope scaling type \"%s\" is not supported (supported: none, linear, yarn, llama3 "
                               "factors)", c->path, show(st.p, st.len, sbuf, sizeof sbuf));
        }
    } else if (arch_num(&b, "rope.scale_linear", &factor) && factor != 1.0) {
        linear = factor > 0;
        if (!linear)
            return err_setf(c->err, XLLM_ERR_FORMAT, "%s: rope.scale_linear must be positive", c->path);
    }
    if (c->st) return c->st;
    if (linear && factor != 1.0) {
        cJSON *rs = cJSON_AddObjectToObject(b.cfg, "rope_scaling");
        b.oom |= !rs || !cJSON_AddStringToObject(rs, "rope_type", "linear") || !cJSON_AddNumberToObject(rs, "factor", factor);
    }
    if (yarn && yarn_config(&b, A, factor, ctx_len)) return c->st;
    const tinfo *rl = find_tensor(ti, nt, "rope_factors_long.weight"), *rsh = find_tensor(ti, nt, "rope_factors_short.weight");
    if (rl || rsh) {
        if (linear || yarn || !rl || !rsh || find_tensor(ti, nt, "rope_freqs.weight"))
            return err_setf(c->err, XLLM_ERR_UNSUPPORTED,
                               "%s: LongRoPE needs both rope_factors_long and rope_factors_short, and no other rope "
                               "scaling", c->path);
        if (longrope_config(&b, rl, rsh, data, (int)rot, ctx_len)) return c->st;
    }
    const tinfo *rf = find_tensor(ti, nt, "rope_freqs.weight");
    if (rf) {
        if (!is_llama)
            return err_setf(c->err, XLLM_ERR_UNSUPPORTED,
                               "%s: rope_freqs.weight (per-frequency RoPE factors) is only supported for llama",
                               c->path);
        if (linear || yarn)
            return err_setf(c->err, XLLM_ERR_UNSUPPORTED,
                               "%s: both %s rope scaling and rope_freqs.weight; not supported", c->path,
                               yarn ? "yarn" : "linear");
        rope_from_freqs(&b, rf, data, (int)rot, theta);
        if (c->st) return c->st;
    }

    /* special tokens */
    int64_t bos = -1, eos = -1, eot = -1, eom = -1, v;
    if (gguf_get_int(c, "tokenizer.ggml.bos_token_id", &v) && v >= 0 && v < vocab) bos = v;
    if (gguf_get_int(c, "tokenizer.ggml.eos_token_id", &v) && v >= 0 && v < vocab) eos = v;
    if (gguf_get_int(c, "tokenizer.ggml.eot_token_id", &v) && v >= 0 && v < vocab) eot = v;
    if (gguf_get_int(c, "tokenizer.ggml.eom_token_id", &v) && v >= 0 && v < vocab) eom = v;
    if (c->st) return c->st;
    if (bos >= 0) put_num(&b, "bos_token_id", (double)bos);
    if (eos >= 0) put_num(&b, "eos_token_id", (double)eos);
    if (bos >= 0 || eos >= 0 || eot >= 0) {
        cJSON *g = cJSON_CreateObject();
        out->generation_config = g;
        if (!g) return err_setf(c->err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", c->path);
        if (bos >= 0) b.oom |= !cJSON_AddNumberToObject(g, "bos_token_id", (double)bos);
        int64_t ids[3] = {eos, eot, eom};
        int n = 0;
        double list[3];
        for (int i = 0; i < 3; i++) {
            int dup = ids[i] < 0;
            for (int j = 0; j < n && !dup; j++) dup = list[j] == (double)ids[i];
            if (!dup) list[n++] = (double)ids[i];
        }
        if (n == 1) b.oom |= !cJSON_AddNumberToObject(g, "eos_token_id", list[0]);
        else if (n > 1) {
            cJSON *arr = cJSON_CreateDoubleArray(list, n);
            b.oom |= !arr || !cJSON_AddItemToObject(g, "eos_token_id", arr);
        }
    }
    if (b.oom) return err_setf(c->err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", c->path);
    return XLLM_OK;
}

/* --------------------------------------------------------------- open */

int gguf_is_gguf(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char magic[4];
    int ok = fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
    fclose(f);
    return ok;
}

void gguf_close(gguf_model *g) {
    if (!g) return;
    st_close(g->tensors);
    cJSON_Delete(g->config);
    cJSON_Delete(g->generation_config);
    xllm_free(g->tokenizer_json);
    xllm_free(g->tokenizer_config_json);
    memset(g, 0, sizeof *g);
}

/* The fixed header: magic, a supported version, and counts a file of size
 * bytes can hold. */
static xllm_status read_header(const char *path, const unsigned char *map, size_t size, uint64_t *n_tensors,
                               uint64_t *n_kv, xllm_error *err) {
    if (size < 4 || memcmp(map, "GGUF", 4) != 0)
        return err_setf(err, XLLM_ERR_FORMAT, "%s: not a GGUF file (bad magic)", path);
    if (size < 24) return err_setf(err, XLLM_ERR_FORMAT, "%s: truncated GGUF header (%zu bytes)", path, size);
    uint32_t version = rd_u32(map + 4);
    if (version != 2 && version != 3) {
        if (version == 0x03000000u || version == 0x02000000u)
            return err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: big-endian GGUF files are not supported", path);
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: GGUF version %u is not supported (supported: 2, 3)", path,
                           version);
    }
    *n_tensors = rd_u64(map + 8);
    *n_kv = rd_u64(map + 16);
    if (*n_kv > (size - 24) / 13 || *n_tensors > (size - 24) / 32)
        return err_setf(err, XLLM_ERR_FORMAT,
                           "%s: the header claims %llu metadata entries and %llu tensors, more than a %zu-byte file "
                           "can hold (truncated or corrupt)", path, (unsigned long long)*n_kv,
                           (unsigned long long)*n_tensors, size);
    return XLLM_OK;
}

/* general.architecture, as one this loader knows (with experts when the
 * file says it has them). */
static xllm_status find_arch(gguf_ctx *c, const arch_info **out) {
    const char *path = c->path;
    xllm_error *err = c->err;
    gguf_str arch_s;
    char arch[32];
    if (!gguf_get_str(c, "general.architecture", &arch_s))
        return c->st ? c->st : err_setf(err, XLLM_ERR_FORMAT, "%s: no general.architecture", path);
    show(arch_s.p, arch_s.len, arch, sizeof arch);
    char key[80];
    int64_t experts = 0;
    snprintf(key, sizeof key, "%s.expert_count", arch);
    gguf_get_int(c, key, &experts);
    *out = arch_by_gguf(arch, experts > 0);
    if (*out) return XLLM_OK;
    return err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: architecture \"%s\"%s is not supported (supported: %s)", path,
                       arch, experts > 0 ? " with experts" : "", arch_gguf_list());
}

/* The tensors into the archive, under HF names, shapes outermost first; a
 * tensor stacking the experts becomes one view per expert (its outermost
 * dimension). data: the start of the tensor data; label: the file's name for
 * the archive. */
static xllm_status add_tensors(const char *path, st_archive *a, const arch_info *A, const tinfo *ti,
                               uint64_t n_tensors, const unsigned char *data, const char *label, xllm_error *err) {
    xllm_status st;
    for (uint64_t i = 0; i < n_tensors; i++) {
        const tinfo *t = &ti[i];
        char hf[1100];
        int kind = gguf_name_to_hf(A, t->cname, 0, hf, sizeof hf);
        uint64_t E = kind == 2 && t->n_dims == 3 ? t->ne[2] : 1;
        if (kind == 2 && (t->n_dims != 3 || E == 0 || E > (1 << 16) || t->nbytes % E))
            return err_setf(err, XLLM_ERR_FORMAT, "%s: %s stacks experts but is not 3-D with 1 to 65536 of them",
                               path, t->cname);
        for (uint64_t e = 0; e < E; e++) {
            st_tensor s;
            memset(&s, 0, sizeof s);
            if (kind == 2) gguf_name_to_hf(A, t->cname, (int)e, hf, sizeof hf);
            s.name = kind ? hf : t->cname;
            s.dtype = t->dtype;
            s.ndim = kind == 2 ? 2 : (int)t->n_dims;
            for (int d = 0; d < s.ndim; d++) s.shape[d] = (int64_t)t->ne[s.ndim - 1 - d];
            /* the shared expert's gate is one row, stored 1-D */
            size_t nl = strlen(s.name), sl = strlen("shared_expert_gate.weight");
            if (s.ndim == 1 && nl > sl && !strcmp(s.name + nl - sl, "shared_expert_gate.weight")) {
                s.ndim = 2;
                s.shape[1] = s.shape[0];
                s.shape[0] = 1;
            }
            s.group = dtype_is_quant(t->dtype) ? gguf_block_elems(t->dtype) : 0;
            s.nbytes = (size_t)(t->nbytes / E);
            s.data = data + t->offset + (size_t)e * s.nbytes;
            s.file = label;
            if ((st = st_archive_add(a, &s, err))) return st;
        }
    }
    return XLLM_OK;
}

xllm_status gguf_open(const char *path, gguf_model *out, xllm_error *err) {
    memset(out, 0, sizeof *out);
    if (!path) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "gguf_open: path is NULL");
    gguf_kv *kv = NULL;
    tinfo *ti = NULL;
    uint64_t n_tensors = 0, n_named = 0, n_kv = 0;
    xllm_status st = XLLM_OK;
    st_archive *a = st_archive_new(err);
    if (!a) return err ? err->code : XLLM_ERR_OUT_OF_MEMORY;
    out->tensors = a;
    const unsigned char *map;
    size_t size;
    const char *label;
    if ((st = st_archive_map(a, path, &map, &size, &label, err))) goto done;
    if ((st = read_header(path, map, size, &n_tensors, &n_kv, err))) goto done;
    cursor cur = {map + 24, map + size};
    if ((st = parse_kvs(path, &cur, &kv, n_kv, err))) goto done;
    gguf_ctx c = {path, kv, (size_t)n_kv, err, XLLM_OK};

    int64_t alignment = GGUF_DEFAULT_ALIGNMENT;
    if (gguf_get_int(&c, "general.alignment", &alignment) &&
        (alignment < 1 || alignment > (1 << 24) || (alignment & (alignment - 1))))
        st = err_setf(err, XLLM_ERR_FORMAT, "%s: general.alignment %lld is not a power of two", path,
                         (long long)alignment);
    if (c.st) st = c.st;
    if (st) goto done;

    if ((st = parse_tensor_infos(path, &cur, &ti, n_tensors, err))) goto done;
    uint64_t pos = (uint64_t)(cur.p - map);
    uint64_t data_start = (pos + (uint64_t)alignment - 1) / (uint64_t)alignment * (uint64_t)alignment;
    if (n_tensors && data_start > size) {
        st = err_setf(err, XLLM_ERR_FORMAT, "%s: truncated: the tensor data would start at byte %llu of %zu", path,
                         (unsigned long long)data_start, size);
        goto done;
    }
    if ((st = check_tensors(path, ti, n_tensors, data_start, size, (uint64_t)alignment, err))) goto done;
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (!(ti[i].cname = mem_strndup(ti[i].name.p, ti[i].name.len))) {
            st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
            goto done;
        }
        n_named++;
    }

    /* architecture and config */
    const arch_info *A;
    if ((st = find_arch(&c, &A))) goto done;
    size_t n_tokens = 0;
    const gguf_kv *tk = gguf_find(&c, "tokenizer.ggml.tokens");
    if (tk && tk->type == GGUF_ARRAY) n_tokens = (size_t)tk->arr_n;
    if ((st = build_config(&c, A, ti, n_tensors, map + data_start, n_tokens, out))) goto done;
    if ((st = add_tensors(path, a, A, ti, n_tensors, map + data_start, label, err))) goto done;
    if ((st = st_archive_seal(a, err))) goto done;

    int64_t ctx_len = 0;
    const cJSON *mp = cJSON_GetObjectItemCaseSensitive(out->config, "max_position_embeddings");
    if (cJSON_IsNumber(mp)) ctx_len = (int64_t)mp->valuedouble;
    st = gguf_tok_synthesize(&c, ctx_len, &out->tokenizer_json, &out->tokenizer_config_json);

done:
    for (uint64_t i = 0; i < n_named; i++) xllm_free(ti[i].cname);
    xllm_free(ti);
    xllm_free(kv);
    if (st) {
        if (err && err->code == XLLM_OK) err_setf(err, st, "%s: cannot open", path);
        gguf_close(out);
    }
    return st;
}
