#version 450
// rmsnorm.comp - out[i] = w * (x[row i] * 1 / sqrt(mean(x^2) + eps)), one
// workgroup per row; strided partial sums then a fixed tree (the same for
// every batch).
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uint64_t x, rows, w, out_;  // rows: int [T] (0: row i)
    uint T, n, ldx, ldo;
    float eps;
} p;
shared float red[64];

void main() {
    uint i = flat_group(), tid = gl_LocalInvocationID.x;
    if (i >= p.T) return;
    uint row = p.rows != 0ul ? uint(I32(p.rows).v[i]) : i;
    uint xo = row * p.ldx, oo = i * p.ldo;
    float ss = 0.0;
    for (uint k = tid; k < p.n; k += 64u) {
        float v = F32(p.x).v[xo + k];
        ss += v * v;
    }
    red[tid] = ss;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        barrier();
    }
    float inv = div_rn(1.0, sqrt(div_rn(red[0], float(p.n)) + p.eps));
    for (uint k = tid; k < p.n; k += 64u) F32(p.out_).v[oo + k] = F32(p.w).v[k] * (F32(p.x).v[xo + k] * inv);
}
