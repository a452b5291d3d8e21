/*
 * grammar_regex.c - a regular expression as a grammar (the `regex` constraint
 * and JSON Schema's `pattern`).
 *
 * Recursive descent over the usual syntax: alternation, groups ((...),
 * (?:...), (?<name>...)), classes with ranges and \d \w \s (and negations),
 * '.', escapes (\n \t \r \f \v \0 \xHH \uHHHH, escaped punctuation), and the
 * quantifiers * + ? {m} {m,} {m,n} (a lazy '?' suffix is accepted: it does not
 * change the language). What a grammar cannot express is refused by name:
 * backreferences, lookaround, word boundaries, anchors in the middle,
 * possessive quantifiers. A `regex` constraint must match the whole output; a
 * JSON Schema pattern is a search (an unanchored side may have any text), and
 * its characters are written as a JSON string's contents (quotes, backslashes
 * and controls escaped).
 */
#include "engine/grammar_impl.h"

#include <string.h>

typedef struct rx {
    gbuild *b;
    const char *s;
    size_t n, i;
    int json;
    int depth;
} rx;

static int32_t rx_alt(rx *p);

/* One UTF-8 character at p->s[p->i] (invalid bytes count as themselves). */
static uint32_t rx_char(rx *p) {
    const unsigned char *u = (const unsigned char *)p->s + p->i;
    size_t left = p->n - p->i;
    uint32_t c = u[0];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if ((size_t)len > left) len = 1;
    if (len > 1) {
        c &= (uint32_t)(0x7F >> len);
        for (int k = 1; k < len; k++) c = (c << 6) | (u[k] & 63u);
    }
    p->i += (size_t)len;
    return c;
}

static int hex_n(rx *p, int n, uint32_t *out) {
    uint32_t v = 0;
    for (int k = 0; k < n; k++) {
        if (p->i >= p->n || u8_hex_value(p->s[p->i]) < 0) return -1;
        v = v * 16 + (uint32_t)u8_hex_value(p->s[p->i++]);
    }
    *out = v;
    return 0;
}

/* After a backslash: a class escape into set (1), a single character (0), or an error (-1). */
static int rx_escape(rx *p, cpset *set, uint32_t *cp) {
    if (p->i >= p->n) return gb_fail(p->b, "regex: a trailing backslash");
    char c = p->s[p->i++];
    int neg = 0;
    switch (c) {
    case 'D': neg = 1; /* fall through */
    case 'd':
        if (!neg) cpset_add(set, '0', '9');
        else cpset_add(set, 0, '0' - 1), cpset_add(set, '9' + 1, 0x10FFFF);
        return 1;
    case 'W': neg = 1; /* fall through */
    case 'w':
        if (!neg) {
            cpset_add(set, '0', '9'), cpset_add(set, 'A', 'Z'), cpset_add(set, 'a', 'z'), cpset_add(set, '_', '_');
        } else {
            cpset w = {0};
            cpset_add(&w, '0', '9'), cpset_add(&w, 'A', 'Z'), cpset_add(&w, 'a', 'z'), cpset_add(&w, '_', '_');
            cpset_negate(&w);
            for (int k = 0; k < w.n; k++) cpset_add(set, w.r[2 * k], w.r[2 * k + 1]);
            cpset_free(&w);
        }
        return 1;
    case 'S': neg = 1; /* fall through */
    case 's':
        if (!neg) {
            cpset_add(set, '\t', '\r'), cpset_add(set, ' ', ' ');
        } else {
            cpset_add(set, 0, '\t' - 1), cpset_add(set, '\r' + 1, ' ' - 1), cpset_add(set, ' ' + 1, 0x10FFFF);
        }
        return 1;
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'x':
        if (hex_n(p, 2, cp)) return gb_fail(p->b, "regex: \\x needs two hex digits");
        return 0;
    case 'u':
        if (hex_n(p, 4, cp)) return gb_fail(p->b, "regex: \\u needs four hex digits");
        return 0;
    case 'b': case 'B': return gb_fail(p->b, "regex: word boundaries (\\%c) are not supported", c);
    case 'A': case 'z': case 'Z': case 'G': return gb_fail(p->b, "regex: anchor \\%c is not supported", c);
    case 'p': case 'P': return gb_fail(p->b, "regex: Unicode property classes (\\%c{...}) are not supported", c);
    default:
        if (c >= '1' && c <= '9') return gb_fail(p->b, "regex: backreferences (\\%c) are not supported", c);
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            return gb_fail(p->b, "regex: escape \\%c is not supported", c);
        p->i--;
        *cp = rx_char(p); /* escaped punctuation or any other character: itself */
        return 0;
    }
}

