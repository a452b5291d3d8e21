/*
 * simd_avx512.h - small AVX-512 helpers shared by the avx512 kernel files
 * (included only by files compiled with the AVX-512 target flags).
 *
 * reduce4 is the one horizontal-sum tree of the level: quantized matmul
 * outputs and attention scores all go through it, so a value never depends
 * on which path (GEMV, GEMM, packed, multi-query) computed it.
 */
#ifndef XLLM_BACKEND_CPU_SIMD_AVX512_H
#define XLLM_BACKEND_CPU_SIMD_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#define AI static inline __attribute__((always_inline))

/* How far ahead (bytes) a kernel that streams weight tiles from memory fetches
 * them in software: the hardware prefetchers alone leave it waiting on memory.
 * One distance for every packed layout, swept on Zen 4 (bench_kernels, one
 * thread): the R16 GEMM's first pass over a tile (TinyLlama gate/up, T = 16)
 * 455 GFLOP/s without, 525-556 at 2 KiB, 575-590 at 4-12 KiB; the KR16 Q5_K
 * GEMV 13 GB/s without, 31-34 at 2.9 / 4 / 16 KiB, 36-41 at 8 KiB. */
#define FETCH_AHEAD_BYTES 8192

/* Prefetch (into L1) the `bytes` starting FETCH_AHEAD_BYTES past p, a line at a
 * time; past the end of the data is harmless (prefetches do not fault). */
AI void fetch_ahead(const void *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + FETCH_AHEAD_BYTES + o, _MM_HINT_T0);
}

/* acc + w . (the 4 bytes at p, in every lane): vpdpbusd with its memory
 * operand broadcast, one instruction (compilers emit a separate broadcast). */
AI __m512i dpbusd_b4(__m512i acc, __m512i w, const void *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
    return acc;
}

/* The 16-lane sums of 4 accumulators at once (transpose and add); each
 * result lane depends on its own accumulator only. */
AI __m128 reduce4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    __m512 x = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
    __m512 y = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
    __m512 z = _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x44), _mm512_shuffle_ps(x, y, 0xEE));
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(z), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1)));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* reduce4's sum of one accumulator (the same tree) */
AI float reduce1(__m512 a) { return _mm_cvtss_f32(reduce4(a, a, a, a)); }

#endif
