// attention_tile.glsl - the body of attention.comp for tiles of up to QT
// queries, included once per QT (1, 2, 4, 8: the smallest that holds the tile) as function
// ATTN_TILE; register arrays are sized by QT, so a one-query tile does not
// pay for eight. The arithmetic of a query is the same in both.
// Query j of the tile is token tt0 + j / hq, head h + j % hq: a prefill
// tile's tokens for one head (hq 1), or a decode token's heads of one KV
// group (GQA: each K/V row loaded serves the whole group).
void ATTN_TILE(uint tid, uint h, uint hq, uint kvh, uint tt0, uint nq, uint lo, uint hi, uint sg, uint s0, uint s1) {
    uint toff = uint(I32(p.info).v[tt0 * 4u]);
    uint first[QT], end_[QT];
    for (uint j = 0; j < QT; j++) {
        first[j] = j < nq ? uint(I32(p.info).v[(tt0 + j / hq) * 4u + 1u]) : 0u;
        end_[j] = j < nq ? uint(I32(p.info).v[(tt0 + j / hq) * 4u + 2u]) : 0u;
        if (j < nq) {
            uint64_t qa = p.q + (uint64_t(tt0 + j / hq) * p.nh + h + j % hq) * p.hd * 4u;
            for (uint i = tid; i < p.hd; i += 64u) qs[j * MAXHD + i] = F32(qa).v[i];
        }
    }
    if (tid < QT) sm[tid] = uintBitsToFloat(0xff800000u), sl[tid] = 0.0;
    barrier();
    uint rb = rb_();
    float acc[QT][MAXHD / 64];
    for (uint j = 0; j < QT; j++)
        for (uint d = 0; d < MAXHD / 64; d++) acc[j][d] = 0.0;
    uint c_lo = max(s0, lo) / 64u * 64u;
    for (uint c0 = c_lo; c0 < s1; c0 += 64u) {
        // scores: lane i takes key c0 + i for every query of the tile
        uint key = c0 + tid;
        float sc[QT];
        for (uint j = 0; j < QT; j++) sc[j] = 0.0;
        bool any = false;
        for (uint j = 0; j < QT; j++) any = any || (j < nq && key >= first[j] && key < end_[j]);
        if (any) {
            uint blk = uint(I32(p.tables).v[toff + key / p.bs]);
            uint64_t row = p.kc + ((uint64_t(blk) * p.bs + key % p.bs) * p.nkv + kvh) * rb;
            for (uint i = 0; i < p.hd; i++) {
                float kv = kv_at(row, i);
                for (uint j = 0; j < QT; j++) sc[j] += qs[j * MAXHD + i] * kv;
            }
        }
        for (uint j = 0; j < QT; j++) {
            float s = sc[j] * p.kscale;
            if (p.softcap > 0.0) s = p.softcap * tanh_(s);
            pe[j * 64u + tid] = (j < nq && key >= first[j] && key < end_[j]) ? s : uintBitsToFloat(0xff800000u);
        }
        barrier();
        // each query's running max, sum and rescale factor: kept by lane j for
        // query j (in shared memory), the chunk's keys folded in key order
        if (tid < nq) {
            uint j = tid;
            float cm = uintBitsToFloat(0xff800000u);
            for (uint i = 0; i < 64u; i++) cm = max(cm, pe[j * 64u + i]);
            float mo = sm[j], mn = max(mo, cm);
            uint klo = max(c0, first_at(tt0, j / hq)), khi = min(min(c0 + 64u, s1), end_at(tt0, j / hq));
            float alpha = 1.0; // no key of this query in the chunk: nothing changes
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
            for (uint d = 0; d < MAXHD / 64; d++) acc[j][d] *= alpha;
        }
        barrier();
        if (tid < nq) {
            uint j = tid;
            uint klo = max(c0, first_at(tt0, j / hq)), khi = min(min(c0 + 64u, s1), end_at(tt0, j / hq));
            if (klo < khi && !isinf(sm[j])) {
                float cs = 0.0;
                for (uint k = klo; k < khi; k++) cs += pe[j * 64u + (k - c0)];
                sl[j] = sl[j] * salpha[j] + cs;
            }
        }
        // values: lane d adds dimensions d, d + 64, ... of each key, in key order
        for (uint k = c0; k < min(c0 + 64u, s1); k++) {
            bool used = false;
            for (uint j = 0; j < QT; j++) used = used || (j < nq && k >= first[j] && k < end_[j]);
            if (!used) continue;
            uint blk = uint(I32(p.tables).v[toff + k / p.bs]);
            uint64_t row = p.vc + ((uint64_t(blk) * p.bs + k % p.bs) * p.nkv + kvh) * rb;
            for (uint d = 0; d < MAXHD / 64; d++) {
                uint dd = d * 64u + tid;
                if (dd >= p.hd) break;
                float v = kv_at(row, dd);
                for (uint j = 0; j < QT; j++)
                    if (j < nq && k >= first[j] && k < end_[j]) acc[j][d] += pe[j * 64u + (k - c0)] * v;
            }
        }
        barrier();
    }
    for (uint j = 0; j < nq; j++) {
        if (first[j] >= s1 || end_[j] <= s0) continue; // this query has no key in the segment
        uint t = tt0 + j / hq, hj = h + j % hq;
        int pb = I32(p.info).v[t * 4u + 3u];
        if (pb < 0) { // the query's keys are all in this segment: its output
            uint64_t oa = p.out_ + (uint64_t(t) * p.nh + hj) * p.hd * 4u;
            for (uint d = 0; d < MAXHD / 64; d++)
                if (d * 64u + tid < p.hd) F32(oa).v[d * 64u + tid] = acc[j][d] / sl[j];
        } else { // one segment's partial: slot = base + segment index within the query's range
            uint slot = uint(pb) + (sg - first[j] / p.seg);
            uint64_t pa = p.part + (uint64_t(slot) * p.nh + hj) * (p.hd + 2u) * 4u;
            if (tid == 0u) F32(pa).v[0] = sm[j], F32(pa).v[1] = sl[j];
            for (uint d = 0; d < MAXHD / 64; d++)
                if (d * 64u + tid < p.hd) F32(pa).v[2u + d * 64u + tid] = acc[j][d];
        }
    }
}
