/*
 * vk_ops.c - the Vulkan backend's operation table (backend.h): each
 * operation records one or a few compute dispatches (shaders/) into the
 * step's command buffer; host inputs (token rows of the embedding, RoPE
 * tables, positions, block tables) go through the ring. Pipelines are
 * created once, at backend creation.
 *
 * What it implements: weights F32, F16, BF16, Q8 / Q4 / Q4M (any group that
 * is a multiple of 32: GGUF's Q8_0, Q4_0, Q4_1 at 32), llama.cpp's other
 * block types unpacked at upload; KV f32, f16, q8; dense (SwiGLU, GeGLU) and
 * mixture-of-experts layers (routing on the host: one wait per MoE layer),
 * q/k norm per head or over the whole projection, GQA, sliding windows, an
 * attention scale and soft-cap, the embedding scale, head_dim up to 512,
 * DeepSeek's multi-head latent attention (vk_mla.c: latent rows up to 576)
 * and its expert routing (sigmoid, selection bias, groups, weight scale,
 * an ungated shared expert).
 * The planner's choices (all bit-neutral): matrix-vector or tiled matmul per
 * batch bucket (vb_plan), int8 dot products when the device has them,
 * attention split over 512-key segments for long contexts (vb_attention).
 * Refused at load: llama.cpp's arithmetic. The fused operations
 * (qkv_rope_kv, matmul_silu_mul) answer 0, so the model layer runs their
 * unfused sequence.
 */
#include "backend/vulkan/vk_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include "backend/moe_route.h"
#include "quant/kquant.h"
#include "quant/quant.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const struct {
    const char *name;
    const uint32_t *code;
    size_t bytes;
} vk_shader_blobs[];

static const char *const k_mm_types[VK_MM_TYPES] = {"f32", "f16", "bf16", "q8", "q4", "q4m", "kq"};
static const char *const k_other_pipes[VK_P_COUNT - VK_P_MM_END] = {"quant_act", "rmsnorm", "rope_kv", "attention",
                                                                    "attn_combine", "eltwise", "mla_rope_kv",
                                                                    "attention_latent"};

/* the shader name of pipeline p ("" for an int8-dot variant of a type that has none) */
static void pipe_name(int p, char *out, size_t n) {
    if (p >= VK_P_MM_END) {
        snprintf(out, n, "%s", k_other_pipes[p - VK_P_MM_END]);
        return;
    }
    int variant = p / VK_MM_TYPES, t = p % VK_MM_TYPES;
    int q = t == VK_P_MM_Q8 || t == VK_P_MM_Q4 || t == VK_P_MM_Q4M;
    static const char *const pre[4] = {"matmul_", "matmul_tiled_", "matmul_dot_", "matmul_tiled_dot_"};
    if (variant >= 2 && !q) out[0] = 0;
    else snprintf(out, n, "%s%s", pre[variant], k_mm_types[t]);
}

#define PC_BYTES 128

static xllm_status make_pipelines(vk_ctx *c, xllm_error *err) {
    VkPushConstantRange pr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, PC_BYTES};
    VkPipelineLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    li.pushConstantRangeCount = 1;
    li.pPushConstantRanges = &pr;
    if (c->f.vkCreatePipelineLayout(c->dev, &li, NULL, &c->layout) != VK_SUCCESS)
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "backend 'vulkan': creating the pipeline layout failed");
    for (int p = 0; p < VK_P_COUNT; p++) {
        char name[64];
        pipe_name(p, name, sizeof name);
        if (!name[0] || (!c->int_dot && strstr(name, "_dot_"))) continue; /* no such variant / no int8 dot here */
        int k = 0;
        while (vk_shader_blobs[k].name && strcmp(vk_shader_blobs[k].name, name)) k++;
        if (!vk_shader_blobs[k].name)
            return err_setf(err, XLLM_ERR_UNSUPPORTED, "backend 'vulkan': shader %s is not in this build", name);
        VkShaderModuleCreateInfo si = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
        si.codeSize = vk_shader_blobs[k].bytes;
        si.pCode = vk_shader_blobs[k].code;
        VkShaderModule mod;
        if (c->f.vkCreateShaderModule(c->dev, &si, NULL, &mod) != VK_SUCCESS)
            return err_setf(err, XLLM_ERR_UNSUPPORTED, "backend 'vulkan': shader %s was refused", name);
        VkComputePipelineCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
        ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
        ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
        ci.stage.module = mod;
        ci.stage.pName = "main";
        ci.layout = c->layout;
        VkResult r = c->f.vkCreateComputePipelines(c->dev, VK_NULL_HANDLE, 1, &ci, NULL, &c->pipes[p]);
        c->f.vkDestroyShaderModule(c->dev, mod, NULL);
        if (r != VK_SUCCESS)
            return err_setf(err, XLLM_ERR_UNSUPPORTED, "backend 'vulkan': building pipeline %s failed (VkResult %d)",
                               name, (int)r);
    }
    return XLLM_OK;
}

/* ------------------------------------------------------------ helpers */

#define A(p) ((uint64_t)vk_addr(c, (p)))

/* a host array into the ring; its device address */
static uint64_t ring_put(vk_ctx *c, const void *data, size_t bytes) {
    VkDeviceAddress a;
    void *h = vk_ring(c, bytes, &a);
    memcpy(h, data, bytes);
    return (uint64_t)a;
}

/* the ring's bytes at device address ra copied into device memory dst */
static void ring_to_device(vk_ctx *c, uint64_t ra, void *dst, size_t bytes) {
    size_t off;
    const vk_alloc *d = vk_find(c, dst, &off);
    if (!d) {
        fprintf(stderr, "xllm vulkan: an output buffer is not device memory of this backend\n");
        abort();
    }
    vk_record_copy(c, c->ring.buf, ra - c->ring.addr, d->buf, off, bytes);
}

static uint64_t groups_of(uint64_t threads) { return (threads + 63) / 64; }

static int pipe_for(dtype_t t) {
    switch (t) {
    case XLLM_DT_F32: return VK_P_MM_F32;
    case XLLM_DT_F16: return VK_P_MM_F16;
    case XLLM_DT_BF16: return VK_P_MM_BF16;
    case XLLM_DT_Q8: return VK_P_MM_Q8;
    case XLLM_DT_Q4: return VK_P_MM_Q4;
    case XLLM_DT_Q4M: return VK_P_MM_Q4M;
    default: return dtype_is_kq(t) ? VK_P_MM_KQ : -1;
    }
}

