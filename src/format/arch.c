/*
 * arch.c - the table of model families (arch.h): one row per family, and the
 * tensor-name mapping between GGUF and HF that the rows' name lists define,
 * and the two RoPE formulas every family shares (partial rotary, YaRN mscale).
 *
 * The idea: every difference between families that the code must know is a
 * field here, so model_config.c, model_load.c, gguf.c and gguf_write.c test
 * fields, never family names, and a new family is a new row.
 */
#include "format/arch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ name lists */

#define ATTN_QKV                                                                                                       \
    {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"}, {"attn_v", "self_attn.v_proj"},                   \
        {"attn_output", "self_attn.o_proj"}, {"attn_q_norm", "self_attn.q_norm"}, {"attn_k_norm", "self_attn.k_norm"}
#define MLP_DENSE {"ffn_gate", "mlp.gate_proj"}, {"ffn_up", "mlp.up_proj"}, {"ffn_down", "mlp.down_proj"}
#define NORMS_LLAMA {"attn_norm", "input_layernorm"}, {"ffn_norm", "post_attention_layernorm"}
#define NORMS_GEMMA                                                                                                    \
    {"attn_norm", "input_layernorm"}, {"post_attention_norm", "post_attention_layernorm"},                            \
        {"ffn_norm", "pre_feedforward_layernorm"}, {"post_ffw_norm", "post_feedforward_layernorm"}
#define MOE_QWEN_NAMES                                                                                                 \
    {"ffn_gate_inp", "mlp.gate"}, {"ffn_gate_exps", "mlp.experts.%d.gate_proj"},                                      \
        {"ffn_up_exps", "mlp.experts.%d.up_proj"}, {"ffn_down_exps", "mlp.experts.%d.down_proj"},                      \
        {"ffn_gate_inp_shexp", "mlp.shared_expert_gate"}, {"ffn_gate_shexp", "mlp.shared_expert.gate_proj"},          \
        {"ffn_up_shexp", "mlp.shared_expert.up_proj"}, {"ffn_down_shexp", "mlp.shared_expert.down_proj"}

static const arch_name k_llama[] = {NORMS_LLAMA, ATTN_QKV, MLP_DENSE, {NULL, NULL}};
static const arch_name k_mixtral[] = {NORMS_LLAMA, ATTN_QKV, MLP_DENSE,
                                      {"ffn_gate_inp", "block_sparse_moe.gate"},
                                      {"ffn_gate_exps", "block_sparse_moe.experts.%d.w1"},
                                      {"ffn_up_exps", "block_sparse_moe.experts.%d.w3"},
                                      {"ffn_down_exps", "block_sparse_moe.experts.%d.w2"},
                                      {NULL, NULL}};
static const arch_name k_qwen_moe[] = {NORMS_LLAMA, ATTN_QKV, MLP_DENSE, MOE_QWEN_NAMES, {NULL, NULL}};
static const arch_name k_gemma[] = {NORMS_GEMMA, ATTN_QKV, MLP_DENSE, {NULL, NULL}};
static const arch_name k_phi3[] = {NORMS_LLAMA,
                                   {"attn_qkv", "self_attn.qkv_proj"},
                                   {"attn_output", "self_attn.o_proj"},
                                   {"ffn_up", "mlp.gate_up_proj"},
                                   {"ffn_down", "mlp.down_proj"},
                                   {NULL, NULL}};
static const arch_name k_olmo2[] = {{"post_attention_norm", "post_attention_layernorm"},
                                    {"post_ffw_norm", "post_feedforward_layernorm"},
                                    ATTN_QKV,
                                    MLP_DENSE,
                                    {NULL, NULL}};
/* DeepSeek-V2/V3: MLA attention (q_a/q_b low-rank q or a plain q_proj; the
 * joint kv_a with the shared rope key; kv_b whole as HF stores it, or split
 * per head as llama.cpp's GGUFs do: attn_k_b (transposed) and attn_v_b, which
 * xLLM names self_attn.k_b_proj.H / v_b_proj.H), routed + shared experts. */
static const arch_name k_deepseek[] = {NORMS_LLAMA,
                                       {"attn_q", "self_attn.q_proj"},
                                       {"attn_q_a", "self_attn.q_a_proj"},
                                       {"attn_q_a_norm", "self_attn.q_a_layernorm"},
                                       {"attn_q_b", "self_attn.q_b_proj"},
                                       {"attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa"},
                                       {"attn_kv_a_norm", "self_attn.kv_a_layernorm"},
                                       {"attn_kv_b", "self_attn.kv_b_proj"},
                                       {"attn_k_b", "self_attn.k_b_proj.%d"},
                                       {"attn_v_b", "self_attn.v_b_proj.%d"},
                                       {"attn_output", "self_attn.o_proj"},
                                       MLP_DENSE,
                                       {"ffn_gate_inp", "mlp.gate"},
                                       {"exp_probs_b", "mlp.gate.e_score_correction_bias"},
                                       {"ffn_gate_exps", "mlp.experts.%d.gate_proj"},
                                       {"ffn_up_exps", "mlp.experts.%d.up_proj"},
                                       {"ffn_down_exps", "mlp.experts.%d.down_proj"},
                                       {"ffn_gate_shexp", "mlp.shared_experts.gate_proj"},
                                       {"ffn_up_shexp", "mlp.shared_experts.up_proj"},
                                       {"ffn_down_shexp", "mlp.shared_experts.down_proj"},
                                       {NULL, NULL}};

/* ------------------------------------------------------------------ rows */

#define N_LLAMA {"input_layernorm", NULL, "post_attention_layernorm", NULL}
#define N_GEMMA {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"}

static const arch_info k_arch[] = {
    /* hf_type, hf_class, gguf, experts, norms, offset, embed_scale, act, qkv_bias, qk_norm, softcap, window,
     * rope_local, interleaved_gguf, moe, norm_topk, shared, names, gguf_writable, mla */
    {"llama", "LlamaForCausalLM", "llama", 0, N_LLAMA, 0, 0, ARCH_ACT_SILU, 0, 0, 0, ARCH_WIN_ALL, 0, 1, MOE_NONE, 0,
     0, k_llama, 1, 0},
    {"mistral", "MistralForCausalLM", NULL, 0, N_LLAMA, 0, 0, ARCH_ACT_SILU, 0, 0, 0, ARCH_WIN_ALL, 0, 1, MOE_NONE,
     0, 0, k_llama, 0, 0},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", 0, N_LLAMA, 0, 0, ARCH_ACT_SILU, 1, 0, 0, ARCH_WIN_QWEN, 0, 0, MOE_NONE,
     0, 0, k_llama, 1, 0},
    {"qwen3", "Qwen3ForCausalLM", "qwen3", 0, N_LLAMA, 0, 0, ARCH_ACT_SILU, 0, 1, 0, ARCH_WIN_QWEN, 0, 0, MOE_NONE,
     0, 0, k_llama, 1, 0},
    {"mixtral", "MixtralForCausalLM", "llama", 1, N_LLAMA, 0, 0, ARCH_ACT_SILU, 0, 0, 0, ARCH_WIN_ALL, 0, 1,
     MOE_MIXTRAL, 1, 0, k_mixtral, 1, 0},
    {"qwen2_moe", "Qwen2MoeForCausalLM", "qwen2moe", 0, N_LLAMA, 0, 0, ARCH_ACT_SILU, 1, 0, 0, ARCH_WIN_QWEN, 0, 0,
     MOE_QWEN, -1, 1, k_qwen_moe, 1, 0},
    {"qwen3_moe", "Qwen3MoeForCausalLM", "qwen3moe", 0, N_LLAMA, 0, 0, ARCH_ACT_SILU, 0, 1, 0, ARCH_WIN_QWEN, 0, 0,
     MOE_QWEN, -1, 0, k_qwen_moe, 1, 0},
    {"gemma2", "Gemma2ForCausalLM", "gemma2", 0, N_GEMMA, 1, 1, ARCH_ACT_GELU_TANH, 0, 0, 2, ARCH_WIN_EVEN, 0, 0,
     MOE_NONE, 0, 0, k_gemma, 1, 0},
    {"gemma3_text", "Gemma3ForCausalLM", "gemma3", 0, N_GEMMA, 1, 1, ARCH_ACT_GELU_TANH, 0, 1, 1, ARCH_WIN_PATTERN,
     1, 0, MOE_NONE, 0, 0, k_gemma, 1, 0},
    {"phi3", "Phi3ForCausalLM", "phi3", 0, N_LLAMA, 0, 0, ARCH_ACT_SILU, 0, 0, 0, ARCH_WIN_NONE, 0, 0, MOE_NONE, 0,
     0, k_phi3, 1, 0},
    {"olmo2", "Olmo2ForCausalLM", "olmo2", 0, {NULL, "post_attention_layernorm", NULL, "post_feedforward_layernorm"},
     0, 0, ARCH_ACT_SILU, 0, 2, 0, ARCH_WIN_NONE, 0, 0, MOE_NONE, 0, 0, k_olmo2, 1, 0},
    /* DeepSeek-V2 and V3 (HF) are both llama.cpp's deepseek2; the GGUF reader takes the first row. RoPE rotates
     * adjacent pairs in both forms (HF's DeepSeek code de-interleaves before rotate-half): model_config sets it. */
    {"deepseek_v2", "DeepseekV2ForCausalLM", "deepseek2", 0, N_LLAMA, 0, 0, ARCH_ACT_SILU, 0, 0, 0, ARCH_WIN_NONE, 0,
     0, MOE_DEEPSEEK, -1, 1, k_deepseek, 1, 1},
    {"deepseek_v3", "DeepseekV3ForCausalLM", "deepseek2", 0, N_LLAMA, 0, 0, ARCH_ACT_SILU, 0, 0, 0, ARCH_WIN_NONE, 0,
     0, MOE_DEEPSEEK, -1, 1, k_deepseek, 1, 1},
};
#define N_ARCH (sizeof k_arch / sizeof *k_arch)

