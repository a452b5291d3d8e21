// common.glsl - what every xLLM compute shader shares: buffers reached by
// device address (push constants carry 64-bit addresses, so no descriptor
// sets and no 128 MiB binding limit), f16 conversions that round as the CPU
// backend does, and a correctly rounded division (lavapipe's a / b is
// a * (1 / b), off by a few ulp: the activation codes would move a step).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32 { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer I32 { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer U16 { uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 1) buffer U8 { uint8_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 1) buffer I8 { int8_t v[]; };

#define FLT_MAX 3.402823466e+38

float f16_at(uint64_t a) { return unpackHalf2x16(uint(U16(a).v[0])).x; }

// IEEE half of f, rounded to nearest even (base/dtype.c's f32_to_f16, bit for bit)
uint f32_to_f16(float f) {
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16) & 0x8000u;
    int e = int((x >> 23) & 0xffu) - 127 + 15;
    uint mant = x & 0x7fffffu;
    if (((x >> 23) & 0xffu) == 0xffu) return sign | 0x7c00u | (mant != 0u ? 0x200u : 0u);
    if (e >= 31) return sign | 0x7c00u;
    if (e <= 0) {
        if (e < -10) return sign;
        mant |= 0x800000u;
        uint shift = uint(14 - e);
        uint half_ = mant >> shift, rem = mant & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (half_ & 1u) != 0u)) half_++;
        return sign | half_;
    }
    uint h = sign | (uint(e) << 10) | (mant >> 13);
    uint rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) h++;
    return h;
}

// a / b correctly rounded (one Newton step on the quotient's residual, in fmas)
float div_rn(float a, float b) {
    precise float y = 1.0 / b;
    precise float q = a * y;
    precise float r = fma(-q, b, a);
    precise float q1 = fma(r, y, q);
    return (isinf(y) || isnan(q1) || b == 0.0) ? a / b : q1;
}

// tanh, accurate over the whole range (no exp overflow; no cancellation near 0)
float tanh_(float x) {
    float a = abs(x);
    if (a < 0.25) {
        float x2 = x * x;
        return x * (1.0 + x2 * (-0.33333333 + x2 * (0.13333333 + x2 * (-0.053968254 + x2 * 0.021869488))));
    }
    float e = exp(2.0 * min(a, 15.0));
    return sign(x) * (1.0 - 2.0 / (e + 1.0));
}

// flat workgroup index over a 2-D grid (counts past 65535 groups)
uint flat_group() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }
