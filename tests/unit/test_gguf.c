/*
 * test_gguf.c - GGUF reader and writer.
 *  - stories260k.gguf (a real llama.cpp file): the config equals the HF
 *    directory's, every tensor equals the HF safetensors tensor (Q/K after
 *    undoing llama.cpp's row permutation), the synthesized tokenizer.json
 *    equals the HF tokenizer.json of the same vocabulary and tokenizes as
 *    llama.cpp and HF do (llamacpp_check.json, tinystories expected.jsonl);
 *  - round trips: HF tensors (f32, and quantized q8 / q4 / q4m at group 32)
 *    -> gguf_write -> gguf_open give the same bytes (Q/K permuted exactly as
 *    llama.cpp's converter did), the same config and the same tokenizer;
 *    the tiny llama (llama3 rope scaling) / qwen2 / qwen3 checkpoints too;
 *  - real tokenizers (llama2 SentencePiece, llama3 and qwen3 byte-level)
 *    through the writer and back, when the shared data is present;
 *  - corrupt, truncated and foreign files: clean errors, never a crash
 *    (truncation at many offsets, random byte flips, hand-made bad headers).
 */
#include "test.h"
#include "base/alloc.h"
#include "base/file.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "model/model_config.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h"
#include "xllm.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SRC XLLM_SOURCE_DIR
#define GGUF_FILE SRC "/tests/data/gguf/stories260k.gguf"
#define LLAMACPP_CHECK SRC "/tests/data/gguf/stories260k.gguf.llamacpp_check.json"
#define HF_DIR SRC "/models/stories260k"
#define TOK512 SRC "/tests/data/tokenizers/tinystories-tok512"
#define SHARED SRC "/../shared/data"

static char g_dir[64];

static const char *tmp_path(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", g_dir, name);
    return p;
}

static int write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static cJSON *load_json(const char *path) {
    cJSON *j = NULL;
    xllm_error e;
    if (json_file_load(path, &j, &e) != XLLM_OK) return NULL;
    return j;
}

static char *read_text(const char *path) {
    char *t = NULL;
    size_t n;
    if (file_read_all(path, &t, &n, NULL) != XLLM_OK) return NULL;
    return t;
}

static int file_exists(const char *p) { return access(p, R_OK) == 0; }

/* tokenizer.json (+ tokenizer_config.json) texts -> a tokenizer, through a fresh directory */
static tokenizer *tok_from_texts(const char *json, const char *cfg, xllm_error *e) {
    static int k;
    char sub[64], path[512];
    snprintf(sub, sizeof sub, "tok%d", k++);
    const char *dir = tmp_path(sub);
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (!json || write_file(path, json, strlen(json))) return NULL;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (cfg && write_file(path, cfg, strlen(cfg))) return NULL;
    return tokenizer_load(dir, e);
}

static int ids_equal(const int32_t *a, size_t na, const cJSON *arr) {
    if (!cJSON_IsArray(arr) || (size_t)cJSON_GetArraySize(arr) != na) return 0;
    size_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) if (!cJSON_IsNumber(x) || (int32_t)x->valuedouble != a[i++]) return 0;
    return 1;
}

/* The string value of "key" in a one-line JSON object with its length
 * (cJSON would stop at an escaped U+0000, which the corpora contain). */
static char *raw_string(const char *line, const char *key, size_t *len) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = strstr(line, pat);
    if (!p) return NULL;
    p += strlen(pat);
    char *out = mem_malloc(strlen(p) + 1);
    size_t n = 0;
    while (*p && *p != '"') {
        if (*p != '\\') {
            out[n++] = *p++;
            continue;
        }
        p++;
        char c = *p++;
        if (c == 'n') out[n++] = '\n';
        else if (c == 't') out[n++] = '\t';
        else if (c == 'r') out[n++] = '\r';
        else if (c == 'b') out[n++] = '\b';
        else if (c == 'f') out[n++] = '\f';
        else if (c != 'u') out[n++] = c;
        else {
            char hex[5] = {p[0], p[1], p[2], p[3], 0};
            unsigned cp = (unsigned)strtoul(hex, NULL, 16);
            p += 4;
            if (cp >= 0xd800 && cp < 0xdc00 && p[0] == '\\' && p[1] == 'u') {
                char lo_hex[5] = {p[2], p[3], p[4], p[5], 0};
                cp = 0x10000 + ((cp - 0xd800) << 10) + ((unsigned)strtoul(lo_hex, NULL, 16) - 0xdc00);
                p += 6;
            }
            if (cp < 0x80) out[n++] = (char)cp;
            else if (cp < 0x800) out[n++] = (char)(0xc0 | cp >> 6), out[n++] = (char)(0x80 | (cp & 63));
            else if (cp < 0x10000)
                out[n++] = (char)(0xe0 | cp >> 12), out[n++] = (char)(0x80 | ((cp >> 6) & 63)),
                out[n++] = (char)(0x80 | (cp & 63));
            else
                out[n++] = (char)(0xf0 | cp >> 18), out[n++] = (char)(0x80 | ((cp >> 12) & 63)),
                out[n++] = (char)(0x80 | ((cp >> 6) & 63)), out[n++] = (char)(0x80 | (cp & 63));
        }
    }
    out[n] = 0;
    *len = n;
    return out;
}

/* Every line of an expected.jsonl: ids with and without special tokens, and
 * the decodes. Returns the number of lines that failed (-1: unreadable). */
static int check_jsonl(const tokenizer *t, const char *jsonl, const char *label) {
    char *data = read_text(jsonl);
    if (!data) return -1;
    int lines = 0, bad = 0;
    for (char *line = data, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        cJSON *j = cJSON_Parse(line);
        if (!j) continue;
        lines++;
        size_t tl;
        char *text = raw_string(line, "text", &tl);
        int ok = text != NULL;
        for (int special = 1; special >= 0 && ok; special--) {
            int32_t *ids = NULL;
            size_t n = 0;
            xllm_error e;
            ok = tokenizer_encode(t, text, tl, special, &ids, &n, &e) == XLLM_OK &&
                 ids_equal(ids, n, cJSON_GetObjectItem(j, special ? "ids" : "ids_no_special"));
            if (ok && special) {
                const char *keys[2] = {"decode", "decode_skip_special"};
                for (int skip = 0; skip < 2 && ok; skip++) {
                    char *dec = NULL;
                    size_t dl = 0, wl = 0;
                    char *want = raw_string(line, keys[skip], &wl);
                    ok = tokenizer_decode(t, ids, n, skip, &dec, &dl, &e) == XLLM_OK && want && dl == wl &&
                         memcmp(dec, want, dl) == 0;
                    xllm_free(dec);
                    xllm_free(want);
                }
            }
            xllm_free(ids);
        }
        if (!ok) {
            bad++;
            if (bad <= 3) fprintf(stderr, "  %s: mismatch on line %d: %.60s\n", label, lines, line);
        }
        xllm_free(text);
        cJSON_Delete(j);
    }
    xllm_free(data);
    fprintf(stderr, "%s: %d/%d lines exact\n", label, lines - bad, lines);
    return lines >= 30 ? bad : -1;
}

