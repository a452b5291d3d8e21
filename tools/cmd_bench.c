/*
 * cmd_bench.c - `xllm bench`: prompt processing and generation speed, as
 * llama-bench measures them.
 *
 *   pp<P>  logits of one P-token prompt (one xllm_model_logits call), tokens/s
 *   tg<N>  N greedy tokens of one sequence after an 8-token prompt; the clock
 *          runs from the first generated token (the end of the prompt's
 *          prefill) to the last, so it times exactly N decode steps
 *
 * Each is run once to warm up (page faults of the mmap-ed weights, caches),
 * then R times; the figures are the mean and sample standard deviation of
 * the R per-run rates. Token ids are fixed pseudo-random ids past the first
 * three (the usual special tokens), so no tokenizer is needed.
 *
 * Beside them: peak RSS of the process (before the bandwidth probe below),
 * and the decode bandwidth bound: the bytes of weights one decode step reads
 * (every tensor except an untied embedding table, of which it reads one row)
 * over the machine's read bandwidth measured now with the same number of
 * threads, and the fraction of that bound tg achieves.
 *
 * --json prints exactly {"pp_tok_s","pp_sd","tg_tok_s","tg_sd","threads"} on
 * stdout; the other lines then go to stderr.
 */
#include "cli.h"
#include "commands.h"
#include "profile_report.h"
#include "xllm.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define TG_PROMPT 8

static int fail(const char *what, const char *detail) { return cli_fail("%s%s", what, detail ? detail : ""); }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_int(const char *s, long lo, long hi, int *out) {
    if (!s) return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

/* ------------------------------------------------------ read bandwidth */

typedef struct bw_job {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} bw_job;

static void *bw_sum(void *arg) {
    bw_job *j = arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 3 < j->n; i += 4) {
        s0 += j->p[i];
        s1 += j->p[i + 1];
        s2 += j->p[i + 2];
        s3 += j->p[i + 3];
    }
    j->sum = s0 + s1 + s2 + s3;
    return NULL;
}

/* GB/s of reading a 512 MiB buffer (far beyond any cache) with `threads`
 * threads, each its own slice; best of 3. 0 when it cannot be measured. */
static double read_bandwidth_gbs(int threads) {
    size_t n = ((size_t)512 << 20) / sizeof(uint64_t);
    uint64_t *buf = malloc(n * sizeof *buf);
    if (!buf) return 0;
    for (size_t i = 0; i < n; i++) buf[i] = i;
    if (threads < 1) threads = 1;
    if (threads > 256) threads = 256;
    bw_job jobs[256];
    pthread_t tid[256];
    double best = 0;
    volatile uint64_t sink = 0;
    for (int rep = 0; rep < 3; rep++) {
        size_t per = n / (size_t)threads;
        double t0 = now_s();
        int started = 0;
        for (int t = 0; t < threads; t++) {
            jobs[t].p = buf + (size_t)t * per;
            jobs[t].n = t == threads - 1 ? n - (size_t)t * per : per;
            if (t == 0) continue;
            if (pthread_create(&tid[t], NULL, bw_sum, &jobs[t]) != 0) break;
            started = t;
        }
        bw_sum(&jobs[0]);
        for (int t = 1; t <= started; t++) pthread_join(tid[t], NULL);
        double dt = now_s() - t0;
        size_t bytes = 0;
        for (int t = 0; t <= started; t++) {
            sink += jobs[t].sum;
            bytes += jobs[t].n * sizeof *buf;
        }
        double gbs = (double)bytes / dt / 1e9;
        if (gbs > best) best = gbs;
    }
    (void)sink;
    free(buf);
    return best;
}

/* ---------------------------------------------------------- weight bytes */

/* All weight bytes, and those one decode step reads: everything but an
 * untied embedding table (a tied one is read whole as the lm_head). */
static int weight_bytes(const char *path, double *total, double *per_token, xllm_error *err) {
    char *text;
    if (xllm_model_info(path, &text, err)) return 0;
    cJSON *root = cJSON_Parse(text);
    xllm_free(text);
    if (!root) return 0;
    double all = 0, embed = 0;
    int has_lm_head = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(root, "tensors")) {
        const cJSON *nm = cJSON_GetObjectItem(t, "name"), *b = cJSON_GetObjectItem(t, "bytes");
        if (!cJSON_IsString(nm) || !cJSON_IsNumber(b) || !strncmp(nm->valuestring, "__blob__/", 9)) continue;
        all += b->valuedouble;
        if (!strcmp(nm->valuestring, "model.embed_tokens.weight")) embed = b->valuedouble;
        if (!strcmp(nm->valuestring, "lm_head.weight")) has_lm_head = 1;
    }
    cJSON_Delete(root);
    *total = all;
    *per_token = has_lm_head ? all - embed : all;
    return 1;
}

