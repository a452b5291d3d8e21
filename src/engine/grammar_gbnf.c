/*
 * grammar_gbnf.c - llama.cpp's GBNF as a grammar (the `grammar` field).
 *
 * The syntax of llama.cpp's grammars/README.md: rules `name ::= alternatives`,
 * sequences of "literals" (escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH),
 * [character classes] (ranges, ^ negation), '.', rule names, ( groups ), and
 * the quantifiers * + ? {m} {m,} {m,n}; # comments. The start rule is `root`.
 * A rule may continue on the next lines; it ends where the next
 * `name ::=` begins. Rule names are looked up in a small hash table (the
 * text is bounded, a grammar may have many rules).
 */
#include "engine/grammar_impl.h"
#include "base/alloc.h"

#include <string.h>

typedef struct gbnf {
    gbuild *b;
    const char *s;
    size_t n, i;
    int depth;
    /* name -> rule */
    struct { const char *name; size_t len; int32_t rule; } *map;
    uint32_t map_cap, map_n;
} gbnf;

static int is_name(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static void skip_ws(gbnf *p) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') p->i++;
        else if (c == '#')
            while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        else break;
    }
}

static uint32_t name_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static int32_t rule_for(gbnf *p, const char *name, size_t len) {
    if ((p->map_n + 1) * 2 > p->map_cap) {
        uint32_t cap = p->map_cap ? p->map_cap * 2 : 64;
        void *m = mem_calloc(cap, sizeof *p->map);
        if (!m) {
            p->b->oom = 1;
            return -1;
        }
        void *old = p->map;
        uint32_t oc = p->map_cap;
        p->map = m;
        p->map_cap = cap;
        for (uint32_t k = 0; k < oc; k++) {
            const char *nm = ((__typeof__(p->map))old)[k].name;
            if (!nm) continue;
            uint32_t h = name_hash(nm, ((__typeof__(p->map))old)[k].len) & (cap - 1);
            while (p->map[h].name) h = (h + 1) & (cap - 1);
            p->map[h] = ((__typeof__(p->map))old)[k];
        }
        xllm_free(old);
    }
    uint32_t h = name_hash(name, len) & (p->map_cap - 1);
    for (; p->map[h].name; h = (h + 1) & (p->map_cap - 1))
        if (p->map[h].len == len && !memcmp(p->map[h].name, name, len)) return p->map[h].rule;
    int32_t r = gb_new_rule(p->b);
    if (r < 0) return -1;
    p->b->rules[r].name = mem_strndup(name, len);
    p->map[h].name = name;
    p->map[h].len = len;
    p->map[h].rule = r;
    p->map_n++;
    return r;
}

/* One (possibly escaped) character of a literal or class; -1 on error. */
static int64_t read_char(gbnf *p) {
    if (p->i >= p->n) return gb_fail(p->b, "gbnf: unexpected end of text");
    const unsigned char *u = (const unsigned char *)p->s;
    if (u[p->i] == '\\') {
        p->i++;
        if (p->i >= p->n) return gb_fail(p->b, "gbnf: a trailing backslash");
        char c = p->s[p->i++];
        int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
        if (digits) {
            uint32_t v = 0;
            for (int k = 0; k < digits; k++) {
                if (p->i >= p->n || u8_hex_value(p->s[p->i]) < 0) return gb_fail(p->b, "gbnf: \\%c needs %d hex digits", c, digits);
                v = v * 16 + (uint32_t)u8_hex_value(p->s[p->i++]);
            }
            return v;
        }
        switch (c) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': case '-': case '^': return (unsigned char)c;
        default: return gb_fail(p->b, "gbnf: unknown escape \\%c", c);
        }
    }
    uint32_t c = u[p->i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (p->i + (size_t)len > p->n) len = 1;
    if (len > 1) {
        c &= (uint32_t)(0x7F >> len);
        for (int k = 1; k < len; k++) c = (c << 6) | (u[p->i + (size_t)k] & 63u);
    }
    p->i += (size_t)len;
    return c;
}

