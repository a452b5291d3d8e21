/*
 * synth.c - random-weight models of real shapes (xllm_synth), so that
 * benchmarks need no download and other engines can run identical weights.
 *
 * Every weight comes from one master generator: row r of HF tensor NAME is a
 * stream of a counter-based RNG seeded from (seed, NAME, r), so any row can
 * be made on any thread in any order and the values never depend on the
 * thread count or on which outputs are written. Matrices are Irwin-Hall(4)
 * ("normal-ish", within +-3.5 sd) with sd 1/sqrt(fan_in) (fan_in = columns,
 * the embedding included, so tied logits are ~N(0, 1)); norm weights are 1.
 *
 * Outputs, all streamed tensor by tensor (peak memory ~ the largest tensor
 * in its stored type, not the model):
 *   .xllm  the master rows in the precision policy of dtype (as xllm_convert:
 *          embeddings and lm_head q8 when matmuls are quantized), q/k/v and
 *          gate/up fused, tokenizer blobs, metadata;
 *   HF dir config.json, generation_config.json, tokenizer files and one f32
 *          model.safetensors holding exactly the .xllm's values (quantized
 *          rows dequantized), so an f32 engine runs the same weights;
 *   GGUF   the master rows in the policy of gguf_type, written by gguf_write
 *          (llama Q/K rows permuted for llama.cpp). When gguf_type is dtype's
 *          GGUF twin, the .xllm's own tensors are written (the same bytes);
 *          otherwise a scratch .xllm of that type is made next to the GGUF
 *          and removed.
 *
 * The tokenizer is synthesized too: SentencePiece-style BPE with byte
 * fallback (<unk> <s> </s>, 256 byte pieces, "▁" and printable ASCII, then
 * merged pieces of two and three characters until the vocabulary is full),
 * so text prompts work at any vocabulary size. It is not a real language's
 * tokenizer; benchmarks use token ids.
 */
#include "xllm.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"
#include "base/file.h"
#include "base/tmpfile.h"
#include "base/threadpool.h"
#include "convert/policy.h"
#include "format/gguf.h"
#include "format/xllm_file.h"
#include "quant/kquant.h"
#include "quant/quant.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ shapes */

typedef struct shape_def {
    const char *name, *model_type;
    int hidden, inter, layers, heads, kv_heads, head_dim; /* head_dim 0: hidden / heads */
    int vocab, ctx, tied, qk_norm, llama3_rope;
    double theta, eps;
    int experts, experts_used, moe_inter; /* qwen3_moe: every layer a mixture of experts */
} shape_def;

static const shape_def k_shapes[] = {
    {"tinyllama-1.1b", "llama", 2048, 5632, 22, 32, 4, 0, 32000, 2048, 0, 0, 0, 10000.0, 1e-5, 0, 0, 0},
    {"llama3.2-1b", "llama", 2048, 8192, 16, 32, 8, 64, 128256, 131072, 1, 0, 1, 500000.0, 1e-5, 0, 0, 0},
    {"qwen3-0.6b", "qwen3", 1024, 3072, 28, 16, 8, 128, 151936, 40960, 1, 1, 0, 1000000.0, 1e-6, 0, 0, 0},
    {"small-120m", "llama", 768, 2304, 12, 12, 12, 0, 32000, 2048, 1, 0, 0, 10000.0, 1e-5, 0, 0, 0},
    /* for tests: seconds to make, every code path of the big ones */
    {"tiny-test", "llama", 64, 128, 2, 4, 2, 0, 512, 256, 0, 0, 0, 10000.0, 1e-5, 0, 0, 0},
    {"tiny-test-qwen3", "qwen3", 64, 128, 2, 4, 2, 32, 512, 256, 1, 1, 0, 1000000.0, 1e-6, 0, 0, 0},
    {"tiny-test-llama3", "llama", 64, 128, 2, 4, 2, 0, 512, 256, 1, 0, 1, 500000.0, 1e-5, 0, 0, 0},
    /* TinyLlama-sized families for the speed comparison of issue 26: Gemma 2 (soft-caps, GeGLU,
     * pre + post norms, a 4096 window on even layers) and a Qwen3-MoE shape (8 experts, 2 active) */
    {"gemma2-1.1b", "gemma2", 2048, 5632, 22, 32, 4, 64, 32000, 8192, 1, 0, 0, 10000.0, 1e-6, 0, 0, 0},
    {"qwen3moe-8x2-1.7b", "qwen3_moe", 2048, 1408, 22, 32, 4, 64, 32000, 40960, 1, 1, 0, 1000000.0, 1e-6, 8, 2, 1408},
    {"tiny-test-gemma2", "gemma2", 64, 128, 2, 4, 2, 16, 512, 256, 1, 0, 0, 10000.0, 1e-6, 0, 0, 0},
    {"tiny-test-qwen3moe", "qwen3_moe", 64, 32, 2, 4, 2, 16, 512, 256, 1, 1, 0, 1000000.0, 1e-6, 8, 2, 32},
};
#define N_SHAPES (sizeof k_shapes / sizeof *k_shapes)

const char *xllm_synth_shapes(void) {
    return "tinyllama-1.1b, llama3.2-1b, qwen3-0.6b, small-120m, gemma2-1.1b, qwen3moe-8x2-1.7b, tiny-test, "
           "tiny-test-qwen3, tiny-test-llama3, tiny-test-gemma2, tiny-test-qwen3moe";
}

xllm_synth_options xllm_synth_options_default(void) {
    xllm_synth_options o;
    memset(&o, 0, sizeof o);
    o.seed = 1;
    return o;
}

