/*
 * buf.c - the growable byte string (buf.h): checked growth with a sticky
 * error, printf-append without a length cap, and handing the bytes over;
 * and the same growth for typed arrays (array_reserve).
 */
#include "base/buf.h"
#include "base/alloc.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

int buf_reserve(buf_t *b, size_t extra) {
    if (b->err) return -1;
    size_t max = b->max ? b->max : SIZE_MAX - 1;
    if (b->len > max || extra > max - b->len) {
        b->err = XLLM_BUF_OVER;
        return -1;
    }
    size_t need = b->len + extra + 1; /* the NUL; cannot overflow: len + extra <= SIZE_MAX - 1 */
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = mem_realloc(b->p, cap);
    if (!p) {
        b->err = XLLM_BUF_OOM;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

int buf_append(buf_t *b, const void *s, size_t n) {
    if (buf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int buf_puts(buf_t *b, const char *s) { return buf_append(b, s, strlen(s)); }

int buf_putc(buf_t *b, char c) { return buf_append(b, &c, 1); }

int buf_fill(buf_t *b, char c, size_t n) {
    if (buf_reserve(b, n)) return -1;
    memset(b->p + b->len, c, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int buf_vprintf(buf_t *b, const char *fmt, va_list ap) {
    if (b->err) return -1;
    va_list ap2;
    va_copy(ap2, ap);
    size_t room = b->cap > b->len ? b->cap - b->len : 0;
    int n = vsnprintf(room ? b->p + b->len : NULL, room, fmt, ap);
    int rc = 0;
    if (n < 0) {
        rc = -1; /* an encoding error: nothing is appended, err stays clear */
    } else if ((size_t)n >= room) {
        if (buf_reserve(b, (size_t)n)) rc = -1;
        else vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap2);
    } else if (b->max && (size_t)n > b->max - b->len) { /* fitted the memory, not the bound */
        b->err = XLLM_BUF_OVER;
        rc = -1;
    }
    va_end(ap2);
    if (rc) {
        if (b->p) b->p[b->len] = 0; /* undo a partial write */
        return -1;
    }
    b->len += (size_t)n;
    return 0;
}

int buf_printf(buf_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

void buf_clear(buf_t *b) {
    b->len = 0;
    b->err = 0;
}

void buf_truncate(buf_t *b, size_t n) {
    if (n < b->len) b->len = n;
    b->err = 0;
    if (b->p) b->p[b->len] = 0;
}

char *buf_steal(buf_t *b, size_t *len) {
    char *p = NULL;
    if (!b->err) {
        p = b->p ? b->p : mem_strdup("");
        if (p && len) *len = b->len;
        b->p = NULL;
    }
    buf_free(b);
    return p;
}

void buf_free(buf_t *b) {
    xllm_free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->err = 0;
}

int array_reserve_at(void *items, size_t *cap, size_t need, size_t size, size_t first, const char *file,
                          int line) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : first ? first : 1;
    while (c < need) c = c > SIZE_MAX / 2 ? need : c * 2;
    if (size && c > SIZE_MAX / size) return -1;
    void *old;
    memcpy(&old, items, sizeof old); /* items is a T **: its value is read and written as a pointer */
    void *p = mem_realloc_at(old, c * size, file, line);
    if (!p) return -1;
    memcpy(items, &p, sizeof p);
    *cap = c;
    return 0;
}
