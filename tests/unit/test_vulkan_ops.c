/*
 * test_vulkan_ops.c - every operation of the Vulkan backend against the CPU
 * backend, in the spirit of llama.cpp's test-backend-ops: random inputs, odd
 * shapes (T = 1, 3, 17, 64; rows not a multiple of any tile; columns a
 * multiple of 32 but not of 64), each weight type and each KV storage; with
 * the validation layer on and zero messages allowed. Exit 77 (skipped)
 * without a Vulkan device.
 *
 * Error measure: NMSE = sum (vk - cpu)^2 / sum cpu^2 over the output.
 * Bounds, per operation (float32 has 24 bits: a different summation order
 * gives ~1e-14 of NMSE; the bounds leave room and still catch any wrong
 * element, which moves NMSE to ~1e-4 or more):
 *   matmul (every type, bias, BE_ADD): 1e-10   rmsnorm: 1e-12
 *   (llama.cpp's block types that kq_quantize_row makes: against their
 *   dequantized weights dotted in double, 1e-10)
 *   silu_mul: 1e-12   add / copy_rows / embed / rope_tables: 0 (exact)
 *   rope_kv (q, k): 1e-12; K/V rows written: f32 exact, f16 / q8 NMSE 1e-6
 *   (one rounding step may differ where the inputs differ in the last bit)
 *   attention (f32, f16, q8 KV; GQA; window; scale and soft-cap; contexts
 *   past 1024 keys, where the split kernel and its combine pass run): 1e-10
 *   gelu_mul: 1e-12   scale: 0 (exact)
 *   mla_rope_kv (q, latent rows): 1e-12; latent rows written: as rope_kv's;
 *   latent attention (f32, f16, q8 rows; 3, 4, 8, 16 heads; window; long
 *   contexts; rows of 40, 80 and DeepSeek-V2/V3's 576): 1e-10
 * Within the backend, bit for bit: the matrix-vector and the tiled matmul,
 * with and without int8 dot products (a second backend made with
 * XLLM_VULKAN_INT_DOT=0), a token's row inside T = 64 against T = 1, and
 * each token's attention alone against inside its batch (split or not),
 * latent (MLA) attention too, and decode attention with a KV group's heads in
 * one workgroup against one head per workgroup (XLLM_VULKAN_ATTN_GROUP=0).
 * The backend's own memory after all of it within what own_bytes promised,
 * each MLA width's backend too, and latent attention's partials (rows of 576)
 * filling the bound exactly for one decode token over 2 segments.
 */
#include "test.h"
#include "backend/backend.h"
#include "backend/vulkan/vulkan_backend.h"
#include "base/alloc.h"
#include "quant/kquant.h"
#include "quant/quant.h"
#include "xllm.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static backend g_cpu, g_vk, g_vk_nodot;
static uint64_t g_rng = 88172645463325252ull;
static float frand(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* a device copy of host data on backend b */
static void *dev(backend *b, const void *h, size_t bytes) {
    void *p = b->ops->alloc(b->ctx, bytes ? bytes : 4);
    if (h && bytes) b->ops->copy(b->ctx, p, h, bytes, BE_HOST_TO_DEVICE);
    return p;
}
static void back(backend *b, void *h, const void *d, size_t bytes) { b->ops->copy(b->ctx, h, d, bytes, BE_DEVICE_TO_HOST); }
static void drop(backend *b, void *p) { b->ops->free(b->ctx, p); }

static double nmse(const float *a, const float *ref, size_t n) {
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        e += d * d, s += (double)ref[i] * ref[i];
    }
    if (e != e) return 1e30;
    return s > 0 ? e / s : e;
}

static float *rnd(size_t n, float scale) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = frand() * scale;
    return x;
}

/* ------------------------------------------------------------ matmul */

