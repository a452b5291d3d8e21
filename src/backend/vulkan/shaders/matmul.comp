#version 450
// matmul.comp - y[t][r] = x[t] . W[r] + bias[r] (BE_ADD: y += that).
//
// The order of every sum is fixed by the row alone: the row's units (a
// column for float weights, a block of 32 for the quantized ones) are dealt
// to 64 lanes (lane i takes units i, i + 64, ... in order), then a fixed tree
// sums the 64 lane partials. Both variants below compute exactly this, so a
// token's result never depends on T, on its tile, on its neighbours or on
// the variant the planner picks (backend.h's determinism):
//   matrix-vector (default): one workgroup per weight row and tile of up to
//     8 tokens; bandwidth-bound decode (T = 1: every row is its own group);
//   TILED: one workgroup per block of 4 rows x 16 tokens; each invocation
//     (lane) keeps a 4 x 16 register block of partials, so a weight value
//     loaded serves 16 tokens and an activation 4 rows; the tree runs in
//     shared memory, each lane walking one output's tree (prefill, batched decode).
// One shader, one section per weight type (compiled per type, -DWT_*):
//   float weights (F32, F16, BF16) dot the f32 activations;
//   llama.cpp's block types (K-quants, IQ4, Q5: WT_KQ) are unpacked at upload
//   into a common layout - per row: int8 codes [cols], then per 16 codes a
//   scale [cols/16] and a minimum [cols/16] (weight = scale * code - min) -
//   and dot the f32 activations too;
//   block-quantized Q8 / Q4 / Q4M (GGUF Q8_0 / Q4_0 / Q4_1 at group 32) take
//   the activations quantized per 32 as the CPU does (quant_act.comp) and
//   mirror quant.c's quant_dot per block: integer sums, then dw * da * isum.
//   The integer sums go 4 codes at a time (32-bit words): with INT_DOT by
//   the device's int8 dot product (OpSDot, SPV_KHR_integer_dot_product,
//   through GL_EXT_spirv_intrinsics: Debian's glslc rejects
//   GL_EXT_integer_dot_product), else by shifts and multiplies - the same
//   integers either way, so the same bits.
#if defined(INT_DOT)
#extension GL_EXT_spirv_intrinsics : require
#endif
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
#if defined(TILED)
#define BR 4
#define BT 16
#else
#define BR 1
#define BT 8
#endif
#define NT 64
#if defined(TILED)
#define RS (NT + 1) // a partial block's stride in red (padded: no bank conflicts when one lane walks a block)
#else
#define RS NT
#endif
shared float red[BR * BT * RS];

#if defined(INT_DOT)
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4(int a, int b, spirv_literal int fmt);
int dot4(int a, int b) { return sdot4(a, b, 0); } // 0: PackedVectorFormat4x8Bit
#else
int dot4(int a, int b) {
    return bitfieldExtract(a, 0, 8) * bitfieldExtract(b, 0, 8) + bitfieldExtract(a, 8, 8) * bitfieldExtract(b, 8, 8) +
           bitfieldExtract(a, 16, 8) * bitfieldExtract(b, 16, 8) + bitfieldExtract(a, 24, 8) * bitfieldExtract(b, 24, 8);
}
#endif

// 4 bytes at a 2-aligned address (weight blocks start on even bytes)
int w32(uint64_t a) { return int(uint(U16(a).v[0]) | (uint(U16(a).v[1]) << 16)); }

