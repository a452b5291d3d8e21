/*
 * kq_kernels.h - the SIMD matmuls for llama.cpp's block types (quant/kquant.h)
 * at each level that has them: the kernel table's matmul_kq (kernels.h).
 * Types a level has no kernel for go to the reference, kq_matmul_ref.
 * Thread-safe: they write only the rows of y they are given.
 */
#ifndef XLLM_BACKEND_CPU_KQ_KERNELS_H
#define XLLM_BACKEND_CPU_KQ_KERNELS_H

#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
void kq_matmul_avx512(const matrix *W, const void *act, size_t act_stride, int T, const float *bias, float *y,
                      size_t ldy, int64_t r0, int64_t r1, void *scratch);
void kq_matmul_avx2(const matrix *W, const void *act, size_t act_stride, int T, const float *bias, float *y,
                    size_t ldy, int64_t r0, int64_t r1, void *scratch);
/* kq_act_prepare (quant/kquant.h) 8 floats at a time, the same bytes
 * (kq_kernels_x86.h). Thread-safe. */
void kq_act_avx512(int kind, const float *x, int64_t cols, void *out);
void kq_act_avx2(int kind, const float *x, int64_t cols, void *out);

/* kq_pack_avx512.c: Q4_K and Q6_K in 16-row tiles ("KR16") at the avx512
 * level, for its kernel table. kq_r16_type: W is one of them;
 * kq_r16_packed_bytes: bytes of W packed (0: another type); kq_r16_repack:
 * tiles [q0, q1) of 4 rows of W (stored) into the packed matrix at out;
 * kq_r16_matmul: matmul_kq on W packed or stored (the same bits), with
 * kq_r16_scratch_bytes(cols) of scratch. Thread-safe (each writes only its
 * rows of out / y and its scratch). */
int kq_r16_type(const matrix *W);
size_t kq_r16_packed_bytes(const matrix *W);
void kq_r16_repack(const matrix *W, int64_t q0, int64_t q1, void *out);
size_t kq_r16_scratch_bytes(int64_t cols);
void kq_r16_matmul(const matrix *W, const void *act, size_t act_stride, int T, const float *bias, float *y,
                   size_t ldy, int64_t r0, int64_t r1, void *scratch);

/* kq_pack32_avx512.c: IQ4_NL, Q5_0, Q5_1 and IQ4_XS in 16-row tiles ("P32")
 * at the avx512 level, cols a multiple of 256; the same five functions as
 * KR16's above. Thread-safe likewise. */
int kq_p32_type(const matrix *W);
size_t kq_p32_packed_bytes(const matrix *W);
void kq_p32_repack(const matrix *W, int64_t q0, int64_t q1, void *out);
size_t kq_p32_scratch_bytes(int64_t cols);
void kq_p32_matmul(const matrix *W, const void *act, size_t act_stride, int T, const float *bias, float *y,
                   size_t ldy, int64_t r0, int64_t r1, void *scratch);

/* kq_pack32_avx2.c: the same P32 tiles (the same packed bytes, the same
 * results bit for bit) at the avx2 level; the same five functions again.
 * Thread-safe likewise. */
int kq_p32_avx2_type(const matrix *W);
size_t kq_p32_avx2_packed_bytes(const matrix *W);
void kq_p32_avx2_repack(const matrix *W, int64_t q0, int64_t q1, void *out);
size_t kq_p32_avx2_scratch_bytes(int64_t cols);
void kq_p32_avx2_matmul(const matrix *W, const void *act, size_t act_stride, int T, const float *bias, float *y,
                        size_t ldy, int64_t r0, int64_t r1, void *scratch);

/* kq_pack23_avx2.c: the same Q23 tiles (the same packed bytes, the same
 * results bit for bit) at the avx2 level; the same five functions again.
 * Thread-safe likewise. */
int kq_q23_avx2_type(const matrix *W);
size_t kq_q23_avx2_packed_bytes(const matrix *W);
void kq_q23_avx2_repack(const matrix *W, int64_t q0, int64_t q1, void *out);
size_t kq_q23_avx2_scratch_bytes(int64_t cols);
void kq_q23_avx2_matmul(const matrix *W, const void *act, size_t act_stride, int T, const float *bias, float *y,
                        size_t ldy, int64_t r0, int64_t r1, void *scratch);

/* kq_pack23_avx512.c: Q2_K and Q3_K in 16-row tiles ("Q23") at the avx512
 * level; the same five functions again. */
int kq_q23_type(const matrix *W);
size_t kq_q23_packed_bytes(const matrix *W);
void kq_q23_repack(const matrix *W, int64_t q0, int64_t q1, void *out);
size_t kq_q23_scratch_bytes(int64_t cols);
void kq_q23_matmul(const matrix *W, const void *act, size_t act_stride, int T, const float *bias, float *y,
                   size_t ldy, int64_t r0, int64_t r1, void *scratch);
#endif
#if defined(__aarch64__)
void kq_matmul_neon(const matrix *W, const void *act, size_t act_stride, int T, const float *bias, float *y,
                    size_t ldy, int64_t r0, int64_t r1, void *scratch);
void kq_matmul_neon_dot(const matrix *W, const void *act, size_t act_stride, int T, const float *bias, float *y,
                        size_t ldy, int64_t r0, int64_t r1, void *scratch);
/* kq_pack32/23_neon_impl.h (in kq_kernels_neon.c): the tiles both NEON
 * levels read (P32: IQ4_NL, IQ4_XS, Q5_0, Q5_1; Q23: Q2_K, Q3_K; the x86
 * levels' packed bytes) and the scratch their matmul needs. Thread-safe as
 * the x86 ones. */
int kq_pk_neon_type(const matrix *W);
size_t kq_pk_neon_packed_bytes(const matrix *W);
void kq_pk_neon_repack(const matrix *W, int64_t q0, int64_t q1, void *out);
size_t kq_pk_neon_scratch_bytes(int64_t cols);
/* kq_act_prepare (quant/kquant.h) 4 floats at a time, the same bytes
 * (kq_kernels_neon.c; both NEON levels). Thread-safe. */
void kq_act_neon(int kind, const float *x, int64_t cols, void *out);
#endif

#endif
