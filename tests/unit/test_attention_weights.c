/*
 * test_attention_weights.c - the attention probabilities of the reference
 * path (src/model/attention_probs.c, xllm_model_attention) against the
 * model's own fused attention and an explicit softmax.
 *
 * For llama.cpp's random-weight GGUFs of tests/data/archs (gemma2: soft-cap,
 * query_pre_attn_scalar, a sliding window of 8 on even layers; gemma3: q/k
 * norm, the sliding layers' own RoPE base, 5:1 windows; phi3: fused qkv,
 * GQA 4/2; qwen3moe: q/k norm, GQA; olmo2: q/k norm over the whole
 * projection; qwen2moe: q/k/v biases; llama-moe: Mixtral in llama's GGUF
 * layout, interleaved RoPE pairs) and stories260k (llama), over a 40-token prompt run in
 * forward steps of 16 tokens, this test takes each layer's q, k, v and the
 * fused attention's output (the observers of model.h), and checks:
 *  - explicit: every probability equals softmax(scale * Q K^T [soft-capped]
 *    + M) computed here as a full n x n matrix with M = -inf where key j >
 *    query i or i - j >= window (the layer's window as model_config says),
 *    query head h reading KV head h * n_kv / n_heads;
 *  - the fused kernel's view: for every layer, head and query, sum_j p_ij v_j
 *    equals the backend's attention output (so the scale, soft-cap, window
 *    and head mapping are the ones the model runs with, not a copy of them);
 *  - rows sum to 1, masked entries are exactly 0, gemma2's and gemma3's
 *    sliding layers see no key 8 or more positions back while their global
 *    layers do, average_heads is the mean over heads;
 *  - the public function (xllm_model_attention): layer selection and order,
 *    equal to the internal path, its errors (bad layer, repeated layer, over
 *    XLLM_ATTENTION_MAX_BYTES, NULL arguments);
 *  - deepseek2 (multi-head latent attention): check_mla below, against the
 *    decompressed keys and values (the file's per-head k_b / v_b).
 */
#include "test.h"
#include "xllm.h"
#include "base/alloc.h"
#include "engine/engine.h"
#include "model/model.h"
#include "base/dtype.h"
#include "format/safetensors.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ARCHS XLLM_SOURCE_DIR "/tests/data/archs/"
#define N 40     /* prompt length: past the window of 8, three forward steps of 16 */
#define STEP 16
#define TOL_EXPLICIT 1e-6
#define TOL_PV 1e-5 /* relative to the largest |v|: the fused kernel's float online softmax vs double here */
#define TOL_MLA 1e-6 /* MLA: decompressed keys here, the absorbed query (float matmul) there */

typedef struct {
    const model_config *c;
    float *q, *k, *v;  /* [layers][N][dims], by position */
    float *att;        /* [layers][N][n_heads * hd]: the fused attention's output, in step order */
    int *att_rows;     /* per layer: rows seen so far */
} capture;

/* MLA's row widths while check_mla captures (the observer's q, k, v differ: model.h) */
typedef struct {
    size_t q, k, v;
} mla_dims;
static const mla_dims *mla_cur;

static void cap_qkv(void *ctx, int layer, const fwd_batch *b, const float *q, const float *k, const float *v) {
    capture *cp = ctx;
    size_t qd = (size_t)cp->c->n_heads * cp->c->head_dim, kd = (size_t)cp->c->n_kv_heads * cp->c->head_dim, vd = kd;
    if (mla_cur) qd = mla_cur->q, kd = mla_cur->k, vd = mla_cur->v;
    for (int t = 0; t < b->n_tokens; t++) {
        size_t p = (size_t)b->pos[t];
        if (p >= N) continue;
        memcpy(cp->q + ((size_t)layer * N + p) * qd, q + t * qd, qd * sizeof(float));
        memcpy(cp->k + ((size_t)layer * N + p) * kd, k + t * kd, kd * sizeof(float));
        memcpy(cp->v + ((size_t)layer * N + p) * vd, v + t * vd, vd * sizeof(float));
    }
}

