/*
 * model_config.c - config.json -> model_config, with every field checked.
 *
 * Missing required fields, unknown model_type and unknown rope types are
 * errors naming the file and the field: silently defaulting would give wrong
 * logits, which is worse than refusing.
 */
#include "model/model_config.h"
#include "base/error.h"
#include "base/file.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct { const char *path; xllm_error *err; xllm_status st; } cfg_ctx;

static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

/* Integer field; def < -1 marks it required. After an error (reported once
 * in c->st) it returns lo, a value the rest of the parse can divide by. */
static int get_int(cfg_ctx *c, const cJSON *o, const char *name, long long def, long long lo, long long hi) {
    const cJSON *v = field(o, name);
    if (!v) {
        if (def < -1 && !c->st) c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: missing required field \"%s\"", c->path, name);
        return (int)(def < -1 ? lo : def);
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double)lo ||
        v->valuedouble > (double)hi) {
        if (!c->st)
            c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: field \"%s\" must be an integer in [%lld, %lld]",
                                c->path, name, lo, hi);
        return (int)lo;
    }
    return (int)v->valuedouble;
}

static double get_num(cfg_ctx *c, const cJSON *o, const char *name, double def) {
    const cJSON *v = field(o, name);
    if (!v) return def;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        if (!c->st) c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: field \"%s\" must be a number", c->path, name);
        return def;
    }
    return v->valuedouble;
}

static int get_bool(cfg_ctx *c, const cJSON *o, const char *name, int def) {
    const cJSON *v = field(o, name);
    if (!v) return def;
    if (!cJSON_IsBool(v)) {
        if (!c->st) c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: field \"%s\" must be true or false", c->path, name);
        return def;
    }
    return cJSON_IsTrue(v);
}

/* A token id: an integer in [0, 2^30] (never a float cast into an int32:
 * 1e20 or 2.5 is an error, not whatever the conversion gives). */
static int is_token_id(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= (double)(1 << 30) &&
           v->valuedouble == floor(v->valuedouble);
}

/* eos_token_id: an integer or a list of integers. */
static void read_eos(cfg_ctx *c, const cJSON *o, model_config *cfg) {
    const cJSON *v = field(o, "eos_token_id");
    if (!v) return;
    cfg->n_eos = 0;
    if (cJSON_IsNumber(v)) {
        if (!is_token_id(v)) {
            if (!c->st)
                c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: eos_token_id must be an integer in [0, 2^30]", c->path);
            return;
        }
        cfg->eos_ids[cfg->n_eos++] = (int32_t)v->valuedouble;
        return;
    }
    if (!cJSON_IsArray(v)) {
        if (!c->st) c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: eos_token_id must be an integer or a list", c->path);
        return;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (!is_token_id(e)) {
            if (!c->st)
                c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: eos_token_id list holds something other than an "
                                    "integer in [0, 2^30]", c->path);
            return;
        }
        if (cfg->n_eos < MODEL_MAX_EOS) cfg->eos_ids[cfg->n_eos++] = (int32_t)e->valuedouble;
    }
}

/* The values RoPE rotates per head (rope_dim): the whole head, or the first
 * int(head_dim * partial_rotary_factor) (arch_rope_dims: Phi-4-mini). */
static void read_rotary_dims(cfg_ctx *c, const cJSON *root, model_config *cfg) {
    cfg->rope_dim = cfg->head_dim;
    if (c->st || !field(root, "partial_rotary_factor")) return;
    double f = get_num(c, root, "partial_rotary_factor", 1.0);
    if (c->st || f == 1.0) return;
    int rot = arch_rope_dims(cfg->head_dim, f);
    if (!rot)
        c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: partial_rotary_factor %g must be in (0, 1] and give an even "
                            "number of rotated values >= 2 of head_dim %d", c->path, f, cfg->head_dim);
    else cfg->rope_dim = rot;
}

