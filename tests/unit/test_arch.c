/*
 * test_arch.c - the family table (src/format/arch.c) and what model_config.c
 * reads through it: tensor names map GGUF -> HF -> GGUF back to themselves
 * in every family (experts included); each HF model_type parses into the
 * row's behaviour (norm offset, activation, soft-caps, window pattern per
 * layer, local RoPE base, MoE top-k normalization); HF's layer_types
 * overrides the pattern; bad values are errors naming the field. The models
 * themselves are checked against llama.cpp in test_arch_models.c.
 */
#include "test.h"
#include "format/gguf_internal.h"
#include "format/arch.h"
#include "model/model_config.h"

#include <math.h>
#include <string.h>

static const char *k_types[] = {"llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe",
                                "gemma2", "gemma3_text", "phi3", "olmo2", "deepseek_v2", "deepseek_v3"};

static void test_names(void) {
    for (size_t i = 0; i < sizeof k_types / sizeof *k_types; i++) {
        const arch_info *a = arch_by_hf(k_types[i]);
        CHECK_MSG(a != NULL, "%s", k_types[i]);
        if (!a) continue;
        for (const arch_name *n = a->names; n->gguf; n++) {
            char g[128], h[256], back[128];
            size_t hl = strlen(n->hf); /* (a whole-name "_bias" tensor: GGUF .bias) */
            snprintf(g, sizeof g, "blk.7.%s.%s", n->gguf, hl > 5 && !strcmp(n->hf + hl - 5, "_bias") ? "bias" : "weight");
            int kind = arch_name_to_hf(a, g, 5, h, sizeof h);
            CHECK_MSG(kind == (strstr(n->hf, "%d") ? 2 : 1), "%s: %s -> kind %d", k_types[i], g, kind);
            int expert = -2;
            CHECK_MSG(arch_name_from_hf(a, h, back, sizeof back, &expert) && !strcmp(back, g),
                      "%s: %s -> %s -> %s", k_types[i], g, h, back);
            CHECK(expert == (kind == 2 ? 5 : -1));
        }
        char out[256];
        int e;
        CHECK(!arch_name_to_hf(a, "blk.01.attn_q.weight", 0, out, sizeof out)); /* leading zero */
        CHECK(!arch_name_to_hf(a, "blk.1.attn_nothing.weight", 0, out, sizeof out));
        CHECK(!arch_name_from_hf(a, "model.layers.1.mlp.experts.x.gate_proj.weight", out, sizeof out, &e));
    }
    /* the GGUF architecture picks the row; llama with experts is Mixtral */
    CHECK(!strcmp(arch_by_gguf("llama", 0)->hf_type, "llama"));
    CHECK(!strcmp(arch_by_gguf("llama", 1)->hf_type, "mixtral"));
    CHECK(!strcmp(arch_by_gguf("qwen2moe", 1)->hf_type, "qwen2_moe"));
    CHECK(!strcmp(arch_by_gguf("gemma3", 0)->hf_type, "gemma3_text"));
    CHECK(arch_by_gguf("qwen2", 1) == NULL);
    CHECK(!strcmp(arch_by_gguf("deepseek2", 1)->hf_type, "deepseek_v2"));
    CHECK(strstr(arch_gguf_list(), "olmo2") && !strstr(arch_gguf_list(), "mistral"));
    const char *ds = strstr(arch_gguf_list(), "deepseek2"); /* listed once for its two HF rows */
    CHECK(ds && !strstr(ds + 1, "deepseek2"));
    /* DeepSeek-V3's router bias is a whole HF name, no .weight / .bias of its own */
    char out2[256];
    int e2;
    const arch_info *d3 = arch_by_hf("deepseek_v3");
    CHECK(arch_name_to_hf(d3, "blk.3.exp_probs_b.bias", 0, out2, sizeof out2) == 1 &&
          !strcmp(out2, "model.layers.3.mlp.gate.e_score_correction_bias"));
    CHECK(!arch_name_to_hf(d3, "blk.3.exp_probs_b.weight", 0, out2, sizeof out2));
    CHECK(arch_name_from_hf(d3, "model.layers.3.mlp.gate.e_score_correction_bias", out2, sizeof out2, &e2) &&
          !strcmp(out2, "blk.3.exp_probs_b.bias") && e2 == -1);
}