static void cap_att(void *ctx, int layer, observe_point point, int expert, const float *x, int T, int cols) {
    (void)expert;
    capture *cp = ctx;
    if (point != OBS_O_IN) return;
    int r = cp->att_rows[layer];
    for (int t = 0; t < T && r + t < N; t++)
        memcpy(cp->att + ((size_t)layer * N + (size_t)(r + t)) * (size_t)cols, x + (size_t)t * cols,
               (size_t)cols * sizeof(float));
    cp->att_rows[layer] = r + T;
}

/* softmax(scale * Q K^T + M) for one layer and head, written out the long way */
static void explicit_probs(const model_config *c, int layer, int h, const float *q, const float *k, double *P) {
    int hd = c->head_dim, g = h * c->n_kv_heads / c->n_heads, w = c->layer_window[layer];
    size_t qd = (size_t)c->n_heads * hd, kd = (size_t)c->n_kv_heads * hd;
    double scale = c->attn_scale > 0 ? c->attn_scale : 1.0 / sqrt(hd);
    static double S[N][N];
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int e = 0; e < hd; e++) s += (double)q[i * qd + (size_t)h * hd + e] * k[j * kd + (size_t)g * hd + e];
            s *= scale;
            if (c->attn_softcap > 0) s = c->attn_softcap * tanh(s / c->attn_softcap);
            int masked = j > i || (w > 0 && i - j >= w);
            S[i][j] = masked ? -INFINITY : s;
        }
    for (int i = 0; i < N; i++) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < N; j++) mx = S[i][j] > mx ? S[i][j] : mx;
        for (int j = 0; j < N; j++) sum += exp(S[i][j] - mx);
        for (int j = 0; j < N; j++) P[i * N + j] = exp(S[i][j] - mx) / sum;
    }
}