static cJSON *make_config(const shape_def *s) {
    cJSON *c = cJSON_CreateObject();
    int is_qwen = !strncmp(s->model_type, "qwen3", 5), is_gemma = !strcmp(s->model_type, "gemma2");
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(s->experts ? "Qwen3MoeForCausalLM"
                                                  : is_gemma ? "Gemma2ForCausalLM"
                                                  : is_qwen  ? "Qwen3ForCausalLM"
                                                             : "LlamaForCausalLM"));
    char name[96];
    snprintf(name, sizeof name, "xllm-synth-%s", s->name);
    cJSON_AddStringToObject(c, "_name_or_path", name);
    cJSON_AddStringToObject(c, "model_type", s->model_type);
    cJSON_AddNumberToObject(c, "hidden_size", s->hidden);
    cJSON_AddNumberToObject(c, "intermediate_size", s->inter);
    cJSON_AddNumberToObject(c, "num_hidden_layers", s->layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", s->heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", s->kv_heads);
    if (s->head_dim) cJSON_AddNumberToObject(c, "head_dim", s->head_dim);
    cJSON_AddNumberToObject(c, "vocab_size", s->vocab);
    cJSON_AddNumberToObject(c, "max_position_embeddings", s->ctx);
    cJSON_AddNumberToObject(c, "rms_norm_eps", s->eps);
    cJSON_AddNumberToObject(c, "rope_theta", s->theta);
    if (s->llama3_rope) {
        cJSON *rs = cJSON_AddObjectToObject(c, "rope_scaling");
        cJSON_AddStringToObject(rs, "rope_type", "llama3");
        cJSON_AddNumberToObject(rs, "factor", 32.0);
        cJSON_AddNumberToObject(rs, "low_freq_factor", 1.0);
        cJSON_AddNumberToObject(rs, "high_freq_factor", 4.0);
        cJSON_AddNumberToObject(rs, "original_max_position_embeddings", 8192);
    } else {
        cJSON_AddNullToObject(c, "rope_scaling");
    }
    cJSON_AddBoolToObject(c, "tie_word_embeddings", s->tied);
    cJSON_AddStringToObject(c, "hidden_act", is_gemma ? "gelu_pytorch_tanh" : "silu");
    cJSON_AddBoolToObject(c, "attention_bias", 0);
    if (is_gemma) { /* Gemma 2's own keys, at Gemma-2-2B's values (window: half the context) */
        cJSON_AddStringToObject(c, "hidden_activation", "gelu_pytorch_tanh");
        cJSON_AddNumberToObject(c, "query_pre_attn_scalar", s->head_dim);
        cJSON_AddNumberToObject(c, "sliding_window", s->ctx / 2);
        cJSON_AddNumberToObject(c, "attn_logit_softcapping", 50.0);
        cJSON_AddNumberToObject(c, "final_logit_softcapping", 30.0);
    }
    if (s->experts) {
        cJSON_AddNumberToObject(c, "num_experts", s->experts);
        cJSON_AddNumberToObject(c, "num_experts_per_tok", s->experts_used);
        cJSON_AddNumberToObject(c, "moe_intermediate_size", s->moe_inter);
        cJSON_AddBoolToObject(c, "norm_topk_prob", 1);
        cJSON_AddNumberToObject(c, "decoder_sparse_step", 1);
        cJSON_AddItemToObject(c, "mlp_only_layers", cJSON_CreateArray());
    }
    if (is_qwen) {
        cJSON_AddBoolToObject(c, "use_sliding_window", 0);
        cJSON_AddNullToObject(c, "sliding_window");
        cJSON_AddNumberToObject(c, "max_window_layers", s->layers);
    } else {
        cJSON_AddBoolToObject(c, "mlp_bias", 0);
    }
    cJSON_AddNumberToObject(c, "bos_token_id", 1);
    cJSON_AddNumberToObject(c, "eos_token_id", 2);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    return c;
}

/* --------------------------------------------------------------- tokenizer */

/* Text is built in base/buf.h buffers; their sticky error is checked once. */

/* A JSON string of a piece (ASCII plus U+2581, so only " and \ need escapes). */
static void sb_json(buf_t *b, const char *s) {
    buf_append(b, "\"", 1);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') buf_append(b, "\\", 1);
        buf_append(b, s, 1);
    }
    buf_append(b, "\"", 1);
}

#define SP "\xe2\x96\x81" /* U+2581, SentencePiece's space */

/* tokenizer.json (and tokenizer_config.json) with exactly `vocab` ids. */
static xllm_status make_tokenizer(const shape_def *s, char **tok_json, char **tok_cfg, xllm_error *err) {
    /* alphabet: "▁", lowercase, uppercase, digits, the rest of printable ASCII */
    char alpha[95][4];
    int na = 0;
    snprintf(alpha[na++], 4, "%s", SP);
    for (int c = 'a'; c <= 'z'; c++) alpha[na][0] = (char)c, alpha[na++][1] = 0;
    for (int c = 'A'; c <= 'Z'; c++) alpha[na][0] = (char)c, alpha[na++][1] = 0;
    for (int c = '0'; c <= '9'; c++) alpha[na][0] = (char)c, alpha[na++][1] = 0;
    for (int c = 0x21; c <= 0x7e; c++)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) alpha[na][0] = (char)c, alpha[na++][1] = 0;
    int base = 3 + 256 + na;
    if (s->vocab < base)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "synth: vocabulary %d is smaller than the %d base pieces",
                           s->vocab, base);
    buf_t vb = {0}, mb = {0}, b = {0};
    char piece[16];
    int id = 0;