/* ------------------------------------------------------------- timing */

typedef struct tg_clock {
    double first, last;
    size_t count;
} tg_clock;

static int on_token(void *user, size_t req, int32_t tok, const char *text, size_t len) {
    (void)req; (void)tok; (void)text; (void)len;
    tg_clock *c = user;
    double t = now_s();
    if (c->count++ == 0) c->first = t;
    c->last = t;
    return 0;
}

static void mean_sd(const double *x, int n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) q += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

/* tokens/s of N decode steps; < 0 on error */
static double run_tg(xllm_model *m, const int32_t *prompt, int n, xllm_error *err) {
    xllm_request req;
    memset(&req, 0, sizeof req);
    req.prompt_ids = prompt;
    req.n_prompt_ids = TG_PROMPT;
    req.params = xllm_sampling_params_default();
    req.params.do_sample = 0;
    req.params.ignore_eos = 1;
    req.params.max_new_tokens = n + 1; /* the first comes from the prefill */
    tg_clock c = {0, 0, 0};
    xllm_result *res = NULL;
    if (xllm_generate(m, &req, 1, on_token, &c, &res, err)) return -1;
    size_t got = res[0].n_ids;
    xllm_results_free(res, 1);
    if (got != (size_t)n + 1 || c.count != got || !(c.last > c.first)) {
        if (err) {
            err->code = XLLM_ERR_INTERNAL;
            snprintf(err->message, sizeof err->message, "generation stopped after %zu of %d tokens", got, n + 1);
        }
        return -1;
    }
    return n / (c.last - c.first);
}

