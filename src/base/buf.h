/*
 * buf.h - the one growable byte string of libxllm.
 *
 * Every module that builds text or bytes of unknown length (rendered
 * templates, tokenizer output, tokenizer.json written from a GGUF file, the
 * synthetic models' files) appends to an buf_t instead of carrying its own
 * capacity-doubling loop. The idea is SQLite's StrAccum: growth is checked
 * (no size_t overflow, an optional upper bound `max`), and a failure is
 * sticky: once `err` is set, every later append does nothing and returns -1,
 * so a writer may append many pieces and look at `err` once at the end.
 *
 * After every append p[len] is a NUL, so p can be read as a C string (the
 * bytes may hold NULs too); after buf_clear or a bare reserve the byte
 * at p[len] is whatever was there. An all-zero buf_t (BUF_INIT) is
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

typedef struct buf_t {
    char *p;    /* the bytes; NULL until something is reserved */
    size_t len; /* bytes held, the NUL not counted */
    size_t cap; /* bytes allocated */
    size_t max; /* the most len may reach; 0: no bound but size_t's */
    int err;    /* 0, or XLLM_BUF_OOM / XLLM_BUF_OVER (sticky) */
} buf_t;

#define BUF_INIT {0}

/* Room for `extra` more bytes and the NUL: 0, or -1 with err set (out of
 * memory, or len + extra past max / SIZE_MAX). Capacity at least doubles. */
int buf_reserve(buf_t *b, size_t extra);
/* Append n bytes of s (s may be NULL when n is 0). 0 or -1 (err set). */
int buf_append(buf_t *b, const void *s, size_t n);
int buf_puts(buf_t *b, const char *s);
int buf_putc(buf_t *b, char c);
/* n copies of c (padding: one growth and a memset). */
int buf_fill(buf_t *b, char c, size_t n);
/* printf-append, any length (formats twice when the first try is short). */
int buf_printf(buf_t *b, const char *fmt, ...) XLLM_PRINTF(2, 3);
int buf_vprintf(buf_t *b, const char *fmt, va_list ap);
/* Forget the contents but keep the memory (and clear err): how a reused
 * scratch buffer starts over. Writes nothing into p. */
void buf_clear(buf_t *b);
/* Keep the first n bytes (n <= len; a larger n keeps all) and clear err:
 * how a writer undoes a failed or unwanted tail back to a mark. */
void buf_truncate(buf_t *b, size_t n);
/* Hand the bytes over: a NUL-terminated string (an empty one for an empty
 * buffer) to free with xllm_free, its length in *len when len is not NULL.
 * NULL when err is set or the empty string cannot be allocated. The buffer
 * is empty (and its memory released) afterwards, in every case. */
char *buf_steal(buf_t *b, size_t *len);
/* Release the memory; the buffer is empty again (max is kept). */
void buf_free(buf_t *b);

/* ------------------------------------------------ arrays of any element
 *
 * The same growth for typed arrays: make room for `need` elements of `size`
 * bytes in the array whose address is `items` (a T **) and whose capacity,
 * in elements, is *cap. The capacity doubles, starting from `first` when it
 * is 0, until need fits. 0, or -1 (overflow or out of memory; the array and
 * *cap are unchanged). The allocation is counted at the caller's line. */
int array_reserve_at(void *items, size_t *cap, size_t need, size_t size, size_t first, const char *file,
                          int line);
#define array_reserve(items, cap, need, size, first) \
    array_reserve_at((items), (cap), (need), (size), (first), __FILE__, __LINE__)

#endif
