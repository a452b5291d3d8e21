/*
 * lexer.c - template source to tokens, with Jinja2's whitespace rules.
 *
 * Text between tags becomes DATA; {{ }} and {% %} become BEGIN, expression
 * tokens, END; {# #} vanish. Whitespace control is Jinja2's lexer exactly, as
 * HuggingFace configures it: "{%-"/"-%}" (and {{- -}}, {#- -#}) strip all
 * whitespace on that side; trim_blocks drops the first newline after a block
 * or comment tag; lstrip_blocks drops whitespace between the start of a line
 * and a block or comment tag; "+" after "{%" or before "%}" turns those
 * two off for that tag. {% raw %} bodies are DATA. Strings decode Python's
 * escapes. Inside (), [] and {} an end delimiter does not end the tag.
 */
#include "template/tpl.h"
#include "base/utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lx {
    tpl_arena *a;
    const char *s;
    size_t n, i;
    int line;
    token *t;
    size_t nt, cap;
    xllm_error *err;
} lx;

static int lfail(lx *l, xllm_status code, const char *msg, const char *arg) {
    err_setf(l->err, code, "chat template line %d: %s%s", l->line, msg, arg ? arg : "");
    return -1;
}

static int push(lx *l, tok_type t, int line, const char *s, size_t len) {
    if (l->nt == l->cap && tpl_arena_grow(l->a, &l->t, l->nt, &l->cap, sizeof *l->t, 256))
        return lfail(l, XLLM_ERR_OUT_OF_MEMORY, "out of memory", NULL);
    token *k = &l->t[l->nt++];
    memset(k, 0, sizeof *k);
    k->t = t;
    k->line = line;
    k->s = s;
    k->len = len;
    return 0;
}

static void count_lines(lx *l, size_t from, size_t to) {
    for (size_t k = from; k < to; k++)
        if (l->s[k] == '\n') l->line++;
}

/* Length of the whitespace code point at s[i] (Python's \s), or 0. */
static size_t ws_len(const char *s, size_t n, size_t i) {
    unsigned char ch = (unsigned char)s[i];
    if (ch < 0x80) return py_isspace(ch) ? 1 : 0;
    size_t j = i;
    uint32_t cp = py_utf8_next(s, n, &j);
    return py_isspace(cp) ? j - i : 0;
}

static size_t skip_ws(const char *s, size_t n, size_t i) {
    size_t k;
    while (i < n && (k = ws_len(s, n, i)) > 0) i += k;
    return i;
}

/* text.rstrip(): the length without trailing whitespace. */
static size_t rstrip_len(const char *s, size_t len) {
    while (len > 0) {
        size_t st = len - 1;
        while (st > 0 && ((unsigned char)s[st] & 0xC0) == 0x80) st--;
        if (ws_len(s, len, st) != len - st) break;
        len = st;
    }
    return len;
}

/* Jinja's OptionalLStrip on the text before a tag: returns its kept length. */
static size_t strip_before(const char *text, size_t len, char sign, int is_var, int line_starting) {
    if (sign == '-') return rstrip_len(text, len);
    if (sign != '+' && !is_var) {
        size_t l_pos = len;
        while (l_pos > 0 && text[l_pos - 1] != '\n') l_pos--;
        if (l_pos > 0 || line_starting) { /* whitespace_re.fullmatch(text, l_pos): Unicode \s */
            size_t k = l_pos, w;
            while (k < len && (w = ws_len(text, len, k)) > 0) k += w;
            return k == len ? l_pos : len;
        }
    }
    return len;
}

static int emit_data(lx *l, const char *text, size_t len, int line) {
    if (len == 0) return 0;
    return push(l, T_DATA, line, text, len);
}

