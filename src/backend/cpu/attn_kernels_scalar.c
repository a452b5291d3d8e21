/*
 * attn_kernels_scalar.c - attention inner loops in plain C (the reference),
 * over K/V rows stored as any kv_dtype (kvq_get: the exact f32 value).
 */
#include "backend/cpu/attn_kernels.h"

typedef const unsigned char *rowp;

/* value d of a stored row */
#define KV(DT, r, d) kvq_get(DT, r, hd, d)

static inline __attribute__((always_inline)) void scores_T(const int DT, const float *q, rowp k, size_t stride, int n,
                                                           int hd, float scale, float *out) {
    for (int i = 0; i < n; i++, k += stride) {
        float s = 0.0f;
        for (int d = 0; d < hd; d++) s += q[d] * KV(DT, k, d);
        out[i] = s * scale;
    }
}

static inline __attribute__((always_inline)) void accum_T(const int DT, float *acc, const float *w, rowp v,
                                                          size_t stride, int n, int hd) {
    for (int i = 0; i < n; i++, v += stride)
        for (int d = 0; d < hd; d++) acc[d] += w[i] * KV(DT, v, d);
}

/* Several queries per key: each query's score is the same expression over d
 * as scores_T (so the same bits, contracted or not alike). */
static inline __attribute__((always_inline)) void scores_multi_T(const int DT, const float *q, size_t ldq, int nq,
                                                                 rowp k, size_t stride, int n, int hd, float scale,
                                                                 float *out, size_t ldo) {
    for (int i = 0; i < n; i++, k += stride)
        for (int r = 0; r < nq; r++) {
            const float *qr = q + (size_t)r * ldq;
            float s = 0.0f;
            for (int d = 0; d < hd; d++) s += qr[d] * KV(DT, k, d);
            out[(size_t)r * ldo + (size_t)i] = s * scale;
        }
}

/* Each value row feeds every query's accumulator, keys in order per query. */
static inline __attribute__((always_inline)) void accum_multi_T(const int DT, float *acc, size_t lda, int nq,
                                                                const float *w, size_t ldw, rowp v, size_t stride,
                                                                int n, int hd) {
    for (int i = 0; i < n; i++, v += stride)
        for (int r = 0; r < nq; r++) {
            float *a = acc + (size_t)r * lda;
            const float *wr = w + (size_t)r * ldw;
            for (int d = 0; d < hd; d++) a[d] += wr[i] * KV(DT, v, d);
        }
}

/* The reference exp (this file has the baseline flags, as attention.c). */
static void exp_row(float *s, int n, float mx) {
    for (int i = 0; i < n; i++) s[i] = fast_exp_nonpos(s[i] - mx);
}

static void attn_softmax(float *s, size_t lds, int nq, const int *n, float *part, size_t pst) {
    attn_softmax_rows(s, lds, nq, n, part, pst, attn_max_row_ref, exp_row);
}

ATTN_KV_TABLE(cpu_attn_scalar, attn_softmax)
