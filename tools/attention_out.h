/*
 * attention_out.h - `xllm logits --attention FILE` (attention_out.c).
 */
#ifndef XLLM_TOOLS_ATTENTION_OUT_H
#define XLLM_TOOLS_ATTENTION_OUT_H

#include "xllm.h"

#include <stddef.h>
#include <stdint.h>

/* Write the attention probabilities of ids (layers_arg "0,2" or NULL: all;
 * average: over heads) to path as JSON (attention_out.c has the layout).
 * Returns the exit status (0, or 1 after printing the error). Not thread-safe. */
int attention_write(xllm_model *m, const int32_t *ids, size_t n, const char *layers_arg, int average,
                    const char *path);

#endif
