/*
 * bench_engine.c - the serving engine under a burst of requests.
 *
 *   bench_engine -m MODEL [-r 64] [-p 128] [-n 128] [-t THREADS] [--seq N] [--pool-blocks N] [--prefix 1000]
 *
 * Three measurements on one model:
 *  - sequential: the requests one after another (one xllm_engine_submit +
 *    result at a time): aggregate generated tokens/s, TTFT of each (--seq N:
 *    only the first N requests, when 64 sequential calls take too long; the
 *    rate of one-at-a-time calls does not depend on how many there are);
 *  - burst: all submitted at once to an engine (continuous batching, up to
 *    max_batch_size 64 sequences per step): aggregate tokens/s, TTFT p50/p99;
 *  - burst with a pool forced small (--pool-blocks, default: a quarter of
 *    what the burst needs): the same, with the preemptions it caused;
 *  - with --prefix N: TTFT of a request whose first N tokens were computed by
 *    an earlier request (prefix-cache hit) against the same request on an
 *    engine with the cache off.
 * Each burst line also counts failures (a request that ended in an error or
 * with fewer than -n tokens) and how many of the sequential requests' greedy
 * tokens differ when they run in the burst.
 * --profile FILE.json: the per-operator profile of the burst (xllm_profile_report).
 * Prompts are fixed pseudo-random ids; greedy decoding with ignore_eos, so
 * every request generates exactly -n tokens. Figures, never pass/fail.
 */
#include "xllm.h"
#include "../tools/engine_stat.h"
#include "../tools/options_env.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

typedef struct run_stats {
    double wall, tok_s, ttft_p50, ttft_p99;
    long preemptions;
    int failures; /* requests that ended in an error or with fewer than N tokens */
} run_stats;

/* Request id's result: its tokens counted into *generated and copied to out
 * (N ids; NULL: not kept); a failure counted when it has no result or
 * fewer than N tokens. */
static void take(xllm_engine *e, xllm_request_id id, int N, int32_t *out, long *generated, int *failures) {
    xllm_result *res;
    size_t nr;
    xllm_error err;
    if (xllm_engine_result(e, id, &res, &nr, &err)) {
        fprintf(stderr, "result: %s\n", err.message);
        (*failures)++;
        return;
    }
    *generated += (long)res[0].n_ids;
    if ((int)res[0].n_ids != N) (*failures)++;
    if (out) {
        memset(out, 0xff, sizeof(int32_t) * (size_t)N);
        memcpy(out, res[0].ids, sizeof(int32_t) * (res[0].n_ids < (size_t)N ? res[0].n_ids : (size_t)N));
    }
    xllm_results_free(res, nr);
}

/* Submit requests [0, R) (all at once when burst, else one by one), read
 * their streams, and time them; out[i] (N ids each, or out NULL) gets
 * request i's tokens. */
