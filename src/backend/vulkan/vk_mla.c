/*
 * vk_mla.c - multi-head latent attention (DeepSeek-V2/V3) on the Vulkan
 * backend: backend_ops.mla_rope_kv (be_mla: RoPE on the query heads' and the
 * latent row's rope parts, the latent row written into the pool's K and V
 * halves; shaders/mla_rope_kv.comp) and the attention over latent rows
 * (be_attn.latent; shaders/attention_latent.comp, folded by
 * attn_combine.comp when a token's keys span several segments).
 *
 * The model layer does the rest of MLA with ordinary operations (forward.c's
 * mla_block: q_nope absorbed through each head's k_b, the attended latent
 * taken out through v_b), as on the CPU, so the results match the CPU
 * backend's within float rounding.
 *
 * The idea of the attention: every head of a token attends to the same
 * latent row per position (one KV head), so a workgroup takes a tile of up
 * to 8 (token, head) items of one sequence - decode: 8 heads of a token;
 * prefill with few heads: several neighbouring tokens too - and each latent
 * row it loads serves all of them. Each item's arithmetic is fixed by its own
 * query and keys (absolute key chunks and segments, as attention.comp), never
 * by the tile it lands in: batch-invariant, and the same bits whether split
 * or not depends on the token's own context only.
 *
 * Not thread-safe (backend.h: one thread at a time per context).
 */
#include "backend/vulkan/vk_internal.h"
#include "base/alloc.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define A(p) ((uint64_t)vk_addr(c, (p)))

/* items per tile (attention_latent.comp's QT); segments and the partials'
 * buffer are split attention's (vk_internal.h) */
#define MLA_QT 8

static void *mla_malloc(size_t bytes) {
    void *p = mem_malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "xllm vulkan: out of memory\n");
        abort();
    }
    return p;
}

void vk_mla_rope_kv(vk_ctx *c, const be_mla *d) {
    int T = d->T, hr = d->row / 2;
    VkDeviceAddress ra;
    int32_t *slots = vk_ring(c, (size_t)T * sizeof(int32_t), &ra);
    for (int t = 0; t < T; t++) {
        const int32_t *table = d->block_tables[d->seq[t]];
        slots[t] = table[d->pos[t] / d->block_size] * d->block_size + d->pos[t] % d->block_size;
    }
    struct {
        uint64_t q, kv, cs, sn, slots, kc, vc;
        uint32_t T, nh, row, rope, interleaved, kvtype, gshift;
    } pc = {A(d->q), A(d->kv), A(d->rope_cos), A(d->rope_sin), (uint64_t)ra, A(d->k_cache), A(d->v_cache),
            (uint32_t)T, (uint32_t)d->n_heads, (uint32_t)d->row, (uint32_t)d->rope_dim,
            (uint32_t)(d->rope_interleaved != 0), (uint32_t)d->kv_type,
            (uint32_t)(d->kv_type == KV_Q8 ? kvq_group_shift(hr) : 0)};
    c->qact_src = NULL; /* q and the latent rows changed in place */
    uint64_t units = (uint64_t)T * (uint64_t)(d->n_heads + 1);
    vk_dispatch(c, VK_P_MLA_ROPE_KV, &pc, sizeof pc, (units + 63) / 64, 1);
}

