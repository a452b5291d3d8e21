/*
 * pipeline_none.c - the pipeline when libxllm is built without MPI (CMake
 * did not find it): starting one says so; nothing else can be reached.
 */
#include "pipeline/pipeline.h"
#include "base/error.h"

#include <stdlib.h>

xllm_status pipeline_start(const pipeline_options *o, pipeline **out, int *rank, xllm_error *err) {
    (void)o;
    *out = NULL;
    *rank = 0;
    return err_setf(err, XLLM_ERR_UNSUPPORTED,
                       "--pp: this xllm was built without MPI (install libopenmpi-dev and openmpi-bin, then rebuild)");
}

xllm_status pipeline_ready(pipeline *p, const model *m, xllm_error *err) {
    (void)p, (void)m;
    return err_setf(err, XLLM_ERR_UNSUPPORTED, "built without MPI");
}

void pipeline_end(pipeline *p) { (void)p; }

void pipeline_abort(pipeline *p, const char *msg) { (void)p, (void)msg; }

xllm_status pipeline_open(pipeline *p, const kv_cache *kv, int32_t swap_blocks, pipeline_link **out, xllm_error *err) {
    (void)p, (void)kv, (void)swap_blocks;
    *out = NULL;
    return err_setf(err, XLLM_ERR_UNSUPPORTED, "built without MPI");
}

void pipeline_close(pipeline_link *l) { (void)l; }

void pipeline_mirror(void *link, kv_op op, int32_t a, int32_t b, int32_t n) {
    (void)link, (void)op, (void)a, (void)b, (void)n;
    abort(); /* no link can exist */
}

xllm_status pipeline_forward(pipeline_link *l, model *m, kv_cache *kv, const fwd_batch *b, float *logits,
                             xllm_error *err) {
    (void)l, (void)m, (void)kv, (void)b, (void)logits;
    return err_setf(err, XLLM_ERR_UNSUPPORTED, "built without MPI");
}

xllm_status pipeline_worker(pipeline *p, model *m, xllm_error *err) {
    (void)p, (void)m;
    return err_setf(err, XLLM_ERR_UNSUPPORTED, "built without MPI");
}