/* Bytes of one row of W as the backend stores it: llama.cpp's block types in
 * the unpacked layout of matmul.comp's WT_KQ (codes, then a scale and a
 * minimum per 16), the others as stored. */
static size_t vk_row_bytes(const matrix *W) {
    if (dtype_is_kq(W->dtype)) return (size_t)W->cols + (size_t)W->cols / 16 * 8;
    return quant_row_bytes(W->dtype, W->group, W->cols);
}

/* One row of a llama.cpp block type into the WT_KQ layout (kq_unpack_block:
 * weight = d * sc * code - dmin * mn per sub-block of 16 or 32). */
static void kq_unpack_row(dtype_t t, const unsigned char *src, int64_t cols, unsigned char *dst) {
    int be = kq_block_elems(t);
    size_t bb = kq_block_bytes(t);
    int8_t codes[QK_K];
    int16_t sc[16], mn[16];
    float *scale = (float *)(dst + cols), *mins = scale + cols / 16;
    for (int64_t b = 0; b < cols / be; b++) {
        float d, dmin;
        int sub = kq_unpack_block(t, src + (size_t)b * bb, codes, sc, mn, &d, &dmin);
        memcpy(dst + b * be, codes, (size_t)be);
        for (int u = 0; u < be / 16; u++) { /* as kq_dequantize_row: Q5_1 adds its m */
            int k = u * 16 / sub;
            scale[b * be / 16 + u] = d * (float)sc[k];
            mins[b * be / 16 + u] = t == XLLM_DT_Q5_1 ? -dmin : dmin * (float)mn[k];
        }
    }
}

/* --------------------------------------------------------- the table */

static void vb_destroy(void *ctx) {
    vk_ctx *c = ctx;
    vk_close(c);
    xllm_free(c);
}

/* the device and the memory split as it is now (vk_memory_line) */
static const char *vb_describe(const void *ctx) {
    vk_ctx *c = (vk_ctx *)ctx;
    char mem[768];
    vk_memory_line(c, mem, sizeof mem);
    snprintf(c->describe_mem, sizeof c->describe_mem, "%s: %s", c->describe, mem);
    return c->describe_mem;
}

static void *vb_alloc(void *ctx, size_t bytes) { return vk_alloc_device(ctx, bytes); }
static void vb_free(void *ctx, void *p) {
    vk_ctx *c = ctx;
    if (c->qact == p) c->qact_src = NULL;
    vk_free_device(ctx, p);
}
static void *vb_host_alloc(void *ctx, size_t bytes) { return vk_host_alloc(ctx, bytes); }
static void vb_host_free(void *ctx, void *p) { vk_host_free(ctx, p); }
static void vb_copy(void *ctx, void *dst, const void *src, size_t bytes, be_copy_kind kind) {
    vk_copy(ctx, dst, src, bytes, kind);
}

static xllm_status vb_upload_matrix(void *ctx, matrix *W, void **storage, xllm_error *err) {
    vk_ctx *c = ctx;
    *storage = NULL;
    if (pipe_for(W->dtype) < 0)
        return err_setf(err, XLLM_ERR_UNSUPPORTED,
                           "backend 'vulkan' does not implement weights of type %s; use --backend cpu",
                           dtype_name(W->dtype));
    if (dtype_is_quant(W->dtype) && (W->group % 32 || W->cols % 32))
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "backend 'vulkan': quantized rows of %lld with group %d (needs multiples of 32)",
                           (long long)W->cols, W->group);
    if (dtype_is_kq(W->dtype) && W->cols % 256 && W->cols % kq_block_elems(W->dtype))
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "backend 'vulkan': rows of %lld %s weights", (long long)W->cols,
                           dtype_name(W->dtype));
    size_t bytes = (size_t)W->rows * vk_row_bytes(W);
    /* the stored layout: imported in place or copied (vk_weights_place); llama.cpp's blocks: unpacked below */
    int kq = dtype_is_kq(W->dtype);
    void *d = kq ? vk_alloc_device(c, bytes) : vk_weights_place(c, W->data, bytes);
    if (!d)
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "backend 'vulkan': out of device memory for a %lldx%lld %s matrix (%zu bytes; %zu in use)",
                           (long long)W->rows, (long long)W->cols, dtype_name(W->dtype), bytes, c->device_bytes);
    if (dtype_is_kq(W->dtype)) { /* unpacked on the host, row by row, through a bounded buffer */
        size_t rb = vk_row_bytes(W), src_rb = quant_row_bytes(W->dtype, W->group, W->cols);
        size_t per = ((size_t)8 << 20) / rb ? ((size_t)8 << 20) / rb : 1;
        unsigned char *tmp = mem_malloc(per * rb);
        if (!tmp) {
            vk_free_device(c, d);
            return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        }
        for (int64_t r0 = 0; r0 < W->rows; r0 += (int64_t)per) {
            int64_t n = W->rows - r0 < (int64_t)per ? W->rows - r0 : (int64_t)per;
            for (int64_t r = 0; r < n; r++)
                kq_unpack_row(W->dtype, (const unsigned char *)W->data + (size_t)(r0 + r) * src_rb, W->cols,
                              tmp + (size_t)r * rb);
            vk_copy(c, (char *)d + (size_t)r0 * rb, tmp, (size_t)n * rb, BE_HOST_TO_DEVICE);
        }
        xllm_free(tmp);
        vk_weights_copied(c, bytes);
    }
    /* an import reads the model file's pages until the backend closes (it
     * frees the import then): no storage, so the loader keeps those pages */
    const vk_alloc *a = vk_find(c, d, NULL);
    W->data = d;
    W->packed = 1;
    *storage = a && a->imported ? NULL : d;
    return XLLM_OK;
}

static void vb_embed(void *ctx, const matrix *E, const int32_t *tokens, int T, float *x) {
    vk_ctx *c = ctx;
    size_t n = (size_t)E->cols, rb = quant_row_bytes(E->dtype, E->group, E->cols);
    VkDeviceAddress ra;
    float *h = vk_ring(c, (size_t)T * n * sizeof(float), &ra);
    for (int t = 0; t < T; t++) { /* the table stays in host memory (backend.h): rows looked up here */
        const char *p = (const char *)E->data + (size_t)tokens[t] * rb;
        if (dtype_is_quant(E->dtype)) quant_dequantize_row(E->dtype, E->group, p, E->cols, h + (size_t)t * n);
        else dtype_to_f32(E->dtype, p, h + (size_t)t * n, n);
    }
    ring_to_device(c, ra, x, (size_t)T * n * sizeof(float));
}

