/*
 * cmd_bench.c - `xllm bench`: prompt processing and generation speed, as
 * llama-bench measures them.
 *
 *   pp<P>  logits of one P-token prompt (one xllm_model_logits call), tokens/s
 *   tg<N>  N greedy tokens of one sequence after an 8-token prompt; the clock
 *          runs from the first generated token (the end of the prompt's
 *          prefill) to the last, so it times exactly N decode steps
 *
 * --depth D (llama-bench's -d) runs both after D tokens already in the
 * context: a D-token prefix is prefilled once (untimed) and stays in the
 * engine's prefix cache; pp then times the prefill of P new tokens after it
 * (one request of D + P tokens whose first D are a cache hit, clocked to its
 * first token) and tg times N decode steps after a D + 8-token prompt. Only
 * whole KV blocks are reused, so D % block_size prefix tokens are prefilled
 * again in each pp run (none for the usual depths). Each pp run's P tokens
 * differ, so they never hit the cache themselves.
 *
 * Each is run once to warm up (page faults of the mmap-ed weights, caches),
 * then R times; the figures are the mean and sample standard deviation of
 * the R per-run rates. Token ids are fixed pseudo-random ids past the first
 * three (the usual special tokens), so no tokenizer is needed.
 *
 * Beside them: peak RSS of the process, and the decode bandwidth bound: the
 * bytes of weights one decode step reads (every tensor except an untied
 * embedding table, of which it reads one row; of a mixture of experts'
 * routed experts, the top-k share k / n_experts: one token's step reads its
 * k experts) over the machine's read
 * bandwidth with the same number of threads, and the fraction of that bound
 * tg achieves. A shared host's bandwidth drifts within seconds, so it is
 * measured right before and right after each tg run, and each run is set
 * against the mean of its two probes; the line gives the medians over runs.
 * The probe runs in a child process (`xllm bench --bandwidth-only`), so its
 * 512 MiB buffer never counts in this process's peak RSS; where no child can
 * be started it runs once here, after the runs and the RSS reading.
 *
 * --json prints exactly {"pp_tok_s","pp_sd","tg_tok_s","tg_sd","threads"} on
 * stdout; the other lines then go to stderr.
 */
#include "cli.h"
#include "commands.h"
#include "engine_stat.h"
#include "profile_report.h"
#include "xllm.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
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

extern char **environ;

/* read_bandwidth_gbs(threads) measured by a child process (`xllm bench
 * --bandwidth-only -t threads`, this very binary), so that its buffer is
 * never part of this process's memory; 0 when no child could be run or it
 * printed no figure. Not thread-safe (it reads /proc/self/exe and waits for
 * its child); bench calls it from its one thread. */
static double child_bandwidth_gbs(int threads) {
    char t[16];
    snprintf(t, sizeof t, "%d", threads);
    char *args[] = {"xllm", "bench", "--bandwidth-only", "-t", t, NULL};
    int fd[2];
    if (pipe(fd)) return 0;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fd[0]);
    pid_t pid;
    int bad = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fd[1]);
    double v = 0;
    FILE *out = fdopen(fd[0], "r");
    if (!out) close(fd[0]);
    if (!bad) {
        int got = out && fscanf(out, "%lf", &v) == 1, status = 0;
        pid_t w;
        while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {}
        if (!got || w != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || !(v > 0) || !isfinite(v)) v = 0;
    }
    if (out) fclose(out);
    return v;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* median, min and max of n > 0 values (sorts x) */
