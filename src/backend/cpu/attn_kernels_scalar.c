/*
 * attn_kernels_scalar.c - attention inner loops in plain C (the reference).
 */
#include "backend/cpu/attn_kernels.h"

static void attn_scores(const float *q, const float *k, size_t stride, int n, int hd, float scale, float *out) {
    for (int i = 0; i < n; i++, k += stride) {
        float s = 0.0f;
        for (int d = 0; d < hd; d++) s += q[d] * k[d];
        out[i] = s * scale;
    }
}

static void attn_accum(float *acc, const float *w, const float *v, size_t stride, int n, int hd) {
    for (int i = 0; i < n; i++, v += stride)
        for (int d = 0; d < hd; d++) acc[d] += w[i] * v[d];
}

/* Several queries per key: each query's score is the same expression over d
 * as attn_scores (so the same bits, contracted or not alike). */
static void attn_scores_multi(const float *q, size_t ldq, int nq, const float *k, size_t stride, int n, int hd,
                              float scale, float *out, size_t ldo) {
    for (int i = 0; i < n; i++, k += stride)
        for (int r = 0; r < nq; r++) {
            const float *qr = q + (size_t)r * ldq;
            float s = 0.0f;
            for (int d = 0; d < hd; d++) s += qr[d] * k[d];
            out[(size_t)r * ldo + (size_t)i] = s * scale;
        }
}

/* Each value row feeds every query's accumulator, keys in order per query. */
static void attn_accum_multi(float *acc, size_t lda, int nq, const float *w, size_t ldw, const float *v, size_t stride,
                             int n, int hd) {
    for (int i = 0; i < n; i++, v += stride)
        for (int r = 0; r < nq; r++) {
            float *a = acc + (size_t)r * lda;
            const float *wr = w + (size_t)r * ldw;
            for (int d = 0; d < hd; d++) a[d] += wr[i] * v[d];
        }
}

/* The reference exp (this file has the baseline flags, as attention.c). */
static void exp_row(float *s, int n, float mx) {
    for (int i = 0; i < n; i++) s[i] = xllm_exp_nonpos(s[i] - mx);
}

static void attn_softmax(float *s, size_t lds, int nq, const int *n, float *part, size_t pst) {
    attn_softmax_rows(s, lds, nq, n, part, pst, exp_row);
}

const cpu_attn_kernels cpu_attn_scalar = {.scores = attn_scores,
                                          .accum = attn_accum,
                                          .scores_multi = attn_scores_multi,
                                          .accum_multi = attn_accum_multi,
                                          .softmax = attn_softmax};
