/*
 * model_load.c - binds a checkpoint's tensors to the model's weight slots.
 *
 * Every tensor the architecture needs is looked up by its HF name and its
 * shape checked against the config before anything runs: a missing tensor or
 * a wrong shape is a load error naming the tensor and the file, never a crash
 * in the middle of a forward pass. Matrices stay in the mmap until the
 * backend takes them (upload_matrix: repacked or uploaded); 1-D tensors are
 * converted to f32 and copied into small device buffers. Every device buffer
 * comes from the backend (backend.h) and is listed in m->dev.
 */
#include "model/model.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"
#include "base/file.h"
#include "format/gguf.h"
#include "format/xllm_file.h"
#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define NAME_MAX_LEN 256

static void *own(model *m, void *p) {
    if (!p) return NULL;
    if (array_reserve(&m->owned, &m->cap_owned, m->n_owned + 1, sizeof(void *), 64)) {
        xllm_free(p);
        return NULL;
    }
    m->owned[m->n_owned++] = p;
    return p;
}

/* Track a device buffer (freed with the model through the backend); NULL: p is freed now. */
static void *dev_own(model *m, void *p) {
    if (!p) return NULL;
    if (array_reserve(&m->dev, &m->cap_dev, m->n_dev + 1, sizeof(void *), 64)) {
        m->be.ops->free(m->be.ctx, p);
        return NULL;
    }
    m->dev[m->n_dev++] = p;
    return p;
}

static void *dev_alloc(model *m, size_t bytes) { return dev_own(m, m->be.ops->alloc(m->be.ctx, bytes)); }

static const char *shape_str(const st_tensor *t, char *buf, size_t cap) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int i = 0; i < t->ndim && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}

static xllm_status check_float_dtype(const st_tensor *t, xllm_error *err) {
    if (t->dtype == XLLM_DT_F32 || t->dtype == XLLM_DT_F16 || t->dtype == XLLM_DT_BF16) return XLLM_OK;
    return err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s (supported: F32, F16, BF16)", t->file,
                       t->name, dtype_name(t->dtype));
}

static xllm_status check_matrix_dtype(const st_tensor *t, xllm_error *err) {
    if (!dtype_is_quant(t->dtype)) return check_float_dtype(t, err);
    if (t->ndim == 2 && quant_format_ok(t->dtype, t->group, t->shape[1])) return XLLM_OK;
    return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor %s: %s with group %d does not fit rows of %lld", t->file,
                       t->name, dtype_name(t->dtype), t->group, (long long)(t->ndim == 2 ? t->shape[1] : 0));
}

static const st_tensor *find(model *m, const char *name, int required, xllm_error *err, xllm_status *st) {
    const st_tensor *t = st_find(m->weights_file, name);
    if (!t && required && !*st)
        *st = err_setf(err, XLLM_ERR_FORMAT, "%s: checkpoint is missing tensor %s", m->dir, name);
    return t;
}

static void bind_matrix(model *m, const char *name, int64_t rows, int64_t cols, matrix *out, xllm_error *err,
                        xllm_status *st) {
    if (*st) return;
    const st_tensor *t = find(m, name, 1, err, st);
    if (!t) return;
    if ((*st = check_matrix_dtype(t, err))) return;
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols) {
        char buf[128];
        *st = err_setf(err, XLLM_ERR_FORMAT, "%s: tensor %s has shape %s, expected [%lld, %lld]", t->file, name,
                          shape_str(t, buf, sizeof buf), (long long)rows, (long long)cols);
        return;
    }
    out->dtype = t->dtype;
    out->group = t->group;
    out->rows = rows;
    out->cols = cols;
    out->data = t->data;
    m->bound_bytes += t->nbytes;
}

/* 1-D tensor of n elements -> owned f32, plus offset (Gemma's HF norms store
 * w - 1). Absent and !required: *out = NULL. */
static void bind_vector_off(model *m, const char *name, int64_t n, int required, float offset, float **out,
                            xllm_error *err, xllm_status *st) {
    *out = NULL;
    if (*st) return;
    const st_tensor *t = find(m, name, required, err, st);
    if (!t) return;
    if ((*st = check_float_dtype(t, err))) return;
    if (t->ndim != 1 || t->shape[0] != n) {
        char buf[128];
        *st = err_setf(err, XLLM_ERR_FORMAT, "%s: tensor %s has shape %s, expected [%lld]", t->file, name,
                          shape_str(t, buf, sizeof buf), (long long)n);
        return;
    }
    float *h = mem_malloc_array((size_t)n, sizeof(float));
    float *v = h ? dev_alloc(m, (size_t)n * sizeof(float)) : NULL;
    if (!v) {
        xllm_free(h);
        *st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory loading %s", name);
        return;
    }
    dtype_to_f32(t->dtype, t->data, h, (size_t)n);
    if (offset != 0.0f)
        for (int64_t i = 0; i < n; i++) h[i] += offset;
    m->be.ops->copy(m->be.ctx, v, h, (size_t)n * sizeof(float), BE_HOST_TO_DEVICE);
    xllm_free(h);
    m->bound_bytes += t->nbytes;
    *out = v;
}

static void bind_vector(model *m, const char *name, int64_t n, int required, float **out, xllm_error *err,
                        xllm_status *st) {
    bind_vector_off(m, name, n, required, 0.0f, out, err, st);
}

