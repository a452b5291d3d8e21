/*
 * metrics.c - the server's counters and histograms, and /metrics in the
 * Prometheus text exposition format (version 0.0.4).
 *
 * Request counts by endpoint and status, TTFT and per-token latency
 * histograms are process-wide (guarded by one mutex; they are touched once
 * per response or chunk). Per model: prompt and generated tokens, PII values
 * masked; per cascade stage: runs and early ends. The engine's own state
 * (queue depth, running requests, KV blocks, prefix- and response-cache
 * hits, preemptions) is read from xllm_engine_stats at scrape time; memory
 * gauges (library allocations, C heap in use and kept free) at the end.
 */
#include "srv.h"

#include <stdio.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

static const int status_list[] = {200, 400, 401, 404, 405, 413, 429, 500, 503};
#define N_STATUS ((int)(sizeof status_list / sizeof status_list[0]))

static const double ttft_b[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double tok_b[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
#define N_TTFT ((int)(sizeof ttft_b / sizeof ttft_b[0]))
#define N_TOK ((int)(sizeof tok_b / sizeof tok_b[0]))

typedef struct hist {
    unsigned long long bucket[16];
    unsigned long long count;
    double sum;
} hist;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long g_req[EP_COUNT][N_STATUS + 1]; /* last column: any other status */
static hist g_ttft, g_tok;

void metrics_init(void) {
    pthread_mutex_lock(&g_mu);
    memset(g_req, 0, sizeof g_req);
    memset(&g_ttft, 0, sizeof g_ttft);
    memset(&g_tok, 0, sizeof g_tok);
    pthread_mutex_unlock(&g_mu);
}

void metrics_request(int ep, int status) {
    if (ep < 0 || ep >= EP_COUNT) ep = EP_OTHER;
    int k = N_STATUS;
    for (int i = 0; i < N_STATUS; i++)
        if (status_list[i] == status) k = i;
    pthread_mutex_lock(&g_mu);
    g_req[ep][k]++;
    pthread_mutex_unlock(&g_mu);
}

static void observe(hist *h, const double *b, int nb, double v) {
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < nb; i++)
        if (v <= b[i]) h->bucket[i]++;
    h->count++;
    h->sum += v;
    pthread_mutex_unlock(&g_mu);
}

void metrics_ttft(double s) { observe(&g_ttft, ttft_b, N_TTFT, s); }
void metrics_token_latency(double s) { observe(&g_tok, tok_b, N_TOK, s); }

static void render_hist(sbuf *o, const char *name, const char *help, const hist *h, const double *b, int nb) {
    sb_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int i = 0; i < nb; i++) sb_printf(o, "%s_bucket{le=\"%g\"} %llu\n", name, b[i], h->bucket[i]);
    sb_printf(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, h->count, name, h->sum, name,
              h->count);
}

static double jnum(const cJSON *o, const char *a, const char *b) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b) v = cJSON_GetObjectItemCaseSensitive(v, b);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

typedef struct gauge {
    const char *name, *help, *type, *a, *b;
} gauge;