/* model_config fields both readings must agree on (rope_interleaved aside). */
static void check_same_config(const cJSON *a, const cJSON *ga, const cJSON *b, const cJSON *gb, const char *what) {
    model_config x, y;
    xllm_error e;
    int ok = model_config_parse(a, ga, "a", "ga", &x, &e) == XLLM_OK;
    CHECK_MSG(ok, "%s: %s", what, e.message);
    ok = ok && model_config_parse(b, gb, "b", "gb", &y, &e) == XLLM_OK;
    CHECK_MSG(ok, "%s: %s", what, e.message);
    if (!ok) return;
    int same = !strcmp(x.model_type, y.model_type) && x.hidden == y.hidden && x.intermediate == y.intermediate &&
               x.n_layers == y.n_layers && x.n_heads == y.n_heads && x.n_kv_heads == y.n_kv_heads &&
               x.head_dim == y.head_dim && x.vocab == y.vocab && x.max_positions == y.max_positions &&
               x.rms_eps == y.rms_eps && x.rope_theta == y.rope_theta && x.rope == y.rope &&
               x.rope_factor == y.rope_factor && x.rope_low_freq_factor == y.rope_low_freq_factor &&
               x.rope_high_freq_factor == y.rope_high_freq_factor &&
               x.rope_original_max_pos == y.rope_original_max_pos && x.qkv_bias == y.qkv_bias &&
               x.o_bias == y.o_bias && x.mlp_bias == y.mlp_bias && x.qk_norm == y.qk_norm &&
               x.tie_embeddings == y.tie_embeddings && x.bos_id == y.bos_id && x.n_eos == y.n_eos &&
               memcmp(x.eos_ids, y.eos_ids, sizeof x.eos_ids) == 0 && x.moe == y.moe;
    for (int l = 0; l < x.n_layers && same; l++) same = x.layer_window[l] == y.layer_window[l];
    CHECK_MSG(same, "%s: model configs differ (hidden %d/%d, heads %d/%d, head_dim %d/%d, eps %g/%g, theta %g/%g, "
              "rope %d/%d, tie %d/%d, bos %d/%d, eos %d/%d)", what, x.hidden, y.hidden, x.n_heads, y.n_heads,
              x.head_dim, y.head_dim, (double)x.rms_eps, (double)y.rms_eps, x.rope_theta, y.rope_theta, x.rope,
              y.rope, x.tie_embeddings, y.tie_embeddings, x.bos_id, y.bos_id, x.n_eos ? x.eos_ids[0] : -1,
              y.n_eos ? y.eos_ids[0] : -1);
}

static int is_qk(const char *hf_name) { return strstr(hf_name, "q_proj.") || strstr(hf_name, "k_proj."); }

/* GGUF Q/K tensor g vs HF tensor h: within each head of d rows, GGUF rows
 * 2i and 2i+1 are HF rows i and i + d/2 (llama.cpp's converter). */
static int qk_rows_match(const st_tensor *g, const st_tensor *h, int n_heads) {
    int64_t rows = h->shape[0];
    size_t rb = h->nbytes / (size_t)rows;
    if (g->nbytes != h->nbytes || rows % n_heads) return 0;
    int64_t d = rows / n_heads;
    for (int64_t hd = 0; hd < n_heads; hd++)
        for (int64_t i = 0; i < d / 2; i++)
            for (int j = 0; j < 2; j++) {
                const char *gr = (const char *)g->data + (size_t)(hd * d + 2 * i + j) * rb;
                const char *hr = (const char *)h->data + (size_t)(hd * d + j * d / 2 + i) * rb;
                if (memcmp(gr, hr, rb)) return 0;
            }
    return 1;
}

static int heads_for(const char *name, const cJSON *cfg) {
    const cJSON *h = cJSON_GetObjectItem(cfg, strstr(name, "k_proj") ? "num_key_value_heads" : "num_attention_heads");
    return cJSON_IsNumber(h) ? (int)h->valuedouble : 1;
}

/* Every HF tensor equals the GGUF one (same dtype/shape; Q/K permuted for llama). */
static void check_tensors_vs_hf(const st_archive *g, const st_archive *hf, const cJSON *cfg, int llama,
                                const char *what) {
    size_t n = st_count(hf), bad = 0, missing = 0;
    for (size_t i = 0; i < n; i++) {
        const st_tensor *h = st_at(hf, i), *t = st_find(g, h->name);
        if (!t) {
            missing++;
            fprintf(stderr, "  %s: %s missing\n", what, h->name);
            continue;
        }
        int ok = t->dtype == h->dtype && t->ndim == h->ndim && t->group == h->group && t->nbytes == h->nbytes;
        for (int d = 0; d < h->ndim && ok; d++) ok = t->shape[d] == h->shape[d];
        if (ok) ok = llama && is_qk(h->name) ? qk_rows_match(t, h, heads_for(h->name, cfg))
                                              : memcmp(t->data, h->data, h->nbytes) == 0;
        if (!ok) {
            bad++;
            fprintf(stderr, "  %s: %s differs\n", what, h->name);
        }
    }
    CHECK_MSG(bad == 0 && missing == 0, "%s: %zu tensors differ, %zu missing", what, bad, missing);
}

/* ------------------------------------------------------------ stories260k.gguf */

static void test_stories(void) {
    gguf_model g;
    xllm_error e;
    CHECK(gguf_is_gguf(GGUF_FILE));
    CHECK(!gguf_is_gguf(HF_DIR "/model.safetensors"));
    CHECK(!gguf_is_gguf(SRC "/no/such/file.gguf"));
    CHECK_MSG(gguf_open(GGUF_FILE, &g, &e) == XLLM_OK, "%s", e.message);
    if (!g.tensors) return;
    cJSON *hf_cfg = load_json(HF_DIR "/config.json"), *hf_gen = load_json(HF_DIR "/generation_config.json");
    CHECK(hf_cfg && hf_gen);

    /* config: the fields the engine reads, as in the HF config.json */
    const char *fields[] = {"hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
                            "num_key_value_heads", "rms_norm_eps", "rope_theta", "max_position_embeddings",
                            "vocab_size", "head_dim", "bos_token_id", "eos_token_id"};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
        const cJSON *a = cJSON_GetObjectItem(g.config, fields[i]), *b = cJSON_GetObjectItem(hf_cfg, fields[i]);
        CHECK_MSG(cJSON_IsNumber(a) && cJSON_IsNumber(b) && a->valuedouble == b->valuedouble, "config %s: %g vs %g",
                  fields[i], a ? a->valuedouble : -1, b ? b->valuedouble : -1);
    }
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(g.config, "model_type")), "llama"));
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(g.config, "tie_word_embeddings")));
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(g.config, "xllm_rope_interleaved")));
    CHECK(g.generation_config && cJSON_GetObjectItem(g.generation_config, "bos_token_id")->valuedouble == 1 &&
          cJSON_GetObjectItem(g.generation_config, "eos_token_id")->valuedouble == 2);
    check_same_config(g.config, g.generation_config, hf_cfg, hf_gen, "stories260k.gguf vs HF config");

    /* tensors */
    st_archive *hf = st_open(HF_DIR, &e);
    CHECK_MSG(hf != NULL, "%s", e.message);
    if (hf) {
        CHECK_MSG(st_count(g.tensors) == st_count(hf), "%zu GGUF tensors, %zu HF", st_count(g.tensors), st_count(hf));
        check_tensors_vs_hf(g.tensors, hf, hf_cfg, 1, "stories260k.gguf");
        const st_tensor *emb = st_find(g.tensors, "model.embed_tokens.weight");
        CHECK(emb && emb->ndim == 2 && emb->shape[0] == 512 && emb->shape[1] == 64 && emb->dtype == XLLM_DT_F32);
        CHECK(!st_find(g.tensors, "lm_head.weight"));
        st_close(hf);
    }

    /* tokenizer: the same tokenizer.json HF's converter made of this vocabulary */
    CHECK(g.tokenizer_json && g.tokenizer_config_json);
    cJSON *synth = cJSON_Parse(g.tokenizer_json), *ref = load_json(HF_DIR "/tokenizer.json");
    CHECK_MSG(synth && ref && cJSON_Compare(synth, ref, 1), "synthesized tokenizer.json differs from the HF one");
    if (synth && ref) {
        const char *parts[] = {"added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder", "model"};
        for (size_t i = 0; i < 6; i++)
            CHECK_MSG(cJSON_Compare(cJSON_GetObjectItem(synth, parts[i]), cJSON_GetObjectItem(ref, parts[i]), 1),
                      "tokenizer.json \"%s\" differs", parts[i]);
    }
    cJSON *scfg = cJSON_Parse(g.tokenizer_config_json), *rcfg = load_json(HF_DIR "/tokenizer_config.json");
    CHECK_MSG(scfg && rcfg && cJSON_Compare(scfg, rcfg, 1), "synthesized tokenizer_config.json differs: %s",
              g.tokenizer_config_json);
    cJSON_Delete(synth);
    cJSON_Delete(ref);
    cJSON_Delete(scfg);
    cJSON_Delete(rcfg);

    tokenizer *t = tok_from_texts(g.tokenizer_json, g.tokenizer_config_json, &e);
    CHECK_MSG(t != NULL, "synthesized tokenizer does not load: %s", e.message);
    if (t) {
        cJSON *lc = load_json(LLAMACPP_CHECK), *ex = load_json(HF_DIR "/expected.json");
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK(tokenizer_encode(t, "Once upon a time", 16, 0, &ids, &n, &e) == XLLM_OK);
        CHECK_MSG(lc && ids_equal(ids, n, cJSON_GetObjectItem(lc, "tokenize_once_upon_a_time")),
                  "\"Once upon a time\" differs from llama.cpp's ids");
        xllm_free(ids);
        CHECK(tokenizer_encode(t, "Once upon a time", 16, 1, &ids, &n, &e) == XLLM_OK);
        CHECK(ex && ids_equal(ids, n, cJSON_GetObjectItem(ex, "prompt_ids")));
        xllm_free(ids);
        CHECK(tokenizer_bos_id(t) == 1 && tokenizer_eos_id(t) == 2);
        /* llama.cpp agreed with HF on the whole corpus, so HF's expected ids are llama.cpp's */
        CHECK(check_jsonl(t, TOK512 "/expected.jsonl", "stories260k.gguf tokenizer vs expected.jsonl") == 0);
        cJSON_Delete(lc);
        cJSON_Delete(ex);
        tokenizer_free(t);
    }
    cJSON_Delete(hf_cfg);
    cJSON_Delete(hf_gen);
    gguf_close(&g);
}