static double median_min_max(double *x, int n, double *lo, double *hi) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    *lo = x[0];
    *hi = x[n - 1];
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
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
    double all = 0, embed = 0, experts = 0;
    int has_lm_head = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(root, "tensors")) {
        const cJSON *nm = cJSON_GetObjectItem(t, "name"), *b = cJSON_GetObjectItem(t, "bytes");
        if (!cJSON_IsString(nm) || !cJSON_IsNumber(b) || !strncmp(nm->valuestring, "__blob__/", 9)) continue;
        all += b->valuedouble;
        if (!strcmp(nm->valuestring, "model.embed_tokens.weight")) embed = b->valuedouble;
        if (!strcmp(nm->valuestring, "lm_head.weight")) has_lm_head = 1;
        if (strstr(nm->valuestring, ".experts.")) experts += b->valuedouble; /* routed experts (not a shared one) */
    }
    /* a mixture of experts: one token's decode step reads only its top-k experts' weights */
    const cJSON *cfg = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "metadata"), "config");
    const cJSON *k = cJSON_GetObjectItem(cfg, "num_experts_per_tok"), *e = cJSON_GetObjectItem(cfg, "num_experts");
    if (!cJSON_IsNumber(e)) e = cJSON_GetObjectItem(cfg, "num_local_experts");
    double active = experts;
    if (experts > 0 && cJSON_IsNumber(k) && cJSON_IsNumber(e) && e->valuedouble >= k->valuedouble && k->valuedouble > 0)
        active = experts * k->valuedouble / e->valuedouble;
    cJSON_Delete(root);
    *total = all;
    *per_token = (has_lm_head ? all - embed : all) - experts + active;
    return 1;
}

/* ------------------------------------------------------ engine figures */

/* A number from the model's engine's stats (engine_stat.h); -1 when absent. */
static double engine_stat(xllm_model *m, const char *a, const char *b) {
    return (double)cli_engine_stat(xllm_model_engine(m), a, b);
}

/* ------------------------------------------------------------- timing */

static void mean_sd(const double *x, int n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) q += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

/* One greedy request of n_prompt ids for max_new tokens; *first: seconds
 * from submission to its first token, *decode: from the first to the last
 * (the engine's own clock, taken as each token is produced, so a caller
 * descheduled under load does not bunch them up). < 0 on error. */
static int run_request(xllm_model *m, const int32_t *prompt, size_t n_prompt, int max_new, double *first,
                       double *decode, xllm_error *err) {
    xllm_request req;
    memset(&req, 0, sizeof req);
    req.prompt_ids = prompt;
    req.n_prompt_ids = n_prompt;
    req.params = xllm_sampling_params_default();
    req.params.do_sample = 0;
    req.params.ignore_eos = 1;
    req.params.max_new_tokens = max_new;
    xllm_result *res = NULL;
    if (xllm_generate(m, &req, 1, NULL, NULL, &res, err)) return -1;
    size_t got = res[0].n_ids;
    *first = res[0].first_token_s;
    *decode = res[0].decode_s;
    xllm_results_free(res, 1);
    if (got != (size_t)max_new || (max_new > 1 && !(*decode > 0))) {
        if (err) {
            err->code = XLLM_ERR_INTERNAL;
            snprintf(err->message, sizeof err->message, "generation stopped after %zu of %d tokens", got, max_new);
        }
        return -1;
    }
    return 0;
}

/* tokens/s of n decode steps after the prompt; < 0 on error */
static double run_tg(xllm_model *m, const int32_t *prompt, size_t n_prompt, int n, xllm_error *err) {
    double first, decode;
    if (run_request(m, prompt, n_prompt, n + 1, &first, &decode, err)) return -1; /* the first comes from the prefill */
    return n / decode;
}

/* Seconds from submitting a prompt to its first token (its prefill, after
 * whatever prefix the engine's cache already holds); < 0 on error. */
static double run_prefill(xllm_model *m, const int32_t *prompt, size_t n_prompt, xllm_error *err) {
    double first, decode;
    if (run_request(m, prompt, n_prompt, 1, &first, &decode, err)) return -1;
    return first;
}

/* n pseudo-random ids past the first three (the usual special tokens);
 * different salts give sequences that differ at every position. */
static void fill_ids(int32_t *ids, size_t n, int V, uint64_t salt) {
    for (size_t i = 0; i < n; i++)
        ids[i] = 3 + (int32_t)(((uint64_t)i * 7919u + 13u + salt * 104729u) % (uint64_t)(V - 3));
}

/* What the command line asks for. */
typedef struct bench_args {
    const char *path, *profile_path, *kv_dtype;
    int P, N, threads, R, D, json, probe, bw_only;
} bench_args;

