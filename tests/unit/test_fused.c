/*
 * test_fused.c - the fused forward-pass operators give the unfused bits.
 *
 * Backend level, for every kernel level this machine runs and 1..3 threads,
 * on Q8 / Q4 / Q4M / F32 / F16 matrices with biases, T = 1, 3, 17, 300:
 *  - op_matmul_ex(OP_ADD): y += x W^T + bias equals op_matmul then a
 *    separate residual loop;
 *  - op_rmsnorm_act with the activations prepared, then OP_ACT_READY matmuls
 *    (several over the same x): equal to op_rmsnorm then op_matmul each;
 *  - op_matmul_silu_mul over a fused gate|up matrix (up rows at I) and over
 *    separate gate / up matrices: equal to op_matmul then op_silu_mul;
 *  - op_matmul_rows over sub-ranges of rows and of tokens: equal to the same
 *    rows of op_matmul.
 * Model level: logits at every position, fused (the default) against
 * XLLM_FUSE=0, compared with memcmp, for the tiny llama / mistral / qwen2
 * (q/k/v bias) / qwen3 (q/k norm) / qwen2_moe (shared expert) / qwen3_moe /
 * mixtral checkpoints, stories260k (head_dim 8, intermediate 172) and its
 * GGUF file (interleaved RoPE pairs), each as given (f32, separate matrices)
 * and converted to .xllm q8 / q4 / f16 (fused qkv and gate_up), q8 and q4m
 * unfused; steps of 1 token (decode-shaped), 7 tokens and all at once, on 2
 * threads, at the best kernel level and the scalar one (sanitized builds: the
 * best level only). The per-operator
 * profile must show the fused operators in use (and none with XLLM_FUSE=0),
 * batched greedy generation must give the same tokens, and a calibrated q4
 * conversion (the observe hooks read xn and h) the same file.
 */
#include "test.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "base/alloc.h"
#include "base/file.h"
#include "format/safetensors.h"
#include "format/xllm_file.h"
#include "quant/quant.h"
#include "xllm.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SRC XLLM_SOURCE_DIR

static unsigned g_seed = 777;
static unsigned rnd(void) {
    g_seed = g_seed * 1664525u + 1013904223u;
    return g_seed >> 8;
}
static float frand(void) { return (float)(rnd() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; }

/* ------------------------------------------------------------ backend ops */

typedef struct {
    matrix W;
    void *data;
} test_matrix;

static void make_matrix(test_matrix *m, dtype_t t, int64_t rows, int64_t cols) {
    memset(m, 0, sizeof *m);
    m->W.dtype = t;
    m->W.group = dtype_is_quant(t) ? 32 : 0;
    m->W.rows = rows;
    m->W.cols = cols;
    size_t rb = dtype_is_quant(t) ? quant_row_bytes(t, 32, cols) : (size_t)cols * dtype_size(t);
    unsigned char *p = malloc(rb * (size_t)rows);
    float *row = malloc(sizeof(float) * (size_t)cols);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) row[c] = frand() * 0.2f;
        unsigned char *dst = p + (size_t)r * rb;
        if (dtype_is_quant(t)) quant_quantize_row(t, 32, row, cols, NULL, dst);
        else if (t == XLLM_DT_F16)
            for (int64_t c = 0; c < cols; c++) ((uint16_t *)dst)[c] = f32_to_f16(row[c]);
        else memcpy(dst, row, sizeof(float) * (size_t)cols);
    }
    free(row);
    m->data = p;
    m->W.data = p;
}

static float *rand_vec(size_t n, float scale) {
    float *v = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) v[i] = frand() * scale;
    return v;
}

#define SAME(a, b, n, ...) CHECK_MSG(!memcmp((a), (b), sizeof(float) * (size_t)(n)), __VA_ARGS__)

typedef struct {
    cpu_backend *be;
    const float *x;
    int T;
    const matrix *W;
    float *y;
    int64_t r0, r1;
} rows_ctx;

static void rows_task(void *p, size_t u0, size_t u1, int thread) {
    rows_ctx *c = p;
    for (size_t u = u0; u < u1; u++) {
        int64_t a = c->r0 + (int64_t)u * 8, b = a + 8 < c->r1 ? a + 8 : c->r1;
        size_t ld = (size_t)(c->r1 - c->r0);
        /* tokens in blocks of 5 (from token t0 on, as the fused tasks call it) */
        for (int t0 = 0; t0 < c->T; t0 += 5)
            op_matmul_rows(c->be, c->x, t0, c->T - t0 < 5 ? c->T - t0 : 5, c->W, NULL, a, b,
                           c->y + (size_t)t0 * ld + (size_t)(a - c->r0), ld, thread);
    }
}