static void bind_mlp(model *m, const char *prefix, const char *g, const char *u, const char *d, int inter,
                     matrix *gate, matrix *up, matrix *down, xllm_error *err, xllm_status *st) {
    char name[NAME_MAX_LEN];
    int h = m->cfg.hidden;
    snprintf(name, sizeof name, "%s.%s.weight", prefix, g);
    bind_matrix(m, name, inter, h, gate, err, st);
    snprintf(name, sizeof name, "%s.%s.weight", prefix, u);
    bind_matrix(m, name, inter, h, up, err, st);
    snprintf(name, sizeof name, "%s.%s.weight", prefix, d);
    bind_matrix(m, name, h, inter, down, err, st);
}

/* Multi-head latent attention's tensors (model.h). kv_b per head comes as
 * llama.cpp splits it (k_b_proj.H already transposed, v_b_proj.H), or whole
 * as HF stores it: rows per head [k_nope (qk_nope) | v (v_head)] x kv_lora;
 * then v_b are views of its rows and k_b transposed copies (float dtypes). */
static xllm_status bind_mla(model *m, int l, const char *p, xllm_error *err) {
    const model_config *c = &m->cfg;
    layer_weights *L = &m->layers[l];
    xllm_status st = XLLM_OK;
    char name[NAME_MAX_LEN];
    int h = c->hidden, H = c->n_heads, nope = c->qk_nope_dim, vd = c->v_head_dim, r = c->kv_lora_rank;
    int64_t qd = (int64_t)H * (nope + c->qk_rope_dim);
#define NM(fmt, ...) (snprintf(name, sizeof name, fmt, __VA_ARGS__), name)
    if (c->q_lora_rank) {
        bind_matrix(m, NM("%s.self_attn.q_a_proj.weight", p), c->q_lora_rank, h, &L->q_a, err, &st);
        bind_vector(m, NM("%s.self_attn.q_a_layernorm.weight", p), c->q_lora_rank, 1, &L->q_a_norm, err, &st);
        bind_matrix(m, NM("%s.self_attn.q_b_proj.weight", p), qd, c->q_lora_rank, &L->q, err, &st);
    } else {
        bind_matrix(m, NM("%s.self_attn.q_proj.weight", p), qd, h, &L->q, err, &st);
    }
    bind_matrix(m, NM("%s.self_attn.kv_a_proj_with_mqa.weight", p), c->mla_dim, h, &L->kv_a, err, &st);
    bind_vector(m, NM("%s.self_attn.kv_a_layernorm.weight", p), r, 1, &L->kv_a_norm, err, &st);
    bind_matrix(m, NM("%s.self_attn.o_proj.weight", p), h, (int64_t)H * vd, &L->o, err, &st);
    L->k_b = own(m, mem_calloc((size_t)H, sizeof(matrix)));
    L->v_b = own(m, mem_calloc((size_t)H, sizeof(matrix)));
    if (!L->k_b || !L->v_b) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    if (st || st_find(m->weights_file, NM("%s.self_attn.k_b_proj.0.weight", p))) {
        for (int i = 0; i < H && !st; i++) {
            bind_matrix(m, NM("%s.self_attn.k_b_proj.%d.weight", p, i), r, nope, &L->k_b[i], err, &st);
            bind_matrix(m, NM("%s.self_attn.v_b_proj.%d.weight", p, i), vd, r, &L->v_b[i], err, &st);
        }
#undef NM
        return st;
    }
    matrix kvb = {0};
    snprintf(name, sizeof name, "%s.self_attn.kv_b_proj.weight", p);
    bind_matrix(m, name, (int64_t)H * (nope + vd), r, &kvb, err, &st);
    if (st) return st;
    if (dtype_is_quant(kvb.dtype))
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: %s is %s; a quantized kv_b_proj is not supported (keep it "
                           "F16, BF16 or F32)", m->dir, name, dtype_name(kvb.dtype));
    size_t es = dtype_size(kvb.dtype), row = (size_t)r * es;
    for (int i = 0; i < H; i++) {
        const unsigned char *k0 = (const unsigned char *)kvb.data + (size_t)i * (size_t)(nope + vd) * row;
        L->v_b[i] = kvb;
        L->v_b[i].rows = vd;
        L->v_b[i].data = k0 + (size_t)nope * row;
        unsigned char *t = own(m, mem_malloc((size_t)r * (size_t)nope * es));
        if (!t) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        for (int a = 0; a < r; a++) /* t[a][b] = kv_b[i * (nope + vd) + b][a] */
            for (int b = 0; b < nope; b++) memcpy(t + ((size_t)a * nope + b) * es, k0 + (size_t)b * row + (size_t)a * es, es);
        L->k_b[i] = kvb;
        L->k_b[i].rows = r;
        L->k_b[i].cols = nope;
        L->k_b[i].data = t;
    }
    return st;
}

