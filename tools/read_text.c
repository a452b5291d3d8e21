/*
 * read_text.c - a whole file (or stdin) into one NUL-terminated buffer,
 * grown by doubling with an overflow check (read_text.h).
 */
#include "read_text.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int read_text_file(const char *path, char **out, size_t *len, const char **why, int *errnum) {
    *out = NULL;
    *errnum = 0;
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        *why = "cannot open";
        *errnum = errno;
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    int rc = b ? 0 : -1;
    if (!b) *why = "out of memory";
    while (!rc) {
        if (n + 1 >= cap) { /* room for the NUL; the tools' one growth loop (they link only xllm.h, not base/buf.h) */
            char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(b, cap * 2);
            if (!nb) {
                *why = "out of memory";
                rc = -1;
                break;
            }
            b = nb;
            cap *= 2;
        }
        size_t got = fread(b + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                *why = "cannot read";
                *errnum = errno ? errno : EIO;
                rc = -1;
            }
            break;
        }
    }
    if (f != stdin) fclose(f);
    if (rc) {
        free(b);
        return -1;
    }
    b[n] = 0;
    *out = b;
    if (len) *len = n;
    return 0;
}
