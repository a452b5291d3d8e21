#version 450
// attention_latent.comp - multi-head latent attention (be_attn.latent,
// DeepSeek-V2/V3) over the paged pool, flash-style. Every head of a token
// attends to the same latent rows: a position's row is hd values, its first
// hd / 2 the K pool's row and the rest the V pool's (one KV head), and it is
// the key and the value alike; q and out are [T][nh][hd] (q_nope already
// absorbed through k_b by the model layer, so a score is q . row).
//
// One workgroup per (tile, key segment). A tile is up to 8 (token, head)
// items: tokens t0 .. t0 + nt - 1 of one sequence times heads h0 .. h0 + nhh
// - 1 (item j: token t0 + j / nhh, head h0 + j % nhh), so each latent row
// loaded serves every head and token of the tile (decode: 8 heads of the
// token). What an item computes is attention.comp's arithmetic for one
// query: its own keys ([first, end): causal, sliding window), cut at
// absolute positions into chunks of 64 and segments of p.seg, folded chunk
// by chunk in key order (online softmax); keys outside its range are
// skipped, never added as zeros. So a result depends on the item's own
// query and keys only, never on the tile or the batch (backend.h). A token
// whose keys span several segments writes one partial (m, l, acc) per
// segment and head, folded by attn_combine.comp (the same layout as
// attention.comp's partials).
//
// Scores: s = (q . row) * kscale, kscale = scale / softcap; with softcap > 0
// then s = softcap * tanh(s). Rows in f32, f16 or q8 (kv_store.glsl).
#include "common.glsl"
#include "kv_store.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uint64_t q, out_, kc, vc, tables;
    uint64_t info;   // int [T][4]: table offset, first key, keys end, partial base (-1: one segment)
    uint64_t tiles;  // int [ntiles][4]: first token, tokens, first head, heads
    uint64_t part;   // float [slot][nh][2 + hd]: m, l, acc
    uint ntiles, nh, hd, bs, kvtype, gshift, seg;
    float kscale, softcap;
} p;
#define MAXW 576
#define QT 8
shared float qs[QT * MAXW];
shared float pe[QT * 64];
shared float sm[QT], sl[QT], salpha[QT]; // per item: running max, sum, this chunk's rescale

