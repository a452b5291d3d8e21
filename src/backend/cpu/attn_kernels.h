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
} cpu_attn_kernels;

/* The reference softmax of one query's n scores (the arithmetic every level's
 * softmax reproduces): sequential max, xllm_exp_nonpos, sequential sum. */
static inline void attn_softmax_ref(float *sc, int n, float *part) {
    float mx = -INFINITY, sum = 0.0f;
    for (int i = 0; i < n; i++) mx = sc[i] > mx ? sc[i] : mx;
    for (int i = 0; i < n; i++) sc[i] = xllm_exp_nonpos(sc[i] - mx);
    for (int i = 0; i < n; i++) sum += sc[i];
    part[0] = mx;
    part[1] = sum;
}

/* The frame of every level's softmax: attn_softmax_ref's max and sum chains,
 * four queries interleaved over their common keys (each query's operations
 * and order unchanged; the chains overlap), and the level's
 * exp_row(s, n, max): s[i] = xllm_exp_nonpos(s[i] - max) bit for bit. */
typedef void (*attn_exp_row_fn)(float *s, int n, float mx);
static inline __attribute__((always_inline)) void attn_softmax_rows(float *s, size_t lds, int nq, const int *n,
                                                                    float *part, size_t pst, attn_exp_row_fn exp_row) {
    int r = 0;
    for (; r + 4 <= nq; r += 4) {
        float *s0 = s + (size_t)r * lds, *s1 = s0 + lds, *s2 = s1 + lds, *s3 = s2 + lds;
        int c = n[r]; /* the fewest keys of the four */
        float m0 = -INFINITY, m1 = -INFINITY, m2 = -INFINITY, m3 = -INFINITY;
        for (int i = 0; i < c; i++) {
            m0 = s0[i] > m0 ? s0[i] : m0;
            m1 = s1[i] > m1 ? s1[i] : m1;
            m2 = s2[i] > m2 ? s2[i] : m2;
            m3 = s3[i] > m3 ? s3[i] : m3;
        }
        for (int i = c, e = n[r + 1]; i < e; i++) m1 = s1[i] > m1 ? s1[i] : m1;
        for (int i = c, e = n[r + 2]; i < e; i++) m2 = s2[i] > m2 ? s2[i] : m2;
        for (int i = c, e = n[r + 3]; i < e; i++) m3 = s3[i] > m3 ? s3[i] : m3;
        exp_row(s0, n[r], m0);
        exp_row(s1, n[r + 1], m1);
        exp_row(s2, n[r + 2], m2);
        exp_row(s3, n[r + 3], m3);
        float l0 = 0.0f, l1 = 0.0f, l2 = 0.0f, l3 = 0.0f;
        for (int i = 0; i < c; i++) {
            l0 += s0[i];
            l1 += s1[i];
            l2 += s2[i];
            l3 += s3[i];
        }
        for (int i = c, e = n[r + 1]; i < e; i++) l1 += s1[i];
        for (int i = c, e = n[r + 2]; i < e; i++) l2 += s2[i];
        for (int i = c, e = n[r + 3]; i < e; i++) l3 += s3[i];
        float *p = part + (size_t)r * pst;
        p[0] = m0, p[1] = l0;
        p[pst] = m1, p[pst + 1] = l1;
        p[2 * pst] = m2, p[2 * pst + 1] = l2;
        p[3 * pst] = m3, p[3 * pst + 1] = l3;
    }
    for (; r < nq; r++) {
        float *sr = s + (size_t)r * lds, mx = -INFINITY, sum = 0.0f;
        int nr = n[r];
        for (int i = 0; i < nr; i++) mx = sr[i] > mx ? sr[i] : mx;
        exp_row(sr, nr, mx);
        for (int i = 0; i < nr; i++) sum += sr[i];
        part[(size_t)r * pst] = mx;
        part[(size_t)r * pst + 1] = sum;
    }
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