static const gauge gauges[] = {
    {"xllm_queue_depth", "Requests waiting to be admitted", "gauge", "requests_waiting", NULL},
    {"xllm_running_requests", "Requests running (admitted)", "gauge", "requests_running", NULL},
    {"xllm_engine_requests_finished_total", "Engine requests finished", "counter", "requests_finished", NULL},
    {"xllm_engine_requests_aborted_total", "Engine requests aborted", "counter", "requests_aborted", NULL},
    {"xllm_prefill_tokens_total", "Tokens computed in prefill", "counter", "prefill_tokens", NULL},
    {"xllm_decode_tokens_total", "Tokens computed in decode", "counter", "decode_tokens", NULL},
    {"xllm_engine_steps_total", "Engine steps", "counter", "steps", NULL},
    {"xllm_preemptions_recompute_total", "Preemptions by recompute", "counter", "preemptions_by_mode", "recompute"},
    {"xllm_preemptions_swap_total", "Preemptions by swap", "counter", "preemptions_by_mode", "swap"},
    {"xllm_prefix_cache_lookups_total", "Prefix cache lookups", "counter", "prefix_cache", "lookups"},
    {"xllm_prefix_cache_hit_blocks_total", "Prefix cache hits (blocks)", "counter", "prefix_cache", "hit_blocks"},
    {"xllm_prefix_cache_hit_tokens_total", "Prefix cache hits (tokens)", "counter", "prefix_cache", "hit_tokens"},
    {"xllm_prefix_cache_evictions_total", "Prefix cache evictions", "counter", "prefix_cache", "evictions"},
    {"xllm_response_cache_hits_total", "Response cache hits", "counter", "response_cache", "hits"},
    {"xllm_response_cache_misses_total", "Response cache misses", "counter", "response_cache", "misses"},
    {"xllm_response_cache_entries", "Response cache entries", "gauge", "response_cache", "entries"},
    {"xllm_kv_blocks_total", "KV blocks in the pool", "gauge", "kv", "blocks_total"},
    {"xllm_kv_blocks_used", "KV blocks held by sequences", "gauge", "kv", "blocks_used"},
    {"xllm_kv_blocks_cached", "KV blocks free but holding cached prefixes", "gauge", "kv", "blocks_cached"},
    {"xllm_kv_blocks_free", "KV blocks free", "gauge", "kv", "blocks_free"},
    {"xllm_kv_swap_blocks_used", "Host swap blocks used", "gauge", "kv", "swap_blocks_used"},
};
#define N_GAUGES ((int)(sizeof gauges / sizeof gauges[0]))

