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

#include <stddef.h>

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
} cpu_attn_kernels;

extern const cpu_attn_kernels cpu_attn_scalar;
#if defined(__x86_64__)
extern const cpu_attn_kernels cpu_attn_avx2;
extern const cpu_attn_kernels cpu_attn_avx512;
#endif
#if defined(__aarch64__)
extern const cpu_attn_kernels cpu_attn_neon;
#endif

#endif