/* cos / sin on the host (the CPU backend's arithmetic, bit for bit), then to the device */
static void vb_rope_tables(void *ctx, const int32_t *pos, int T, const double *inv_freq, float theta_scale, int half,
                           float *cs, float *sn) {
    vk_ctx *c = ctx;
    size_t n = (size_t)T * (size_t)half;
    VkDeviceAddress ra;
    float *hc = vk_ring(c, 2 * n * sizeof(float), &ra), *hs = hc + n;
    for (int t = 0; t < T; t++) {
        float *co = hc + (size_t)t * half, *so = hs + (size_t)t * half;
        if (theta_scale > 0) {
            float theta = (float)pos[t];
            for (int i = 0; i < half; i++, theta *= theta_scale) co[i] = cosf(theta), so[i] = sinf(theta);
        } else {
            for (int i = 0; i < half; i++) {
                double a = (double)pos[t] * inv_freq[i];
                co[i] = (float)cos(a);
                so[i] = (float)sin(a);
            }
        }
    }
    ring_to_device(c, ra, cs, n * sizeof(float));
    ring_to_device(c, ra + n * sizeof(float), sn, n * sizeof(float));
}

static void vb_rmsnorm(void *ctx, const float *x, const int32_t *rows, int T, const float *w, float eps, int n,
                       float *out, unsigned flags) {
    vk_ctx *c = ctx;
    (void)flags;
    struct {
        uint64_t x, rows, w, out;
        uint32_t T, n, ldx, ldo;
        float eps;
    } pc = {A(x), rows ? ring_put(c, rows, (size_t)T * sizeof(int32_t)) : 0, A(w), A(out), (uint32_t)T,
            (uint32_t)n, (uint32_t)n, (uint32_t)n, eps};
    c->qact_src = NULL; /* what follows may mark its input ready: quantize it afresh */
    vk_dispatch(c, VK_P_RMSNORM, &pc, sizeof pc, (uint64_t)T, 1);
}

/* The activations of x quantized per 32 into c->qact (quant_act.comp). */
static void quantize_act(vk_ctx *c, const float *x, int T, int64_t cols, int ready) {
    if (ready && c->qact_src == x && c->qact_T == T && c->qact_cols == cols) return;
    uint64_t nb = (uint64_t)cols / 32;
    uint64_t qa = A(c->qact), qd = qa + ((uint64_t)c->max_tokens * c->max_cols + 255) / 256 * 256;
    struct {
        uint64_t x, q, d;
        uint32_t T, cols, ldx;
    } pc = {A(x), qa, qd, (uint32_t)T, (uint32_t)cols, (uint32_t)cols};
    vk_dispatch(c, VK_P_QUANT_ACT, &pc, sizeof pc, groups_of((uint64_t)T * nb), 1);
    c->qact_src = x, c->qact_T = T, c->qact_cols = (int)cols;
}

/* The matmul variants (matmul.comp; both give the same bits, so the choice is
 * speed only): the matrix-vector kernel for one token, the tiled one (4 rows x
 * 16 tokens a workgroup) from two. The planner stores the choice per matrix
 * and batch bucket in plan_kernel (vb_plan); XLLM_VULKAN_MATMUL forces one. */
enum { MM_MATVEC = 1, MM_TILED = 2 };

static int mm_rule(int T) { return T <= 1 ? MM_MATVEC : MM_TILED; }

static int mm_kernel(const vk_ctx *c, const matrix *W, int T) {
    if (c->mm_force) return c->mm_force;
    int k = W->plan_kernel[mm_bucket(T)];
    return k == MM_MATVEC || k == MM_TILED ? k : mm_rule(T);
}

typedef struct {
    uint64_t x, xd, w, bias, y;
    uint32_t rows, cols, T, ldx, ldy, add, group, row_bytes;
} mm_pc;

/* y[t][r] (+)= x[t] . W[r0 + r] + bias[r0 + r] for r < rows, y rows ldy apart */
static void matmul_rows(vk_ctx *c, const float *x, int T, const matrix *W, int64_t r0, int64_t rows, const float *bias,
                        float *y, size_t ldy, int add, int ready) {
    int pipe = pipe_for(W->dtype);
    if (pipe < 0 || !W->packed) {
        fprintf(stderr, "xllm vulkan: a %s matrix reached a matmul without upload (refused at load)\n",
                dtype_name(W->dtype));
        abort();
    }
    size_t rb = vk_row_bytes(W);
    mm_pc pc = {0};
    if (dtype_is_quant(W->dtype) && !dtype_is_kq(W->dtype)) {
        quantize_act(c, x, T, W->cols, ready);
        pc.x = A(c->qact);
        pc.xd = pc.x + ((uint64_t)c->max_tokens * c->max_cols + 255) / 256 * 256;
    } else {
        pc.x = A(x);
    }
    pc.w = A(W->data) + (uint64_t)r0 * rb;
    pc.bias = bias ? A(bias + r0) : 0;
    pc.y = A(y);
    pc.rows = (uint32_t)rows, pc.cols = (uint32_t)W->cols, pc.T = (uint32_t)T, pc.ldx = (uint32_t)W->cols;
    pc.ldy = (uint32_t)ldy, pc.add = (uint32_t)add, pc.group = (uint32_t)W->group, pc.row_bytes = (uint32_t)rb;
    int tiled = mm_kernel(c, W, T) == MM_TILED;
    if (tiled) pipe += VK_MM_TYPES;
    if (c->int_dot && c->pipes[pipe + 2 * VK_MM_TYPES]) pipe += 2 * VK_MM_TYPES; /* int8 dot products: same bits */
    if (tiled) vk_dispatch(c, pipe, &pc, sizeof pc, (uint64_t)(rows + 3) / 4, (uint32_t)((T + 15) / 16));
    else vk_dispatch(c, pipe, &pc, sizeof pc, (uint64_t)rows, (uint32_t)((T + 7) / 8));
}

static void vb_matmul(void *ctx, const float *x, int T, const matrix *W, const float *bias, float *y, float *tmp,
                      unsigned flags) {
    (void)tmp;
    matmul_rows(ctx, x, T, W, 0, W->rows, bias, y, (size_t)W->rows, (flags & BE_ADD) != 0, (flags & BE_ACT_READY) != 0);
}

