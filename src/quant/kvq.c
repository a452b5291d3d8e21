/* kvq.c - converting K/V rows to and from the KV cache's storage formats (kvq.h). */
#include "quant/kvq.h"

#include <float.h>
#include <math.h>

const char *kvq_name(kv_dtype dt) { return dt == KV_F16 ? "f16" : dt == KV_Q8 ? "q8" : "f32"; }

int kvq_parse(const char *s, kv_dtype *dt, int *is_auto) {
    *is_auto = 0;
    if (!s || !*s || !strcmp(s, "f32")) *dt = KV_F32;
    else if (!strcmp(s, "f16")) *dt = KV_F16;
    else if (!strcmp(s, "q8")) *dt = KV_Q8;
    else if (!strcmp(s, "auto")) *is_auto = 1;
    else return -1;
    return 0;
}

void kvq_store_row(kv_dtype dt, const float *x, int hd, void *dst) {
    unsigned char *o = dst;
    if (dt == KV_F32) {
        memcpy(o, x, (size_t)hd * 4);
        return;
    }
    if (dt == KV_F16) {
        for (int i = 0; i < hd; i++) {
            uint16_t h = f32_to_f16(x[i]);
            memcpy(o + (size_t)i * 2, &h, 2);
        }
        return;
    }
    int G = kvq_group(hd);
    for (int g = 0; g < hd / G; g++) {
        const float *xg = x + (size_t)g * G;
        float amax = 0.0f;
        int finite = 1;
        for (int i = 0; i < G; i++) {
            float a = fabsf(xg[i]);
            if (!(a <= FLT_MAX)) finite = 0;
            else if (a > amax) amax = a;
        }
        uint16_t h = 0x7e00; /* NaN */
        if (finite) {
            float d = amax / 127.0f;
            h = f32_to_f16(d < 65504.0f ? d : 65504.0f);
            float df = f16_to_f32(h), id = df > 0.0f ? 1.0f / df : 0.0f;
            for (int i = 0; i < G; i++) {
                float v = roundf(xg[i] * id);
                o[(size_t)g * G + i] = (unsigned char)(int8_t)(v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v);
            }
        } else {
            memset(o + (size_t)g * G, 0, (size_t)G);
        }
        memcpy(o + hd + 2 * g, &h, 2);
    }
}

void kvq_load_row(kv_dtype dt, const void *src, int hd, float *out) {
    for (int i = 0; i < hd; i++) out[i] = kvq_get(dt, src, hd, i);
}
