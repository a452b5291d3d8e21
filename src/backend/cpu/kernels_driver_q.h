/*
 * kernels_driver_q.h - the loops around a SIMD level's quantized (Q8 / Q4 /
 * Q4M) matmul kernels, written once for every level: kernels_avx2.c,
 * kernels_avx512.c and kernels_neon_impl.h include it once their inner
 * kernels are defined, so the same source compiles with each level's target
 * flags (as kernels_neon_impl.h serves both NEON variants). The loops only
 * decide which rows and tokens an inner kernel runs on; the arithmetic of an
 * output is the inner kernel's, so they cannot change results.
 *
 * Stored layout (matmul_q_stored): T == 1 is the GEMV, row after row in
 * memory order; T > 1 the GEMM: blocks of tokens whose prepared activations
 * stay in L2 (kernels_token_block with QMM_BLOCK_BYTES), and for each block
 * every tile of MR rows unpacked into scratch once, then register tiles of
 * up to NT tokens over it. The type and the common groups (32, 64, 128) are
 * constants in each instance; other groups (multiples of 32) run the same
 * code with the group a variable.
 *
 * Packed 4-row layout (matmul_packed_t, levels that define KD_PACKED): the
 * GEMV over tiles; batches by the planner's variant (kernels.h): "direct"
 * (register tiles straight from the packed rows) or "pack/N" (each tile
 * unpacked into scratch once per block of N tokens); the level's default:
 * direct up to DIRECT_MAX_T tokens, then pack with the L2 block.
 *
 * What the level defines before including this:
 *   AI, MR, NT, QMM_BLOCK_BYTES, n_chunks(cols)
 *   qlayout, make_layout(t, g)   what unpacking a stored row needs per type
 *                                and group (a dummy where nothing)
 *   gemv_q(W, rb, t, g, bb, cols, act, &L, bias, y, r, end)  stored row r, one token
 *   pack_q(W, rb, t, g, bb, cols, &L, r, r1, pack)  stored rows r..r+MR-1 into scratch
 *   tile_q_any(pack, nch, t, nt, act, astride, bias, y, ldy, r, r1)  a register
 *                                tile (MR rows x nt <= NT tokens) from scratch
 * and with KD_PACKED (tiles of 4 rows, packed_tile_bytes(t, cols) bytes):
 *   DIRECT_MAX_T, packed_tile_bytes(t, cols)
 *   gemv_packed(tile, nch, t, act, bias, y, r, r1, end)  a tile's rows, one token
 *   tile_direct(tile, nch, t, nt, act, astride, bias, y, ldy, r, r1)
 *   pack_q_packed(tile, t, nch, pack)  a packed tile into the scratch format
 * Every function here is thread-safe: pure loops over the caller's rows.
 */

/* Tokens per L2-resident block of prepared activations. */
static int token_block(size_t bytes_per_token) { return kernels_token_block(bytes_per_token, QMM_BLOCK_BYTES, NT); }

/* The GEMM: for blocks of TB tokens (their activations stay in L2), each
 * MR-row tile is unpacked into scratch once by FILL (which sees r), then the
 * register tiles run over the block's tokens. */