static int vb_matmul_silu_mul(void *ctx, const float *x, int T, const matrix *G, int64_t g0, const float *gb,
                              const matrix *U, int64_t u0, const float *ub, int64_t I, float *h, float *tmp,
                              unsigned flags) {
    (void)ctx, (void)x, (void)T, (void)G, (void)g0, (void)gb, (void)U, (void)u0, (void)ub, (void)I, (void)h, (void)tmp;
    (void)flags;
    return 0; /* no fused form: the model layer runs matmul + silu_mul */
}

typedef struct {
    uint64_t a, b, c;
    uint32_t T, n, lda, ldb, ldc, op;
    float s;
} elt_pc;

static void eltwise(vk_ctx *c, int op, float *a, size_t lda, const float *b, size_t ldb, const float *cc, size_t ldc,
                    int T, size_t n) {
    elt_pc pc = {A(a), A(b), cc ? A(cc) : 0, (uint32_t)T, (uint32_t)n, (uint32_t)lda, (uint32_t)ldb, (uint32_t)ldc,
                 (uint32_t)op, 0.0f};
    vk_dispatch(c, VK_P_ELTWISE, &pc, sizeof pc, groups_of((uint64_t)T * n), 1);
}

static void vb_silu_mul(void *ctx, float *h, const float *g, size_t ldg, const float *u, size_t ldu, int T, size_t n) {
    eltwise(ctx, 1, h, n, g, ldg, u, ldu, T, n);
}

static void vb_gelu_mul(void *ctx, float *h, const float *g, size_t ldg, const float *u, size_t ldu, int T, size_t n) {
    eltwise(ctx, 7, h, n, g, ldg, u, ldu, T, n);
}

static void vb_scale(void *ctx, float *x, size_t n, float s) {
    vk_ctx *c = ctx;
    /* as rows of at most 2^20 so T * n fits the shader's 32-bit index */
    size_t w = n < ((size_t)1 << 20) ? n : ((size_t)1 << 20);
    size_t rows = w ? n / w : 0;
    elt_pc pc = {A(x), A(x), 0, (uint32_t)rows, (uint32_t)w, (uint32_t)w, (uint32_t)w, 0, 8, s};
    if (rows) vk_dispatch(c, VK_P_ELTWISE, &pc, sizeof pc, groups_of((uint64_t)rows * w), 1);
    if (w && n % w) {
        elt_pc r = {A(x + rows * w), A(x + rows * w), 0, 1, (uint32_t)(n % w), 0, 0, 0, 8, s};
        vk_dispatch(c, VK_P_ELTWISE, &r, sizeof r, groups_of(n % w), 1);
    }
}

static void vb_add(void *ctx, float *x, const float *y, size_t n) {
    /* as rows of at most 2^20 so T * n fits the shader's 32-bit index */
    size_t w = n < ((size_t)1 << 20) ? n : ((size_t)1 << 20);
    size_t rows = n / w;
    if (rows) eltwise(ctx, 0, x, w, y, w, NULL, 0, (int)rows, w);
    if (n % w) eltwise(ctx, 0, x + rows * w, 0, y + rows * w, 0, NULL, 0, 1, n % w);
}

static void vb_copy_rows(void *ctx, float *dst, size_t ldd, const float *src, size_t lds, int T, size_t n) {
    eltwise(ctx, 2, dst, ldd, src, lds, NULL, 0, T, n);
}

static int vb_qkv_rope_kv(void *ctx, const be_qkv *d) {
    (void)ctx, (void)d;
    return 0; /* no fused form: matmuls, then rope_kv */
}

static void vb_rope_kv(void *ctx, const be_qkv *d) {
    vk_ctx *c = ctx;
    int T = d->T;
    int whole = d->q_norm && d->qk_norm_all;
    if (whole) { /* OLMo 2: one RMSNorm over each token's whole q and whole k (in place), then RoPE */
        vb_rmsnorm(c, d->q, NULL, T, d->q_norm, d->eps, d->n_heads * d->head_dim, d->q, 0);
        vb_rmsnorm(c, d->k, NULL, T, d->k_norm, d->eps, d->n_kv_heads * d->head_dim, d->k, 0);
    }
    VkDeviceAddress ra;
    int32_t *slots = vk_ring(c, (size_t)T * sizeof(int32_t), &ra);
    for (int t = 0; t < T; t++) {
        const int32_t *table = d->block_tables[d->seq[t]];
        slots[t] = table[d->pos[t] / d->block_size] * d->block_size + d->pos[t] % d->block_size;
    }
    struct {
        uint64_t q, k, v, qn, kn, cs, sn, slots, kc, vc;
        uint32_t T, nh, nkv, hd, interleaved, kvtype, gshift;
        float eps;
        uint32_t rd;
    } pc = {A(d->q), A(d->k), A(d->v), d->q_norm && !whole ? A(d->q_norm) : 0, d->k_norm && !whole ? A(d->k_norm) : 0, A(d->rope_cos),
            A(d->rope_sin), (uint64_t)ra, A(d->k_cache), A(d->v_cache), (uint32_t)T, (uint32_t)d->n_heads,
            (uint32_t)d->n_kv_heads, (uint32_t)d->head_dim, (uint32_t)(d->rope_interleaved != 0), (uint32_t)d->kv_type,
            (uint32_t)(d->kv_type == KV_Q8 ? kvq_group_shift(d->head_dim) : 0), d->eps,
            (uint32_t)(d->rope_dim ? d->rope_dim : d->head_dim)};
    vk_dispatch(c, VK_P_ROPE_KV, &pc, sizeof pc, groups_of((uint64_t)T * (uint64_t)(d->n_heads + 2 * d->n_kv_heads)), 1);
}

#define ATTN_QT 8                          /* queries per tile (attention.comp's QT) */

/* split's partial buffer at least `bytes` (grown: the old one is freed after the recorded work ran) */
int vk_attn_part_reserve(vk_ctx *c, size_t bytes) {
    if (c->attn_part_bytes >= bytes) return 1;
    if (c->attn_part) vk_free_device(c, c->attn_part);
    c->attn_part = vk_alloc_device(c, bytes);
    c->attn_part_bytes = c->attn_part ? bytes : 0;
    return c->attn_part != NULL;
}

int vk_attn_nseg(int first, int end) { return (end - 1) / ATTN_SEG - first / ATTN_SEG + 1; }