static int32_t cp_rule(gbnf *p, uint32_t lo, uint32_t hi) {
    cpset s = {0};
    cpset_add(&s, lo, hi);
    int32_t r = gb_cpset(p->b, &s);
    cpset_free(&s);
    return r;
}

static int32_t parse_alt(gbnf *p);

/* Whether `name ::=` starts at the current position (the next rule). */
static int at_rule_start(gbnf *p) {
    size_t k = p->i;
    while (k < p->n && is_name(p->s[k])) k++;
    if (k == p->i) return 0;
    while (k < p->n && (p->s[k] == ' ' || p->s[k] == '\t')) k++;
    return k + 2 < p->n && p->s[k] == ':' && p->s[k + 1] == ':' && p->s[k + 2] == '=';
}

static int32_t parse_atom(gbnf *p) {
    char c = p->s[p->i];
    if (c == '"') {
        p->i++;
        int32_t items[64] = {0}, acc = -1;
        int n = 0;
        while (p->i < p->n && p->s[p->i] != '"') {
            int64_t cp = read_char(p);
            if (cp < 0) return -1;
            if (n == 64) {
                int32_t s = gb_seq(p->b, items, n);
                acc = acc < 0 ? s : gb_seq2(p->b, acc, s);
                n = 0;
            }
            items[n++] = cp_rule(p, (uint32_t)cp, (uint32_t)cp);
        }
        if (p->i >= p->n) return gb_fail(p->b, "gbnf: an unterminated string literal");
        p->i++;
        int32_t s = gb_seq(p->b, items, n);
        return acc < 0 ? s : gb_seq2(p->b, acc, s);
    }
    if (c == '[') {
        p->i++;
        cpset s = {0};
        int neg = 0;
        if (p->i < p->n && p->s[p->i] == '^') neg = 1, p->i++;
        while (p->i < p->n && p->s[p->i] != ']') {
            int64_t lo = read_char(p), hi = lo;
            if (lo < 0) break;
            if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
                p->i++;
                hi = read_char(p);
                if (hi < 0) break;
                if (hi < lo) {
                    gb_fail(p->b, "gbnf: range out of order in a character class");
                    break;
                }
            }
            cpset_add(&s, (uint32_t)lo, (uint32_t)hi);
        }
        if (!gb_ok(p->b) || p->i >= p->n) {
            cpset_free(&s);
            return gb_ok(p->b) ? gb_fail(p->b, "gbnf: an unterminated character class") : -1;
        }
        p->i++;
        cpset_norm(&s);
        if (neg) cpset_negate(&s);
        int32_t r = gb_cpset(p->b, &s);
        cpset_free(&s);
        return r;
    }
    if (c == '.') {
        p->i++;
        return cp_rule(p, 0, 0x10FFFF);
    }
    if (c == '(') {
        p->i++;
        if (++p->depth > 200) return gb_fail(p->b, "gbnf: groups nested deeper than 200");
        int32_t r = parse_alt(p);
        p->depth--;
        skip_ws(p);
        if (r < 0) return -1;
        if (p->i >= p->n || p->s[p->i] != ')') return gb_fail(p->b, "gbnf: an unclosed '('");
        p->i++;
        return r;
    }
    if (is_name(c)) {
        size_t st = p->i;
        while (p->i < p->n && is_name(p->s[p->i])) p->i++;
        return rule_for(p, p->s + st, p->i - st);
    }
    return gb_fail(p->b, "gbnf: unexpected '%c' at offset %zu", c, p->i);
}

static int read_int(gbnf *p, int *out) {
    size_t st = p->i;
    long v = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9' && v <= 100000) v = v * 10 + (p->s[p->i++] - '0');
    *out = v > 100000 ? 100001 : (int)v;
    return p->i == st ? -1 : 0;
}

