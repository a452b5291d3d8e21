/*
 * test_backend.c - the backend boundary (src/backend/backend.h):
 *  - a backend is chosen by name; an unknown name is XLLM_ERR_UNSUPPORTED
 *    naming the known ones, from backend_create and from xllm_model_load;
 *  - a second backend plugs in without touching src/model: a backend
 *    registered here ("relay") forwards every entry to the CPU backend's
 *    table but declares separate device memory (unified_memory = 0), so the
 *    model layer must read the logits back through copy(). Models of the
 *    dense and MoE families give bit for bit the CPU backend's logits through
 *    it, and every operation the model layer needs is seen going through the
 *    table (allocation, upload, copies both ways, embed, norms, matmuls,
 *    q/k/v + RoPE + KV write, attention, MoE).
 */
#include "test.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "xllm.h"

#include <stdlib.h>
#include <string.h>

enum { C_ALLOC, C_H2D, C_D2H, C_D2D, C_UPLOAD, C_EMBED, C_ROPE_TABLES, C_RMSNORM, C_MATMUL, C_SILU_FUSED, C_SILU,
       C_ADD, C_COPY_ROWS, C_QKV, C_ROPE_KV, C_ATTN, C_MOE, C_COUNT };
static const char *k_names[C_COUNT] = {"alloc", "copy h2d", "copy d2h", "copy d2d", "upload_matrix", "embed",
                                       "rope_tables", "rmsnorm", "matmul", "matmul_silu_mul", "silu_mul", "add",
                                       "copy_rows", "qkv_rope_kv", "rope_kv", "attention", "moe"};
static long g_count[C_COUNT];

typedef struct {
    backend inner; /* a CPU backend doing the work */
} relay;

#define IN(ctx) (((relay *)(ctx))->inner)
#define FWD(entry, ...) IN(ctx).ops->entry(IN(ctx).ctx, __VA_ARGS__)

static void r_destroy(void *ctx) {
    backend_destroy(&IN(ctx));
    free(ctx);
}
static const char *r_describe(const void *ctx) { (void)ctx; return "relay"; }
static void *r_alloc(void *ctx, size_t bytes) { g_count[C_ALLOC]++; return FWD(alloc, bytes); }
static void r_free(void *ctx, void *p) { FWD(free, p); }
static void r_copy(void *ctx, void *dst, const void *src, size_t bytes, be_copy_kind kind) {
    g_count[kind == BE_HOST_TO_DEVICE ? C_H2D : kind == BE_DEVICE_TO_HOST ? C_D2H : C_D2D]++;
    FWD(copy, dst, src, bytes, kind);
}
static xllm_status r_upload(void *ctx, matrix *W, void **storage, xllm_error *err) {
    g_count[C_UPLOAD]++;
    return FWD(upload_matrix, W, storage, err);
}
static xllm_status r_plan(void *ctx, matrix *const *ws, size_t n, int max_tokens, int budget_ms,
                          struct cJSON **report, xllm_error *err) {
    return FWD(plan, ws, n, max_tokens, budget_ms, report, err);
}
static void r_embed(void *ctx, const matrix *E, const int32_t *tokens, int T, float *x) {
    g_count[C_EMBED]++;
    FWD(embed, E, tokens, T, x);
}
static void r_rope_tables(void *ctx, const int32_t *pos, int T, const double *f, float ts, int half, float *c, float *s) {
    g_count[C_ROPE_TABLES]++;
    FWD(rope_tables, pos, T, f, ts, half, c, s);
}
static void r_rmsnorm(void *ctx, const float *x, const int32_t *rows, int T, const float *w, float eps, int n,
                      float *out, unsigned flags) {
    g_count[C_RMSNORM]++;
    FWD(rmsnorm, x, rows, T, w, eps, n, out, flags);
}
static void r_matmul(void *ctx, const float *x, int T, const matrix *W, const float *bias, float *y, float *tmp,
                     unsigned flags) {
    g_count[C_MATMUL]++;
    FWD(matmul, x, T, W, bias, y, tmp, flags);
}
static int r_silu_fused(void *ctx, const float *x, int T, const matrix *G, int64_t g0, const float *gb,
                        const matrix *U, int64_t u0, const float *ub, int64_t I, float *h, float *tmp, unsigned flags) {
    g_count[C_SILU_FUSED]++;
    return FWD(matmul_silu_mul, x, T, G, g0, gb, U, u0, ub, I, h, tmp, flags);
}
static void r_silu(void *ctx, float *h, const float *g, size_t ldg, const float *u, size_t ldu, int T, size_t n) {
    g_count[C_SILU]++;
    FWD(silu_mul, h, g, ldg, u, ldu, T, n);
}
static void r_add(void *ctx, float *x, const float *y, size_t n) {
    g_count[C_ADD]++;
    FWD(add, x, y, n);
}
static void r_copy_rows(void *ctx, float *d, size_t ldd, const float *s, size_t lds, int T, size_t n) {
    g_count[C_COPY_ROWS]++;
    FWD(copy_rows, d, ldd, s, lds, T, n);
}
static int r_qkv(void *ctx, const be_qkv *d) {
    g_count[C_QKV]++;
    return FWD(qkv_rope_kv, d);
}
static void r_rope_kv(void *ctx, const be_qkv *d) {
    g_count[C_ROPE_KV]++;
    FWD(rope_kv, d);
}
static void r_attention(void *ctx, const be_attn *d) {
    g_count[C_ATTN]++;
    FWD(attention, d);
}
static void r_moe(void *ctx, const be_moe *d) {
    g_count[C_MOE]++;
    FWD(moe, d);
}