int vk_attn_groups(const be_attn *d, int max_group, int32_t *useq, int32_t *umax, int32_t *uoff, int *nu,
                   size_t *total, int32_t *groups) {
    int n = 0, ng = 0;
    for (int t = 0; t < d->T; t++) {
        int u = 0;
        while (u < n && useq[u] != d->seq[t]) u++;
        if (u == n) useq[n] = d->seq[t], umax[n] = d->pos[t], n++;
        else if (d->pos[t] > umax[u]) umax[u] = d->pos[t];
        if (ng && d->seq[groups[2 * (ng - 1)]] == d->seq[t] && groups[2 * (ng - 1) + 1] < max_group)
            groups[2 * (ng - 1) + 1]++;
        else groups[2 * ng] = t, groups[2 * ng + 1] = 1, ng++;
    }
    size_t sum = 0;
    for (int u = 0; u < n; u++) uoff[u] = (int32_t)sum, sum += (size_t)(umax[u] / d->block_size + 1);
    *nu = n, *total = sum;
    return ng;
}

int vk_attn_plan(const be_attn *d, const int32_t *groups, int ng, const int32_t *useq, const int32_t *uoff,
                 size_t cap_slots, int32_t *info, int32_t *pass_start, size_t *most) {
    size_t slots = 0, top = 0;
    int np = 0;
    for (int g = 0; g < ng; g++) {
        size_t group_slots = 0;
        for (int t = groups[2 * g]; t < groups[2 * g] + groups[2 * g + 1]; t++) {
            int pos = d->pos[t], first = d->window > 0 && pos - d->window + 1 > 0 ? pos - d->window + 1 : 0;
            int ns = vk_attn_nseg(first, pos + 1);
            group_slots += ns > 1 ? (size_t)ns : 0;
        }
        if (g == 0 || (slots + group_slots > cap_slots && slots)) pass_start[np++] = g, slots = 0;
        for (int t = groups[2 * g]; t < groups[2 * g] + groups[2 * g + 1]; t++) {
            int u = 0;
            while (useq[u] != d->seq[t]) u++;
            int pos = d->pos[t], first = d->window > 0 && pos - d->window + 1 > 0 ? pos - d->window + 1 : 0;
            int ns = vk_attn_nseg(first, pos + 1);
            info[4 * t] = uoff[u], info[4 * t + 1] = first, info[4 * t + 2] = pos + 1;
            info[4 * t + 3] = ns > 1 ? (int32_t)slots : -1;
            if (ns > 1) slots += (size_t)ns;
        }
        if (slots > top) top = slots;
    }
    pass_start[np] = ng;
    *most = top;
    return np;
}

int vk_attn_pass_segments(const int32_t *groups, int g0, int g1, const int32_t *info, int *split) {
    int maxseg = 1, any = 0;
    for (int g = g0; g < g1; g++) { /* the group's segments: from its lowest first key to its last key */
        int lo = INT32_MAX, hi = 0;
        for (int t = groups[2 * g]; t < groups[2 * g] + groups[2 * g + 1]; t++) {
            lo = info[4 * t + 1] < lo ? info[4 * t + 1] : lo;
            hi = info[4 * t + 2] > hi ? info[4 * t + 2] : hi;
            any |= info[4 * t + 3] >= 0;
        }
        int ns = vk_attn_nseg(lo, hi);
        maxseg = ns > maxseg ? ns : maxseg;
    }
    *split = any;
    return maxseg;
}

/* Heads per workgroup of a one-token (decode) tile: the most heads of one KV
 * group, up to a tile's ATTN_QT queries, that divide the group (GQA: the
 * group's K/V rows are read once for all of them); 1 without GQA or with
 * XLLM_VULKAN_ATTN_GROUP=0. Results are the same bits either way. */
static int attn_heads_per_group(const vk_ctx *c, int n_heads, int n_kv_heads) {
    int g = n_kv_heads > 0 ? n_heads / n_kv_heads : 1, hq = 1;
    if (c->attn_no_group) return 1;
    for (int k = 1; k <= ATTN_QT && k <= g; k++)
        if (g % k == 0) hq = k;
    return hq;
}

/* The most split attention's partial buffer grows to for contexts of at most
 * max_context keys: a pass holds at most ATTN_PART_CAP or one tile's
 * partials, whichever is more, and never more than every token splitting
 * into the most segments. A slot (one token's segment) is n_heads rows of
 * head_dim + 2 floats, for latent attention (vk_mla.c) too: there a row is
 * the latent row (DeepSeek-V2/V3: 576 values), and backend_options.head_dim
 * is that width for an MLA model (model_load.c), so the bound holds; its
 * token groups hold at most MLA_QT (8 = ATTN_QT) tokens, as a tile here. */
static size_t attn_part_bound(const vk_ctx *c, int max_context) {
    int ns = max_context > 0 ? vk_attn_nseg(0, max_context) : 1;
    if (ns <= 1) return 0;
    size_t slot = (size_t)c->n_heads * (size_t)(c->head_dim + 2) * sizeof(float);
    size_t all = c->max_tokens * (size_t)ns * slot, tile = (size_t)ATTN_QT * (size_t)ns * slot;
    size_t pass = tile > ATTN_PART_CAP ? tile : ATTN_PART_CAP;
    return all < pass ? all : pass;
}

/* The largest ring request of vb_attention (per token 4 ints of info and 2
 * of its tile, then each sequence's block table once): T tokens, contexts of
 * at most max_context keys in block_size-token blocks. */
static size_t attn_ring_bound(const vk_ctx *c, int block_size, int max_context) {
    size_t per_seq = block_size > 0 && max_context > 0 ? (size_t)((max_context - 1) / block_size + 1) : 0;
    return c->max_tokens * (6 + per_seq) * sizeof(int32_t);
}