static xllm_status bind_layer(model *m, int l, xllm_error *err) {
    const model_config *c = &m->cfg;
    layer_weights *L = &m->layers[l];
    xllm_status st = XLLM_OK;
    char p[NAME_MAX_LEN], name[NAME_MAX_LEN];
    int h = c->hidden, qd = c->n_heads * c->head_dim, kd = c->n_kv_heads * c->head_dim;
    snprintf(p, sizeof p, "model.layers.%d", l);

#define NM(fmt, ...) (snprintf(name, sizeof name, fmt, __VA_ARGS__), name)
    /* the family's norms (arch.h): before / after attention, before / after the MLP */
    float **norms[ARCH_NORMS] = {&L->attn_norm, &L->attn_post_norm, &L->mlp_norm, &L->mlp_post_norm};
    for (int k = 0; k < ARCH_NORMS; k++)
        if (c->arch->norm[k])
            bind_vector_off(m, NM("%s.%s.weight", p, c->arch->norm[k]), h, 1, c->norm_offset, norms[k], err, &st);
    if (c->mla_dim) {
        if ((st = bind_mla(m, l, p, err))) return st;
    } else if (st_find(m->weights_file, NM("%s.self_attn.qkv_proj.weight", p))) {
        /* fused at convert time: rows q, then k, then v */
        bind_matrix(m, name, qd + 2 * kd, h, &L->qkv, err, &st);
        if (c->qkv_bias) bind_vector(m, NM("%s.self_attn.qkv_proj.bias", p), qd + 2 * kd, 1, &L->qkv_bias, err, &st);
    } else {
        bind_matrix(m, NM("%s.self_attn.q_proj.weight", p), qd, h, &L->q, err, &st);
        bind_matrix(m, NM("%s.self_attn.k_proj.weight", p), kd, h, &L->k, err, &st);
        bind_matrix(m, NM("%s.self_attn.v_proj.weight", p), kd, h, &L->v, err, &st);
    }
    if (!c->mla_dim) bind_matrix(m, NM("%s.self_attn.o_proj.weight", p), h, qd, &L->o, err, &st);
    if (c->qkv_bias && !L->qkv.data) {
        bind_vector(m, NM("%s.self_attn.q_proj.bias", p), qd, 1, &L->q_bias, err, &st);
        bind_vector(m, NM("%s.self_attn.k_proj.bias", p), kd, 1, &L->k_bias, err, &st);
        bind_vector(m, NM("%s.self_attn.v_proj.bias", p), kd, 1, &L->v_bias, err, &st);
    }
    if (c->o_bias) bind_vector(m, NM("%s.self_attn.o_proj.bias", p), h, 1, &L->o_bias, err, &st);
    if (c->qk_norm) { /* per head, or (2) over the whole projection */
        bind_vector_off(m, NM("%s.self_attn.q_norm.weight", p), c->qk_norm == 2 ? qd : c->head_dim, 1, c->norm_offset,
                        &L->q_norm, err, &st);
        bind_vector_off(m, NM("%s.self_attn.k_norm.weight", p), c->qk_norm == 2 ? kd : c->head_dim, 1, c->norm_offset,
                        &L->k_norm, err, &st);
    }

    if (!c->layer_is_moe[l] && !c->mlp_bias && st_find(m->weights_file, NM("%s.mlp.gate_up_proj.weight", p))) {
        /* fused at convert time: rows gate, then up */
        bind_matrix(m, name, 2 * (int64_t)c->intermediate, h, &L->gate_up, err, &st);
        bind_matrix(m, NM("%s.mlp.down_proj.weight", p), h, c->intermediate, &L->down, err, &st);
        return st;
    }
    if (!c->layer_is_moe[l]) {
        snprintf(name, sizeof name, "%s.mlp", p);
        bind_mlp(m, name, "gate_proj", "up_proj", "down_proj", c->intermediate, &L->gate, &L->up, &L->down, err, &st);
        if (c->mlp_bias) {
            bind_vector(m, NM("%s.mlp.gate_proj.bias", p), c->intermediate, 1, &L->gate_bias, err, &st);
            bind_vector(m, NM("%s.mlp.up_proj.bias", p), c->intermediate, 1, &L->up_bias, err, &st);
            bind_vector(m, NM("%s.mlp.down_proj.bias", p), h, 1, &L->down_bias, err, &st);
        }
        return st;
    }
    if (st) return st;
    size_t E = (size_t)c->n_experts;
    L->exp_gate = own(m, mem_calloc(E, sizeof(matrix)));
    L->exp_up = own(m, mem_calloc(E, sizeof(matrix)));
    L->exp_down = own(m, mem_calloc(E, sizeof(matrix)));
    if (!L->exp_gate || !L->exp_up || !L->exp_down) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    const int mixtral = c->moe == MOE_MIXTRAL;
    const char *moe = mixtral ? "block_sparse_moe" : "mlp";
    bind_matrix(m, NM("%s.%s.gate.weight", p, moe), c->n_experts, h, &L->router, err, &st);
    if (c->moe_sel_bias) /* (absent: zero, as llama.cpp takes a file without it) */
        bind_vector(m, NM("%s.mlp.gate.e_score_correction_bias", p), c->n_experts, 0, &L->sel_bias, err, &st);
    for (int e = 0; e < c->n_experts && !st; e++) {
        char ep[NAME_MAX_LEN];
        snprintf(ep, sizeof ep, "%s.%s.experts.%d", p, moe, e);
        if (mixtral)
            bind_mlp(m, ep, "w1", "w3", "w2", c->moe_intermediate, &L->exp_gate[e], &L->exp_up[e], &L->exp_down[e],
                     err, &st);
        else
            bind_mlp(m, ep, "gate_proj", "up_proj", "down_proj", c->moe_intermediate, &L->exp_gate[e],
                     &L->exp_up[e], &L->exp_down[e], err, &st);
    }
    if (c->shared_expert_intermediate > 0) {
        snprintf(name, sizeof name, c->moe == MOE_DEEPSEEK ? "%s.mlp.shared_experts" : "%s.mlp.shared_expert", p);
        bind_mlp(m, name, "gate_proj", "up_proj", "down_proj", c->shared_expert_intermediate, &L->sh_gate, &L->sh_up,
                 &L->sh_down, err, &st);
        if (c->shared_gated) bind_matrix(m, NM("%s.mlp.shared_expert_gate.weight", p), 1, h, &L->sh_router, err, &st);
    }
#undef NM
    return st;
}