/* rope_scaling.<name>: rope_dim / 2 positive numbers */
static void read_factors(cfg_ctx *c, const cJSON *rs, const char *name, int half, double *out) {
    if (half > MODEL_MAX_ROPE_FACTORS) {
        if (!c->st)
            c->st = err_setf(c->err, XLLM_ERR_UNSUPPORTED, "%s: LongRoPE over %d rotated values (at most %d)", c->path,
                                2 * half, 2 * MODEL_MAX_ROPE_FACTORS);
        return;
    }
    const cJSON *a = field(rs, name);
    int n = 0, ok = cJSON_IsArray(a) && cJSON_GetArraySize(a) == half && half <= MODEL_MAX_ROPE_FACTORS;
    const cJSON *e;
    if (ok) cJSON_ArrayForEach(e, a) {
            if (!cJSON_IsNumber(e) || !(e->valuedouble > 0) || !isfinite(e->valuedouble)) ok = 0;
            else out[n++] = e->valuedouble;
        }
    if (!ok && !c->st)
        c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: rope_scaling.%s must be a list of %d positive numbers "
                            "(the rotated values per head / 2)", c->path, name, half);
}

/* LongRoPE (HF's "longrope", formerly "su"), as transformers'
 * _compute_longrope_parameters reads it: short_factor and long_factor, the
 * pretrained context original_max_position_embeddings (top level, as Phi-3
 * has it, or inside rope_scaling; else max_position_embeddings), and the
 * cos/sin scale attention_factor, by default sqrt(1 + ln(s) / ln(original))
 * with s = max_position_embeddings / original (1 when s <= 1). */
static void read_longrope(cfg_ctx *c, const cJSON *root, const cJSON *rs, model_config *cfg) {
    cfg->rope = ROPE_LONGROPE;
    int half = cfg->rope_dim / 2; /* transformers: int(head_dim * partial_rotary_factor) // 2 */
    read_factors(c, rs, "short_factor", half, cfg->rope_short);
    read_factors(c, rs, "long_factor", half, cfg->rope_long);
    double orig = get_num(c, root, "original_max_position_embeddings", 0), factor = 1;
    if (orig > 0) factor = cfg->max_positions / orig;
    else {
        orig = get_num(c, rs, "original_max_position_embeddings", cfg->max_positions);
        factor = get_num(c, rs, "factor", 1);
    }
    double af = get_num(c, rs, "attention_factor", 0);
    if (!(af > 0)) af = factor <= 1 ? 1.0 : sqrt(1 + log(factor) / log(orig));
    cfg->rope_original_max_pos = orig;
    cfg->rope_attn_factor = af;
    cfg->rope_factor = factor;
    if (!c->st && (!(orig > 1) || !isfinite(af) || !(factor > 0)))
        c->st = err_setf(c->err, XLLM_ERR_FORMAT,
                            "%s: longrope rope_scaling needs original_max_position_embeddings > 1 and a positive "
                            "factor and attention_factor", c->path);
}

/* YaRN ("yarn"), as transformers' _compute_yarn_parameters and DeepSeek's
 * DeepseekV2YarnRotaryEmbedding read it: factor, original_max_position_embeddings
 * (else max_position_embeddings), beta_fast / beta_slow (32 / 1), truncate
 * (true), and the cos/sin scale attention_factor, by default
 * mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both are given,
 * else mscale(factor, 1). DeepSeek (MLA families) also multiplies the
 * softmax scale by mscale(factor, mscale_all_dim)^2 when mscale_all_dim is
 * set. The factor is rope_scaling.factor, as llama.cpp's converter and
 * DeepSeek's code take it (not max_position_embeddings / original). */
static void read_yarn(cfg_ctx *c, const cJSON *root, const cJSON *rs, model_config *cfg) {
    (void)root;
    cfg->rope = ROPE_YARN;
    double factor = get_num(c, rs, "factor", 0);
    double orig = get_num(c, rs, "original_max_position_embeddings", cfg->max_positions);
    double bf = get_num(c, rs, "beta_fast", 0), bs = get_num(c, rs, "beta_slow", 0);
    double ms = get_num(c, rs, "mscale", 0), msa = get_num(c, rs, "mscale_all_dim", 0);
    double af = get_num(c, rs, "attention_factor", 0);
    if (!c->st && (!(factor > 0) || !(orig >= 1) || bf < 0 || bs < 0 || af < 0 || !(fabs(ms) <= 1e3) ||
                   !(fabs(msa) <= 1e3))) {
        c->st = err_setf(c->err, XLLM_ERR_FORMAT,
                         "%s: yarn rope_scaling needs factor > 0, original_max_position_embeddings >= 1, "
                         "non-negative beta_fast, beta_slow and attention_factor, |mscale|, |mscale_all_dim| <= 1000",
                         c->path);
        return;
    }
    if (!(bf > 0)) bf = 32; /* HF: `or 32`, `or 1` */
    if (!(bs > 0)) bs = 1;
    if (!(af > 0)) af = (ms != 0 && msa != 0) ? arch_yarn_mscale(factor, ms) / arch_yarn_mscale(factor, msa)
                                              : arch_yarn_mscale(factor, 1);
    cfg->rope_factor = factor;
    cfg->rope_original_max_pos = orig;
    cfg->rope_beta_fast = bf;
    cfg->rope_beta_slow = bs;
    cfg->rope_attn_factor = af;
    cfg->rope_yarn_truncate = get_bool(c, rs, "truncate", 1);
    cfg->rope_yarn_mscale_all = cfg->arch->mla ? msa : 0; /* only DeepSeek's attention applies it */
    if (!c->st && !(isfinite(af) && af > 0))
        c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: yarn rope_scaling gives attention factor %g", c->path, af);
}