static int32_t rx_set_rule(rx *p, const cpset *s) { return p->json ? gb_cpset_json(p->b, s) : gb_cpset(p->b, s); }

static int32_t rx_class(rx *p) {
    cpset s = {0};
    int neg = 0, first = 1;
    if (p->i < p->n && p->s[p->i] == '^') neg = 1, p->i++;
    for (;;) {
        if (p->i >= p->n) {
            cpset_free(&s);
            return gb_fail(p->b, "regex: an unterminated character class");
        }
        if (p->s[p->i] == ']' && !first) {
            p->i++;
            break;
        }
        first = 0;
        uint32_t lo;
        if (p->s[p->i] == '\\') {
            p->i++;
            int k = rx_escape(p, &s, &lo);
            if (k < 0) {
                cpset_free(&s);
                return -1;
            }
            if (k == 1) continue;
        } else if (p->s[p->i] == '[' && p->i + 1 < p->n && p->s[p->i + 1] == ':') {
            cpset_free(&s);
            return gb_fail(p->b, "regex: POSIX classes ([:name:]) are not supported");
        } else {
            lo = rx_char(p);
        }
        uint32_t hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            if (p->s[p->i] == '\\') {
                p->i++;
                cpset dummy = {0};
                int k = rx_escape(p, &dummy, &hi);
                cpset_free(&dummy);
                if (k != 0) {
                    cpset_free(&s);
                    return k < 0 ? -1 : gb_fail(p->b, "regex: a class escape cannot end a range");
                }
            } else {
                hi = rx_char(p);
            }
            if (hi < lo) {
                cpset_free(&s);
                return gb_fail(p->b, "regex: range out of order in a character class");
            }
        }
        cpset_add(&s, lo, hi);
    }
    cpset_norm(&s);
    if (neg) cpset_negate(&s);
    int32_t r = rx_set_rule(p, &s);
    cpset_free(&s);
    return r;
}

static int rx_int(rx *p, int *out) {
    size_t st = p->i;
    long v = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9' && v <= 100000) v = v * 10 + (p->s[p->i++] - '0');
    if (p->i == st) return -1;
    *out = v > 100000 ? 100001 : (int)v;
    return 0;
}

static int32_t rx_atom(rx *p) {
    char c = p->s[p->i];
    if (c == '(') {
        p->i++;
        if (p->i < p->n && p->s[p->i] == '?') {
            if (p->i + 1 < p->n && p->s[p->i + 1] == ':') {
                p->i += 2;
            } else if (p->i + 2 < p->n && p->s[p->i + 1] == '<' && p->s[p->i + 2] != '=' && p->s[p->i + 2] != '!') {
                while (p->i < p->n && p->s[p->i] != '>') p->i++; /* a named group */
                p->i++;
            } else if (p->i + 1 < p->n && p->s[p->i + 1] == 'P' && p->i + 2 < p->n && p->s[p->i + 2] == '<') {
                while (p->i < p->n && p->s[p->i] != '>') p->i++;
                p->i++;
            } else {
                return gb_fail(p->b, "regex: lookaround and inline flags ((?...)) are not supported");
            }
        }
        if (++p->depth > 200) return gb_fail(p->b, "regex: groups nested deeper than 200");
        int32_t r = rx_alt(p);
        p->depth--;
        if (r < 0) return -1;
        if (p->i >= p->n || p->s[p->i] != ')') return gb_fail(p->b, "regex: an unclosed group");
        p->i++;
        return r;
    }
    if (c == '[') {
        p->i++;
        return rx_class(p);
    }
    cpset s = {0};
    if (c == '.') {
        p->i++;
        cpset_add(&s, 0, '\n' - 1);
        cpset_add(&s, '\n' + 1, 0x10FFFF);
    } else if (c == '\\') {
        p->i++;
        uint32_t cp;
        int k = rx_escape(p, &s, &cp);
        if (k < 0) {
            cpset_free(&s);
            return -1;
        }
        if (k == 0) cpset_add(&s, cp, cp);
    } else if (c == '^' || c == '$') {
        return gb_fail(p->b, "regex: anchors (%c) inside the pattern are not supported", c);
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        return gb_fail(p->b, "regex: a quantifier (%c) with nothing to repeat", c);
    } else {
        uint32_t cp = rx_char(p);
        cpset_add(&s, cp, cp);
    }
    cpset_norm(&s);
    int32_t r = rx_set_rule(p, &s);
    cpset_free(&s);
    return r;
}