/* RoPE inverse frequencies of base theta with the config's scaling (HF
 * semantics); local: a sliding layer's (its own base, never scaled). */
static void rope_frequencies(const model_config *c, double theta, int local, int long_set, double *inv_freq) {
    int half = c->rope_dim / 2;
    double y_low = 0, y_high = 0;
    if (c->rope == ROPE_YARN) { /* the pairs that rotate beta_fast / beta_slow times over the original context */
        const double pi = 3.14159265358979323846, d = c->rope_dim;
        y_low = d * log(c->rope_original_max_pos / (c->rope_beta_fast * 2 * pi)) / (2 * log(theta));
        y_high = d * log(c->rope_original_max_pos / (c->rope_beta_slow * 2 * pi)) / (2 * log(theta));
        if (c->rope_yarn_truncate) y_low = floor(y_low), y_high = ceil(y_high);
        if (y_low < 0) y_low = 0;
        if (y_high > d - 1) y_high = d - 1;
    }
    for (int i = 0; i < half; i++) {
        double f = 1.0 / pow(theta, (2.0 * i) / c->rope_dim);
        if (local) {
        } else if (c->rope == ROPE_LONGROPE) { /* HF: 1 / (ext[i] * theta^(2i/d)); llama.cpp: theta_i / ff[i] */
            f /= long_set ? c->rope_long[i] : c->rope_short[i];
        } else if (c->rope == ROPE_YARN) { /* extrapolated (as is) below y_low, interpolated (/ factor) above y_high */
            double r = (i - y_low) / (y_high - y_low > 0.001 ? y_high - y_low : 0.001);
            double extrap = 1.0 - (r < 0 ? 0 : r > 1 ? 1 : r);
            f = f / c->rope_factor * (1.0 - extrap) + f * extrap;
        } else if (c->rope == ROPE_LINEAR) {
            f /= c->rope_factor;
        } else if (c->rope == ROPE_LLAMA3) {
            double low_wavelen = c->rope_original_max_pos / c->rope_low_freq_factor;
            double high_wavelen = c->rope_original_max_pos / c->rope_high_freq_factor;
            double wavelen = 2.0 * M_PI / f;
            if (wavelen > low_wavelen) {
                f /= c->rope_factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = (c->rope_original_max_pos / wavelen - c->rope_low_freq_factor) /
                                (c->rope_high_freq_factor - c->rope_low_freq_factor);
                f = (1.0 - smooth) * f / c->rope_factor + smooth * f;
            }
        }
        inv_freq[i] = f;
    }
}

int model_rope_context(model *m, int context) {
    const model_config *c = &m->cfg;
    if (c->rope != ROPE_LONGROPE) return 0;
    m->rope_long = context > c->rope_original_max_pos; /* llama.cpp's rule: n_ctx_seq > n_ctx_orig */
    if (m->inv_freq) rope_frequencies(c, c->rope_theta, 0, m->rope_long, m->inv_freq);
    return m->rope_long;
}

#define HEAD_ROWS 64

static xllm_status alloc_scratch(model *m, int T, xllm_error *err) {
    const model_config *c = &m->cfg;
    model_scratch *s = &m->s;
    size_t t = (size_t)T, h = (size_t)c->hidden;
    size_t qd = (size_t)c->n_heads * (size_t)c->head_dim, kd = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    size_t inter = (size_t)c->intermediate;
    if ((size_t)c->moe_intermediate > inter) inter = (size_t)c->moe_intermediate;
    if ((size_t)c->shared_expert_intermediate > inter) inter = (size_t)c->shared_expert_intermediate;
    if (c->mla_dim) { /* forward.c's MLA buffers: q (q_b's rows), the full query and output rows (mla_dim per
                       * head), kv_a's row, o's input; one head's slice in h1 / h2 */
        size_t w = (size_t)c->mla_dim, qk = (size_t)(c->qk_nope_dim + c->qk_rope_dim), v = (size_t)c->v_head_dim;
        size_t per = w > qk ? w : qk;
        qd = (size_t)c->n_heads * (per > v ? per : v);
        kd = w > (size_t)c->n_heads * v ? w : (size_t)c->n_heads * v;
        size_t need[] = {w, (size_t)c->q_lora_rank, (size_t)c->qk_nope_dim, v};
        for (size_t i = 0; i < 4; i++) inter = need[i] > inter ? need[i] : inter;
    }
    size_t rh = (size_t)c->rope_dim / 2; /* RoPE table entries per token */
    size_t E = (size_t)(c->n_experts > 0 ? c->n_experts : 1), K = (size_t)(c->n_experts_used > 0 ? c->n_experts_used : 1);
    s->max_tokens = T;
    s->bytes = 0;
    /* the lm_head's output before the read-back: HEAD_ROWS rows at a time
     * (a step's logits rows are its sequences, far fewer than its tokens;
     * a vocab of 128k is 64 MiB per 128 rows) */
    s->head_rows = T < HEAD_ROWS ? T : HEAD_ROWS;
#define ALLOC(ptr, n) ((s->bytes += (n) * sizeof(*(ptr))), (ptr) = dev_alloc(m, (n) * sizeof(*(ptr))))
    if (!ALLOC(s->x, t * h) || !ALLOC(s->xn, t * h) || !ALLOC(s->q, t * qd) || !ALLOC(s->k, t * kd) ||
        !ALLOC(s->v, t * kd) || !ALLOC(s->att, t * qd) || !ALLOC(s->tmp, t * h) || !ALLOC(s->h1, t * inter) ||
        !ALLOC(s->h2, t * inter) || !ALLOC(s->moe_acc, t * h) || !ALLOC(s->xg, t * h) || !ALLOC(s->yg, t * h) ||
        !ALLOC(s->router_logits, t * E) || !ALLOC(s->rope_cos, t * rh) || !ALLOC(s->rope_sin, t * rh) ||
        !ALLOC(s->route_ids, t * K) ||
        (c->rope_local_theta > 0 && (!ALLOC(s->rope_cos_local, t * rh) || !ALLOC(s->rope_sin_local, t * rh))) ||
        !ALLOC(s->route_w, t * K) || !ALLOC(s->expert_tokens, t * K) || !ALLOC(s->expert_w, t * K) ||
        !ALLOC(s->expert_count, E) || !ALLOC(s->fused, t * (qd + 2 * kd > 2 * inter ? qd + 2 * kd : 2 * inter)) ||
        (!m->be.ops->unified_memory && !ALLOC(s->logits, (size_t)s->head_rows * (size_t)c->vocab)))
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "cannot allocate forward scratch for %d tokens", T);
#undef ALLOC
    return XLLM_OK;
}

