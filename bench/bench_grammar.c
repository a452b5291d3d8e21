/*
 * bench_grammar.c - the cost of constrained decoding: the allowed-token mask
 * of one sequence at a 32000-token vocabulary over the JSON Schema corpus,
 * and the compile time of the corpus' largest schema.
 *
 * usage: bench_grammar [--tokenizer DIR] [--schemas DIR] [--vocab N] [--rounds R] [--steps S] [--check]
 *
 * Default tokenizer: Llama 2's (TinyLlama's, 32000 ids) from
 * ../shared/data/tokenizers/llama2 when present, else Qwen3's from
 * tests/data/tokenizers/qwen3 cut to its first --vocab ids (32000). Each
 * round walks every schema from a fresh matcher (cold caches), choosing a
 * random allowed token per step (seeded, the same walk each round) for up to
 * --steps tokens or until the output is complete, and times each step's mask
 * plus applying it to a logits row (what the sampler pays per token). Prints
 * per round mean / p50 / p99 / max in microseconds (CPU time of this thread),
 * then the median and min-max over rounds; and compile times (median of 21).
 * --check (untimed): every mask is compared with the brute-force one (each
 * token's bytes advanced from the state on a second matcher); exit 1 on a difference.
 */
#include "engine/grammar.h"
#include "tokenizer/tokenizer.h"
#include "base/alloc.h"
#include "base/file.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + 1e-3 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static uint64_t g_rng;
static uint64_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