/* ------------------------------------------------------------ round trips */

static void test_roundtrip_f32(void) {
    xllm_error e;
    st_archive *hf = st_open(HF_DIR, &e);
    cJSON *cfg = load_json(HF_DIR "/config.json");
    char *tj = read_text(HF_DIR "/tokenizer.json"), *tc = read_text(HF_DIR "/tokenizer_config.json");
    CHECK(hf && cfg && tj && tc);
    if (!hf || !cfg || !tj || !tc) goto out;
    size_t n = st_count(hf);
    st_tensor *ts = mem_malloc(n * sizeof *ts);
    for (size_t i = 0; i < n; i++) ts[i] = *st_at(hf, i);
    const char *dest = tmp_path("rt.gguf");
    CHECK_MSG(gguf_write(dest, ts, n, cfg, tj, tc, &e) == XLLM_OK, "%s", e.message);
    gguf_model a, b;
    CHECK_MSG(gguf_open(dest, &a, &e) == XLLM_OK, "%s", e.message);
    CHECK_MSG(gguf_open(GGUF_FILE, &b, &e) == XLLM_OK, "%s", e.message);
    if (a.tensors && b.tensors) {
        check_tensors_vs_hf(a.tensors, hf, cfg, 1, "HF -> gguf_write -> gguf_open");
        /* byte for byte what llama.cpp's converter wrote, Q/K permutation included */
        CHECK(st_count(a.tensors) == st_count(b.tensors));
        int same = 1;
        for (size_t i = 0; i < st_count(b.tensors); i++) {
            const st_tensor *x = st_at(b.tensors, i), *y = st_find(a.tensors, x->name);
            if (!y || y->nbytes != x->nbytes || memcmp(x->data, y->data, x->nbytes)) {
                same = 0;
                fprintf(stderr, "  %s differs from stories260k.gguf\n", x->name);
            }
        }
        CHECK_MSG(same, "written tensors differ from llama.cpp's stories260k.gguf");
        CHECK_MSG(cJSON_Compare(a.config, b.config, 1), "round-trip config differs from stories260k.gguf's");
        CHECK(cJSON_Compare(a.generation_config, b.generation_config, 1));
        CHECK_MSG(a.tokenizer_json && b.tokenizer_json && !strcmp(a.tokenizer_json, b.tokenizer_json),
                  "round-trip tokenizer.json differs");
        CHECK(a.tokenizer_config_json && b.tokenizer_config_json &&
              !strcmp(a.tokenizer_config_json, b.tokenizer_config_json));

        /* a GGUF-read archive (interleaved Q/K rows) written again: rows are not permuted twice */
        size_t m = st_count(a.tensors);
        st_tensor *ts2 = mem_malloc(m * sizeof *ts2);
        for (size_t i = 0; i < m; i++) ts2[i] = *st_at(a.tensors, i);
        const char *dest2 = tmp_path("rt2.gguf");
        CHECK_MSG(gguf_write(dest2, ts2, m, a.config, a.tokenizer_json, a.tokenizer_config_json, &e) == XLLM_OK, "%s",
                  e.message);
        gguf_model c;
        CHECK_MSG(gguf_open(dest2, &c, &e) == XLLM_OK, "%s", e.message);
        if (c.tensors) {
            int same2 = st_count(c.tensors) == m;
            for (size_t i = 0; i < m && same2; i++) {
                const st_tensor *x = st_at(a.tensors, i), *y = st_find(c.tensors, x->name);
                same2 = y && y->nbytes == x->nbytes && !memcmp(x->data, y->data, x->nbytes);
            }
            CHECK_MSG(same2, "GGUF -> gguf_write -> GGUF changed tensor bytes");
            CHECK(cJSON_Compare(a.config, c.config, 1));
            CHECK(c.tokenizer_json && !strcmp(a.tokenizer_json, c.tokenizer_json));
        }
        gguf_close(&c);
        unlink(dest2);
        xllm_free(ts2);
    }
    gguf_close(&a);
    gguf_close(&b);
    unlink(dest);
    xllm_free(ts);
out:
    st_close(hf);
    cJSON_Delete(cfg);
    xllm_free(tj);
    xllm_free(tc);
}

/* Matrices whose width is a multiple of 32 quantized; the rest stay f32. */
static void test_roundtrip_quant(dtype_t dt) {
    xllm_error e;
    st_archive *hf = st_open(HF_DIR, &e);
    cJSON *cfg = load_json(HF_DIR "/config.json");
    char *tj = read_text(HF_DIR "/tokenizer.json");
    CHECK(hf && cfg && tj);
    if (!hf || !cfg || !tj) goto out;
    size_t n = st_count(hf), n_quant = 0;
    st_tensor *ts = mem_calloc(n, sizeof *ts);
    void **bufs = mem_calloc(n, sizeof *bufs);
    for (size_t i = 0; i < n; i++) {
        ts[i] = *st_at(hf, i);
        if (ts[i].ndim != 2 || ts[i].shape[1] % 32) continue;
        int64_t rows = ts[i].shape[0], cols = ts[i].shape[1];
        size_t rb = quant_row_bytes(dt, 32, cols);
        bufs[i] = mem_malloc((size_t)rows * rb);
        for (int64_t r = 0; r < rows; r++)
            quant_quantize_row(dt, 32, (const float *)ts[i].data + r * cols, cols, NULL, (char *)bufs[i] + r * rb);
        ts[i].dtype = dt;
        ts[i].group = 32;
        ts[i].data = bufs[i];
        ts[i].nbytes = (size_t)rows * rb;
        n_quant++;
    }
    CHECK(n_quant >= 10);
    const char *dest = tmp_path("q.gguf");
    CHECK_MSG(gguf_write(dest, ts, n, cfg, tj, NULL, &e) == XLLM_OK, "%s: %s", dtype_name(dt), e.message);
    gguf_model g;
    CHECK_MSG(gguf_open(dest, &g, &e) == XLLM_OK, "%s", e.message);
    if (g.tensors) {
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            const st_tensor *t = st_find(g.tensors, ts[i].name), *h = &ts[i];
            int ok = t && t->dtype == h->dtype && t->group == h->group && t->nbytes == h->nbytes &&
                     t->ndim == h->ndim && t->shape[0] == h->shape[0];
            if (ok) ok = is_qk(h->name) ? qk_rows_match(t, h, heads_for(h->name, cfg)) : !memcmp(t->data, h->data, h->nbytes);
            if (!ok) bad++, fprintf(stderr, "  %s: %s differs\n", dtype_name(dt), h->name);
        }
        CHECK_MSG(bad == 0, "%s round trip: %zu tensors differ", dtype_name(dt), bad);
    }
    gguf_close(&g);
    unlink(dest);
    for (size_t i = 0; i < n; i++) xllm_free(bufs[i]);
    xllm_free(bufs);
    xllm_free(ts);
