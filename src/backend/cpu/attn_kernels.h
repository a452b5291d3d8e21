/*
 * attn_kernels.h - the attention inner loops of each CPU kernel level, a
 * table apart from the matmul kernels (kernels.h points at it) so the two
 * families evolve independently.
 *
 * Determinism: a key's score and a value's contribution are computed the same
 * way whatever its neighbours are and however the keys are split into runs
 * (tested), so a token's attention does not depend on the batch.
 */
#ifndef XLLM_BACKEND_CPU_ATTN_KERNELS_H
#define XLLM_BACKEND_CPU_ATTN_KERNELS_H

#include <math.h>
#include <stddef.h>
#include "base/fastmath.h"
#include "quant/kvq.h"

/* The attention loops over the KV cache's stored rows (quant/kvq.h), one set
 * per kv_dtype: k / v point at a row's first byte, rows `stride` BYTES apart,
 * otherwise as the f32 loops of cpu_attn_kernels below. A level's loads
 * dequantize exactly, so kv[dt] computes the bits of kv[KV_F32] over the
 * dequantized rows (tested at every level): the arithmetic is the f32 one,
 * only the bytes read change. */
typedef struct cpu_attn_kv {
    void (*scores)(const float *q, const void *k, size_t stride, int n, int hd, float scale, float *out);
    void (*accum)(float *acc, const float *w, const void *v, size_t stride, int n, int hd);
    void (*scores_multi)(const float *q, size_t ldq, int nq, const void *k, size_t stride, int n, int hd, float scale,
                         float *out, size_t ldo);
    void (*accum_multi)(float *acc, size_t lda, int nq, const float *w, size_t ldw, const void *v, size_t stride,
                        int n, int hd);
} cpu_attn_kv;

typedef struct cpu_attn_kernels {
    /* Over n keys/values stride floats apart: out[i] = scale * (q . k_i);
     * acc[d] += sum_i w[i] * v_i[d] (i in order). */
    void (*scores)(const float *q, const float *k, size_t stride, int n, int hd, float scale, float *out);
    void (*accum)(float *acc, const float *w, const float *v, size_t stride, int n, int hd);

    /* The same two loops for nq queries at once against the same keys/values
     * (K/V sharing: a GQA group's heads, consecutive tokens of a sequence), so
     * each K/V vector loaded feeds several queries (register tiles of queries
     * x keys). Query r is row r of q (ldq floats apart); its outputs go to
     * row r of out (ldo apart): out[r * ldo + i] = scale * (q_r . k_i), and
     * acc[r * lda + d] += sum_i w[r * ldw + i] * v_i[d] (i in order).
     * Bit-identical to scores / accum called once per query: every score and
     * every sum goes through exactly the same operations (tested). */
    void (*scores_multi)(const float *q, size_t ldq, int nq, const float *k, size_t stride, int n, int hd,
                         float scale, float *out, size_t ldo);
    void (*accum_multi)(float *acc, size_t lda, int nq, const float *w, size_t ldw, const float *v, size_t stride,
                        int n, int hd);
    /* One chunk's softmax weights for nq queries: row r (s + r * lds) holds
     * n[r] scores (n nondecreasing in r); in place s[i] = exp(s[i] - max),
     * part[r * pst] = max, part[r * pst + 1] = sum of the weights in order.
     * Bit-identical to attn_softmax_ref at every level (the exp's operations
     * written out one by one, never fused), whatever nq. */
    void (*softmax)(float *s, size_t lds, int nq, const int *n, float *part, size_t pst);
    /* The loops over stored KV rows, by kv_dtype (kv[KV_F32] is the f32 loops above with byte strides). */
    cpu_attn_kv kv[KV_DTYPES];
} cpu_attn_kernels;

/* A level's table entries from its templates over a kv_dtype DT (each level
 * defines scores_T, accum_T, scores_multi_T, accum_multi_T(const int DT, ...)
 * with k / v as byte pointers and byte strides). */
#define ATTN_KV_INSTANCE(DT, sfx)                                                                                      \
    static void scores_##sfx(const float *q, const void *k, size_t stride, int n, int hd, float scale, float *out) {   \
        scores_T(DT, q, (const unsigned char *)k, stride, n, hd, scale, out);                                          \
    }                                                                                                                  \
    static void accum_##sfx(float *acc, const float *w, const void *v, size_t stride, int n, int hd) {                 \
        accum_T(DT, acc, w, (const unsigned char *)v, stride, n, hd);                                                  \
    }                                                                                                                  \
    static void scores_multi_##sfx(const float *q, size_t ldq, int nq, const void *k, size_t stride, int n, int hd,    \
                                   float scale, float *out, size_t ldo) {                                              \
        scores_multi_T(DT, q, ldq, nq, (const unsigned char *)k, stride, n, hd, scale, out, ldo);                      \
    }                                                                                                                  \
    static void accum_multi_##sfx(float *acc, size_t lda, int nq, const float *w, size_t ldw, const void *v,           \
                                  size_t stride, int n, int hd) {                                                      \
        accum_multi_T(DT, acc, lda, nq, w, ldw, (const unsigned char *)v, stride, n, hd);                              \
    }