static void read_rope_scaling(cfg_ctx *c, const cJSON *root, model_config *cfg) {
    cfg->rope = ROPE_DEFAULT;
    const cJSON *rs = field(root, "rope_scaling");
    if (!rs) return;
    if (!cJSON_IsObject(rs)) {
        if (!c->st) c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: rope_scaling must be an object or null", c->path);
        return;
    }
    const cJSON *t = field(rs, "rope_type");
    if (!t) t = field(rs, "type");
    const char *type = cJSON_IsString(t) ? t->valuestring : NULL;
    if (!type) {
        if (!c->st) c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: rope_scaling has no rope_type", c->path);
        return;
    }
    if (!strcmp(type, "default")) return;
    if (!strcmp(type, "linear")) {
        cfg->rope = ROPE_LINEAR;
        cfg->rope_factor = get_num(c, rs, "factor", 0);
    } else if (!strcmp(type, "llama3")) {
        cfg->rope = ROPE_LLAMA3;
        cfg->rope_factor = get_num(c, rs, "factor", 0);
        cfg->rope_low_freq_factor = get_num(c, rs, "low_freq_factor", 0);
        cfg->rope_high_freq_factor = get_num(c, rs, "high_freq_factor", 0);
        cfg->rope_original_max_pos = get_num(c, rs, "original_max_position_embeddings", 0);
        if (!c->st && (cfg->rope_low_freq_factor <= 0 || cfg->rope_high_freq_factor <= cfg->rope_low_freq_factor ||
                       cfg->rope_original_max_pos <= 0))
            c->st = err_setf(c->err, XLLM_ERR_FORMAT,
                                "%s: llama3 rope_scaling needs low_freq_factor < high_freq_factor and "
                                "original_max_position_embeddings > 0", c->path);
    } else if (!strcmp(type, "longrope") || !strcmp(type, "su")) {
        read_longrope(c, root, rs, cfg);
        return;
    } else if (!strcmp(type, "yarn")) {
        read_yarn(c, root, rs, cfg);
        return;
    } else {
        if (!c->st)
            c->st = err_setf(c->err, XLLM_ERR_UNSUPPORTED,
                                "%s: rope_scaling type \"%s\" is not supported (supported: default, linear, llama3, "
                                "longrope, yarn)",
                                c->path, type);
        return;
    }
    if (!c->st && !(cfg->rope_factor > 0))
        c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: rope_scaling.factor must be > 0", c->path);
}

/* Which layers slide, by the family's rule (arch_window); HF's layer_types
 * ("sliding_attention" / "full_attention" per layer) overrides it. */