/* Python unicode-escape decoding of a string literal body. */
static int decode_string(lx *l, const char *s, size_t n, token *tk) {
    char *o = tpl_alloc(l->a, n + 1);
    if (!o) return lfail(l, XLLM_ERR_OUT_OF_MEMORY, "out of memory", NULL);
    size_t k = 0, i = 0;
    while (i < n) {
        if (s[i] != '\\' || i + 1 >= n) {
            o[k++] = s[i++];
            continue;
        }
        char e = s[i + 1];
        i += 2;
        uint32_t cp = 0;
        int digits = 0;
        switch (e) {
        case '\n': continue; /* line continuation */
        case '\\': o[k++] = '\\'; continue;
        case '\'': o[k++] = '\''; continue;
        case '"': o[k++] = '"'; continue;
        case 'a': o[k++] = '\a'; continue;
        case 'b': o[k++] = '\b'; continue;
        case 'f': o[k++] = '\f'; continue;
        case 'n': o[k++] = '\n'; continue;
        case 'r': o[k++] = '\r'; continue;
        case 't': o[k++] = '\t'; continue;
        case 'v': o[k++] = '\v'; continue;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 'N': return lfail(l, XLLM_ERR_UNSUPPORTED, "\\N{...} escapes in strings are not supported", NULL);
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int d = 0; d < 2 && i < n && s[i] >= '0' && s[i] <= '7'; d++) cp = cp * 8 + (uint32_t)(s[i++] - '0');
                k += u8_encode(cp, o + k);
                continue;
            }
            o[k++] = '\\'; /* unknown escapes stay as written */
            o[k++] = e;
            continue;
        }
        for (int d = 0; d < digits; d++) {
            char h = i < n ? s[i] : 0;
            int v = u8_hex_value(h);
            if (v < 0) return lfail(l, XLLM_ERR_FORMAT, "bad escape in a string literal", NULL);
            cp = cp * 16 + (uint32_t)v;
            i++;
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000))
            return lfail(l, XLLM_ERR_FORMAT, "bad escape in a string literal", NULL);
        k += u8_encode(cp, o + k); /* the escape is never shorter than its UTF-8 */
    }
    o[k] = 0;
    tk->s = o;
    tk->len = k;
    return 0;
}

static const char *const OPS[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "/", "*", "%", "~", "[", "]", "(",
                                  ")", "{", "}", "<", ">", "=", ".", ":", "|", ",", ";"};