/* One matrix to the backend (upload_matrix: the CPU repacks it into the
 * kernel level's streaming order); the model keeps the copy. */
static xllm_status pack_one(model *m, matrix *w, xllm_error *err) {
    void *storage;
    if (!w->data) return XLLM_OK;
    /* room first, so a copy is never lost */
    if (array_reserve(&m->dev, &m->cap_dev, m->n_dev + 1, sizeof(void *), 64))
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    const void *src = w->data;
    size_t src_bytes = (size_t)w->rows * quant_row_bytes(w->dtype, w->group, w->cols);
    xllm_status st = m->be.ops->upload_matrix(m->be.ctx, w, &storage, err);
    if (!st && storage) {
        m->dev[m->n_dev++] = storage;
        /* the stored copy is no longer read (unless it is also the embedding table) */
        if (src != m->embed.data) st_release_pages(m->weights_file, src, src_bytes);
    }
    return st;
}

/* Every matrix a matmul reads (not the embedding table: rows are looked up). */
static xllm_status pack_weights(model *m, xllm_error *err) {
    const model_config *c = &m->cfg;
    xllm_status st = pack_one(m, &m->lm_head, err);
    for (int l = m->layer_begin; l < m->layer_end && !st; l++) {
        layer_weights *L = &m->layers[l];
        matrix *ws[] = {&L->q, &L->k, &L->v, &L->o, &L->qkv, &L->gate, &L->up, &L->down, &L->gate_up,
                        &L->sh_gate, &L->sh_up, &L->sh_down, &L->router, &L->sh_router};
        for (size_t k = 0; k < sizeof ws / sizeof *ws && !st; k++) st = pack_one(m, ws[k], err);
        if (!st) st = pack_one(m, &L->q_a, err);
        if (!st) st = pack_one(m, &L->kv_a, err);
        for (int i = 0; c->mla_dim && i < c->n_heads && !st; i++) {
            st = pack_one(m, &L->k_b[i], err);
            if (!st) st = pack_one(m, &L->v_b[i], err);
        }
        if (c->layer_is_moe[l])
            for (int e = 0; e < c->n_experts && !st; e++) {
                st = pack_one(m, &L->exp_gate[e], err);
                if (!st) st = pack_one(m, &L->exp_up[e], err);
                if (!st) st = pack_one(m, &L->exp_down[e], err);
            }
    }
    return st;
}

xllm_status model_split_layers(int n_layers, int n_stages, const char *split, int stage, int *l0, int *l1,
                               xllm_error *err) {
    if (n_stages < 1 || stage < 0 || stage >= n_stages)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "stage %d of %d", stage, n_stages);
    if (n_stages > n_layers)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                           "%d pipeline stages but the model has %d layers (at least one layer per stage)", n_stages,
                           n_layers);
    if (!split || !*split) { /* even; the first n_layers % n_stages stages take one more */
        int base = n_layers / n_stages, extra = n_layers % n_stages;
        *l0 = stage * base + (stage < extra ? stage : extra);
        *l1 = *l0 + base + (stage < extra);
        return XLLM_OK;
    }
    int n = 0, sum = 0;
    const char *p = split;
    for (;;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > MODEL_MAX_LAYERS || (*end && *end != ','))
            return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                               "layer split \"%s\": entries must be whole numbers of layers, at least 1, separated "
                               "by commas (e.g. 8,8,6)", split);
        if (n == stage) *l0 = sum, *l1 = sum + (int)v;
        sum += (int)v;
        n++;
        if (!*end) break;
        p = end + 1;
    }
    if (n != n_stages)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "layer split \"%s\" has %d entries for %d pipeline stages",
                           split, n, n_stages);
    if (sum != n_layers)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "layer split \"%s\" sums to %d layers; the model has %d",
                           split, sum, n_layers);
    return XLLM_OK;
}

