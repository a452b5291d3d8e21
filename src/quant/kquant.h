/*
 * kquant.h - llama.cpp's block formats, byte for byte as GGUF stores them
 * (docs/FORMAT.md): the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS on
 * super-blocks of 256 values (sub-blocks of 16 or 32 with their own small
 * integer scales, and mins for Q2_K / Q4_K / Q5_K), and Q5_0, Q5_1, IQ4_NL on
 * blocks of 32. GGUF tensors of these types are used in place (mmap).
 *
 * The idea: the dot product of a weight block with int8 activations is an
 * exact integer per (super-)block, so if the activations are quantized exactly
 * as llama.cpp quantizes them, the only difference from llama.cpp is the
 * order of the float additions across blocks. So these types get their own
 * activations, llama.cpp's:
 *  - Q8K (K-quants, IQ4_XS): per 256 values, d = 1 / (-127 / x_m) where x_m is
 *    the value of largest magnitude, q = round-to-nearest-even(x * -127 / x_m)
 *    capped at 127, and the sums of q per 16;
 *  - Q80 (Q5_0, Q5_1, IQ4_NL): per 32 values, d = f16(amax / 127),
 *    q = round-to-nearest-even(x * 127 / amax), and s = f16(d * sum q) (Q5_1).
 * A prepared row (kq_act_*): q int8[cols], then f32 d per block, then
 * (Q8K) int16 sums per 16 or (Q80) f32 s per block; 64-byte multiple.
 *
 * The reference arithmetic (kq_dot), per block b: S_b = the exact integer
 * sum over sub-blocks of (sub-scale x sum of code x q), M_b likewise with
 * the sub-block mins and activation sums; the row is
 *   acc += (d_w * d_a) * S_b   (- (dmin_w * d_a) * M_b;   + m_w * s_a for Q5_1)
 * in block order. SIMD kernels keep S_b and M_b exact and may order the
 * float additions their own way (kernels.h).
 *
 * All functions are pure and thread-safe.
 */
#ifndef XLLM_QUANT_KQUANT_H
#define XLLM_QUANT_KQUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "base/dtype.h"

#define QK_K 256

/* Values per block (256 or 32) and bytes per block; 0 if t is not a kq type. */
int kq_block_elems(dtype_t t);
size_t kq_block_bytes(dtype_t t);

/* The activations a type wants. */
enum { KQ_ACT_Q8K = 1, KQ_ACT_Q80 = 2 };
int kq_act_kind(dtype_t t);
/* Bytes of one prepared row of cols values (0 when cols is not a whole
 * number of blocks: 256 for Q8K, 32 for Q80). */
size_t kq_act_bytes(int kind, int64_t cols);
/* llama.cpp's quantization of one activation row into out (kq_act_bytes):
 * Q8K or Q80 (kq_act_frame.h holds the block loops; a product that is not a
 * finite number of magnitude 128 or less codes 0). The scalar reference of
 * the CPU levels' kq_act. */
void kq_act_prepare(int kind, const float *x, int64_t cols, void *out);

/* Row r's dot product with one prepared activation row (the reference). */
float kq_dot(dtype_t t, const void *row, const void *act, int64_t cols);
void kq_dequantize_row(dtype_t t, const void *row, int64_t cols, float *out);

/* One block's contents as integers: codes[e] (the signed value the block
 * scale multiplies: Q6_K's q - 32, Q3_K's q - 4, IQ4's table value), the
 * sub-block scales and mins (sub-block e / sub), and the f16 scales as f32
 * (dmin: Q4_1's / Q5_1's m). Also xLLM's Q8 / Q4 / Q4M blocks of 32 (the same
 * bytes as GGUF's Q8_0 / Q4_0 / Q4_1). Returns the sub-block size (16 or 32).
 * For tests and kernels' unpacking. */
int kq_unpack_block(dtype_t t, const void *blk, int8_t *codes, int16_t *sc, int16_t *mn, float *d, float *dmin);

/* y[t * ldy + r] = W[r] . act_t + bias[r], rows [r0, r1), tokens t < T, acts
 * act_stride bytes apart, through kq_dot: the reference GEMV/GEMM every level
 * may fall back to (each element computed alike whatever T and the split). */
void kq_matmul_ref(dtype_t t, const void *W, int64_t cols, const void *act, size_t act_stride, int T,
                   const float *bias, float *y, size_t ldy, int64_t r0, int64_t r1);

/* kquant_llama.c: llama.cpp's float steps for the matmuls the levels' kernels
 * take otherwise (arithmetic "llama"): kq_llama_owns says which (Q8 at group
 * 32 on Q80 activations, and the types it lists); kq_matmul_llama is
 * kq_matmul_ref's contract plus where the T tokens sit in the batch: act's
 * first is token tok0 of the batch tokens the activations were prepared
 * for (llama.cpp picks kernels by batch size and by a token's place in it).
 * Thread-safe. */
int kq_llama_owns(dtype_t t, int group);
void kq_matmul_llama(dtype_t t, const void *W, int64_t cols, const void *act, size_t act_stride, int T,
                     int tok0, int batch, const float *bias, float *y, size_t ldy, int64_t r0, int64_t r1);

/* Quantizers (kquant_quantize.c): the types kq_quantize_row handles (Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL), and one row of cols (a multiple of the
 * type's block, 256 or 32) into out. importance: per column weights of the
 * squared error (calibration), or NULL. Thread-safe (pure). */
int kq_can_quantize(dtype_t t);
void kq_quantize_row(dtype_t t, const float *x, int64_t cols, const float *importance, void *out);

/* Q4_K / Q5_K: the 8 six-bit scales and mins from the 12 bytes at blk + 4,
 * one per byte of *sc and *mn (sub-blocks 0..3 in the low 6 bits of bytes
 * 0..3 (scales) and 4..7 (mins); 4..7: low 4 bits in bytes 8..11, the top 2
 * bits of bytes 0..3 (scales) and 4..7 (mins) above them). For kernels. */
static inline void kq_k4_scales(const uint8_t *blk, uint64_t *sc, uint64_t *mn) {
    uint32_t u[3];
    memcpy(u, blk + 4, 12);
    uint32_t sc_lo = u[0] & 0x3f3f3f3fu, mn_lo = u[1] & 0x3f3f3f3fu;
    uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 6) & 0x03030303u) << 4;
    uint32_t mn_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 6) & 0x03030303u) << 4;
    *sc = (uint64_t)sc_hi << 32 | sc_lo;
    *mn = (uint64_t)mn_hi << 32 | mn_lo;
}

/* llama.cpp's non-linear 4-bit levels (IQ4_NL, IQ4_XS). */
extern const int8_t kq_iq4_values[16];

#endif