void vk_attention_latent(vk_ctx *c, const be_attn *d) {
    int T = d->T, H = d->n_heads, w = d->head_dim;
    int nhh = H < MLA_QT ? H : MLA_QT, per_group = MLA_QT / nhh, hg = (H + nhh - 1) / nhh;
    /* each sequence's block table once (as far as this batch reaches); token
     * groups: runs of up to per_group neighbouring tokens of one sequence;
     * per token its table, keys and partials (tinfo), and passes over the
     * groups so that a pass's partials fit ATTN_PART_CAP (or one group,
     * whatever it needs): split attention's plan (vk_attn_groups,
     * vk_attn_plan). Planned on the host first: growing the partials' buffer
     * submits, and a submit resets the ring. */
    int32_t *useq = mla_malloc(((size_t)T * 10 + 1) * sizeof(int32_t)), *umax = useq + T, *uoff = umax + T;
    int32_t *groups = uoff + T /* [ng][2] */, *tinfo = groups + 2 * (size_t)T /* [T][4] */;
    int32_t *pass_start = tinfo + 4 * (size_t)T; /* [np + 1] */
    int nu;
    size_t total, most;
    int ng = vk_attn_groups(d, per_group, useq, umax, uoff, &nu, &total, groups);
    size_t slot_bytes = (size_t)H * (size_t)(w + 2) * sizeof(float);
    int np = vk_attn_plan(d, groups, ng, useq, uoff, ATTN_PART_CAP / slot_bytes, tinfo, pass_start, &most);
    size_t need = most * slot_bytes;
    if (need && !vk_attn_part_reserve(c, need)) {
        fprintf(stderr, "xllm vulkan: out of device memory for latent attention's partials (%zu bytes)\n", need);
        abort();
    }
    /* one ring request for all (a second could submit and reset the ring under the first) */
    size_t ntiles = (size_t)ng * (size_t)hg;
    VkDeviceAddress ia;
    int32_t *info = vk_ring(c, ((size_t)T * 4 + ntiles * 4 + total) * sizeof(int32_t), &ia);
    int32_t *tiles = info + (size_t)T * 4, *tabs = tiles + ntiles * 4;
    VkDeviceAddress tia = ia + (VkDeviceAddress)T * 4 * sizeof(int32_t);
    VkDeviceAddress ta = tia + (VkDeviceAddress)ntiles * 4 * sizeof(int32_t);
    memcpy(info, tinfo, (size_t)T * 4 * sizeof(int32_t));
    for (int u = 0; u < nu; u++)
        memcpy(tabs + uoff[u], d->block_tables[useq[u]], (size_t)(umax[u] / d->block_size + 1) * sizeof(int32_t));
    for (int g = 0; g < ng; g++)
        for (int k = 0; k < hg; k++) {
            int32_t *ti = tiles + ((size_t)g * hg + k) * 4;
            ti[0] = groups[2 * g], ti[1] = groups[2 * g + 1], ti[2] = k * nhh, ti[3] = H - k * nhh < nhh ? H - k * nhh : nhh;
        }
    float scale = d->scale > 0 ? d->scale : 1.0f / sqrtf((float)w);
    int hr = w / 2;
    for (int ps = 0; ps < np; ps++) {
        int g0 = pass_start[ps], g1 = pass_start[ps + 1];
        int t0 = groups[2 * g0], t1 = groups[2 * (g1 - 1)] + groups[2 * (g1 - 1) + 1];
        int split, maxseg = vk_attn_pass_segments(groups, g0, g1, tinfo, &split);
        struct {
            uint64_t q, out, kc, vc, tables, info, tiles, part;
            uint32_t ntiles, nh, hd, bs, kvtype, gshift, seg;
            float kscale, softcap;
        } pc = {A(d->q), A(d->out), A(d->k_cache), A(d->v_cache), (uint64_t)ta, (uint64_t)ia,
                (uint64_t)tia + (uint64_t)g0 * (uint64_t)hg * 4 * sizeof(int32_t), c->attn_part ? A(c->attn_part) : 0,
                (uint32_t)((g1 - g0) * hg), (uint32_t)H, (uint32_t)w, (uint32_t)d->block_size, (uint32_t)d->kv_type,
                (uint32_t)(d->kv_type == KV_Q8 ? kvq_group_shift(hr) : 0), ATTN_SEG,
                d->softcap > 0 ? scale / d->softcap : scale, d->softcap > 0 ? d->softcap : 0.0f};
        vk_dispatch(c, VK_P_ATTN_LATENT, &pc, sizeof pc, (uint64_t)(g1 - g0) * (uint64_t)hg, (uint32_t)maxseg);
        if (split) {
            struct {
                uint64_t info, part, out;
                uint32_t T, nh, hd, seg;
            } cc = {(uint64_t)ia + (uint64_t)t0 * 4 * sizeof(int32_t), A(c->attn_part),
                    A(d->out) + (uint64_t)t0 * (uint64_t)H * (uint64_t)w * 4, (uint32_t)(t1 - t0), (uint32_t)H,
                    (uint32_t)w, ATTN_SEG};
            vk_dispatch(c, VK_P_ATTN_COMBINE, &cc, sizeof cc, (uint64_t)(t1 - t0) * (uint64_t)H, 1);
        }
    }
    xllm_free(useq);
}
