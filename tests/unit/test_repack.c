/*
 * test_repack.c - weights repacked at load (backend_pack_matrix) compute
 * exactly what the stored layout computes, at every level that has a packed
 * layout, for every planner variant:
 *  - Q8 / Q4 / Q4M, groups 32, 64, 128 (fast layouts) and 96 (generic);
 *    rows not a multiple of the 4-row tile, columns not a multiple of the
 *    128-column chunk or of the 256-column chunk pair;
 *  - T = 1 (GEMV) and batches 2..40 (GEMM), each variant (direct, pack/N);
 *  - any split of the rows in 4-row tiles (threads);
 *  - repacking in several tile ranges (threads) writes the same bytes as one;
 *  - llama.cpp's Q4_K and Q6_K where a level packs them (avx512's KR16),
 *    IQ4_NL, IQ4_XS, Q5_0, Q5_1 (avx512's P32) and Q2_K, Q3_K (avx512's
 *    Q23): random blocks (negative Q6_K, Q3_K and IQ4_XS scales included), rows around the 16-row
 *    tile, T = 1 .. 70 (token blocks of up to 64, a last block of one token),
 *    uneven row pieces; and through a backend, op_matmul and op_matmul_rows
 *    from a row inside a tile (cpu_ops' buffered head);
 *  - the avx2 level's P32 and Q23 (kq_pack32/23_avx2.c, the same tiles in
 *    256-bit halves) against the avx512 level's, where the CPU has both: the
 *    same bits, stored and packed, T = 1 .. 70, random and extreme codes (an
 *    independent implementation of the same arithmetic; test_kq_kernels
 *    checks both against the reference).
 * All comparisons are bit for bit (memcmp).
 */
#include "test.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "base/alloc.h"
#include "quant/kquant.h"
#include "quant/quant.h"

#include <stdlib.h>
#include <string.h>

static unsigned g_seed = 777;
/* S repacked (pb bytes) at once, and again in pieces of `piece` 4-row
 * quads into a buffer filled with garbage first: the two must be equal.
 * Returns the packed matrix of the first (the caller frees its data). */
static matrix repack_whole_and_in_pieces(const cpu_kernels *K, const matrix *S, size_t pb, int64_t piece) {
    int64_t quads = (S->rows + 3) / 4;
    void *p1 = mem_malloc_aligned(pb), *p2 = mem_malloc_aligned(pb);
    memset(p2, 0xA5, pb);
    K->repack(S, 0, quads, p1);
    for (int64_t q0 = 0; q0 < quads; q0 += piece) K->repack(S, q0, q0 + piece < quads ? q0 + piece : quads, p2);
    CHECK_MSG(!memcmp(p1, p2, pb), "%s %s g%d %lldx%lld: repack in pieces of %lld differs", K->name,
              dtype_name(S->dtype), S->group, (long long)S->rows, (long long)S->cols, (long long)piece);
    mem_free_aligned(p2);
    matrix P = *S;
    P.data = p1;
    P.packed = 1;
    return P;
}