const arch_info *arch_by_hf(const char *model_type) {
    for (size_t i = 0; i < N_ARCH; i++)
        if (!strcmp(k_arch[i].hf_type, model_type)) return &k_arch[i];
    return NULL;
}

const arch_info *arch_by_gguf(const char *gguf_arch, int experts) {
    const arch_info *any = NULL;
    for (size_t i = 0; i < N_ARCH; i++) {
        if (!k_arch[i].gguf_arch || strcmp(k_arch[i].gguf_arch, gguf_arch)) continue;
        if (k_arch[i].gguf_experts == (experts > 0)) return &k_arch[i];
        if (!k_arch[i].gguf_experts && !any) any = &k_arch[i]; /* the family itself has the experts (qwen2moe) */
    }
    return any && (experts > 0) == (any->moe != MOE_NONE) ? any : NULL;
}

static const char *list(int gguf) {
    static char buf[2][512];
    char *b = buf[gguf];
    if (b[0]) return b;
    size_t o = 0;
    for (size_t i = 0; i < N_ARCH; i++) {
        const char *n = gguf ? k_arch[i].gguf_arch : k_arch[i].hf_type;
        if (!n || (gguf && k_arch[i].gguf_experts)) continue;
        int dup = 0; /* (two HF rows of one GGUF architecture: DeepSeek V2 / V3) */
        for (size_t j = 0; j < i && gguf; j++) dup |= k_arch[j].gguf_arch && !strcmp(k_arch[j].gguf_arch, n);
        if (dup) continue;
        o += (size_t)snprintf(b + o, sizeof buf[0] - o, "%s%s", o ? ", " : "", n);
    }
    return b;
}
/* (the first call fills a static buffer with constant text: racing callers write the same bytes) */
const char *arch_hf_list(void) { return list(0); }
const char *arch_gguf_list(void) { return list(1); }

