/*
 * convert.c - HuggingFace checkpoint -> one .xllm file (xllm_convert).
 *
 * Tensors stream through one at a time (f32 in memory, then the type the
 * precision policy picks). Per decoder layer three optional rewrites happen
 * before writing, all exact in f32:
 *   - activation-aware scaling (with calibration, for int4 targets): for a
 *     group of matrices sharing an input (q/k/v after the attention norm,
 *     gate/up after the MLP norm, down after up), choose per-input-channel
 *     scales s = E[x^2]^(alpha/2) with the alpha that minimises the
 *     activation-weighted int4 error, multiply the matrices' columns by s and
 *     divide the producer (the norm weight, or up's rows) by s;
 *   - clipping: each int4 group's range is clipped where that lowers the
 *     activation-weighted error (quant_quantize_row with importance);
 *   - fusion: q/k/v into one qkv_proj matrix and gate/up into gate_up_proj.
 * Everything else is copied in the policy's type. Tokenizer files ride along
 * as blobs; config, policy and provenance go into the metadata.
 */
#include "xllm.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"
#include "base/file.h"
#include "convert/calibrate.h"
#include "convert/gptq.h"
#include "convert/policy.h"
#include "format/safetensors.h"
#include "format/gguf.h"
#include "format/xllm_file.h"
#include "model/model_config.h"
#include "quant/kquant.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NAME_LEN 300

xllm_convert_options xllm_convert_options_default(void) {
    xllm_convert_options o;
    memset(&o, 0, sizeof o);
    return o;
}

/* One tensor on its way out: f32 values (owned) or a raw non-float copy. */
typedef struct out_t {
    char name[NAME_LEN];
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    float *data;               /* f32 values, owned */
    const st_tensor *raw;      /* non-float tensors are copied as stored */
    tensor_class cls;
    float *importance;         /* per input column (owned) or NULL */
    double *hessian;           /* E[x x^T] of the input, cols x cols (owned) or NULL: enables GPTQ */
} out_t;

typedef struct conv {
    const xllm_convert_options *o;
    policy pol;
    st_archive *src;
    model_config cfg;
    calib_stats calib;
    int have_calib;
    xf_writer *w;              /* .xllm output */
    int to_gguf;               /* GGUF output: tensors collected here, written at the end */
    st_tensor *gt;
    size_t gn, gcap;
    char *tok_json, *tok_cfg;  /* the source's tokenizer files (text), or NULL */
    size_t tok_json_len, tok_cfg_len;
    gguf_model gsrc;           /* when the source is a GGUF file */
    uint8_t *done;             /* per source tensor index: already written (or fused away) */
    size_t n_written, n_fetched, n_total;  /* progress counts source tensors read */
    cJSON *types;              /* name -> type actually written, for the metadata */
    cJSON *fallbacks;          /* name -> why it is stored otherwise than its class's type */
    double awq_alpha_sum;
    int awq_groups;
    int gptq_matrices;
} conv;