void main() {
    uint tile = flat_group(), tid = gl_LocalInvocationID.x;
    if (tile >= p.ntiles) return;
    uint tt0 = uint(I32(p.tiles).v[4u * tile]), nt = uint(I32(p.tiles).v[4u * tile + 1u]);
    uint h0 = uint(I32(p.tiles).v[4u * tile + 2u]), nhh = uint(I32(p.tiles).v[4u * tile + 3u]);
    uint nq = nt * nhh, hr = p.hd / 2u;
    uint lo = 0xffffffffu, hi = 0u;
    for (uint j = 0; j < nt; j++) {
        lo = min(lo, uint(I32(p.info).v[(tt0 + j) * 4u + 1u]));
        hi = max(hi, uint(I32(p.info).v[(tt0 + j) * 4u + 2u]));
    }
    uint sg = lo / p.seg + gl_WorkGroupID.z;
    uint s0 = sg * p.seg, s1 = min(s0 + p.seg, hi);
    if (s0 >= hi) return;
    uint toff = uint(I32(p.info).v[tt0 * 4u]);
    uint first[QT], end_[QT];
    for (uint j = 0; j < QT; j++) {
        uint t = tt0 + j / max(nhh, 1u), h = h0 + j % max(nhh, 1u);
        first[j] = j < nq ? uint(I32(p.info).v[t * 4u + 1u]) : 0u;
        end_[j] = j < nq ? uint(I32(p.info).v[t * 4u + 2u]) : 0u;
        if (j < nq) {
            uint64_t qa = p.q + (uint64_t(t) * p.nh + h) * p.hd * 4u;
            for (uint i = tid; i < p.hd; i += 64u) qs[j * MAXW + i] = F32(qa).v[i];
        }
    }
    if (tid < QT) sm[tid] = uintBitsToFloat(0xff800000u), sl[tid] = 0.0;
    barrier();
    uint rb = p.kvtype == 0u ? hr * 4u : p.kvtype == 1u ? hr * 2u : hr + 2u * (hr >> p.gshift);
    float acc[QT][MAXW / 64];
    for (uint j = 0; j < QT; j++)
        for (uint d = 0; d < MAXW / 64; d++) acc[j][d] = 0.0;
    uint c_lo = max(s0, lo) / 64u * 64u;
    for (uint c0 = c_lo; c0 < s1; c0 += 64u) {
        // scores: lane i takes key c0 + i for every item of the tile
        uint key = c0 + tid;
        float sc[QT];
        for (uint j = 0; j < QT; j++) sc[j] = 0.0;
        bool any = false;
        for (uint j = 0; j < QT; j++) any = any || (j < nq && key >= first[j] && key < end_[j]);
        if (any) {
            uint blk = uint(I32(p.tables).v[toff + key / p.bs]);
            uint64_t slot = (uint64_t(blk) * p.bs + key % p.bs) * rb;
            for (uint i = 0; i < hr; i++) {
                float kv = kv_load(p.kc + slot, i, hr, p.kvtype, p.gshift);
                for (uint j = 0; j < QT; j++) sc[j] += qs[j * MAXW + i] * kv;
            }
            for (uint i = 0; i < hr; i++) {
                float kv = kv_load(p.vc + slot, i, hr, p.kvtype, p.gshift);
                for (uint j = 0; j < QT; j++) sc[j] += qs[j * MAXW + hr + i] * kv;
            }
        }
        for (uint j = 0; j < QT; j++) {
            float s = sc[j] * p.kscale;
            if (p.softcap > 0.0) s = p.softcap * tanh_(s);
            pe[j * 64u + tid] = (j < nq && key >= first[j] && key < end_[j]) ? s : uintBitsToFloat(0xff800000u);
        }
        barrier();
        // each item's running max, sum and rescale factor, kept by lane j for item j
        if (tid < nq) {
            uint j = tid;
            float cm = uintBitsToFloat(0xff800000u);
            for (uint i = 0; i < 64u; i++) cm = max(cm, pe[j * 64u + i]);
            float mo = sm[j], mn = max(mo, cm);
            uint klo = max(c0, first[j]), khi = min(min(c0 + 64u, s1), end_[j]);
            float alpha = 1.0; // no key of this item in the chunk: nothing changes
            if (klo < khi && !isinf(mn)) {
                alpha = isinf(mo) ? 0.0 : exp(mo - mn);
                sm[j] = mn;
            }
            salpha[j] = alpha;
        }
        barrier();
        for (uint j = 0; j < QT; j++) {
            if (j >= nq) break;
            float s = pe[j * 64u + tid];
            pe[j * 64u + tid] = isinf(s) ? 0.0 : exp(s - sm[j]);
            float alpha = salpha[j];
            for (uint d = 0; d < MAXW / 64; d++) acc[j][d] *= alpha;
        }
        barrier();
        if (tid < nq) {
            uint j = tid;
            uint klo = max(c0, first[j]), khi = min(min(c0 + 64u, s1), end_[j]);
            if (klo < khi && !isinf(sm[j])) {
                float cs = 0.0;
                for (uint k = klo; k < khi; k++) cs += pe[j * 64u + (k - c0)];
                sl[j] = sl[j] * salpha[j] + cs;
            }
        }
        // values (the same rows): lane d adds dimensions d, d + 64, ... of each key, in key order
        for (uint k = c0; k < min(c0 + 64u, s1); k++) {
            bool used = false;
            for (uint j = 0; j < QT; j++) used = used || (j < nq && k >= first[j] && k < end_[j]);
            if (!used) continue;
            uint blk = uint(I32(p.tables).v[toff + k / p.bs]);
            uint64_t slot = (uint64_t(blk) * p.bs + k % p.bs) * rb;
            for (uint d = 0; d < MAXW / 64; d++) {
                uint dd = d * 64u + tid;
                if (dd >= p.hd) break;
                float v = dd < hr ? kv_load(p.kc + slot, dd, hr, p.kvtype, p.gshift)
                                  : kv_load(p.vc + slot, dd - hr, hr, p.kvtype, p.gshift);
                for (uint j = 0; j < QT; j++)
                    if (j < nq && k >= first[j] && k < end_[j]) acc[j][d] += pe[j * 64u + (k - c0)] * v;
            }
        }
        barrier();
    }
    for (uint j = 0; j < nq; j++) {
        if (first[j] >= s1 || end_[j] <= s0) continue; // this item has no key in the segment
        uint t = tt0 + j / nhh, h = h0 + j % nhh;
        int pb = I32(p.info).v[t * 4u + 3u];
        if (pb < 0) { // the token's keys are all in this segment: its output
            uint64_t oa = p.out_ + (uint64_t(t) * p.nh + h) * p.hd * 4u;
            for (uint d = 0; d < MAXW / 64; d++)
                if (d * 64u + tid < p.hd) F32(oa).v[d * 64u + tid] = acc[j][d] / sl[j];
        } else { // one segment's partial: slot = base + segment index within the token's range
            uint slot = uint(pb) + (sg - first[j] / p.seg);
            uint64_t pa = p.part + (uint64_t(slot) * p.nh + h) * (p.hd + 2u) * 4u;
            if (tid == 0u) F32(pa).v[0] = sm[j], F32(pa).v[1] = sl[j];
            for (uint d = 0; d < MAXW / 64; d++)
                if (d * 64u + tid < p.hd) F32(pa).v[2u + d * 64u + tid] = acc[j][d];
        }
    }
}