static void vb_attention(void *ctx, const be_attn *d) {
    vk_ctx *c = ctx;
    if (d->latent) { /* multi-head latent attention (DeepSeek): vk_mla.c */
        vk_attention_latent(c, d);
        return;
    }
    int T = d->T;
    /* each sequence's block table once (as far as this batch reaches); query
     * tiles: runs of up to ATTN_QT neighbouring tokens of one sequence; per
     * token its table, keys and partials (tinfo), and the passes, planned on
     * the host first: growing the partials' buffer submits, and a submit
     * resets the ring */
    int32_t *useq = mem_malloc(((size_t)T * 10 + 1) * sizeof(int32_t)), *umax = useq + T, *uoff = umax + T;
    int32_t *tiles = uoff + T /* [nt][2] */, *tinfo = tiles + 2 * (size_t)T /* [T][4] */;
    int32_t *pass_start = tinfo + 4 * (size_t)T; /* [np + 1] */
    if (!useq) {
        fprintf(stderr, "xllm vulkan: out of memory\n");
        abort();
    }
    int nu;
    size_t total;
    int nt = vk_attn_groups(d, ATTN_QT, useq, umax, uoff, &nu, &total, tiles);
    /* passes whose partials fit ATTN_PART_CAP (or one tile, whatever it
     * needs); when one tile alone needs more, the buffer grows to that
     * anyway, so the passes are planned again with that as their cap (fewer
     * passes; vk_mla.c keeps the first plan) */
    size_t slot_bytes = (size_t)d->n_heads * (size_t)(d->head_dim + 2) * sizeof(float);
    size_t cap_slots = ATTN_PART_CAP / slot_bytes, most;
    int np = vk_attn_plan(d, tiles, nt, useq, uoff, cap_slots, tinfo, pass_start, &most);
    if (most > cap_slots) np = vk_attn_plan(d, tiles, nt, useq, uoff, most, tinfo, pass_start, &most);
    size_t need = most * slot_bytes;
    if (need && !vk_attn_part_reserve(c, need)) {
        fprintf(stderr, "xllm vulkan: out of device memory for split attention's partials (%zu bytes)\n", need);
        abort();
    }
    /* one ring request for all (a second could submit and reset the ring under the first) */
    VkDeviceAddress ia;
    int32_t *info = vk_ring(c, ((size_t)T * 4 + (size_t)nt * 2 + total) * sizeof(int32_t), &ia);
    int32_t *rtiles = info + (size_t)T * 4, *tabs = rtiles + (size_t)nt * 2;
    VkDeviceAddress tia = ia + (VkDeviceAddress)T * 4 * sizeof(int32_t);
    VkDeviceAddress ta = tia + (VkDeviceAddress)nt * 2 * sizeof(int32_t);
    memcpy(info, tinfo, (size_t)T * 4 * sizeof(int32_t));
    for (int u = 0; u < nu; u++)
        memcpy(tabs + uoff[u], d->block_tables[useq[u]], (size_t)(umax[u] / d->block_size + 1) * sizeof(int32_t));
    /* in the ring, each pass's tiles of several tokens first (a workgroup
     * per head), then its one-token tiles (a workgroup per hq heads of a KV
     * group); nmulti[ps] counts the first kind */
    int *nmulti = mem_malloc((size_t)(np + 1) * sizeof(int));
    if (!nmulti) {
        fprintf(stderr, "xllm vulkan: out of memory\n");
        abort();
    }
    for (int ps = 0; ps < np; ps++) {
        int k = pass_start[ps];
        for (int i = pass_start[ps]; i < pass_start[ps + 1]; i++)
            if (tiles[2 * i + 1] > 1) rtiles[2 * k] = tiles[2 * i], rtiles[2 * k + 1] = tiles[2 * i + 1], k++;
        nmulti[ps] = k - pass_start[ps];
        for (int i = pass_start[ps]; i < pass_start[ps + 1]; i++)
            if (tiles[2 * i + 1] == 1) rtiles[2 * k] = tiles[2 * i], rtiles[2 * k + 1] = 1, k++;
    }
    int hq = attn_heads_per_group(c, d->n_heads, d->n_kv_heads);
    float scale = d->scale > 0 ? d->scale : 1.0f / sqrtf((float)d->head_dim);
    for (int ps = 0; ps < np; ps++) {
        int i0 = pass_start[ps], i1 = pass_start[ps + 1], t0 = tiles[2 * i0];
        int t1 = tiles[2 * (i1 - 1)] + tiles[2 * (i1 - 1) + 1];
        int split, maxseg = vk_attn_pass_segments(tiles, i0, i1, tinfo, &split);
        struct {
            uint64_t q, out, kc, vc, tables, info, tiles, part;
            uint32_t ntiles, nh, nkv, hd, bs, kvtype, gshift, seg;
            float kscale, softcap;
            uint32_t nmulti, hq;
        } pc = {A(d->q), A(d->out), A(d->k_cache), A(d->v_cache), (uint64_t)ta, (uint64_t)ia,
                (uint64_t)tia + (uint64_t)i0 * 2 * sizeof(int32_t), c->attn_part ? A(c->attn_part) : 0,
                (uint32_t)(i1 - i0), (uint32_t)d->n_heads, (uint32_t)d->n_kv_heads, (uint32_t)d->head_dim,
                (uint32_t)d->block_size, (uint32_t)d->kv_type,
                (uint32_t)(d->kv_type == KV_Q8 ? kvq_group_shift(d->head_dim) : 0), ATTN_SEG,
                d->softcap > 0 ? scale / d->softcap : scale, d->softcap > 0 ? d->softcap : 0.0f,
                (uint32_t)nmulti[ps], (uint32_t)hq};
        uint64_t groups = (uint64_t)nmulti[ps] * (uint64_t)d->n_heads +
                          (uint64_t)(i1 - i0 - nmulti[ps]) * (uint64_t)(d->n_heads / hq);
        vk_dispatch(c, VK_P_ATTENTION, &pc, sizeof pc, groups, (uint32_t)maxseg);
        if (split) {
            struct {
                uint64_t info, part, out;
                uint32_t T, nh, hd, seg;
            } cc = {(uint64_t)ia + (uint64_t)t0 * 4 * sizeof(int32_t), A(c->attn_part), A(d->out) + (uint64_t)t0 * (uint64_t)d->n_heads * (uint64_t)d->head_dim * 4,
                    (uint32_t)(t1 - t0), (uint32_t)d->n_heads, (uint32_t)d->head_dim, ATTN_SEG};
            vk_dispatch(c, VK_P_ATTN_COMBINE, &cc, sizeof cc, (uint64_t)(t1 - t0) * (uint64_t)d->n_heads, 1);
        }
    }
    xllm_free(nmulti);
    xllm_free(useq);
}

/* out = down(silu(gate(x)) * up(x)) for T rows of x (h1, h2: scratch) */
static void moe_swiglu(vk_ctx *c, const be_moe *d, int expert, const float *x, int T, const matrix *gate,
                       const matrix *up, const matrix *down, float *out) {
    int64_t I = gate->rows;
    matmul_rows(c, x, T, gate, 0, I, NULL, d->h1, (size_t)I, 0, 0);
    matmul_rows(c, x, T, up, 0, I, NULL, d->h2, (size_t)I, 0, 1);
    eltwise(c, 1, d->h1, (size_t)I, d->h1, (size_t)I, d->h2, (size_t)I, T, (size_t)I);
    if (d->observe) d->observe(d->octx, expert, d->h1, T, (int)I);
    matmul_rows(c, d->h1, T, down, 0, down->rows, NULL, out, (size_t)down->rows, 0, 0);
}

