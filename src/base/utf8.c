/*
 * utf8.c - strict UTF-8 decoding and encoding, validation, and lossy
 * decoding into a buffer (utf8.h). The tokenizer, the template engine and
 * the GGUF tokenizer reader share these.
 */
#include "base/utf8.h"

int32_t u8_decode(const unsigned char *s, size_t n, size_t *len) {
    unsigned c = s[0];
    *len = 1;
    if (c < 0x80) return (int32_t)c;
    size_t need;
    uint32_t cp, min;
    if (c >= 0xc2 && c <= 0xdf) { need = 2; cp = c & 0x1f; min = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { need = 3; cp = c & 0x0f; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { need = 4; cp = c & 0x07; min = 0x10000; }
    else return -1;
    if (n < need) return -1;
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80) return -1;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return -1;
    *len = need;
    return (int32_t)cp;
}

size_t u8_len(const unsigned char *s, size_t n) {
    size_t len;
    u8_decode(s, n, &len);
    return len;
}

int32_t u8_before(const char *s, size_t end, size_t *start) {
    size_t b = end - 1;
    for (size_t k = 0; k < 3 && b > 0 && ((unsigned char)s[b] & 0xc0) == 0x80; k++) b--;
    size_t l;
    int32_t cp = u8_decode((const unsigned char *)s + b, end - b, &l);
    if (cp < 0 || b + l != end) {
        *start = end - 1;
        return -1;
    }
    *start = b;
    return cp;
}

size_t u8_encode(uint32_t c, char out[4]) {
    if (c < 0x80) { out[0] = (char)c; return 1; }
    if (c < 0x800) { out[0] = (char)(0xc0 | c >> 6); out[1] = (char)(0x80 | (c & 63)); return 2; }
    if (c < 0x10000) {
        out[0] = (char)(0xe0 | c >> 12);
        out[1] = (char)(0x80 | ((c >> 6) & 63));
        out[2] = (char)(0x80 | (c & 63));
        return 3;
    }
    out[0] = (char)(0xf0 | c >> 18);
    out[1] = (char)(0x80 | ((c >> 12) & 63));
    out[2] = (char)(0x80 | ((c >> 6) & 63));
    out[3] = (char)(0x80 | (c & 63));
    return 4;
}

int u8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, l;
    while (i < n) {
        if (u[i] < 0x80) { i++; continue; }
        if (u8_decode(u + i, n - i, &l) < 0) return 0;
        i += l;
    }
    return 1;
}

size_t u8_complete_prefix(const char *s, size_t n) {
    /* look back at most 3 bytes for a lead byte whose sequence is cut short */
    const unsigned char *u = (const unsigned char *)s;
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned c = u[n - back];
        if ((c & 0xc0) == 0x80) continue; /* continuation: keep looking */
        size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

/* How many bytes of s (n > 0 left) form the maximal prefix of a valid
 * sequence (Unicode's "maximal subpart"); *ok = 1 when it is complete. */
static size_t utf8_subpart(const unsigned char *s, size_t n, int *ok) {
    unsigned c = s[0];
    *ok = 0;
    if (c < 0x80) { *ok = 1; return 1; }
    size_t need;
    unsigned lo = 0x80, hi = 0xbf; /* range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) need = 2;
    else if (c >= 0xe0 && c <= 0xef) { need = 3; if (c == 0xe0) lo = 0xa0; if (c == 0xed) hi = 0x9f; }
    else if (c >= 0xf0 && c <= 0xf4) { need = 4; if (c == 0xf0) lo = 0x90; if (c == 0xf4) hi = 0x8f; }
    else return 1;
    size_t k = 1;
    for (; k < need && k < n; k++) {
        unsigned b = s[k];
        if (k == 1 ? (b < lo || b > hi) : (b & 0xc0) != 0x80) break;
    }
    *ok = k == need;
    return k;
}

int u8_lossy_append(buf_t *out, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0; /* valid bytes not yet copied start at run */
    while (i < n) {
        if (u[i] < 0x80) { i++; continue; }
        int ok;
        size_t k = utf8_subpart(u + i, n - i, &ok);
        if (ok) { i += k; continue; }
        if (buf_append(out, s + run, i - run) || buf_append(out, "\xef\xbf\xbd", 3)) return -1;
        i += k;
        run = i;
    }
    return buf_append(out, s + run, n - run);
}