out:
    st_close(hf);
    cJSON_Delete(cfg);
    xllm_free(tj);
}

static void test_writer_errors(void) {
    xllm_error e;
    st_archive *hf = st_open(HF_DIR, &e);
    cJSON *cfg = load_json(HF_DIR "/config.json");
    if (!hf || !cfg) {
        CHECK(0);
        st_close(hf);
        cJSON_Delete(cfg);
        return;
    }
    size_t n = st_count(hf);
    st_tensor *ts = mem_malloc(n * sizeof *ts);
    for (size_t i = 0; i < n; i++) ts[i] = *st_at(hf, i);
    const char *dest = tmp_path("bad_out.gguf");

    /* q4 at group 64 has no GGUF type */
    size_t qi = n;
    for (size_t i = 0; i < n && qi == n; i++)
        if (strstr(ts[i].name, "layers.0.self_attn.o_proj.weight")) qi = i;
    CHECK(qi < n);
    if (qi < n) {
        st_tensor keep = ts[qi];
        int64_t rows = ts[qi].shape[0], cols = ts[qi].shape[1];
        size_t rb = quant_row_bytes(XLLM_DT_Q4, 64, cols);
        void *buf = mem_malloc((size_t)rows * rb);
        for (int64_t r = 0; r < rows; r++)
            quant_quantize_row(XLLM_DT_Q4, 64, (const float *)keep.data + r * cols, cols, NULL, (char *)buf + r * rb);
        ts[qi].dtype = XLLM_DT_Q4;
        ts[qi].group = 64;
        ts[qi].data = buf;
        ts[qi].nbytes = (size_t)rows * rb;
        CHECK(gguf_write(dest, ts, n, cfg, NULL, NULL, &e) == XLLM_ERR_UNSUPPORTED &&
              strstr(e.message, "model.layers.0.self_attn.o_proj.weight") && strstr(e.message, "64"));
        CHECK(access(dest, F_OK) != 0); /* nothing left at the destination */
        ts[qi] = keep;
        xllm_free(buf);
    }
    /* architectures GGUF (here) has no form for */
    cJSON *mis = cJSON_Duplicate(cfg, 1);
    cJSON_ReplaceItemInObject(mis, "model_type", cJSON_CreateString("mistral"));
    CHECK(gguf_write(dest, ts, n, mis, NULL, NULL, &e) == XLLM_ERR_UNSUPPORTED && strstr(e.message, "mistral"));
    cJSON_ReplaceItemInObject(mis, "model_type", cJSON_CreateString("llama"));
    cJSON *rs = cJSON_CreateObject();
    cJSON_AddStringToObject(rs, "rope_type", "yarn");
    cJSON_AddNumberToObject(rs, "factor", 4);
    cJSON_AddFalseToObject(rs, "truncate"); /* YaRN without rounding the ramp: llama.cpp always rounds */
    cJSON_ReplaceItemInObject(mis, "rope_scaling", rs);
    CHECK(gguf_write(dest, ts, n, mis, NULL, NULL, &e) == XLLM_ERR_UNSUPPORTED && strstr(e.message, "truncate"));
    cJSON_Delete(mis);
    /* a tokenizer that is neither SentencePiece-like nor byte-level */
    const char *wp = "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}";
    CHECK(gguf_write(dest, ts, n, cfg, wp, NULL, &e) == XLLM_ERR_UNSUPPORTED);
    CHECK(gguf_write(dest, ts, n, cfg, "{not json", NULL, &e) == XLLM_ERR_FORMAT);
    CHECK(gguf_write(tmp_path("no/such/dir/x.gguf"), ts, n, cfg, NULL, NULL, &e) == XLLM_ERR_IO);
    CHECK(access(dest, F_OK) != 0);
    xllm_free(ts);
    st_close(hf);
    cJSON_Delete(cfg);
}

/* tiny llama (llama3 rope scaling, untied) / qwen2 (biases, tied) / qwen3 (q/k norm, head_dim 32) */
static void test_tiny(const char *arch) {
    char dir[512], p[600];
    snprintf(dir, sizeof dir, SRC "/tests/data/tiny/%s", arch);
    xllm_error e;
    st_archive *hf = st_open(dir, &e);
    snprintf(p, sizeof p, "%s/config.json", dir);
    cJSON *cfg = load_json(p);
    snprintf(p, sizeof p, "%s/generation_config.json", dir);
    cJSON *gen = load_json(p);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    char *tj = read_text(p);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    char *tc = read_text(p);
    CHECK_MSG(hf && cfg && tj, "tiny/%s missing", arch);
    if (hf && cfg && tj) {
        size_t n = st_count(hf);
        st_tensor *ts = mem_malloc(n * sizeof *ts);
        for (size_t i = 0; i < n; i++) ts[i] = *st_at(hf, i);
        char name[64];
        snprintf(name, sizeof name, "tiny_%s.gguf", arch);
        const char *dest = tmp_path(name);
        CHECK_MSG(gguf_write(dest, ts, n, cfg, tj, tc, &e) == XLLM_OK, "tiny/%s: %s", arch, e.message);
        gguf_model g;
        CHECK_MSG(gguf_open(dest, &g, &e) == XLLM_OK, "tiny/%s: %s", arch, e.message);
        if (g.tensors) {
            int llama = !strcmp(arch, "llama");
            check_same_config(g.config, g.generation_config, cfg, gen, dest);
            CHECK(cJSON_IsTrue(cJSON_GetObjectItem(g.config, "xllm_rope_interleaved")) == llama);
            check_tensors_vs_hf(g.tensors, hf, cfg, llama, dest);
            /* llama3 rope scaling travels as rope_freqs.weight */
            CHECK(!llama || st_find(g.tensors, "rope_freqs.weight"));
            CHECK(st_count(g.tensors) == n + (size_t)llama);
            tokenizer *t = tok_from_texts(g.tokenizer_json, g.tokenizer_config_json, &e);
            CHECK_MSG(t, "tiny/%s tokenizer: %s", arch, e.message);
            if (t) CHECK(check_jsonl(t, TOK512 "/expected.jsonl", dest) == 0);
            tokenizer_free(t);
        }
        gguf_close(&g);
        unlink(dest);
        xllm_free(ts);
    }
    st_close(hf);
    cJSON_Delete(cfg);
    cJSON_Delete(gen);
    xllm_free(tj);
    xllm_free(tc);
}

/* ------------------------------------------------------------ real tokenizers */

/* merges as "a b" strings, whichever form they were written in */
static char *merge_str(const cJSON *m, int joined) {
    char b[1024];
    if (cJSON_IsString(m)) {
        snprintf(b, sizeof b, "%s", m->valuestring);
    } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2) {
        snprintf(b, sizeof b, "%s %s", m->child->valuestring, m->child->next->valuestring);
    } else {
        snprintf(b, sizeof b, "?");
    }
    if (joined) {
        char *sp = strchr(b, ' ');
        if (sp) memmove(sp, sp + 1, strlen(sp));
    }
    return mem_strdup(b);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Merges equal up to the order among merges that produce the same piece
 * (HF's SentencePiece converter has ordered those differently over time:
 * by the ids of the halves, or longest left half first). */
static int same_merges(const cJSON *a, const cJSON *b, int *first_diff) {
    int na = cJSON_GetArraySize(a), nb = cJSON_GetArraySize(b), same = na == nb;
    *first_diff = -1;
    char **sa = mem_calloc((size_t)na + 1, sizeof *sa), **sb = mem_calloc((size_t)nb + 1, sizeof *sb);
    const cJSON *x = a ? a->child : NULL, *y = b ? b->child : NULL;
    for (int i = 0; x && y; i++, x = x->next, y = y->next) {
        char *jx = merge_str(x, 1), *jy = merge_str(y, 1);
        if (strcmp(jx, jy) && *first_diff < 0) *first_diff = i, same = 0;
        xllm_free(jx);
        xllm_free(jy);
        sa[i] = merge_str(x, 0);
        sb[i] = merge_str(y, 0);
    }
    if (same) {
        qsort(sa, (size_t)na, sizeof *sa, cmp_str);
        qsort(sb, (size_t)nb, sizeof *sb, cmp_str);
        for (int i = 0; i < na && same; i++) same = sa[i] && sb[i] && !strcmp(sa[i], sb[i]);
    }
    for (int i = 0; i < na || i < nb; i++) xllm_free(i < na ? sa[i] : NULL), xllm_free(i < nb ? sb[i] : NULL);
    xllm_free(sa);
    xllm_free(sb);
    return same;
}