static void read_windows(cfg_ctx *c, const cJSON *root, model_config *cfg) {
    const arch_info *a = cfg->arch;
    int window = get_int(c, root, "sliding_window", 0, 0, 1 << 30);
    int n = cfg->n_layers < MODEL_MAX_LAYERS ? cfg->n_layers : MODEL_MAX_LAYERS;
    int use = get_bool(c, root, "use_sliding_window", 0);
    int max_window_layers = get_int(c, root, "max_window_layers", cfg->n_layers, 0, 1 << 20);
    int pattern = get_int(c, root, "sliding_window_pattern", 6, 1, 1 << 20);
    for (int l = 0; l < n; l++) {
        int slides = 0;
        switch (a->window) {
        case ARCH_WIN_ALL: slides = 1; break;
        case ARCH_WIN_QWEN: slides = use && l >= max_window_layers; break;
        case ARCH_WIN_EVEN: slides = l % 2 == 0; break;
        case ARCH_WIN_PATTERN: slides = (l + 1) % pattern != 0; break;
        case ARCH_WIN_NONE: slides = 0; break;
        }
        cfg->layer_window[l] = slides ? window : 0;
    }
    const cJSON *lt = field(root, "layer_types"), *e;
    if (!lt || a->window == ARCH_WIN_NONE) return;
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != cfg->n_layers) {
        if (!c->st)
            c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: layer_types must list one type per layer (%d)", c->path,
                                cfg->n_layers);
        return;
    }
    int l = 0;
    cJSON_ArrayForEach(e, lt) {
        const char *t = cJSON_IsString(e) ? e->valuestring : "";
        if (strcmp(t, "sliding_attention") && strcmp(t, "full_attention")) {
            if (!c->st)
                c->st = err_setf(c->err, XLLM_ERR_UNSUPPORTED, "%s: layer_types holds \"%s\" (supported: "
                                    "sliding_attention, full_attention)", c->path, t);
            return;
        }
        if (l < n) cfg->layer_window[l] = strcmp(t, "sliding_attention") ? 0 : window;
        l++;
    }
}

static void read_moe(cfg_ctx *c, const cJSON *root, model_config *cfg) {
    const arch_info *a = cfg->arch;
    cfg->moe = a->moe;
    if (a->moe == MOE_MIXTRAL) {
        cfg->n_experts = get_int(c, root, "num_local_experts", -2, 1, 1024);
        cfg->n_experts_used = get_int(c, root, "num_experts_per_tok", -2, 1, 1024);
        cfg->moe_intermediate = cfg->intermediate;
        for (int l = 0; l < cfg->n_layers && l < MODEL_MAX_LAYERS; l++) cfg->layer_is_moe[l] = 1;
    } else if (a->moe == MOE_QWEN) {
        cfg->n_experts = get_int(c, root, "num_experts", -2, 1, 4096);
        cfg->n_experts_used = get_int(c, root, "num_experts_per_tok", -2, 1, 1024);
        cfg->moe_intermediate = get_int(c, root, "moe_intermediate_size", -2, 1, 1 << 22);
        if (a->shared_expert)
            cfg->shared_expert_intermediate = get_int(c, root, "shared_expert_intermediate_size", 0, 0, 1 << 22);
        int step = get_int(c, root, "decoder_sparse_step", 1, 1, 1 << 20);
        for (int l = 0; l < cfg->n_layers && l < MODEL_MAX_LAYERS; l++)
            cfg->layer_is_moe[l] = ((l + 1) % step) == 0;
        const cJSON *only = field(root, "mlp_only_layers"), *e;
        if (only && cJSON_IsArray(only)) {
            cJSON_ArrayForEach(e, only) {
                if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0 && e->valuedouble < cfg->n_layers) ||
                    e->valuedouble != floor(e->valuedouble)) {
                    if (!c->st)
                        c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: mlp_only_layers must hold layer indices in "
                                            "[0, %d)", c->path, cfg->n_layers);
                    break;
                }
                cfg->layer_is_moe[(int)e->valuedouble] = 0;
            }
        }
    } else if (a->moe == MOE_DEEPSEEK) {
        cfg->n_experts = get_int(c, root, "n_routed_experts", -2, 1, 4096);
        cfg->n_experts_used = get_int(c, root, "num_experts_per_tok", -2, 1, 1024);
        cfg->moe_intermediate = get_int(c, root, "moe_intermediate_size", -2, 1, 1 << 22);
        cfg->shared_expert_intermediate = get_int(c, root, "n_shared_experts", 0, 0, 64) * cfg->moe_intermediate;
        int first = get_int(c, root, "first_k_dense_replace", 0, 0, MODEL_MAX_LAYERS);
        int step = get_int(c, root, "moe_layer_freq", 1, 1, 1 << 20);
        for (int l = 0; l < cfg->n_layers && l < MODEL_MAX_LAYERS; l++)
            cfg->layer_is_moe[l] = l >= first && l % step == 0;
        const cJSON *sf = field(root, "scoring_func"), *tm = field(root, "topk_method");
        const char *sfn = cJSON_IsString(sf) ? sf->valuestring : "softmax";
        const char *tmn = cJSON_IsString(tm) ? tm->valuestring : "greedy";
        if (strcmp(sfn, "softmax") && strcmp(sfn, "sigmoid") && !c->st)
            c->st = err_setf(c->err, XLLM_ERR_UNSUPPORTED, "%s: scoring_func \"%s\" is not supported (supported: "
                                "softmax, sigmoid)", c->path, sfn);
        if (strcmp(tmn, "greedy") && strcmp(tmn, "group_limited_greedy") && strcmp(tmn, "noaux_tc") && !c->st)
            c->st = err_setf(c->err, XLLM_ERR_UNSUPPORTED, "%s: topk_method \"%s\" is not supported (supported: "
                                "greedy, group_limited_greedy, noaux_tc)", c->path, tmn);
        cfg->moe_sigmoid = !strcmp(sfn, "sigmoid");
        cfg->moe_sel_bias = !strcmp(tmn, "noaux_tc"); /* V3's e_score_correction_bias */
        if (strcmp(tmn, "greedy")) {
            cfg->n_group = get_int(c, root, "n_group", 1, 1, 1024);
            cfg->topk_group = get_int(c, root, "topk_group", cfg->n_group, 1, 1024);
            cfg->group_max = !strcmp(tmn, "group_limited_greedy");
            if (cfg->n_group <= 1) cfg->n_group = cfg->topk_group = 0;
        }
        cfg->routed_scale = (float)get_num(c, root, "routed_scaling_factor", 1.0);
        if (!c->st && (cfg->n_group && (cfg->n_experts % cfg->n_group || cfg->topk_group > cfg->n_group ||
                                        cfg->n_experts_used > cfg->topk_group * (cfg->n_experts / cfg->n_group) ||
                                        (!cfg->group_max && cfg->n_experts / cfg->n_group < 2))))
            c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: n_group %d / topk_group %d do not divide %d experts into "
                                "groups that can hold num_experts_per_tok %d", c->path, cfg->n_group, cfg->topk_group,
                                cfg->n_experts, cfg->n_experts_used);
        if (!c->st && !(cfg->routed_scale > 0 && cfg->routed_scale <= 1e4))
            c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: routed_scaling_factor must be in (0, 1e4]", c->path);
    }
    cfg->shared_gated = a->moe == MOE_QWEN;
    cfg->norm_topk_prob = a->norm_topk >= 0 ? a->norm_topk : get_bool(c, root, "norm_topk_prob", 0);
    if (!c->st && cfg->n_experts_used > cfg->n_experts)
        c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: num_experts_per_tok (%d) exceeds the number of experts (%d)",
                            c->path, cfg->n_experts_used, cfg->n_experts);
}