static int32_t parse_seq(gbnf *p) {
    int32_t items[64] = {0}, acc = -1;
    int n = 0;
    for (;;) {
        skip_ws(p);
        if (p->i >= p->n || p->s[p->i] == '|' || p->s[p->i] == ')' || at_rule_start(p)) break;
        int32_t a = parse_atom(p);
        if (a < 0) return -1;
        if (p->i < p->n) {
            char q = p->s[p->i];
            int mn = -1, mx = -1;
            if (q == '*') mn = 0, mx = -1, p->i++;
            else if (q == '+') mn = 1, mx = -1, p->i++;
            else if (q == '?') mn = 0, mx = 1, p->i++;
            else if (q == '{') {
                p->i++;
                skip_ws(p);
                if (read_int(p, &mn)) return gb_fail(p->b, "gbnf: a malformed {m,n}");
                mx = mn;
                skip_ws(p);
                if (p->i < p->n && p->s[p->i] == ',') {
                    p->i++;
                    skip_ws(p);
                    mx = -1;
                    if (p->i < p->n && p->s[p->i] != '}' && read_int(p, &mx)) return gb_fail(p->b, "gbnf: a malformed {m,n}");
                    skip_ws(p);
                }
                if (p->i >= p->n || p->s[p->i] != '}') return gb_fail(p->b, "gbnf: a malformed {m,n}");
                p->i++;
            }
            if (mn >= 0 && (a = gb_rep(p->b, a, mn, mx)) < 0) return -1;
        }
        if (n == 64) {
            int32_t s = gb_seq(p->b, items, n);
            acc = acc < 0 ? s : gb_seq2(p->b, acc, s);
            n = 0;
        }
        items[n++] = a;
    }
    int32_t s = gb_seq(p->b, items, n);
    return acc < 0 ? s : gb_seq2(p->b, acc, s);
}

static int32_t parse_alt(gbnf *p) {
    int32_t acc[64];
    int n = 0;
    for (;;) {
        int32_t x = parse_seq(p);
        if (x < 0) return -1;
        if (n == 64) {
            acc[0] = gb_alt(p->b, acc, n);
            n = 1;
        }
        acc[n++] = x;
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            continue;
        }
        break;
    }
    return n == 1 ? acc[0] : gb_alt(p->b, acc, n);
}

int32_t gram_front_gbnf(gbuild *b, const char *text, size_t len) {
    gbnf p = {b, text, len, 0, 0, NULL, 0, 0};
    int32_t root = -1;
    for (;;) {
        skip_ws(&p);
        if (p.i >= p.n || !gb_ok(b)) break;
        size_t st = p.i;
        while (p.i < p.n && is_name(p.s[p.i])) p.i++;
        if (p.i == st) {
            gb_fail(b, "gbnf: expected a rule name at offset %zu", st);
            break;
        }
        size_t nl = p.i - st;
        while (p.i < p.n && (p.s[p.i] == ' ' || p.s[p.i] == '\t')) p.i++;
        if (p.i + 2 >= p.n || memcmp(p.s + p.i, "::=", 3)) {
            gb_fail(b, "gbnf: expected '::=' after rule name '%.*s'", (int)(nl > 64 ? 64 : nl), p.s + st);
            break;
        }
        p.i += 3;
        int32_t r = rule_for(&p, p.s + st, nl);
        if (r < 0) break;
        if (b->rules[r].defined) {
            gb_fail(b, "gbnf: rule '%.*s' is defined twice", (int)(nl > 64 ? 64 : nl), p.s + st);
            break;
        }
        int32_t body = parse_alt(&p);
        if (body < 0) break;
        uint32_t e = gb_ref(body);
        gb_add_alt(b, r, &e, 1);
        if (nl == 4 && !memcmp(p.s + st, "root", 4)) root = r;
    }
    xllm_free(p.map);
    if (!gb_ok(b)) return -1;
    if (root < 0) return gb_fail(b, "gbnf: no 'root' rule");
    return root;
}