/* Tokens inside {{ }} or {% %} up to and including the end delimiter. */
static int lex_tag(lx *l, int is_block, int *line_starting) {
    const char *end = is_block ? "%}" : "}}";
    int balance = 0;
    for (;;) {
        if (l->i >= l->n)
            return lfail(l, XLLM_ERR_FORMAT, "unexpected end of template, expected ", is_block ? "'%}'" : "'}}'");
        const char *s = l->s;
        size_t i = l->i;
        if (balance == 0) {
            size_t m = 0;
            int trim = 0;
            if (is_block && s[i] == '+' && i + 3 <= l->n && !strncmp(s + i + 1, end, 2)) m = 3;
            else if (s[i] == '-' && i + 3 <= l->n && !strncmp(s + i + 1, end, 2)) { m = 3; trim = 2; }
            else if (i + 2 <= l->n && !strncmp(s + i, end, 2)) { m = 2; trim = is_block ? 1 : 0; }
            if (m) {
                if (push(l, is_block ? T_BLOCK_END : T_VAR_END, l->line, NULL, 0)) return -1;
                size_t j = i + m;
                if (trim == 2) j = skip_ws(s, l->n, j);
                else if (trim == 1 && j < l->n && s[j] == '\n') j++;
                count_lines(l, i, j);
                *line_starting = s[j - 1] == '\n';
                l->i = j;
                return 0;
            }
        }
        size_t w = ws_len(s, l->n, i);
        if (w) {
            size_t j = skip_ws(s, l->n, i);
            count_lines(l, i, j);
            l->i = j;
            continue;
        }
        char ch = s[i];
        if (ch >= '0' && ch <= '9') {
            size_t j = i;
            int is_float = 0;
            while (j < l->n && ((s[j] >= '0' && s[j] <= '9') || (s[j] == '_' && j + 1 < l->n && s[j + 1] >= '0' && s[j + 1] <= '9'))) j++;
            int after_dot = i > 0 && s[i - 1] == '.';
            if (!after_dot && j + 1 < l->n && s[j] == '.' && s[j + 1] >= '0' && s[j + 1] <= '9') {
                is_float = 1;
                j++;
                while (j < l->n && ((s[j] >= '0' && s[j] <= '9') || (s[j] == '_' && j + 1 < l->n && s[j + 1] >= '0' && s[j + 1] <= '9'))) j++;
            }
            if (!after_dot && j < l->n && (s[j] == 'e' || s[j] == 'E')) {
                size_t k = j + 1;
                if (k < l->n && (s[k] == '+' || s[k] == '-')) k++;
                if (k < l->n && s[k] >= '0' && s[k] <= '9') {
                    is_float = 1;
                    j = k;
                    while (j < l->n && s[j] >= '0' && s[j] <= '9') j++;
                }
            }
            char small[128], *buf = small; /* the whole literal: a truncated one would be another number */
            if (j - i >= sizeof small && !(buf = tpl_alloc(l->a, j - i + 1)))
                return lfail(l, XLLM_ERR_OUT_OF_MEMORY, "out of memory", NULL);
            size_t bn = 0;
            for (size_t k = i; k < j; k++)
                if (s[k] != '_') buf[bn++] = s[k];
            buf[bn] = 0;
            if (push(l, is_float ? T_FLOAT : T_INT, l->line, s + i, j - i)) return -1;
            token *tk = &l->t[l->nt - 1];
            if (is_float) tk->f = strtod(buf, NULL);
            else {
                errno = 0;
                tk->i = strtoll(buf, NULL, 10);
                if (errno == ERANGE) return lfail(l, XLLM_ERR_UNSUPPORTED, "integer literal larger than 64 bits", NULL);
            }
            l->i = j;
            continue;
        }
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_') {
            size_t j = i + 1;
            while (j < l->n && ((s[j] >= 'a' && s[j] <= 'z') || (s[j] >= 'A' && s[j] <= 'Z') || s[j] == '_' ||
                                (s[j] >= '0' && s[j] <= '9')))
                j++;
            if (push(l, T_NAME, l->line, s + i, j - i)) return -1;
            l->i = j;
            continue;
        }
        if (ch == '\'' || ch == '"') {
            size_t j = i + 1;
            while (j < l->n && s[j] != ch) j += s[j] == '\\' ? 2 : 1;
            if (j >= l->n) return lfail(l, XLLM_ERR_FORMAT, "unterminated string literal", NULL);
            if (push(l, T_STRING, l->line, NULL, 0)) return -1;
            if (decode_string(l, s + i + 1, j - i - 1, &l->t[l->nt - 1])) return -1;
            count_lines(l, i, j);
            l->i = j + 1;
            continue;
        }
        size_t k;
        for (k = 0; k < sizeof OPS / sizeof *OPS; k++) {
            size_t ol = strlen(OPS[k]);
            if (i + ol <= l->n && !strncmp(s + i, OPS[k], ol)) break;
        }
        if (k == sizeof OPS / sizeof *OPS) {
            char what[16];
            size_t j = i;
            py_utf8_next(s, l->n, &j);
            snprintf(what, sizeof what, "'%.*s'", (int)(j - i), s + i);
            return lfail(l, XLLM_ERR_FORMAT, "unexpected character ", what);
        }
        const char *op = OPS[k];
        if (op[0] == '(' || op[0] == '[' || op[0] == '{') balance++;
        else if ((op[0] == ')' || op[0] == ']' || op[0] == '}') && !op[1]) {
            if (balance == 0) {
                char what[8];
                snprintf(what, sizeof what, "'%c'", op[0]);
                return lfail(l, XLLM_ERR_FORMAT, "unexpected ", what);
            }
            balance--;
        }
        if (push(l, T_OP, l->line, op, strlen(op))) return -1;
        l->i = i + strlen(op);
    }
}

/* {%(-|+|)\s*NAME\s*(-%}\s*|%}...) at s[i]: matched length or 0. */
static size_t match_word_tag(const lx *l, size_t i, const char *word, int allow_plus_end, int trim_nl, char *sign) {
    const char *s = l->s;
    if (i + 2 > l->n || s[i] != '{' || s[i + 1] != '%') return 0;
    size_t j = i + 2;
    *sign = 0;
    if (j < l->n && (s[j] == '-' || s[j] == '+')) *sign = s[j++];
    j = skip_ws(s, l->n, j);
    size_t wl = strlen(word);
    if (j + wl > l->n || strncmp(s + j, word, wl)) return 0;
    j += wl;
    size_t k = skip_ws(s, l->n, j);
    if (k == j && k < l->n && s[k] != '-' && s[k] != '%' && s[k] != '+') return 0;
    j = k;
    if (allow_plus_end && j + 3 <= l->n && !strncmp(s + j, "+%}", 3)) return j + 3 - i;
    if (j + 3 <= l->n && !strncmp(s + j, "-%}", 3)) return skip_ws(s, l->n, j + 3) - i;
    if (j + 2 <= l->n && !strncmp(s + j, "%}", 2)) {
        j += 2;
        if (trim_nl && j < l->n && s[j] == '\n') j++;
        return j - i;
    }
    return 0;
}

