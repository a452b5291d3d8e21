/*
 * bench_generate.c - prefill and decode throughput of one model, beside the
 * machine's own memory bandwidth measured in the same run.
 *
 * Prefill: logits of a P-token prompt (tokens/s). Decode: N greedy tokens
 * after that prompt, one sequence (tokens/s), and the same as a fraction of
 * the bandwidth bound (weight bytes read per token / measured read bandwidth).
 * Prints figures only; never pass/fail.
 *
 *   bench_generate MODEL_DIR [-p 128] [-n 64] [-t THREADS] [-r 3]
 */
#include "xllm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Read bandwidth: sum a 512 MiB buffer (bigger than any cache), best of 3. */
static double read_bandwidth_gbs(void) {
    size_t n = (size_t)512 << 20 >> 3;
    unsigned long long *buf = malloc(n * sizeof *buf);
    if (!buf) return 0;
    for (size_t i = 0; i < n; i++) buf[i] = i;
    double best = 0;
    volatile unsigned long long sink = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        unsigned long long s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t i = 0; i < n; i += 4) {
            s0 += buf[i];
            s1 += buf[i + 1];
            s2 += buf[i + 2];
            s3 += buf[i + 3];
        }
        sink += s0 + s1 + s2 + s3;
        double gbs = (double)(n * sizeof *buf) / (now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    (void)sink;
    free(buf);
    return best;
}

typedef struct { double first; } timing;

static int first_token_cb(void *user, size_t req, int32_t tok, const char *text, size_t len) {
    (void)req; (void)tok; (void)text; (void)len;
    timing *t = user;
    if (t->first == 0) t->first = now();
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL_DIR [-p PROMPT_TOKENS] [-n NEW_TOKENS] [-t THREADS] [-r REPEATS]\n", argv[0]);
        return 1;
    }
    const char *path = argv[1];
    int P = 128, N = 64, threads = 0, R = 3;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-p")) P = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) N = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) R = atoi(argv[i + 1]);
    }
    xllm_error err;
    xllm_model_options o = xllm_model_options_default();
    o.n_threads = threads;
    o.max_batch_seqs = 1;
    double t0 = now();
    xllm_model *m = xllm_model_load(path, &o, &err);
    if (!m) {
        fprintf(stderr, "error: %s\n", err.message);
        return 1;
    }
    double load_s = now() - t0;
    int V = xllm_model_vocab_size(m), ctx = xllm_model_context_size(m);
    if (P + N > ctx) P = ctx - N;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)P);
    for (int i = 0; i < P; i++) ids[i] = 1 + (i * 7919) % (V - 1);
    float *logits = malloc(sizeof(float) * (size_t)V);

    char st_path[4096];
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", path);
    struct stat sb;
    double weight_bytes = stat(st_path, &sb) == 0 ? (double)sb.st_size : 0;

    double pp_best = 0, tg_best = 0, pp_sum = 0, tg_sum = 0;
    for (int r = 0; r < R; r++) {
        double a = now();
        if (xllm_model_logits(m, ids, (size_t)P, 0, logits, &err)) {
            fprintf(stderr, "error: %s\n", err.message);
            return 1;
        }
        double pp = P / (now() - a);
        xllm_request req;
        memset(&req, 0, sizeof req);
        req.prompt_ids = ids;
        req.n_prompt_ids = (size_t)P;
        req.params = xllm_sampling_params_default();
        req.params.do_sample = 0;
        req.params.max_new_tokens = N;
        req.params.ignore_eos = 1;
        timing tm = {0};
        xllm_result *res;
        if (xllm_generate(m, &req, 1, first_token_cb, &tm, &res, &err)) {
            fprintf(stderr, "error: %s\n", err.message);
            return 1;
        }
        double end = now();
        double tg = (double)(res[0].n_ids - 1) / (end - tm.first);
        xllm_results_free(res, 1);
        pp_sum += pp;
        tg_sum += tg;
        if (pp > pp_best) pp_best = pp;
        if (tg > tg_best) tg_best = tg;
    }
    double bw = read_bandwidth_gbs();
    printf("model            %s\n", path);
    printf("load             %.3f s (weights mmap-ed, %.1f MB)\n", load_s, weight_bytes / 1e6);
    if (threads) printf("threads          %d\n", threads); else printf("threads          all CPUs\n");
    printf("prefill  (pp%d)  %.1f tok/s (mean of %d), best %.1f\n", P, pp_sum / R, R, pp_best);
    printf("decode   (tg%d)   %.2f tok/s (mean of %d), best %.2f\n", N, tg_sum / R, R, tg_best);
    if (weight_bytes > 0 && bw > 0) {
        double bound = bw * 1e9 / weight_bytes;
        printf("read bandwidth   %.1f GB/s (measured now) -> decode bound %.1f tok/s\n", bw, bound);
        printf("decode / bound   %.2f\n", (tg_sum / R) / bound);
    }
    free(ids);
    free(logits);
    xllm_model_free(m);
    return 0;
}
