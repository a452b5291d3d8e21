/*
 * pipeline.h - pipeline parallelism across processes: the model's layers
 * split over the ranks of an MPI job, one stage per rank.
 *
 * Rank 0 holds the embedding and the first layers and runs everything a
 * single process runs (tokenizer, engines, scheduler, sampling, HTTP); ranks
 * 1..N-1 hold the next layer ranges, the last one the final norm and lm_head,
 * and run pipeline_worker. Per engine step rank 0 sends every worker the
 * step's description (the KV operations the block manager performed since the
 * last step - copy-on-write copies, swap out, swap in - then the step cut into
 * micro-batches by sequence: positions, sequence indices, block tables, output
 * rows); hidden states go rank r -> r + 1 per micro-batch and the last rank
 * sends the logits rows to rank 0. Block ids are the same on every rank (rank
 * 0 decides them), so each worker's pool, of the same block count, mirrors
 * rank 0's block tables exactly; only the layers differ. Micro-batches keep
 * the stages busy at once: rank 0 embeds and runs micro-batch k + 1 while
 * rank 1 runs micro-batch k.
 *
 * Failure: every wait is non-blocking MPI polled against a deadline
 * (timeout_ms); MPI errors are returned (MPI_ERRORS_RETURN), not fatal. A
 * timeout or an MPI error prints "xllm: error: pipeline rank R: ..." and ends
 * the job with MPI_Abort, so every rank exits (mpirun itself ends the job when
 * a rank dies). Idle, rank 0 sends a heartbeat every second, so a worker
 * notices a rank 0 that stopped answering.
 *
 * Built without MPI (CMake did not find it), pipeline_start says so and
 * everything else is unreachable. MPI stays in pipeline_mpi.c; the model and
 * engine know only this header.
 *
 * Threading: rank 0's calls may come from any thread (engines' scheduler
 * threads, the caller's); they are serialized inside (MPI_THREAD_SERIALIZED).
 */
#ifndef XLLM_PIPELINE_PIPELINE_H
#define XLLM_PIPELINE_PIPELINE_H

#include <stdint.h>
#include "model/kv_ops.h"
#include "model/model.h"

typedef struct pipeline pipeline;
typedef struct pipeline_link pipeline_link;  /* one engine's side of the pipeline (rank 0) */

typedef struct pipeline_options {
    int size;              /* ranks (== the MPI job's size) */
    int microbatches;      /* per step; 0 = PIPELINE_DEFAULT_MICROBATCHES */
    int timeout_ms;        /* the longest wait for a peer; 0 = PIPELINE_DEFAULT_TIMEOUT_MS */
    int stats;             /* 1 = each rank prints a stats line at the end */
    int test_fail_after;   /* tests: rank 1 fails at this step (0 = never) */
    int test_fail_hang;    /* tests: ... by hanging instead of exiting */
} pipeline_options;

#define PIPELINE_DEFAULT_MICROBATCHES 2
#define PIPELINE_DEFAULT_TIMEOUT_MS 60000

/* Join the MPI job (MPI_Init on first use) as one of o->size ranks; *rank is
 * this process's. Fails when built without MPI, when the job's size is not
 * o->size, or MPI cannot give serialized threads. */
xllm_status pipeline_start(const pipeline_options *o, pipeline **out, int *rank, xllm_error *err);
/* After each rank loaded its part: the workers report their layer range and
 * shape to rank 0, which checks that the parts tile the same model. */
xllm_status pipeline_ready(pipeline *p, const model *m, xllm_error *err);
/* This rank cannot go on (e.g. its part failed to load): print msg and end
 * every rank (MPI_Abort). */
void pipeline_abort(pipeline *p, const char *msg);
/* Rank 0: tell the workers, then stop the heartbeat, print stats, MPI_Finalize.
 * Workers: print stats, MPI_Finalize. Frees p. */
void pipeline_end(pipeline *p);

/* Rank 0, per engine: the workers make a pool like kv (same block count and
 * size, their layers) and a swap pool of swap_blocks; the link's mirror
 * function goes into the engine's block manager. */
xllm_status pipeline_open(pipeline *p, const kv_cache *kv, int32_t swap_blocks, pipeline_link **out, xllm_error *err);
void pipeline_close(pipeline_link *l);
void pipeline_mirror(void *link, kv_op op, int32_t a, int32_t b, int32_t n);
/* Rank 0: one step through every stage; logits as model_forward's. */
xllm_status pipeline_forward(pipeline_link *l, model *m, kv_cache *kv, const fwd_batch *b, float *logits,
                             xllm_error *err);

/* Ranks 1..N-1: serve steps until rank 0 ends the pipeline. */
xllm_status pipeline_worker(pipeline *p, model *m, xllm_error *err);

#endif
