#version 450
// eltwise.comp - the element-wise operations over T rows of n values:
// op 0: a += b (residual); op 1: a = silu(g) * u (g in b, u in c);
// op 2: a = b (copy_rows). Rows lda / ldb / ldc floats apart.
// The mixture-of-experts steps (c: an int index per row, then a float weight per row):
// op 3: a[t] = b[idx[t]] (gather); op 4: a[idx[t]] += w[t] * b[t] (an expert's
// weighted output into its tokens' sums: distinct rows, so no races);
// op 5: a = 0; op 6: a[t] += sigmoid(c[t]) * b[t] (the shared expert's gate).
// op 7: a = gelu(g) * u (GELU's tanh approximation, GeGLU: g in b, u in c);
// op 8: a *= s (Gemma's embedding scale).
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uint64_t a, b, c;
    uint T, n, lda, ldb, ldc, op;
    float s;
} p;

void main() {
    uint i = flat_group() * 64u + gl_LocalInvocationID.x;
    if (i >= p.T * p.n) return;
    uint t = i / p.n, k = i % p.n;
    uint ia = t * p.lda + k, ib = t * p.ldb + k;
    if (p.op == 0u) {
        F32(p.a).v[ia] = F32(p.a).v[ia] + F32(p.b).v[ib];
    } else if (p.op == 1u) {
        float g = F32(p.b).v[ib], u = F32(p.c).v[t * p.ldc + k];
        float e = exp(-abs(g));
        float sg = g >= 0.0 ? div_rn(1.0, 1.0 + e) : div_rn(e, 1.0 + e);
        F32(p.a).v[ia] = (g * sg) * u;
    } else if (p.op == 2u) {
        F32(p.a).v[ia] = F32(p.b).v[ib];
    } else if (p.op == 3u) {
        uint src = uint(I32(p.c).v[t]);
        F32(p.a).v[ia] = F32(p.b).v[src * p.ldb + k];
    } else if (p.op == 4u) {
        uint dst = uint(I32(p.c).v[t]);
        float w = F32(p.c).v[p.T + t];
        uint o = dst * p.lda + k;
        F32(p.a).v[o] = F32(p.a).v[o] + w * F32(p.b).v[ib];
    } else if (p.op == 5u) {
        F32(p.a).v[ia] = 0.0;
    } else if (p.op == 7u) {
        float g = F32(p.b).v[ib], u = F32(p.c).v[t * p.ldc + k];
        const float c0 = 0.79788456080286535587989211986876, a0 = 0.044715;
        F32(p.a).v[ia] = (0.5 * g * (1.0 + tanh_(c0 * g * (1.0 + a0 * g * g)))) * u;
    } else if (p.op == 8u) {
        F32(p.a).v[ia] = F32(p.a).v[ia] * p.s;
    } else {
        float g = div_rn(1.0, 1.0 + exp(-F32(p.c).v[t * p.ldc]));
        F32(p.a).v[ia] = F32(p.a).v[ia] + g * F32(p.b).v[ib];
    }
}