static void test_matmul(dtype_t t, int group, int T, int64_t rows, int64_t cols, int bias, int add) {
    float *wf = rnd((size_t)(rows * cols), 0.5f), *x = rnd((size_t)T * cols, 1.0f), *b = rnd((size_t)rows, 0.1f);
    float *y0 = rnd((size_t)T * rows, 1.0f);
    size_t rb = quant_row_bytes(t, group, cols);
    unsigned char *w = malloc((size_t)rows * rb);
    for (int64_t r = 0; r < rows; r++) {
        if (dtype_is_quant(t)) quant_quantize_row(t, group, wf + r * cols, cols, NULL, w + r * rb);
        else if (t == XLLM_DT_F32) memcpy(w + r * rb, wf + r * cols, (size_t)cols * 4);
        else
            for (int64_t c = 0; c < cols; c++) {
                uint16_t h = t == XLLM_DT_F16 ? f32_to_f16(wf[r * cols + c]) : f32_to_bf16(wf[r * cols + c]);
                memcpy(w + r * rb + c * 2, &h, 2);
            }
    }
    float *out[2];
    backend *bs[2] = {&g_cpu, &g_vk};
    for (int k = 0; k < 2; k++) {
        backend *be = bs[k];
        matrix W;
        memset(&W, 0, sizeof W);
        W.dtype = t, W.group = group, W.rows = rows, W.cols = cols, W.data = w;
        void *storage = NULL;
        xllm_error err;
        CHECK_MSG(be->ops->upload_matrix(be->ctx, &W, &storage, &err) == XLLM_OK, "%s", err.message);
        float *dx = dev(be, x, (size_t)T * cols * 4), *dy = dev(be, y0, (size_t)T * rows * 4);
        float *db = bias ? dev(be, b, (size_t)rows * 4) : NULL, *tmp = dev(be, NULL, (size_t)T * rows * 4);
        be->ops->matmul(be->ctx, dx, T, &W, db, dy, tmp, add ? BE_ADD : 0);
        out[k] = malloc((size_t)T * rows * 4);
        back(be, out[k], dy, (size_t)T * rows * 4);
        if (k == 1) {
            /* the other variants on Vulkan: the same bits (matrix-vector / tiled, with and
             * without int8 dot products, and each token's row computed alone) */
            float *alt = malloc((size_t)T * rows * 4);
            for (int v = 0; v < 4; v++) {
                backend *vb = v >= 2 ? &g_vk_nodot : &g_vk;
                matrix W2 = W;
                void *st2 = NULL;
                if (v >= 2) {
                    memset(&W2, 0, sizeof W2);
                    W2.dtype = t, W2.group = group, W2.rows = rows, W2.cols = cols, W2.data = w;
                    CHECK_MSG(vb->ops->upload_matrix(vb->ctx, &W2, &st2, &err) == XLLM_OK, "%s", err.message);
                }
                W2.plan_kernel[mm_bucket(T)] = (uint8_t)(v % 2 ? 2 : 1); /* 1: matrix-vector, 2: tiled */
                float *x2 = dev(vb, x, (size_t)T * cols * 4), *y2 = dev(vb, y0, (size_t)T * rows * 4);
                float *b2 = bias ? dev(vb, b, (size_t)rows * 4) : NULL;
                vb->ops->matmul(vb->ctx, x2, T, &W2, b2, y2, NULL, add ? BE_ADD : 0);
                back(vb, alt, y2, (size_t)T * rows * 4);
                CHECK_MSG(!memcmp(alt, out[1], (size_t)T * rows * 4), "matmul %s g%d T=%d: %s%s differs in bits",
                          dtype_name(t), group, T, v % 2 ? "tiled" : "matrix-vector", v >= 2 ? " without int8 dot" : "");
                drop(vb, x2), drop(vb, y2);
                if (b2) drop(vb, b2);
                if (st2) drop(vb, st2);
            }
            /* token T-1 alone (T = 1: the matrix-vector kernel) */
            float *x1 = dev(be, x + (size_t)(T - 1) * cols, (size_t)cols * 4);
            float *y1 = dev(be, y0 + (size_t)(T - 1) * rows, (size_t)rows * 4);
            be->ops->matmul(be->ctx, x1, 1, &W, db, y1, NULL, add ? BE_ADD : 0);
            back(be, alt, y1, (size_t)rows * 4);
            CHECK_MSG(!memcmp(alt, out[1] + (size_t)(T - 1) * rows, (size_t)rows * 4),
                      "matmul %s g%d: token %d of T=%d differs in bits from it alone", dtype_name(t), group, T - 1, T);
            drop(be, x1), drop(be, y1);
            free(alt);
        }
        drop(be, dx), drop(be, dy), drop(be, tmp);
        if (db) drop(be, db);
        if (storage) drop(be, storage);
    }
    double e = nmse(out[1], out[0], (size_t)T * rows);
    CHECK_MSG(e <= 1e-10, "matmul %s g%d T=%d %lldx%lld bias %d add %d: NMSE %g", dtype_name(t), group, T,
              (long long)rows, (long long)cols, bias, add, e);
    free(out[0]), free(out[1]), free(wf), free(x), free(b), free(y0), free(w);
}

/* llama.cpp's block types (unpacked at upload, f32 activations): against the
 * dequantized weights dotted in double on the host (NMSE bound 1e-10) */