static int g_packed_shapes;
static float frand(void) {
    g_seed = g_seed * 1664525u + 1013904223u;
    return ((g_seed >> 8) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static void check_shape(const cpu_kernels *K, dtype_t t, int g, int64_t rows, int64_t cols) {
    size_t rb = quant_row_bytes(t, g, cols);
    char *w = mem_malloc_aligned(rb * (size_t)rows);
    float *tmp = malloc(sizeof(float) * (size_t)cols);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) tmp[c] = frand() * (r % 3 == 0 ? 0.01f : 1.0f);
        quant_quantize_row(t, g, tmp, cols, NULL, w + (size_t)r * rb);
    }
    matrix S = {.dtype = t, .group = g, .rows = rows, .cols = cols, .data = w};
    size_t pb = K->packed_bytes(&S);
    if (!pb) { /* the level keeps this type as stored */
        mem_free_aligned(w);
        free(tmp);
        return;
    }
    g_packed_shapes++;
    matrix P = repack_whole_and_in_pieces(K, &S, pb, 2);

    const int Ts[] = {1, 2, 3, 4, 5, 8, 13, 40};
    int maxT = 40;
    size_t as = K->act_bytes(cols);
    unsigned char *act = mem_malloc_aligned(as * (size_t)maxT);
    void *scr = mem_malloc_aligned(K->scratch_bytes(cols));
    float *x = malloc(sizeof(float) * (size_t)cols * (size_t)maxT);
    float *bias = malloc(sizeof(float) * (size_t)rows);
    float *ys = malloc(sizeof(float) * (size_t)rows * (size_t)maxT), *yp = malloc(sizeof(float) * (size_t)rows * (size_t)maxT);
    for (int64_t i = 0; i < cols * maxT; i++) x[i] = frand();
    for (int64_t r = 0; r < rows; r++) bias[r] = frand();
    for (int i = 0; i < maxT; i++) K->act_prepare(x + (size_t)i * (size_t)cols, cols, act + (size_t)i * as, 0);
    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
        int T = Ts[ti];
        K->matmul_q(&S, act, as, T, rows % 2 ? bias : NULL, ys, (size_t)rows, 0, rows, scr);
        for (int v = 0; v <= K->n_variants; v++) {
            memset(P.plan_kernel, v, sizeof P.plan_kernel);
            memset(yp, 0xFF, sizeof(float) * (size_t)rows * (size_t)T);
            /* rows in uneven pieces of whole tiles, as threads get them */
            for (int64_t r0 = 0, step = 4; r0 < rows; r0 += step, step += 4) {
                int64_t r1 = r0 + step < rows ? r0 + step : rows;
                K->matmul_q(&P, act, as, T, rows % 2 ? bias : NULL, yp, (size_t)rows, r0, r1, scr);
            }
            CHECK_MSG(!memcmp(ys, yp, sizeof(float) * (size_t)rows * (size_t)T),
                      "%s %s g%d %lldx%lld T=%d variant %s: packed != stored", K->name, dtype_name(t), g,
                      (long long)rows, (long long)cols, T, v ? K->variant_names[v - 1] : "default");
        }
    }
    mem_free_aligned(act);
    mem_free_aligned(scr);
    mem_free_aligned((void *)P.data);
    mem_free_aligned(w);
    free(x);
    free(bias);
    free(ys);
    free(yp);
    free(tmp);
}

/* backend_pack_matrix: the threaded repack through a backend, and no_repack (XLLM_REPACK=0). */
static void check_backend(const cpu_kernels *K) {
    cpu_backend be;
    CHECK(backend_init_kernels(&be, 2, 512, 8, K, NULL) == XLLM_OK);
    int64_t rows = 37, cols = 480;
    size_t rb = quant_row_bytes(XLLM_DT_Q4, 32, cols);
    char *w = mem_malloc_aligned(rb * (size_t)rows);
    for (size_t i = 0; i < rb * (size_t)rows; i++) w[i] = (char)(frand() * 127);
    for (int64_t r = 0; r < rows; r++) { /* finite f16 scales */
        for (int64_t b = 0; b < cols / 32; b++) {
            uint16_t h = 0x2C00; /* 1/16 */
            memcpy(w + (size_t)r * rb + (size_t)b * 18, &h, 2);
        }
    }
    matrix W = {.dtype = XLLM_DT_Q4, .group = 32, .rows = rows, .cols = cols, .data = w};
    void *storage = NULL;
    be.no_repack = 1; /* XLLM_REPACK=0 */
    CHECK(backend_pack_matrix(&be, &W, &storage, NULL) == XLLM_OK);
    CHECK(!storage && !W.packed && W.data == w);
    be.no_repack = 0;
    CHECK(backend_pack_matrix(&be, &W, &storage, NULL) == XLLM_OK);
    CHECK(storage && W.packed && W.data == storage);
    void *again = NULL;
    CHECK(backend_pack_matrix(&be, &W, &again, NULL) == XLLM_OK && !again); /* already packed */
    matrix S = {.dtype = XLLM_DT_Q4, .group = 32, .rows = rows, .cols = cols, .data = w};
    float x[8 * 480], ys[8 * 37], yp[8 * 37];
    for (int i = 0; i < 8 * 480; i++) x[i] = frand();
    op_matmul(&be, x, 8, &S, NULL, ys);
    op_matmul(&be, x, 8, &W, NULL, yp);
    CHECK_MSG(!memcmp(ys, yp, sizeof ys), "%s: op_matmul packed != stored", K->name);
    op_matmul(&be, x, 1, &S, NULL, ys);
    op_matmul(&be, x, 1, &W, NULL, yp);
    CHECK_MSG(!memcmp(ys, yp, sizeof(float) * 37), "%s: op_matmul GEMV packed != stored", K->name);
    mem_free_aligned(storage);
    mem_free_aligned(w);
    backend_free(&be);
}