/* vocab objects with the same entries in the same (id) order; [PAD] fillers of unused ids aside */
static int same_vocab(const cJSON *a, const cJSON *b) {
    const cJSON *x = a ? a->child : NULL, *y = b ? b->child : NULL;
    for (;;) {
        while (x && !strncmp(x->string, "[PAD", 4) && (!y || strcmp(x->string, y->string))) x = x->next;
        if (!x || !y) return !x && !y;
        if (strcmp(x->string, y->string) || x->valuedouble != y->valuedouble) {
            fprintf(stderr, "  vocab: %s=%g vs %s=%g\n", x->string, x->valuedouble, y->string, y->valuedouble);
            return 0;
        }
        x = x->next, y = y->next;
    }
}

static void compare_tokenizer_json(const char *synth_text, const char *orig_path, const char *what) {
    cJSON *s = cJSON_Parse(synth_text), *o = load_json(orig_path);
    CHECK(s && o);
    if (s && o) {
        const char *parts[] = {"normalizer", "pre_tokenizer", "post_processor", "decoder", "added_tokens"};
        for (size_t i = 0; i < 5; i++)
            CHECK_MSG(cJSON_Compare(cJSON_GetObjectItem(s, parts[i]), cJSON_GetObjectItem(o, parts[i]), 1),
                      "%s: \"%s\" differs", what, parts[i]);
        const cJSON *sm = cJSON_GetObjectItem(s, "model"), *om = cJSON_GetObjectItem(o, "model");
        const char *flags[] = {"type", "unk_token", "fuse_unk", "byte_fallback", "ignore_merges"};
        for (size_t i = 0; i < 5; i++) {
            const cJSON *a = cJSON_GetObjectItem(sm, flags[i]), *b = cJSON_GetObjectItem(om, flags[i]);
            int same = (!a && !b) || (a && b && cJSON_Compare(a, b, 1)) || (!a && cJSON_IsFalse(b)) ||
                       (!b && cJSON_IsFalse(a));
            CHECK_MSG(same, "%s: model.%s differs", what, flags[i]);
        }
        CHECK_MSG(same_vocab(cJSON_GetObjectItem(sm, "vocab"), cJSON_GetObjectItem(om, "vocab")), "%s: vocab differs",
                  what);
        int first = -1;
        const cJSON *a = cJSON_GetObjectItem(sm, "merges"), *b = cJSON_GetObjectItem(om, "merges");
        CHECK_MSG(same_merges(a, b, &first), "%s: merges differ (%d vs %d, first difference at %d)", what,
                  cJSON_GetArraySize(a), cJSON_GetArraySize(b), first);
    }
    cJSON_Delete(s);
    cJSON_Delete(o);
}

/* A real tokenizer.json through gguf_write (no tensors) and back. */
static void test_real_tokenizer(const char *name, const char *arch) {
    char dir[512], tok_path[600], cfg_path[600], jsonl[600];
    snprintf(dir, sizeof dir, SHARED "/tokenizers/%s", name);
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", dir);
    snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", dir);
    snprintf(jsonl, sizeof jsonl, "%s/expected.jsonl", dir);
    if (!file_exists(tok_path)) {
        fprintf(stderr, "test_gguf: %s not present, skipping the %s tokenizer round trip\n", tok_path, name);
        return;
    }
    char *tj = read_text(tok_path), *tc = read_text(cfg_path);
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddStringToObject(cfg, "model_type", arch);
    cJSON_AddNumberToObject(cfg, "hidden_size", 64);
    cJSON_AddNumberToObject(cfg, "num_hidden_layers", 1);
    cJSON_AddNumberToObject(cfg, "intermediate_size", 128);
    cJSON_AddNumberToObject(cfg, "num_attention_heads", 4);
    const char *dest = tmp_path("tok_only.gguf");
    xllm_error e;
    CHECK_MSG(gguf_write(dest, NULL, 0, cfg, tj, tc, &e) == XLLM_OK, "%s: %s", name, e.message);
    gguf_model g;
    CHECK_MSG(gguf_open(dest, &g, &e) == XLLM_OK, "%s: %s", name, e.message);
    if (g.tokenizer_json) {
        compare_tokenizer_json(g.tokenizer_json, tok_path, name);
        /* tokenizer_config: the chat template and the special token strings travel */
        cJSON *a = cJSON_Parse(g.tokenizer_config_json), *b = tc ? cJSON_Parse(tc) : NULL;
        const char *keys[] = {"chat_template", "eos_token", "pad_token"};
        for (int k = 0; k < 3 && b; k++) {
            const cJSON *x = cJSON_GetObjectItem(a, keys[k]), *y = cJSON_GetObjectItem(b, keys[k]);
            if (cJSON_IsObject(y)) y = cJSON_GetObjectItem(y, "content");
            CHECK_MSG(cJSON_IsString(y) ? cJSON_IsString(x) && !strcmp(x->valuestring, y->valuestring)
                                        : !x || cJSON_IsNull(x),
                      "%s: tokenizer_config %s differs", name, keys[k]);
        }
        cJSON_Delete(a);
        cJSON_Delete(b);
        xllm_error e2;
        tokenizer *orig = tokenizer_load(tok_path, &e2);
        if (!orig) {
            fprintf(stderr, "test_gguf: the tokenizer module cannot load %s yet (%s); its tokenization is not checked\n",
                    tok_path, e2.message);
        } else {
            tokenizer *t = tok_from_texts(g.tokenizer_json, g.tokenizer_config_json, &e);
            CHECK_MSG(t, "%s: synthesized tokenizer does not load: %s", name, e.message);
            char label[128];
            snprintf(label, sizeof label, "%s via GGUF", name);
            if (t) CHECK(check_jsonl(t, jsonl, label) == 0);
            tokenizer_free(t);
        }
        tokenizer_free(orig);
    }
    gguf_close(&g);
    unlink(dest);
    cJSON_Delete(cfg);
    xllm_free(tj);
    xllm_free(tc);
}

/* ------------------------------------------------------------ hand-made files */

typedef struct {
    unsigned char *p;
    size_t len, cap;
} buf;

static void put(buf *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}
static void u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void str(buf *b, const char *s) { u64(b, strlen(s)), put(b, s, strlen(s)); }
static void kv_s(buf *b, const char *k, const char *v) { str(b, k), u32(b, 8), str(b, v); }
static void kv_u(buf *b, const char *k, uint32_t v) { str(b, k), u32(b, 4), u32(b, v); }
static void kv_f(buf *b, const char *k, float v) { str(b, k), u32(b, 6), put(b, &v, 4); }

typedef struct {
    uint32_t version;
    const char *arch;
    const char *tensor_name;
    uint32_t n_dims, type, alignment;
    uint64_t ne0, ne1, offset;
    int two_tensors, overlap;
    const char *tok_model, *pre;
    int gpt2_tokens;
    const char *ukey, *skey, *sval; /* one more u32 key and one more string key */
    uint32_t uval;
    int data_type; /* the type whose bytes the data section holds for the first tensor: -1 = type (else a relabelling) */
} spec;

static spec base_spec(void) {
    spec s = {3, "llama", "token_embd.weight", 2, 0, 32, 8, 6, 0, 0, 0, NULL, NULL, 0, NULL, NULL, NULL, 0, -1};
    return s;
}