/* Every matrix a matmul reads, in a fixed order (the planner's report follows it). */
static size_t model_matrices(model *m, matrix **out, size_t cap) {
    const model_config *c = &m->cfg;
    size_t n = 0;
#define ADD(w) do { if ((w)->data && n < cap) out[n++] = (w); } while (0)
    for (int i = m->layer_begin; i < m->layer_end; i++) { /* the part's layers (the others are not bound) */
        layer_weights *L = &m->layers[i];
        matrix *ws[] = {&L->q, &L->k, &L->v, &L->o, &L->qkv, &L->gate, &L->up, &L->down, &L->gate_up, &L->router,
                        &L->sh_gate, &L->sh_up, &L->sh_down};
        for (size_t k = 0; k < sizeof ws / sizeof *ws; k++) ADD(ws[k]);
        ADD(&L->q_a);
        ADD(&L->kv_a);
        for (int h = 0; c->mla_dim && h < c->n_heads; h++) {
            ADD(&L->k_b[h]);
            ADD(&L->v_b[h]);
        }
        if (c->layer_is_moe[i])
            for (int e = 0; e < c->n_experts; e++) {
                ADD(&L->exp_gate[e]);
                ADD(&L->exp_up[e]);
                ADD(&L->exp_down[e]);
            }
    }
    ADD(&m->lm_head);
#undef ADD
    return n;
}

xllm_status model_plan(model *m, int budget_ms, cJSON **report, xllm_error *err) {
    *report = NULL;
    if (!m->be.ops->plan) return XLLM_OK;
    const model_config *c = &m->cfg;
    size_t cap = 1;
    for (int i = 0; i < c->n_layers; i++)
        cap += 15 + (c->mla_dim ? 2 * (size_t)c->n_heads : 0) + (c->layer_is_moe[i] ? 3 * (size_t)c->n_experts : 0);
    matrix **ws = mem_malloc_array(cap, sizeof *ws);
    if (!ws) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    size_t n = model_matrices(m, ws, cap);
    xllm_status st = m->be.ops->plan(m->be.ctx, ws, n, m->s.max_tokens, budget_ms, report, err);
    xllm_free(ws);
    return st;
}

model *model_load(const char *dir, int n_threads, int max_tokens, xllm_error *err) {
    model_load_options o = {0};
    o.n_threads = n_threads;
    o.max_tokens = max_tokens;
    return model_load_ex(dir, &o, err);
}

/* The backend, sized for this config (before any tensor is bound: the 1-D
 * weights and the scratch live in its memory). */
static xllm_status create_backend(model *m, const model_load_options *o, xllm_error *err) {
    const model_config *c = &m->cfg;
    size_t max_cols = (size_t)c->hidden;
    size_t widest[] = {(size_t)c->intermediate, (size_t)c->moe_intermediate, (size_t)c->shared_expert_intermediate,
                       (size_t)c->n_heads * (size_t)c->head_dim, (size_t)c->q_lora_rank, (size_t)c->kv_lora_rank,
                       (size_t)c->n_heads * (size_t)c->v_head_dim, (size_t)c->mla_dim};
    for (size_t i = 0; i < sizeof widest / sizeof *widest; i++)
        if (widest[i] > max_cols) max_cols = widest[i];
    backend_options bo = {0};
    bo.n_threads = o->n_threads;
    bo.max_cols = max_cols;
    bo.max_tokens = (size_t)o->max_tokens;
    bo.n_heads = c->n_heads;
    bo.n_kv_heads = c->n_kv_heads;
    bo.head_dim = c->mla_dim ? c->mla_dim : c->head_dim; /* MLA: a query / output row is the latent row */
    bo.max_positions = c->max_positions;
    bo.cpu_level = o->cpu_level;
    bo.attention = o->attention;
    bo.no_repack = o->no_repack;
    bo.plan_cache = o->plan_cache;
    bo.arith_llama = o->arith_llama;
    bo.device = o->device;
    return backend_create(&m->be, o->backend, &bo, err);
}

/* What this model needs that the backend may lack (backend_ops.supports):
 * refused here, at load, with the feature named. Weight types are checked
 * as each matrix is uploaded (upload_matrix). */
static xllm_status check_backend(const model *m, xllm_error *err) {
    const model_config *c = &m->cfg;
    const char *name = m->be.ops->name, *lack = NULL;
    int moe = 0, window = 0;
    for (int l = 0; l < c->n_layers && l < MODEL_MAX_LAYERS; l++) moe |= c->layer_is_moe[l], window |= c->layer_window[l] > 0;
    if (c->mla_dim && (!backend_supports(&m->be, BE_FEAT_MLA, c->mla_dim) || !m->be.ops->mla_rope_kv))
        lack = "multi-head latent attention (DeepSeek) with latent rows this wide";
    else if (!backend_supports(&m->be, BE_FEAT_HEAD_DIM, c->head_dim)) lack = "this head_dim";
    else if (moe && !backend_supports(&m->be, BE_FEAT_MOE, 0)) lack = "mixture-of-experts layers";
    else if (window && !backend_supports(&m->be, BE_FEAT_ATTN_WINDOW, 0)) lack = "sliding-window attention";
    else if (c->qk_norm && !backend_supports(&m->be, BE_FEAT_QK_NORM, 0)) lack = "q/k norms";
    /* the families' own needs (arch.h) */
    else if (c->qk_norm == 2 && !backend_supports(&m->be, BE_FEAT_QK_NORM_ALL, 0)) lack = "whole-projection q/k norms";
    else if (c->attn_scale > 0 && !backend_supports(&m->be, BE_FEAT_ATTN_SCALE, 0)) lack = "an attention scale";
    else if (c->attn_softcap > 0 && !backend_supports(&m->be, BE_FEAT_SOFTCAP, 0)) lack = "attention soft-capping";
    else if (c->act == ARCH_ACT_GELU_TANH && !m->be.ops->gelu_mul) lack = "GELU (gelu_mul)";
    else if (c->embed_scale && !m->be.ops->scale) lack = "the embedding scale (scale)";
    else if ((c->moe_sigmoid || c->moe_sel_bias || c->n_group || c->routed_scale > 0) &&
             !backend_supports(&m->be, BE_FEAT_MOE_ROUTING, 0))
        lack = "DeepSeek's expert routing (sigmoid, groups, bias, scale)";
    else if ((c->rope == ROPE_LONGROPE || c->rope == ROPE_YARN) && c->rope_attn_factor != 1.0 && !m->be.ops->scale)
        lack = "LongRoPE's attention factor (scale)";
    if (lack)
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "backend '%s' does not implement %s (head_dim %d): use --backend cpu",
                           name, lack, c->head_dim);
    return XLLM_OK;
}