/* ------------------------------------------------------------ tensor names */

/* s = prefix + N + "." + rest; N decimal without leading zeros, < 10^6. */
static int split_layer(const char *s, const char *prefix, long *layer, const char **rest) {
    size_t pl = strlen(prefix);
    if (strncmp(s, prefix, pl) != 0) return 0;
    s += pl;
    long v = 0;
    int digits = 0;
    while (*s >= '0' && *s <= '9' && digits < 7) v = v * 10 + (*s++ - '0'), digits++;
    if (digits == 0 || digits > 6 || *s != '.' || (digits > 1 && s[-digits] == '0')) return 0;
    *layer = v;
    *rest = s + 1;
    return 1;
}

/* rest = base + "." + ("weight" | "bias") */
static int split_suffix(const char *rest, size_t *blen, const char **sfx) {
    const char *dot = strrchr(rest, '.');
    if (!dot || (strcmp(dot + 1, "weight") != 0 && strcmp(dot + 1, "bias") != 0)) return 0;
    *blen = (size_t)(dot - rest);
    *sfx = dot + 1;
    return 1;
}

/* an HF name ending in "_bias" is the whole tensor name (arch.h) */
static int whole_name(const char *hf) {
    size_t n = strlen(hf);
    return n > 5 && !strcmp(hf + n - 5, "_bias");
}

