#version 450
// attn_combine.comp - split attention's second pass (flash-decoding): for a
// query whose keys span several segments (attention.comp wrote one partial
// (m, l, acc) per segment), the output is folded in segment order:
// M = max m_k, L = sum l_k exp(m_k - M), out = sum acc_k exp(m_k - M) / L.
// One workgroup per (token, head); lane d takes dimensions d, d + 64, ...
// Queries of one segment were written by attention.comp itself.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uint64_t info;  // int [T][4]: table offset, first key, keys end, partial base (-1: one segment)
    uint64_t part;  // float [slot][nh][2 + hd]
    uint64_t out_;  // [T][nh * hd]
    uint T, nh, hd, seg;
} p;

void main() {
    uint item = flat_group(), tid = gl_LocalInvocationID.x;
    if (item >= p.T * p.nh) return;
    uint t = item / p.nh, h = item % p.nh;
    int pb = I32(p.info).v[t * 4u + 3u];
    if (pb < 0) return;
    uint first = uint(I32(p.info).v[t * 4u + 1u]), end_ = uint(I32(p.info).v[t * 4u + 2u]);
    uint ns = (end_ - 1u) / p.seg - first / p.seg + 1u;
    uint stride = (p.nh * (p.hd + 2u)) * 4u;
    uint64_t base = p.part + (uint64_t(uint(pb)) * p.nh + h) * (p.hd + 2u) * 4u;
    float M = uintBitsToFloat(0xff800000u);
    for (uint k = 0; k < ns; k++) M = max(M, F32(base + uint64_t(k) * stride).v[0]);
    float L = 0.0;
    for (uint k = 0; k < ns; k++) {
        uint64_t pa = base + uint64_t(k) * stride;
        L += F32(pa).v[1] * exp(F32(pa).v[0] - M);
    }
    uint64_t oa = p.out_ + (uint64_t(t) * p.nh + h) * p.hd * 4u;
    for (uint d = tid; d < p.hd; d += 64u) {
        float a = 0.0;
        for (uint k = 0; k < ns; k++) {
            uint64_t pa = base + uint64_t(k) * stride;
            a += F32(pa).v[2u + d] * exp(F32(pa).v[0] - M);
        }
        F32(oa).v[d] = a / L;
    }
}
