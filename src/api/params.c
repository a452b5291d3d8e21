/*
 * params.c - the sampling parameters in one table: name, type, ranges,
 * default, whether the response cache keys on it, and how the HTTP API, the
 * CLI and Python spell it.
 *
 * The idea: a new scalar parameter is one row here (and its field in
 * xllm_sampling_params). The HTTP server parses and range-checks request
 * fields by these rows, `xllm run` parses its flags by them, the response
 * cache puts the rows marked cache_key into its key, and the Python package
 * reads the table through xllm_sampling_params_table to fill the C struct.
 * Parameters that are not one scalar (stop strings, stop ids, seed with its
 * has_seed flag, logprobs, constraints) are handled where they are used.
 */
#include "xllm.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define OFF(f) offsetof(xllm_sampling_params, f)

/* name, http, cli, cli_alias, type, min, max, min_open, http_min, http_max, default, offset, cache_key, help */
static const xllm_param_info g_params[] = {
    {"max_new_tokens", "max_tokens", "--max-new-tokens", "-n --n-predict", XLLM_PARAM_INT, 0, 1 << 30, 0, 1, 1 << 30, 256,
     OFF(max_new_tokens), 1, "the most tokens to generate"},
    {"do_sample", NULL, NULL, NULL, XLLM_PARAM_BOOL, 0, 1, 0, 0, 1, 1, OFF(do_sample), 1,
     "0 = greedy whatever the temperature"},
    {"temperature", "temperature", "--temp", "--temperature", XLLM_PARAM_FLOAT, 0, 100, 0, 0, 2, 1.0, OFF(temperature), 1,
     "softmax temperature; 0 = greedy"},
    {"top_k", "top_k", "--top-k", NULL, XLLM_PARAM_INT, 0, 2147483647.0, 0, -1, 1 << 30, 0, OFF(top_k), 1,
     "keep the k most likely tokens; 0 (HTTP: -1 too) = off"},
    {"top_p", "top_p", "--top-p", NULL, XLLM_PARAM_FLOAT, 0, 1, 1, 0, 1, 1.0, OFF(top_p), 1,
     "nucleus sampling mass in (0, 1]; 1 = off"},
    {"min_p", "min_p", "--min-p", NULL, XLLM_PARAM_FLOAT, 0, 1, 0, 0, 1, 0.0, OFF(min_p), 1,
     "drop tokens below min_p times the top probability; 0 = off"},
    {"repetition_penalty", "repetition_penalty", "--repetition-penalty", NULL, XLLM_PARAM_FLOAT, 0, 100, 1, 0.01, 100, 1.0,
     OFF(repetition_penalty), 1, "HF's multiplicative penalty over prompt and output; 1 = off"},
    {"presence_penalty", "presence_penalty", "--presence-penalty", NULL, XLLM_PARAM_FLOAT, -100, 100, 0, -2, 2, 0.0,
     OFF(presence_penalty), 1, "OpenAI's additive penalty over the output; 0 = off"},
    {"frequency_penalty", "frequency_penalty", "--frequency-penalty", NULL, XLLM_PARAM_FLOAT, -100, 100, 0, -2, 2, 0.0,
     OFF(frequency_penalty), 1, "OpenAI's additive per-count penalty over the output; 0 = off"},
    {"ignore_eos", "ignore_eos", "--ignore-eos", NULL, XLLM_PARAM_BOOL, 0, 1, 0, 0, 1, 0, OFF(ignore_eos), 1,
     "1 = do not stop at the model's eos ids"},
};

const xllm_param_info *xllm_sampling_params_table(size_t *n) {
    if (n) *n = sizeof g_params / sizeof g_params[0];
    return g_params;
}

const xllm_param_info *xllm_sampling_param_find(const char *name) {
    for (size_t i = 0; name && i < sizeof g_params / sizeof g_params[0]; i++)
        if (!strcmp(g_params[i].name, name)) return &g_params[i];
    return NULL;
}

double xllm_sampling_param_get(const xllm_sampling_params *p, const xllm_param_info *row) {
    const char *b = (const char *)p + row->offset;
    if (row->type == XLLM_PARAM_FLOAT) {
        float f;
        memcpy(&f, b, sizeof f);
        return f;
    }
    int i;
    memcpy(&i, b, sizeof i);
    return i;
}

int xllm_sampling_param_set(xllm_sampling_params *p, const xllm_param_info *row, double v) {
    if (!isfinite(v) || v < row->min || v > row->max || (row->min_open && v <= row->min)) return 0;
    if (row->type != XLLM_PARAM_FLOAT && v != floor(v)) return 0;
    char *b = (char *)p + row->offset;
    if (row->type == XLLM_PARAM_FLOAT) {
        float f = (float)v;
        memcpy(b, &f, sizeof f);
    } else {
        int i = (int)v;
        memcpy(b, &i, sizeof i);
    }
    return 1;
}
