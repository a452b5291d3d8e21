#version 450
// matmul.comp - y[t][r] = x[t] . W[r] + bias[r] (BE_ADD: y += that), one
// workgroup per weight row and tile of up to 8 tokens. Thread i takes units
// i, i + 64, ... of the row (a column for float weights, a block of 32 for
// the quantized ones) in order, then a fixed tree sums the 64 partials: a token's result never depends on T, on its tile or
// on its neighbours (backend.h's determinism). One shader, one section per
// weight type (compiled once per type, -DWT_*):
//   float weights (F32, F16, BF16) dot the f32 activations;
//   llama.cpp's block types (K-quants, IQ4, Q5: WT_KQ) are unpacked at upload
//   into a common layout - per row: int8 codes [cols], then per 16 codes a
//   scale [cols/16] and a minimum [cols/16] (weight = scale * code - min) -
//   and dot the f32 activations too;
//   block-quantized Q8 / Q4 / Q4M (GGUF Q8_0 / Q4_0 / Q4_1 at group 32) take
//   the activations quantized per 32 as the CPU does (quant_act.comp) and
//   mirror quant.c's quant_dot per block: integer sums, then dw * da * isum.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uint64_t x;     // f32 [T][ldx] (float weights) or int8 codes [T][cols]
    uint64_t xd;    // quantized activations: per (token, block of 32): d, then s (int), then ds at T*nb strides
    uint64_t w;     // row 0
    uint64_t bias;  // 0: none
    uint64_t y;     // [T][ldy]
    uint rows, cols, T, ldx, ldy, add, group, row_bytes;
} p;
#define TT 8
#define NT 64
shared float red[TT * NT];

void main() {
    uint r = flat_group();
    uint tid = gl_LocalInvocationID.x;
    uint t0 = gl_WorkGroupID.z * TT;
    uint nt = min(uint(TT), p.T - t0);
    float acc[TT];
    for (uint j = 0; j < TT; j++) acc[j] = 0.0;
    if (r < p.rows) {
        uint64_t wr = p.w + uint64_t(r) * uint64_t(p.row_bytes);
#if defined(WT_KQ)
        uint nu = p.cols / 16u;
        uint64_t sc = wr + p.cols, mn = sc + uint64_t(nu) * 4u;
        for (uint c0 = tid * 32u; c0 < p.cols; c0 += NT * 32u) {
            for (uint h = 0; h < 2u; h++) {
                uint u = c0 / 16u + h;
                float s = F32(sc).v[u], m = F32(mn).v[u];
                for (uint i = 0; i < 16u; i++) {
                    uint c = u * 16u + i;
                    float wv = s * float(int(I8(wr).v[c])) - m;
                    for (uint j = 0; j < nt; j++) acc[j] += wv * F32(p.x).v[(t0 + j) * p.ldx + c];
                }
            }
        }
#elif defined(WT_F32) || defined(WT_F16) || defined(WT_BF16)
        // thread i takes columns i, i + 64, ...: neighbouring threads read
        // neighbouring weights (coalesced loads on a GPU)
        for (uint c = tid; c < p.cols; c += NT) {
#if defined(WT_F32)
            float wv = F32(wr).v[c];
#elif defined(WT_F16)
            float wv = unpackHalf2x16(uint(U16(wr).v[c])).x;
#else
            float wv = uintBitsToFloat(uint(U16(wr).v[c]) << 16);
#endif
            for (uint j = 0; j < nt; j++) acc[j] += wv * F32(p.x).v[(t0 + j) * p.ldx + c];
        }
#else
        uint nb = p.cols / 32u, per = p.group / 32u;
#if defined(WT_Q8)
        uint bb = 2u + p.group;
#elif defined(WT_Q4)
        uint bb = 2u + p.group / 2u;
#else
        uint bb = 4u + p.group / 2u;
#endif
        uint64_t xs = p.xd + uint64_t(p.T) * nb * 4u, xds = xs + uint64_t(p.T) * nb * 4u;
        for (uint ab = tid; ab < nb; ab += NT) {
            uint g = ab / per, k = ab % per;
            uint64_t blk = wr + uint64_t(g) * bb;
            float dw = f16_at(blk);
#if defined(WT_Q8)
            uint64_t wq = blk + 2u + k * 32u;
            int wv[32];
            for (uint i = 0; i < 32u; i++) wv[i] = int(I8(wq).v[i]);
#else
#if defined(WT_Q4)
            uint64_t wq = blk + 2u + k * 16u;
#else
            float mw = f16_at(blk + 2u);
            uint64_t wq = blk + 4u + k * 16u;
#endif
            int wv[32];
            for (uint i = 0; i < 16u; i++) {
                uint b = uint(U8(wq).v[i]);
                wv[i] = int(b & 15u);
                wv[i + 16u] = int(b >> 4);
            }
#endif
            for (uint j = 0; j < nt; j++) {
                uint t = t0 + j;
                uint64_t qa = p.x + uint64_t(t) * p.cols + uint64_t(ab) * 32u;
                int isum = 0;
                for (uint i = 0; i < 32u; i++) isum += wv[i] * int(I8(qa).v[i]);
                uint ai = t * nb + ab;
                float da = F32(p.xd).v[ai];
#if defined(WT_Q8)
                acc[j] += dw * da * float(isum);
#elif defined(WT_Q4)
                acc[j] += dw * da * float(isum - 8 * I32(xs).v[ai]);
#else
                acc[j] += dw * da * float(isum) + mw * F32(xds).v[ai];
#endif
            }
        }
#endif
    }
    for (uint j = 0; j < TT; j++) red[j * NT + tid] = acc[j];
    barrier();
    // the tree over the threads that had units: the others hold exact zeros,
    // so starting lower gives the same bits with fewer steps (narrow rows)
#if defined(WT_F32) || defined(WT_F16) || defined(WT_BF16)
    uint units = p.cols; // threads with a column
#else
    uint units = (p.cols + 31u) / 32u; // threads with a unit of 32
#endif
    uint top = NT / 2u;
    while (top > 1u && top >= units) top >>= 1;
    for (uint s = top; s > 0u; s >>= 1) {
        if (tid < s)
            for (uint j = 0; j < nt; j++) red[j * NT + tid] += red[j * NT + tid + s];
        barrier();
    }
    if (r < p.rows && tid < nt) {
        float v = red[tid * NT];
        if (p.bias != 0ul) v += F32(p.bias).v[r];
        uint o = (t0 + tid) * p.ldy + r;
        if (p.add != 0u) v = F32(p.y).v[o] + v;
        F32(p.y).v[o] = v;
    }
}