/* Bytes of a 2-d tensor of a GGML type (the types these tests use). */
static uint64_t type_bytes(int type, uint64_t ne0, uint64_t ne1) {
    switch (type) {
    case 1: case 30: return ne0 * ne1 * 2;         /* F16, BF16 */
    case 2: return ne0 / 32 * 18 * ne1;            /* Q4_0 */
    case 3: return ne0 / 32 * 20 * ne1;            /* Q4_1 */
    case 8: return ne0 / 32 * 34 * ne1;            /* Q8_0 */
    case 12: return ne0 / 256 * 144 * ne1;         /* Q4_K */
    case 14: return ne0 / 256 * 210 * ne1;         /* Q6_K */
    default: return ne0 * ne1 * 4;                 /* F32 (and the types refused before sizes matter) */
    }
}

/* A small file: llama-style keys, one or two tensors, an optional tokenizer. */
static buf make_file(const spec *s) {
    buf b = {0};
    put(&b, "GGUF", 4);
    u32(&b, s->version);
    u64(&b, s->two_tensors ? 2 : 1);
    int nkv = 8 + (s->tok_model ? 3 : 0) + (s->pre ? 1 : 0) + (s->gpt2_tokens ? 2 : 0) + !!s->ukey + !!s->skey;
    u64(&b, (uint64_t)nkv);
    char k[128];
    if (s->ukey) kv_u(&b, s->ukey, s->uval);
    if (s->skey) kv_s(&b, s->skey, s->sval);
    kv_s(&b, "general.architecture", s->arch);
    kv_u(&b, "general.alignment", s->alignment);
    snprintf(k, sizeof k, "%s.embedding_length", s->arch), kv_u(&b, k, 8);
    snprintf(k, sizeof k, "%s.block_count", s->arch), kv_u(&b, k, 1);
    snprintf(k, sizeof k, "%s.feed_forward_length", s->arch), kv_u(&b, k, 16);
    snprintf(k, sizeof k, "%s.attention.head_count", s->arch), kv_u(&b, k, 2);
    snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", s->arch), kv_f(&b, k, 1e-6f);
    snprintf(k, sizeof k, "%s.context_length", s->arch), kv_u(&b, k, 64);
    if (s->tok_model) {
        kv_s(&b, "tokenizer.ggml.model", s->tok_model);
        /* tokens: a, b, ab, <|end|> (control), Ġ, <think> (user-defined) */
        const char *toks[6] = {"a", "b", "ab", "<|end|>", "\xc4\xa0", "<think>"};
        int32_t types[6] = {1, 1, 1, 3, 1, 4};
        str(&b, "tokenizer.ggml.tokens"), u32(&b, 9), u32(&b, 8), u64(&b, 6);
        for (int i = 0; i < 6; i++) str(&b, toks[i]);
        str(&b, "tokenizer.ggml.token_type"), u32(&b, 9), u32(&b, 5), u64(&b, 6);
        put(&b, types, sizeof types);
        if (s->pre) kv_s(&b, "tokenizer.ggml.pre", s->pre);
        if (s->gpt2_tokens) {
            str(&b, "tokenizer.ggml.merges"), u32(&b, 9), u32(&b, 8), u64(&b, 1);
            str(&b, "a b");
            kv_u(&b, "tokenizer.ggml.eos_token_id", 3);
        }
    }
    str(&b, s->tensor_name);
    u32(&b, s->n_dims);
    u64(&b, s->ne0);
    for (uint32_t d = 1; d < s->n_dims && d < 8; d++) u64(&b, d == 1 ? s->ne1 : 1);
    u32(&b, s->type);
    u64(&b, s->offset);
    uint64_t nbytes = type_bytes(s->data_type >= 0 ? s->data_type : (int)s->type, s->ne0, s->ne1);
    if (s->two_tensors) {
        str(&b, "output_norm.weight");
        u32(&b, 1);
        u64(&b, 8);
        u32(&b, 0);
        u64(&b, s->overlap ? 32 : (nbytes + 31) / 32 * 32);
    }
    static const unsigned char zeros[4096];
    uint32_t al = s->alignment && !(s->alignment & (s->alignment - 1)) ? s->alignment : 32;
    put(&b, zeros, (al - b.len % al) % al);
    /* the tensors' bytes, each padded to 32 (capped: some specs lie past the end) */
    uint64_t data = (nbytes + 31) / 32 * 32 + (s->two_tensors && !s->overlap ? 32 : 0);
    for (uint64_t left = data < 65536 ? data : 64; left;) {
        size_t k = left < sizeof zeros ? (size_t)left : sizeof zeros;
        put(&b, zeros, k);
        left -= k;
    }
    return b;
}

static xllm_status open_spec(const spec *s, gguf_model *g, xllm_error *e) {
    buf b = make_file(s);
    const char *p = tmp_path("made.gguf");
    write_file(p, b.p, b.len);
    free(b.p);
    return gguf_open(p, g, e);
}

static void expect(const spec *s, xllm_status want, const char *word, const char *what) {
    gguf_model g;
    xllm_error e;
    e.message[0] = 0;
    xllm_status st = open_spec(s, &g, &e);
    CHECK_MSG(st == want && (!word || strstr(e.message, word)) && (st == XLLM_OK || strstr(e.message, "made.gguf")),
              "%s: status %d, message \"%s\"", what, st, e.message);
    if (st == XLLM_OK) gguf_close(&g);
}