static void test_matmul_kq(dtype_t t, int T) {
    const int64_t rows = 19, cols = 512;
    float *wf = rnd((size_t)(rows * cols), 0.5f), *x = rnd((size_t)T * cols, 1.0f), *b = rnd((size_t)rows, 0.1f);
    size_t rb = quant_row_bytes(t, kq_block_elems(t), cols);
    unsigned char *w = malloc((size_t)rows * rb);
    float *deq = malloc((size_t)cols * sizeof(float)), *ref = malloc((size_t)T * rows * sizeof(float));
    for (int64_t r = 0; r < rows; r++) {
        kq_quantize_row(t, wf + r * cols, cols, NULL, w + r * rb);
        kq_dequantize_row(t, w + r * rb, cols, deq);
        for (int tt = 0; tt < T; tt++) {
            double acc = 0;
            for (int64_t c = 0; c < cols; c++) acc += (double)deq[c] * x[(size_t)tt * cols + c];
            ref[(size_t)tt * rows + r] = (float)(acc + b[r]);
        }
    }
    matrix W;
    memset(&W, 0, sizeof W);
    W.dtype = t, W.group = kq_block_elems(t), W.rows = rows, W.cols = cols, W.data = w;
    void *storage = NULL;
    xllm_error err;
    CHECK_MSG(g_vk.ops->upload_matrix(g_vk.ctx, &W, &storage, &err) == XLLM_OK, "%s", err.message);
    float *dx = dev(&g_vk, x, (size_t)T * cols * 4), *dy = dev(&g_vk, NULL, (size_t)T * rows * 4);
    float *db = dev(&g_vk, b, (size_t)rows * 4), *out = malloc((size_t)T * rows * 4);
    g_vk.ops->matmul(g_vk.ctx, dx, T, &W, db, dy, NULL, 0);
    back(&g_vk, out, dy, (size_t)T * rows * 4);
    double e = nmse(out, ref, (size_t)T * rows);
    CHECK_MSG(e <= 1e-10, "matmul %s T=%d: NMSE %g vs the dequantized weights", dtype_name(t), T, e);
    drop(&g_vk, dx), drop(&g_vk, dy), drop(&g_vk, db);
    if (storage) drop(&g_vk, storage);
    free(wf), free(x), free(b), free(w), free(deq), free(ref), free(out);
}

/* ------------------------------------------------------------ simple ops */

static void test_simple(int T) {
    int n = 96;
    float *x = rnd((size_t)T * n, 2.0f), *w = rnd((size_t)n, 1.0f), *y = rnd((size_t)T * 2 * n, 3.0f);
    int32_t rows[64];
    for (int i = 0; i < T; i++) rows[i] = (i * 7) % T;
    const char *names[] = {"rmsnorm", "rmsnorm rows", "silu_mul", "add", "copy_rows", "embed", "rope_tables",
                           "gelu_mul", "scale"};
    double bound[] = {1e-12, 1e-12, 1e-12, 0, 0, 0, 0, 1e-12, 0};
    for (int op = 0; op < 9; op++) {
        float *out[2];
        size_t on = (size_t)T * 2 * n;
        for (int k = 0; k < 2; k++) {
            backend *be = k ? &g_vk : &g_cpu;
            float *dx = dev(be, x, (size_t)T * n * 4), *dw = dev(be, w, (size_t)n * 4), *dy = dev(be, y, on * 4);
            float *dout = dev(be, y, on * 4);
            if (op == 0) be->ops->rmsnorm(be->ctx, dx, NULL, T, dw, 1e-5f, n, dout, 0);
            if (op == 1) be->ops->rmsnorm(be->ctx, dx, rows, T, dw, 1e-5f, n, dout, 0);
            if (op == 2) be->ops->silu_mul(be->ctx, dout, dy, 2 * (size_t)n, dy + n, 2 * (size_t)n, T, (size_t)n);
            if (op == 7) be->ops->gelu_mul(be->ctx, dout, dy, 2 * (size_t)n, dy + n, 2 * (size_t)n, T, (size_t)n);
            if (op == 8) be->ops->scale(be->ctx, dout + 1, on - 3, 8.0f / 3.0f);
            if (op == 3) be->ops->add(be->ctx, dout, dy, on - 5);
            if (op == 4) be->ops->copy_rows(be->ctx, dout + 3, 2 * (size_t)n, dy + 1, 2 * (size_t)n, T, (size_t)n - 7);
            if (op == 5) {
                matrix E;
                memset(&E, 0, sizeof E);
                E.dtype = XLLM_DT_F32, E.rows = 2 * T, E.cols = n, E.data = y;
                int32_t tok[64];
                for (int i = 0; i < T; i++) tok[i] = (i * 5 + 1) % (2 * T);
                be->ops->embed(be->ctx, &E, tok, T, dout);
            }
            if (op == 6) {
                double inv[48];
                int32_t pos[64];
                for (int i = 0; i < 48; i++) inv[i] = pow(10000.0, -2.0 * i / 96);
                for (int i = 0; i < T; i++) pos[i] = i * 13 + 2;
                be->ops->rope_tables(be->ctx, pos, T, inv, 0.0f, 48, dout, dout + (size_t)T * 48);
            }
            out[k] = malloc(on * 4);
            back(be, out[k], dout, on * 4);
            drop(be, dx), drop(be, dw), drop(be, dy), drop(be, dout);
        }
        double e = nmse(out[1], out[0], on);
        CHECK_MSG(e <= bound[op], "%s T=%d: NMSE %g (bound %g)", names[op], T, e, bound[op]);
        free(out[0]), free(out[1]);
    }
    free(x), free(w), free(y);
}

/* ------------------------------------------- rope_kv + paged attention */

/* long: the sequences continue from prefixes of 1100, 530 and 20 keys (past
 * the split kernel's 512-key segments); gemma: an attention scale and a
 * soft-cap; qk_norm 2: one norm over each token's whole q and k (OLMo 2) */
