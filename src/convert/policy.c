/* policy.c - tensor classes and the precision policy (see policy.h). */
#include "convert/policy.h"
#include "base/error.h"
#include "quant/kquant.h"
#include "quant/quant.h"

#include <stdio.h>
#include <string.h>

static const char *k_class_names[TC_COUNT] = {"embed", "attn", "mlp", "lm_head", "norm", "router", "other"};

const char *tensor_class_name(tensor_class c) { return (unsigned)c < TC_COUNT ? k_class_names[c] : "?"; }

static int ends_with(const char *s, const char *suffix) {
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && !strcmp(s + ls - lx, suffix);
}

tensor_class tensor_class_of(const char *name, int ndim) {
    if (ndim == 1) return TC_NORM; /* norms and biases */
    if (!strcmp(name, "model.embed_tokens.weight")) return TC_EMBED;
    if (!strcmp(name, "lm_head.weight")) return TC_LM_HEAD;
    if (ends_with(name, ".mlp.gate.weight") || ends_with(name, ".block_sparse_moe.gate.weight") ||
        ends_with(name, ".shared_expert_gate.weight"))
        return TC_ROUTER;
    if (strstr(name, ".self_attn.")) return TC_ATTN;
    if (strstr(name, ".mlp.") || strstr(name, ".block_sparse_moe.")) return TC_MLP;
    return TC_OTHER;
}

xllm_status qtype_parse(const char *s, int group, qtype *out, xllm_error *err) {
    out->group = 0;
    if (!strcmp(s, "f32")) out->dtype = XLLM_DT_F32;
    else if (!strcmp(s, "f16")) out->dtype = XLLM_DT_F16;
    else if (!strcmp(s, "bf16")) out->dtype = XLLM_DT_BF16;
    else if (!strcmp(s, "q8")) out->dtype = XLLM_DT_Q8, out->group = QK;
    else if (!strcmp(s, "q4")) out->dtype = XLLM_DT_Q4, out->group = group;
    else if (!strcmp(s, "q4m")) out->dtype = XLLM_DT_Q4M, out->group = group;
    else if (!strcmp(s, "q4_k")) out->dtype = XLLM_DT_Q4_K, out->group = QK_K;
    else if (!strcmp(s, "q5_k")) out->dtype = XLLM_DT_Q5_K, out->group = QK_K;
    else if (!strcmp(s, "q6_k")) out->dtype = XLLM_DT_Q6_K, out->group = QK_K;
    else if (!strcmp(s, "q2_k")) out->dtype = XLLM_DT_Q2_K, out->group = QK_K;
    else if (!strcmp(s, "q3_k")) out->dtype = XLLM_DT_Q3_K, out->group = QK_K;
    else if (!strcmp(s, "iq4_nl")) out->dtype = XLLM_DT_IQ4_NL, out->group = 32;
    else
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                           "unknown type \"%s\" (use f32, f16, bf16, q8, q4, q4m, q2_k, q3_k, q4_k, q5_k, q6_k, "
                           "iq4_nl, q3_k_m, q4_k_m or q5_k_m)",
                           s);
    return XLLM_OK;
}

const char *qtype_name(qtype t, char *buf, size_t cap) {
    switch (t.dtype) {
    case XLLM_DT_F32: snprintf(buf, cap, "f32"); break;
    case XLLM_DT_F16: snprintf(buf, cap, "f16"); break;
    case XLLM_DT_BF16: snprintf(buf, cap, "bf16"); break;
    case XLLM_DT_Q8: snprintf(buf, cap, "q8"); break;
    case XLLM_DT_Q4: snprintf(buf, cap, "q4/g%d", t.group); break;
    case XLLM_DT_Q4M: snprintf(buf, cap, "q4m/g%d", t.group); break;
    default: snprintf(buf, cap, "%s", dtype_name(t.dtype));
    }
    return buf;
}

