#version 450
// attention.comp - causal attention over the paged KV cache: one workgroup
// per (token, head). Keys go in chunks of 64 (thread i scores key i of the
// chunk); every thread folds the chunk's scores in key order (online
// softmax); thread d accumulates output dimensions d, d + 64, ... in key
// order. The order depends only on the token's own keys: batch-invariant.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uint64_t q, out_, kc, vc, tables, info;  // info: int [T][3] = table offset, first key, keys end
    uint T, nh, nkv, hd, bs, kvtype, gshift;
    float scale;
} p;
#define MAXHD 512
shared float qs[MAXHD];
shared float sc[64];

uint rb_() { return p.kvtype == 0u ? p.hd * 4u : p.kvtype == 1u ? p.hd * 2u : p.hd + 2u * (p.hd >> p.gshift); }

float kv_at(uint64_t row, uint i) {
    if (p.kvtype == 0u) return F32(row).v[i];
    if (p.kvtype == 1u) return unpackHalf2x16(uint(U16(row).v[i])).x;
    return float(int(I8(row).v[i])) * f16_at(row + p.hd + 2u * (i >> p.gshift));
}

void main() {
    uint item = flat_group(), tid = gl_LocalInvocationID.x;
    if (item >= p.T * p.nh) return;
    uint t = item / p.nh, h = item % p.nh, kvh = h / (p.nh / p.nkv);
    uint toff = uint(I32(p.info).v[t * 3u]), first = uint(I32(p.info).v[t * 3u + 1u]), end = uint(I32(p.info).v[t * 3u + 2u]);
    uint64_t qa = p.q + (uint64_t(t) * p.nh + h) * p.hd * 4u;
    for (uint i = tid; i < p.hd; i += 64u) qs[i] = F32(qa).v[i];
    barrier();
    uint rb = rb_();
    float m = uintBitsToFloat(0xff800000u), l = 0.0;
    float acc[MAXHD / 64];
    for (uint j = 0; j < MAXHD / 64; j++) acc[j] = 0.0;
    for (uint c0 = first; c0 < end; c0 += 64u) {
        uint n = min(64u, end - c0);
        float s = uintBitsToFloat(0xff800000u);
        if (tid < n) {
            uint pos = c0 + tid;
            uint blk = uint(I32(p.tables).v[toff + pos / p.bs]);
            uint64_t row = p.kc + ((uint64_t(blk) * p.bs + pos % p.bs) * p.nkv + kvh) * rb;
            float d = 0.0;
            for (uint i = 0; i < p.hd; i++) d += qs[i] * kv_at(row, i);
            s = d * p.scale;
        }
        sc[tid] = s;
        barrier();
        float cm = sc[0];
        for (uint i = 1; i < n; i++) cm = max(cm, sc[i]);
        float mn = max(m, cm);
        float alpha = l == 0.0 && isinf(m) ? 0.0 : exp(m - mn);
        float cs = 0.0;
        for (uint i = 0; i < n; i++) cs += exp(sc[i] - mn);
        l = l * alpha + cs;
        for (uint j = 0; j * 64u + tid < p.hd; j++) {
            uint dd = j * 64u + tid;
            float a = acc[j] * alpha;
            for (uint i = 0; i < n; i++) {
                uint pos = c0 + i;
                uint blk = uint(I32(p.tables).v[toff + pos / p.bs]);
                uint64_t row = p.vc + ((uint64_t(blk) * p.bs + pos % p.bs) * p.nkv + kvh) * rb;
                a += exp(sc[i] - mn) * kv_at(row, dd);
            }
            acc[j] = a;
        }
        m = mn;
        barrier();
    }
    uint64_t oa = p.out_ + (uint64_t(t) * p.nh + h) * p.hd * 4u;
    for (uint j = 0; j * 64u + tid < p.hd; j++) F32(oa).v[j * 64u + tid] = acc[j] / l;
}