#define VOCAB(str)                                \
    do {                                          \
        if (id) buf_append(&vb, ",", 1);     \
        sb_json(&vb, str);                        \
        buf_printf(&vb, ":%d", id++);        \
    } while (0)
    VOCAB("<unk>");
    VOCAB("<s>");
    VOCAB("</s>");
    for (int i = 0; i < 256; i++) {
        snprintf(piece, sizeof piece, "<0x%02X>", i);
        VOCAB(piece);
    }
    for (int i = 0; i < na; i++) VOCAB(alpha[i]);
    /* pairs (i, j), "▁" only first, in order of max(i, j): common letters first */
    int n_merges = 0;
    for (int m = 0; m < na && id < s->vocab; m++)
        for (int i = 0; i <= m && id < s->vocab; i++)
            for (int j = 1; j <= m && id < s->vocab; j++) {
                if (i != m && j != m) continue;
                snprintf(piece, sizeof piece, "%s%s", alpha[i], alpha[j]);
                VOCAB(piece);
                if (n_merges++) buf_append(&mb, ",", 1);
                snprintf(piece, sizeof piece, "%s %s", alpha[i], alpha[j]);
                sb_json(&mb, piece);
            }
    /* triples: each pair (in its order) extended by one more character */
    for (int m = 0; m < na && id < s->vocab; m++)
        for (int i = 0; i <= m && id < s->vocab; i++)
            for (int j = 1; j <= m && id < s->vocab; j++) {
                if (i != m && j != m) continue;
                for (int k = 1; k < na && id < s->vocab; k++) {
                    snprintf(piece, sizeof piece, "%s%s%s", alpha[i], alpha[j], alpha[k]);
                    VOCAB(piece);
                    buf_append(&mb, ",", 1);
                    n_merges++;
                    snprintf(piece, sizeof piece, "%s%s %s", alpha[i], alpha[j], alpha[k]);
                    sb_json(&mb, piece);
                }
            }
#undef VOCAB
    if (id != s->vocab) { /* cannot happen below 839k */
        xllm_free(vb.p);
        xllm_free(mb.p);
        return err_setf(err, XLLM_ERR_INTERNAL, "synth: tokenizer stops at %d pieces", id);
    }
    buf_puts(&b, "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[");
    const char *sp[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) {
        buf_printf(&b, "%s{\"id\":%d,\"content\":", i ? "," : "", i);
        sb_json(&b, sp[i]);
        buf_puts(&b, ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}");
    }
    buf_puts(&b, "],\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"" SP
               "\"},{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"" SP "\"}]},"
               "\"pre_tokenizer\":null,"
               "\"post_processor\":{\"type\":\"TemplateProcessing\","
               "\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],"
               "\"pair\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},"
               "{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":1}},{\"Sequence\":{\"id\":\"B\",\"type_id\":1}}],"
               "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}},"
               "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"" SP
               "\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
               "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},"
               "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":\"<unk>\",\"continuing_subword_prefix\":null,"
               "\"end_of_word_suffix\":null,\"fuse_unk\":true,\"byte_fallback\":true,\"vocab\":{");
    if (vb.p) buf_append(&b, vb.p, vb.len);
    buf_puts(&b, "},\"merges\":[");
    if (mb.p) buf_append(&b, mb.p, mb.len);
    buf_puts(&b, "]}}\n");
    int oom = vb.err || mb.err || b.err;
    xllm_free(vb.p);
    xllm_free(mb.p);
    buf_t cb = {0};
    buf_puts(&cb, "{\"add_bos_token\":true,\"add_eos_token\":false,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\","
                "\"unk_token\":\"<unk>\",\"pad_token\":null,\"clean_up_tokenization_spaces\":false,\"legacy\":false,"
                "\"tokenizer_class\":\"LlamaTokenizer\",\"model_max_length\":");
    buf_printf(&cb, "%d}\n", s->ctx);
    if (oom || cb.err) {
        xllm_free(b.p);
        xllm_free(cb.p);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "synth: out of memory making the tokenizer");
    }
    *tok_json = b.p;
    *tok_cfg = cb.p;
    return XLLM_OK;
}

/* ----------------------------------------------------------------- weights */

/* One stored tensor: the rows of up to three HF tensors (fused q/k/v, gate/up). */
typedef struct part {
    char name[96];
    int64_t rows;
    uint64_t key;  /* hash of the name and the seed */
    float sd;      /* 0: all ones (norms) */
} part;

typedef struct unit {
    char name[96];
    int ndim, nparts;
    int64_t rows, cols;
    part p[3];
    tensor_class cls;
} unit;

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t name_key(const char *s, uint64_t seed) {
    uint64_t h = 0xcbf29ce484222325ULL ^ mix64(seed + 0x9e3779b97f4a7c15ULL);
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return mix64(h);
}

/* Row r of a part: Irwin-Hall(4) of 16-bit uniforms, mean 0, sd `sd`. */
static void gen_row(const part *p, int64_t r, int64_t cols, float *out) {
    if (p->sd == 0) {
        for (int64_t i = 0; i < cols; i++) out[i] = 1.0f;
        return;
    }
    /* sd of a sum of four uniform 16-bit integers: 65536 * sqrt(4 / 12) (within 1e-9) */
    const float scale = p->sd / 37837.23f;
    uint64_t state = mix64(p->key ^ ((uint64_t)r * 0xd1b54a32d192ed03ULL));
    for (int64_t i = 0; i < cols; i++) {
        state += 0x9e3779b97f4a7c15ULL;
        uint64_t z = mix64(state);
        int32_t sum = (int32_t)(z & 0xffff) + (int32_t)((z >> 16) & 0xffff) + (int32_t)((z >> 32) & 0xffff) +
                      (int32_t)(z >> 48) - 131070;
        out[i] = (float)sum * scale;
    }
}