/* The router on the device, its logits read back (one wait per MoE layer), the
 * routing on the host as the CPU backend does it (softmax, top-k with ties to
 * the lower id; DeepSeek's sigmoid, selection bias, groups and weight scale
 * through moe_route_deepseek, the CPU's own function), then each expert once
 * over its tokens: gather, SwiGLU, and its weighted output added to each
 * token's sum, experts in order; the shared expert gated, or added as it is
 * when the model has no gate (DeepSeek). */
static void vb_moe(void *ctx, const be_moe *d) {
    vk_ctx *c = ctx;
    int T = d->T, E = d->n_experts, K = d->n_used, H = d->hidden;
    matmul_rows(c, d->x, T, d->router, 0, E, NULL, d->router_logits, (size_t)E, 0, 0);
    int deepseek = d->sigmoid || d->sel_bias || d->n_group > 1 || d->w_scale > 0;
    float *rl = mem_malloc((size_t)T * E * sizeof(float) + (size_t)T * K * (sizeof(float) + sizeof(int32_t)) +
                           (d->sel_bias ? (size_t)E * sizeof(float) : 0));
    if (!rl) {
        fprintf(stderr, "xllm vulkan: out of memory\n");
        abort();
    }
    float *rw = rl + (size_t)T * E;
    int32_t *rid = (int32_t *)(rw + (size_t)T * K);
    float *bias = d->sel_bias ? (float *)(rid + (size_t)T * K) : NULL; /* the selection bias: device memory, read back */
    vk_copy(c, rl, d->router_logits, (size_t)T * E * sizeof(float), BE_DEVICE_TO_HOST);
    if (bias) vk_copy(c, bias, d->sel_bias, (size_t)E * sizeof(float), BE_DEVICE_TO_HOST);
    for (int t = 0; t < T; t++) {
        float *r = rl + (size_t)t * E;
        float mx = -INFINITY, sum = 0;
        for (int e = 0; e < E; e++) mx = r[e] > mx ? r[e] : mx;
        if (d->sigmoid) { /* as the CPU backend: 1 / (1 + expf(-x)) */
            for (int e = 0; e < E; e++) r[e] = 1.0f / (1.0f + expf(-r[e]));
        } else {
            for (int e = 0; e < E; e++) sum += (r[e] = expf(r[e] - mx));
            for (int e = 0; e < E; e++) r[e] /= sum;
        }
        int32_t *ids = rid + (size_t)t * K;
        float *w = rw + (size_t)t * K, wsum = 0;
        if (deepseek) {
            moe_route_deepseek(d, bias, r, ids, w, 0);
            continue;
        }
        for (int k = 0; k < K; k++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int q = 0; q < k; q++) taken |= ids[q] == e;
                if (!taken && (best < 0 || r[e] > r[best])) best = e;
            }
            ids[k] = best;
            w[k] = r[best];
            wsum += w[k];
        }
        if (d->norm_topk)
            for (int k = 0; k < K; k++) w[k] /= wsum;
    }
    eltwise(c, 5, d->acc, (size_t)H, d->acc, (size_t)H, NULL, 0, T, (size_t)H);
    for (int e = 0; e < E; e++) {
        int n = 0;
        for (int t = 0; t < T; t++)
            for (int k = 0; k < K; k++) n += rid[(size_t)t * K + k] == e;
        if (!n) continue;
        VkDeviceAddress ra;
        int32_t *idx = vk_ring(c, (size_t)n * 8, &ra);
        float *wt = (float *)(idx + n);
        int i = 0;
        for (int t = 0; t < T; t++)
            for (int k = 0; k < K; k++)
                if (rid[(size_t)t * K + k] == e) idx[i] = t, wt[i] = rw[(size_t)t * K + k], i++;
        elt_pc g = {A(d->xg), A(d->x), (uint64_t)ra, (uint32_t)n, (uint32_t)H, (uint32_t)H, (uint32_t)H, 0, 3, 0.0f};
        vk_dispatch(c, VK_P_ELTWISE, &g, sizeof g, groups_of((uint64_t)n * H), 1);
        moe_swiglu(c, d, e, d->xg, n, &d->exp_gate[e], &d->exp_up[e], &d->exp_down[e], d->yg);
        elt_pc s = {A(d->acc), A(d->yg), (uint64_t)ra, (uint32_t)n, (uint32_t)H, (uint32_t)H, (uint32_t)H, 0, 4, 0.0f};
        vk_dispatch(c, VK_P_ELTWISE, &s, sizeof s, groups_of((uint64_t)n * H), 1);
    }
    xllm_free(rl);
    if (d->sh_gate && d->sh_gate->data) {
        moe_swiglu(c, d, -2, d->x, T, d->sh_gate, d->sh_up, d->sh_down, d->out); /* -2: the shared expert */
        if (d->sh_router && d->sh_router->data) {
            matmul_rows(c, d->x, T, d->sh_router, 0, 1, NULL, d->router_logits, 1, 0, 0);
            eltwise(c, 6, d->acc, (size_t)H, d->out, (size_t)H, d->router_logits, 1, T, (size_t)H);
        } else { /* no gate: added as it is */
            eltwise(c, 0, d->acc, (size_t)H, d->out, (size_t)H, NULL, 0, T, (size_t)H);
        }
    }
    eltwise(c, 2, d->out, (size_t)H, d->acc, (size_t)H, NULL, 0, T, (size_t)H);
}

/* backend_ops.own_bytes: the staging pool, the ring (reserved at creation
 * for the largest embedding batch; attention's block tables at this block
 * size may need more), the quantized-activation scratch and split
 * attention's partials at their bound. */
static size_t vb_own_bytes(void *ctx, int block_size, int max_context) {
    vk_ctx *c = ctx;
    size_t ring = c->ring.size, att = (attn_ring_bound(c, block_size, max_context) + 63) / 64 * 64;
    if (att > ring) ring = att;
    return c->staging.size + ring + c->qact_bytes + attn_part_bound(c, max_context);
}

size_t vulkan_own_bytes_held(const backend *be) {
    if (!be->ops || be->ops->own_bytes != vb_own_bytes) return 0;
    const vk_ctx *c = be->ctx;
    return c->staging.size + c->ring.size + c->qact_bytes + c->attn_part_bytes;
}