static void test_attention(int T, kv_dtype kvt, int window, int qk_norm, int long_ctx, int gemma) {
    const int nh = 4, nkv = 2, hd = 32, bs = long_ctx ? 16 : 4, nblk = long_ctx ? 256 : 64, n_seq = 3, per = long_ctx ? 84 : 16;
    size_t qd = (size_t)nh * hd, kd = (size_t)nkv * hd, rb = kvq_row_bytes(kvt, hd);
    size_t pool = (size_t)nblk * bs * nkv * rb;
    /* tokens spread over 3 sequences, each continuing from a prefix already in the cache */
    int32_t pos[64], seq[64], tab[3][84];
    int next[3] = {5, 0, 11};
    if (long_ctx) next[0] = 1100, next[1] = 530, next[2] = 20;
    for (int s = 0; s < n_seq; s++)
        for (int i = 0; i < per; i++) tab[s][i] = (s * per + i * 7) % nblk; /* scattered blocks */
    for (int t = 0; t < T; t++) {
        seq[t] = t % 5 == 4 ? 0 : t % 3 == 1 ? 1 : 2;
        pos[t] = next[seq[t]]++;
    }
    const int32_t *tables[3] = {tab[0], tab[1], tab[2]};
    size_t nqn = qk_norm == 2 ? qd : (size_t)hd;
    float *q = rnd((size_t)T * qd, 1.0f), *k = rnd((size_t)T * kd, 1.0f), *v = rnd((size_t)T * kd, 1.0f);
    float *qn = rnd(nqn, 1.0f), *kn = rnd(nqn, 1.0f), *cs = rnd((size_t)T * hd / 2, 1.0f);
    float *sn = rnd((size_t)T * hd / 2, 1.0f);
    if (gemma) /* scores large enough that the cap matters */
        for (size_t i = 0; i < (size_t)T * qd; i++) q[i] *= 6.0f;
    unsigned char *kv0 = malloc(pool);
    for (size_t i = 0; i < pool; i++) kv0[i] = 0;
    /* the prefix rows: valid stored values */
    float *row = rnd((size_t)hd, 1.0f);
    for (size_t r = 0; r < pool / rb; r++) {
        for (int i = 0; i < hd; i++) row[i] = frand();
        kvq_store_row(kvt, row, hd, kv0 + r * rb);
    }
    /* cpu, vulkan, and vulkan with one head per decode workgroup (g_vk_nodot:
     * XLLM_VULKAN_ATTN_GROUP=0), which must give the GQA-grouped kernel's bits */
    float *res[3][4];
    for (int b = 0; b < 3; b++) {
        backend *be = b == 2 ? &g_vk_nodot : b ? &g_vk : &g_cpu;
        float *dq = dev(be, q, (size_t)T * qd * 4), *dk = dev(be, k, (size_t)T * kd * 4), *dv = dev(be, v, (size_t)T * kd * 4);
        float *dqn = dev(be, qn, nqn * 4), *dkn = dev(be, kn, nqn * 4);
        float *dcs = dev(be, cs, (size_t)T * hd / 2 * 4), *dsn = dev(be, sn, (size_t)T * hd / 2 * 4);
        void *kc = dev(be, kv0, pool), *vc = dev(be, kv0, pool);
        float *out = dev(be, NULL, (size_t)T * qd * 4);
        be_qkv d;
        memset(&d, 0, sizeof d);
        d.T = T, d.q = dq, d.k = dk, d.v = dv;
        if (qk_norm) d.q_norm = dqn, d.k_norm = dkn;
        d.qk_norm_all = qk_norm == 2;
        d.eps = 1e-6f, d.rope_cos = dcs, d.rope_sin = dsn, d.rope_interleaved = T % 2;
        d.n_heads = nh, d.n_kv_heads = nkv, d.head_dim = hd, d.k_cache = kc, d.v_cache = vc, d.kv_type = kvt;
        d.block_size = bs, d.pos = pos, d.seq = seq, d.block_tables = tables;
        be->ops->rope_kv(be->ctx, &d);
        be_attn a = {T, dq, out, kc, vc, bs, nh, nkv, hd, window, pos, seq, tables, kvt, gemma ? 0.25f : 0.0f,
                     gemma ? 2.0f : 0.0f, 0};
        be->ops->attention(be->ctx, &a);
        res[b][0] = malloc((size_t)T * qd * 4), res[b][1] = malloc((size_t)T * kd * 4);
        res[b][2] = malloc(2 * pool), res[b][3] = malloc((size_t)T * qd * 4);
        back(be, res[b][0], dq, (size_t)T * qd * 4);
        back(be, res[b][1], dk, (size_t)T * kd * 4);
        back(be, res[b][2], kc, pool);
        back(be, (char *)res[b][2] + pool, vc, pool);
        back(be, res[b][3], out, (size_t)T * qd * 4);
        if (b == 1 && T > 1) { /* each of a few tokens alone: the same bits as inside the batch */
            float *one = malloc(qd * 4);
            for (int t = 0; t < T; t += T > 8 ? 5 : 1) {
                be_attn a1 = a;
                a1.T = 1, a1.q = dq + (size_t)t * qd, a1.pos = pos + t, a1.seq = seq + t;
                be->ops->attention(be->ctx, &a1);
                back(be, one, out, qd * 4);
                CHECK_MSG(!memcmp(one, res[1][3] + (size_t)t * qd, qd * 4),
                          "attention T=%d kv %s window %d long %d: token %d alone differs in bits", T, kvq_name(kvt),
                          window, long_ctx, t);
            }
            free(one);
        }
        drop(be, dq), drop(be, dk), drop(be, dv), drop(be, dqn), drop(be, dkn), drop(be, dcs), drop(be, dsn);
        drop(be, kc), drop(be, vc), drop(be, out);
    }
    CHECK_MSG(!memcmp(res[2][3], res[1][3], (size_t)T * qd * 4) && !memcmp(res[2][2], res[1][2], 2 * pool),
              "attention T=%d kv %s window %d long %d: heads grouped per KV head differ in bits from one per workgroup",
              T, kvq_name(kvt), window, long_ctx);
    double eq = nmse(res[1][0], res[0][0], (size_t)T * qd), ek = nmse(res[1][1], res[0][1], (size_t)T * kd);
    /* the pools: compare as stored values */
    size_t nrows = 2 * pool / rb;
    float *pa = malloc(nrows * hd * 4), *pb = malloc(nrows * hd * 4);
    for (size_t r = 0; r < nrows; r++) {
        kvq_load_row(kvt, (char *)res[0][2] + r * rb, hd, pa + r * hd);
        kvq_load_row(kvt, (char *)res[1][2] + r * rb, hd, pb + r * hd);
    }
    double ep = nmse(pb, pa, nrows * hd), eo = nmse(res[1][3], res[0][3], (size_t)T * qd);
    double pool_bound = kvt == KV_F32 ? 1e-12 : 1e-6;
    CHECK_MSG(eq <= 1e-12 && ek <= 1e-12, "rope_kv T=%d kv %s norm %d: NMSE q %g k %g", T, kvq_name(kvt), qk_norm, eq, ek);
    CHECK_MSG(ep <= pool_bound, "rope_kv T=%d kv %s: KV pool NMSE %g", T, kvq_name(kvt), ep);
    CHECK_MSG(eo <= 1e-10, "attention T=%d kv %s window %d long %d gemma %d: NMSE %g", T, kvq_name(kvt), window,
              long_ctx, gemma, eo);
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < 4; i++) free(res[b][i]);
    free(pa), free(pb), free(q), free(k), free(v), free(qn), free(kn), free(cs), free(sn), free(kv0), free(row);
}