static void unit_add(unit *u, const char *name, int64_t rows, float sd, uint64_t seed) {
    part *p = &u->p[u->nparts++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->rows = rows;
    p->sd = sd;
    p->key = name_key(name, seed);
    u->rows += rows;
}

/* The stored tensors in file order (convert's layout: per layer fused q/k/v and gate/up). */
static unit *make_units(const shape_def *s, uint64_t seed, size_t *n_out) {
    size_t cap = 4 + (size_t)s->layers * (12 + 3 * (size_t)s->experts), n = 0;
    int gemma = !strcmp(s->model_type, "gemma2");
    unit *u = mem_calloc(cap, sizeof *u);
    if (!u) return NULL;
    int64_t H = s->hidden, hd = s->head_dim ? s->head_dim : s->hidden / s->heads;
    int64_t q_rows = s->heads * hd, kv_rows = s->kv_heads * hd;
    float sd_h = (float)(1.0 / sqrt((double)H)), sd_o = (float)(1.0 / sqrt((double)q_rows)),
          sd_i = (float)(1.0 / sqrt((double)s->inter));
    char nm[96], pre[48];
#define UNIT(uname, ndim_, cols_) \
    (snprintf(u[n].name, sizeof u[n].name, "%s", uname), u[n].ndim = (ndim_), u[n].cols = (cols_), &u[n++])
    unit_add(UNIT("model.embed_tokens.weight", 2, H), "model.embed_tokens.weight", s->vocab, sd_h, seed);
    for (int l = 0; l < s->layers; l++) {
        snprintf(pre, sizeof pre, "model.layers.%d.", l);
#define N(suffix) (snprintf(nm, sizeof nm, "%s%s", pre, suffix), nm)
        unit_add(UNIT(N("input_layernorm.weight"), 1, H), nm, 1, 0, seed);
        unit *qkv = UNIT(N("self_attn.qkv_proj.weight"), 2, H);
        unit_add(qkv, N("self_attn.q_proj.weight"), q_rows, sd_h, seed);
        unit_add(qkv, N("self_attn.k_proj.weight"), kv_rows, sd_h, seed);
        unit_add(qkv, N("self_attn.v_proj.weight"), kv_rows, sd_h, seed);
        if (s->qk_norm) {
            unit_add(UNIT(N("self_attn.q_norm.weight"), 1, hd), nm, 1, 0, seed);
            unit_add(UNIT(N("self_attn.k_norm.weight"), 1, hd), nm, 1, 0, seed);
        }
        unit_add(UNIT(N("self_attn.o_proj.weight"), 2, q_rows), nm, H, sd_o, seed);
        unit_add(UNIT(N("post_attention_layernorm.weight"), 1, H), nm, 1, 0, seed);
        if (gemma) /* Gemma's four norms (HF stores w - 1: these ones are a scale of 2, in every format) */
            unit_add(UNIT(N("pre_feedforward_layernorm.weight"), 1, H), nm, 1, 0, seed);
        if (s->experts) { /* the router, then each expert's gate / up / down (unfused, as convert keeps them) */
            unit_add(UNIT(N("mlp.gate.weight"), 2, H), nm, s->experts, sd_h, seed);
            float sd_m = (float)(1.0 / sqrt((double)s->moe_inter));
            for (int e = 0; e < s->experts; e++) {
                char en[64];
                snprintf(en, sizeof en, "mlp.experts.%d.gate_proj.weight", e);
                unit_add(UNIT(N(en), 2, H), nm, s->moe_inter, sd_h, seed);
                snprintf(en, sizeof en, "mlp.experts.%d.up_proj.weight", e);
                unit_add(UNIT(N(en), 2, H), nm, s->moe_inter, sd_h, seed);
                snprintf(en, sizeof en, "mlp.experts.%d.down_proj.weight", e);
                unit_add(UNIT(N(en), 2, s->moe_inter), nm, H, sd_m, seed);
            }
        } else {
            unit *gu = UNIT(N("mlp.gate_up_proj.weight"), 2, H);
            unit_add(gu, N("mlp.gate_proj.weight"), s->inter, sd_h, seed);
            unit_add(gu, N("mlp.up_proj.weight"), s->inter, sd_h, seed);
            unit_add(UNIT(N("mlp.down_proj.weight"), 2, s->inter), nm, H, sd_i, seed);
        }
        if (gemma) unit_add(UNIT(N("post_feedforward_layernorm.weight"), 1, H), nm, 1, 0, seed);
#undef N
    }
    unit_add(UNIT("model.norm.weight", 1, H), "model.norm.weight", 1, 0, seed);
    if (!s->tied) unit_add(UNIT("lm_head.weight", 2, H), "lm_head.weight", s->vocab, sd_h, seed);
#undef UNIT
    for (size_t i = 0; i < n; i++) {
        if (u[i].ndim == 1) u[i].rows = 1; /* a vector: one row of `cols` values */
        u[i].cls = tensor_class_of(u[i].nparts == 1 ? u[i].p[0].name : u[i].name, u[i].ndim);
    }
    *n_out = n;
    return u;
}

/* ------------------------------------------------------------------ outputs */

/* One .xllm being written in some policy. */
typedef struct xsink {
    xf_writer *w;
    policy pol;
    qtype t;         /* of the current unit */
    size_t row_bytes;
    unsigned char *buf;
    cJSON *types;
    char path[4096];
} xsink;

typedef struct synth {
    const shape_def *s;
    const xllm_synth_options *o;
    xsink sink[2];  /* [0]: the .xllm (dtype), [1]: the GGUF scratch (gguf type) */
    int n_sink, hf_sink; /* hf: round through sink[0]'s policy (hf_pol) */
    policy hf_pol;
    qtype hf_t;
    size_t hf_row_bytes;
    FILE *hf;
    float *hf_chunk;
    int64_t chunk_r0;
    const unit *u;
    threadpool *tp;
    float **row;    /* per thread: one master row */
    unsigned char **qrow; /* per thread: one quantized row (HF rounding) */
    int64_t max_cols;
    size_t rows_done, rows_total;
    int nt;             /* threads (rows of row / qrow) */
    int64_t chunk_rows; /* rows per pass (HF rows go out in chunks of ~8M values) */
    int scratch_made;   /* sink[n_sink - 1] is the GGUF scratch .xllm */
    char hf_tmp[4200];  /* the HF safetensors' temporary name while it is written */
} synth;

/* fn of the thread pool: rows [b, e) of the current chunk */
static void do_rows(void *ctx, size_t b, size_t e, int ti) {
    synth *S = ctx;
    const unit *u = S->u;
    float *row = S->row[ti];
    int64_t cols = u->cols;
    for (size_t k = b; k < e; k++) {
        int64_t r = S->chunk_r0 + (int64_t)k, rr = r;
        const part *p = &u->p[0];
        for (int i = 0; i < u->nparts && rr >= u->p[i].rows; i++) rr -= u->p[i].rows, p = &u->p[i + 1];
        gen_row(p, rr, cols, row);
        for (int si = 0; si < S->n_sink; si++) {
            xsink *x = &S->sink[si];
            void *dst = x->buf + (size_t)r * x->row_bytes;
            if (dtype_is_kq(x->t.dtype)) kq_quantize_row(x->t.dtype, row, cols, NULL, dst);
            else if (dtype_is_quant(x->t.dtype)) quant_quantize_row(x->t.dtype, x->t.group, row, cols, NULL, dst);
            else if (x->t.dtype == XLLM_DT_F16) for (int64_t i = 0; i < cols; i++) ((uint16_t *)dst)[i] = f32_to_f16(row[i]);
            else if (x->t.dtype == XLLM_DT_BF16) for (int64_t i = 0; i < cols; i++) ((uint16_t *)dst)[i] = f32_to_bf16(row[i]);
            else memcpy(dst, row, sizeof(float) * (size_t)cols);
        }
        if (S->hf) {
            float *h = S->hf_chunk + (size_t)k * (size_t)cols;
            qtype t = S->hf_t;
            if (dtype_is_kq(t.dtype)) {
                kq_quantize_row(t.dtype, row, cols, NULL, S->qrow[ti]);
                quant_dequantize_row(t.dtype, t.group, S->qrow[ti], cols, h);
            } else if (dtype_is_quant(t.dtype)) {
                quant_quantize_row(t.dtype, t.group, row, cols, NULL, S->qrow[ti]);
                quant_dequantize_row(t.dtype, t.group, S->qrow[ti], cols, h);
            } else if (t.dtype == XLLM_DT_F16) {
                for (int64_t i = 0; i < cols; i++) h[i] = f16_to_f32(f32_to_f16(row[i]));
            } else if (t.dtype == XLLM_DT_BF16) {
                for (int64_t i = 0; i < cols; i++) h[i] = bf16_to_f32(f32_to_bf16(row[i]));
            } else {
                memcpy(h, row, sizeof(float) * (size_t)cols);
            }
        }
    }
}

static xllm_status gguf_policy_name(const char *g, const char **dtype, xllm_error *err) {
    if (!strcmp(g, "F32") || !strcmp(g, "f32")) *dtype = "f32";
    else if (!strcmp(g, "F16") || !strcmp(g, "f16")) *dtype = "f16";
    else if (!strcmp(g, "Q8_0") || !strcmp(g, "q8_0")) *dtype = "q8";
    else if (!strcmp(g, "Q4_0") || !strcmp(g, "q4_0")) *dtype = "q4";
    else if (!strcmp(g, "Q4_K") || !strcmp(g, "q4_k")) *dtype = "q4_k";
    else if (!strcmp(g, "Q5_K") || !strcmp(g, "q5_k")) *dtype = "q5_k";
    else if (!strcmp(g, "Q6_K") || !strcmp(g, "q6_k")) *dtype = "q6_k";
    else if (!strcmp(g, "Q2_K") || !strcmp(g, "q2_k")) *dtype = "q2_k";
    else if (!strcmp(g, "Q3_K") || !strcmp(g, "q3_k")) *dtype = "q3_k";
    else if (!strcmp(g, "IQ4_NL") || !strcmp(g, "iq4_nl")) *dtype = "iq4_nl";
    else if (!strcmp(g, "Q3_K_M") || !strcmp(g, "q3_k_m")) *dtype = "q3_k_m";
    else if (!strcmp(g, "Q4_K_M") || !strcmp(g, "q4_k_m")) *dtype = "q4_k_m";
    else if (!strcmp(g, "Q5_K_M") || !strcmp(g, "q5_k_m")) *dtype = "q5_k_m";
    else return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                            "unknown GGUF type \"%s\" (use F32, F16, Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, "
                            "Q3_K_M, Q4_K_M or Q5_K_M)", g);
    return XLLM_OK;
}