/* Random K-quant rows with finite f16 scales (d, and dmin / m where the type has one). */
static uint8_t *kq_random(dtype_t t, int64_t rows, int64_t cols) {
    size_t bb = kq_block_bytes(t), nbk = (size_t)(rows * cols / kq_block_elems(t));
    uint8_t *w = mem_malloc_aligned(nbk * bb);
    for (size_t i = 0; i < nbk * bb; i++) w[i] = (uint8_t)(frand() * 256.0f);
    for (size_t b = 0; b < nbk; b++) {
        uint16_t d = f32_to_f16(0.001f + 0.01f * (frand() + 1.0f)), m = f32_to_f16(0.005f * (frand() + 1.0f));
        uint8_t *p = w + b * bb;
        if (t == XLLM_DT_Q4_K || t == XLLM_DT_Q5_K || t == XLLM_DT_Q5_1) memcpy(p, &d, 2), memcpy(p + 2, &m, 2);
        else if (t == XLLM_DT_Q6_K) memcpy(p + 208, &d, 2);
        else if (t == XLLM_DT_Q2_K) memcpy(p + 80, &d, 2), memcpy(p + 82, &m, 2);
        else if (t == XLLM_DT_Q3_K) memcpy(p + 108, &d, 2);
        else memcpy(p, &d, 2); /* IQ4_NL, IQ4_XS, Q5_0 */
    }
    return w;
}

static int g_kq_shapes;

static void check_kq_shape(const cpu_kernels *K, dtype_t t, int64_t rows, int64_t cols) {
    uint8_t *w = kq_random(t, rows, cols);
    matrix S = {.dtype = t, .group = kq_block_elems(t), .rows = rows, .cols = cols, .data = w};
    size_t pb = K->packed_bytes(&S);
    if (!pb || !K->matmul_kq) {
        mem_free_aligned(w);
        return;
    }
    g_kq_shapes++;
    matrix P = repack_whole_and_in_pieces(K, &S, pb, 3);
    enum { MAXT = 70 };
    const int Ts[] = {1, 2, 3, 7, 8, 9, 17, 65, 70};
    const int kind = kq_act_kind(t);
    size_t as = kq_act_bytes(kind, cols);
    uint8_t *act = mem_malloc_aligned(as * MAXT);
    void *scr = mem_malloc_aligned(K->scratch_bytes(cols));
    float *x = malloc(sizeof(float) * (size_t)cols), *bias = malloc(sizeof(float) * (size_t)rows);
    float *ys = malloc(sizeof(float) * (size_t)rows * MAXT), *yp = malloc(sizeof(float) * (size_t)rows * MAXT);
    for (int i = 0; i < MAXT; i++) {
        for (int64_t c = 0; c < cols; c++) x[c] = frand() * (i % 4 == 1 ? 100.0f : 1.0f);
        kq_act_prepare(kind, x, cols, act + (size_t)i * as);
    }
    for (int64_t r = 0; r < rows; r++) bias[r] = frand();
    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
        int T = Ts[ti];
        const float *bs = T % 2 ? bias : NULL;
        K->matmul_kq(&S, act, as, T, bs, ys, (size_t)rows, 0, rows, scr);
        memset(yp, 0xFF, sizeof(float) * (size_t)rows * (size_t)T);
        for (int64_t r0 = 0, step = 4; r0 < rows; r0 += step, step += 4) { /* pieces of whole 4-row tiles */
            int64_t r1 = r0 + step < rows ? r0 + step : rows;
            K->matmul_kq(&P, act, as, T, bs, yp, (size_t)rows, r0, r1, scr);
        }
        CHECK_MSG(!memcmp(ys, yp, sizeof(float) * (size_t)rows * (size_t)T), "%s %s %lldx%lld T=%d: packed != stored",
                  K->name, dtype_name(t), (long long)rows, (long long)cols, T);
        /* each token alone (GEMV) gives its bits in the batch */
        int same = 1;
        for (int tk = 0; tk < T; tk += 5) {
            K->matmul_kq(&P, act + (size_t)tk * as, as, 1, bs, yp, (size_t)rows, 0, rows, scr);
            same &= !memcmp(yp, ys + (size_t)tk * (size_t)rows, sizeof(float) * (size_t)rows);
        }
        CHECK_MSG(same, "%s %s %lldx%lld T=%d: GEMV != GEMM", K->name, dtype_name(t), (long long)rows,
                  (long long)cols, T);
    }
    mem_free_aligned(act);
    mem_free_aligned(scr);
    mem_free_aligned((void *)P.data);
    mem_free_aligned(w);
    free(x);
    free(bias);
    free(ys);
    free(yp);
}

/* Through a backend: the threaded repack, op_matmul and op_matmul_rows from a
 * row inside a packed tile (cpu_ops' head buffer) equal the stored matrix's. */