static void check_model(const char *name, const char *path, int expect_window) {
    xllm_error err;
    model *m = model_load(path, 1, STEP, &err);
    CHECK_MSG(m != NULL, "%s: %s", name, err.message);
    if (!m) return;
    const model_config *c = &m->cfg;
    int Ly = c->n_layers, H = c->n_heads, hd = c->head_dim;
    size_t qd = (size_t)H * hd, kd = (size_t)c->n_kv_heads * hd;
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)(1 + (i * 7919) % (c->vocab - 1));
    capture cp = {c, calloc((size_t)Ly * N * qd, 4), calloc((size_t)Ly * N * kd, 4), calloc((size_t)Ly * N * kd, 4),
                  calloc((size_t)Ly * N * qd, 4), calloc((size_t)Ly, sizeof(int))};
    float *logits = malloc((size_t)c->vocab * sizeof(float));
    m->attn_observe = cap_qkv, m->attn_observe_ctx = &cp;
    m->observe = cap_att, m->observe_ctx = &cp;
    CHECK(model_logits_once(m, ids, N, 0, KV_F32, logits, &err) == XLLM_OK);
    m->attn_observe = NULL, m->observe = NULL;

    float *P = NULL, *A = NULL;
    int64_t sp[4], sa[4];
    CHECK_MSG(model_attention_once(m, ids, N, NULL, 0, 0, KV_F32, &P, sp, &err) == XLLM_OK, "%s", err.message);
    CHECK_MSG(model_attention_once(m, ids, N, NULL, 0, 1, KV_F32, &A, sa, &err) == XLLM_OK, "%s", err.message);
    CHECK(sp[0] == Ly && sp[1] == H && sp[2] == N && sp[3] == N);
    CHECK(sa[0] == Ly && sa[1] == 1 && sa[2] == N && sa[3] == N);
    double worst_explicit = 0, worst_pv = 0, worst_sum = 0, worst_avg = 0;
    int masked_nonzero = 0, sliding_layers = 0, global_far = 0;
    static double E[N * N];
    for (int l = 0; P && A && l < Ly; l++) {
        const float *q = cp.q + (size_t)l * N * qd, *k = cp.k + (size_t)l * N * kd, *v = cp.v + (size_t)l * N * kd;
        int w = c->layer_window[l];
        sliding_layers += w > 0;
        double vmax = 0;
        for (size_t i = 0; i < N * kd; i++) vmax = fmax(vmax, fabs(v[i]));
        for (int h = 0; h < H; h++) {
            const float *p = P + ((size_t)l * H + h) * N * N;
            explicit_probs(c, l, h, q, k, E);
            int g = h / (H / c->n_kv_heads);
            for (int i = 0; i < N; i++) {
                double sum = 0;
                for (int j = 0; j < N; j++) {
                    double x = p[i * N + j];
                    sum += x;
                    worst_explicit = fmax(worst_explicit, fabs(x - E[i * N + j]));
                    if ((j > i || (w > 0 && i - j >= w)) && x != 0) masked_nonzero++;
                    if (w == 0 && i == N - 1 && j == 0 && x > 0) global_far++;
                }
                worst_sum = fmax(worst_sum, fabs(sum - 1));
                for (int e = 0; e < hd; e++) { /* sum_j p_ij v_j == the fused attention's output */
                    double o = 0;
                    for (int j = 0; j < N; j++) o += (double)p[i * N + j] * v[(size_t)j * kd + (size_t)g * hd + e];
                    double got = cp.att[((size_t)l * N + i) * qd + (size_t)h * hd + e];
                    worst_pv = fmax(worst_pv, fabs(o - got) / (vmax > 0 ? vmax : 1));
                }
            }
        }
        for (int i = 0; i < N * N; i++) { /* the average over heads */
            double s = 0;
            for (int h = 0; h < H; h++) s += P[((size_t)l * H + h) * N * N + i];
            worst_avg = fmax(worst_avg, fabs(s / H - A[(size_t)l * N * N + i]));
        }
    }
    fprintf(stderr, "%s: %d layers, %d/%d heads x %d, %d sliding: |p - explicit| %.2g, |P V - fused| %.2g (of max |v|), "
            "|row sum - 1| %.2g, |avg| %.2g\n",
            name, Ly, H, c->n_kv_heads, hd, sliding_layers, worst_explicit, worst_pv, worst_sum, worst_avg);
    CHECK_MSG(worst_explicit <= TOL_EXPLICIT, "%s: %g", name, worst_explicit);
    CHECK_MSG(worst_pv <= TOL_PV, "%s: %g", name, worst_pv);
    CHECK_MSG(worst_sum <= 1e-5, "%s: %g", name, worst_sum);
    CHECK_MSG(worst_avg <= 1e-6, "%s: %g", name, worst_avg);
    CHECK_MSG(masked_nonzero == 0, "%s: %d masked entries nonzero", name, masked_nonzero);
    if (expect_window) {
        CHECK_MSG(sliding_layers > 0 && sliding_layers < Ly, "%s: %d sliding layers of %d", name, sliding_layers, Ly);
        for (int l = 0; l < Ly; l++)
            if (c->layer_window[l] > 0) CHECK_MSG(c->layer_window[l] == 8, "%s: layer %d window %d", name, l,
                                                  c->layer_window[l]);
        CHECK_MSG(global_far > 0, "%s: no global layer attends 39 positions back", name);
    }
    for (int l = 0; l < Ly; l++) CHECK(cp.att_rows[l] == N);
    xllm_free(P);
    xllm_free(A);
    free(cp.q), free(cp.k), free(cp.v), free(cp.att), free(cp.att_rows), free(logits);
    model_free(m);
}

/* ---------------------------------------------------------- MLA (DeepSeek) */

/* A matrix of the file as f32 (rows x cols), or NULL */
static float *file_matrix(const model *m, const char *name, int64_t rows, int64_t cols) {
    const st_tensor *t = st_find(m->weights_file, name);
    CHECK_MSG(t && t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols && !dtype_is_quant(t->dtype),
              "%s: not a float [%lld][%lld] tensor", name, (long long)rows, (long long)cols);
    if (!t || t->shape[0] != rows || t->shape[1] != cols || dtype_is_quant(t->dtype)) return NULL;
    float *f = malloc((size_t)rows * (size_t)cols * sizeof(float));
    dtype_to_f32(t->dtype, t->data, f, (size_t)rows * (size_t)cols);
    return f;
}