/* A run's model, buffers and measurements. */
typedef struct bench_run {
    xllm_model *m;
    double load_s, total_bytes, read_bytes;
    int V;
    int32_t *ids;
    float *logits;
    double *pp, *tg, *bw_run; /* per measured run: tokens/s, and GB/s around tg run r (0: not measured) */
    int probed;               /* every bw_run came from probes around its run */
} bench_run;

/* The engine's figures, read after the runs. */
typedef struct bench_engine {
    double kv_bytes, kv_per_token, scratch_bytes, kv_token_bytes, peak_mb;
    char kv_name[16];
} bench_engine;

/* Parse: -1 to go on, else the exit code (0 after --help). */
static int bench_parse(int argc, char **argv, bench_args *a) {
    memset(a, 0, sizeof *a);
    a->P = 512, a->N = 128, a->R = 3, a->probe = 1;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--json")) { a->json = 1; continue; }
        if (!strcmp(f, "--no-bandwidth")) { a->probe = 0; continue; } /* its 512 MiB would count in an outside RSS figure */
        if (!strcmp(f, "--bandwidth-only")) { a->bw_only = 1; continue; }
        if (!strcmp(f, "--profile") || !strcmp(f, "--enable-kernel-profiling")) {
            /* the file is optional: the next argument is it unless it is an option */
            if (v && v[0] != '-') {
                a->profile_path = v;
                i++;
            } else a->profile_path = "xllm-profile.json";
            continue;
        }
        if (cli_is_help(f)) {
            cli_print_help(stdout, "bench");
            return 0;
        }
        int *dst = (!strcmp(f, "-p") || !strcmp(f, "--n-prompt")) ? &a->P
                 : (!strcmp(f, "-n") || !strcmp(f, "--n-gen")) ? &a->N
                 : (!strcmp(f, "-t") || !strcmp(f, "--threads")) ? &a->threads
                 : (!strcmp(f, "-r") || !strcmp(f, "--repetitions")) ? &a->R
                 : (!strcmp(f, "-d") || !strcmp(f, "--depth") || !strcmp(f, "--n-depth")) ? &a->D : NULL;
        if (!strcmp(f, "--kv-dtype")) {
            if (!v) return cli_needs_value(f);
            a->kv_dtype = v;
            i++;
            continue;
        }
        if (!dst && strcmp(f, "-m") && strcmp(f, "--model")) return cli_unknown_option("bench", f);
        if (!v) return cli_needs_value(f);
        i++;
        if (!dst) { a->path = v; continue; }
        long lo = (dst == &a->threads || dst == &a->D) ? 0 : 1, hi = dst == &a->R ? 1000 : dst == &a->threads ? 1024 : 1 << 20;
        if (!parse_int(v, lo, hi, dst)) return cli_fail("%s needs an integer from %ld to %ld, got \"%s\"", f, lo, hi, v);
    }
    if (a->threads == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        a->threads = c > 0 ? (int)c : 1;
    }
    return -1;
}

/* The model, loaded with a KV pool (and, past its trained positions, a
 * context) for the longest sequence the runs make. 0 or 1 (reported). */
