// kv_store.glsl - one row of n f32 values written into the KV pool's storage
// (kvq.h): f32 as is, f16 rounded to nearest even (f32_to_f16), or q8 (int8
// codes per group of 1 << gshift, then an f16 scale per group, rounded and
// clamped as kvq_store_row does it). For the shaders that write latent rows
// (mla_rope_kv.comp); needs common.glsl first.
void kv_store_row(uint64_t src, uint64_t dst, uint n, uint kvtype, uint gshift) {
    if (kvtype == 0u) {
        for (uint i = 0; i < n; i++) F32(dst).v[i] = F32(src).v[i];
    } else if (kvtype == 1u) {
        for (uint i = 0; i < n; i++) U16(dst).v[i] = uint16_t(f32_to_f16(F32(src).v[i]));
    } else {
        uint G = 1u << gshift;
        for (uint g = 0; g < n / G; g++) {
            float amax = 0.0;
            bool finite = true;
            for (uint i = 0; i < G; i++) {
                float a = abs(F32(src).v[g * G + i]);
                if (!(a <= FLT_MAX)) finite = false;
                else if (a > amax) amax = a;
            }
            uint h = 0x7e00u; // NaN: a group with an inf or NaN
            if (finite) {
                float d = div_rn(amax, 127.0);
                h = f32_to_f16(d < 65504.0 ? d : 65504.0);
                float df = unpackHalf2x16(h).x, id = df > 0.0 ? div_rn(1.0, df) : 0.0;
                for (uint i = 0; i < G; i++) {
                    precise float xv = F32(src).v[g * G + i] * id;
                    float r = sign(xv) * floor(abs(xv) + 0.5); // roundf: halves away from zero
                    int qv = r > 127.0 ? 127 : r < -127.0 ? -127 : int(r);
                    I8(dst).v[g * G + i] = int8_t(qv);
                }
            } else {
                for (uint i = 0; i < G; i++) I8(dst).v[g * G + i] = int8_t(0);
            }
            U16(dst + n + 2u * g).v[0] = uint16_t(h);
        }
    }
}

// value i of a stored row of n values (kvq_get)
float kv_load(uint64_t row, uint i, uint n, uint kvtype, uint gshift) {
    if (kvtype == 0u) return F32(row).v[i];
    if (kvtype == 1u) return unpackHalf2x16(uint(U16(row).v[i])).x;
    return float(int(I8(row).v[i])) * f16_at(row + n + 2u * (i >> gshift));
}