static int64_t numel(const out_t *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static void out_free(out_t *t) {
    xllm_free(t->data);
    xllm_free(t->importance);
    xllm_free(t->hessian);
    t->data = NULL;
    t->importance = NULL;
    t->hessian = NULL;
}

static size_t index_of(const conv *c, const st_tensor *t) { return (size_t)(t - st_at(c->src, 0)); }

/* Load a source tensor as f32 (or as a raw copy for non-float types). */
static xllm_status fetch(conv *c, const st_tensor *t, out_t *o, xllm_error *err) {
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", t->name);
    o->ndim = t->ndim;
    memcpy(o->shape, t->shape, sizeof o->shape);
    o->cls = tensor_class_of(t->name, t->ndim);
    c->done[index_of(c, t)] = 1;
    c->n_fetched++;
    if (t->dtype != XLLM_DT_F32 && t->dtype != XLLM_DT_F16 && t->dtype != XLLM_DT_BF16) {
        o->raw = t;
        return XLLM_OK;
    }
    int64_t n = numel(o);
    o->data = mem_malloc_array((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!o->data) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory reading %s", t->name);
    dtype_to_f32(t->dtype, t->data, o->data, (size_t)n);
    return XLLM_OK;
}

static xllm_status fetch_name(conv *c, const char *name, out_t *o, int *found, xllm_error *err) {
    const st_tensor *t = st_find(c->src, name);
    *found = t != NULL;
    if (!t) {
        memset(o, 0, sizeof *o);
        return XLLM_OK;
    }
    return fetch(c, t, o, err);
}

/* Append a tensor to the output (.xllm: streamed to the file; GGUF: kept). */
static xllm_status sink_add(conv *c, const char *name, dtype_t dtype, int group, int ndim, const int64_t *shape,
                            const void *data, size_t nbytes, xllm_error *err) {
    if (!c->to_gguf) return xf_writer_add(c->w, name, dtype, group, ndim, shape, data, nbytes, err);
    if (array_reserve(&c->gt, &c->gcap, c->gn + 1, sizeof *c->gt, 64))
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    st_tensor *t = &c->gt[c->gn];
    memset(t, 0, sizeof *t);
    t->name = mem_strdup(name);
    void *copy = mem_malloc(nbytes ? nbytes : 1);
    if (!t->name || !copy) {
        xllm_free((void *)t->name);
        xllm_free(copy);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    memcpy(copy, data, nbytes);
    t->dtype = dtype;
    t->group = group;
    t->ndim = ndim;
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    t->data = copy;
    t->nbytes = nbytes;
    t->file = "(converted)";
    c->gn++;
    return XLLM_OK;
}

static void progress(conv *c) {
    if (c->o->progress && c->n_fetched < c->n_total) /* 1.0 is reported once the file is in place */
        c->o->progress(c->o->progress_user, "converting", (double)c->n_fetched / (double)c->n_total);
}

/* Convert o to its policy type and append it to the file. */
static xllm_status emit(conv *c, out_t *o, xllm_error *err) {
    xllm_status st;
    char tname[32];
    if (o->raw) {
        st = sink_add(c, o->name, o->raw->dtype, o->raw->group, o->ndim, o->shape, o->raw->data, o->raw->nbytes, err);
        if (!st) cJSON_AddStringToObject(c->types, o->name, dtype_name(o->raw->dtype));
        c->n_written++;
        progress(c);
        return st;
    }
    int64_t cols = o->shape[o->ndim - 1], rows = numel(o) / (cols ? cols : 1);
    qtype t = policy_pick_named(&c->pol, o->name, o->cls, o->ndim, cols);
    qtype want = c->pol.cls[o->cls];
    if (o->ndim == 2 && (t.dtype != want.dtype || t.group != want.group) && t.group == 0 && want.group > 0 &&
        c->fallbacks) {
        /* a block type whose block does not divide the row width: recorded, so convert and info can say so */
        char why[160], wname[32];
        snprintf(why, sizeof why, "stored as %s instead of %s: rows of %lld values are not a multiple of %d",
                 qtype_name(t, tname, sizeof tname), qtype_name(want, wname, sizeof wname), (long long)cols,
                 want.group > 0 ? want.group : 32);
        cJSON_AddStringToObject(c->fallbacks, o->name, why);
    }
    size_t bytes = (size_t)rows * quant_row_bytes(t.dtype, t.group, cols);
    void *buf = mem_malloc(bytes ? bytes : 1);
    if (!buf) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory writing %s", o->name);
    int done = 0;
    if (o->hessian && (t.dtype == XLLM_DT_Q4 || t.dtype == XLLM_DT_Q4M)) {
        xllm_error gerr;
        done = gptq_quantize(t.dtype, t.group, o->data, rows, cols, o->hessian, buf, &gerr) == XLLM_OK;
        c->gptq_matrices += done;
    }
    if (done) {
    } else if (dtype_is_kq(t.dtype)) {
        size_t rb = quant_row_bytes(t.dtype, t.group, cols);
        for (int64_t r = 0; r < rows; r++)
            kq_quantize_row(t.dtype, o->data + r * cols, cols, o->importance, (char *)buf + (size_t)r * rb);
    } else if (dtype_is_quant(t.dtype)) {
        size_t rb = quant_row_bytes(t.dtype, t.group, cols);
        for (int64_t r = 0; r < rows; r++)
            quant_quantize_row(t.dtype, t.group, o->data + r * cols, cols, o->importance, (char *)buf + (size_t)r * rb);
    } else if (t.dtype == XLLM_DT_F16 || t.dtype == XLLM_DT_BF16) {
        uint16_t *h = buf;
        for (int64_t i = 0; i < rows * cols; i++)
            h[i] = t.dtype == XLLM_DT_F16 ? f32_to_f16(o->data[i]) : f32_to_bf16(o->data[i]);
    } else {
        memcpy(buf, o->data, bytes);
    }
    st = sink_add(c, o->name, t.dtype, t.group, o->ndim, o->shape, buf, bytes, err);
    xllm_free(buf);
    if (!st) cJSON_AddStringToObject(c->types, o->name, qtype_name(t, tname, sizeof tname));
    c->n_written++;
    progress(c);
    return st;
}

/* ------------------------------------------------- activation-aware scaling */

/* Activation-weighted squared int4 error of rows of W (columns scaled by s). */
static double scaled_error(const out_t *W, qtype t, const float *imp, const float *s, float *row, float *deq,
                           void *qbuf) {
    int64_t cols = W->shape[1], rows = W->shape[0];
    int64_t step = rows > 256 ? rows / 256 : 1; /* a sample of rows is enough to rank the alphas */
    double e = 0;
    for (int64_t r = 0; r < rows; r += step) {
        const float *w = W->data + r * cols;
        for (int64_t k = 0; k < cols; k++) row[k] = w[k] * s[k];
        quant_quantize_row(t.dtype, t.group, row, cols, NULL, qbuf);
        quant_dequantize_row(t.dtype, t.group, qbuf, cols, deq);
        for (int64_t k = 0; k < cols; k++) {
            double d = (double)w[k] - (double)deq[k] / s[k];
            e += imp[k] * d * d;
        }
    }
    return e;
}

/* Scale the columns of mats (sharing input with importance imp) and divide
 * the producer: prev_vec (a norm weight) or prev_rows (rows of a matrix). */
static xllm_status awq_group(conv *c, out_t **mats, int n, const float *imp, float *prev_vec, out_t *prev_rows,
                             xllm_error *err) {
    int64_t cols = mats[0]->shape[1];
    qtype t = policy_pick(&c->pol, mats[0]->cls, 2, cols);
    if (t.dtype != XLLM_DT_Q4 && t.dtype != XLLM_DT_Q4M) return XLLM_OK;
    float *s = mem_malloc_array((size_t)cols, sizeof(float)), *best_s = mem_malloc_array((size_t)cols, sizeof(float));
    float *row = mem_malloc_array((size_t)cols, sizeof(float)), *deq = mem_malloc_array((size_t)cols, sizeof(float));
    void *qbuf = mem_malloc(quant_row_bytes(t.dtype, t.group, cols));
    xllm_status st = XLLM_OK;
    if (!s || !best_s || !row || !deq || !qbuf) {
        st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    double best = -1, best_alpha = 0;
    for (int k = 0; k <= 10; k++) {
        double alpha = 0.1 * k, lo = INFINITY, hi = 0;
        for (int64_t j = 0; j < cols; j++) {
            s[j] = (float)pow(sqrt(imp[j]), alpha);
            lo = fmin(lo, s[j]);
            hi = fmax(hi, s[j]);
        }
        float norm = (float)sqrt(lo * hi);
        for (int64_t j = 0; j < cols; j++) s[j] = fmaxf(s[j] / norm, 1e-4f);
        double e = 0;
        for (int i = 0; i < n; i++) e += scaled_error(mats[i], t, imp, s, row, deq, qbuf);
        if (best < 0 || e < best) {
            best = e;
            best_alpha = alpha;
            memcpy(best_s, s, sizeof(float) * (size_t)cols);
        }
    }
    c->awq_alpha_sum += best_alpha;
    c->awq_groups++;
    /* apply: W[:, j] *= s_j; producer / s_j; the activations the new W sees are x / s */
    for (int i = 0; i < n; i++) {
        out_t *W = mats[i];
        for (int64_t r = 0; r < W->shape[0]; r++)
            for (int64_t j = 0; j < cols; j++) W->data[r * cols + j] *= best_s[j];
        if (W->importance)
            for (int64_t j = 0; j < cols; j++) W->importance[j] /= best_s[j] * best_s[j];
        if (W->hessian) /* the new input is x / s */
            for (int64_t a = 0; a < cols; a++)
                for (int64_t b = 0; b < cols; b++) W->hessian[a * cols + b] /= (double)best_s[a] * best_s[b];
    }
    if (prev_vec)
        for (int64_t j = 0; j < cols; j++) prev_vec[j] /= best_s[j];
    if (prev_rows) {
        int64_t pc = prev_rows->shape[1];
        for (int64_t j = 0; j < cols; j++)
            for (int64_t k = 0; k < pc; k++) prev_rows->data[j * pc + k] /= best_s[j];
    }
done:
    xllm_free(s);
    xllm_free(best_s);
    xllm_free(row);
    xllm_free(deq);
    xllm_free(qbuf);
    return st;
}

static xllm_status attach_importance(conv *c, out_t *o, int layer, observe_point p, int expert, xllm_error *err) {
    if (!c->have_calib || !o->data || o->ndim != 2) return XLLM_OK;
    int cols = (int)o->shape[1];
    o->importance = mem_malloc_array((size_t)cols, sizeof(float));
    if (!o->importance) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    if (!calib_importance(&c->calib, layer, p, expert, o->importance, cols)) {
        xllm_free(o->importance);
        o->importance = NULL;
    }
    if (expert == -1 && o->cls != TC_ROUTER) {
        o->hessian = mem_malloc_array((size_t)cols * (size_t)cols, sizeof(double));
        if (!o->hessian) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        if (!calib_hessian(&c->calib, layer, p, o->hessian, cols)) {
            xllm_free(o->hessian);
            o->hessian = NULL;
        }
    }
    return XLLM_OK;
}

/* Concatenate the rows of parts into one tensor named name (parts freed). */
static xllm_status fuse_rows(out_t *parts, int n, const char *name, out_t *out, xllm_error *err) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    out->ndim = parts[0].ndim;
    out->cls = parts[0].cls;
    int64_t rows = 0, per = parts[0].ndim == 2 ? parts[0].shape[1] : 1;
    for (int i = 0; i < n; i++) rows += parts[i].shape[0];
    out->shape[0] = rows;
    if (out->ndim == 2) out->shape[1] = per;
    out->data = mem_malloc_array((size_t)(rows * per), sizeof(float));
    if (!out->data) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory fusing %s", name);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t k = parts[i].shape[0] * per;
        memcpy(out->data + off, parts[i].data, sizeof(float) * (size_t)k);
        off += k;
    }
    out->importance = parts[0].importance; /* same input for all parts */
    parts[0].importance = NULL;
    out->hessian = parts[0].hessian;
    parts[0].hessian = NULL;
    for (int i = 0; i < n; i++) out_free(&parts[i]);
    return XLLM_OK;
}

/* One decoder layer: attention and dense-MLP groups get scaling and fusion;
 * everything else of the layer is written afterwards by the generic pass. */
static xllm_status convert_layer(conv *c, int l, xllm_error *err) {
    const model_config *cfg = &c->cfg;
    char p[NAME_LEN], n[NAME_LEN];
    out_t attn_norm, q, k, v, qb[3], mlp_norm, gate, up, down;
    int f_an, f_q, f_k, f_v, f_b[3] = {0, 0, 0}, f_mn, f_g, f_u, f_d;
    xllm_status st;
    snprintf(p, sizeof p, "model.layers.%d", l);
#define FETCH(var, flag, fmt) (snprintf(n, sizeof n, fmt, p), fetch_name(c, n, &(var), &(flag), err))
    if ((st = FETCH(attn_norm, f_an, "%s.input_layernorm.weight"))) return st;
    if ((st = FETCH(q, f_q, "%s.self_attn.q_proj.weight"))) return st;
    if ((st = FETCH(k, f_k, "%s.self_attn.k_proj.weight"))) return st;
    if ((st = FETCH(v, f_v, "%s.self_attn.v_proj.weight"))) return st;
    int attn_ok = f_an && f_q && f_k && f_v && q.data && k.data && v.data && attn_norm.data;
    if (!attn_ok) { /* unusual layout: write what exists as it is */
        out_t *all[4] = {&attn_norm, &q, &k, &v};
        int found[4] = {f_an, f_q, f_k, f_v};
        for (int i = 0; i < 4 && !st; i++)
            if (found[i]) st = emit(c, all[i], err);
    } else {
        attach_importance(c, &q, l, OBS_ATTN_IN, -1, err);
        attach_importance(c, &k, l, OBS_ATTN_IN, -1, err);
        attach_importance(c, &v, l, OBS_ATTN_IN, -1, err);
        if (q.importance && k.importance && v.importance) {
            out_t *mats[3] = {&q, &k, &v};
            float *imp = mem_malloc_array((size_t)q.shape[1], sizeof(float));
            if (!imp) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
            memcpy(imp, q.importance, sizeof(float) * (size_t)q.shape[1]);
            st = awq_group(c, mats, 3, imp, attn_norm.data, NULL, err);
            xllm_free(imp);
            if (st) return st;
        }
        if ((st = emit(c, &attn_norm, err))) return st;
        const char *bn[3] = {"%s.self_attn.q_proj.bias", "%s.self_attn.k_proj.bias", "%s.self_attn.v_proj.bias"};
        for (int i = 0; i < 3; i++)
            if ((st = (snprintf(n, sizeof n, bn[i], p), fetch_name(c, n, &qb[i], &f_b[i], err)))) return st;
        if (!(c->o->no_fuse || c->to_gguf || c->pol.mix)) {
            out_t parts[3] = {q, k, v}, fused; /* parts own the data now */
            memset(&q, 0, sizeof q);
            memset(&k, 0, sizeof k);
            memset(&v, 0, sizeof v);
            snprintf(n, sizeof n, "%s.self_attn.qkv_proj.weight", p);
            if ((st = fuse_rows(parts, 3, n, &fused, err))) return st;
            st = emit(c, &fused, err);
            out_free(&fused);
            if (st) return st;
            if (f_b[0] && f_b[1] && f_b[2]) {
                snprintf(n, sizeof n, "%s.self_attn.qkv_proj.bias", p);
                if ((st = fuse_rows(qb, 3, n, &fused, err))) return st;
                st = emit(c, &fused, err);
                out_free(&fused);
                if (st) return st;
            }
        } else {
            out_t *all[3] = {&q, &k, &v};
            for (int i = 0; i < 3 && !st; i++) st = emit(c, all[i], err);
            for (int i = 0; i < 3 && !st; i++)
                if (f_b[i]) st = emit(c, &qb[i], err);
        }
        for (int i = 0; i < 3; i++) out_free(&qb[i]);
    }
    out_free(&attn_norm);
    out_free(&q);
    out_free(&k);
    out_free(&v);
    if (st) return st;

    /* dense MLP (MoE layers are written by the generic pass) */
    if (cfg->layer_is_moe[l] || cfg->mlp_bias) return XLLM_OK;
    if ((st = FETCH(mlp_norm, f_mn, "%s.post_attention_layernorm.weight"))) return st;
    if ((st = FETCH(gate, f_g, "%s.mlp.gate_proj.weight"))) return st;
    if ((st = FETCH(up, f_u, "%s.mlp.up_proj.weight"))) return st;
    if ((st = FETCH(down, f_d, "%s.mlp.down_proj.weight"))) return st;
#undef FETCH
    if (!(f_mn && f_g && f_u && f_d && mlp_norm.data && gate.data && up.data && down.data)) {
        out_t *all[4] = {&mlp_norm, &gate, &up, &down};
        int found[4] = {f_mn, f_g, f_u, f_d};
        for (int i = 0; i < 4 && !st; i++)
            if (found[i]) st = emit(c, all[i], err);
    } else {
        attach_importance(c, &gate, l, OBS_MLP_IN, -1, err);
        attach_importance(c, &up, l, OBS_MLP_IN, -1, err);
        attach_importance(c, &down, l, OBS_DOWN_IN, -1, err);
        if (gate.importance && up.importance) {
            out_t *mats[2] = {&gate, &up};
            float *imp = mem_malloc_array((size_t)gate.shape[1], sizeof(float));
            if (!imp) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
            memcpy(imp, gate.importance, sizeof(float) * (size_t)gate.shape[1]);
            st = awq_group(c, mats, 2, imp, mlp_norm.data, NULL, err);
            xllm_free(imp);
        }
        if (!st && down.importance) {
            out_t *mats[1] = {&down};
            float *imp = mem_malloc_array((size_t)down.shape[1], sizeof(float));
            if (!imp) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
            memcpy(imp, down.importance, sizeof(float) * (size_t)down.shape[1]);
            st = awq_group(c, mats, 1, imp, NULL, &up, err);
            xllm_free(imp);
        }
        if (!st) st = emit(c, &mlp_norm, err);
        if (!st && !(c->o->no_fuse || c->to_gguf || c->pol.mix)) {
            out_t parts[2] = {gate, up}, fused;
            snprintf(n, sizeof n, "%s.mlp.gate_up_proj.weight", p);
            memset(&gate, 0, sizeof gate);
            memset(&up, 0, sizeof up);
            if (!(st = fuse_rows(parts, 2, n, &fused, err))) st = emit(c, &fused, err);
            out_free(&fused);
        } else if (!st) {
            if (!(st = emit(c, &gate, err))) st = emit(c, &up, err);
        }
        if (!st) st = emit(c, &down, err);
    }
    out_free(&mlp_norm);
    out_free(&gate);
    out_free(&up);
    out_free(&down);
    return st;
}

/* The observe point and expert whose activations feed this (MoE) tensor. */
static void moe_source(const char *name, observe_point *p, int *expert) {
    *p = OBS_MLP_IN;
    *expert = -1;
    const char *e = strstr(name, ".experts.");
    int is_down = strstr(name, "down_proj") || strstr(name, ".w2.");
    if (e) {
        if (is_down) *p = OBS_DOWN_IN, *expert = atoi(e + 9);
    } else if (strstr(name, ".shared_expert.")) {
        if (is_down) *p = OBS_DOWN_IN, *expert = -2;
    } else if (strstr(name, ".o_proj.")) {
        *p = OBS_O_IN;
    } else if (is_down) {
        *p = OBS_DOWN_IN;
    }
}

static xllm_status add_blob(conv *c, const char *file, const char *text, size_t len, xllm_error *err) {
    char name[NAME_LEN];
    if (!text) return XLLM_OK;
    snprintf(name, sizeof name, "%s%s", XF_BLOB_PREFIX, file);
    int64_t shape[1] = {(int64_t)len};
    return sink_add(c, name, XLLM_DT_U8, 0, 1, shape, text, len, err);
}

/* A file's text if it exists (NULL otherwise). */
static xllm_status read_optional(const char *dir, const char *file, char **text, size_t *len, xllm_error *err) {
    char path[4096];
    path_join(path, sizeof path, dir, file);
    *text = NULL;
    *len = 0;
    return path_exists(path) ? file_read_all(path, text, len, err) : XLLM_OK;
}

static cJSON *load_json_or_null(const char *dir, const char *file, xllm_error *err, xllm_status *st) {
    char path[4096];
    path_join(path, sizeof path, dir, file);
    if (!path_exists(path)) return cJSON_CreateNull();
    cJSON *j = NULL;
    *st = json_file_load(path, &j, err);
    return j;
}

/* Step 1: the source (an HF directory or a GGUF file): its tensors, config,
 * generation config and tokenizer texts. */
static xllm_status open_source(conv *c, const char *src, cJSON **config, cJSON **gen, xllm_error *err) {
    xllm_status st = XLLM_OK;
    if (file_is_dir(src)) {
        *config = load_json_or_null(src, "config.json", err, &st);
        if (!st && cJSON_IsNull(*config)) st = err_setf(err, XLLM_ERR_IO, "%s/config.json: missing", src);
        if (!st) *gen = load_json_or_null(src, "generation_config.json", err, &st);
        if (!st) st = read_optional(src, "tokenizer.json", &c->tok_json, &c->tok_json_len, err);
        if (!st) st = read_optional(src, "tokenizer_config.json", &c->tok_cfg, &c->tok_cfg_len, err);
        if (st) return st;
        c->src = st_open(src, err);
        return c->src ? XLLM_OK : err ? err->code : XLLM_ERR_FORMAT;
    }
    if (gguf_is_gguf(src)) {
        if ((st = gguf_open(src, &c->gsrc, err))) return st;
        c->src = c->gsrc.tensors; /* closed by gguf_close */
        *config = c->gsrc.config;
        *gen = c->gsrc.generation_config ? c->gsrc.generation_config : cJSON_CreateNull();
        c->gsrc.config = c->gsrc.generation_config = NULL;
        c->tok_json = c->gsrc.tokenizer_json;
        c->tok_cfg = c->gsrc.tokenizer_config_json;
        c->gsrc.tokenizer_json = c->gsrc.tokenizer_config_json = NULL;
        c->tok_json_len = c->tok_json ? strlen(c->tok_json) : 0;
        c->tok_cfg_len = c->tok_cfg ? strlen(c->tok_cfg) : 0;
        return XLLM_OK;
    }
    return err_setf(err, path_exists(src) ? XLLM_ERR_FORMAT : XLLM_ERR_IO,
                       "%s: not a HuggingFace checkpoint directory or a GGUF file", src);
}

/* Step 3: every tensor the layers did not write, in name order. */
static xllm_status convert_rest(conv *c, xllm_error *err) {
    xllm_status st = XLLM_OK;
    for (size_t i = 0; i < st_count(c->src) && !st; i++) {
        if (c->done[i]) continue;
        const st_tensor *t = st_at(c->src, i);
        out_t o;
        if ((st = fetch(c, t, &o, err))) break;
        int layer = -1;
        if (!strncmp(t->name, "model.layers.", 13)) layer = atoi(t->name + 13);
        if (layer >= 0 && layer < c->cfg.n_layers && (o.cls == TC_MLP || o.cls == TC_ATTN)) {
            observe_point p;
            int expert;
            moe_source(t->name, &p, &expert);
            st = attach_importance(c, &o, layer, p, expert, err);
        }
        if (!st) st = emit(c, &o, err);
        out_free(&o);
    }
    return st;
}

/* Step 4: the .xllm metadata; takes config, gen, c->types and (when it has
 * entries) c->fallbacks over. */
static cJSON *make_meta(conv *c, const char *src, cJSON **config, cJSON **gen) {
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "format", "xllm");
    cJSON_AddNumberToObject(meta, "format_version", XF_VERSION);
    cJSON_AddItemToObject(meta, "config", *config);
    *config = NULL;
    cJSON_AddItemToObject(meta, "generation_config", *gen);
    *gen = NULL;
    cJSON *pol = cJSON_AddObjectToObject(meta, "policy");
    char tname[32];
    for (int k = 0; k < TC_COUNT; k++) cJSON_AddStringToObject(pol, tensor_class_name((tensor_class)k), qtype_name(c->pol.cls[k], tname, sizeof tname));
    if (policy_mix_rule(&c->pol)) {
        cJSON_AddStringToObject(pol, "mix", c->o->dtype);
        cJSON_AddStringToObject(pol, "mix_rule", policy_mix_rule(&c->pol));
    }
    cJSON_AddBoolToObject(meta, "fused", !(c->o->no_fuse || c->to_gguf || c->pol.mix));
    cJSON_AddItemToObject(meta, "tensor_types", c->types);
    if (cJSON_GetArraySize(c->fallbacks) > 0) {
        cJSON_AddItemToObject(meta, "fallbacks", c->fallbacks);
        c->fallbacks = NULL;
    }
    c->types = NULL;
    if (c->have_calib) {
        cJSON *cal = cJSON_AddObjectToObject(meta, "calibration");
        cJSON_AddStringToObject(cal, "file", c->o->calib_file);
        cJSON_AddNumberToObject(cal, "tokens", c->calib.tokens);
        cJSON_AddStringToObject(cal, "method",
                                "activation-aware channel scaling (alpha grid 0..1), then GPTQ error feedback where "
                                "the input covariance fits the budget, else activation-weighted clip search");
        cJSON_AddNumberToObject(cal, "scaled_groups", c->awq_groups);
        cJSON_AddNumberToObject(cal, "mean_alpha", c->awq_groups ? c->awq_alpha_sum / c->awq_groups : 0);
        cJSON_AddNumberToObject(cal, "gptq_matrices", c->gptq_matrices);
    }
    cJSON *prov = cJSON_AddObjectToObject(meta, "provenance");
    char abs_src[4096];
    cJSON_AddStringToObject(prov, "source", realpath(src, abs_src) ? abs_src : src);
    cJSON_AddStringToObject(prov, "source_format", c->gsrc.tensors ? "gguf" : "huggingface");
    cJSON_AddStringToObject(prov, "converted_by", "xllm " XLLM_VERSION);
    char when[32];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    cJSON_AddStringToObject(prov, "created", when);
    return meta;
}

xllm_status xllm_convert(const char *src, const char *dst, const xllm_convert_options *opts, xllm_error *err) {
    err_clear(err);
    xllm_convert_options def = xllm_convert_options_default();
    conv c;
    memset(&c, 0, sizeof c);
    c.o = opts ? opts : &def;
    cJSON *config = NULL, *gen = NULL, *meta = NULL;
    xllm_status st = XLLM_OK;
    if (!src || !dst) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "convert needs a source and a destination");
    c.to_gguf = c.o->to_gguf;
    if ((st = policy_make(c.o->dtype, c.o->group_size, c.o->policy, &c.pol, err))) return st;
    if ((st = open_source(&c, src, &config, &gen, err))) goto done;
    /* Step 2: the model's config, the calibration, the writer */
    if ((st = model_config_parse(config, cJSON_IsNull(gen) ? NULL : gen, "config.json", "generation_config.json",
                                 &c.cfg, err)))
        goto done;
    c.pol.n_layers = c.cfg.n_layers; /* a K-quant mix picks by layer; its tensors are not fused (one type each) */
    c.n_total = st_count(c.src);
    c.done = mem_calloc(c.n_total ? c.n_total : 1, 1);
    c.types = cJSON_CreateObject();
    c.fallbacks = cJSON_CreateObject();
    if (!c.done || !c.types) {
        st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    if (c.o->calib_file) {
        st = calib_collect(src, c.o->calib_file, c.o->calib_tokens > 0 ? c.o->calib_tokens : 8192, c.o->n_threads,
                           c.o->calib_model_options,
                           c.o->progress, c.o->progress_user, &c.calib, err);
        if (st) goto done;
        c.have_calib = 1;
    }
    if (!c.to_gguf) {
        c.w = xf_writer_open(dst, err);
        if (!c.w) {
            st = err ? err->code : XLLM_ERR_IO;
            goto done;
        }
    }
    for (int l = 0; l < c.cfg.n_layers && !st; l++) st = convert_layer(&c, l, err);
    if (!st) st = convert_rest(&c, err);
    if (st) goto done;
    if (c.to_gguf) { /* the tokenizer goes into GGUF metadata; no xllm metadata */
        st = gguf_write(dst, c.gt, c.gn, config, c.tok_json, c.tok_cfg, err);
        if (!st && c.o->progress) c.o->progress(c.o->progress_user, "converting", 1.0);
        goto done;
    }
    if ((st = add_blob(&c, "tokenizer.json", c.tok_json, c.tok_json_len, err)) ||
        (st = add_blob(&c, "tokenizer_config.json", c.tok_cfg, c.tok_cfg_len, err)))
        goto done;
    meta = make_meta(&c, src, &config, &gen);
    st = xf_writer_finish(c.w, meta, err);
    c.w = NULL;
    if (!st && c.o->progress) c.o->progress(c.o->progress_user, "converting", 1.0);
done:
    if (c.w) xf_writer_abort(c.w);
    if (c.have_calib) calib_free(&c.calib);
    if (c.gsrc.tensors) gguf_close(&c.gsrc);
    else st_close(c.src);
    for (size_t i = 0; i < c.gn; i++) {
        xllm_free((void *)c.gt[i].name);
        xllm_free((void *)c.gt[i].data);
    }
    xllm_free(c.gt);
    xllm_free(c.tok_json);
    xllm_free(c.tok_cfg);
    xllm_free(c.done);
    cJSON_Delete(c.types);
    cJSON_Delete(c.fallbacks);
    cJSON_Delete(config);
    cJSON_Delete(gen);
    cJSON_Delete(meta);
    return st;
}