static int32_t rx_seq(rx *p) {
    int32_t items[64] = {0};
    int n = 0;
    int32_t acc = -1;
    while (p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')') {
        if (p->s[p->i] == '$' && p->i + 1 == p->n) break; /* the end anchor (the caller handles it) */
        int32_t a = rx_atom(p);
        if (a < 0) return -1;
        if (p->i < p->n) {
            char q = p->s[p->i];
            int mn = -1, mx = -1;
            if (q == '*') mn = 0, mx = -1, p->i++;
            else if (q == '+') mn = 1, mx = -1, p->i++;
            else if (q == '?') mn = 0, mx = 1, p->i++;
            else if (q == '{') {
                size_t save = p->i++;
                if (rx_int(p, &mn)) {
                    p->i = save; /* a literal '{' */
                    mn = -1;
                } else {
                    mx = mn;
                    if (p->i < p->n && p->s[p->i] == ',') {
                        p->i++;
                        mx = -1;
                        if (p->i < p->n && p->s[p->i] != '}' && rx_int(p, &mx))
                            return gb_fail(p->b, "regex: a malformed {m,n} quantifier");
                    }
                    if (p->i >= p->n || p->s[p->i] != '}') return gb_fail(p->b, "regex: a malformed {m,n} quantifier");
                    p->i++;
                }
            }
            if (mn >= 0) {
                if (p->i < p->n && p->s[p->i] == '+') return gb_fail(p->b, "regex: possessive quantifiers are not supported");
                if (p->i < p->n && p->s[p->i] == '?') p->i++; /* lazy: the same language */
                a = gb_rep(p->b, a, mn, mx);
                if (a < 0) return -1;
            }
        }
        if (n == 64) { /* fold long sequences */
            acc = acc < 0 ? gb_seq(p->b, items, n) : gb_seq2(p->b, acc, gb_seq(p->b, items, n));
            n = 0;
        }
        items[n++] = a;
    }
    int32_t r = gb_seq(p->b, items, n);
    return acc < 0 ? r : gb_seq2(p->b, acc, r);
}

static int32_t rx_alt(rx *p) {
    int32_t r = rx_seq(p);
    if (r < 0 || p->i >= p->n || p->s[p->i] != '|') return r;
    int32_t acc[64];
    int n = 0;
    acc[n++] = r;
    while (p->i < p->n && p->s[p->i] == '|') {
        p->i++;
        int32_t x = rx_seq(p);
        if (x < 0) return -1;
        if (n == 64) {
            acc[0] = gb_alt(p->b, acc, n);
            n = 1;
        }
        acc[n++] = x;
    }
    return gb_alt(p->b, acc, n);
}

int32_t gram_front_regex(gbuild *b, const char *text, size_t len, int json_str) {
    rx p = {b, text, len, 0, json_str, 0};
    int anchored_start = 0, anchored_end = 0;
    if (p.n && p.s[0] == '^') anchored_start = 1, p.i = 1;
    if (p.n > p.i && p.s[p.n - 1] == '$') {
        size_t bs = 0; /* an escaped '$' is a literal */
        for (size_t k = p.n - 1; k > p.i && p.s[k - 1] == '\\'; k--) bs++;
        if (!(bs & 1)) anchored_end = 1;
    }
    int32_t r = rx_alt(&p);
    if (r < 0) return -1;
    if (anchored_end && p.i == p.n - 1) p.i++;
    if (p.i != p.n) return gb_fail(b, "regex: unexpected '%c' at offset %zu", p.s[p.i], p.i);
    if (!json_str) return r; /* a whole-output regex: anchors are implied */
    cpset any = {0};
    cpset_add(&any, 0, 0x10FFFF);
    int32_t parts[3], k = 0;
    if (!anchored_start) parts[k++] = gb_rep(b, gb_cpset_json(b, &any), 0, -1);
    parts[k++] = r;
    if (!anchored_end) parts[k++] = gb_rep(b, gb_cpset_json(b, &any), 0, -1);
    cpset_free(&any);
    return gb_seq(b, parts, k);
}