static xllm_status write_text(const char *dir, const char *file, const char *text, xllm_error *err) {
    char path[4096];
    path_join(path, sizeof path, dir, file);
    FILE *f = fopen(path, "wb");
    if (!f) return err_setf(err, XLLM_ERR_IO, "%s: %s", path, strerror(errno));
    size_t n = strlen(text);
    int bad = fwrite(text, 1, n, f) != n;
    bad |= fclose(f) != 0;
    return bad ? err_setf(err, XLLM_ERR_IO, "%s: write failed", path) : XLLM_OK;
}

static xllm_status write_json(const char *dir, const char *file, const cJSON *j, xllm_error *err) {
    char *text = cJSON_Print(j);
    if (!text) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    size_t n = strlen(text);
    char *t2 = realloc(text, n + 2);
    if (!t2) {
        free(text);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    t2[n] = '\n';
    t2[n + 1] = 0;
    xllm_status st = write_text(dir, file, t2, err);
    free(t2);
    return st;
}

/* The safetensors header: every HF tensor, f32, in file order. */
static xllm_status hf_open(synth *S, const unit *u, size_t nu, char *tmp, size_t tmp_cap, xllm_error *err) {
    const char *dir = S->o->hf_dir;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return err_setf(err, XLLM_ERR_IO, "%s: %s", dir, strerror(errno));
    if (!file_is_dir(dir)) return err_setf(err, XLLM_ERR_IO, "%s: not a directory", dir);
    buf_t h = {0};
    uint64_t off = 0;
    buf_puts(&h, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t i = 0; i < nu; i++)
        for (int p = 0; p < u[i].nparts; p++) {
            const part *pp = &u[i].p[p];
            uint64_t bytes = (uint64_t)(u[i].ndim == 1 ? 1 : pp->rows) * (uint64_t)u[i].cols * 4;
            buf_puts(&h, ",");
            sb_json(&h, pp->name);
            if (u[i].ndim == 1)
                buf_printf(&h, ":{\"dtype\":\"F32\",\"shape\":[%lld],\"data_offsets\":[%llu,%llu]}",
                                (long long)u[i].cols, (unsigned long long)off, (unsigned long long)(off + bytes));
            else
                buf_printf(&h, ":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],\"data_offsets\":[%llu,%llu]}",
                                (long long)pp->rows, (long long)u[i].cols, (unsigned long long)off,
                                (unsigned long long)(off + bytes));
            off += bytes;
        }
    buf_puts(&h, "}");
    buf_fill(&h, ' ', (8 - h.len % 8) % 8); /* the header's length a multiple of 8 */
    if (h.err) {
        xllm_free(h.p);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    char path[4096];
    path_join(path, sizeof path, dir, "model.safetensors");
    int fd = tmpfile_create(path, tmp, tmp_cap);
    if (fd < 0) {
        xllm_free(h.p);
        return err_setf(err, XLLM_ERR_IO, "%s: cannot create a temporary file: %s", path, strerror(errno));
    }
    S->hf = fdopen(fd, "wb");
    uint64_t hl = h.len;
    int bad = !S->hf || fwrite(&hl, 8, 1, S->hf) != 1 || fwrite(h.p, 1, h.len, S->hf) != h.len;
    xllm_free(h.p);
    if (!S->hf) close(fd);
    return bad ? err_setf(err, XLLM_ERR_IO, "%s: write failed", tmp) : XLLM_OK;
}

static xllm_status sink_meta(synth *S, xsink *x, const cJSON *config, xllm_error *err) {
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "format", "xllm");
    cJSON_AddNumberToObject(meta, "format_version", XF_VERSION);
    cJSON_AddItemToObject(meta, "config", cJSON_Duplicate(config, 1));
    cJSON *gen = cJSON_AddObjectToObject(meta, "generation_config");
    cJSON_AddNumberToObject(gen, "bos_token_id", 1);
    cJSON_AddNumberToObject(gen, "eos_token_id", 2);
    cJSON *pol = cJSON_AddObjectToObject(meta, "policy");
    char tname[32];
    for (int k = 0; k < TC_COUNT; k++)
        cJSON_AddStringToObject(pol, tensor_class_name((tensor_class)k), qtype_name(x->pol.cls[k], tname, sizeof tname));
    cJSON_AddBoolToObject(meta, "fused", 1);
    cJSON_AddItemToObject(meta, "tensor_types", x->types);
    x->types = NULL;
    cJSON *prov = cJSON_AddObjectToObject(meta, "provenance");
    char src[128];
    snprintf(src, sizeof src, "xllm synth --shape %s --seed %llu", S->s->name, (unsigned long long)S->o->seed);
    cJSON_AddStringToObject(prov, "source", src);
    cJSON_AddStringToObject(prov, "source_format", "synthetic (random weights)");
    cJSON_AddStringToObject(prov, "converted_by", "xllm " XLLM_VERSION);
    char when[32];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    cJSON_AddStringToObject(prov, "created", when);
    xllm_status st = xf_writer_finish(x->w, meta, err);
    x->w = NULL;
    cJSON_Delete(meta);
    return st;
}

/* GGUF from a finished .xllm: its tensors (fused ones are split by gguf_write). */
static xllm_status gguf_from_xllm(const char *xpath, const char *dest, const cJSON *config, const char *tok_json,
                                  const char *tok_cfg, xllm_error *err) {
    cJSON *meta = NULL;
    st_archive *a = xf_open(xpath, &meta, err);
    if (!a) return err ? err->code : XLLM_ERR_FORMAT;
    size_t n = 0, total = st_count(a);
    st_tensor *t = mem_malloc_array(total ? total : 1, sizeof *t);
    xllm_status st = XLLM_OK;
    if (!t) st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; !st && i < total; i++) {
        const st_tensor *x = st_at(a, i);
        if (!strncmp(x->name, XF_BLOB_PREFIX, strlen(XF_BLOB_PREFIX))) continue;
        t[n++] = *x;
    }
    if (!st) st = gguf_write(dest, t, n, config, tok_json, tok_cfg, err);
    xllm_free(t);
    st_close(a);
    cJSON_Delete(meta);
    return st;
}