/* deepseek2 (multi-head latent attention: q_lora, kv_lora 32, qk_nope 16,
 * qk_rope 8, v_head 16, 4 heads): the reference path's probabilities against
 * softmax(scale * q_h . k_h + M) with the decompressed keys written out here,
 * k_h = [K_b,h^T c | k_pe] (K_b,h = the file's per-head k_b, c the normed
 * latent, k_pe the shared rope key) and q_h = [q_nope,h | rope(q_pe,h)] taken
 * before the absorption; scale 1 / sqrt(qk_nope + qk_rope) from the sizes,
 * not from model_config. And sum_j p_ij (V_b,h c_j), the decompressed values,
 * equals the fused kernel's output after v_b (o_proj's input). */
static void check_mla(void) {
    const char *name = "deepseek2";
    xllm_error err;
    model *m = model_load(ARCHS "deepseek2/model.gguf", 1, STEP, &err);
    CHECK_MSG(m != NULL, "%s: %s", name, err.message);
    if (!m) return;
    const model_config *c = &m->cfg;
    int Ly = c->n_layers, H = c->n_heads, w = c->mla_dim, r = c->kv_lora_rank, nope = c->qk_nope_dim,
        rope = c->qk_rope_dim, qk = nope + rope, vd = c->v_head_dim;
    CHECK(w == r + rope && w > 0);
    size_t qd = (size_t)H * w, kd = (size_t)w, ow = (size_t)H * vd;
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)(1 + (i * 7919) % (c->vocab - 1));
    /* the observer's q: absorbed rows [N][H][w]; k: latent [N][w]; v: projected q [N][H][qk] */
    capture cp = {c, calloc((size_t)Ly * N * qd, 4), calloc((size_t)Ly * N * kd, 4), calloc((size_t)Ly * N * H * qk, 4),
                  calloc((size_t)Ly * N * ow, 4), calloc((size_t)Ly, sizeof(int))};
    mla_dims md = {qd, kd, (size_t)H * qk};
    mla_cur = &md;
    float *logits = malloc((size_t)c->vocab * sizeof(float));
    m->attn_observe = cap_qkv, m->attn_observe_ctx = &cp;
    m->observe = cap_att, m->observe_ctx = &cp;
    CHECK(model_logits_once(m, ids, N, 0, KV_F32, logits, &err) == XLLM_OK);
    m->attn_observe = NULL, m->observe = NULL;
    mla_cur = NULL;

    float *P = NULL, *A = NULL;
    int64_t sp[4], sa[4];
    CHECK_MSG(model_attention_once(m, ids, N, NULL, 0, 0, KV_F32, &P, sp, &err) == XLLM_OK, "%s", err.message);
    CHECK_MSG(model_attention_once(m, ids, N, NULL, 0, 1, KV_F32, &A, sa, &err) == XLLM_OK, "%s", err.message);
    CHECK(sp[0] == Ly && sp[1] == H && sp[2] == N && sp[3] == N);
    CHECK(sa[0] == Ly && sa[1] == 1 && sa[2] == N && sa[3] == N);
    double scale = 1.0 / sqrt((double)qk), worst_explicit = 0, worst_pv = 0, worst_sum = 0, worst_avg = 0;
    int masked_nonzero = 0;
    static double S[N][N], K[N][64], V[N][64];
    CHECK(nope <= 64 && vd <= 64);
    for (int l = 0; P && A && l < Ly && nope <= 64 && vd <= 64; l++) {
        const float *qa = cp.q + (size_t)l * N * qd, *lat = cp.k + (size_t)l * N * kd,
                    *qp = cp.v + (size_t)l * N * H * qk, *att = cp.att + (size_t)l * N * ow;
        for (int h = 0; h < H; h++) {
            char nm[128];
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.k_b_proj.%d.weight", l, h);
            float *Kb = file_matrix(m, nm, r, nope); /* [kv_lora][qk_nope] */
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.v_b_proj.%d.weight", l, h);
            float *Vb = file_matrix(m, nm, vd, r); /* [v_head][kv_lora] */
            if (!Kb || !Vb) {
                free(Kb), free(Vb);
                continue;
            }
            double vmax = 0;
            for (int j = 0; j < N; j++) { /* the decompressed key (nope part) and value of head h at position j */
                const float *cj = lat + (size_t)j * kd;
                for (int b = 0; b < nope; b++) {
                    double s = 0;
                    for (int a = 0; a < r; a++) s += (double)Kb[(size_t)a * nope + b] * cj[a];
                    K[j][b] = s;
                }
                for (int e = 0; e < vd; e++) {
                    double s = 0;
                    for (int a = 0; a < r; a++) s += (double)Vb[(size_t)e * r + a] * cj[a];
                    V[j][e] = s;
                    vmax = fmax(vmax, fabs(s));
                }
            }
            for (int i = 0; i < N; i++) {
                const float *qn = qp + ((size_t)i * H + h) * qk, *qr = qa + ((size_t)i * H + h) * w + r;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < N; j++) {
                    double d = 0;
                    for (int b = 0; b < nope; b++) d += (double)qn[b] * K[j][b];
                    for (int e = 0; e < rope; e++) d += (double)qr[e] * lat[(size_t)j * kd + r + e];
                    S[i][j] = j > i ? -INFINITY : d * scale;
                    mx = fmax(mx, S[i][j]);
                }
                for (int j = 0; j < N; j++) sum += exp(S[i][j] - mx);
                const float *p = P + ((size_t)l * H + h) * N * N + (size_t)i * N;
                double rs = 0;
                for (int j = 0; j < N; j++) {
                    worst_explicit = fmax(worst_explicit, fabs(p[j] - exp(S[i][j] - mx) / sum));
                    if (j > i && p[j] != 0) masked_nonzero++;
                    rs += p[j];
                }
                worst_sum = fmax(worst_sum, fabs(rs - 1));
                for (int e = 0; e < vd; e++) { /* sum_j p_ij v_j == the fused attention's output through v_b */
                    double o = 0;
                    for (int j = 0; j < N; j++) o += (double)p[j] * V[j][e];
                    worst_pv = fmax(worst_pv, fabs(o - att[(size_t)i * ow + (size_t)h * vd + e]) / (vmax > 0 ? vmax : 1));
                }
            }
            free(Kb), free(Vb);
        }
        for (int i = 0; i < N * N; i++) {
            double s = 0;
            for (int h = 0; h < H; h++) s += P[((size_t)l * H + h) * N * N + i];
            worst_avg = fmax(worst_avg, fabs(s / H - A[(size_t)l * N * N + i]));
        }
    }
    fprintf(stderr, "%s (MLA): %d layers, %d heads, latent %d + rope %d: |p - explicit (decompressed keys)| %.2g, "
            "|P V - fused| %.2g (of max |v|), |row sum - 1| %.2g, |avg| %.2g\n",
            name, Ly, H, r, rope, worst_explicit, worst_pv, worst_sum, worst_avg);
    CHECK_MSG(worst_explicit <= TOL_MLA, "%s: %g", name, worst_explicit);
    CHECK_MSG(worst_pv <= TOL_PV, "%s: %g", name, worst_pv);
    CHECK_MSG(worst_sum <= 1e-5, "%s: %g", name, worst_sum);
    CHECK_MSG(worst_avg <= 1e-6, "%s: %g", name, worst_avg);
    CHECK_MSG(masked_nonzero == 0, "%s: %d masked entries nonzero", name, masked_nonzero);
    for (int l = 0; l < Ly; l++) CHECK(cp.att_rows[l] == N);
    xllm_free(P);
    xllm_free(A);
    free(cp.q), free(cp.k), free(cp.v), free(cp.att), free(cp.att_rows), free(logits);
    model_free(m);
}