#define KD_GEMM_BLOCKS(TB, FILL)                                                                                   \
    {                                                                                                              \
        int tb_ = (TB);                                                                                            \
        for (int t0 = 0; t0 < T; t0 += tb_) {                                                                      \
            int t1 = t0 + tb_ < T ? t0 + tb_ : T;                                                                  \
            for (int64_t r = r0; r < r1; r += MR) {                                                                \
                FILL;                                                                                              \
                for (int tt = t0; tt < t1; tt += NT) {                                                             \
                    int nt = t1 - tt < NT ? t1 - tt : NT;                                                          \
                    tile_q_any(pack, nch, t, nt, act + (size_t)tt * astride, astride, bias, y + (size_t)tt * ldy,  \
                               ldy, r, r1);                                                                        \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
    }

/* Stored rows [r0, r1) of W (type t, group g) for T tokens. */
AI void matmul_q_t(const matrix *W, dtype_t t, int g, const void *act_, size_t astride, int T, const float *bias,
                   float *y, size_t ldy, int64_t r0, int64_t r1, void *scratch) {
    const uint8_t *Wd = W->data, *act = act_;
    size_t bb = quant_block_bytes(t, g), rb = quant_row_bytes(t, g, W->cols);
    int64_t cols = W->cols;
    qlayout L = make_layout(t, g);
    if (T == 1) {
        for (int64_t r = r0; r < r1; r++) gemv_q(Wd, rb, t, g, bb, cols, act, &L, bias, y, r, Wd + (size_t)r1 * rb);
        return;
    }
    int64_t nch = n_chunks(cols);
    uint8_t *pack = scratch;
    KD_GEMM_BLOCKS(token_block(astride), pack_q(Wd, rb, t, g, bb, cols, &L, r, r1, pack))
}

#define KD_MM_CASE(TY, G)                                                                                          \
    if (W->dtype == TY && W->group == G) {                                                                         \
        matmul_q_t(W, TY, G, act, astride, T, bias, y, ldy, r0, r1, scratch);                                      \
        return;                                                                                                    \
    }

/* The stored layout's matmul_q (kernels.h), type and group dispatched. */
AI void matmul_q_stored(const matrix *W, const void *act, size_t astride, int T, const float *bias, float *y,
                        size_t ldy, int64_t r0, int64_t r1, void *scratch) {
    KD_MM_CASE(XLLM_DT_Q8, 32) KD_MM_CASE(XLLM_DT_Q8, 64) KD_MM_CASE(XLLM_DT_Q8, 128)
    KD_MM_CASE(XLLM_DT_Q4, 32) KD_MM_CASE(XLLM_DT_Q4, 64) KD_MM_CASE(XLLM_DT_Q4, 128)
    KD_MM_CASE(XLLM_DT_Q4M, 32) KD_MM_CASE(XLLM_DT_Q4M, 64) KD_MM_CASE(XLLM_DT_Q4M, 128)
    /* any other group (a multiple of 32): the same code, the group not a constant */
    if (W->dtype == XLLM_DT_Q8) matmul_q_t(W, XLLM_DT_Q8, W->group, act, astride, T, bias, y, ldy, r0, r1, scratch);
    else if (W->dtype == XLLM_DT_Q4) matmul_q_t(W, XLLM_DT_Q4, W->group, act, astride, T, bias, y, ldy, r0, r1, scratch);
    else matmul_q_t(W, XLLM_DT_Q4M, W->group, act, astride, T, bias, y, ldy, r0, r1, scratch);
}
#undef KD_MM_CASE

#ifdef KD_PACKED
/* The planner's variants for packed matrices (matrix.plan_kernel = 1 + index). */
static const char *const packed_variants[] = {"direct", "pack/24", "pack/48", "pack/96"};

/* Packed rows [r0, r1) of W (type t; r0 a multiple of 4: cpu_ops splits rows
 * in tiles) for T tokens. */
AI void matmul_packed_t(const matrix *W, dtype_t t, const uint8_t *act, size_t astride, int T, const float *bias,
                        float *y, size_t ldy, int64_t r0, int64_t r1, void *scratch) {
    const uint8_t *P = W->data;
    int64_t nch = n_chunks(W->cols);
    size_t tb = packed_tile_bytes(t, W->cols);
    if (T == 1) {
        const uint8_t *end = P + (size_t)((r1 + 3) / 4) * tb;
        for (int64_t r = r0; r < r1; r += 4) gemv_packed(P + (size_t)(r / 4) * tb, nch, t, act, bias, y, r, r1, end);
        return;
    }
    int v = W->plan_kernel[mm_bucket(T)];
    if (v == 1 || (v == 0 && T <= DIRECT_MAX_T)) {
        for (int64_t r = r0; r < r1; r += MR)
            for (int tt = 0; tt < T; tt += NT) {
                int nt = T - tt < NT ? T - tt : NT;
                tile_direct(P + (size_t)(r / 4) * tb, nch, t, nt, act + (size_t)tt * astride, astride, bias,
                            y + (size_t)tt * ldy, ldy, r, r1);
            }
        return;
    }
    uint8_t *pack = scratch;
    KD_GEMM_BLOCKS(v == 2 ? 24 : v == 3 ? 48 : v == 4 ? 96 : token_block(astride),
                   pack_q_packed(P + (size_t)(r / 4) * tb, t, nch, pack))
}
#endif
#undef KD_GEMM_BLOCKS
