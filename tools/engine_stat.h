/*
 * engine_stat.h - one number from an engine's stats JSON (xllm_engine_stats),
 * for the programs that read it: `xllm bench`, bench_engine and the engine
 * tests. Header-only (static inline) so that each program links it without a
 * library of its own. Thread-safe as xllm_engine_stats is.
 */
#ifndef XLLM_TOOLS_ENGINE_STAT_H
#define XLLM_TOOLS_ENGINE_STAT_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include "xllm.h"

/* stats[a] (or stats[a][b] when b is not NULL); -1 when it is absent or not a number. */
static inline long cli_engine_stat(xllm_engine *e, const char *a, const char *b) {
    char *js = xllm_engine_stats(e);
    cJSON *j = cJSON_Parse(js);
    xllm_free(js);
    cJSON *x = cJSON_GetObjectItem(j, a);
    if (b) x = cJSON_GetObjectItem(x, b);
    long v = cJSON_IsNumber(x) ? (long)x->valuedouble : -1;
    cJSON_Delete(j);
    return v;
}

/* stats[a] as a string into buf (cap bytes, cut to fit); "" when absent or not a string. */
static inline void cli_engine_stat_str(xllm_engine *e, const char *a, char *buf, size_t cap) {
    char *js = xllm_engine_stats(e);
    cJSON *j = cJSON_Parse(js);
    xllm_free(js);
    cJSON *x = cJSON_GetObjectItem(j, a);
    snprintf(buf, cap, "%s", cJSON_IsString(x) ? x->valuestring : "");
    cJSON_Delete(j);
}

#endif