static void check_ops(const cpu_kernels *k, int threads, dtype_t t, int T) {
    const char *lv = k->name, *tn = dtype_name(t);
    cpu_backend be;
    xllm_error err;
    int64_t H = 96, I = 52; /* I: up rows of a fused gate|up start at 52, a multiple of 4 */
    if (backend_init_kernels(&be, threads, 256, 300, k, &err)) {
        CHECK_MSG(0, "backend_init: %s", err.message);
        return;
    }
    test_matrix o, gu, g, u;
    make_matrix(&o, t, H, H);
    make_matrix(&gu, t, 2 * I, H);
    make_matrix(&g, t, I, H);
    make_matrix(&u, t == XLLM_DT_Q4 ? XLLM_DT_Q8 : t, I, H); /* mixed gate/up types when Q4 */
    float *x = rand_vec((size_t)T * H, 1.0f), *nw = rand_vec((size_t)H, 1.0f), *bias = rand_vec((size_t)(2 * I), 0.5f);
    float *res = rand_vec((size_t)T * H, 1.0f);
    size_t big = (size_t)T * (size_t)(2 * I + H);
    float *y0 = malloc(sizeof(float) * big), *y1 = malloc(sizeof(float) * big), *tmp = malloc(sizeof(float) * big);
    float *xn0 = malloc(sizeof(float) * (size_t)T * H), *xn1 = malloc(sizeof(float) * (size_t)T * H);

    /* residual folded into the matmul */
    memcpy(y0, res, sizeof(float) * (size_t)T * H);
    op_matmul(&be, x, T, &o.W, bias, tmp);
    for (size_t i = 0; i < (size_t)T * H; i++) y0[i] += tmp[i];
    memcpy(y1, res, sizeof(float) * (size_t)T * H);
    op_matmul_ex(&be, x, T, &o.W, bias, y1, tmp, OP_ADD);
    SAME(y0, y1, T * H, "%s %s T=%d threads=%d: OP_ADD differs from matmul + residual", lv, tn, T, threads);

    /* rmsnorm + prepared activations, used by several matmuls */
    op_rmsnorm(x, nw, 1e-5f, (int)H, T, xn0, 0);
    op_rmsnorm_act(&be, x, nw, 1e-5f, (int)H, T, xn1, 1);
    SAME(xn0, xn1, T * H, "%s T=%d: op_rmsnorm_act's rows differ from op_rmsnorm", lv, T);
    op_matmul_ex(&be, xn1, T, &o.W, NULL, y1, NULL, OP_ACT_READY);
    op_matmul_ex(&be, xn1, T, &gu.W, bias, y1 + (size_t)T * H, NULL, OP_ACT_READY);
    op_matmul(&be, xn0, T, &gu.W, bias, y0 + (size_t)T * H);
    op_matmul(&be, xn0, T, &o.W, NULL, y0);
    SAME(y0, y1, T * (H + 2 * I), "%s %s T=%d threads=%d: OP_ACT_READY matmuls differ", lv, tn, T, threads);
    CHECK_MSG(!dtype_is_quant(o.W.dtype) || be.act_norm_need, "%s %s: the norms did not learn what to prepare",
              lv, tn);

    /* gate|up + silu * up, fused matrix */
    op_matmul(&be, x, T, &gu.W, NULL, tmp);
    for (int tt = 0; tt < T; tt++) {
        memcpy(y0 + (size_t)tt * I, tmp + (size_t)tt * 2 * I, sizeof(float) * (size_t)I);
        op_silu_mul(y0 + (size_t)tt * I, tmp + (size_t)tt * 2 * I + I, (size_t)I, 0);
    }
    op_matmul_silu_mul(&be, x, T, &gu.W, 0, NULL, &gu.W, I, NULL, I, y1, tmp, 0);
    SAME(y0, y1, T * I, "%s %s T=%d threads=%d: fused gate_up + silu differs", lv, tn, T, threads);
    /* separate gate / up with biases, activations prepared by the norm */
    op_matmul(&be, xn0, T, &g.W, bias, y0);
    op_matmul(&be, xn0, T, &u.W, bias + I, tmp);
    op_silu_mul(y0, tmp, (size_t)T * (size_t)I, 0);
    op_rmsnorm_act(&be, x, nw, 1e-5f, (int)H, T, xn1, 1);
    op_matmul_silu_mul(&be, xn1, T, &g.W, 0, bias, &u.W, 0, bias + I, I, y1, tmp, OP_ACT_READY);
    SAME(y0, y1, T * I, "%s %s T=%d threads=%d: gate/up + silu differs", lv, tn, T, threads);

    /* rows [12, 2I - 3) of gate_up through tasks of 8 rows */
    op_matmul(&be, x, T, &gu.W, NULL, y0);
    const matrix *Wgu = &gu.W;
    op_act_prepare(&be, x, T, &Wgu, 1, 0);
    rows_ctx rc = {&be, x, T, &gu.W, y1, 12, 2 * I - 3};
    op_run(&be, (size_t)((rc.r1 - rc.r0 + 7) / 8), 1, rows_task, &rc);
    int same = 1;
    for (int tt = 0; tt < T; tt++)
        same &= !memcmp(y0 + (size_t)tt * 2 * I + 12, y1 + (size_t)tt * (size_t)(rc.r1 - rc.r0),
                        sizeof(float) * (size_t)(rc.r1 - rc.r0));
    CHECK_MSG(same, "%s %s T=%d threads=%d: op_matmul_rows differs from op_matmul", lv, tn, T, threads);

    free(x), free(nw), free(bias), free(res), free(y0), free(y1), free(tmp), free(xn0), free(xn1);
    free(o.data), free(gu.data), free(g.data), free(u.data);
    backend_free(&be);
}

