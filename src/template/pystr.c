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
    /* glibc counts other scripts' digits as alpha; Python (letters only) does not */
    if (py_isnumeric(cp) && cp < 0x3400) return 0;
    locale_t l = utf8_locale();
    return l ? iswalpha_l((wint_t)cp, l) != 0 : 0;
}

/* Unicode decimal digits (Nd): the first code point of each run of ten. */
static const uint32_t ND_ZEROS[] = {
    0x30, 0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66, 0xDE6, 0xE50,
    0xED0, 0xF20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80, 0x1A90, 0x1B50, 0x1BB0, 0x1C40,
    0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0, 0xFF10, 0x104A0, 0x10D30, 0x11066,
    0x110F0, 0x11136, 0x111D0, 0x112F0, 0x11450, 0x114D0, 0x11650, 0x116C0, 0x11730, 0x118E0, 0x11950,
    0x11C50, 0x11D50, 0x11DA0, 0x16A60, 0x16AC0, 0x16B50, 0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC, 0x1D7F6,
    0x1E140, 0x1E2F0, 0x1E950, 0x1FBF0};

int py_isdecimal(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    for (size_t k = 0; k < sizeof ND_ZEROS / sizeof *ND_ZEROS; k++)
        if (cp >= ND_ZEROS[k] && cp < ND_ZEROS[k] + 10) return 1;
    return 0;
}

int py_isdigit(uint32_t cp) {
    if (py_isdecimal(cp)) return 1;
    /* superscript, subscript and circled digits (Numeric_Type=Digit) */
    return cp == 0xB2 || cp == 0xB3 || cp == 0xB9 || cp == 0x2070 || (cp >= 0x2074 && cp <= 0x2079) ||
           (cp >= 0x2080 && cp <= 0x2089) || (cp >= 0x2460 && cp <= 0x2468) || (cp >= 0x2474 && cp <= 0x247C) ||
           (cp >= 0x2488 && cp <= 0x2490) || cp == 0x24EA || (cp >= 0x24F5 && cp <= 0x24FD) || cp == 0x24FF ||
           (cp >= 0x2776 && cp <= 0x277E) || (cp >= 0x2780 && cp <= 0x2788) || (cp >= 0x278A && cp <= 0x2792);
}

int py_isnumeric(uint32_t cp) {
    if (py_isdigit(cp)) return 1;
    /* fractions, Roman numerals, other numbers (No/Nl), CJK numerals */
    static const uint32_t r[][2] = {{0xBC, 0xBE}, {0x2150, 0x2189}, {0x2469, 0x2473}, {0x247D, 0x2487},
                                    {0x2491, 0x249B}, {0x24EB, 0x24F4}, {0x24FE, 0x24FE}, {0x277F, 0x277F},
                                    {0x2789, 0x2789}, {0x2793, 0x2793}, {0x3007, 0x3007}, {0x3021, 0x3029},
                                    {0x3038, 0x303A}, {0x3192, 0x3195}, {0x3220, 0x3229}, {0x3248, 0x324F},
                                    {0x3251, 0x325F}, {0x3280, 0x3289}, {0x32B1, 0x32BF}};
    for (size_t k = 0; k < sizeof r / sizeof *r; k++)
        if (cp >= r[k][0] && cp <= r[k][1]) return 1;
    static const uint32_t cjk[] = {0x4E00, 0x4E8C, 0x4E09, 0x56DB, 0x4E94, 0x516D, 0x4E03, 0x516B, 0x4E5D, 0x5341,
                                   0x767E, 0x5343, 0x4E07, 0x5104, 0x5146, 0x96F6, 0x58F1, 0x5F10, 0x53C2, 0x62FE};
    for (size_t k = 0; k < sizeof cjk / sizeof *cjk; k++)
        if (cp == cjk[k]) return 1;
    return 0;
}

int py_isalnum(uint32_t cp) { return py_isalpha(cp) || py_isnumeric(cp); }

/* Titlecase letters (Lt) are neither upper nor lower case in Python. */
static int is_titlecase_letter(uint32_t cp) {
    return cp == 0x1C5 || cp == 0x1C8 || cp == 0x1CB || cp == 0x1F2 || (cp >= 0x1F88 && cp <= 0x1F8F) ||
           (cp >= 0x1F98 && cp <= 0x1F9F) || (cp >= 0x1FA8 && cp <= 0x1FAF) || cp == 0x1FBC || cp == 0x1FCC ||
           cp == 0x1FFC;
}

int py_istitle(uint32_t cp) { return is_titlecase_letter(cp); }

int py_isupper(uint32_t cp) {
    if (cp < 0x80) return cp >= 'A' && cp <= 'Z';
    if (is_titlecase_letter(cp)) return 0;
    locale_t l = utf8_locale();
    return l ? iswupper_l((wint_t)cp, l) != 0 : 0;
}

