#version 450
// attention.comp - causal attention over the paged KV cache, flash-style:
// one workgroup per (query tile, head, key segment). A query tile is up to 8
// tokens of one sequence (prefill: consecutive positions; decode: one token),
// so each K/V row loaded serves every query of the tile.
//
// The keys are cut at absolute positions: chunks of 64 (key 64c .. 64c+63)
// and segments of p.seg keys (a multiple of 64). A query folds its own keys
// ([first, end): causal, sliding window) chunk by chunk in key order (online
// softmax: running max m, sum l, output acc); keys outside its range are
// skipped, never added as zeros. Because the cuts are absolute, what a query
// computes depends on its own first and end only - not on the tile it shares
// or the batch (backend.h's determinism).
//
// Split-K (flash-decoding): a query whose keys span one segment writes its
// output here (acc / l); one whose keys span several writes each segment's
// (m, l, acc) to the partial buffer and attn_combine.comp folds them in
// segment order. Whether a query splits depends on its own key range.
//
// Scores: s = (q . k) * kscale, kscale = scale / softcap; with softcap > 0
// then s = softcap * tanh(s) (Gemma 2; the CPU backend's order). GQA: head h
// reads KV head h / (nh / nkv); a one-token tile's workgroup takes hq heads
// of one KV group together (queries of the tile, as a prefill tile's tokens
// are), so each K/V row is read once per group, not once per head - the
// arithmetic of each query unchanged. KV rows in f32, f16 or q8 (kvq.h).
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uint64_t q, out_, kc, vc, tables;
    uint64_t info;   // int [T][4]: table offset, first key, keys end, partial base (-1: one segment)
    uint64_t tiles;  // int [ntiles][2]: first token, tokens
    uint64_t part;   // float [slot][nh][2 + hd]: m, l, acc
    uint ntiles, nh, nkv, hd, bs, kvtype, gshift, seg;
    float kscale, softcap;
    uint nmulti;     // the first nmulti tiles have several tokens: one workgroup per head
    uint hq;         // heads per workgroup of the one-token tiles after them (divides nh / nkv)
} p;
#define MAXHD 512
#define QTMAX 8
shared float qs[QTMAX * MAXHD];
shared float pe[QTMAX * 64];
shared float sm[QTMAX], sl[QTMAX], salpha[QTMAX]; // per query: running max, sum, this chunk's rescale

uint first_at(uint tt0, uint j) { return uint(I32(p.info).v[(tt0 + j) * 4u + 1u]); }
uint end_at(uint tt0, uint j) { return uint(I32(p.info).v[(tt0 + j) * 4u + 2u]); }

uint rb_() { return p.kvtype == 0u ? p.hd * 4u : p.kvtype == 1u ? p.hd * 2u : p.hd + 2u * (p.hd >> p.gshift); }

float kv_at(uint64_t row, uint i) {
    if (p.kvtype == 0u) return F32(row).v[i];
    if (p.kvtype == 1u) return unpackHalf2x16(uint(U16(row).v[i])).x;
    return float(int(I8(row).v[i])) * f16_at(row + p.hd + 2u * (i >> p.gshift));
}

#define QT 1
#define ATTN_TILE attn_tile_1
#include "attention_tile.glsl"
#undef QT
#undef ATTN_TILE
#define QT 2
#define ATTN_TILE attn_tile_2
#include "attention_tile.glsl"
#undef QT
#undef ATTN_TILE
#define QT 4
#define ATTN_TILE attn_tile_4
#include "attention_tile.glsl"
#undef QT
#undef ATTN_TILE
#define QT 8
#define ATTN_TILE attn_tile_8
#include "attention_tile.glsl"
#undef QT
#undef ATTN_TILE

void main() {
    uint item = flat_group(), tid = gl_LocalInvocationID.x;
    uint ng = p.nh / p.hq; // head groups of a one-token tile
    if (item >= p.nmulti * p.nh + (p.ntiles - p.nmulti) * ng) return;
    uint tile, h, hq = 1u;
    if (item < p.nmulti * p.nh) tile = item / p.nh, h = item % p.nh;
    else tile = p.nmulti + (item - p.nmulti * p.nh) / ng, h = (item - p.nmulti * p.nh) % ng * p.hq, hq = p.hq;
    uint kvh = h / (p.nh / p.nkv);
    uint tt0 = uint(I32(p.tiles).v[2u * tile]), nt = uint(I32(p.tiles).v[2u * tile + 1u]);
    if (nt > 1u) hq = 1u; // (the host puts every multi-token tile first)
    uint nq = nt * hq;    // queries: the tile's tokens x the heads taken
    // the tile's key range, and this workgroup's segment of it
    uint lo = 0xffffffffu, hi = 0u;
    for (uint j = 0; j < nt; j++) {
        lo = min(lo, uint(I32(p.info).v[(tt0 + j) * 4u + 1u]));
        hi = max(hi, uint(I32(p.info).v[(tt0 + j) * 4u + 2u]));
    }
    uint sg = lo / p.seg + gl_WorkGroupID.z;
    uint s0 = sg * p.seg, s1 = min(s0 + p.seg, hi);
    if (s0 >= hi) return;
    // the smallest body that holds the tile's queries (register arrays sized by it)
    if (nq == 1u) attn_tile_1(tid, h, hq, kvh, tt0, nq, lo, hi, sg, s0, s1);
    else if (nq == 2u) attn_tile_2(tid, h, hq, kvh, tt0, nq, lo, hi, sg, s0, s1);
    else if (nq <= 4u) attn_tile_4(tid, h, hq, kvh, tt0, nq, lo, hi, sg, s0, s1);
    else attn_tile_8(tid, h, hq, kvh, tt0, nq, lo, hi, sg, s0, s1);
}
