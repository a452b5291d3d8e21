#version 450
// mla_rope_kv.comp - multi-head latent attention's step before the attention
// (be_mla, DeepSeek-V2/V3): per (token, unit), unit < nh: RoPE over the last
// `rope` values of query head unit's row (in place); unit nh: RoPE over the
// last `rope` values of the token's latent row [normed latent | rope key] (in
// place), then the row's first half written as the K pool's row of its slot
// and the second half as the V pool's (row / 2 values each, one KV head), in
// the pool's storage (kv_store.glsl). RoPE pairs (i, i + half) or (2i, 2i + 1)
// interleaved, each value x0 c - x1 s, x1 c + x0 s as the CPU backend's
// rope_apply (no fused multiply-add). One invocation per unit.
#include "common.glsl"
#include "kv_store.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uint64_t q, kv, cs, sn, slots, kc, vc;
    uint T, nh, row, rope, interleaved, kvtype, gshift;
} p;

void rope_part(uint64_t a, uint t) {
    uint half_ = p.rope / 2u, stride = p.interleaved != 0u ? 2u : 1u, off = p.interleaved != 0u ? 1u : half_;
    for (uint i = 0; i < half_; i++) {
        float c = F32(p.cs).v[t * half_ + i], s = F32(p.sn).v[t * half_ + i];
        uint i0 = i * stride, i1 = i0 + off;
        float x0 = F32(a).v[i0], x1 = F32(a).v[i1];
        precise float a0 = x0 * c - x1 * s;
        precise float a1 = x1 * c + x0 * s;
        F32(a).v[i0] = a0;
        F32(a).v[i1] = a1;
    }
}

void main() {
    uint units = p.nh + 1u;
    uint i = flat_group() * 64u + gl_LocalInvocationID.x;
    if (i >= p.T * units) return;
    uint t = i / units, u = i % units, off = p.row - p.rope;
    if (u < p.nh) {
        rope_part(p.q + ((uint64_t(t) * p.nh + u) * p.row + off) * 4u, t);
        return;
    }
    uint64_t a = p.kv + uint64_t(t) * p.row * 4u;
    rope_part(a + uint64_t(off) * 4u, t);
    uint hr = p.row / 2u;
    uint rb = p.kvtype == 0u ? hr * 4u : p.kvtype == 1u ? hr * 2u : hr + 2u * (hr >> p.gshift);
    uint64_t slot = uint64_t(I32(p.slots).v[t]) * rb;
    kv_store_row(a, p.kc + slot, hr, p.kvtype, p.gshift);
    kv_store_row(a + uint64_t(hr) * 4u, p.vc + slot, hr, p.kvtype, p.gshift);
}