/* Step 1: the options, checked; the shape, the .xllm dtype and the GGUF's. */
static xllm_status check_options(const xllm_synth_options *opts, const shape_def **shape, const char **dtype_out,
                                 const char **gdtype, xllm_error *err) {
    if (!opts || !opts->shape) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "synth needs a shape (%s)", xllm_synth_shapes());
    const shape_def *s = NULL;
    for (size_t i = 0; i < N_SHAPES; i++)
        if (!strcmp(opts->shape, k_shapes[i].name)) s = &k_shapes[i];
    if (!s) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "unknown shape \"%s\" (shapes: %s)", opts->shape, xllm_synth_shapes());
    if (!opts->out && !opts->gguf_out && !opts->hf_dir)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "synth needs an output: an .xllm file, a GGUF file or an HF directory");
    const char *dtype = opts->dtype ? opts->dtype : "f32";
    if (strcmp(dtype, "f32") && strcmp(dtype, "f16") && strcmp(dtype, "bf16") && strcmp(dtype, "q8") && strcmp(dtype, "q4") &&
        strcmp(dtype, "q4m"))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "unknown dtype \"%s\" (use f32, f16, bf16, q8, q4 or q4m)", dtype);
    *gdtype = NULL;
    if (opts->gguf_type && !opts->gguf_out)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "a GGUF type was given without a GGUF output");
    if (opts->gguf_out) {
        if (opts->gguf_type) {
            xllm_status st = gguf_policy_name(opts->gguf_type, gdtype, err);
            if (st) return st;
        } else if (!strcmp(dtype, "bf16") || !strcmp(dtype, "q4m")) {
            return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "give a GGUF type for dtype %s (F32, F16, Q8_0 or Q4_0)", dtype);
        } else {
            *gdtype = dtype;
        }
    }
    *shape = s;
    *dtype_out = dtype;
    return XLLM_OK;
}