static xllm_status parse(const char *json, model_config *c, xllm_error *err) {
    cJSON *o = cJSON_Parse(json);
    CHECK_MSG(o != NULL, "bad test JSON: %s", json);
    xllm_status st = model_config_parse(o, NULL, "config.json", "gen", c, err);
    cJSON_Delete(o);
    return st;
}

#define BASE "\"hidden_size\": 64, \"num_hidden_layers\": 6, \"num_attention_heads\": 4, \"vocab_size\": 100, " \
             "\"intermediate_size\": 128, \"head_dim\": 32"

static void test_configs(void) {
    model_config c;
    xllm_error err;
    CHECK(parse("{\"model_type\": \"gemma2\", " BASE ", \"sliding_window\": 8, \"attn_logit_softcapping\": 50, "
                "\"final_logit_softcapping\": 30, \"query_pre_attn_scalar\": 256, "
                "\"hidden_activation\": \"gelu_pytorch_tanh\"}", &c, &err) == XLLM_OK);
    CHECK(c.norm_offset == 1.0f && c.embed_scale && c.act == ARCH_ACT_GELU_TANH);
    CHECK(c.attn_softcap == 50.0f && c.final_softcap == 30.0f && c.attn_scale == 1.0f / 16.0f);
    for (int l = 0; l < 6; l++) CHECK_MSG(c.layer_window[l] == (l % 2 ? 0 : 8), "gemma2 layer %d", l);
    CHECK(c.arch->norm[ARCH_NORM_ATTN_OUT] && c.arch->norm[ARCH_NORM_MLP_OUT]);

    CHECK(parse("{\"model_type\": \"gemma3_text\", " BASE ", \"sliding_window\": 8, \"rope_theta\": 1e6, "
                "\"rope_local_base_freq\": 1e4, \"sliding_window_pattern\": 3}", &c, &err) == XLLM_OK);
    for (int l = 0; l < 6; l++) CHECK_MSG(c.layer_window[l] == ((l + 1) % 3 ? 8 : 0), "gemma3 layer %d", l);
    CHECK(c.rope_local_theta == 1e4 && c.qk_norm == 1 && c.attn_softcap == 0);
    /* layer_types overrides the pattern */
    CHECK(parse("{\"model_type\": \"gemma3_text\", " BASE ", \"sliding_window\": 8, \"layer_types\": "
                "[\"full_attention\", \"sliding_attention\", \"full_attention\", \"full_attention\", "
                "\"full_attention\", \"sliding_attention\"]}", &c, &err) == XLLM_OK);
    CHECK(c.layer_window[0] == 0 && c.layer_window[1] == 8 && c.layer_window[4] == 0 && c.layer_window[5] == 8);
    CHECK(parse("{\"model_type\": \"gemma3_text\", " BASE ", \"layer_types\": [\"full_attention\"]}", &c, &err) ==
              XLLM_ERR_FORMAT && strstr(err.message, "layer_types"));
    CHECK(parse("{\"model_type\": \"gemma2\", " BASE ", \"hidden_activation\": \"relu\"}", &c, &err) ==
              XLLM_ERR_UNSUPPORTED && strstr(err.message, "relu"));
    CHECK(parse("{\"model_type\": \"gemma2\", " BASE ", \"attn_logit_softcapping\": -1}", &c, &err) ==
              XLLM_ERR_FORMAT && strstr(err.message, "soft-caps"));
    CHECK(parse("{\"model_type\": \"gemma2\", " BASE ", \"query_pre_attn_scalar\": 1e-300}", &c, &err) ==
              XLLM_ERR_FORMAT && strstr(err.message, "query_pre_attn_scalar"));
    CHECK(parse("{\"model_type\": \"gemma3_text\", " BASE ", \"rope_local_base_freq\": 0}", &c, &err) ==
              XLLM_ERR_FORMAT && strstr(err.message, "rope_local_base_freq"));
    /* OLMo 2: post-norms only, q/k norm over the whole projection; Phi-3 ignores the window */
    CHECK(parse("{\"model_type\": \"olmo2\", " BASE "}", &c, &err) == XLLM_OK);
    CHECK(c.qk_norm == 2 && !c.arch->norm[ARCH_NORM_ATTN_IN] && c.arch->norm[ARCH_NORM_ATTN_OUT]);
    CHECK(parse("{\"model_type\": \"phi3\", " BASE ", \"sliding_window\": 2047}", &c, &err) == XLLM_OK);
    CHECK(c.layer_window[0] == 0 && c.norm_offset == 0);
    /* partial rotary (Phi-4-mini): RoPE over int(head_dim x factor) values; LongRoPE's sets then hold half that */
    CHECK(parse("{\"model_type\": \"phi3\", " BASE ", \"partial_rotary_factor\": 0.75}", &c, &err) == XLLM_OK);
    CHECK(c.head_dim == 32 && c.rope_dim == 24);
    CHECK(parse("{\"model_type\": \"llama\", " BASE ", \"partial_rotary_factor\": 0.5}", &c, &err) == XLLM_OK &&
          c.rope_dim == 16);
    CHECK(parse("{\"model_type\": \"phi3\", " BASE ", \"partial_rotary_factor\": 1}", &c, &err) == XLLM_OK &&
          c.rope_dim == 32);
    CHECK(parse("{\"model_type\": \"phi3\", " BASE ", \"partial_rotary_factor\": 0.1}", &c, &err) ==
              XLLM_ERR_FORMAT && strstr(err.message, "partial_rotary_factor")); /* 3 values: odd */
    CHECK(parse("{\"model_type\": \"phi3\", " BASE ", \"partial_rotary_factor\": 1.5}", &c, &err) ==
              XLLM_ERR_FORMAT && strstr(err.message, "partial_rotary_factor"));
    CHECK(parse("{\"model_type\": \"phi3\", " BASE ", \"partial_rotary_factor\": \"x\"}", &c, &err) ==
              XLLM_ERR_FORMAT);
    CHECK(arch_rope_dims(128, 0.75) == 96 && arch_rope_dims(80, 0.3) == 24 && arch_rope_dims(16, 0.75) == 12 &&
          arch_rope_dims(16, 0) == 0 && arch_rope_dims(16, 0.0625) == 0);
#define F12 "[1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 3]"
    CHECK(parse("{\"model_type\": \"phi3\", " BASE ", \"partial_rotary_factor\": 0.75, \"rope_scaling\": {\"type\": "
                "\"longrope\", \"long_factor\": " F12 ", \"short_factor\": " F12 "}}", &c, &err) == XLLM_OK);
    CHECK(c.rope == ROPE_LONGROPE && c.rope_long[11] == 3);
    CHECK(parse("{\"model_type\": \"deepseek_v2\", \"hidden_size\": 64, \"num_hidden_layers\": 1, "
                "\"num_attention_heads\": 4, \"vocab_size\": 100, \"intermediate_size\": 64, \"kv_lora_rank\": 16, "
                "\"qk_nope_head_dim\": 8, \"qk_rope_head_dim\": 8, \"v_head_dim\": 8, \"n_routed_experts\": 4, "
                "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 16, \"partial_rotary_factor\": 0.5}",
                &c, &err) == XLLM_ERR_UNSUPPORTED && strstr(err.message, "latent"));
    /* Phi-3 LongRoPE: head_dim / 2 (16) factors per set; the attention factor sqrt(1 + ln s / ln orig) */
    CHECK(parse("{\"model_type\": \"phi3\", " BASE ", \"rope_scaling\": {\"type\": \"longrope\", \"long_factor\": [1], "
                "\"short_factor\": [1]}}", &c, &err) == XLLM_ERR_FORMAT && strstr(err.message, "short_factor"));
#define F8 "[1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2]"
    CHECK(parse("{\"model_type\": \"phi3\", " BASE ", \"max_position_embeddings\": 131072, "
                "\"original_max_position_embeddings\": 4096, \"rope_scaling\": {\"type\": \"su\", \"long_factor\": " F8
                ", \"short_factor\": " F8 "}}", &c, &err) == XLLM_OK);
    CHECK(c.rope == ROPE_LONGROPE && c.rope_original_max_pos == 4096 && c.rope_long[4] == 2 &&
          fabs(c.rope_attn_factor - sqrt(1 + log(32.0) / log(4096.0))) < 1e-12);
    CHECK(parse("{\"model_type\": \"phi3\", " BASE ", \"rope_scaling\": {\"rope_type\": \"longrope\", \"long_factor\": " F8
                ", \"short_factor\": " F8 ", \"attention_factor\": 1.5, \"original_max_position_embeddings\": 64}}",
                &c, &err) == XLLM_OK);
    CHECK(c.rope_attn_factor == 1.5 && c.rope_original_max_pos == 64);
    CHECK(parse("{\"model_type\": \"phi3\", " BASE ", \"rope_scaling\": {\"type\": \"longrope\", \"long_factor\": " F8
                ", \"short_factor\": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1]}}", &c, &err) == XLLM_ERR_FORMAT);
#undef F8
    /* MoE top-k normalization: Mixtral always, Qwen from the config */
    CHECK(parse("{\"model_type\": \"mixtral\", " BASE ", \"num_local_experts\": 8, \"num_experts_per_tok\": 2, "
                "\"norm_topk_prob\": false}", &c, &err) == XLLM_OK);
    CHECK(c.norm_topk_prob == 1 && c.n_experts == 8 && c.layer_is_moe[5]);
    CHECK(parse("{\"model_type\": \"qwen3_moe\", " BASE ", \"num_experts\": 8, \"num_experts_per_tok\": 2, "
                "\"moe_intermediate_size\": 32, \"norm_topk_prob\": true}", &c, &err) == XLLM_OK);
    CHECK(c.norm_topk_prob == 1 && c.moe == MOE_QWEN && c.shared_expert_intermediate == 0);
    /* DeepSeek: MLA sizes (the pool's row is half the latent), routing keys */
#define DS "\"kv_lora_rank\": 32, \"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 8, \"v_head_dim\": 16, " \
           "\"n_routed_experts\": 16, \"num_experts_per_tok\": 4, \"moe_intermediate_size\": 32, "
    CHECK(parse("{\"model_type\": \"deepseek_v3\", " BASE ", " DS "\"q_lora_rank\": 24, \"n_shared_experts\": 2, "
                "\"first_k_dense_replace\": 2, \"scoring_func\": \"sigmoid\", \"topk_method\": \"noaux_tc\", "
                "\"n_group\": 4, \"topk_group\": 2, \"routed_scaling_factor\": 2.5, \"norm_topk_prob\": true}",
                &c, &err) == XLLM_OK);
    CHECK(c.mla_dim == 40 && c.head_dim == 20 && c.n_kv_heads == 1 && c.rope_dim == 8 && c.q_lora_rank == 24);
    CHECK(c.rope_interleaved && c.attn_scale == 1.0f / sqrtf(24.0f));
    CHECK(c.moe == MOE_DEEPSEEK && c.moe_sigmoid && c.moe_sel_bias && c.n_group == 4 && c.topk_group == 2 &&
          !c.group_max && c.routed_scale == 2.5f && c.norm_topk_prob && !c.shared_gated);
    CHECK(c.shared_expert_intermediate == 64 && !c.layer_is_moe[1] && c.layer_is_moe[2] && c.layer_is_moe[5]);
    CHECK(parse("{\"model_type\": \"deepseek_v2\", " BASE ", " DS "\"q_lora_rank\": null, "
                "\"topk_method\": \"group_limited_greedy\", \"n_group\": 4, \"topk_group\": 1}", &c, &err) ==
          XLLM_OK);
    CHECK(c.q_lora_rank == 0 && !c.moe_sigmoid && !c.moe_sel_bias && c.group_max && c.routed_scale == 1.0f);
    CHECK(parse("{\"model_type\": \"deepseek_v2\", " BASE ", " DS "\"topk_method\": \"group_limited_greedy\", "
                "\"n_group\": 3}", &c, &err) == XLLM_ERR_FORMAT && strstr(err.message, "n_group"));
    CHECK(parse("{\"model_type\": \"deepseek_v2\", " BASE ", " DS "\"scoring_func\": \"relu\"}", &c, &err) ==
              XLLM_ERR_UNSUPPORTED && strstr(err.message, "scoring_func"));
    CHECK(parse("{\"model_type\": \"deepseek_v2\", " BASE ", \"n_routed_experts\": 4, \"num_experts_per_tok\": 2, "
                "\"moe_intermediate_size\": 8}", &c, &err) == XLLM_ERR_FORMAT && strstr(err.message, "kv_lora_rank"));
    /* YaRN: the attention factor (HF's defaults), DeepSeek's softmax mscale^2 (MLA only), bad values */
    CHECK(parse("{\"model_type\": \"deepseek_v2\", " BASE ", " DS "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 40, "
                "\"original_max_position_embeddings\": 4096, \"mscale\": 0.707, \"mscale_all_dim\": 0.707}}", &c,
                &err) == XLLM_OK);
    CHECK(c.rope == ROPE_YARN && c.rope_factor == 40 && c.rope_original_max_pos == 4096 && c.rope_beta_fast == 32 &&
          c.rope_beta_slow == 1 && c.rope_yarn_truncate == 1 && fabs(c.rope_attn_factor - 1) < 1e-12);
    {
        double m = 1 + 0.1 * 0.707 * log(40.0);
        CHECK_NEAR(c.attn_scale, m * m / sqrt(24.0), 1e-6);
    }
    CHECK(parse("{\"model_type\": \"deepseek_v2\", " BASE ", " DS "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 40, "
                "\"mscale\": 1, \"mscale_all_dim\": 0.5}}", &c, &err) == XLLM_OK);
    CHECK_NEAR(c.rope_attn_factor, (1 + 0.1 * log(40.0)) / (1 + 0.05 * log(40.0)), 1e-12);
    CHECK(c.rope_original_max_pos == 2048); /* max_position_embeddings (its default here) */
#undef DS
    CHECK(parse("{\"model_type\": \"qwen2\", " BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4, "
                "\"original_max_position_embeddings\": 32768, \"mscale_all_dim\": 1, \"beta_fast\": 16, "
                "\"truncate\": false}}", &c, &err) == XLLM_OK);
    CHECK(c.rope == ROPE_YARN && c.rope_beta_fast == 16 && c.rope_yarn_truncate == 0 &&
          fabs(c.rope_attn_factor - (1 + 0.1 * log(4.0))) < 1e-12 && c.rope_yarn_mscale_all == 0 && c.attn_scale == 0);
    CHECK(parse("{\"model_type\": \"qwen2\", " BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4, "
                "\"attention_factor\": 1.25}}", &c, &err) == XLLM_OK);
    CHECK(c.rope_attn_factor == 1.25);
    CHECK(parse("{\"model_type\": \"qwen2\", " BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\"}}", &c, &err) ==
              XLLM_ERR_FORMAT && strstr(err.message, "factor"));
    CHECK(parse("{\"model_type\": \"qwen2\", " BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4, "
                "\"beta_slow\": -1}}", &c, &err) == XLLM_ERR_FORMAT && strstr(err.message, "beta"));
    CHECK(parse("{\"model_type\": \"qwen2\", " BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4, "
                "\"original_max_position_embeddings\": 0}}", &c, &err) == XLLM_ERR_FORMAT);
    CHECK(parse("{\"model_type\": \"qwen2\", " BASE ", \"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 4}}",
                &c, &err) == XLLM_ERR_UNSUPPORTED && strstr(err.message, "yarn"));
    CHECK(parse("{\"model_type\": \"gpt_neox\", " BASE "}", &c, &err) == XLLM_ERR_UNSUPPORTED &&
          strstr(err.message, "gemma3_text"));
}

int main(void) {
    test_names();
    test_configs();
    return test_report("test_arch");
}
