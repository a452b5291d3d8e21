/*
 * json_text.c - exact-byte JSON string reading and writing (see json_text.h).
 * A small recursive skipper walks the object; only string escapes are decoded.
 */
#include "json_text.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

static int hex4(const char *p, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v * 16 + (uint32_t)d;
    }
    return 0;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* p at the opening quote. Decodes into out (may be NULL to skip); returns the
 * position after the closing quote or NULL. */
static const char *read_string(const char *p, char *out, size_t *len) {
    if (*p != '"') return NULL;
    p++;
    size_t n = 0;
    while (*p && *p != '"') {
        if (*p != '\\') {
            if (out) out[n] = *p;
            n++, p++;
            continue;
        }
        p++;
        char tmp[4];
        size_t k = 1;
        switch (*p) {
        case '"': tmp[0] = '"'; break;
        case '\\': tmp[0] = '\\'; break;
        case '/': tmp[0] = '/'; break;
        case 'b': tmp[0] = '\b'; break;
        case 'f': tmp[0] = '\f'; break;
        case 'n': tmp[0] = '\n'; break;
        case 'r': tmp[0] = '\r'; break;
        case 't': tmp[0] = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (hex4(p + 1, &cp)) return NULL;
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p[1] == '\\' && p[2] == 'u' && !hex4(p + 3, &lo) && lo >= 0xDC00 &&
                lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            } else if (cp >= 0xD800 && cp < 0xE000) {
                cp = 0xFFFD; /* lone surrogate */
            }
            k = put_utf8(tmp, cp);
            break;
        }
        default: return NULL;
        }
        if (out) memcpy(out + n, tmp, k);
        n += k;
        p++;
    }
    if (*p != '"') return NULL;
    *len = n;
    return p + 1;
}

static const char *skip_value(const char *p, int depth) {
    p = ws(p);
    size_t len;
    if (*p == '"') return read_string(p, NULL, &len);
    if (*p == '{' || *p == '[') {
        if (depth > 64) return NULL;
        char close = *p == '{' ? '}' : ']';
        p = ws(p + 1);
        if (*p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                p = read_string(ws(p), NULL, &len);
                if (!p || *(p = ws(p)) != ':') return NULL;
                p++;
            }
            p = skip_value(p, depth + 1);
            if (!p) return NULL;
            p = ws(p);
            if (*p == ',') { p++; continue; }
            return *p == close ? p + 1 : NULL;
        }
    }
    while (*p && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n') p++;
    return p;
}

int json_object_string(const char *json, const char *key, char **out, size_t *len) {
    const char *p = ws(json);
    if (*p++ != '{') return -1;
    size_t klen = strlen(key);
    for (;;) {
        p = ws(p);
        if (*p != '"') return -1;
        size_t n;
        const char *after = read_string(p, NULL, &n);
        if (!after) return -1;
        char *k = malloc(n + 1);
        if (!k) return -1;
        read_string(p, k, &n);
        int match = n == klen && !memcmp(k, key, n);
        free(k);
        p = ws(after);
        if (*p++ != ':') return -1;
        p = ws(p);
        if (match) {
            if (*p != '"' || !read_string(p, NULL, &n)) return -1;
            *out = malloc(n + 1);
            if (!*out) return -1;
            read_string(p, *out, len);
            (*out)[n] = 0;
            return 0;
        }
        p = skip_value(p, 0);
        if (!p) return -1;
        p = ws(p);
        if (*p == ',') { p++; continue; }
        return -1;
    }
}

void json_write_string(FILE *f, const char *s, size_t len) {
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        case '\b': fputs("\\b", f); break;
        case '\f': fputs("\\f", f); break;
        default:
            if (c < 0x20 || c == 0x7f) fprintf(f, "\\u%04x", c);
            else fputc(c, f);
        }
    }
    fputc('"', f);
}
