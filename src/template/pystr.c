/*
 * pystr.c - Python's view of text, over UTF-8 bytes: code points, str.isspace
 * (also what re's \s matches), isprintable (for repr), case mapping, repr()
 * of strings and floats.
 *
 * Classification of non-ASCII letters and case mapping come from the C.UTF-8
 * locale (glibc's Unicode tables) plus the few special cases Python's full
 * mapping has (ß -> SS, final sigma, İ); whitespace and printability follow
 * CPython's tables for the characters that matter in text.
 */
#include "template/tpl.h"

#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

/* ------------------------------------------------------------------ UTF-8 */

uint32_t py_utf8_next(const char *s, size_t len, size_t *i) {
    const unsigned char *p = (const unsigned char *)s + *i;
    size_t left = len - *i;
    unsigned c = p[0];
    if (c < 0x80 || left < 2) { (*i)++; return c; }
    if ((c & 0xE0) == 0xC0 && (p[1] & 0xC0) == 0x80) {
        *i += 2;
        return ((uint32_t)(c & 0x1F) << 6) | (p[1] & 0x3F);
    }
    if ((c & 0xF0) == 0xE0 && left >= 3 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80) {
        *i += 3;
        return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    }
    if ((c & 0xF8) == 0xF0 && left >= 4 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80) {
        *i += 4;
        return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) | ((uint32_t)(p[2] & 0x3F) << 6) |
               (p[3] & 0x3F);
    }
    (*i)++;
    return c;
}

size_t py_utf8_put(char *o, uint32_t cp) {
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

int py_utf8_valid(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned c = p[i];
        if (c < 0x80) { i++; continue; }
        size_t n;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; min = 0x800; }
        else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; min = 0x10000; }
        else return 0;
        if (len - i < n) return 0;
        for (size_t k = 1; k < n; k++) {
            if ((p[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return 0;
        i += n;
    }
    return 1;
}

size_t py_cp_count(const char *s, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) n++;
    return n;
}

size_t py_cp_offset(const char *s, size_t len, size_t k) {
    size_t i = 0;
    while (k > 0 && i < len) {
        py_utf8_next(s, len, &i);
        k--;
    }
    return i;
}

/* --------------------------------------------------------- classification */

static locale_t g_utf8;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void init_locale(void) { g_utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0); }
static locale_t utf8_locale(void) {
    pthread_once(&g_once, init_locale);
    return g_utf8;
}

int py_isspace(uint32_t cp) {
    if (cp < 0x80) return (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x20);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

int py_isprintable(uint32_t cp) {
    if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0)) return 0;
    if (cp < 0x7F) return 1;
    if (py_isspace(cp)) return 0; /* Zs, Zl, Zp (other than ' ') */
    static const uint32_t ranges[][2] = {
        {0xAD, 0xAD}, {0x600, 0x605}, {0x61C, 0x61C}, {0x6DD, 0x6DD}, {0x70F, 0x70F}, {0x890, 0x891},
        {0x8E2, 0x8E2}, {0x180E, 0x180E}, {0x200B, 0x200F}, {0x202A, 0x202E}, {0x2060, 0x206F},
        {0xD800, 0xF8FF}, {0xFDD0, 0xFDEF}, {0xFEFF, 0xFEFF}, {0xFFF0, 0xFFFB}, {0xFFFE, 0xFFFF},
        {0x110BD, 0x110BD}, {0x110CD, 0x110CD}, {0x13430, 0x1343F}, {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A},
        {0xE0000, 0xE00FF}, {0xF0000, 0x10FFFF}};
    for (size_t i = 0; i < sizeof ranges / sizeof *ranges; i++)
        if (cp >= ranges[i][0] && cp <= ranges[i][1]) return 0;
    if ((cp & 0xFFFE) == 0xFFFE) return 0;
    locale_t l = utf8_locale();
    return l ? iswprint_l((wint_t)cp, l) != 0 : 1;
}

int py_isalpha(uint32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    locale_t l = utf8_locale();
    return l ? iswalpha_l((wint_t)cp, l) != 0 : 0;
}

int py_isdigit(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    locale_t l = utf8_locale();
    return l ? iswdigit_l((wint_t)cp, l) != 0 : 0;
}

int py_isalnum(uint32_t cp) { return py_isalpha(cp) || py_isdigit(cp); }

int py_isupper(uint32_t cp) {
    if (cp < 0x80) return cp >= 'A' && cp <= 'Z';
    locale_t l = utf8_locale();
    return l ? iswupper_l((wint_t)cp, l) != 0 : 0;
}

int py_islower(uint32_t cp) {
    if (cp < 0x80) return cp >= 'a' && cp <= 'z';
    if (cp == 0xDF) return 1;
    locale_t l = utf8_locale();
    return l ? iswlower_l((wint_t)cp, l) != 0 : 0;
}

uint32_t py_toupper(uint32_t cp) {
    if (cp < 0x80) return cp >= 'a' && cp <= 'z' ? cp - 32 : cp;
    locale_t l = utf8_locale();
    return l ? (uint32_t)towupper_l((wint_t)cp, l) : cp;
}

uint32_t py_totitle(uint32_t cp) {
    /* the digraphs whose titlecase is neither their upper nor lower case */
    if (cp >= 0x1C4 && cp <= 0x1CC) return 0x1C5 + (cp - 0x1C4) / 3 * 3;
    if (cp >= 0x1F1 && cp <= 0x1F3) return 0x1F2;
    return py_toupper(cp);
}