static void check_kq_backend(const cpu_kernels *K, dtype_t t) {
    const int64_t rows = 53, cols = 512;
    enum { BT = 11 };
    uint8_t *w = kq_random(t, rows, cols);
    matrix S = {.dtype = t, .group = kq_block_elems(t), .rows = rows, .cols = cols, .data = w}, W = S;
    if (!K->packed_bytes(&S)) {
        mem_free_aligned(w);
        return;
    }
    cpu_backend be;
    CHECK(backend_init_kernels(&be, 2, cols, BT, K, NULL) == XLLM_OK);
    void *storage = NULL;
    CHECK(backend_pack_matrix(&be, &W, &storage, NULL) == XLLM_OK);
    CHECK_MSG(storage && W.packed, "%s %s: not packed", K->name, dtype_name(t));
    float x[BT * 512], ys[BT * 53], yp[BT * 53], yr[BT * 53];
    for (int i = 0; i < BT * 512; i++) x[i] = frand();
    for (int T = 1; T <= BT; T += BT - 1) {
        op_matmul(&be, x, T, &S, NULL, ys);
        op_matmul(&be, x, T, &W, NULL, yp);
        CHECK_MSG(!memcmp(ys, yp, sizeof(float) * (size_t)(T * rows)), "%s %s T=%d: op_matmul packed != stored",
                  K->name, dtype_name(t), T);
        const matrix *Wp = &W;
        op_act_prepare(&be, x, T, &Wp, 1, 0);
        for (int64_t r0 = 4; r0 < rows; r0 += 20) { /* rows [r0, rows) into yr, rows - r0 per token */
            op_matmul_rows(&be, x, 0, T, &W, NULL, r0, rows, yr, (size_t)(rows - r0), 0);
            int same = 1;
            for (int tk = 0; tk < T; tk++)
                same &= !memcmp(yr + (size_t)tk * (size_t)(rows - r0), ys + (size_t)tk * (size_t)rows + r0,
                                sizeof(float) * (size_t)(rows - r0));
            CHECK_MSG(same, "%s %s T=%d rows from %lld: op_matmul_rows != op_matmul", K->name, dtype_name(t), T,
                      (long long)r0);
        }
    }
    mem_free_aligned(storage);
    mem_free_aligned(w);
    backend_free(&be);
}

/* The avx2 level (a) against the avx512 level (b) on type t: both pack W the
 * same way and compute the same bits, stored and packed, GEMV and GEMM
 * (P32: IQ4_NL, IQ4_XS, Q5_x; Q23: Q2_K, Q3_K). */
static int g_cross;
static void check_cross(const cpu_kernels *a, const cpu_kernels *b, dtype_t t, int64_t rows, int64_t cols,
                            int extreme) {
    uint8_t *w = kq_random(t, rows, cols);
    if (extreme) { /* every code at its largest (Q5_x 31, IQ4 113, Q2_K 3, Q3_K 7, scales too) and
                      activations all 127: int16 limits */
        size_t bb = kq_block_bytes(t), hdr = t == XLLM_DT_Q5_1 ? 4 : 2, nbk = (size_t)(rows * cols / kq_block_elems(t));
        for (size_t k = 0; k < nbk; k++) {
            if (t == XLLM_DT_Q2_K) memset(w + k * bb, 0xFF, 80); /* scales, qs; d, dmin kept */
            else if (t == XLLM_DT_Q3_K) memset(w + k * bb, 0xFF, 108); /* hmask, qs, scales; d kept */
            else memset(w + k * bb + hdr, 0xFF, bb - hdr);
        }
    }
    matrix S = {.dtype = t, .group = kq_block_elems(t), .rows = rows, .cols = cols, .data = w};
    size_t pa = a->packed_bytes(&S), pb = b->packed_bytes(&S);
    CHECK_MSG(pa && pa == pb, "%s: avx2 packs %zu bytes, avx512 %zu", dtype_name(t), pa, pb);
    if (!pa || pa != pb) {
        mem_free_aligned(w);
        return;
    }
    g_cross++;
    matrix Pa = repack_whole_and_in_pieces(a, &S, pa, 5), Pb = repack_whole_and_in_pieces(b, &S, pb, 5);
    CHECK_MSG(!memcmp(Pa.data, Pb.data, pa), "%s: avx2 and avx512 packed bytes differ", dtype_name(t));
    enum { MAXT = 70 };
    const int Ts[] = {1, 2, 5, 9, 64, 70};
    const int kind = kq_act_kind(t);
    size_t as = kq_act_bytes(kind, cols), sb = a->scratch_bytes(cols) > b->scratch_bytes(cols) ? a->scratch_bytes(cols)
                                                                                                  : b->scratch_bytes(cols);
    uint8_t *act = mem_malloc_aligned(as * MAXT);
    void *scr = mem_malloc_aligned(sb);
    float *x = malloc(sizeof(float) * (size_t)cols), *ya = malloc(sizeof(float) * (size_t)rows * MAXT),
          *yb = malloc(sizeof(float) * (size_t)rows * MAXT);
    for (int i = 0; i < MAXT; i++) {
        for (int64_t c = 0; c < cols; c++) x[c] = extreme ? (i % 2 ? -1.0f : 1.0f) : frand() * (i % 3 == 1 ? 50.0f : 1.0f);
        kq_act_prepare(kind, x, cols, act + (size_t)i * as);
    }
    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
        int T = Ts[ti];
        for (int packed = 0; packed < 2; packed++) {
            a->matmul_kq(packed ? &Pa : &S, act, as, T, NULL, ya, (size_t)rows, 0, rows, scr);
            b->matmul_kq(packed ? &Pb : &S, act, as, T, NULL, yb, (size_t)rows, 0, rows, scr);
            CHECK_MSG(!memcmp(ya, yb, sizeof(float) * (size_t)rows * (size_t)T), "%s %lldx%lld T=%d %s: avx2 != avx512",
                      dtype_name(t), (long long)rows, (long long)cols, T, packed ? "packed" : "stored");
        }
    }
    mem_free_aligned(act);
    mem_free_aligned(scr);
    mem_free_aligned((void *)Pa.data);
    mem_free_aligned((void *)Pb.data);
    mem_free_aligned(w);
    free(x);
    free(ya);
    free(yb);
}