/* Step 2: the .xllm writers (the output, and a scratch one in the GGUF's
 * types when they differ) and the HF directory's safetensors. */
static xllm_status open_outputs(synth *S, const unit *u, size_t nu, const char *dtype, const char *gdtype, int scratch,
                                xllm_error *err) {
    const xllm_synth_options *opts = S->o;
    xllm_status st = policy_make(dtype, 32, NULL, &S->hf_pol, err);
    if (st) return st;
    if (opts->out) {
        xsink *x = &S->sink[S->n_sink++];
        snprintf(x->path, sizeof x->path, "%s", opts->out);
        x->pol = S->hf_pol;
    }
    if (scratch) {
        xsink *x = &S->sink[S->n_sink++];
        snprintf(x->path, sizeof x->path, "%s.synth-scratch.xllm", opts->gguf_out);
        if ((st = policy_make(gdtype, 32, NULL, &x->pol, err))) return st;
        S->scratch_made = 1;
        tmpfile_remember(x->path); /* removed at the end, or by xllm_remove_temp_files */
    }
    S->hf_pol.n_layers = S->s->layers; /* K-quant mixes pick v_proj / down_proj by layer (fused q/k/v: one type) */
    for (int i = 0; i < S->n_sink; i++) {
        S->sink[i].pol.n_layers = S->s->layers;
        S->sink[i].types = cJSON_CreateObject();
        if (!(S->sink[i].w = xf_writer_open(S->sink[i].path, err))) return err ? err->code : XLLM_ERR_IO;
    }
    if (opts->hf_dir) return hf_open(S, u, nu, S->hf_tmp, sizeof S->hf_tmp, err);
    return XLLM_OK;
}

/* Step 3: the thread pool and its per-thread rows, and the HF chunk. */
static xllm_status make_workers(synth *S, const unit *u, size_t nu, xllm_error *err) {
    S->tp = threadpool_create(S->o->n_threads);
    S->nt = S->tp ? threadpool_size(S->tp) : 0;
    for (size_t i = 0; i < nu; i++) {
        if (u[i].cols > S->max_cols) S->max_cols = u[i].cols;
        S->rows_total += (size_t)u[i].rows;
    }
    S->row = mem_calloc((size_t)(S->nt ? S->nt : 1), sizeof *S->row);
    S->qrow = mem_calloc((size_t)(S->nt ? S->nt : 1), sizeof *S->qrow);
    if (!S->tp || !S->row || !S->qrow) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < S->nt; i++) {
        S->row[i] = mem_malloc_array((size_t)S->max_cols, sizeof(float));
        S->qrow[i] = mem_malloc(quant_row_bytes(XLLM_DT_F32, 0, S->max_cols)); /* >= any quantized row */
        if (!S->row[i] || !S->qrow[i]) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    S->chunk_rows = S->max_cols > 0 ? ((int64_t)1 << 23) / S->max_cols : 1;
    if (S->chunk_rows < 1) S->chunk_rows = 1;
    if (S->hf && !(S->hf_chunk = mem_malloc_array((size_t)(S->chunk_rows * S->max_cols), sizeof(float))))
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    return XLLM_OK;
}

/* Step 4: one unit's rows, generated in chunks on the pool into every sink
 * (and the HF file), then added to each .xllm. */
static xllm_status write_unit(synth *S, const unit *un, xllm_error *err) {
    const xllm_synth_options *opts = S->o;
    xllm_status st = XLLM_OK;
    char tname[32];
    S->u = un;
    int64_t cols = un->cols, rows = un->rows;
    S->hf_t = policy_pick_named(&S->hf_pol, un->name, un->cls, un->ndim, cols);
    for (int k = 0; k < S->n_sink; k++) {
        xsink *x = &S->sink[k];
        x->t = policy_pick_named(&x->pol, un->name, un->cls, un->ndim, cols);
        x->row_bytes = quant_row_bytes(x->t.dtype, x->t.group, cols);
        x->buf = mem_malloc((size_t)rows * x->row_bytes);
        if (!x->buf) st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory making %s", un->name);
    }
    for (int64_t r0 = 0; r0 < rows && !st; r0 += S->chunk_rows) {
        int64_t nr = rows - r0 < S->chunk_rows ? rows - r0 : S->chunk_rows;
        S->chunk_r0 = r0;
        threadpool_run(S->tp, (size_t)nr, 1, do_rows, S);
        if (S->hf && fwrite(S->hf_chunk, sizeof(float), (size_t)(nr * cols), S->hf) != (size_t)(nr * cols))
            st = err_setf(err, XLLM_ERR_IO, "%s: write failed", S->hf_tmp);
        S->rows_done += (size_t)nr;
        if (opts->progress) opts->progress(opts->progress_user, "synthesizing", 0.99 * (double)S->rows_done / (double)S->rows_total);
    }
    for (int k = 0; k < S->n_sink && !st; k++) {
        xsink *x = &S->sink[k];
        int64_t shape[2] = {un->ndim == 1 ? cols : rows, cols};
        st = xf_writer_add(x->w, un->name, x->t.dtype, x->t.group, un->ndim, shape, x->buf, (size_t)rows * x->row_bytes, err);
        cJSON_AddStringToObject(x->types, un->name, qtype_name(x->t, tname, sizeof tname));
    }
    for (int k = 0; k < S->n_sink; k++) {
        xllm_free(S->sink[k].buf);
        S->sink[k].buf = NULL;
    }
    return st;
}