/* Multi-head latent attention's sizes (DeepSeek): the cache row and the
 * scale 1 / sqrt(qk_nope + qk_rope); head_dim / n_kv_heads describe the pool. */
static void read_mla(cfg_ctx *c, const cJSON *root, model_config *cfg) {
    if (!cfg->arch->mla) return;
    const cJSON *ql = field(root, "q_lora_rank");
    cfg->q_lora_rank = ql ? get_int(c, root, "q_lora_rank", 0, 0, 1 << 20) : 0;
    cfg->kv_lora_rank = get_int(c, root, "kv_lora_rank", -2, 2, 1 << 20);
    cfg->qk_nope_dim = get_int(c, root, "qk_nope_head_dim", -2, 1, 4096);
    cfg->qk_rope_dim = get_int(c, root, "qk_rope_head_dim", -2, 2, 4096);
    cfg->v_head_dim = get_int(c, root, "v_head_dim", -2, 1, 4096);
    if (c->st) return;
    cfg->mla_dim = cfg->kv_lora_rank + cfg->qk_rope_dim;
    if (cfg->mla_dim % 2 || cfg->qk_rope_dim % 2) {
        c->st = err_setf(c->err, XLLM_ERR_UNSUPPORTED, "%s: kv_lora_rank + qk_rope_head_dim (%d) and "
                            "qk_rope_head_dim (%d) must be even", c->path, cfg->mla_dim, cfg->qk_rope_dim);
        return;
    }
    cfg->head_dim = cfg->mla_dim / 2;
    cfg->n_kv_heads = 1;
    cfg->rope_dim = cfg->qk_rope_dim;
    cfg->rope_interleaved = 1; /* adjacent pairs, in HF's DeepSeek code and llama.cpp's alike */
    cfg->attn_scale = 1.0f / sqrtf((float)(cfg->qk_nope_dim + cfg->qk_rope_dim)); /* llama.cpp's kq_scale, in float */
    if (cfg->rope == ROPE_YARN && cfg->rope_yarn_mscale_all != 0) { /* DeepSeek: softmax_scale x mscale^2 */
        float m = (float)arch_yarn_mscale(cfg->rope_factor, cfg->rope_yarn_mscale_all);
        cfg->attn_scale = m * m / sqrtf((float)(cfg->qk_nope_dim + cfg->qk_rope_dim));
    }
}