int cmd_bench(int argc, char **argv) {
    const char *path = NULL, *profile_path = NULL;
    int P = 512, N = 128, threads = 0, R = 3, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--json")) { json = 1; continue; }
        if (!strcmp(f, "--profile") || !strcmp(f, "--enable-kernel-profiling")) {
            /* the file is optional: the next argument is it unless it is an option */
            if (v && v[0] != '-') {
                profile_path = v;
                i++;
            } else profile_path = "xllm-profile.json";
            continue;
        }
        if (cli_is_help(f)) {
            cli_print_help(stdout, "bench");
            return 0;
        }
        int *dst = (!strcmp(f, "-p") || !strcmp(f, "--n-prompt")) ? &P
                 : (!strcmp(f, "-n") || !strcmp(f, "--n-gen")) ? &N
                 : (!strcmp(f, "-t") || !strcmp(f, "--threads")) ? &threads
                 : (!strcmp(f, "-r") || !strcmp(f, "--repetitions")) ? &R : NULL;
        if (!dst && strcmp(f, "-m") && strcmp(f, "--model")) return cli_unknown_option("bench", f);
        if (!v) return cli_needs_value(f);
        i++;
        if (!dst) { path = v; continue; }
        long lo = dst == &threads ? 0 : 1, hi = dst == &R ? 1000 : dst == &threads ? 1024 : 1 << 20;
        if (!parse_int(v, lo, hi, dst)) return cli_fail("%s needs an integer from %ld to %ld, got \"%s\"", f, lo, hi, v);
    }
    if (!path) return cli_fail("bench needs -m MODEL (see 'xllm bench --help')");
    if (cli_check_model(path)) return 1;
    if (threads == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        threads = c > 0 ? (int)c : 1;
    }
    xllm_error err;
    double total_bytes = 0, read_bytes = 0;
    if (!weight_bytes(path, &total_bytes, &read_bytes, &err)) return fail(err.message, NULL);

    int need = (P > TG_PROMPT + N + 1 ? P : TG_PROMPT + N + 1) + 16;
    xllm_model_options mo = xllm_model_options_default();
    mo.n_threads = threads;
    mo.max_batch_seqs = 1;
    mo.kv_tokens = need; /* the KV pool holds one sequence of this length; the context stays the model's */
    cli_progress prog;
    cli_progress_init(&prog, "bench");
    cli_progress_cb(&prog, "loading", 0);
    mo.progress = cli_progress_cb; /* the load's own stages: loading (repacking) and planning */
    mo.progress_user = &prog;
    double t0 = now_s();
    xllm_model *m = xllm_model_load(path, &mo, &err);
    if (!m) return fail(err.message, NULL);
    double load_s = now_s() - t0;
    cli_progress_cb(&prog, "loading", 1);
    int V = xllm_model_vocab_size(m);
    int ctx = xllm_model_context_size(m);
    if (need > ctx) {
        xllm_model_free(m);
        return cli_fail("-p %d / -n %d need a context of %d tokens (the larger of -p and -n + %d, plus 16); the model "
                        "has %d: give a smaller -p or -n", P, N, need, TG_PROMPT + 1, ctx);
    }
    if (V < 4) {
        xllm_model_free(m);
        return fail("the model's vocabulary is too small", NULL);
    }
    int32_t *ids = malloc(sizeof *ids * (size_t)P);
    float *logits = malloc(sizeof *logits * (size_t)V);
    double *pp = malloc(sizeof *pp * (size_t)R), *tg = malloc(sizeof *tg * (size_t)R);
    int rc = 0;
    if (!ids || !logits || !pp || !tg) {
        rc = fail("out of memory", NULL);
        goto out;
    }
    for (int i = 0; i < P; i++) ids[i] = 3 + (int32_t)(((uint64_t)i * 7919u + 13u) % (uint64_t)(V - 3));
    int32_t tg_prompt[TG_PROMPT];
    for (int i = 0; i < TG_PROMPT; i++) tg_prompt[i] = ids[i % P];

    /* warm-up, then R measured runs of each */
    cli_progress_cb(&prog, "warm-up", 0);
    if (xllm_model_logits(m, ids, (size_t)P, 0, logits, &err) || run_tg(m, tg_prompt, N < 4 ? N : 4, &err) < 0) {
        rc = fail(err.message, NULL);
        goto out;
    }
    if (profile_path) { /* the measured runs only, not the warm-up */
        xllm_profile_enable(1);
        xllm_profile_reset();
    }
    for (int r = 0; r < R; r++) {
        cli_progress_cb(&prog, "measuring", (double)r / R);
        double a = now_s();
        if (xllm_model_logits(m, ids, (size_t)P, 0, logits, &err)) {
            rc = fail(err.message, NULL);
            goto out;
        }
        pp[r] = P / (now_s() - a);
        if ((tg[r] = run_tg(m, tg_prompt, N, &err)) < 0) {
            rc = fail(err.message, NULL);
            goto out;
        }
    }
    cli_progress_cb(&prog, "measuring", 1);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double peak_mb = (double)ru.ru_maxrss / 1024.0;
    cli_progress_cb(&prog, "bandwidth", 0);
    double bw = read_bandwidth_gbs(threads);
    cli_progress_cb(&prog, "bandwidth", 1);
    cli_progress_end(&prog);
    double pp_mean, pp_sd, tg_mean, tg_sd;
    mean_sd(pp, R, &pp_mean, &pp_sd);
    mean_sd(tg, R, &tg_mean, &tg_sd);

    FILE *o = json ? stderr : stdout;
    fprintf(o, "model      %s (%.1f MB of weights; a decode step reads %.1f MB)\n", path, total_bytes / 1e6, read_bytes / 1e6);
    fprintf(o, "load       %.3f s; threads %d; %d runs after one warm-up\n", load_s, threads, R);
    fprintf(o, "| test   |      tokens/s |\n|--------|---------------|\n");
    fprintf(o, "| pp%-4d | %8.2f ± %.2f |\n", P, pp_mean, pp_sd);
    fprintf(o, "| tg%-4d | %8.2f ± %.2f |\n", N, tg_mean, tg_sd);
    fprintf(o, "peak RSS   %.1f MiB\n", peak_mb);
    if (bw > 0 && read_bytes > 0) {
        double bound = bw * 1e9 / read_bytes;
        fprintf(o, "bandwidth  %.1f GB/s read with %d threads (measured now) -> tg bound %.2f tokens/s; tg achieves %.2f of it\n",
                bw, threads, bound, tg_mean / bound);
    }
    if (json)
        printf("{\"pp_tok_s\":%.3f,\"pp_sd\":%.3f,\"tg_tok_s\":%.3f,\"tg_sd\":%.3f,\"threads\":%d}\n", pp_mean, pp_sd, tg_mean,
               tg_sd, threads);
out:
    free(ids);
    free(logits);
    free(pp);
    free(tg);
    xllm_model_free(m);
    if (!rc && profile_path) rc = profile_write(profile_path);
    return rc;
}