void metrics_render(srv_state *s, sbuf *o) {
    pthread_mutex_lock(&g_mu);
    sb_puts(o, "# HELP xllm_http_requests_total HTTP requests by endpoint and status\n"
               "# TYPE xllm_http_requests_total counter\n");
    for (int e = 0; e < EP_COUNT; e++)
        for (int k = 0; k <= N_STATUS; k++)
            if (g_req[e][k] || e <= EP_CHAT) {
                char st[16];
                if (k == N_STATUS) snprintf(st, sizeof st, "other"); /* any status not listed */
                else snprintf(st, sizeof st, "%d", status_list[k]);
                sb_printf(o, "xllm_http_requests_total{endpoint=\"%s\",status=\"%s\"} %llu\n", endpoint_label(e), st,
                          g_req[e][k]);
            }
    hist ttft = g_ttft, tok = g_tok;
    pthread_mutex_unlock(&g_mu);
    render_hist(o, "xllm_time_to_first_token_seconds", "Time from request to its first generated token", &ttft,
                ttft_b, N_TTFT);
    render_hist(o, "xllm_time_per_output_token_seconds", "Time between generated tokens", &tok, tok_b, N_TOK);
    sb_puts(o, "# HELP xllm_prompt_tokens_total Prompt tokens submitted\n# TYPE xllm_prompt_tokens_total counter\n");
    for (int i = 0; i < s->n_models; i++)
        if (!s->models[i]->n_stages)
            sb_printf(o, "xllm_prompt_tokens_total{model=\"%s\"} %lld\n", s->models[i]->name,
                      (long long)atomic_load(&s->models[i]->prompt_tokens));
    sb_puts(o, "# HELP xllm_generation_tokens_total Tokens generated\n# TYPE xllm_generation_tokens_total counter\n");
    for (int i = 0; i < s->n_models; i++)
        if (!s->models[i]->n_stages)
            sb_printf(o, "xllm_generation_tokens_total{model=\"%s\"} %lld\n", s->models[i]->name,
                      (long long)atomic_load(&s->models[i]->generated_tokens));
    sb_puts(o, "# HELP xllm_pii_masked_total PII values masked in prompts\n# TYPE xllm_pii_masked_total counter\n");
    for (int i = 0; i < s->n_models; i++)
        sb_printf(o, "xllm_pii_masked_total{model=\"%s\"} %lld\n", s->models[i]->name,
                  (long long)atomic_load(&s->models[i]->pii_masked));
    sb_puts(o, "# HELP xllm_cascade_stage_runs_total Cascade stages run\n# TYPE xllm_cascade_stage_runs_total counter\n");
    for (int i = 0; i < s->n_models; i++)
        for (int j = 0; j < s->models[i]->n_stages; j++)
            sb_printf(o, "xllm_cascade_stage_runs_total{cascade=\"%s\",stage=\"%d\",model=\"%s\"} %lld\n",
                      s->models[i]->name, j, s->models[i]->stages[j].model,
                      (long long)atomic_load(&s->models[i]->stages[j].runs));
    sb_puts(o, "# HELP xllm_cascade_stage_accepted_total Cascades ended by a stage's confident answer\n"
               "# TYPE xllm_cascade_stage_accepted_total counter\n");
    for (int i = 0; i < s->n_models; i++)
        for (int j = 0; j < s->models[i]->n_stages; j++)
            sb_printf(o, "xllm_cascade_stage_accepted_total{cascade=\"%s\",stage=\"%d\",model=\"%s\"} %lld\n",
                      s->models[i]->name, j, s->models[i]->stages[j].model,
                      (long long)atomic_load(&s->models[i]->stages[j].accepted));
    long long eb_req, eb_calls;
    embed_batch_counts(&eb_req, &eb_calls);
    sb_printf(o, "# HELP xllm_embedding_requests_total Embedding requests served\n"
                 "# TYPE xllm_embedding_requests_total counter\nxllm_embedding_requests_total %lld\n"
                 "# HELP xllm_embedding_batches_total Library calls that embedded them (concurrent requests share one)\n"
                 "# TYPE xllm_embedding_batches_total counter\nxllm_embedding_batches_total %lld\n",
              eb_req, eb_calls);
    cJSON *st[256] = {0};
    int nm = s->n_models < 256 ? s->n_models : 256;
    for (int i = 0; i < nm; i++) {
        if (!s->models[i]->engine) continue;
        char *js = xllm_engine_stats(s->models[i]->engine);
        st[i] = js ? cJSON_Parse(js) : NULL;
        xllm_free(js);
    }
    for (int g = 0; g < N_GAUGES; g++) {
        sb_printf(o, "# HELP %s %s\n# TYPE %s %s\n", gauges[g].name, gauges[g].help, gauges[g].name, gauges[g].type);
        for (int i = 0; i < nm; i++)
            if (st[i])
                sb_printf(o, "%s{model=\"%s\"} %.0f\n", gauges[g].name, s->models[i]->name,
                          jnum(st[i], gauges[g].a, gauges[g].b));
    }
    for (int i = 0; i < nm; i++) cJSON_Delete(st[i]);
    /* memory: what the library holds through mem_malloc, and the C heap as
     * glibc's allocator sees it (in use vs kept free in its arenas), so a
     * growing RSS can be told apart: a leak grows the in-use bytes, allocator
     * high-water (arenas of connection threads, fragmentation) the free ones */
    sb_printf(o, "# HELP xllm_library_allocated_bytes Bytes held through xllm_malloc (KV, scratch, caches)\n"
                 "# TYPE xllm_library_allocated_bytes gauge\nxllm_library_allocated_bytes %zu\n",
              xllm_allocated_bytes());
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    sb_printf(o, "# HELP xllm_heap_in_use_bytes C heap bytes allocated and not freed (malloc's uordblks + hblkhd)\n"
                 "# TYPE xllm_heap_in_use_bytes gauge\nxllm_heap_in_use_bytes %zu\n"
                 "# HELP xllm_heap_free_bytes C heap bytes freed but kept by the allocator (fordblks)\n"
                 "# TYPE xllm_heap_free_bytes gauge\nxllm_heap_free_bytes %zu\n",
              mi.uordblks + mi.hblkhd, mi.fordblks);
#endif
}