/* Step 5: each .xllm's tokenizer blobs and metadata; the file is finished. */
static xllm_status finish_sinks(synth *S, const cJSON *config, const char *tok_json, const char *tok_cfg, xllm_error *err) {
    xllm_status st = XLLM_OK;
    for (int k = 0; k < S->n_sink && !st; k++) {
        xsink *x = &S->sink[k];
        int64_t shape[1];
        shape[0] = (int64_t)strlen(tok_json);
        st = xf_writer_add(x->w, XF_BLOB_PREFIX "tokenizer.json", XLLM_DT_U8, 0, 1, shape, tok_json, (size_t)shape[0], err);
        shape[0] = (int64_t)strlen(tok_cfg);
        if (!st)
            st = xf_writer_add(x->w, XF_BLOB_PREFIX "tokenizer_config.json", XLLM_DT_U8, 0, 1, shape, tok_cfg,
                               (size_t)shape[0], err);
        if (!st) st = sink_meta(S, x, config, err);
    }
    return st;
}

/* Step 6: the HF directory: the safetensors renamed into place, the JSON files beside it. */
static xllm_status finish_hf(synth *S, const cJSON *config, const char *tok_json, const char *tok_cfg, xllm_error *err) {
    const char *dir = S->o->hf_dir;
    int bad = fflush(S->hf) != 0 || fsync(fileno(S->hf)) != 0;
    bad |= fclose(S->hf) != 0;
    S->hf = NULL;
    char path[4096];
    path_join(path, sizeof path, dir, "model.safetensors");
    if (bad || rename(S->hf_tmp, path) != 0) return err_setf(err, XLLM_ERR_IO, "%s: write failed", path);
    tmpfile_forget(S->hf_tmp);
    S->hf_tmp[0] = 0;
    cJSON *gen = cJSON_CreateObject();
    cJSON_AddNumberToObject(gen, "bos_token_id", 1);
    cJSON_AddNumberToObject(gen, "eos_token_id", 2);
    xllm_status st = write_json(dir, "config.json", config, err);
    if (!st) st = write_json(dir, "generation_config.json", gen, err);
    cJSON_Delete(gen);
    if (!st) st = write_text(dir, "tokenizer.json", tok_json, err);
    if (!st) st = write_text(dir, "tokenizer_config.json", tok_cfg, err);
    return st;
}

/* Everything a synth run holds, released (unfinished outputs removed). */
static void synth_release(synth *S) {
    for (int k = 0; k < S->n_sink; k++) {
        if (S->sink[k].w) xf_writer_abort(S->sink[k].w);
        xllm_free(S->sink[k].buf);
        cJSON_Delete(S->sink[k].types);
    }
    if (S->scratch_made) {
        unlink(S->sink[S->n_sink - 1].path);
        tmpfile_forget(S->sink[S->n_sink - 1].path);
    }
    if (S->hf) fclose(S->hf);
    if (S->hf_tmp[0]) {
        unlink(S->hf_tmp);
        tmpfile_forget(S->hf_tmp);
    }
    if (S->tp) threadpool_free(S->tp);
    if (S->row)
        for (int i = 0; i < S->nt; i++) xllm_free(S->row[i]);
    if (S->qrow)
        for (int i = 0; i < S->nt; i++) xllm_free(S->qrow[i]);
    xllm_free(S->row);
    xllm_free(S->qrow);
    xllm_free(S->hf_chunk);
}

xllm_status xllm_synth(const xllm_synth_options *opts, xllm_error *err) {
    err_clear(err);
    const shape_def *s = NULL;
    const char *dtype = NULL, *gdtype = NULL;
    xllm_status st = check_options(opts, &s, &dtype, &gdtype, err);
    if (st) return st;
    synth S;
    memset(&S, 0, sizeof S);
    S.s = s;
    S.o = opts;
    size_t nu = 0;
    unit *u = NULL;
    cJSON *config = make_config(s);
    char *tok_json = NULL, *tok_cfg = NULL;
    int scratch = opts->gguf_out && (!opts->out || strcmp(gdtype, dtype) != 0);
    if (!config) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    if ((st = make_tokenizer(s, &tok_json, &tok_cfg, err))) goto done;
    if (!(u = make_units(s, opts->seed, &nu))) {
        st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    if ((st = open_outputs(&S, u, nu, dtype, gdtype, scratch, err))) goto done;
    if ((st = make_workers(&S, u, nu, err))) goto done;
    for (size_t i = 0; i < nu && !st; i++) st = write_unit(&S, &u[i], err);
    if (!st) st = finish_sinks(&S, config, tok_json, tok_cfg, err);
    if (!st && S.hf) st = finish_hf(&S, config, tok_json, tok_cfg, err);
    if (!st && opts->gguf_out)
        st = gguf_from_xllm(scratch ? S.sink[S.n_sink - 1].path : opts->out, opts->gguf_out, config, tok_json, tok_cfg, err);
    if (!st && opts->progress) opts->progress(opts->progress_user, "synthesizing", 1.0);
done:
    synth_release(&S);
    xllm_free(u);
    xllm_free(tok_json);
    xllm_free(tok_cfg);
    cJSON_Delete(config);
    return st;
}