model *model_load_part(const char *dir, int n_threads, int max_tokens, const model_part *part, xllm_error *err) {
    model_load_options o = {0};
    o.n_threads = n_threads;
    o.max_tokens = max_tokens;
    o.part = part;
    return model_load_ex(dir, &o, err);
}

/* The weights file (a checkpoint directory, a GGUF or an .xllm file), its
 * configuration and the tokenizer it carries. 0, or 1 with err set. */
static int open_weights(model *m, const char *dir, xllm_error *err) {
    xllm_status st = XLLM_OK;
    if (file_is_dir(dir)) {
        if ((st = model_config_load(dir, &m->cfg, err))) return 1;
        m->weights_file = st_open(dir, err);
        if (!m->weights_file) return 1;
    } else if (gguf_is_gguf(dir)) {
        gguf_model g;
        if ((st = gguf_open(dir, &g, err))) return 1;
        m->weights_file = g.tensors;
        m->owned_tok_json = g.tokenizer_json;
        m->owned_tok_config = g.tokenizer_config_json;
        /* an allocation failing here must not leave the config trees unowned */
        m->meta = cJSON_CreateObject();
        int kept = m->meta && cJSON_AddItemToObject(m->meta, "config", g.config);
        if (!kept) cJSON_Delete(g.config);
        if (g.generation_config && !(kept && cJSON_AddItemToObject(m->meta, "generation_config", g.generation_config))) {
            cJSON_Delete(g.generation_config);
            kept = 0;
        }
        if (!kept) {
            st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", dir);
            return 1;
        }
        char cfg_label[4200];
        snprintf(cfg_label, sizeof cfg_label, "%s: metadata", dir);
        if ((st = model_config_parse(g.config, g.generation_config, cfg_label, cfg_label, &m->cfg, err))) return 1;
        if (m->owned_tok_json) {
            m->tok_json = m->owned_tok_json;
            m->tok_json_len = strlen(m->owned_tok_json);
        }
        if (m->owned_tok_config) {
            m->tok_config = m->owned_tok_config;
            m->tok_config_len = strlen(m->owned_tok_config);
        }
    } else if (xf_is_xllm(dir)) {
        m->weights_file = xf_open(dir, &m->meta, err);
        if (!m->weights_file) return 1;
        const st_tensor *tj = st_find(m->weights_file, XF_BLOB_PREFIX "tokenizer.json");
        const st_tensor *tc = st_find(m->weights_file, XF_BLOB_PREFIX "tokenizer_config.json");
        if (tj) m->tok_json = tj->data, m->tok_json_len = tj->nbytes;
        if (tc) m->tok_config = tc->data, m->tok_config_len = tc->nbytes;
        char cfg_label[4200], gen_label[4200];
        snprintf(cfg_label, sizeof cfg_label, "%s: config", dir);
        snprintf(gen_label, sizeof gen_label, "%s: generation_config", dir);
        if ((st = model_config_parse(cJSON_GetObjectItemCaseSensitive(m->meta, "config"),
                                     cJSON_GetObjectItemCaseSensitive(m->meta, "generation_config"), cfg_label,
                                     gen_label, &m->cfg, err)))
            return 1;
    } else {
        err_setf(err, path_exists(dir) ? XLLM_ERR_FORMAT : XLLM_ERR_IO,
                    "%s: not a model; a model is a HuggingFace checkpoint directory (config.json + *.safetensors), an .xllm file or a GGUF file", dir);
        return 1;
    }
    return 0;
}

/* The layers this process holds: all, or a pipeline stage's share. */
static int take_part(model *m, const model_part *part, xllm_error *err) {
    const model_config *c = &m->cfg;
    m->layer_begin = 0;
    m->layer_end = c->n_layers;
    if (part && part->n_stages > 1) {
        if (model_split_layers(c->n_layers, part->n_stages, part->split, part->stage, &m->layer_begin, &m->layer_end,
                               err))
            return 1;
    } else if (part && (part->layer_begin || part->layer_end)) {
        if (part->layer_begin < 0 || part->layer_begin >= part->layer_end || part->layer_end > c->n_layers) {
            err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "layer range [%d, %d) is not inside the model's %d layers",
                        part->layer_begin, part->layer_end, c->n_layers);
            return 1;
        }
        m->layer_begin = part->layer_begin;
        m->layer_end = part->layer_end;
    }
    return 0;
}