static void check_backend_ops(void) {
    const cpu_kernels *levels[8];
    int n = cpu_kernels_all(levels, 8);
    dtype_t types[] = {XLLM_DT_Q8, XLLM_DT_Q4, XLLM_DT_Q4M, XLLM_DT_F32, XLLM_DT_F16};
    int Ts[] = {1, 3, 17, 300}; /* 300: fused tasks work in several row chunks */
    for (int l = 0; l < n; l++)
        for (int th = 1; th <= 3; th++)
            for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
                for (size_t k = 0; k < sizeof Ts / sizeof *Ts; k++) check_ops(levels[l], th, types[ti], Ts[k]);
}

/* ---------------------------------------------------------------- models */

static char g_dir[64];
enum { N_IDS = 300 }; /* at once: several kernel calls per fused task */
static int32_t g_ids[N_IDS];

/* How many profile entries name a fused operator, and whether op+fused is among them. */
static int profile_fused(const char *op, const char *fused, int *any) {
    char *json;
    xllm_error err;
    *any = 0;
    if (xllm_profile_report(&json, &err)) return 0;
    cJSON *root = cJSON_Parse(json);
    xllm_free(json);
    int found = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "ops")) {
        const cJSON *f = cJSON_GetObjectItem(e, "fused");
        if (!cJSON_IsString(f)) continue;
        (*any)++;
        if (!strcmp(cJSON_GetObjectItem(e, "op")->valuestring, op) && (!fused || !strcmp(f->valuestring, fused))) found = 1;
    }
    cJSON_Delete(root);
    return found;
}

static xllm_model *load(const char *path, int fuse, const char *cpu, int step) {
    xllm_model_options o = xllm_model_options_default();
    o.no_fuse = !fuse;
    o.cpu_level = cpu;
    o.no_plan = 1; /* the thread split never changes bits; keep loads fast */
    o.n_threads = 2;
    o.max_context = 320;
    o.max_step_tokens = step;
    xllm_error err;
    xllm_model *m = xllm_model_load(path, &o, &err);
    CHECK_MSG(m != NULL, "%s: %s", path, err.message);
    return m;
}

