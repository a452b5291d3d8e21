/*
 * buf.h - the one growable byte string of libxllm.
 *
 * Every module that builds text or bytes of unknown length (rendered
 * templates, tokenizer output, tokenizer.json written from a GGUF file, the
 * synthetic models' files) appends to an xllm_buf instead of carrying its own
 * capacity-doubling loop. The idea is SQLite's StrAccum: growth is checked
 * (no size_t overflow, an optional upper bound `max`), and a failure is
 * sticky: once `err` is set, every later append does nothing and returns -1,
 * so a writer may append many pieces and look at `err` once at the end.
 *
 * After every append p[len] is a NUL, so p can be read as a C string (the
 * bytes may hold NULs too); after xllm_buf_clear or a bare reserve the byte
 * at p[len] is whatever was there. An all-zero xllm_buf (XLLM_BUF_INIT) is
 * empty and valid. Memory is counted by the allocator (base/alloc.h).
 *
 * Not thread-safe per buffer (one owner at a time); distinct buffers are
 * independent.
 */
#ifndef XLLM_BASE_BUF_H
#define XLLM_BASE_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "base/error.h" /* XLLM_PRINTF */

enum { XLLM_BUF_OOM = 1, XLLM_BUF_OVER = 2 };

typedef struct xllm_buf {
    char *p;    /* the bytes; NULL until something is reserved */
    size_t len; /* bytes held, the NUL not counted */
    size_t cap; /* bytes allocated */
    size_t max; /* the most len may reach; 0: no bound but size_t's */
    int err;    /* 0, or XLLM_BUF_OOM / XLLM_BUF_OVER (sticky) */
} xllm_buf;

#define XLLM_BUF_INIT {0}

/* Room for `extra` more bytes and the NUL: 0, or -1 with err set (out of
 * memory, or len + extra past max / SIZE_MAX). Capacity at least doubles. */
int xllm_buf_reserve(xllm_buf *b, size_t extra);
/* Append n bytes of s (s may be NULL when n is 0). 0 or -1 (err set). */
int xllm_buf_append(xllm_buf *b, const void *s, size_t n);
int xllm_buf_puts(xllm_buf *b, const char *s);
int xllm_buf_putc(xllm_buf *b, char c);
/* n copies of c (padding: one growth and a memset). */
int xllm_buf_fill(xllm_buf *b, char c, size_t n);
/* printf-append, any length (formats twice when the first try is short). */
int xllm_buf_printf(xllm_buf *b, const char *fmt, ...) XLLM_PRINTF(2, 3);
int xllm_buf_vprintf(xllm_buf *b, const char *fmt, va_list ap);
/* Forget the contents but keep the memory (and clear err): how a reused
 * scratch buffer starts over. Writes nothing into p. */
void xllm_buf_clear(xllm_buf *b);
/* Keep the first n bytes (n <= len; a larger n keeps all) and clear err:
 * how a writer undoes a failed or unwanted tail back to a mark. */
void xllm_buf_truncate(xllm_buf *b, size_t n);
/* Hand the bytes over: a NUL-terminated string (an empty one for an empty
 * buffer) to free with xllm_free, its length in *len when len is not NULL.
 * NULL when err is set or the empty string cannot be allocated. The buffer
 * is empty (and its memory released) afterwards, in every case. */
char *xllm_buf_steal(xllm_buf *b, size_t *len);
/* Release the memory; the buffer is empty again (max is kept). */
void xllm_buf_free(xllm_buf *b);

/* ------------------------------------------------ arrays of any element
 *
 * The same growth for typed arrays: make room for `need` elements of `size`
 * bytes in the array whose address is `items` (a T **) and whose capacity,
 * in elements, is *cap. The capacity doubles, starting from `first` when it
 * is 0, until need fits. 0, or -1 (overflow or out of memory; the array and
 * *cap are unchanged). The allocation is counted at the caller's line. */
int xllm_array_reserve_at(void *items, size_t *cap, size_t need, size_t size, size_t first, const char *file,
                          int line);
#define xllm_array_reserve(items, cap, need, size, first) \
    xllm_array_reserve_at((items), (cap), (need), (size), (first), __FILE__, __LINE__)

#endif