int main(void) {
    const cpu_kernels *all[8];
    int n = cpu_kernels_all(all, 8), tested = 0;
    const int64_t rows[] = {1, 3, 4, 5, 13, 37};
    const int64_t cols[] = {32, 96, 128, 160, 256, 384, 416, 800};
    const int groups[] = {32, 64, 128, 96};
    const dtype_t types[] = {XLLM_DT_Q8, XLLM_DT_Q4, XLLM_DT_Q4M};
    for (int k = 0; k < n; k++) {
        const cpu_kernels *K = all[k];
        if (!K->packed_bytes || !K->repack) continue;
        tested++;
        for (size_t ti = 0; ti < 3; ti++)
            for (size_t gi = 0; gi < 4; gi++)
                for (size_t ci = 0; ci < sizeof cols / sizeof *cols; ci++) {
                    if (cols[ci] % groups[gi]) continue;
                    for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++)
                        check_shape(K, types[ti], groups[gi], rows[ri], cols[ci]);
                }
        check_backend(K);
        const dtype_t kt[] = {XLLM_DT_Q4_K, XLLM_DT_Q5_K, XLLM_DT_Q6_K, XLLM_DT_IQ4_NL, XLLM_DT_IQ4_XS,
                                 XLLM_DT_Q5_0, XLLM_DT_Q5_1, XLLM_DT_Q2_K, XLLM_DT_Q3_K};
        const int64_t krows[] = {1, 5, 16, 17, 37}, kcols[] = {256, 768};
        for (int ti = 0; ti < (int)(sizeof kt / sizeof *kt); ti++) {
            for (size_t ri = 0; ri < sizeof krows / sizeof *krows; ri++)
                for (size_t ci = 0; ci < sizeof kcols / sizeof *kcols; ci++) check_kq_shape(K, kt[ti], krows[ri], kcols[ci]);
            check_kq_backend(K, kt[ti]);
        }
    }
    const cpu_kernels *l2 = NULL, *l5 = NULL;
    for (int k = 0; k < n; k++) {
        if (all[k]->level == CPU_AVX2) l2 = all[k];
        if (all[k]->level == CPU_AVX512) l5 = all[k];
    }
    if (l2 && l5) {
        const dtype_t pt[] = {XLLM_DT_IQ4_NL, XLLM_DT_IQ4_XS, XLLM_DT_Q5_0, XLLM_DT_Q5_1, XLLM_DT_Q2_K, XLLM_DT_Q3_K};
        for (int ti = 0; ti < (int)(sizeof pt / sizeof *pt); ti++) {
            check_cross(l2, l5, pt[ti], 37, 768, 0);
            check_cross(l2, l5, pt[ti], 16, 2048, 0);
            check_cross(l2, l5, pt[ti], 21, 512, 1);
        }
    }
    printf("test_repack: %d avx2-vs-avx512 P32 / Q23 comparisons\n", g_cross);
    printf("test_repack: %d level(s) with a packed layout, %d packed matrices compared, %d of them K-quants\n", tested,
           g_packed_shapes + g_kq_shapes, g_kq_shapes);
    return test_report("test_repack");
}