static int bench_load(const bench_args *a, bench_run *b, cli_progress *prog) {
    xllm_error err;
    int D = a->D, P = a->P, N = a->N;
    /* the longest sequence: D context tokens, then P prompt tokens or an
     * 8-token prompt and N + 1 generated ones */
    int need = D + (P > TG_PROMPT + N + 1 ? P : TG_PROMPT + N + 1) + 16;
    xllm_model_options mo = xllm_model_options_default();
    mo.n_threads = a->threads;
    mo.kv_dtype = a->kv_dtype;
    cli_model_options_from_env(&mo);
    mo.max_batch_seqs = 1;
    /* the KV pool holds one such sequence plus the blocks of the cached
     * prefix that the next pp run's prompt shares with it (2 blocks' slack:
     * a partial block is copied on write) */
    mo.kv_tokens = need + D + 32;
    cli_progress_cb(prog, "loading", 0);
    mo.progress = cli_progress_cb; /* the load's own stages: loading (repacking) and planning */
    mo.progress_user = prog;
    double t0 = now_s();
    if (!(b->m = xllm_model_load(a->path, &mo, &err))) return fail(err.message, NULL);
    b->load_s = now_s() - t0;
    int trained = xllm_model_context_size(b->m);
    if (need > trained) {
        /* past the model's trained positions, as llama-bench allows: a speed
         * measurement only; load again with the context the run needs */
        xllm_model_free(b->m);
        fprintf(stderr, "xllm bench: note: -d %d / -p %d / -n %d need a context of %d tokens, beyond the model's %d: "
                "the figures measure speed only\n", D, P, N, need, trained);
        mo.max_context = need;
        t0 = now_s();
        if (!(b->m = xllm_model_load(a->path, &mo, &err))) return fail(err.message, NULL);
        b->load_s = now_s() - t0;
    }
    cli_progress_cb(prog, "loading", 1);
    b->V = xllm_model_vocab_size(b->m);
    if (b->V < 4) return fail("the model's vocabulary is too small", NULL);
    /* ids: the D-token context, then room for P prompt tokens (pp) or the
     * 8-token tg prompt after it */
    size_t n_ids = (size_t)D + (size_t)(P > TG_PROMPT ? P : TG_PROMPT);
    b->ids = malloc(sizeof *b->ids * n_ids);
    b->logits = malloc(sizeof *b->logits * (size_t)b->V);
    b->pp = malloc(sizeof *b->pp * (size_t)a->R);
    b->tg = malloc(sizeof *b->tg * (size_t)a->R);
    b->bw_run = calloc((size_t)a->R, sizeof *b->bw_run);
    if (!b->ids || !b->logits || !b->pp || !b->tg || !b->bw_run) return fail("out of memory", NULL);
    return 0;
}

/* Execute: the warm-up (and, with a depth, the context prefilled into the
 * prefix cache), then R measured runs of pp and tg. 0 or 1 (reported). */
static int bench_measure(const bench_args *a, bench_run *b, cli_progress *prog) {
    xllm_error err;
    xllm_model *m = b->m;
    int32_t *ids = b->ids;
    int D = a->D, P = a->P, V = b->V, R = a->R;
    fill_ids(ids, (size_t)D, V, 0);
    /* pp run r's prompt: fill_ids(ids + D, P, V, r + 1); tg's: the first 8 of salt 1 */
    cli_progress_cb(prog, "warm-up", 0);
    fill_ids(ids + D, (size_t)P, V, 1);
    int warm_ok = D ? run_prefill(m, ids, (size_t)D, &err) >= 0 && run_prefill(m, ids, (size_t)D + P, &err) >= 0
                    : !xllm_model_logits(m, ids, (size_t)P, 0, b->logits, &err);
    fill_ids(ids + D, TG_PROMPT, V, 1);
    if (!warm_ok || run_tg(m, ids, (size_t)D + TG_PROMPT, a->N < 4 ? a->N : 4, &err) < 0) return fail(err.message, NULL);
    double hits_before = engine_stat(m, "prefix_cache", "hit_tokens");
    if (a->profile_path) { /* the measured runs only, not the warm-up */
        xllm_profile_enable(1);
        xllm_profile_reset();
    }
    for (int r = 0; r < R; r++) {
        cli_progress_cb(prog, "measuring", (double)r / R);
        fill_ids(ids + D, (size_t)P, V, (uint64_t)r + 2);
        double secs;
        if (D) {
            secs = run_prefill(m, ids, (size_t)D + P, &err);
        } else {
            double t = now_s();
            secs = xllm_model_logits(m, ids, (size_t)P, 0, b->logits, &err) ? -1 : now_s() - t;
        }
        if (secs < 0) return fail(err.message, NULL);
        b->pp[r] = P / secs;
        fill_ids(ids + D, TG_PROMPT, V, 1);
        double bw_before = a->probe ? child_bandwidth_gbs(a->threads) : 0;
        if ((b->tg[r] = run_tg(m, ids, (size_t)D + TG_PROMPT, a->N, &err)) < 0) return fail(err.message, NULL);
        double bw_after = bw_before > 0 ? child_bandwidth_gbs(a->threads) : 0;
        if (bw_after > 0) b->bw_run[r] = 0.5 * (bw_before + bw_after);
    }
    cli_progress_cb(prog, "measuring", 1);
    /* the depth's context must have come from the prefix cache in every
     * measured pp and tg run, or the figures time a longer prefill */
    double hit_tokens = engine_stat(m, "prefix_cache", "hit_tokens") - hits_before;
    int block = (int)engine_stat(m, "kv", "block_size");
    double want_hits = block > 0 ? 2.0 * R * (double)(D / block * block) : 0;
    if (D && hit_tokens < want_hits)
        return cli_fail("the %d-token context was not reused from the prefix cache in every run (%.0f of %.0f tokens): "
                        "the figures would time its prefill", D, hit_tokens, want_hits);
    return 0;
}