static run_stats run(xllm_engine *e, int32_t **prompts, int R, int P, int N, int burst, int32_t **out) {
    int failures = 0;
    xllm_request_id *ids = calloc((size_t)R, sizeof *ids);
    double *t_sub = calloc((size_t)R, sizeof(double)), *ttft = calloc((size_t)R, sizeof(double));
    int *done = calloc((size_t)R, sizeof(int));
    xllm_error err;
    long pre0 = cli_engine_stat(e, "preemptions", NULL);
    double t0 = now_s();
    long generated = 0;
    for (int i = 0; i < R; i++) {
        if (!burst && i > 0) { /* wait for the previous one to finish */
            take(e, ids[i - 1], N, out ? out[i - 1] : NULL, &generated, &failures);
            done[i - 1] = 1;
        }
        xllm_request r;
        memset(&r, 0, sizeof r);
        r.prompt_ids = prompts[i];
        r.n_prompt_ids = (size_t)P;
        r.params = xllm_sampling_params_default();
        r.params.do_sample = 0;
        r.params.ignore_eos = 1;
        r.params.max_new_tokens = N;
        t_sub[i] = now_s();
        if (xllm_engine_submit(e, &r, NULL, NULL, &ids[i], &err)) {
            fprintf(stderr, "submit: %s\n", err.message);
            exit(1);
        }
        if (!burst) { /* first token */
            xllm_chunk c;
            while (xllm_engine_poll(e, ids[i], &c, -1, &err) == XLLM_POLL_CHUNK)
                if (c.n_ids) break;
            ttft[i] = now_s() - t_sub[i];
        }
    }
    if (burst) {
        int left = R;
        while (left) {
            for (int i = 0; i < R; i++) {
                if (done[i] || ttft[i] > 0) continue;
                xllm_chunk c;
                xllm_poll_result pr = xllm_engine_poll(e, ids[i], &c, 0, &err);
                if ((pr == XLLM_POLL_CHUNK && c.n_ids) || pr == XLLM_POLL_ERROR || pr == XLLM_POLL_DONE)
                    ttft[i] = now_s() - t_sub[i]; /* (a failed request is counted when its result is taken) */
            }
            for (int i = 0; i < R; i++) {
                if (done[i] || ttft[i] == 0) continue;
                xllm_chunk c;
                xllm_poll_result pr;
                while ((pr = xllm_engine_poll(e, ids[i], &c, 0, &err)) == XLLM_POLL_CHUNK) {}
                if (pr != XLLM_POLL_TIMEOUT) { /* done, or an error: the result says which */
                    take(e, ids[i], N, out ? out[i] : NULL, &generated, &failures);
                    done[i] = 1;
                    left--;
                }
            }
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    } else {
        take(e, ids[R - 1], N, out ? out[R - 1] : NULL, &generated, &failures);
    }
    run_stats s;
    s.failures = failures;
    s.wall = now_s() - t0;
    s.tok_s = (double)generated / s.wall;
    s.ttft_p50 = pct(ttft, R, 0.5);
    s.ttft_p99 = pct(ttft, R, 0.99);
    s.preemptions = cli_engine_stat(e, "preemptions", NULL) - pre0;
    free(ids);
    free(t_sub);
    free(ttft);
    free(done);
    return s;
}

/* How many of the first S requests' tokens differ between a and b. */
static int differ(int32_t **a, int32_t **b, int S, int N) {
    int n = 0;
    for (int i = 0; i < S; i++) n += memcmp(a[i], b[i], sizeof(int32_t) * (size_t)N) != 0;
    return n;
}

static double first_token_time(xllm_engine *e, const int32_t *ids, int n) {
    xllm_request r;
    memset(&r, 0, sizeof r);
    r.prompt_ids = ids;
    r.n_prompt_ids = (size_t)n;
    r.params = xllm_sampling_params_default();
    r.params.do_sample = 0;
    r.params.max_new_tokens = 1;
    xllm_request_id id;
    xllm_error err;
    double t0 = now_s();
    if (xllm_engine_submit(e, &r, NULL, NULL, &id, &err)) {
        fprintf(stderr, "%s\n", err.message);
        exit(1);
    }
    xllm_result *res;
    size_t nr;
    xllm_engine_result(e, id, &res, &nr, &err);
    double t = now_s() - t0;
    xllm_results_free(res, nr);
    return t;
}

/* The per-operator profile (xllm_profile_report's JSON) into path. */
static void write_profile(const char *path) {
    char *json = NULL;
    xllm_error err;
    xllm_profile_enable(0);
    if (xllm_profile_report(&json, &err)) {
        fprintf(stderr, "profile: %s\n", err.message);
        return;
    }
    FILE *f = fopen(path, "w");
    if (!f || fputs(json, f) < 0) fprintf(stderr, "profile: cannot write %s\n", path);
    if (f) fclose(f);
    xllm_free(json);
}

int main(int argc, char **argv) {
    const char *path = NULL;
    int R = 64, P = 128, N = 128, threads = 0, pool_blocks = 0, prefix = 0, rounds = 5, n_seq = 0;
    const char *profile_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) path = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) R = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-p") && i + 1 < argc) P = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) N = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pool-blocks") && i + 1 < argc) pool_blocks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seq") && i + 1 < argc) n_seq = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prefix") && i + 1 < argc) prefix = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--profile") && i + 1 < argc) profile_path = argv[++i];
        else {
            fprintf(stderr, "usage: bench_engine -m MODEL [-r 64] [-p 128] [-n 128] [-t THREADS] [--pool-blocks N] "
                            "[--prefix TOKENS] [--rounds 5] [--seq N] [--profile FILE.json]\n");
            return 2;
        }
    }
    if (!path || R < 1 || P < 1 || N < 1) return 2;
    xllm_error err;
    xllm_model_options mo = xllm_model_options_default();
    cli_model_options_from_env(&mo); /* XLLM_CPU, XLLM_PLAN, ... as the CLI */
    mo.n_threads = threads;
    mo.max_batch_seqs = R < 64 ? R : 64;
    int ctx = P + N > prefix + 64 ? P + N : prefix + 64;
    mo.max_context = ctx;
    xllm_model *m = xllm_model_load(path, &mo, &err);
    if (!m) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    int V = xllm_model_vocab_size(m);
    int32_t **prompts = malloc((size_t)R * sizeof *prompts);
    for (int i = 0; i < R; i++) {
        prompts[i] = malloc((size_t)P * sizeof(int32_t));
        prompts[i][0] = 1;
        for (int k = 1; k < P; k++) prompts[i][k] = 3 + (int32_t)((7919u * (unsigned)(i * P + k) + 13u) % (unsigned)(V - 3));
    }
    printf("model %s, %d requests x (%d prompt + %d generated) tokens\n", path, R, P, N);
    if (R > 1) {
        xllm_engine_options eo = xllm_engine_options_default();
        eo.max_batch_size = mo.max_batch_seqs;
        eo.cache_policy = XLLM_CACHE_NONE;
        eo.verbose = 1;
        xllm_engine *e = xllm_engine_create(m, &eo, &err);
        if (!e) {
            fprintf(stderr, "%s\n", err.message);
            return 1;
        }
        int S = n_seq > 0 && n_seq < R ? n_seq : R;
        /* each request's tokens: alone (the sequential calls) and in a burst */
        int32_t **solo = malloc((size_t)R * sizeof *solo), **got = malloc((size_t)R * sizeof *got);
        for (int i = 0; i < R; i++) {
            solo[i] = malloc(sizeof(int32_t) * (size_t)N);
            got[i] = malloc(sizeof(int32_t) * (size_t)N);
        }
        run_stats seq = run(e, prompts, S, P, N, 0, solo);
        printf("sequential (%d calls): %.1f s, %.1f generated tok/s, TTFT p50 %.3f s p99 %.3f s\n", S, seq.wall,
               seq.tok_s, seq.ttft_p50, seq.ttft_p99);
        fflush(stdout);
        if (profile_path) {
            xllm_profile_reset();
            xllm_profile_enable(1);
        }
        run_stats bur = run(e, prompts, R, P, N, 1, got);
        if (profile_path) write_profile(profile_path);
        printf("burst:      %.1f s, %.1f generated tok/s (%.2fx sequential), TTFT p50 %.3f s p99 %.3f s, %ld "
               "preemptions, %d failures, %d of %d differ from alone\n", bur.wall, bur.tok_s, bur.tok_s / seq.tok_s,
               bur.ttft_p50, bur.ttft_p99, bur.preemptions, bur.failures + seq.failures, differ(solo, got, S, N), S);
        fflush(stdout);
        long total = cli_engine_stat(e, "kv", "blocks_total");
        long bs = cli_engine_stat(e, "kv", "block_size");
        long need = (long)R * ((P + N + bs - 1) / bs);
        xllm_engine_free(e);
        (void)total;
        for (int mode = 0; mode < 3; mode++) {
            xllm_engine_options so = eo;
            so.preempt_mode = (xllm_preempt_mode)mode;
            int pb = pool_blocks ? pool_blocks : (int)(need / 4);
            long min_blocks = (ctx + bs - 1) / bs;
            if (pb < min_blocks) pb = (int)min_blocks;
            /* a pool of pb blocks: workspace = scratch + pb blocks (+ a swap pool of pb / 2) */
            xllm_engine *probe = xllm_engine_create(m, &so, &err);
            long scratch = cli_engine_stat(probe, "memory", "scratch_bytes");
            long bb = cli_engine_stat(probe, "memory", "kv_bytes") / cli_engine_stat(probe, "kv", "blocks_total");
            xllm_engine_free(probe);
            so.swap_size = mode == XLLM_PREEMPT_RECOMPUTE ? -1 : (int64_t)(pb / 2) * bb;
            so.workspace_size = scratch + (int64_t)pb * bb + (so.swap_size > 0 ? so.swap_size : 0);
            xllm_engine *small = xllm_engine_create(m, &so, &err);
            if (!small) {
                fprintf(stderr, "%s\n", err.message);
                return 1;
            }
            run_stats sm = run(small, prompts, R, P, N, 1, got);
            const char *names[] = {"recompute", "swap", "elastic"};
            printf("burst, pool of %d blocks (%.0f%% of the need), %s: %.1f s, %.1f tok/s (%.2fx sequential), TTFT "
                   "p50 %.3f s p99 %.3f s, %ld preemptions, %d failures, %d of %d differ from alone\n", pb,
                   100.0 * pb / need, names[mode], sm.wall, sm.tok_s, sm.tok_s / seq.tok_s, sm.ttft_p50, sm.ttft_p99,
                   sm.preemptions, sm.failures, differ(solo, got, S, N), S);
            fflush(stdout);
            xllm_engine_free(small);
        }
        for (int i = 0; i < R; i++) free(solo[i]), free(got[i]);
        free(solo);
        free(got);
    }
    if (prefix > 0) {
        int32_t *a = malloc((size_t)(prefix + 32) * sizeof(int32_t));
        int32_t *b = malloc((size_t)(prefix + 32) * sizeof(int32_t));
        a[0] = b[0] = 1;
        for (int k = 1; k < prefix + 32; k++) a[k] = b[k] = 3 + (int32_t)((104729u * (unsigned)k + 7u) % (unsigned)(V - 3));
        for (int k = prefix; k < prefix + 32; k++) b[k] = 3 + (int32_t)((31u * (unsigned)k + 5u) % (unsigned)(V - 3));
        double hit[64], miss[64];
        if (rounds > 64) rounds = 64;
        for (int r = 0; r < rounds; r++) {
            /* alternate: cache off, then cache on (warm it with a, time b) */
            xllm_engine_options o = xllm_engine_options_default();
            o.cache_policy = XLLM_CACHE_NONE;
            xllm_engine *off = xllm_engine_create(m, &o, &err);
            miss[r] = first_token_time(off, b, prefix + 32);
            xllm_engine_free(off);
            o.cache_policy = XLLM_CACHE_LRU;
            xllm_engine *on = xllm_engine_create(m, &o, &err);
            first_token_time(on, a, prefix + 32);
            hit[r] = first_token_time(on, b, prefix + 32);
            xllm_engine_free(on);
        }
        double h50 = pct(hit, rounds, 0.5), m50 = pct(miss, rounds, 0.5);
        printf("prefix cache, %d-token prompt sharing %d tokens, %d rounds: TTFT without the hit median %.3f s "
               "(%.3f-%.3f), with it %.3f s (%.3f-%.3f): %.1fx\n", prefix + 32, prefix, rounds, m50, miss[0],
               miss[rounds - 1], h50, hit[0], hit[rounds - 1], m50 / h50);
        free(a);
        free(b);
    }
    for (int i = 0; i < R; i++) free(prompts[i]);
    free(prompts);
    xllm_model_free(m);
    return 0;
}