/* Activation, soft-caps, attention scale, norm offset, embedding scale, local RoPE base. */
static void read_family(cfg_ctx *c, const cJSON *root, model_config *cfg) {
    const arch_info *a = cfg->arch;
    cfg->act = a->act;
    const cJSON *act = field(root, "hidden_activation");
    if (!act) act = field(root, "hidden_act");
    if (act && cJSON_IsString(act)) {
        const char *s = act->valuestring;
        if (!strcmp(s, "silu") || !strcmp(s, "swish")) cfg->act = ARCH_ACT_SILU;
        else if (!strcmp(s, "gelu_pytorch_tanh") || !strcmp(s, "gelu_tanh")) cfg->act = ARCH_ACT_GELU_TANH;
        else if (!c->st)
            c->st = err_setf(c->err, XLLM_ERR_UNSUPPORTED, "%s: activation \"%s\" is not supported (supported: "
                                "silu, gelu_pytorch_tanh)", c->path, s);
    }
    cfg->norm_offset = (float)get_num(c, root, "xllm_norm_offset", a->norm_offset); /* 0 from the GGUF reader */
    cfg->embed_scale = a->embed_scale;
    if (a->softcap) {
        cfg->attn_softcap = (float)get_num(c, root, "attn_logit_softcapping", 0);
        cfg->final_softcap = (float)get_num(c, root, "final_logit_softcapping", 0);
    }
    double qpas = get_num(c, root, "query_pre_attn_scalar", 0);
    if (qpas > 0) cfg->attn_scale = (float)(1.0 / sqrt(qpas));
    if (a->rope_local) cfg->rope_local_theta = get_num(c, root, "rope_local_base_freq", 10000.0);
    /* values that reach arithmetic: a cap or scale out of these ranges gives inf / NaN logits */
    if (!c->st && (!(cfg->attn_softcap >= 0 && cfg->attn_softcap <= 1e6) ||
                   !(cfg->final_softcap >= 0 && cfg->final_softcap <= 1e6) || !(qpas == 0 || (qpas >= 1e-3 && qpas <= 1e9)) ||
                   (a->rope_local && !(cfg->rope_local_theta > 0))))
        c->st = err_setf(c->err, XLLM_ERR_FORMAT, "%s: soft-caps must be in [0, 1e6], query_pre_attn_scalar in "
                            "[1e-3, 1e9] and rope_local_base_freq > 0", c->path);
}