uint32_t py_tolower(uint32_t cp) {
    if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    locale_t l = utf8_locale();
    return l ? (uint32_t)towlower_l((wint_t)cp, l) : cp;
}

static int put_cp(tpl_buf *b, uint32_t cp) {
    char u[4];
    return tpl_buf_put(b, u, py_utf8_put(u, cp));
}

int py_upper(tpl_buf *b, const char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint32_t cp = py_utf8_next(s, len, &i);
        int rc;
        if (cp == 0xDF) rc = tpl_buf_put(b, "SS", 2);
        else if (cp >= 0xFB00 && cp <= 0xFB06) {
            static const char *lig[] = {"FF", "FI", "FL", "FFI", "FFL", "ST", "ST"};
            rc = tpl_buf_put(b, lig[cp - 0xFB00], strlen(lig[cp - 0xFB00]));
        } else rc = put_cp(b, py_toupper(cp));
        if (rc) return -1;
    }
    return 0;
}

int py_title_char(tpl_buf *b, const char *s, size_t len) {
    size_t i = 0;
    uint32_t cp = py_utf8_next(s, len, &i);
    if (cp == 0xDF || (cp >= 0xFB00 && cp <= 0xFB06)) { /* Ss, Fi...: title then lower the rest */
        static const char *t[] = {"Ff", "Fi", "Fl", "Ffi", "Ffl", "St", "St"};
        const char *x = cp == 0xDF ? "Ss" : t[cp - 0xFB00];
        return tpl_buf_put(b, x, strlen(x));
    }
    char u[4];
    return tpl_buf_put(b, u, py_utf8_put(u, py_totitle(cp)));
}

static int cased(uint32_t cp) { return py_isupper(cp) || py_islower(cp) || (cp >= 0x1C5 && cp <= 0x1F2); }

int py_lower(tpl_buf *b, const char *s, size_t len) {
    size_t i = 0;
    uint32_t prev = 0;
    while (i < len) {
        uint32_t cp = py_utf8_next(s, len, &i);
        int rc;
        if (cp == 0x130) rc = tpl_buf_put(b, "i\xcc\x87", 3);
        else if (cp == 0x3A3) {
            /* final sigma: after a cased letter and not before one */
            size_t j = i;
            uint32_t next = j < len ? py_utf8_next(s, len, &j) : 0;
            rc = put_cp(b, prev && cased(prev) && !(next && cased(next)) ? 0x3C2 : 0x3C3);
        } else rc = put_cp(b, py_tolower(cp));
        if (rc) return -1;
        prev = cp;
    }
    return 0;
}

/* ------------------------------------------------------------------- repr */

int py_str_repr(tpl_buf *b, const char *s, size_t len) {
    int has_sq = memchr(s, '\'', len) != NULL, has_dq = memchr(s, '"', len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (tpl_buf_putc(b, q)) return -1;
    size_t i = 0;
    while (i < len) {
        size_t st = i;
        uint32_t cp = py_utf8_next(s, len, &i);
        int rc;
        if (cp == (uint32_t)q || cp == '\\') {
            char e[2] = {'\\', (char)cp};
            rc = tpl_buf_put(b, e, 2);
        } else if (cp == '\t') rc = tpl_buf_put(b, "\\t", 2);
        else if (cp == '\n') rc = tpl_buf_put(b, "\\n", 2);
        else if (cp == '\r') rc = tpl_buf_put(b, "\\r", 2);
        else if (cp < 0x7F && cp >= 0x20) rc = tpl_buf_putc(b, (char)cp);
        else if (py_isprintable(cp)) rc = tpl_buf_put(b, s + st, i - st);
        else if (cp < 0x100) rc = tpl_buf_printf(b, "\\x%02x", cp);
        else if (cp < 0x10000) rc = tpl_buf_printf(b, "\\u%04x", cp);
        else rc = tpl_buf_printf(b, "\\U%08x", cp);
        if (rc) return -1;
    }
    return tpl_buf_putc(b, q);
}

void py_float_repr(double x, char out[40]) {
    if (isnan(x)) { strcpy(out, "nan"); return; }
    if (isinf(x)) { strcpy(out, x < 0 ? "-inf" : "inf"); return; }
    char e[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    /* e: [-]d[.ddd]e[+-]XX */
    char digits[24];
    size_t nd = 0;
    const char *p = e;
    int neg = 0;
    if (*p == '-') { neg = 1; p++; }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char *o = out;
    if (neg) *o++ = '-';
    if (exp >= -4 && exp < 16) {
        if (exp >= 0) {
            for (int k = 0; k <= exp; k++) *o++ = (size_t)k < nd ? digits[k] : '0';
            *o++ = '.';
            if ((size_t)exp + 1 < nd) for (size_t k = (size_t)exp + 1; k < nd; k++) *o++ = digits[k];
            else *o++ = '0';
        } else {
            *o++ = '0';
            *o++ = '.';
            for (int k = 0; k < -exp - 1; k++) *o++ = '0';
            for (size_t k = 0; k < nd; k++) *o++ = digits[k];
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            for (size_t k = 1; k < nd; k++) *o++ = digits[k];
        }
        snprintf(o, 12, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}