void main() {
    uint r0 = flat_group() * BR;
    uint tid = gl_LocalInvocationID.x;
    uint t0 = gl_WorkGroupID.z * BT;
    uint nt = min(uint(BT), p.T - t0);
    uint nr = r0 < p.rows ? min(uint(BR), p.rows - r0) : 0u;
    float acc[BR][BT];
    for (uint rr = 0; rr < BR; rr++)
        for (uint j = 0; j < BT; j++) acc[rr][j] = 0.0;
    if (nr > 0u) {
#if defined(WT_KQ)
        uint nu = p.cols / 16u;
        for (uint c0 = tid * 32u; c0 < p.cols; c0 += NT * 32u) {
            for (uint h = 0; h < 2u; h++) {
                uint u = c0 / 16u + h;
                float s[BR], m[BR];
                for (uint rr = 0; rr < BR; rr++) {
                    uint64_t wr = p.w + uint64_t(min(r0 + rr, p.rows - 1u)) * uint64_t(p.row_bytes);
                    uint64_t sc = wr + p.cols, mn = sc + uint64_t(nu) * 4u;
                    s[rr] = F32(sc).v[u], m[rr] = F32(mn).v[u];
                }
                for (uint i = 0; i < 16u; i++) {
                    uint c = u * 16u + i;
                    float xv[BT];
                    for (uint j = 0; j < BT; j++) xv[j] = j < nt ? F32(p.x).v[(t0 + j) * p.ldx + c] : 0.0;
                    for (uint rr = 0; rr < BR; rr++) {
                        if (rr >= nr) break;
                        uint64_t wr = p.w + uint64_t(r0 + rr) * uint64_t(p.row_bytes);
                        float wv = s[rr] * float(int(I8(wr).v[c])) - m[rr];
                        for (uint j = 0; j < BT; j++)
                            if (j < nt) acc[rr][j] += wv * xv[j];
                    }
                }
            }
        }
#elif defined(WT_F32) || defined(WT_F16) || defined(WT_BF16)
        // lane i takes columns i, i + 64, ...: neighbouring lanes read
        // neighbouring weights (coalesced loads on a GPU)
        for (uint c = tid; c < p.cols; c += NT) {
            float xv[BT];
            for (uint j = 0; j < BT; j++) xv[j] = j < nt ? F32(p.x).v[(t0 + j) * p.ldx + c] : 0.0;
            for (uint rr = 0; rr < BR; rr++) {
                if (rr >= nr) break;
                uint64_t wr = p.w + uint64_t(r0 + rr) * uint64_t(p.row_bytes);
#if defined(WT_F32)
                float wv = F32(wr).v[c];
#elif defined(WT_F16)
                float wv = unpackHalf2x16(uint(U16(wr).v[c])).x;
#else
                float wv = uintBitsToFloat(uint(U16(wr).v[c]) << 16);
#endif
                for (uint j = 0; j < BT; j++)
                    if (j < nt) acc[rr][j] += wv * xv[j];
            }
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
            // the block's 32 weight codes of each row, 4 to a word
            int wq[BR][8];
            float dw[BR], mw[BR];
            for (uint rr = 0; rr < BR; rr++) {
                uint64_t blk = p.w + uint64_t(min(r0 + rr, p.rows - 1u)) * uint64_t(p.row_bytes) + uint64_t(g) * bb;
                dw[rr] = f16_at(blk);
#if defined(WT_Q8)
                mw[rr] = 0.0;
                for (uint i = 0; i < 8u; i++) wq[rr][i] = w32(blk + 2u + k * 32u + i * 4u);
#else
#if defined(WT_Q4)
                mw[rr] = 0.0;
                uint64_t wa = blk + 2u + k * 16u;
#else
                mw[rr] = f16_at(blk + 2u);
                uint64_t wa = blk + 4u + k * 16u;
#endif
                for (uint i = 0; i < 4u; i++) { // codes i*4.. in the low nibbles, 16 + i*4.. in the high ones
                    int b = w32(wa + i * 4u);
                    wq[rr][i] = b & 0x0f0f0f0f;
                    wq[rr][i + 4u] = (b >> 4) & 0x0f0f0f0f;
                }
#endif
            }
            for (uint j = 0; j < BT; j++) {
                if (j >= nt) break;
                uint t = t0 + j;
                uint64_t qa = p.x + uint64_t(t) * p.cols + uint64_t(ab) * 32u;
                int xa[8];
                for (uint i = 0; i < 8u; i++) xa[i] = I32(qa).v[i];
                uint ai = t * nb + ab;
                float da = F32(p.xd).v[ai];
#if defined(WT_Q4)
                int s8 = 8 * I32(xs).v[ai];
#elif defined(WT_Q4M)
                float dsa = F32(xds).v[ai];
#endif
                for (uint rr = 0; rr < BR; rr++) {
                    if (rr >= nr) break;
                    int isum = 0;
                    for (uint i = 0; i < 8u; i++) isum += dot4(wq[rr][i], xa[i]);
#if defined(WT_Q8)
                    acc[rr][j] += dw[rr] * da * float(isum);
#elif defined(WT_Q4)
                    acc[rr][j] += dw[rr] * da * float(isum - s8);
#else
                    acc[rr][j] += dw[rr] * da * float(isum) + mw[rr] * dsa;
#endif
                }
            }
        }
#endif
    }
    for (uint rr = 0; rr < BR; rr++)
        for (uint j = 0; j < BT; j++) red[(rr * BT + j) * RS + tid] = acc[rr][j];
    barrier();
    // the tree over the lanes that had units: the others hold exact zeros,
    // so starting lower gives the same bits with fewer steps (narrow rows)
#if defined(WT_F32) || defined(WT_F16) || defined(WT_BF16)
    uint units = p.cols; // lanes with a column
#else
    uint units = (p.cols + 31u) / 32u; // lanes with a unit of 32
#endif
    uint top = NT / 2u;
    while (top > 1u && top >= units) top >>= 1;
#if defined(TILED)
    // lane o walks output o's tree alone (the same additions in the same
    // order as the parallel tree: the same bits), no barrier per level
    if (tid < BR * BT && tid / BT < nr && tid % BT < nt)
        for (uint s = top; s > 0u; s >>= 1)
            for (uint i = 0; i < s; i++) red[tid * RS + i] += red[tid * RS + i + s];
    barrier();
#else
    for (uint s = top; s > 0u; s >>= 1) {
        if (tid < s)
            for (uint o = 0; o < BR * BT; o++)
                if (o / BT < nr && o % BT < nt) red[o * RS + tid] += red[o * RS + tid + s];
        barrier();
    }
#endif
    for (uint o = tid; o < BR * BT; o += NT) {
        uint rr = o / BT, j = o % BT;
        if (rr >= nr || j >= nt) continue;
        uint r = r0 + rr;
        float v = red[o * RS];
        if (p.bias != 0ul) v += F32(p.bias).v[r];
        uint oi = (t0 + j) * p.ldy + r;
        if (p.add != 0u) v = F32(p.y).v[oi] + v;
        F32(p.y).v[oi] = v;
    }
}