/* The planner: per matrix and batch bucket, the matmul variant (mm_rule:
 * matrix-vector for one token, tiled from two), kept in plan_kernel like the
 * CPU planner's choices; results do not depend on it (both variants give the
 * same bits), so nothing is measured. */
static void vb_mla_rope_kv(void *ctx, const be_mla *d) { vk_mla_rope_kv(ctx, d); }

static xllm_status vb_plan(void *ctx, matrix *const *ws, size_t n, int max_tokens, int budget_ms, cJSON **report,
                           xllm_error *err) {
    vk_ctx *c = ctx;
    (void)budget_ms, (void)err;
    static const int rep_T[MM_BUCKETS] = {1, 8, 64, 512};
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < MM_BUCKETS; b++) ws[i]->plan_kernel[b] = (uint8_t)mm_rule(rep_T[b]);
    if (report) {
        cJSON *r = cJSON_CreateObject(), *k = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "backend", "vulkan");
        cJSON_AddNumberToObject(r, "matrices", (double)n);
        cJSON_AddNumberToObject(r, "max_tokens", max_tokens);
        const char *names[MM_BUCKETS] = {"T=1", "T=2-8", "T=9-64", "T>64"};
        for (int b = 0; b < MM_BUCKETS; b++)
            cJSON_AddStringToObject(k, names[b], c->mm_force ? (c->mm_force == MM_TILED ? "tiled (forced)" : "matvec (forced)")
                                                 : mm_rule(rep_T[b]) == MM_TILED ? "tiled" : "matvec");
        cJSON_AddItemToObject(r, "matmul", k);
        cJSON_AddBoolToObject(r, "int8_dot", c->int_dot);
        cJSON_AddNumberToObject(r, "attention_split_keys", ATTN_SEG);
        *report = r;
    }
    return XLLM_OK;
}

static int vb_supports(void *ctx, be_feature f, int arg) {
    (void)ctx;
    switch (f) {
    case BE_FEAT_WEIGHT_DTYPE: return pipe_for((dtype_t)arg) >= 0;
    case BE_FEAT_KV_DTYPE: return arg == KV_F32 || arg == KV_F16 || arg == KV_Q8;
    case BE_FEAT_HEAD_DIM: return arg > 0 && arg <= 512 && arg % 2 == 0;
    case BE_FEAT_ATTN_WINDOW: return 1;
    case BE_FEAT_QK_NORM: return 1;
    case BE_FEAT_BIAS: return 1;
    case BE_FEAT_MOE: return 1;
    case BE_FEAT_ATTN_SCALE: return 1;
    case BE_FEAT_SOFTCAP: return 1;
    case BE_FEAT_QK_NORM_ALL: return 1;
    case BE_FEAT_MLA: return arg <= VK_MLA_MAX_ROW; /* arg: the latent row (mla_dim); attention_latent.comp's limit */
    case BE_FEAT_MOE_ROUTING: return 1;
    default: return 0; /* anything newer than this file: refused until implemented */
    }
}

static const backend_ops vulkan_backend_ops = {
    .name = "vulkan",
    .unified_memory = 0,
    .destroy = vb_destroy,
    .describe = vb_describe,
    .alloc = vb_alloc,
    .free = vb_free,
    .copy = vb_copy,
    .upload_matrix = vb_upload_matrix,
    .plan = vb_plan,
    .embed = vb_embed,
    .rope_tables = vb_rope_tables,
    .rmsnorm = vb_rmsnorm,
    .matmul = vb_matmul,
    .matmul_silu_mul = vb_matmul_silu_mul,
    .silu_mul = vb_silu_mul,
    .add = vb_add,
    .copy_rows = vb_copy_rows,
    .qkv_rope_kv = vb_qkv_rope_kv,
    .rope_kv = vb_rope_kv,
    .attention = vb_attention,
    .moe = vb_moe,
    .gelu_mul = vb_gelu_mul,
    .scale = vb_scale,
    .mla_rope_kv = vb_mla_rope_kv,
    .supports = vb_supports,
    .host_alloc = vb_host_alloc,
    .host_free = vb_host_free,
    .own_bytes = vb_own_bytes,
};

xllm_status vulkan_backend_create(backend *out, const backend_options *o, xllm_error *err) {
    if (o->arith_llama)
        return err_setf(err, XLLM_ERR_UNSUPPORTED,
                           "backend 'vulkan' does not implement llama.cpp's arithmetic (arithmetic \"llama\"): use the cpu backend");
    vk_ctx *c = mem_calloc(1, sizeof *c);
    if (!c) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    xllm_status st = vk_open(c, o->device, err);
    if (!st) st = make_pipelines(c, err);
    if (st) {
        vk_close(c);
        xllm_free(c);
        return st;
    }
    const char *mf = getenv("XLLM_VULKAN_MATMUL");
    c->mm_force = mf && !strcmp(mf, "matvec") ? MM_MATVEC : mf && !strcmp(mf, "tiled") ? MM_TILED : 0;
    const char *ag = getenv("XLLM_VULKAN_ATTN_GROUP");
    c->attn_no_group = ag && !strcmp(ag, "0");
    c->max_tokens = o->max_tokens ? o->max_tokens : 1;
    c->max_cols = (o->max_cols + 31) / 32 * 32;
    c->n_heads = o->n_heads, c->head_dim = o->head_dim;
    /* the ring holds at least the largest embedding batch (vb_embed: one
     * request of max_tokens rows), so it grows only for block tables beyond
     * that, within own_bytes' bound */
    if (vk_ring_reserve(c, c->max_tokens * (o->max_cols ? o->max_cols : 1) * sizeof(float))) {
        vk_close(c);
        xllm_free(c);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "backend 'vulkan': out of host-visible memory for its step-input ring");
    }
    /* quantized activations: codes [max_tokens][max_cols], then d, s, ds per block */
    size_t codes = (c->max_tokens * c->max_cols + 255) / 256 * 256;
    c->qact_bytes = codes + 3 * 4 * c->max_tokens * (c->max_cols / 32) + 256;
    if (!(c->qact = vk_alloc_device(c, c->qact_bytes))) {
        vk_close(c);
        xllm_free(c);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "backend 'vulkan': out of device memory for its scratch");
    }
    snprintf(c->describe, sizeof c->describe, "vulkan %.200s (%s memory)", c->props.deviceName,
             c->unified ? "unified" : "device-local");
    out->ops = &vulkan_backend_ops;
    out->ctx = c;
    return XLLM_OK;
}