/* The public function: selection, order, equality with the full set, errors. */
static void check_public(void) {
    xllm_error err;
    xllm_model_options o = xllm_model_options_default();
    o.n_threads = 1;
    xllm_model *xm = xllm_model_load(ARCHS "gemma2/model.gguf", &o, &err);
    CHECK_MSG(xm != NULL, "%s", err.message);
    if (!xm) return;
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)(3 + i * 31);
    float *all = NULL, *sel = NULL, *p = NULL;
    int64_t s_all[4], s_sel[4], sh[4] = {7, 7, 7, 7};
    CHECK(xllm_model_attention(xm, ids, N, NULL, 0, 0, &all, s_all, &err) == XLLM_OK);
    const int32_t want[2] = {3, 0};
    CHECK(xllm_model_attention(xm, ids, N, want, 2, 0, &sel, s_sel, &err) == XLLM_OK);
    size_t per = (size_t)4 * N * N; /* one layer: 4 heads */
    CHECK(s_all[0] == 4 && s_all[1] == 4 && s_all[2] == N && s_all[3] == N);
    CHECK(s_sel[0] == 2 && s_sel[1] == 4 && s_sel[2] == N && s_sel[3] == N);
    if (all && sel) {
        CHECK(memcmp(sel, all + 3 * per, per * sizeof(float)) == 0);
        CHECK(memcmp(sel + per, all, per * sizeof(float)) == 0);
    }
    const int32_t bad[1] = {4}, twice[2] = {1, 1};
    CHECK(xllm_model_attention(xm, ids, N, bad, 1, 0, &p, sh, &err) == XLLM_ERR_INVALID_ARGUMENT && !p && !sh[0]);
    CHECK_MSG(strstr(err.message, "layer 4") != NULL, "%s", err.message);
    CHECK(xllm_model_attention(xm, ids, N, twice, 2, 0, &p, sh, &err) == XLLM_ERR_INVALID_ARGUMENT && !p);
    CHECK(xllm_model_attention(xm, ids, 0, NULL, 0, 0, &p, sh, &err) == XLLM_ERR_INVALID_ARGUMENT && !p);
    CHECK(xllm_model_attention(xm, ids, N, NULL, 0, 0, NULL, sh, &err) == XLLM_ERR_INVALID_ARGUMENT);
    CHECK(xllm_model_attention(xm, ids, N, NULL, 0, 0, &p, NULL, &err) == XLLM_ERR_INVALID_ARGUMENT);
    int32_t bad_id[2] = {1, 999999};
    CHECK(xllm_model_attention(xm, bad_id, 2, NULL, 0, 0, &p, sh, &err) == XLLM_ERR_INVALID_ARGUMENT && !p);
    /* 4 layers x 4 heads x 8192^2 floats is 4 GiB: over the limit, refused before any work */
    size_t big = 8192;
    int32_t *many = calloc(big, sizeof *many);
    xllm_status st = xllm_model_attention(xm, many, big, NULL, 0, 0, &p, sh, &err);
    CHECK_MSG((st == XLLM_ERR_INVALID_ARGUMENT && strstr(err.message, "limit")) || st == XLLM_ERR_CONTEXT_OVERFLOW,
              "%d %s", st, err.message);
    CHECK(!p);
    free(many);
    xllm_free(all);
    xllm_free(sel);
    xllm_model_free(xm);
    /* multi-head latent attention through the public function: one layer's heads, rows summing to 1 */
    xm = xllm_model_load(ARCHS "deepseek2/model.gguf", &o, &err);
    CHECK_MSG(xm != NULL, "%s", err.message);
    if (xm) {
        const int32_t one[1] = {2};
        CHECK_MSG(xllm_model_attention(xm, ids, 4, one, 1, 0, &p, sh, &err) == XLLM_OK && p, "%s", err.message);
        CHECK(sh[0] == 1 && sh[1] == 4 && sh[2] == 4 && sh[3] == 4);
        for (int hq = 0; p && hq < 16; hq++) { /* 4 heads x 4 queries */
            double rs = 0;
            for (int j = 0; j < 4; j++) rs += p[hq * 4 + j];
            CHECK(fabs(rs - 1) < 1e-5 && (p[hq * 4 + 3] == 0.0f) == (hq % 4 < 3)); /* key 3 masked for queries 0-2 */
        }
        xllm_free(p);
        xllm_model_free(xm);
    }
}

int main(void) {
    check_model("stories260k", XLLM_SOURCE_DIR "/models/stories260k", 0);
    check_model("gemma2", ARCHS "gemma2/model.gguf", 1);
    check_model("gemma3", ARCHS "gemma3/model.gguf", 1);
    check_model("phi3", ARCHS "phi3/model.gguf", 0);
    check_model("qwen3moe", ARCHS "qwen3moe/model.gguf", 0);
    check_model("olmo2", ARCHS "olmo2/model.gguf", 0);
    check_model("qwen2moe", ARCHS "qwen2moe/model.gguf", 0);
    check_model("llama-moe", ARCHS "llama-moe/model.gguf", 0);
    check_mla();
    check_public();
    return test_report("test_attention_weights");
}