/* The embedding (first stage), final norm and head (last stage), and no
 * layer in the file beyond the config's. */
static int bind_ends(model *m, const char *dir, xllm_error *err) {
    const model_config *c = &m->cfg;
    xllm_status st = XLLM_OK;
    int first = m->layer_begin == 0, last = m->layer_end == c->n_layers;

    if (first) bind_matrix(m, "model.embed_tokens.weight", c->vocab, c->hidden, &m->embed, err, &st);
    if (last) bind_vector_off(m, "model.norm.weight", c->hidden, 1, c->norm_offset, &m->final_norm, err, &st);
    if (st) return 1;
    /* tied when the config says so, or says nothing and the checkpoint has no
     * lm_head; "tie_word_embeddings": false needs one */
    int has_head = st_find(m->weights_file, "lm_head.weight") != NULL;
    if (c->tie_embeddings == 0 && !has_head)
        st = err_setf(err, XLLM_ERR_FORMAT, "%s: tie_word_embeddings is false but there is no lm_head.weight", dir);
    else if (!last)
        ; /* no head on this stage */
    else if (c->tie_embeddings == 1 || (c->tie_embeddings < 0 && !has_head)) {
        if (first) m->lm_head = m->embed;
        else bind_matrix(m, "model.embed_tokens.weight", c->vocab, c->hidden, &m->lm_head, err, &st);
    } else
        bind_matrix(m, "lm_head.weight", c->vocab, c->hidden, &m->lm_head, err, &st);
    if (st) return 1;
    /* a config with fewer layers than the checkpoint would silently drop some */
    for (size_t i = 0; i < st_count(m->weights_file); i++) {
        const char *name = st_at(m->weights_file, i)->name;
        if (strncmp(name, "model.layers.", 13) != 0 || name[13] < '0' || name[13] > '9') continue;
        long long l = 0;
        for (const char *p = name + 13; *p >= '0' && *p <= '9' && l <= MODEL_MAX_LAYERS; p++) l = l * 10 + (*p - '0');
        if (l >= c->n_layers) {
            err_setf(err, XLLM_ERR_FORMAT, "%s: tensor %s is beyond num_hidden_layers (%d)", dir, name,
                        c->n_layers);
            return 1;
        }
    }
    return 0;
}

/* RoPE's inverse frequencies (and the local ones), and llama.cpp's angle
 * scale when its arithmetic is asked for. */
static int init_rope(model *m, const model_load_options *o) {
    const model_config *c = &m->cfg;
    m->inv_freq = own(m, mem_malloc_array((size_t)c->rope_dim / 2, sizeof(double)));
    if (!m->inv_freq) return 1;
    model_rope_context(m, c->max_positions); /* LongRoPE's set for the model's whole context until told otherwise */
    rope_frequencies(c, c->rope_theta, 0, m->rope_long, m->inv_freq);
    /* llama.cpp takes plain RoPE's angles as pos * s^i in float, s = theta^(-2/rope_dim) */
    if (o->arith_llama && c->rope == ROPE_DEFAULT)
        m->rope_theta_scale = powf((float)c->rope_theta, -2.0f / (float)c->rope_dim);
    if (c->rope_local_theta > 0) {
        m->inv_freq_local = own(m, mem_malloc_array((size_t)c->rope_dim / 2, sizeof(double)));
        if (!m->inv_freq_local) return 1;
        rope_frequencies(c, c->rope_local_theta, 1, 0, m->inv_freq_local);
        if (o->arith_llama) m->rope_theta_scale_local = powf((float)c->rope_local_theta, -2.0f / (float)c->rope_dim);
    }
    return 0;
}

model *model_load_ex(const char *dir, const model_load_options *o, xllm_error *err) {
    const model_part *part = o->part;
    err_clear(err);
    int max_tokens = o->max_tokens;
    model *m = mem_calloc(1, sizeof *m);
    if (!m) {
        err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        return NULL;
    }
    m->dir = mem_strdup(dir);
    if (!m->dir) {
        xllm_free(m);
        err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        return NULL;
    }
    if (open_weights(m, dir, err)) goto fail;
    const model_config *c = &m->cfg;
    m->fuse = !o->no_fuse;
    if (create_backend(m, o, err) || check_backend(m, err)) goto fail;
    if (take_part(m, part, err)) goto fail;
    if (bind_ends(m, dir, err)) goto fail;

    m->layers = own(m, mem_calloc((size_t)c->n_layers, sizeof(layer_weights)));
    if (!m->layers) {
        err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        goto fail;
    }
    for (int l = m->layer_begin; l < m->layer_end; l++)
        if (bind_layer(m, l, err)) goto fail;

    if (init_rope(m, o)) goto fail;
    if (alloc_scratch(m, max_tokens, err)) goto fail;
    if (pack_weights(m, err)) goto fail;
    return m;
fail:
    if (err && err->code == XLLM_OK) err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory loading %s", dir);
    model_free(m);
    return NULL;
}

void model_free(model *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_dev; i++) m->be.ops->free(m->be.ctx, m->dev[i]);
    xllm_free(m->dev);
    backend_destroy(&m->be);
    for (size_t i = 0; i < m->n_owned; i++) xllm_free(m->owned[i]);
    xllm_free(m->owned);
    st_close(m->weights_file);
    cJSON_Delete(m->meta);
    xllm_free(m->owned_tok_json);
    xllm_free(m->owned_tok_config);
    xllm_free(m->dir);
    xllm_free(m);
}