int main(int argc, char **argv) {
    const char *tok_dir = NULL, *schemas = XLLM_BENCH_SOURCE_DIR "/tests/data/schemas";
    int vocab_n = 32000, rounds = 5, steps = 200, check = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_dir = argv[++i];
        else if (!strcmp(argv[i], "--schemas") && i + 1 < argc) schemas = argv[++i];
        else if (!strcmp(argv[i], "--vocab") && i + 1 < argc) vocab_n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--check")) check = 1;
        else {
            fprintf(stderr, "usage: bench_grammar [--tokenizer DIR] [--schemas DIR] [--vocab N] [--rounds R] [--steps S] [--check]\n");
            return 2;
        }
    }
    if (rounds < 1) rounds = 1;
    if (!tok_dir) {
        FILE *f = fopen(XLLM_BENCH_SOURCE_DIR "/../shared/data/tokenizers/llama2/tokenizer.json", "rb");
        tok_dir = f ? XLLM_BENCH_SOURCE_DIR "/../shared/data/tokenizers/llama2" : XLLM_BENCH_SOURCE_DIR "/tests/data/tokenizers/qwen3";
        if (f) fclose(f);
    }
    xllm_error err = {0};
    tokenizer *t = tokenizer_load(tok_dir, &err);
    if (!t) {
        fprintf(stderr, "bench_grammar: %s\n", err.message);
        return 1;
    }
    char *bytes;
    int64_t *off;
    int32_t n;
    if (tokenizer_token_bytes(t, &bytes, &off, &n, &err)) return 1;
    if (n > vocab_n) n = vocab_n;
    const char **tb = mem_malloc_array((size_t)n, sizeof(char *));
    uint32_t *lens = mem_malloc_array((size_t)n, sizeof(uint32_t));
    for (int32_t i = 0; i < n; i++) {
        lens[i] = (uint32_t)(off[i + 1] - off[i]);
        tb[i] = lens[i] ? bytes + off[i] : NULL;
    }
    gram_vocab *v;
    double t0 = cpu_us();
    if (gram_vocab_from_bytes(tb, lens, n, &v, &err)) return 1;
    double trie_us = cpu_us() - t0;
    /* the corpus */
    char *names[1024];
    int n_names = 0;
    DIR *d = opendir(schemas);
    if (!d) {
        fprintf(stderr, "bench_grammar: cannot open %s\n", schemas);
        return 1;
    }
    for (struct dirent *e; (e = readdir(d)) && n_names < 1024;) {
        size_t l = strlen(e->d_name);
        if (l > 5 && !strcmp(e->d_name + l - 5, ".json")) names[n_names++] = mem_strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n_names, sizeof names[0], cmp_str);
    char **texts = mem_calloc((size_t)n_names, sizeof(char *));
    size_t largest = 0, largest_len = 0;
    for (int i = 0; i < n_names; i++) {
        char path[1024];
        size_t len;
        snprintf(path, sizeof path, "%s/%s", schemas, names[i]);
        if (file_read_all(path, &texts[i], &len, &err)) return 1;
        if (len > largest_len) largest_len = len, largest = (size_t)i;
    }
    printf("bench_grammar: tokenizer %s, %d ids (trie built in %.1f ms), %d schemas, %d rounds, up to %d steps\n",
           tok_dir, (int)n, trie_us / 1e3, n_names, rounds, steps);
    float *logits = mem_malloc_array((size_t)n, sizeof(float));
    size_t cap = (size_t)n_names * (size_t)steps;
    double *lat = mem_malloc_array(cap, sizeof(double));
    double *r_mean = mem_malloc_array((size_t)rounds, sizeof(double)), *r_p99 = mem_malloc_array((size_t)rounds, sizeof(double));
    double *r_max = mem_malloc_array((size_t)rounds, sizeof(double)), *r_p50 = mem_malloc_array((size_t)rounds, sizeof(double));
    int32_t *allowed = mem_malloc_array((size_t)n, sizeof(int32_t));
    size_t n_lat = 0;
    for (int r = 0; r < rounds; r++) {
        n_lat = 0;
        g_rng = 0x9e3779b97f4a7c15ull;
        for (int s = 0; s < n_names; s++) {
            gram *g;
            if (gram_compile(XLLM_GRAMMAR_JSON_SCHEMA, texts[s], NULL, NULL, &g, &err)) {
                fprintf(stderr, "%s: %s\n", names[s], err.message);
                return 1;
            }
            gram_matcher *m = gram_matcher_new(g, v), *ref = check ? gram_matcher_new(g, v) : NULL;
            int32_t st = gram_start(m), ref_st = ref ? gram_start(ref) : -1;
            for (int k = 0; k < steps && st >= 0; k++) {
                for (int32_t i = 0; i < n; i++) logits[i] = (float)(i & 7);
                double a = cpu_us();
                const uint32_t *mask = gram_mask(m, st);
                for (int32_t w = 0; w < (n + 31) / 32; w++) { /* as the sampler applies it */
                    uint32_t bits = mask[w];
                    if (bits == 0xffffffffu) continue;
                    if (!bits && (w + 1) * 32 <= n) {
                        for (int32_t b = 0; b < 32; b++) logits[w * 32 + b] = -INFINITY;
                        continue;
                    }
                    for (int32_t b = 0; b < 32 && w * 32 + b < n; b++)
                        if (!(bits >> b & 1u)) logits[w * 32 + b] = -INFINITY;
                }
                lat[n_lat++] = cpu_us() - a;
                for (int32_t i = 0; ref && i < n; i++) { /* the brute-force mask */
                    size_t len;
                    const char *tb2 = gram_vocab_token(v, i, &len);
                    int ok = tb2 && gram_advance(ref, ref_st, tb2, len) >= 0;
                    if (ok != (logits[i] > -INFINITY)) {
                        fprintf(stderr, "%s step %d: token %d (%.*s) is %s by the mask but %s\n", names[s], k, (int)i,
                                (int)len, tb2 ? tb2 : "", ok ? "refused" : "allowed", ok ? "valid" : "invalid");
                        return 1;
                    }
                }
                int32_t na = 0;
                for (int32_t i = 0; i < n; i++)
                    if (logits[i] > -INFINITY) allowed[na++] = i;
                if (!na || (gram_accepting(m, st) && rnd() % 4 == 0)) break;
                size_t len;
                const char *b = gram_vocab_token(v, allowed[rnd() % (uint64_t)na], &len);
                st = gram_advance(m, st, b, len);
                if (ref) ref_st = gram_advance(ref, ref_st, b, len);
            }
            gram_matcher_free(m);
            gram_matcher_free(ref);
            gram_free(g);
        }
        double sum = 0;
        for (size_t i = 0; i < n_lat; i++) sum += lat[i];
        qsort(lat, n_lat, sizeof(double), cmp_double);
        r_mean[r] = sum / (double)n_lat;
        r_p50[r] = lat[n_lat / 2];
        r_p99[r] = lat[(size_t)((double)(n_lat - 1) * 0.99)];
        r_max[r] = lat[n_lat - 1];
        printf("round %d: %zu masks, mean %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us\n", r + 1, n_lat, r_mean[r],
               r_p50[r], r_p99[r], r_max[r]);
    }
    double *arrs[4] = {r_mean, r_p50, r_p99, r_max};
    const char *labels[4] = {"mean", "p50", "p99", "max"};
    printf("mask at %d ids over %zu steps per round, median (min-max) of %d rounds:", (int)n, n_lat, rounds);
    for (int k = 0; k < 4; k++) {
        qsort(arrs[k], (size_t)rounds, sizeof(double), cmp_double);
        printf(" %s %.1f us (%.1f-%.1f)%s", labels[k], arrs[k][rounds / 2], arrs[k][0], arrs[k][rounds - 1], k < 3 ? "," : "\n");
    }
    /* compile times */
    double ct[21];
    for (int k = 0; k < 21; k++) {
        gram *g;
        double a = cpu_us();
        if (gram_compile(XLLM_GRAMMAR_JSON_SCHEMA, texts[largest], NULL, NULL, &g, &err)) return 1;
        ct[k] = cpu_us() - a;
        gram_free(g);
    }
    qsort(ct, 21, sizeof(double), cmp_double);
    double all = cpu_us();
    for (int s = 0; s < n_names; s++) {
        gram *g;
        if (!gram_compile(XLLM_GRAMMAR_JSON_SCHEMA, texts[s], NULL, NULL, &g, &err)) gram_free(g);
    }
    all = cpu_us() - all;
    printf("compile: largest schema %s (%zu bytes) %.3f ms (median of 21, min %.3f, max %.3f); whole corpus %.1f ms\n",
           names[largest], largest_len, ct[10] / 1e3, ct[0] / 1e3, ct[20] / 1e3, all / 1e3);
    return 0;
}