/* The engine's memory figures and the peak RSS; then, where no probe child
 * ran, the bandwidth once, here, after the RSS reading. */
static void bench_figures(const bench_args *a, bench_run *b, bench_engine *g, cli_progress *prog) {
    xllm_model *m = b->m;
    int block = (int)engine_stat(m, "kv", "block_size");
    g->kv_bytes = engine_stat(m, "memory", "kv_bytes");
    double kv_blocks = engine_stat(m, "kv", "blocks_total");
    g->kv_per_token = g->kv_bytes > 0 && kv_blocks > 0 && block > 0 ? g->kv_bytes / (kv_blocks * block) : 0;
    g->scratch_bytes = engine_stat(m, "memory", "scratch_bytes");
    cli_engine_stat_str(xllm_model_engine(m), "kv_dtype", g->kv_name, sizeof g->kv_name);
    g->kv_token_bytes = engine_stat(m, "kv_bytes_per_token", NULL);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    g->peak_mb = (double)ru.ru_maxrss / 1024.0;
    b->probed = a->probe;
    for (int r = 0; r < a->R; r++) b->probed = b->probed && b->bw_run[r] > 0;
    if (a->probe && !b->probed) {
        cli_progress_cb(prog, "bandwidth", 0);
        double bw = read_bandwidth_gbs(a->threads);
        for (int r = 0; r < a->R; r++) b->bw_run[r] = bw;
        cli_progress_cb(prog, "bandwidth", 1);
    }
}

/* The bandwidth line: per run its bound from the bandwidth around it, and its fraction. */
static void report_bandwidth(FILE *o, const bench_args *a, bench_run *b, double step_bytes, double tg_mean) {
    int R = a->R;
    double *bound = malloc(sizeof *bound * (size_t)R * 2), *frac = bound + R;
    if (!bound) return;
    for (int r = 0; r < R; r++) {
        bound[r] = b->bw_run[r] * 1e9 / step_bytes;
        frac[r] = b->tg[r] / bound[r];
    }
    double bw_lo, bw_hi, b_lo, b_hi, f_lo, f_hi;
    double bw_med = median_min_max(b->bw_run, R, &bw_lo, &bw_hi), b_med = median_min_max(bound, R, &b_lo, &b_hi);
    double f_med = median_min_max(frac, R, &f_lo, &f_hi);
    if (b->probed)
        fprintf(o, "bandwidth  %.1f GB/s read with %d threads (around each tg run; %.1f-%.1f) -> tg bound %.2f "
                "tokens/s; tg achieves %.2f of it (per run %.2f-%.2f)\n",
                bw_med, a->threads, bw_lo, bw_hi, b_med, f_med, f_lo, f_hi);
    else
        fprintf(o, "bandwidth  %.1f GB/s read with %d threads (after the runs) -> tg bound %.2f tokens/s; "
                "tg achieves %.2f of it\n", bw_med, a->threads, b_med, tg_mean / b_med);
    free(bound);
}