xllm_status model_config_parse(const cJSON *root, const cJSON *gen, const char *path, const char *gen_path,
                               model_config *cfg, xllm_error *err) {
    memset(cfg, 0, sizeof *cfg);
    cfg_ctx c = {path, err, XLLM_OK};
    if (!cJSON_IsObject(root)) return err_setf(err, XLLM_ERR_FORMAT, "%s: top level is not a JSON object", path);
    const cJSON *mt = field(root, "model_type");
    if (!cJSON_IsString(mt)) return err_setf(err, XLLM_ERR_FORMAT, "%s: missing \"model_type\"", path);
    cfg->arch = arch_by_hf(mt->valuestring);
    if (!cfg->arch)
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: model_type \"%s\" is not supported (supported: %s)", path,
                           mt->valuestring, arch_hf_list());
    const arch_info *a = cfg->arch;
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", mt->valuestring);

    cfg->hidden = get_int(&c, root, "hidden_size", -2, 1, 1 << 20);
    cfg->n_layers = get_int(&c, root, "num_hidden_layers", -2, 1, MODEL_MAX_LAYERS);
    cfg->n_heads = get_int(&c, root, "num_attention_heads", -2, 1, 4096);
    cfg->n_kv_heads = get_int(&c, root, "num_key_value_heads", cfg->n_heads, 1, 4096);
    cfg->vocab = get_int(&c, root, "vocab_size", -2, 1, 1 << 24);
    cfg->intermediate = get_int(&c, root, "intermediate_size", -2, 1, 1 << 22);
    cfg->max_positions = get_int(&c, root, "max_position_embeddings", 2048, 1, 1 << 30);
    int default_hd = (cfg->n_heads > 0 && cfg->hidden % cfg->n_heads == 0) ? cfg->hidden / cfg->n_heads : 0;
    cfg->head_dim = get_int(&c, root, "head_dim", default_hd, 1, 4096);
    cfg->rms_eps = (float)get_num(&c, root, "rms_norm_eps", 1e-6);
    cfg->rope_theta = get_num(&c, root, "rope_theta", 10000.0);
    /* values that reach arithmetic: eps <= 0 (or 0 as a float) divides by zero
     * on a zero row, eps >= 1 drowns the activations; theta <= 0 makes the RoPE
     * frequencies NaN (as the GGUF reader already refuses) */
    if (!c.st && !(cfg->rms_eps > 0 && cfg->rms_eps < 1))
        c.st = err_setf(err, XLLM_ERR_FORMAT, "%s: rms_norm_eps must be in (0, 1) (got %g)", path,
                           get_num(&c, root, "rms_norm_eps", 1e-6));
    if (!c.st && !(cfg->rope_theta > 0))
        c.st = err_setf(err, XLLM_ERR_FORMAT, "%s: rope_theta must be > 0 (got %g)", path, cfg->rope_theta);
    read_rotary_dims(&c, root, cfg);
    read_rope_scaling(&c, root, cfg);

    int attention_bias = get_bool(&c, root, "attention_bias", 0);
    if (a->qkv_bias) {
        cfg->qkv_bias = 1;           /* Qwen2 always has q/k/v bias, no o bias */
    } else {
        cfg->qkv_bias = attention_bias;
        cfg->o_bias = attention_bias;
    }
    cfg->mlp_bias = get_bool(&c, root, "mlp_bias", 0);
    cfg->qk_norm = a->qk_norm;
    cfg->rope_interleaved = get_bool(&c, root, "xllm_rope_interleaved", 0); /* set by the GGUF reader */
    /* -1: not said (tied when the checkpoint has no lm_head, as HF's defaults
     * differ by family); 0 says there must be an lm_head */
    cfg->tie_embeddings = get_bool(&c, root, "tie_word_embeddings", -1);
    read_windows(&c, root, cfg);
    read_moe(&c, root, cfg);
    read_family(&c, root, cfg);
    if (!c.st && a->mla && cfg->rope_dim != cfg->head_dim)
        c.st = err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: partial_rotary_factor with multi-head latent attention "
                           "(its rope part is qk_rope_head_dim)", path);
    read_mla(&c, root, cfg);

    cfg->bos_id = get_int(&c, root, "bos_token_id", -1, -1, 1 << 30);
    cfg->n_eos = 0;
    read_eos(&c, root, cfg);
    if (!c.st && cfg->n_heads % cfg->n_kv_heads != 0)
        c.st = err_setf(err, XLLM_ERR_FORMAT, "%s: num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)",
                           path, cfg->n_heads, cfg->n_kv_heads);
    if (!c.st && (cfg->head_dim % 2 || cfg->rope_dim % 2) && !cfg->mla_dim)
        c.st = err_setf(err, XLLM_ERR_FORMAT, "%s: head_dim (%d) must be even for RoPE", path, cfg->head_dim);
    if (c.st) return c.st;

    /* generation_config.json overrides bos/eos when present. */
    if (gen && cJSON_IsObject(gen)) {
        c.path = gen_path;
        int bos = get_int(&c, gen, "bos_token_id", -1, -1, 1 << 30);
        if (field(gen, "bos_token_id")) cfg->bos_id = bos;
        read_eos(&c, gen, cfg);
        if (c.st) return c.st;
    }
    return XLLM_OK;
}

xllm_status model_config_load(const char *dir, model_config *cfg, xllm_error *err) {
    char path[4096], gen_path[4096];
    path_join(path, sizeof path, dir, "config.json");
    path_join(gen_path, sizeof gen_path, dir, "generation_config.json");
    cJSON *root = NULL, *gen = NULL;
    xllm_status st = json_file_load(path, &root, err);
    if (!st && path_exists(gen_path)) st = json_file_load(gen_path, &gen, err);
    if (!st) st = model_config_parse(root, gen, path, gen_path, cfg, err);
    cJSON_Delete(root);
    cJSON_Delete(gen);
    return st;
}