int tpl_lex(tpl_arena *a, const char *src, size_t len, token **toks, size_t *ntoks, xllm_error *err) {
    lx l = {a, src, len, 0, 1, NULL, 0, 0, err};
    int line_starting = 1;
    while (l.i < l.n) {
        /* the next tag start */
        size_t q = l.i;
        int kind = 0; /* 1 comment, 2 block, 3 variable */
        for (; q + 1 < l.n; q++) {
            if (l.s[q] != '{') continue;
            char nx = l.s[q + 1];
            if (nx == '#') { kind = 1; break; }
            if (nx == '%') { kind = 2; break; }
            if (nx == '{') { kind = 3; break; }
        }
        if (!kind) {
            if (emit_data(&l, l.s + l.i, l.n - l.i, l.line)) return -1;
            count_lines(&l, l.i, l.n);
            break;
        }
        char sign = q + 2 < l.n && (l.s[q + 2] == '-' || l.s[q + 2] == '+') ? l.s[q + 2] : 0;
        char raw_sign = 0;
        size_t raw_len = kind == 2 ? match_word_tag(&l, q, "raw", 0, 0, &raw_sign) : 0;
        const char *text = l.s + l.i;
        size_t tlen = q - l.i;
        size_t keep = strip_before(text, tlen, sign, kind == 3, line_starting);
        int data_line = l.line;
        if (emit_data(&l, text, keep, data_line)) return -1;
        count_lines(&l, l.i, q);
        if (raw_len) {
            size_t j = q + raw_len;
            count_lines(&l, q, j);
            line_starting = l.s[j - 1] == '\n';
            /* find {% endraw %} */
            size_t r = j, m = 0;
            char esign = 0;
            for (; r < l.n; r++) {
                if (l.s[r] != '{') continue;
                m = match_word_tag(&l, r, "endraw", 1, 1, &esign);
                if (m) break;
            }
            if (!m) return lfail(&l, XLLM_ERR_FORMAT, "missing end of raw directive", NULL);
            size_t rkeep = strip_before(l.s + j, r - j, esign, 0, line_starting);
            if (emit_data(&l, l.s + j, rkeep, l.line)) return -1;
            count_lines(&l, j, r + m);
            line_starting = l.s[r + m - 1] == '\n';
            l.i = r + m;
            continue;
        }
        size_t p = q + 2 + (sign ? 1 : 0);
        if (kind == 1) {
            size_t e = p, m = 0;
            int trim = 0;
            for (; e < l.n; e++) {
                if (l.s[e] == '+' && e + 2 < l.n && l.s[e + 1] == '#' && l.s[e + 2] == '}') { m = 3; break; }
                if (l.s[e] == '-' && e + 2 < l.n && l.s[e + 1] == '#' && l.s[e + 2] == '}') { m = 3; trim = 2; break; }
                if (l.s[e] == '#' && e + 1 < l.n && l.s[e + 1] == '}') { m = 2; trim = 1; break; }
            }
            if (!m) return lfail(&l, XLLM_ERR_FORMAT, "missing end of comment tag", NULL);
            size_t j = e + m;
            if (trim == 2) j = skip_ws(l.s, l.n, j);
            else if (trim == 1 && j < l.n && l.s[j] == '\n') j++;
            count_lines(&l, q, j);
            line_starting = l.s[j - 1] == '\n';
            l.i = j;
            continue;
        }
        if (push(&l, kind == 2 ? T_BLOCK_BEGIN : T_VAR_BEGIN, l.line, NULL, 0)) return -1;
        l.i = p;
        if (lex_tag(&l, kind == 2, &line_starting)) return -1;
    }
    if (push(&l, T_EOF, l.line, NULL, 0)) return -1;
    *toks = l.t;
    *ntoks = l.nt;
    return 0;
}