int py_islower(uint32_t cp) {
    if (cp < 0x80) return cp >= 'a' && cp <= 'z';
    if (cp == 0xDF) return 1;
    if (is_titlecase_letter(cp)) return 0;
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

static int put_cp(buf_t *b, uint32_t cp) {
    char u[4];
    return buf_append(b, u, u8_encode(cp, u));
}

/* Unicode SpecialCasing: characters whose upper, title or folded case is
 * more than one character (the ones text actually contains). */
typedef struct special_case {
    uint32_t cp;
    const char *upper, *title, *fold;
} special_case;
static const special_case SPECIAL[] = {
    {0xDF, "SS", "Ss", "ss"},
    {0x149, "\xca\xbcN", "\xca\xbcN", "\xca\xbcn"},
    {0x1F0, "J\xcc\x8c", "J\xcc\x8c", "j\xcc\x8c"},
    {0x390, "\xce\x99\xcc\x88\xcc\x81", "\xce\x99\xcc\x88\xcc\x81", "\xce\xb9\xcc\x88\xcc\x81"},
    {0x3B0, "\xce\xa5\xcc\x88\xcc\x81", "\xce\xa5\xcc\x88\xcc\x81", "\xcf\x85\xcc\x88\xcc\x81"},
    {0x587, "\xd4\xb5\xd5\x92", "\xd4\xb5\xd6\x82", "\xd5\xa5\xd6\x82"},
    {0x1E9E, NULL, NULL, "ss"},
    {0xFB00, "FF", "Ff", "ff"},
    {0xFB01, "FI", "Fi", "fi"},
    {0xFB02, "FL", "Fl", "fl"},
    {0xFB03, "FFI", "Ffi", "ffi"},
    {0xFB04, "FFL", "Ffl", "ffl"},
    {0xFB05, "ST", "St", "st"},
    {0xFB06, "ST", "St", "st"},
};

static const special_case *special(uint32_t cp) {
    if (cp < 0xDF) return NULL;
    for (size_t k = 0; k < sizeof SPECIAL / sizeof *SPECIAL; k++)
        if (SPECIAL[k].cp == cp) return &SPECIAL[k];
    return NULL;
}

int py_upper(buf_t *b, const char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint32_t cp = py_utf8_next(s, len, &i);
        const special_case *sc = special(cp);
        int rc = sc && sc->upper ? buf_append(b, sc->upper, strlen(sc->upper)) : put_cp(b, py_toupper(cp));
        if (rc) return -1;
    }
    return 0;
}

int py_casefold(buf_t *b, const char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint32_t cp = py_utf8_next(s, len, &i);
        const special_case *sc = special(cp);
        int rc;
        if (sc && sc->fold) rc = buf_append(b, sc->fold, strlen(sc->fold));
        else if (cp == 0x3C2) rc = put_cp(b, 0x3C3);
        else if (cp == 0x130) rc = buf_append(b, "i\xcc\x87", 3);
        else rc = put_cp(b, py_tolower(cp));
        if (rc) return -1;
    }
    return 0;
}

int py_title_char(buf_t *b, const char *s, size_t len) {
    size_t i = 0;
    uint32_t cp = py_utf8_next(s, len, &i);
    const special_case *sc = special(cp);
    if (sc && sc->title) return buf_append(b, sc->title, strlen(sc->title));
    char u[4];
    return buf_append(b, u, u8_encode(py_totitle(cp), u));
}

static int cased(uint32_t cp);

/* Is the capital sigma at s[pos] final (Unicode's Final_Sigma, as CPython
 * judges it: a cased letter before it and none after, skipping case-ignorable
 * marks)? */
static int case_ignorable(uint32_t cp) {
    return cp == '\'' || cp == '.' || cp == ':' || cp == 0xB7 || cp == 0x2019 || (cp >= 0x300 && cp <= 0x36F);
}

int py_final_sigma(const char *s, size_t len, size_t pos, size_t after) {
    int before = 0;
    size_t k = pos;
    while (k > 0) {
        size_t st = k - 1;
        while (st > 0 && ((unsigned char)s[st] & 0xC0) == 0x80) st--;
        size_t j = st;
        uint32_t cp = py_utf8_next(s, len, &j);
        k = st;
        if (case_ignorable(cp)) continue;
        before = cased(cp);
        break;
    }
    if (!before) return 0;
    size_t j = after;
    while (j < len) {
        uint32_t cp = py_utf8_next(s, len, &j);
        if (case_ignorable(cp)) continue;
        return !cased(cp);
    }
    return 1;
}

static int cased(uint32_t cp) { return py_isupper(cp) || py_islower(cp) || (cp >= 0x1C5 && cp <= 0x1F2); }

int py_lower_range(buf_t *b, const char *s, size_t len, size_t from, size_t to) {
    size_t i = from;
    while (i < to) {
        size_t st = i;
        uint32_t cp = py_utf8_next(s, len, &i);
        int rc;
        if (cp == 0x130) rc = buf_append(b, "i\xcc\x87", 3);
        else if (cp == 0x3A3) rc = put_cp(b, py_final_sigma(s, len, st, i) ? 0x3C2 : 0x3C3);
        else rc = put_cp(b, py_tolower(cp));
        if (rc) return -1;
    }
    return 0;
}

int py_lower(buf_t *b, const char *s, size_t len) { return py_lower_range(b, s, len, 0, len); }

/* ------------------------------------------------------------------- repr */

int py_str_repr(buf_t *b, const char *s, size_t len) {
    int has_sq = memchr(s, '\'', len) != NULL, has_dq = memchr(s, '"', len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (buf_putc(b, q)) return -1;
    size_t i = 0;
    while (i < len) {
        size_t st = i;
        uint32_t cp = py_utf8_next(s, len, &i);
        int rc;
        if (cp == (uint32_t)q || cp == '\\') {
            char e[2] = {'\\', (char)cp};
            rc = buf_append(b, e, 2);
        } else if (cp == '\t') rc = buf_append(b, "\\t", 2);
        else if (cp == '\n') rc = buf_append(b, "\\n", 2);
        else if (cp == '\r') rc = buf_append(b, "\\r", 2);
        else if (cp < 0x7F && cp >= 0x20) rc = buf_putc(b, (char)cp);
        else if (py_isprintable(cp)) rc = buf_append(b, s + st, i - st);
        else if (cp < 0x100) rc = buf_printf(b, "\\x%02x", cp);
        else if (cp < 0x10000) rc = buf_printf(b, "\\u%04x", cp);
        else rc = buf_printf(b, "\\U%08x", cp);
        if (rc) return -1;
    }
    return buf_putc(b, q);
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