xllm_status policy_make(const char *dtype, int group, const char *spec, policy *p, xllm_error *err) {
    if (group == 0) group = 32;
    if (group != 32 && group != 64 && group != 128)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "group size must be 32, 64 or 128 (got %d)", group);
    qtype base, f32 = {XLLM_DT_F32, 0}, q8 = {XLLM_DT_Q8, QK};
    memset(p, 0, sizeof *p);
    const char *d = dtype ? dtype : "f32";
    xllm_status st;
    if (!strcmp(d, "q3_k_m") || !strcmp(d, "q4_k_m") || !strcmp(d, "q5_k_m")) { /* llama.cpp's mixes: see policy.h */
        base.dtype = d[1] == '3' ? XLLM_DT_Q3_K : d[1] == '4' ? XLLM_DT_Q4_K : XLLM_DT_Q5_K, base.group = QK_K;
        p->mix = d[1] - '0';
        p->more.dtype = p->mix == 3 ? XLLM_DT_Q5_K : XLLM_DT_Q6_K, p->more.group = QK_K;
    } else if ((st = qtype_parse(d, group, &base, err))) {
        return st;
    }
    int quantized = dtype_is_quant(base.dtype);
    /* embeddings q8 whenever matmuls are quantized (rows are only looked up: memory, not
     * speed; at Q4_K, llama.cpp's choice, the kq-F16 test model's KL divergence on the held
     * text was 0.136 against 0.090 at q8); lm_head q8, or Q6_K for the K-quants as llama.cpp */
    p->cls[TC_EMBED] = quantized ? q8 : base;
    qtype q6k = {XLLM_DT_Q6_K, QK_K};
    p->cls[TC_LM_HEAD] = dtype_is_kq(base.dtype) ? q6k : quantized ? q8 : base;
    p->cls[TC_ATTN] = base;
    p->cls[TC_MLP] = base;
    p->cls[TC_NORM] = f32;
    p->cls[TC_ROUTER] = f32;
    p->cls[TC_OTHER] = f32;
    if (!spec || !*spec) return XLLM_OK;
    /* "class=type,class=type" */
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *item = strtok(buf, ","); item; item = strtok(NULL, ",")) {
        char *eq = strchr(item, '=');
        if (!eq) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "policy item \"%s\" is not class=type", item);
        *eq = 0;
        int c = -1;
        for (int i = 0; i < TC_COUNT; i++)
            if (!strcmp(item, k_class_names[i])) c = i;
        if (c < 0)
            return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                               "unknown tensor class \"%s\" in policy (classes: embed, attn, mlp, lm_head, norm, router)",
                               item);
        qtype t;
        if ((st = qtype_parse(eq + 1, group, &t, err))) return st;
        if ((c == TC_NORM || c == TC_ROUTER) && dtype_is_quant(t.dtype))
            return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "class %s must stay a float type (f32, f16, bf16)", item);
        p->cls[c] = t;
    }
    return XLLM_OK;
}

/* llama.cpp's layers that get more bits in its Q4_K_M / Q5_K_M mixes. */
static int more_bits(int layer, int n) { return layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2; }

const char *policy_mix_rule(const policy *p) {
    switch (p->mix) {
    case 3: return "llama.cpp's Q3_K_M: Q3_K; v_proj Q5_K in layers 0-1, else Q4_K; down_proj Q5_K in the first "
                   "sixteenth of the layers, else Q4_K; o_proj Q4_K; lm_head Q6_K";
    case 4: return "llama.cpp's Q4_K_M: Q4_K; v_proj and down_proj Q6_K in the first and last eighth of the layers and "
                   "every third layer between; lm_head Q6_K";
    case 5: return "llama.cpp's Q5_K_M: Q5_K; v_proj and down_proj Q6_K in the first and last eighth of the layers and "
                   "every third layer between; lm_head Q6_K";
    default: return NULL;
    }
}

qtype policy_pick_named(const policy *p, const char *name, tensor_class c, int ndim, int64_t cols) {
    if (p->mix && name && ndim == 2 && (c == TC_ATTN || c == TC_MLP)) {
        int layer = -1, n = p->n_layers;
        qtype q4k = {XLLM_DT_Q4_K, QK_K}, t = {XLLM_DT_F32, 0};
        if (sscanf(name, "model.layers.%d.", &layer) == 1 && layer >= 0 && n > 0) {
            int v = strstr(name, ".v_proj.") != NULL, down = strstr(name, ".down_proj.") != NULL;
            if (p->mix == 3) { /* llama.cpp's Q3_K_M (llama_tensor_get_type) */
                if (v) t = layer < 2 ? p->more : q4k;
                else if (down) t = layer < n / 16 ? p->more : q4k;
                else if (strstr(name, ".o_proj.")) t = q4k;
            } else if ((v || down) && more_bits(layer, n)) {
                t = p->more;
            }
        }
        if (t.group && quant_format_ok(t.dtype, t.group, cols)) return t;
    }
    return policy_pick(p, c, ndim, cols);
}

qtype policy_pick(const policy *p, tensor_class c, int ndim, int64_t cols) {
    qtype t = p->cls[c];
    qtype f32 = {XLLM_DT_F32, 0}, q8 = {XLLM_DT_Q8, QK}, f16 = {XLLM_DT_F16, 0};
    if (ndim == 1) return (t.dtype == XLLM_DT_F16 || t.dtype == XLLM_DT_BF16) ? t : f32; /* 1-D: floats only */
    if (ndim != 2) return f32;
    if (!dtype_is_quant(t.dtype) || quant_format_ok(t.dtype, t.group, cols)) return t;
    if (quant_format_ok(XLLM_DT_Q8, QK, cols)) return q8;
    return f16;
}