static float *logits(const char *path, int fuse, const char *cpu, int step, int quant, int moe_only, size_t *V) {
    xllm_model *m = load(path, fuse, cpu, step);
    if (!m) return NULL;
    *V = (size_t)xllm_model_vocab_size(m);
    float *out = malloc(sizeof(float) * N_IDS * *V);
    xllm_error err;
    xllm_profile_reset();
    xllm_profile_enable(1);
    CHECK_MSG(xllm_model_logits(m, g_ids, N_IDS, 1, out, &err) == XLLM_OK, "%s: %s", path, err.message);
    xllm_profile_enable(0);
    int any;
    if (fuse) {
        CHECK_MSG(profile_fused("matmul.qkv", "rope+kv_write", &any), "%s: fused q/k/v not used", path);
        CHECK_MSG(profile_fused("matmul.o", "residual", &any), "%s: fused o + residual not used", path);
        if (!moe_only) {
            CHECK_MSG(profile_fused("matmul.gate_up", "silu_mul", &any), "%s: fused gate/up + silu not used", path);
            CHECK_MSG(profile_fused("matmul.down", "residual", &any), "%s: fused down + residual not used", path);
        }
        if (quant) CHECK_MSG(profile_fused("rmsnorm", "act_quant", &any), "%s: rmsnorm + act_quant not used", path);
    } else {
        profile_fused("", NULL, &any);
        CHECK_MSG(any == 0, "%s: XLLM_FUSE=0 still ran %d fused operators", path, any);
    }
    xllm_model_free(m);
    return out;
}

#if defined(__SANITIZE_ADDRESS__)
#define FUSED_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUSED_SANITIZED 1
#endif
#endif
#ifndef FUSED_SANITIZED
#define FUSED_SANITIZED 0
#endif

static void check_model(const char *path, int quant, int moe_only) {
    const char *cpus[] = {NULL, "scalar"};
    int steps[] = {1, 7, 0};
    /* sanitized builds (several times slower, and CI's time is bounded): the
     * best level only; the release build runs the scalar level too */
    const size_t n_cpus = FUSED_SANITIZED ? 1 : 2;
    for (size_t c = 0; c < n_cpus; c++)
        for (size_t s = 0; s < 3; s++) {
            size_t V = 0, V1 = 0;
            float *a = logits(path, 0, cpus[c], steps[s], quant, moe_only, &V);
            float *b = logits(path, 1, cpus[c], steps[s], quant, moe_only, &V1);
            if (a && b)
                CHECK_MSG(V == V1 && !memcmp(a, b, sizeof(float) * N_IDS * V),
                          "%s (cpu %s, step %d): fused logits differ from XLLM_FUSE=0", path, cpus[c] ? cpus[c] : "best",
                          steps[s]);
            free(a), free(b);
        }
    fprintf(stderr, "fused == unfused: %s\n", path);
}

/* Batched greedy generation (chunked prefill mixed with decode) gives the same tokens. */
static void check_generate(const char *path) {
    enum { N = 4 };
    int32_t prompts[N][12];
    xllm_request reqs[N];
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < 3 + 3 * i; k++) prompts[i][k] = g_ids[(k * 7 + i) % N_IDS];
        memset(&reqs[i], 0, sizeof reqs[i]);
        reqs[i].prompt_ids = prompts[i];
        reqs[i].n_prompt_ids = (size_t)(3 + 3 * i);
        reqs[i].params = xllm_sampling_params_default();
        reqs[i].params.do_sample = 0;
        reqs[i].params.max_new_tokens = 12;
        reqs[i].params.ignore_eos = 1;
    }
    xllm_result *res[2] = {NULL, NULL};
    for (int f = 0; f < 2; f++) {
        xllm_model *m = load(path, f, NULL, 5);
        if (!m) return;
        xllm_error err;
        CHECK_MSG(xllm_generate(m, reqs, N, NULL, NULL, &res[f], &err) == XLLM_OK, "%s", err.message);
        xllm_model_free(m);
    }
    if (!res[0] || !res[1]) return;
    for (int i = 0; i < N; i++) {
        int same = res[0][i].n_ids == res[1][i].n_ids;
        for (size_t k = 0; same && k < res[0][i].n_ids; k++) same = res[0][i].ids[k] == res[1][i].ids[k];
        CHECK_MSG(same, "%s: request %d generates differently fused", path, i);
    }
    xllm_results_free(res[0], N);
    xllm_results_free(res[1], N);
}

static const char *tmp_path(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", g_dir, name);
    return p;
}

static int g_calib_no_fuse; /* calibration's forward passes unfused */

static int convert(const char *src, const char *dst, const char *dtype, int no_fuse, const char *calib) {
    xllm_convert_options o = xllm_convert_options_default();
    xllm_model_options mo = xllm_model_options_default();
    mo.no_fuse = g_calib_no_fuse;
    o.calib_model_options = &mo;
    o.dtype = dtype;
    o.no_fuse = no_fuse;
    o.calib_file = calib;
    o.n_threads = 2;
    xllm_error err;
    xllm_status st = xllm_convert(src, dst, &o, &err);
    CHECK_MSG(st == XLLM_OK, "convert %s -> %s: %s", src, dst, err.message);
    return st == XLLM_OK;
}