static void test_made_files(void) {
    spec s = base_spec();
    gguf_model g;
    xllm_error e;
    CHECK_MSG(open_spec(&s, &g, &e) == XLLM_OK, "minimal file: %s", e.message);
    if (g.tensors) {
        CHECK(g.tokenizer_json == NULL && st_count(g.tensors) == 1);
        const st_tensor *t = st_find(g.tensors, "model.embed_tokens.weight");
        CHECK(t && t->shape[0] == 6 && t->shape[1] == 8);
        const cJSON *v = cJSON_GetObjectItem(g.config, "rms_norm_eps");
        CHECK(v && v->valuedouble == 1e-6);
        CHECK(cJSON_GetObjectItem(g.config, "head_dim")->valuedouble == 4);
        CHECK(cJSON_GetObjectItem(g.config, "num_key_value_heads")->valuedouble == 2);
        CHECK(cJSON_GetObjectItem(g.config, "vocab_size")->valuedouble == 6);
        gguf_close(&g);
    }
    s = base_spec(), s.version = 2;
    expect(&s, XLLM_OK, NULL, "version 2");
    s = base_spec(), s.version = 4;
    expect(&s, XLLM_ERR_UNSUPPORTED, "version 4", "version 4");
    s = base_spec(), s.version = 1;
    expect(&s, XLLM_ERR_UNSUPPORTED, "version 1", "version 1");
    s = base_spec(), s.version = 0x03000000u;
    expect(&s, XLLM_ERR_UNSUPPORTED, "big-endian", "big-endian");
    s = base_spec(), s.arch = "gpt2";
    expect(&s, XLLM_ERR_UNSUPPORTED, "gpt2", "unknown architecture");
    s = base_spec(), s.arch = "qwen3";
    expect(&s, XLLM_OK, NULL, "qwen3");
    s = base_spec(), s.arch = "deepseek2"; /* without its MLA sizes: the key named */
    expect(&s, XLLM_ERR_FORMAT, "kv_lora_rank", "deepseek2");
    s = base_spec(), s.type = 12; /* Q4_K: rows of 256 */
    s.ne0 = 256;
    expect(&s, XLLM_OK, NULL, "Q4_K");
    s = base_spec(), s.type = 14, s.ne0 = 32; /* Q6_K with rows of 32: not whole super-blocks */
    expect(&s, XLLM_ERR_FORMAT, "blocks of 256", "Q6_K partial block");
    s = base_spec(), s.type = 16, s.ne0 = 256; /* IQ2_XXS */
    expect(&s, XLLM_ERR_UNSUPPORTED, "IQ2_XXS", "IQ2_XXS unsupported");
    s = base_spec(), s.type = 19;
    expect(&s, XLLM_ERR_UNSUPPORTED, "token_embd.weight", "IQ1_S names the tensor");
    s = base_spec(), s.type = 8; /* Q8_0 with rows of 8: not whole blocks */
    expect(&s, XLLM_ERR_FORMAT, "blocks of 32", "Q8_0 partial block");
    s = base_spec(), s.type = 8, s.ne0 = 32, s.ne1 = 2;
    expect(&s, XLLM_OK, NULL, "Q8_0");
    s = base_spec(), s.type = 2, s.ne0 = 32, s.ne1 = 2;
    expect(&s, XLLM_OK, NULL, "Q4_0");
    s = base_spec(), s.type = 77;
    expect(&s, XLLM_ERR_UNSUPPORTED, "77", "unknown type");
    s = base_spec(), s.n_dims = 5;
    expect(&s, XLLM_ERR_FORMAT, "dimensions", "5 dims");
    s = base_spec(), s.n_dims = 0;
    expect(&s, XLLM_ERR_FORMAT, "dimensions", "0 dims");
    s = base_spec(), s.ne0 = 0;
    expect(&s, XLLM_ERR_FORMAT, "shape", "empty dim");
    s = base_spec(), s.ne0 = (uint64_t)1 << 39, s.ne1 = (uint64_t)1 << 30;
    expect(&s, XLLM_ERR_FORMAT, "shape", "overflowing shape");
    s = base_spec(), s.ne1 = 100000;
    expect(&s, XLLM_ERR_FORMAT, "outside the file", "tensor past the end");
    s = base_spec(), s.offset = 16;
    expect(&s, XLLM_ERR_FORMAT, "alignment", "misaligned offset");
    s = base_spec(), s.offset = (uint64_t)-32;
    expect(&s, XLLM_ERR_FORMAT, "outside the file", "huge offset");
    s = base_spec(), s.alignment = 0;
    expect(&s, XLLM_ERR_FORMAT, "alignment", "alignment 0");
    s = base_spec(), s.alignment = 24;
    expect(&s, XLLM_ERR_FORMAT, "alignment", "alignment 24");
    s = base_spec(), s.two_tensors = 1;
    expect(&s, XLLM_OK, NULL, "two tensors");
    s = base_spec(), s.two_tensors = 1, s.overlap = 1;
    expect(&s, XLLM_ERR_FORMAT, "overlap", "overlapping tensors");
    /* relabelled types: the data section holds one type's bytes, the table names another */
    s = base_spec(), s.type = 1, s.data_type = 0; /* F32 data called F16 */
    expect(&s, XLLM_ERR_FORMAT, "relabelled", "F32 relabelled F16");
    s = base_spec(), s.type = 2, s.data_type = 8, s.ne0 = 32, s.ne1 = 2; /* Q8_0 called Q4_0 */
    expect(&s, XLLM_ERR_FORMAT, "relabelled", "Q8_0 relabelled Q4_0");
    s = base_spec(), s.type = 2, s.data_type = 3, s.ne0 = 256, s.ne1 = 4; /* same block size, 18 vs 20 bytes */
    expect(&s, XLLM_ERR_FORMAT, "between its offset and the end of the file", "Q4_1 relabelled Q4_0");
    s = base_spec(), s.type = 2, s.data_type = 3, s.ne0 = 256, s.ne1 = 4, s.two_tensors = 1;
    expect(&s, XLLM_ERR_FORMAT, "tensor output_norm.weight", "Q4_1 relabelled Q4_0, a tensor after it");
    s = base_spec(), s.type = 3, s.data_type = 2, s.ne0 = 256, s.ne1 = 4;
    expect(&s, XLLM_ERR_FORMAT, "outside the file", "Q4_0 relabelled Q4_1 runs past the end");
    s = base_spec(), s.type = 12, s.data_type = 14, s.ne0 = 256, s.ne1 = 2; /* K-quants: Q6_K called Q4_K */
    expect(&s, XLLM_ERR_FORMAT, "relabelled", "Q6_K relabelled Q4_K");
    s = base_spec(); /* a shape relabelled: 6 rows of 8 floats stored, 4 stated */
    {
        spec t = s;
        t.ne1 = 4;
        buf b = make_file(&s), c = make_file(&t);
        /* splice: c's header and table, then s's data (2 rows more) */
        size_t hdr_c = c.len - (size_t)((type_bytes(0, t.ne0, t.ne1) + 31) / 32 * 32);
        size_t hdr_s = b.len - (size_t)((type_bytes(0, s.ne0, s.ne1) + 31) / 32 * 32);
        buf d = {0};
        put(&d, c.p, hdr_c);
        put(&d, b.p + hdr_s, b.len - hdr_s);
        const char *p = tmp_path("made.gguf");
        write_file(p, d.p, d.len);
        xllm_error e2;
        gguf_model g2;
        xllm_status st = gguf_open(p, &g2, &e2);
        CHECK_MSG(st == XLLM_ERR_FORMAT && strstr(e2.message, "relabelled"), "shape relabelled: %d %s", st, e2.message);
        if (!st) gguf_close(&g2);
        free(b.p), free(c.p), free(d.p);
    }
    /* F16 and BF16 have the same size: such a relabelling leaves no trace (documented in gguf.c) */
    s = base_spec(), s.type = 30, s.data_type = 1;
    expect(&s, XLLM_OK, NULL, "F16 relabelled BF16 (undetectable)");
    s = base_spec(), s.tensor_name = "blk.0.attn_q.weight";
    expect(&s, XLLM_ERR_FORMAT, "vocab_size", "no vocabulary size anywhere");
    /* llama with experts is Mixtral (arch.c): its sizes are then required */
    s = base_spec(), s.ukey = "llama.expert_count", s.uval = 8;
    expect(&s, XLLM_ERR_FORMAT, "expert_used_count", "mixture of experts without expert_used_count");
    s = base_spec(), s.ukey = "llama.rope.dimension_count", s.uval = 2; /* partial rotary: llama.cpp's n_rot */
    expect(&s, XLLM_OK, NULL, "partial rotary");
    s = base_spec(), s.ukey = "llama.rope.dimension_count", s.uval = 3;
    expect(&s, XLLM_ERR_FORMAT, "rope.dimension_count", "odd rotary dimensions");
    s = base_spec(), s.ukey = "llama.rope.dimension_count", s.uval = 4096;
    expect(&s, XLLM_ERR_FORMAT, "rope.dimension_count", "rotary dimensions over the head size");
    s = base_spec(), s.ukey = "llama.attention.head_count_kv", s.uval = 1;
    expect(&s, XLLM_OK, NULL, "GQA");
    s = base_spec(), s.ukey = "llama.attention.head_count_kv", s.uval = 0;
    expect(&s, XLLM_ERR_FORMAT, "head_count_kv", "zero kv heads");
    s = base_spec(), s.skey = "llama.rope.scaling.type", s.sval = "yarn";
    expect(&s, XLLM_ERR_FORMAT, "factor", "yarn rope scaling without a factor");
    s = base_spec(), s.skey = "llama.rope.scaling.type", s.sval = "dynamic";
    expect(&s, XLLM_ERR_UNSUPPORTED, "dynamic", "an unknown rope scaling type");
    s = base_spec(), s.skey = "llama.rope.scaling.type", s.sval = "linear";
    expect(&s, XLLM_ERR_FORMAT, "factor", "linear rope scaling without a factor");
    s = base_spec(), s.skey = "llama.rope.scaling.type", s.sval = "none";
    expect(&s, XLLM_OK, NULL, "rope scaling none");
    s = base_spec(), s.skey = "llama.embedding_length", s.sval = "eight";
    expect(&s, XLLM_ERR_FORMAT, "duplicate", "a key twice");
    s = base_spec(), s.skey = "general.architecture2", s.sval = "x", s.ukey = "llama.block_count2", s.uval = 1;
    expect(&s, XLLM_OK, NULL, "unknown keys are ignored");
    s = base_spec(), s.tok_model = "bert";
    expect(&s, XLLM_ERR_UNSUPPORTED, "bert", "tokenizer model bert");
    s = base_spec(), s.tok_model = "gpt2", s.pre = "tekken", s.gpt2_tokens = 1;
    expect(&s, XLLM_ERR_UNSUPPORTED, "tekken", "unknown pre-tokenizer");
    s = base_spec(), s.tok_model = "gpt2";
    expect(&s, XLLM_ERR_FORMAT, "merges", "gpt2 without merges");

    /* a byte-level vocabulary: added tokens out of the model vocab, the family's components */
    s = base_spec(), s.tok_model = "gpt2", s.pre = "qwen2", s.gpt2_tokens = 1;
    CHECK_MSG(open_spec(&s, &g, &e) == XLLM_OK, "gpt2 tokenizer: %s", e.message);
    if (g.tokenizer_json) {
        cJSON *j = cJSON_Parse(g.tokenizer_json);
        const cJSON *vocab = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "vocab");
        CHECK(cJSON_GetArraySize(vocab) == 4 && !cJSON_GetObjectItem(vocab, "<|end|>") &&
              !cJSON_GetObjectItem(vocab, "<think>"));
        const cJSON *added = cJSON_GetObjectItem(j, "added_tokens");
        CHECK(cJSON_GetArraySize(added) == 2 &&
              cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(added, 0), "special")) &&
              cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetArrayItem(added, 1), "special")));
        CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "normalizer"), "type")), "NFC"));
        const cJSON *split = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "pre_tokenizer"), "pretokenizers"), 0);
        CHECK(split && strstr(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(split, "pattern"), "Regex")),
                              "\\p{N}|"));
        xllm_error e2;
        tokenizer *t = tok_from_texts(g.tokenizer_json, g.tokenizer_config_json, &e2);
        if (!t) {
            fprintf(stderr, "test_gguf: byte-level tokenizer not loadable yet (%s)\n", e2.message);
        } else {
            int32_t *ids = NULL;
            size_t n = 0;
            CHECK(tokenizer_encode(t, "ab<think>b a<|end|>", 19, 0, &ids, &n, &e2) == XLLM_OK);
            int32_t want[] = {2, 5, 1, 4, 0, 3};
            CHECK_MSG(n == 6 && !memcmp(ids, want, sizeof want), "gpt2 ids (%zu)", n);
            xllm_free(ids);
            tokenizer_free(t);
        }
        cJSON_Delete(j);
    }
    gguf_close(&g);

    /* foreign and empty files */
    const char *p = tmp_path("foreign.gguf");
    write_file(p, "{\"hello\": 1}\n", 13);
    CHECK(gguf_open(p, &g, &e) == XLLM_ERR_FORMAT && strstr(e.message, "magic"));
    write_file(p, "", 0);
    CHECK(gguf_open(p, &g, &e) != XLLM_OK && strstr(e.message, "foreign.gguf"));
    CHECK(gguf_open(HF_DIR "/model.safetensors", &g, &e) == XLLM_ERR_FORMAT && strstr(e.message, "magic"));
    CHECK(gguf_open(SRC "/no/such.gguf", &g, &e) == XLLM_ERR_IO);
    CHECK(gguf_open(NULL, &g, &e) == XLLM_ERR_INVALID_ARGUMENT);
    /* a header claiming more entries than the file holds; a string longer than the file; arrays nested too deep */
    buf b = {0};
    put(&b, "GGUF", 4), u32(&b, 3), u64(&b, 0), u64(&b, (uint64_t)1 << 60);
    write_file(p, b.p, b.len);
    CHECK(gguf_open(p, &g, &e) == XLLM_ERR_FORMAT && strstr(e.message, "more than"));
    b.len = 16, u64(&b, 1), u64(&b, (uint64_t)1 << 62), put(&b, "abcdefgh", 8);
    write_file(p, b.p, b.len);
    CHECK(gguf_open(p, &g, &e) == XLLM_ERR_FORMAT && strstr(e.message, "truncated"));
    b.len = 16, u64(&b, 1), str(&b, "deep"), u32(&b, 9);
    for (int i = 0; i < 8; i++) u32(&b, 9), u64(&b, 1);
    u32(&b, 4), u64(&b, 1), u32(&b, 7);
    write_file(p, b.p, b.len);
    CHECK(gguf_open(p, &g, &e) == XLLM_ERR_FORMAT && strstr(e.message, "deep"));
    b.len = 16, u64(&b, 2), kv_u(&b, "general.alignment", 32), kv_u(&b, "general.alignment", 32);
    write_file(p, b.p, b.len);
    CHECK(gguf_open(p, &g, &e) == XLLM_ERR_FORMAT && strstr(e.message, "duplicate"));
    b.len = 16, u64(&b, 1), str(&b, "x"), u32(&b, 13), u32(&b, 0);
    write_file(p, b.p, b.len);
    CHECK(gguf_open(p, &g, &e) == XLLM_ERR_FORMAT && strstr(e.message, "type 13"));
    b.len = 16, u64(&b, 1), kv_s(&b, "general.alignment", "32");
    write_file(p, b.p, b.len);
    CHECK(gguf_open(p, &g, &e) == XLLM_ERR_FORMAT && strstr(e.message, "general.alignment"));
    free(b.p);
}

