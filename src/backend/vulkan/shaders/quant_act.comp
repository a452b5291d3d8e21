#version 450
// quant_act.comp - activations quantized per block of 32 as quant.c's
// quant_activations does (xllm arithmetic): d = amax / 127, codes
// round-to-even(x * (1 / d)), s = their sum, ds = d * s; a block holding inf
// or NaN: codes 0, d NaN; a block whose 1 / d overflows: zeros. Divisions
// correctly rounded (div_rn) so the codes equal the CPU's.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    uint64_t x;  // f32 [T][ldx]
    uint64_t q;  // int8 [T][cols]
    uint64_t d;  // f32 d [T*nb], int s [T*nb], f32 ds [T*nb]
    uint T, cols, ldx;
} p;

void main() {
    uint nb = p.cols / 32u;
    uint i = flat_group() * 64u + gl_LocalInvocationID.x;
    if (i >= p.T * nb) return;
    uint t = i / nb, b = i % nb;
    uint xo = t * p.ldx + b * 32u;
    float amax = 0.0;
    bool finite = true;
    for (uint k = 0; k < 32u; k++) {
        float a = abs(F32(p.x).v[xo + k]);
        if (!(a <= FLT_MAX)) finite = false;
        else amax = max(amax, a);
    }
    float db = div_rn(amax, 127.0);
    float id = db != 0.0 ? div_rn(1.0, db) : 0.0;
    uint64_t qo = p.q + uint64_t(t) * p.cols + uint64_t(b) * 32u;
    uint64_t so = p.d + uint64_t(p.T) * nb * 4u, dso = so + uint64_t(p.T) * nb * 4u;
    if (!finite || !(id <= FLT_MAX)) {
        for (uint k = 0; k < 32u; k++) I8(qo).v[k] = int8_t(0);
        float dd = finite ? db : uintBitsToFloat(0x7fc00000u);
        F32(p.d).v[i] = dd;
        I32(so).v[i] = 0;
        F32(dso).v[i] = dd * 0.0;
        return;
    }
    int sum = 0;
    for (uint k = 0; k < 32u; k++) {
        precise float s = F32(p.x).v[xo + k] * id;
        int v = int(roundEven(s));
        I8(qo).v[k] = int8_t(v);
        sum += v;
    }
    F32(p.d).v[i] = db;
    I32(so).v[i] = sum;
    precise float dsv = db * float(sum);
    F32(dso).v[i] = dsv;
}