#define ATTN_KV_ENTRY(sfx) {scores_##sfx, accum_##sfx, scores_multi_##sfx, accum_multi_##sfx}
/* The whole table of a level: the f32 float-stride loops are kv[KV_F32]'s with strides x 4. */
#define ATTN_KV_TABLE(name, softmax_fn)                                                                                \
    ATTN_KV_INSTANCE(KV_F32, f32)                                                                                      \
    ATTN_KV_INSTANCE(KV_F16, f16)                                                                                      \
    ATTN_KV_INSTANCE(KV_Q8, q8)                                                                                        \
    static void attn_scores(const float *q, const float *k, size_t stride, int n, int hd, float scale, float *out) {   \
        scores_f32(q, k, stride * 4, n, hd, scale, out);                                                               \
    }                                                                                                                  \
    static void attn_accum(float *acc, const float *w, const float *v, size_t stride, int n, int hd) {                 \
        accum_f32(acc, w, v, stride * 4, n, hd);                                                                       \
    }                                                                                                                  \
    static void attn_scores_multi(const float *q, size_t ldq, int nq, const float *k, size_t stride, int n, int hd,    \
                                  float scale, float *out, size_t ldo) {                                               \
        scores_multi_f32(q, ldq, nq, k, stride * 4, n, hd, scale, out, ldo);                                           \
    }                                                                                                                  \
    static void attn_accum_multi(float *acc, size_t lda, int nq, const float *w, size_t ldw, const float *v,           \
                                 size_t stride, int n, int hd) {                                                       \
        accum_multi_f32(acc, lda, nq, w, ldw, v, stride * 4, n, hd);                                                   \
    }                                                                                                                  \
    const cpu_attn_kernels name = {.scores = attn_scores,                                                              \
                                   .accum = attn_accum,                                                                \
                                   .scores_multi = attn_scores_multi,                                                  \
                                   .accum_multi = attn_accum_multi,                                                    \
                                   .softmax = softmax_fn,                                                              \
                                   .kv = {ATTN_KV_ENTRY(f32), ATTN_KV_ENTRY(f16), ATTN_KV_ENTRY(q8)}};

/* The softmax's max of s[0..n): -INFINITY when n is 0, NaNs passed over, a
 * zero maximum as +0 (the + 0.0f). A level's max_row may take the values in
 * any order: the maximum of numbers does not depend on it, and the + 0.0f
 * makes a tie of +0 and -0 give the same bits whichever it kept (the weights
 * do not depend on that sign either: exp(s - (+0)) == exp(s - (-0))). */
typedef float (*attn_max_row_fn)(const float *s, int n);
/* The max of mx and s[0..n), by the rule above: a level's max_row ends its
 * vector part here with the values its lanes did not take. */
static inline float attn_max_row_from(float mx, const float *s, int n) {
    for (int i = 0; i < n; i++) mx = s[i] > mx ? s[i] : mx;
    return mx + 0.0f;
}
static inline float attn_max_row_ref(const float *s, int n) { return attn_max_row_from(-INFINITY, s, n); }

/* The reference softmax of one query's n scores (the arithmetic every level's
 * softmax reproduces): attn_max_row_ref, fast_exp_nonpos, sequential sum. */
static inline void attn_softmax_ref(float *sc, int n, float *part) {
    float mx = attn_max_row_ref(sc, n), sum = 0.0f;
    for (int i = 0; i < n; i++) sc[i] = fast_exp_nonpos(sc[i] - mx);
    for (int i = 0; i < n; i++) sum += sc[i];
    part[0] = mx;
    part[1] = sum;
}

/* The frame of every level's softmax: the level's max_row, attn_softmax_ref's
 * sum chains, G (8 or 4) queries interleaved over their common keys (each
 * query's operations and order unchanged; the dependent chains overlap), and
 * the level's exp_row(s, n, max): s[i] = fast_exp_nonpos(s[i] - max) bit for
 * bit. */
typedef void (*attn_exp_row_fn)(float *s, int n, float mx);
static inline __attribute__((always_inline)) void attn_softmax_group(const int G, float *s, size_t lds, const int *n,
                                                                     float *part, size_t pst, attn_max_row_fn max_row,
                                                                     attn_exp_row_fn exp_row) {
    float *sr[8], m[8], l[8];
    int c = n[0]; /* the fewest keys of the group */
    for (int k = 0; k < G; k++) sr[k] = s + (size_t)k * lds, m[k] = max_row(sr[k], n[k]), l[k] = 0.0f;
    for (int k = 0; k < G; k++) exp_row(sr[k], n[k], m[k]);
    for (int i = 0; i < c; i++)
        for (int k = 0; k < G; k++) l[k] += sr[k][i];
    for (int k = 1; k < G; k++)
        for (int i = c, e = n[k]; i < e; i++) l[k] += sr[k][i];
    for (int k = 0; k < G; k++) part[(size_t)k * pst] = m[k], part[(size_t)k * pst + 1] = l[k];
}

static inline __attribute__((always_inline)) void attn_softmax_rows(float *s, size_t lds, int nq, const int *n,
                                                                    float *part, size_t pst, attn_max_row_fn max_row,
                                                                    attn_exp_row_fn exp_row) {
    int r = 0;
    for (; r + 8 <= nq; r += 8)
        attn_softmax_group(8, s + (size_t)r * lds, lds, n + r, part + (size_t)r * pst, pst, max_row, exp_row);
    for (; r + 4 <= nq; r += 4)
        attn_softmax_group(4, s + (size_t)r * lds, lds, n + r, part + (size_t)r * pst, pst, max_row, exp_row);
    for (; r < nq; r++) attn_softmax_group(1, s + (size_t)r * lds, lds, n + r, part + (size_t)r * pst, pst, max_row, exp_row);
}

extern const cpu_attn_kernels cpu_attn_scalar;
#if defined(__x86_64__)
extern const cpu_attn_kernels cpu_attn_avx2;
extern const cpu_attn_kernels cpu_attn_avx512;
#endif
#if defined(__aarch64__)
extern const cpu_attn_kernels cpu_attn_neon;
#endif

#endif