/* Truncations at many offsets and random byte flips of stories260k.gguf's
 * header: an error or a successful open, never a crash or an ASan report. */
static void test_corruption(void) {
    char *data;
    size_t size;
    xllm_error e;
    if (file_read_all(GGUF_FILE, &data, &size, &e) != XLLM_OK) {
        CHECK(0);
        return;
    }
    const char *p = tmp_path("cut.gguf");
    int opened = 0, failed = 0, bad_msg = 0;
    size_t header = 14400; /* the metadata and tensor table end at 14225 */
    for (size_t cut = 0; cut < size; cut += cut < header ? 3 : 4093) {
        write_file(p, data, cut);
        gguf_model g;
        e.message[0] = 0;
        xllm_status st = gguf_open(p, &g, &e);
        if (st == XLLM_OK) opened++, gguf_close(&g);
        else failed++, bad_msg += !strstr(e.message, "cut.gguf");
    }
    CHECK_MSG(opened == 0 && bad_msg == 0, "truncated files: %d opened, %d errors without the file name", opened, bad_msg);
    fprintf(stderr, "truncations: %d clean errors\n", failed);

    /* flips: the full file once, then 1-4 bytes of the header changed in place per round */
    p = tmp_path("flip.gguf");
    write_file(p, data, size);
    FILE *f = fopen(p, "r+b");
    unsigned seed = 12345;
    int ok_count = 0, err_count = 0;
    for (int round = 0; round < 1500 && f; round++) {
        size_t pos[4];
        unsigned char old[4];
        int k = 1 + round % 4;
        for (int i = 0; i < k; i++) {
            seed = seed * 1103515245u + 12345u;
            /* half the flips in the first 600 bytes (counts, keys, types, lengths) */
            pos[i] = (seed >> 8) % (round % 2 ? 600 : header);
            old[i] = (unsigned char)data[pos[i]];
            seed = seed * 1103515245u + 12345u;
            unsigned char nv = (unsigned char)(round % 3 == 0 ? old[i] ^ (1u << ((seed >> 16) % 8)) : (seed >> 16));
            fseek(f, (long)pos[i], SEEK_SET);
            fputc(nv, f);
        }
        fflush(f);
        gguf_model g;
        e.message[0] = 0;
        xllm_status st = gguf_open(p, &g, &e);
        if (st == XLLM_OK) ok_count++, gguf_close(&g);
        else err_count++, bad_msg += !strstr(e.message, "flip.gguf") && st != XLLM_ERR_OUT_OF_MEMORY;
        for (int i = k - 1; i >= 0; i--) {
            fseek(f, (long)pos[i], SEEK_SET);
            fputc(old[i], f);
        }
        fflush(f);
    }
    if (f) fclose(f);
    CHECK_MSG(bad_msg == 0, "%d errors without the file name", bad_msg);
    fprintf(stderr, "byte flips: %d opened, %d clean errors\n", ok_count, err_count);
    unlink(p);
    unlink(tmp_path("cut.gguf"));
    xllm_free(data);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/xllm_gguf_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_stories();
    test_roundtrip_f32();
    test_roundtrip_quant(XLLM_DT_Q8);
    test_roundtrip_quant(XLLM_DT_Q4);
    test_roundtrip_quant(XLLM_DT_Q4M);
    test_writer_errors();
    test_tiny("llama");
    test_tiny("qwen2");
    test_tiny("qwen3");
    test_real_tokenizer("llama2", "llama");
    test_real_tokenizer("llama3", "llama");
    test_real_tokenizer("qwen3", "qwen3");
    test_made_files();
    test_corruption();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return test_report("test_gguf");
}
