/*
 * utf8.h - UTF-8 as every module reads and writes it: strict decoding (the
 * Unicode standard's well-formed sequences: no overlongs, no surrogates,
 * nothing past U+10FFFF), encoding, validation, the longest prefix that does
 * not end inside a character, and Rust's lossy decoding (each maximal
 * invalid subpart becomes U+FFFD), appended to an buf_t.
 *
 * Pure functions, thread-safe. None reads past the n bytes it is given.
 */
#ifndef XLLM_BASE_UTF8_H
#define XLLM_BASE_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

/* The code point starting at s (n >= 1 bytes left) and its length in *len;
 * -1 with *len = 1 for an invalid or cut sequence. */
int32_t u8_decode(const unsigned char *s, size_t n, size_t *len);
/* The length of the sequence at s (1 for an invalid byte). */
size_t u8_len(const unsigned char *s, size_t n);
/* The code point that ends at `end` (end >= 1) and where it starts; -1
 * (with *start = end - 1) when the bytes before end are not one. */
int32_t u8_before(const char *s, size_t end, size_t *start);
/* cp (<= 0x10FFFF) as 1-4 bytes in out; returns the count. */
size_t u8_encode(uint32_t cp, char out[4]);
/* Is s[0..n) well-formed UTF-8? */
int u8_valid(const char *s, size_t n);
/* The longest prefix of s[0..n) that does not end inside a sequence that
 * more bytes could complete (streaming text is cut there). */
size_t u8_complete_prefix(const char *s, size_t n);
/* s[0..n) appended with each maximal invalid subpart replaced by U+FFFD
 * (String::from_utf8_lossy). 0 or -1 (the buffer's err set). */
int u8_lossy_append(buf_t *out, const char *s, size_t n);

/* Escapes spell code points and bytes in hex (JSON's and templates' \uNNNN,
 * grammars' \xNN, byte tokens' <0xNN>): the value of one hex digit, or -1. */
static inline int u8_hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}
/* Four hex digits at p (a \uNNNN escape's) into *out: 0, or -1 when one is not. */
static inline int u8_hex4(const char *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int d = u8_hex_value(p[i]);
        if (d < 0) return -1;
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 0;
}

#endif