/* ------------------------- multi-head latent attention (DeepSeek's MLA) */

/* mla_rope_kv then latent attention (be_mla, be_attn.latent) on backends made
 * for latent rows of w values (the scratch follows head_dim): tokens over 3
 * sequences continuing from stored prefixes (long: 1100, 530 and 20 keys,
 * past the 512-key segments; long_ctx 2: the third at 600 keys), nh heads (tiles of up to 8 (token, head)
 * items: 3 heads make tiles of 2 tokens x 3 heads, 16 heads two tiles per
 * token). Checks q and the latent rows after RoPE, the pools as stored, the
 * output, and each of a few tokens alone against inside the batch (bits). */
static void test_mla(backend *cpu, backend *vk, int T, kv_dtype kvt, int w, int rope, int nh, int window, int long_ctx) {
    const int hr = w / 2, bs = long_ctx ? 16 : 4, nblk = long_ctx ? 256 : 64, per = long_ctx ? 84 : 16;
    size_t qd = (size_t)nh * w, rb = kvq_row_bytes(kvt, hr), pool = (size_t)nblk * bs * rb;
    int32_t pos[64], seq[64], tab[3][84];
    int next[3] = {5, 0, 11};
    if (long_ctx) next[0] = 1100, next[1] = 530, next[2] = long_ctx == 2 ? 600 : 20;
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < per; i++) tab[s][i] = (s * per + i * 7) % nblk;
    for (int t = 0; t < T; t++) {
        seq[t] = t % 5 == 4 ? 0 : t % 3 == 1 ? 1 : 2;
        pos[t] = next[seq[t]]++;
    }
    const int32_t *tables[3] = {tab[0], tab[1], tab[2]};
    float *q = rnd((size_t)T * qd, 1.0f), *kv = rnd((size_t)T * w, 1.0f);
    float *cs = rnd((size_t)T * rope / 2, 1.0f), *sn = rnd((size_t)T * rope / 2, 1.0f);
    unsigned char *kv0 = malloc(pool);
    float *row = rnd((size_t)hr, 1.0f);
    for (size_t r = 0; r < pool / rb; r++) {
        for (int i = 0; i < hr; i++) row[i] = frand();
        kvq_store_row(kvt, row, hr, kv0 + r * rb);
    }
    float *res[2][4];
    for (int b = 0; b < 2; b++) {
        backend *be = b ? vk : cpu;
        float *dq = dev(be, q, (size_t)T * qd * 4), *dkv = dev(be, kv, (size_t)T * w * 4);
        float *dcs = dev(be, cs, (size_t)T * rope / 2 * 4), *dsn = dev(be, sn, (size_t)T * rope / 2 * 4);
        void *kc = dev(be, kv0, pool), *vc = dev(be, kv0, pool);
        float *out = dev(be, NULL, (size_t)T * qd * 4);
        be_mla d = {T, dq, dkv, nh, w, rope, dcs, dsn, T % 2, kc, vc, kvt, bs, pos, seq, tables};
        be->ops->mla_rope_kv(be->ctx, &d);
        be_attn a = {T, dq, out, kc, vc, bs, nh, 1, w, window, pos, seq, tables, kvt, 0.2f, 0.0f, 1};
        be->ops->attention(be->ctx, &a);
        res[b][0] = malloc((size_t)T * qd * 4), res[b][1] = malloc((size_t)T * w * 4);
        res[b][2] = malloc(2 * pool), res[b][3] = malloc((size_t)T * qd * 4);
        back(be, res[b][0], dq, (size_t)T * qd * 4);
        back(be, res[b][1], dkv, (size_t)T * w * 4);
        back(be, res[b][2], kc, pool);
        back(be, (char *)res[b][2] + pool, vc, pool);
        back(be, res[b][3], out, (size_t)T * qd * 4);
        if (b == 1 && T > 1) { /* each of a few tokens alone: the same bits as inside the batch */
            float *one = malloc(qd * 4);
            for (int t = 0; t < T; t += T > 8 ? 5 : 1) {
                be_attn a1 = a;
                a1.T = 1, a1.q = dq + (size_t)t * qd, a1.pos = pos + t, a1.seq = seq + t;
                be->ops->attention(be->ctx, &a1);
                back(be, one, out, qd * 4);
                CHECK_MSG(!memcmp(one, res[1][3] + (size_t)t * qd, qd * 4),
                          "mla T=%d kv %s w %d nh %d long %d: token %d alone differs in bits", T, kvq_name(kvt), w, nh,
                          long_ctx, t);
            }
            free(one);
        }
        drop(be, dq), drop(be, dkv), drop(be, dcs), drop(be, dsn), drop(be, kc), drop(be, vc), drop(be, out);
    }
    double eq = nmse(res[1][0], res[0][0], (size_t)T * qd), ek = nmse(res[1][1], res[0][1], (size_t)T * w);
    size_t nrows = 2 * pool / rb;
    float *pa = malloc(nrows * hr * 4), *pb = malloc(nrows * hr * 4);
    for (size_t r = 0; r < nrows; r++) {
        kvq_load_row(kvt, (char *)res[0][2] + r * rb, hr, pa + r * hr);
        kvq_load_row(kvt, (char *)res[1][2] + r * rb, hr, pb + r * hr);
    }
    double ep = nmse(pb, pa, nrows * hr), eo = nmse(res[1][3], res[0][3], (size_t)T * qd);
    CHECK_MSG(eq <= 1e-12 && ek <= 1e-12, "mla_rope_kv T=%d w %d: NMSE q %g latent %g", T, w, eq, ek);
    CHECK_MSG(ep <= (kvt == KV_F32 ? 1e-12 : 1e-6), "mla_rope_kv T=%d kv %s w %d: pool NMSE %g", T, kvq_name(kvt), w, ep);
    CHECK_MSG(eo <= 1e-10, "latent attention T=%d kv %s w %d nh %d window %d long %d: NMSE %g", T, kvq_name(kvt), w,
              nh, window, long_ctx, eo);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 4; i++) free(res[b][i]);
    free(pa), free(pb), free(q), free(kv), free(cs), free(sn), free(kv0), free(row);
}