static const backend_ops k_relay_ops = {
    .name = "relay", .unified_memory = 0, .destroy = r_destroy, .describe = r_describe, .alloc = r_alloc,
    .free = r_free, .copy = r_copy, .upload_matrix = r_upload, .plan = r_plan, .embed = r_embed,
    .rope_tables = r_rope_tables, .rmsnorm = r_rmsnorm, .matmul = r_matmul, .matmul_silu_mul = r_silu_fused,
    .silu_mul = r_silu, .add = r_add, .copy_rows = r_copy_rows, .qkv_rope_kv = r_qkv, .rope_kv = r_rope_kv,
    .attention = r_attention, .moe = r_moe,
};

static xllm_status relay_create(backend *be, const backend_options *o, xllm_error *err) {
    relay *r = calloc(1, sizeof *r);
    if (!r) return XLLM_ERR_OUT_OF_MEMORY;
    xllm_status st = backend_create(&r->inner, "cpu", o, err);
    if (st) {
        free(r);
        return st;
    }
    be->ops = &k_relay_ops;
    be->ctx = r;
    return XLLM_OK;
}

#define N_IDS 40

static float *logits(const char *dir, const char *be_name, int no_fuse, int V) {
    xllm_model_options o = xllm_model_options_default();
    o.backend = be_name;
    o.no_plan = 1;
    o.no_fuse = no_fuse;
    o.n_threads = 2;
    o.max_step_tokens = 16; /* chunked: the KV pool is read back across steps */
    xllm_error err;
    xllm_model *m = xllm_model_load(dir, &o, &err);
    CHECK_MSG(m != NULL, "%s on %s: %s", dir, be_name, err.message);
    if (!m) return NULL;
    int32_t ids[N_IDS];
    for (int i = 0; i < N_IDS; i++) ids[i] = i ? 3 + (i * 37) % 500 : 1;
    float *out = malloc(sizeof(float) * N_IDS * (size_t)V);
    xllm_status st = xllm_model_logits(m, ids, N_IDS, 1, out, &err);
    CHECK_MSG(st == XLLM_OK, "%s on %s: %s", dir, be_name, err.message);
    xllm_model_free(m);
    if (st) free(out), out = NULL;
    return out;
}

int main(void) {
    xllm_error err;
    backend be;
    backend_options bo = {0};
    bo.n_threads = 1, bo.max_cols = 64, bo.max_tokens = 4;
    CHECK(backend_create(&be, "nope", &bo, &err) == XLLM_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.message, "'nope'") && strstr(err.message, "cpu"), "%s", err.message);
    CHECK(backend_create(&be, NULL, &bo, &err) == XLLM_OK && be.ops && !strcmp(be.ops->name, "cpu"));
    backend_destroy(&be);

    char dir[512];
    snprintf(dir, sizeof dir, "%s/models/stories260k", XLLM_SOURCE_DIR);
    xllm_model_options o = xllm_model_options_default();
    o.backend = "nope";
    CHECK(xllm_model_load(dir, &o, &err) == NULL && err.code == XLLM_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.message, "known: cpu") != NULL, "%s", err.message);

    CHECK(backend_register("relay", relay_create, &err) == XLLM_OK);
    CHECK(backend_register("relay", relay_create, &err) == XLLM_ERR_INVALID_ARGUMENT);
    CHECK(strstr(backend_names(), "relay") != NULL);

    /* a backend without an operation a family needs (the relay: no gelu_mul) refuses it at load */
    snprintf(dir, sizeof dir, "%s/tests/data/archs/gemma2/model.gguf", XLLM_SOURCE_DIR);
    o.backend = "relay";
    CHECK(xllm_model_load(dir, &o, &err) == NULL && err.code == XLLM_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.message, "gelu_mul") != NULL, "gemma2: %s", err.message);

    const char *models[] = {"models/stories260k", "tests/data/tiny/qwen3", "tests/data/tiny/qwen2_moe",
                            "tests/data/tiny/mixtral"};
    const int V = 512;
    for (size_t i = 0; i < sizeof models / sizeof *models; i++)
        for (int no_fuse = 0; no_fuse < 2; no_fuse++) {
            snprintf(dir, sizeof dir, "%s/%s", XLLM_SOURCE_DIR, models[i]);
            memset(g_count, 0, sizeof g_count);
            float *a = logits(dir, "cpu", no_fuse, V), *b = logits(dir, "relay", no_fuse, V);
            CHECK_MSG(a && b && !memcmp(a, b, sizeof(float) * N_IDS * V), "%s (no_fuse %d): relay differs from cpu",
                      models[i], no_fuse);
            int moe = strstr(models[i], "moe") || strstr(models[i], "mixtral");
            int want[] = {C_ALLOC, C_H2D, C_D2H, C_UPLOAD, C_EMBED, C_ROPE_TABLES, C_RMSNORM, C_MATMUL, C_ATTN,
                          moe ? C_MOE : no_fuse ? C_SILU : C_SILU_FUSED, no_fuse ? C_ROPE_KV : C_QKV,
                          no_fuse ? C_ADD : C_MATMUL};
            for (size_t k = 0; k < sizeof want / sizeof *want; k++)
                CHECK_MSG(g_count[want[k]] > 0, "%s (no_fuse %d): no %s went through the table", models[i], no_fuse,
                          k_names[want[k]]);
            free(a);
            free(b);
        }
    return test_report("test_backend");
}
