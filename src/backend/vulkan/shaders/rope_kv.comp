#version 450
// rope_kv.comp - per (token, head): the q/k head's RMSNorm (q_norm/k_norm),
// RoPE over the head's first rd values (pairs (i, i + rd / 2), or (2i, 2i + 1)
// interleaved; rd < hd: partial rotary, the rest untouched), and the k/v head
// written into the token's KV slot in the pool's storage (f32, f16, or q8 as
// kvq.c stores it). One invocation per head, the CPU's loop order.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uint64_t q, k, v, qn, kn, cs, sn, slots, kc, vc;
    uint T, nh, nkv, hd, interleaved, kvtype, gshift;
    float eps;
    uint rd;
} p;

void norm_head(uint64_t a, uint64_t w) {
    float ss = 0.0;
    for (uint i = 0; i < p.hd; i++) ss += F32(a).v[i] * F32(a).v[i];
    float inv = div_rn(1.0, sqrt(div_rn(ss, float(p.hd)) + p.eps));
    for (uint i = 0; i < p.hd; i++) F32(a).v[i] = F32(w).v[i] * (F32(a).v[i] * inv);
}

void rope_head(uint64_t a, uint t) {
    uint half_ = p.rd / 2u, stride = p.interleaved != 0u ? 2u : 1u, off = p.interleaved != 0u ? 1u : half_;
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

void store_head(uint64_t src, uint64_t dst) {
    if (p.kvtype == 0u) {
        for (uint i = 0; i < p.hd; i++) F32(dst).v[i] = F32(src).v[i];
    } else if (p.kvtype == 1u) {
        for (uint i = 0; i < p.hd; i++) U16(dst).v[i] = uint16_t(f32_to_f16(F32(src).v[i]));
    } else {
        uint G = 1u << p.gshift;
        for (uint g = 0; g < p.hd / G; g++) {
            float amax = 0.0;
            bool finite = true;
            for (uint i = 0; i < G; i++) {
                float a = abs(F32(src).v[g * G + i]);
                if (!(a <= FLT_MAX)) finite = false;
                else if (a > amax) amax = a;
            }
            uint h = 0x7e00u;
            if (finite) {
                float d = div_rn(amax, 127.0);
                h = f32_to_f16(d < 65504.0 ? d : 65504.0);
                float df = unpackHalf2x16(h).x, id = df > 0.0 ? div_rn(1.0, df) : 0.0;
                for (uint i = 0; i < G; i++) {
                    precise float xv = F32(src).v[g * G + i] * id;
                    float r = sign(xv) * floor(abs(xv) + 0.5); // roundf: halves away from zero
                    int qv = r > 127.0 ? 127 : r < -127.0 ? -127 : int(r);
                    I8(dst).v[g * G + i] = int8_t(qv);
                }
            } else {
                for (uint i = 0; i < G; i++) I8(dst).v[g * G + i] = int8_t(0);
            }
            U16(dst + p.hd + 2u * g).v[0] = uint16_t(h);
        }
    }
}

void main() {
    uint units = p.nh + 2u * p.nkv;
    uint i = flat_group() * 64u + gl_LocalInvocationID.x;
    if (i >= p.T * units) return;
    uint t = i / units, u = i % units;
    uint rb = p.kvtype == 0u ? p.hd * 4u : p.kvtype == 1u ? p.hd * 2u : p.hd + 2u * (p.hd >> p.gshift);
    uint64_t slot = uint64_t(I32(p.slots).v[t]) * p.nkv;
    if (u < p.nh) {
        uint64_t a = p.q + (uint64_t(t) * p.nh + u) * p.hd * 4u;
        if (p.qn != 0ul) norm_head(a, p.qn);
        rope_head(a, t);
    } else if (u < p.nh + p.nkv) {
        uint h = u - p.nh;
        uint64_t a = p.k + (uint64_t(t) * p.nkv + h) * p.hd * 4u;
        if (p.kn != 0ul) norm_head(a, p.kn);
        rope_head(a, t);
        store_head(a, p.kc + (slot + h) * rb);
    } else {
        uint h = u - p.nh - p.nkv;
        store_head(p.v + (uint64_t(t) * p.nkv + h) * p.hd * 4u, p.vc + (slot + h) * rb);
    }
}
