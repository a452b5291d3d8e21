/*
 * kq_act_frame.h - the block loops of llama.cpp's activation quantization
 * (kq_act_prepare: Q8K, blocks of 256 with one f32 scale and the sums of
 * each 16 codes; Q80, blocks of 32 with an f16-rounded scale and the Q8_1
 * sum), written once. The scalar reference (kquant.c) and each SIMD level
 * (kq_kernels_x86.h, kq_kernels_neon.c) include it after defining its three
 * steps, so they differ in those steps only:
 *   float KQA_AMAX(const float *x, int n)    the largest magnitude of n
 *                                            values, NaN skipped
 *   void KQA_Q8K(const float *xb, float iscale, int8_t *qb, int16_t *bs)
 *                                            256 codes min(code(iscale x), 127)
 *                                            and their 16 sums of 16
 *   int32_t KQA_Q80(const float *xb, float id, int8_t *qb)
 *                                            32 codes code(x id), their sum
 * where code(p) = lrintf(p), or 0 where p is not a finite number of
 * magnitude 128 or less (a block holding inf or NaN). Q8K's scale comes from
 * the first value of the largest magnitude (its sign decides the codes'),
 * as llama.cpp takes it. KQA_NAME names the function (thread-safe: writes
 * only out).
 */
static void KQA_NAME(int kind, const float *x, int64_t cols, void *out) {
    int8_t *q = out;
    float *d = (float *)(q + cols);
    if (kind == KQ_ACT_Q8K) {
        int16_t *bs = (int16_t *)(d + cols / QK_K);
        for (int64_t b = 0; b < cols / QK_K; b++) {
            const float *xb = x + b * QK_K;
            float amax = KQA_AMAX(xb, QK_K);
            if (amax == 0) { /* zeros, -0s or NaNs only */
                d[b] = 0;
                memset(q + b * QK_K, 0, QK_K);
                memset(bs + b * 16, 0, 32);
                continue;
            }
            int first = 0;
            while (fabsf(xb[first]) != amax) first++; /* amax is one of them */
            float iscale = -127.0f / xb[first];
            KQA_Q8K(xb, iscale, q + b * QK_K, bs + b * 16);
            d[b] = 1.0f / iscale;
        }
    } else {
        int64_t nb = cols / 32;
        float *s = d + nb;
        for (int64_t b = 0; b < nb; b++) {
            float amax = KQA_AMAX(x + b * 32, 32), dq, id;
            quant_act_scale(amax, 1, &dq, &id); /* llama.cpp's Q8_0 activations */
            int32_t sum = KQA_Q80(x + b * 32, id, q + b * 32);
            d[b] = dq;
            s[b] = quant_act_dsum(amax, dq, sum, 1); /* Q8_1's sum: the f32 scale's, rounded to f16 */
        }
    }
}