int arch_name_to_hf(const arch_info *a, const char *g, int e, char *out, unsigned long cap) {
    long layer;
    const char *rest, *sfx;
    size_t blen;
    if (!split_layer(g, "blk.", &layer, &rest) || !split_suffix(rest, &blen, &sfx)) return 0;
    for (const arch_name *n = a->names; n->gguf; n++) {
        if (strlen(n->gguf) != blen || strncmp(rest, n->gguf, blen) != 0) continue;
        char base[160];
        int per_expert = strstr(n->hf, "%d") != NULL;
        if (per_expert) snprintf(base, sizeof base, n->hf, e);
        else snprintf(base, sizeof base, "%s", n->hf);
        int whole = whole_name(n->hf);
        if (whole && strcmp(sfx, "bias") != 0) return 0;
        int k = whole ? snprintf(out, cap, "model.layers.%ld.%s", layer, base)
                      : snprintf(out, cap, "model.layers.%ld.%s.%s", layer, base, sfx);
        return k > 0 && (unsigned long)k < cap ? 1 + per_expert : 0;
    }
    return 0;
}

/* hf matches pattern pat (which may hold one %d) over its first len bytes; *e gets the number */
static int match_hf(const char *pat, const char *hf, size_t len, int *e) {
    const char *d = strstr(pat, "%d");
    if (!d) return strlen(pat) == len && strncmp(pat, hf, len) == 0;
    size_t pre = (size_t)(d - pat), post = strlen(d + 2);
    if (len < pre + 1 + post || strncmp(hf, pat, pre) != 0 || strncmp(hf + len - post, d + 2, post) != 0) return 0;
    long v = 0;
    size_t i = pre;
    for (; i < len - post; i++) {
        if (hf[i] < '0' || hf[i] > '9' || v > 100000) return 0;
        v = v * 10 + (hf[i] - '0');
    }
    if (len - post - pre > 1 && hf[pre] == '0') return 0;
    *e = (int)v;
    return 1;
}

int arch_name_from_hf(const arch_info *a, const char *hf, char *out, unsigned long cap, int *expert) {
    long layer;
    const char *rest, *sfx;
    size_t blen;
    *expert = -1;
    if (!split_layer(hf, "model.layers.", &layer, &rest)) return 0;
    for (const arch_name *n = a->names; n->gguf; n++)
        if (whole_name(n->hf) && !strcmp(rest, n->hf)) {
            int k = snprintf(out, cap, "blk.%ld.%s.bias", layer, n->gguf);
            return k > 0 && (unsigned long)k < cap;
        }
    if (!split_suffix(rest, &blen, &sfx)) return 0;
    for (const arch_name *n = a->names; n->gguf; n++) {
        int e = -1;
        if (!match_hf(n->hf, rest, blen, &e)) continue;
        int k = snprintf(out, cap, "blk.%ld.%s.%s", layer, n->gguf, sfx);
        *expert = e;
        return k > 0 && (unsigned long)k < cap;
    }
    return 0;
}

int arch_rope_dims(int head_dim, double factor) {
    if (!(factor > 0 && factor <= 1) || head_dim < 2) return 0;
    double r = (double)head_dim * factor + 1e-9;
    int rot = (int)r;
    return rot >= 2 && rot <= head_dim && rot % 2 == 0 ? rot : 0;
}

double arch_yarn_mscale(double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * log(s) + 1.0; }
