/*
 * repack.c - weights rearranged once, at load, into the order the kernel
 * level streams them (backend_pack_matrix, see backend.h).
 *
 * The level says how many bytes W takes in its layout (0: W stays as stored)
 * and writes tiles of 4 rows; tiles are split across the thread pool (a 1B
 * model repacks in well under a second). llama.cpp's block types are packed
 * too where the level has a layout for them (avx512: Q2_K, Q3_K, Q4_K, Q6_K,
 * IQ4_NL, IQ4_XS, Q5_0, Q5_1). The
 * no_repack option (XLLM_REPACK=0 in the CLI) keeps every matrix as stored
 * (for comparisons: the results are the same either way).
 */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "base/alloc.h"
#include "base/error.h"
#include "quant/kquant.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const cpu_kernels *k;
    const matrix *W;
    void *out;
} repack_job;

static void repack_tiles(void *p, size_t t0, size_t t1, int thread) {
    (void)thread;
    repack_job *j = p;
    j->k->repack(j->W, (int64_t)t0, (int64_t)t1, j->out);
}

xllm_status backend_pack_matrix(cpu_backend *be, matrix *W, void **storage, xllm_error *err) {
    *storage = NULL;
    const cpu_kernels *k = be->kern;
    if (!W->data || W->packed || !k->packed_bytes || !k->repack || be->no_repack) return XLLM_OK;
    /* arithmetic "llama": kquant_llama.c reads these as stored */
    if (be->arith_llama && kq_llama_owns(W->dtype, W->group)) return XLLM_OK;
    if (be->arith_llama && (W->dtype == XLLM_DT_F16 || W->dtype == XLLM_DT_F32)) return XLLM_OK; /* f16_llama.c */
    size_t bytes = k->packed_bytes(W);
    if (!bytes) return XLLM_OK;
    void *out = mem_malloc_aligned(bytes);
    if (!out)
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory repacking a %lldx%lld matrix (%zu bytes)",
                           (long long)W->rows, (long long)W->cols, bytes);
    repack_job j = {k, W, out};
    size_t tiles = (size_t)((W->rows + 3) / 4);
    threadpool_run(be->tp, tiles, 16, repack_tiles, &j);
    W->data = out;
    W->packed = 1;
    *storage = out;
    return XLLM_OK;
}
