/*
 * kernels_driver_f.h - the loops around a SIMD level's float-weight (F32 /
 * F16 / BF16) matmul kernels, written once for every level:
 * kernels_avx2.c, kernels_avx512.c and kernels_neon_impl.h include it once
 * their inner kernels are defined, so the same source compiles with each
 * level's target flags. T == 1 is the GEMV, row after row in memory order;
 * T > 1 runs blocks of tokens whose f32 inputs fit FMM_BLOCK_BYTES (about
 * an L2 share; at most FMM_BLOCK_MAX tokens, a multiple of NTF), and in each
 * block register tiles of MRF rows x up to NTF tokens. The loops only decide
 * which rows and tokens an inner kernel runs on, so they cannot change
 * results (each inner kernel computes an output the same way in the GEMV and
 * in every tile).
 *
 * What the level defines before including this:
 *   AI, MRF, NTF, FMM_BLOCK_BYTES, FMM_BLOCK_MAX
 *   gemv_f(W, rb, t, cols, x, bias, y, r, end)  row r, one token
 *   tile_f_any(W, rb, t, cols, nt, x, xs, bias, y, ldy, r, r1)  rows r..r+MRF-1
 *                                (those below r1) x nt <= NTF tokens
 * matmul_f is the level's table entry (kernels.h). Thread-safe: pure loops
 * over the caller's rows.
 */

AI void matmul_f_t(const matrix *W, dtype_t t, const float *x, int T, const float *bias, float *y, size_t ldy,
                   int64_t r0, int64_t r1) {
    int64_t cols = W->cols;
    size_t rb = (size_t)cols * dtype_size(t), xs = (size_t)cols;
    if (T == 1) {
        for (int64_t r = r0; r < r1; r++)
            gemv_f(W->data, rb, t, cols, x, bias, y, r, (const uint8_t *)W->data + (size_t)r1 * rb);
        return;
    }
    int TB = (int)((size_t)(FMM_BLOCK_BYTES) / (xs * sizeof(float) + 1));
    TB = TB < NTF ? NTF : TB > FMM_BLOCK_MAX ? FMM_BLOCK_MAX : TB / NTF * NTF;
    for (int t0 = 0; t0 < T; t0 += TB) {
        int t1 = t0 + TB < T ? t0 + TB : T;
        for (int64_t r = r0; r < r1; r += MRF)
            for (int tt = t0; tt < t1; tt += NTF) {
                int nt = t1 - tt < NTF ? t1 - tt : NTF;
                tile_f_any(W->data, rb, t, cols, nt, x + (size_t)tt * xs, xs, bias, y + (size_t)tt * ldy, ldy, r, r1);
            }
    }
}

static void matmul_f(const matrix *W, const float *x, int T, const float *bias, float *y, size_t ldy, int64_t r0,
                     int64_t r1, void *scratch) {
    (void)scratch;
    if (r1 <= r0) return;
    switch (W->dtype) {
    case XLLM_DT_F16: matmul_f_t(W, XLLM_DT_F16, x, T, bias, y, ldy, r0, r1); break;
    case XLLM_DT_BF16: matmul_f_t(W, XLLM_DT_BF16, x, T, bias, y, ldy, r0, r1); break;
    default: matmul_f_t(W, XLLM_DT_F32, x, T, bias, y, ldy, r0, r1); break;
    }
}
