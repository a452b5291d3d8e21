/*
 * fuzz_util.h - shared helpers of the libFuzzer harnesses (fuzz/fuzz_*.c).
 *
 * The loaders take paths, so an input is written to a file in a private
 * directory under /dev/shm (or $TMPDIR) made once per process; inputs made of
 * two documents (config + weights, template + messages, tokenizer + text) are
 * split at the first FUZZ_SEP, so seeds stay readable and the dictionary can
 * carry the separator.
 */
#ifndef XLLM_FUZZ_UTIL_H
#define XLLM_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_SEP "\n=====\n"

/* Split data at the first FUZZ_SEP: [a, a + *na) and [b, b + *nb) (b empty when absent). */
static inline void fuzz_split(const uint8_t *data, size_t n, const uint8_t **a, size_t *na, const uint8_t **b,
                              size_t *nb) {
    size_t sl = strlen(FUZZ_SEP);
    *a = data, *na = n, *b = data + n, *nb = 0;
    for (size_t i = 0; i + sl <= n; i++)
        if (!memcmp(data + i, FUZZ_SEP, sl)) {
            *na = i, *b = data + i + sl, *nb = n - i - sl;
            return;
        }
}

/* A NUL-terminated malloc-ed copy (the harness frees it). */
static inline char *fuzz_cstr(const uint8_t *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}

/* The process's scratch directory (created on first use). */
static inline const char *fuzz_dir(void) {
    static char dir[256];
    if (!dir[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        snprintf(dir, sizeof dir, "%s/xllm-fuzz-XXXXXX", base);
        if (!mkdtemp(dir)) abort();
    }
    return dir;
}

/* Write [p, p + n) to fuzz_dir()/name; returns the path (static buffer per call site is the caller's). */
static inline void fuzz_write(const char *name, const uint8_t *p, size_t n, char *path, size_t path_size) {
    snprintf(path, path_size, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

static inline void fuzz_remove(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    unlink(path);
}

#endif