/* the MLA cases, each width on its own pair of backends (scratch sized for it) */
static void test_mla_all(void) {
    static const struct { int w, rope; } widths[] = {{40, 8}, {80, 16}, {576, 64}};
    for (int wi = 0; wi < 3; wi++) {
        int w = widths[wi].w, rope = widths[wi].rope;
        backend_options bo;
        memset(&bo, 0, sizeof bo);
        bo.n_threads = 1, bo.max_cols = 512, bo.max_tokens = 64, bo.n_heads = 16, bo.n_kv_heads = 1, bo.head_dim = w;
        bo.max_positions = 2048;
        backend cpu = {0}, vk = {0};
        xllm_error err;
        CHECK_MSG(backend_create(&cpu, "cpu", &bo, &err) == XLLM_OK, "%s", err.message);
        CHECK_MSG(backend_create(&vk, "vulkan", &bo, &err) == XLLM_OK, "%s", err.message);
        if (!cpu.ops || !vk.ops) return;
        CHECK(vk.ops->supports(vk.ctx, BE_FEAT_MLA, w) && vk.ops->mla_rope_kv);
        const int Ts[] = {1, 3, 17, 64};
        if (w == 40) { /* the deepseek2 fixture's shape (4 heads, rope 8); q8 cannot store half-rows of 20 */
            for (int j = 0; j < 4; j++) test_mla(&cpu, &vk, Ts[j], j % 2 ? KV_F16 : KV_F32, w, rope, 4, 0, 0);
            test_mla(&cpu, &vk, 17, KV_F32, w, rope, 3, 5, 0);
            test_mla(&cpu, &vk, 64, KV_F16, w, rope, 16, 0, 1);
        } else if (w == 80) { /* every KV storage, split attention, a window across a segment cut */
            const kv_dtype kvs[] = {KV_F32, KV_F16, KV_Q8};
            for (int k = 0; k < 3; k++) test_mla(&cpu, &vk, Ts[k + 1], kvs[k], w, rope, 16, 0, 0);
            for (int j = 0; j < 4; j++) test_mla(&cpu, &vk, Ts[j], kvs[j % 3], w, rope, j % 2 ? 3 : 8, 0, 1);
            test_mla(&cpu, &vk, 17, KV_Q8, w, rope, 4, 700, 1);
        } else { /* DeepSeek-V2/V3's width: the shader's widest row */
            test_mla(&cpu, &vk, 1, KV_F16, w, rope, 16, 0, 1);
            test_mla(&cpu, &vk, 3, KV_Q8, w, rope, 4, 0, 0);
            test_mla(&cpu, &vk, 17, KV_F16, w, rope, 16, 0, 1); /* split: partials of 578-float rows */
            CHECK(!vk.ops->supports(vk.ctx, BE_FEAT_MLA, w + 2)); /* wider: refused at load */
            /* the partials at own_bytes' bound exactly: one decode token at
             * 600 keys (2 segments) on a backend of one token at most, bound
             * for contexts of 1024 keys (2 segments): 2 slots of 16 x (576 +
             * 2) floats. A bound from a narrower row (the KV pool's w / 2,
             * the query's nope + rope) would fall short. */
            backend_options bo1 = bo;
            bo1.max_tokens = 1;
            backend vk1 = {0};
            CHECK_MSG(backend_create(&vk1, "vulkan", &bo1, &err) == XLLM_OK, "%s", err.message);
            if (vk1.ops) {
                test_mla(&cpu, &vk1, 1, KV_F16, w, rope, 16, 0, 2);
                size_t bound = vk1.ops->own_bytes(vk1.ctx, 16, 1024), held = vulkan_own_bytes_held(&vk1);
                CHECK_MSG(held > 0 && held <= bound, "mla w %d, one token: own memory %zu bytes held, %zu promised", w,
                          held, bound);
                size_t part = (size_t)2 * 16 * (w + 2) * sizeof(float);
                CHECK_MSG(vk1.ops->own_bytes(vk1.ctx, 16, 512) + part == bound,
                          "mla w %d: the bound for 1024 keys is not 512 keys' plus 2 slots of %zu bytes", w, part / 2);
                backend_destroy(&vk1);
            }
        }
        {   /* this width's backend: its own memory within what own_bytes promised */
            size_t bound = vk.ops->own_bytes(vk.ctx, 4, 2048), held = vulkan_own_bytes_held(&vk);
            CHECK_MSG(held > 0 && held <= bound, "mla w %d: own memory %zu bytes held, %zu promised", w, held, bound);
        }
        backend_destroy(&vk);
        backend_destroy(&cpu);
    }
}