static void check_source(const char *src, const char *tag, int moe_only) {
    check_model(src, 0, moe_only);
    struct {
        const char *dtype;
        int no_fuse, quant;
    } v[] = {{"q8", 0, 1}, {"q4", 0, 1}, {"f16", 0, 0}, {"q8", 1, 1}, {"q4m", 1, 1}};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        char name[128];
        snprintf(name, sizeof name, "%s-%s%s.xllm", tag, v[i].dtype, v[i].no_fuse ? "-sep" : "");
        const char *dst = tmp_path(name);
        if (!convert(src, dst, v[i].dtype, v[i].no_fuse, NULL)) continue;
        check_model(dst, v[i].quant, moe_only);
        if (i == 0) check_generate(dst);
        unlink(dst);
    }
}

/* Calibration observes xn (attention and MLP inputs) and h (down input): a
 * calibrated conversion is the same file fused or not. */
static void check_calibration(void) {
    const char *text = tmp_path("calib.txt"), *a = tmp_path("cal0.xllm"), *b = tmp_path("cal1.xllm");
    FILE *f = fopen(text, "w");
    for (int i = 0; f && i < 20; i++) fprintf(f, "Once upon a time there was a little girl named Lily. She liked to play.\n");
    if (f) fclose(f);
    g_calib_no_fuse = 1;
    int ok = convert(SRC "/models/stories260k", a, "q4", 0, text);
    g_calib_no_fuse = 0;
    ok &= convert(SRC "/models/stories260k", b, "q4", 0, text);
    /* every tensor the same (the files differ in their creation time) */
    xllm_error err;
    cJSON *ma = NULL, *mb = NULL;
    st_archive *ta = ok ? xf_open(a, &ma, &err) : NULL, *tb = ok ? xf_open(b, &mb, &err) : NULL;
    CHECK_MSG(ta && tb, "calibrated conversions failed");
    if (ta && tb) {
        int same = st_count(ta) == st_count(tb) && st_count(ta) > 0;
        for (size_t i = 0; same && i < st_count(ta); i++) {
            const st_tensor *x = st_at(ta, i), *y = st_at(tb, i);
            same = !strcmp(x->name, y->name) && x->nbytes == y->nbytes && !memcmp(x->data, y->data, x->nbytes);
            if (!same) fprintf(stderr, "tensor %s differs\n", x->name);
        }
        CHECK_MSG(same, "calibrated q4 conversion differs fused");
    }
    st_close(ta), st_close(tb);
    cJSON_Delete(ma), cJSON_Delete(mb);
    unlink(a), unlink(b), unlink(text);
}

int main(void) {
    check_backend_ops();

    snprintf(g_dir, sizeof g_dir, "/tmp/xllm_fused_XXXXXX");
    if (!mkdtemp(g_dir)) {
        CHECK_MSG(0, "mkdtemp");
        return test_report("test_fused");
    }
    for (int i = 0; i < N_IDS; i++) g_ids[i] = i ? 3 + (i * 37) % 500 : 1;
    struct {
        const char *dir, *tag;
        int moe_only;
    } srcs[] = {
        {SRC "/tests/data/tiny/llama", "llama", 0},       {SRC "/tests/data/tiny/mistral", "mistral", 0},
        {SRC "/tests/data/tiny/qwen2", "qwen2", 0},       {SRC "/tests/data/tiny/qwen3", "qwen3", 0},
        {SRC "/tests/data/tiny/qwen2_moe", "qwen2_moe", 1}, {SRC "/tests/data/tiny/qwen3_moe", "qwen3_moe", 1},
        {SRC "/tests/data/tiny/mixtral", "mixtral", 1},   {SRC "/models/stories260k", "stories", 0},
        {SRC "/tests/data/gguf/stories260k.gguf", "stories-gguf", 0},
    };
    for (size_t i = 0; i < sizeof srcs / sizeof *srcs; i++) check_source(srcs[i].dir, srcs[i].tag, srcs[i].moe_only);
    check_calibration();
    rmdir(g_dir);
    return test_report("test_fused");
}
