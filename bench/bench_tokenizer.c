/*
 * bench_tokenizer.c - tokenizer load time and encode throughput.
 *
 * usage: bench_tokenizer TOKENIZER_DIR TEXT_FILE [--loads N] [--passes N] [--chunk BYTES]
 *
 * Loads the tokenizer N times (the best is reported), then encodes the text
 * cut into chunks of about --chunk bytes at line ends (one warm-up pass,
 * then --passes timed passes, the best reported), without special tokens.
 * Prints one JSON line; bench_tokenizer.sh puts it beside HF `tokenizers`.
 */
#include "xllm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) p[n] = 0;
    *len = (size_t)n;
    return p;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER_DIR TEXT_FILE [--loads N] [--passes N] [--chunk BYTES]\n", argv[0]);
        return 2;
    }
    int loads = 5, passes = 3;
    size_t chunk = 16384;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--loads")) loads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--passes")) passes = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--chunk")) chunk = (size_t)atol(argv[i + 1]);
    }
    size_t len;
    char *text = read_all(argv[2], &len);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 1;
    }
    xllm_error err;
    xllm_tokenizer *tok = NULL;
    double best_load = 1e30;
    for (int i = 0; i < loads; i++) {
        double t0 = now();
        xllm_tokenizer *t = xllm_tokenizer_load(argv[1], &err);
        double dt = now() - t0;
        if (!t) {
            fprintf(stderr, "load failed: %s\n", err.message);
            return 1;
        }
        if (dt < best_load) best_load = dt;
        if (tok) xllm_tokenizer_free(tok);
        tok = t;
    }
    /* chunk boundaries at line ends */
    size_t n_chunks = 0, cap = 64;
    size_t *cuts = malloc(cap * sizeof *cuts);
    for (size_t at = 0; at < len;) {
        size_t end = at + chunk < len ? at + chunk : len;
        while (end < len && text[end - 1] != '\n') end++;
        if (n_chunks + 1 >= cap) cuts = realloc(cuts, (cap *= 2) * sizeof *cuts);
        cuts[n_chunks++] = end;
        at = end;
    }
    double best = 1e30;
    size_t tokens = 0;
    for (int pass = 0; pass <= passes; pass++) {
        double t0 = now();
        size_t count = 0, at = 0;
        for (size_t c = 0; c < n_chunks; c++) {
            int32_t *ids;
            size_t n;
            if (xllm_tokenize(tok, text + at, cuts[c] - at, 0, &ids, &n, &err)) {
                fprintf(stderr, "encode failed: %s\n", err.message);
                return 1;
            }
            count += n;
            xllm_free(ids);
            at = cuts[c];
        }
        double dt = now() - t0;
        if (pass > 0 && dt < best) best = dt; /* pass 0 warms up */
        tokens = count;
    }
    printf("{\"impl\":\"xllm\",\"load_s\":%.4f,\"bytes\":%zu,\"chunks\":%zu,\"tokens\":%zu,\"encode_s\":%.4f,"
           "\"mb_per_s\":%.2f}\n",
           best_load, len, n_chunks, tokens, best, (double)len / 1e6 / best);
    xllm_tokenizer_free(tok);
    free(cuts);
    free(text);
    return 0;
}
