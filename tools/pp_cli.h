/*
 * pp_cli.h - the pipeline-parallel options `run` and `serve` share
 * (--pp N, --pp-layers, --pp-microbatches, --pp-timeout, --pp-stats and the
 * test-only failure switches), and what a worker rank does instead of the
 * command: serve its stage until rank 0 is done.
 */
#ifndef XLLM_TOOLS_PP_CLI_H
#define XLLM_TOOLS_PP_CLI_H

#include "xllm.h"

typedef struct pp_cli {
    int size, microbatches, timeout_ms, stats, fail_after, fail_hang;
    const char *layers;
} pp_cli;

/* Consume argv[*i] (and its value) when it is one of the options above:
 * 1 consumed, 0 not ours, -1 error (printed). */
int pp_cli_parse(pp_cli *o, int argc, char **argv, int *i);
/* Copy the options into the model options; on rank 0 of a pipeline, a
 * SIGTERM (mpirun ending the job after another rank failed) prints why. */
void pp_cli_apply(const pp_cli *o, xllm_model_options *mo);
/* After load: on a worker rank, run the stage, free the model and return
 * the exit status (0, or 1 after printing the error); -1 on rank 0. */
int pp_cli_worker(xllm_model *m);

#endif