/* Report: the table and figures (stderr with --json), then the JSON line. */
static void bench_report(const bench_args *a, bench_run *b, const bench_engine *g) {
    int P = a->P, N = a->N, D = a->D;
    double pp_mean, pp_sd, tg_mean, tg_sd;
    mean_sd(b->pp, a->R, &pp_mean, &pp_sd);
    mean_sd(b->tg, a->R, &tg_mean, &tg_sd);
    FILE *o = a->json ? stderr : stdout;
    fprintf(o, "model      %s (%.1f MB of weights; a decode step reads %.1f MB)\n", a->path, b->total_bytes / 1e6,
            b->read_bytes / 1e6);
    fprintf(o, "load       %.3f s; threads %d; %d runs after one warm-up", b->load_s, a->threads, a->R);
    if (D) fprintf(o, "; after a context of %d tokens (-d)", D);
    fprintf(o, "\n");
    char pp_name[32], tg_name[32];
    snprintf(pp_name, sizeof pp_name, D ? "pp%d @ d%d" : "pp%-4d", P, D);
    snprintf(tg_name, sizeof tg_name, D ? "tg%d @ d%d" : "tg%-4d", N, D);
    int w = (int)(strlen(pp_name) > strlen(tg_name) ? strlen(pp_name) : strlen(tg_name));
    fprintf(o, "| %-*s |      tokens/s |\n|-%.*s-|---------------|\n", w, "test", w, "--------------------------------");
    fprintf(o, "| %-*s | %8.2f ± %.2f |\n", w, pp_name, pp_mean, pp_sd);
    fprintf(o, "| %-*s | %8.2f ± %.2f |\n", w, tg_name, tg_mean, tg_sd);
    fprintf(o, "peak RSS   %.1f MiB (weights mapped %.1f MiB, KV pool %.1f MiB, scratch %.1f MiB)\n", g->peak_mb,
            b->total_bytes / 1048576.0, g->kv_bytes > 0 ? g->kv_bytes / 1048576.0 : 0,
            g->scratch_bytes > 0 ? g->scratch_bytes / 1048576.0 : 0);
    fprintf(o, "KV cache   %s, %.0f bytes per token (K and V, every layer)\n", g->kv_name[0] ? g->kv_name : "?",
            g->kv_token_bytes);
    /* a decode step at depth D also reads the D tokens' K and V */
    double step_bytes = b->read_bytes + g->kv_per_token * (D + TG_PROMPT + N / 2.0);
    if (a->probe && b->bw_run[0] > 0 && step_bytes > 0) report_bandwidth(o, a, b, step_bytes, tg_mean);
    if (a->json)
        printf("{\"pp_tok_s\":%.3f,\"pp_sd\":%.3f,\"tg_tok_s\":%.3f,\"tg_sd\":%.3f,\"threads\":%d,\"kv_dtype\":\"%s\","
               "\"kv_bytes_per_token\":%.0f}\n",
               pp_mean, pp_sd, tg_mean, tg_sd, a->threads, g->kv_name, g->kv_token_bytes);
}

int cmd_bench(int argc, char **argv) {
    bench_args a;
    int rc = bench_parse(argc, argv, &a);
    if (rc >= 0) return rc;
    if (a.bw_only) {
        double gbs = read_bandwidth_gbs(a.threads);
        if (!(gbs > 0)) return fail("could not measure the read bandwidth (out of memory?)", NULL);
        printf("%.3f\n", gbs);
        return 0;
    }
    if (!a.path) return cli_fail("bench needs -m MODEL (see 'xllm bench --help')");
    if (cli_check_model(a.path)) return 1;
    bench_run b;
    memset(&b, 0, sizeof b);
    xllm_error err;
    if (!weight_bytes(a.path, &b.total_bytes, &b.read_bytes, &err)) return fail(err.message, NULL);
    cli_progress prog;
    cli_progress_init(&prog, "bench");
    rc = bench_load(&a, &b, &prog) || bench_measure(&a, &b, &prog);
    if (!rc) {
        bench_engine g;
        memset(&g, 0, sizeof g);
        bench_figures(&a, &b, &g, &prog);
        cli_progress_end(&prog);
        bench_report(&a, &b, &g);
    }
    free(b.ids);
    free(b.logits);
    free(b.pp);
    free(b.tg);
    free(b.bw_run);
    xllm_model_free(b.m);
    if (!rc && a.profile_path) rc = profile_write(a.profile_path);
    return rc;
}