int main(void) {
    char *devs = vulkan_describe_devices();
    if (!devs || !strstr(devs, "vulkan device 0:")) {
        fprintf(stderr, "SKIP test_vulkan_ops: no Vulkan device here (%s)", devs ? devs : "?\n");
        xllm_free(devs);
        return 77;
    }
    xllm_free(devs);
    setenv("XLLM_VULKAN_VALIDATE", "1", 1);
    backend_options bo;
    memset(&bo, 0, sizeof bo);
    bo.n_threads = 1, bo.max_cols = 512, bo.max_tokens = 64, bo.n_heads = 4, bo.n_kv_heads = 2, bo.head_dim = 32;
    bo.max_positions = 2048; /* the long-context attention tests reach 1164 */
    xllm_error err;
    CHECK_MSG(backend_create(&g_cpu, "cpu", &bo, &err) == XLLM_OK, "%s", err.message);
    CHECK_MSG(backend_create(&g_vk, "vulkan", &bo, &err) == XLLM_OK, "%s", err.message);
    if (!g_vk.ops) return test_report("test_vulkan_ops");
    setenv("XLLM_VULKAN_INT_DOT", "0", 1); /* a second one without int8 dot products */
    setenv("XLLM_VULKAN_ATTN_GROUP", "0", 1); /* and one head per decode attention workgroup */
    CHECK_MSG(backend_create(&g_vk_nodot, "vulkan", &bo, &err) == XLLM_OK, "%s", err.message);
    unsetenv("XLLM_VULKAN_INT_DOT");
    unsetenv("XLLM_VULKAN_ATTN_GROUP");
    if (!g_vk_nodot.ops) return test_report("test_vulkan_ops");
    {   /* the planner's report says whether int8 dot products are in use (lavapipe: yes, emulated) */
        cJSON *rep = NULL;
        CHECK(g_vk.ops->plan(g_vk.ctx, NULL, 0, 64, 0, &rep, &err) == XLLM_OK && rep);
        const cJSON *d = cJSON_GetObjectItem(rep, "int8_dot");
        fprintf(stderr, "int8 dot products: %s\n", cJSON_IsTrue(d) ? "yes" : "no (the fallback path runs twice)");
        cJSON_Delete(rep);
        CHECK(g_vk_nodot.ops->plan(g_vk_nodot.ctx, NULL, 0, 64, 0, &rep, &err) == XLLM_OK && rep);
        CHECK(cJSON_IsFalse(cJSON_GetObjectItem(rep, "int8_dot")));
        cJSON_Delete(rep);
    }

    const int Ts[] = {1, 3, 17, 64};
    struct { dtype_t t; int g; } types[] = {{XLLM_DT_F32, 0}, {XLLM_DT_F16, 0}, {XLLM_DT_BF16, 0}, {XLLM_DT_Q8, 32},
                                               {XLLM_DT_Q4, 32}, {XLLM_DT_Q4M, 32}, {XLLM_DT_Q4, 64}, {XLLM_DT_Q4M, 128}};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        for (int j = 0; j < 4; j++) {
            int64_t cols = types[i].g == 128 ? 384 : 160 + (types[i].g == 64 ? 32 : 0);
            test_matmul(types[i].t, types[i].g, Ts[j], 67, cols, j % 2, j >= 2);
        }
    test_matmul(XLLM_DT_Q8, 32, 1, 5, 512, 1, 0); /* more columns than threads x 32 */
    /* float rows of odd widths (not a multiple of 4 or of the 64 lanes), and more columns than lanes */
    test_matmul(XLLM_DT_F32, 0, 3, 19, 45, 1, 0);
    test_matmul(XLLM_DT_F16, 0, 17, 19, 54, 0, 1);
    test_matmul(XLLM_DT_BF16, 0, 1, 19, 37, 1, 0);
    test_matmul(XLLM_DT_F16, 0, 1, 7, 1096, 0, 0);
    int n_kq = 0;
    for (int t = XLLM_DT_Q5_0; t <= XLLM_DT_IQ4_XS; t++)
        if (kq_can_quantize((dtype_t)t)) {
            n_kq++;
            test_matmul_kq((dtype_t)t, 1);
            test_matmul_kq((dtype_t)t, 17);
        }
    CHECK(n_kq >= 5);
    /* what the backend refuses: a clear error at upload, not a crash */
    matrix K;
    memset(&K, 0, sizeof K);
    K.dtype = XLLM_DT_I32, K.group = 0, K.rows = 2, K.cols = 256;
    void *st = NULL;
    CHECK(g_vk.ops->upload_matrix(g_vk.ctx, &K, &st, &err) == XLLM_ERR_UNSUPPORTED && strstr(err.message, "I32"));
    CHECK(g_vk.ops->supports(g_vk.ctx, BE_FEAT_COUNT, 0) == 0); /* a feature newer than the backend: refused */
    CHECK(g_vk.ops->supports(g_vk.ctx, BE_FEAT_WEIGHT_DTYPE, XLLM_DT_I32) == 0);

    for (int j = 0; j < 4; j++) test_simple(Ts[j]);
    const kv_dtype kvs[] = {KV_F32, KV_F16, KV_Q8};
    for (int j = 0; j < 4; j++)
        for (int k = 0; k < 3; k++) test_attention(Ts[j], kvs[k], k == 1 ? 5 : 0, j % 2, 0, 0);
    /* long contexts (split attention and its combine pass), a window across a
     * segment cut, Gemma's scale and soft-cap, OLMo 2's whole-projection norm */
    for (int j = 0; j < 4; j++) test_attention(Ts[j], kvs[j % 3], 0, j % 2, 1, 0);
    test_attention(17, KV_F32, 700, 0, 1, 0);
    test_attention(64, KV_F16, 0, 1, 1, 1);
    test_attention(3, KV_F32, 5, 1, 0, 1);
    test_attention(17, KV_F32, 0, 2, 0, 0);
    test_mla_all();
    {   /* the backend's own memory (ring, staging, scratch, split attention's
         * partials after the long contexts) within what own_bytes promised
         * for these shapes (blocks of 4 and 16 tokens, contexts to 2048) */
        size_t bound = g_vk.ops->own_bytes(g_vk.ctx, 4, 2048), held = vulkan_own_bytes_held(&g_vk);
        CHECK_MSG(held > 0 && held <= bound, "own memory %zu bytes held, %zu promised", held, bound);
        fprintf(stderr, "own memory: %zu bytes held, %zu bound\n", held, bound);
        CHECK(vulkan_own_bytes_held(&g_cpu) == 0);
    }

    backend_destroy(&g_vk);
    backend_destroy(&g_vk_nodot);
    backend_destroy(&g_cpu);
    long msgs = vulkan_validation_messages();
    CHECK_MSG(msgs == 0, "%ld messages from the Vulkan validation layer", msgs);
    return test_report("test_vulkan_ops");
}
