/*
 * grammar_build.c - the compiled grammar and the builder the front ends use
 * (see grammar_impl.h), plus gram_compile, the one entry point.
 *
 * The idea: front ends compose rules with a few combinators (literal,
 * sequence, alternation, repetition, byte class) and never see the flat
 * layout. Repetition is expanded: x{m,n} is m copies then nested optionals
 * (x (x (x)?)?)?, x* is right recursion S ::= x S | empty, so every rule is
 * plain BNF and a bounded repetition bounds its output. Finishing checks that
 * every referenced rule is defined and that no rule is left recursive (the
 * pushdown matcher would never stop expanding it), then inlines rules that are
 * a single run of byte classes, so parse stacks stay short.
 */
#include "engine/grammar_impl.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void gb_init(gbuild *b, xllm_error *err) {
    memset(b, 0, sizeof *b);
    b->err = err;
}

void gb_free(gbuild *b) {
    for (int32_t r = 0; r < b->n_rules; r++) {
        for (int32_t a = 0; a < b->rules[r].n; a++) xllm_free(b->rules[r].alts[a].el);
        xllm_free(b->rules[r].alts);
        xllm_free(b->rules[r].name);
    }
    xllm_free(b->rules);
    xllm_free(b->sets);
    memset(b, 0, sizeof *b);
}

int gb_fail(gbuild *b, const char *fmt, ...) {
    if (!b->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->msg, sizeof b->msg, fmt, ap);
        va_end(ap);
        b->failed = 1;
    }
    return -1;
}

int gb_ok(const gbuild *b) { return !b->failed && !b->oom && !b->too_big; }

static int grow(void **p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return 0;
    if (need > (1 << 29)) return -1; /* the capacity stays an int32_t */
    size_t c = (size_t)*cap;
    if (array_reserve(p, &c, (size_t)need, elem, 4)) return -1;
    *cap = (int32_t)c;
    return 0;
}

int32_t gb_new_rule(gbuild *b) {
    if (!gb_ok(b)) return -1;
    if (b->n_rules >= (1 << 24)) {
        b->too_big = 1;
        return -1;
    }
    if (grow((void **)&b->rules, &b->cap_rules, b->n_rules + 1, sizeof *b->rules)) {
        b->oom = 1;
        return -1;
    }
    memset(&b->rules[b->n_rules], 0, sizeof b->rules[0]);
    return b->n_rules++;
}

void gb_add_alt(gbuild *b, int32_t rule, const uint32_t *el, int32_t n) {
    if (!gb_ok(b) || rule < 0) return;
    for (int32_t i = 0; i < n; i++)
        if (GE_KIND(el[i]) == GE_RULE && (int32_t)GE_ARG(el[i]) >= b->n_rules) {
            b->oom = 1; /* a failed combinator's -1 reached here: an error is already set */
            return;
        }
    b->n_elems += n + 1;
    if (b->n_elems > (int64_t)GRAM_MAX_ELEMS) {
        b->too_big = 1;
        return;
    }
    gb_rule *r = &b->rules[rule];
    if (grow((void **)&r->alts, &r->cap, r->n + 1, sizeof *r->alts)) {
        b->oom = 1;
        return;
    }
    gb_altv *a = &r->alts[r->n];
    a->n = n;
    a->cap = n;
    a->el = mem_malloc_array((size_t)(n ? n : 1), sizeof(uint32_t));
    if (!a->el) {
        b->oom = 1;
        return;
    }
    if (n) memcpy(a->el, el, (size_t)n * sizeof(uint32_t));
    r->n++;
    r->defined = 1;
}

uint32_t gb_set_elem(gbuild *b, const gram_set *s) {
    for (int32_t i = b->n_sets; i-- > 0 && i >= b->n_sets - 64;) /* recent ones: most repeats are near */
        if (!memcmp(&b->sets[i], s, sizeof *s)) return GE_MAKE(GE_CHARS, i);
    if (grow((void **)&b->sets, &b->cap_sets, b->n_sets + 1, sizeof *b->sets)) {
        b->oom = 1;
        return GE_MAKE(GE_CHARS, 0);
    }
    b->sets[b->n_sets] = *s;
    return GE_MAKE(GE_CHARS, b->n_sets++);
}

/* ---------------------------------------------------------- combinators */

int32_t gb_empty(gbuild *b) {
    int32_t r = gb_new_rule(b);
    gb_add_alt(b, r, NULL, 0);
    return gb_ok(b) ? r : -1;
}

int32_t gb_lit(gbuild *b, const char *s, size_t n) {
    if (n > GRAM_MAX_ELEMS) {
        b->too_big = 1;
        return -1;
    }
    uint32_t *el = mem_malloc_array(n ? n : 1, sizeof(uint32_t));
    if (!el) {
        b->oom = 1;
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        gram_set st = {{0}};
        gram_set_add(&st, (unsigned char)s[i]);
        el[i] = gb_set_elem(b, &st);
    }
    int32_t r = gb_new_rule(b);
    gb_add_alt(b, r, el, (int32_t)n);
    xllm_free(el);
    return gb_ok(b) ? r : -1;
}

int32_t gb_bytes(gbuild *b, const gram_set *s) {
    uint32_t e = gb_set_elem(b, s);
    int32_t r = gb_new_rule(b);
    gb_add_alt(b, r, &e, 1);
    return gb_ok(b) ? r : -1;
}

int32_t gb_seq(gbuild *b, const int32_t *rules, int n) {
    if (!gb_ok(b)) return -1;
    uint32_t *el = mem_malloc_array((size_t)(n ? n : 1), sizeof(uint32_t));
    if (!el) {
        b->oom = 1;
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (rules[i] < 0) {
            xllm_free(el);
            return -1;
        }
        el[i] = gb_ref(rules[i]);
    }
    int32_t r = gb_new_rule(b);
    gb_add_alt(b, r, el, n);
    xllm_free(el);
    return gb_ok(b) ? r : -1;
}

int32_t gb_alt(gbuild *b, const int32_t *rules, int n) {
    if (!gb_ok(b)) return -1;
    int32_t r = gb_new_rule(b);
    for (int i = 0; i < n; i++) {
        if (rules[i] < 0) return -1;
        uint32_t e = gb_ref(rules[i]);
        gb_add_alt(b, r, &e, 1);
    }
    return gb_ok(b) ? r : -1;
}

int32_t gb_rep(gbuild *b, int32_t x, int min, int max) {
    if (!gb_ok(b) || x < 0) return -1;
    if (min < 0 || min > GRAM_MAX_REPEAT || max > GRAM_MAX_REPEAT)
        return gb_fail(b, "a repetition bound above %d is not supported", GRAM_MAX_REPEAT);
    if (max >= 0 && max < min) return gb_fail(b, "repetition {%d,%d}: the upper bound is below the lower", min, max);
    int32_t tail;
    if (max < 0) { /* S ::= x S | empty */
        tail = gb_new_rule(b);
        uint32_t el[2] = {gb_ref(x), gb_ref(tail)};
        gb_add_alt(b, tail, el, 2);
        gb_add_alt(b, tail, NULL, 0);
    } else { /* O_k ::= x O_{k-1} | empty, O_0 = empty */
        tail = -1;
        for (int k = 1; k <= max - min && gb_ok(b); k++) {
            int32_t o = gb_new_rule(b);
            uint32_t el[2] = {gb_ref(x), tail >= 0 ? gb_ref(tail) : 0};
            gb_add_alt(b, o, el, tail >= 0 ? 2 : 1);
            gb_add_alt(b, o, NULL, 0);
            tail = o;
        }
    }
    if (!gb_ok(b)) return -1;
    int n = min + (tail >= 0);
    uint32_t *el = mem_malloc_array((size_t)(n ? n : 1), sizeof(uint32_t));
    if (!el) {
        b->oom = 1;
        return -1;
    }
    for (int i = 0; i < min; i++) el[i] = gb_ref(x);
    if (tail >= 0) el[min] = gb_ref(tail);
    int32_t r = gb_new_rule(b);
    gb_add_alt(b, r, el, n);
    xllm_free(el);
    return gb_ok(b) ? r : -1;
}

/* -------------------------------------------------------------- finish */

static const char *rule_label(const gbuild *b, int32_t r, char *buf, size_t n) {
    if (b->rules[r].name) return b->rules[r].name;
    snprintf(buf, n, "#%d", (int)r);
    return buf;
}

/* Rules reachable through left corners (after nullable prefixes) must not
 * lead back to themselves. */
static int check_left_recursion(gbuild *b) {
    const int32_t R = b->n_rules;
    uint8_t *nullable = mem_calloc((size_t)R + 1, 1);
    uint8_t *color = mem_calloc((size_t)R + 1, 1);
    int32_t *stack = mem_malloc_array((size_t)R + 1, 3 * sizeof(int32_t));
    if (!nullable || !color || !stack) {
        b->oom = 1;
        xllm_free(nullable), xllm_free(color), xllm_free(stack);
        return -1;
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int32_t r = 0; r < R; r++) {
            if (nullable[r]) continue;
            for (int32_t a = 0; a < b->rules[r].n && !nullable[r]; a++) {
                const gb_altv *al = &b->rules[r].alts[a];
                int32_t i = 0;
                while (i < al->n && GE_KIND(al->el[i]) == GE_RULE && nullable[GE_ARG(al->el[i])]) i++;
                if (i == al->n) nullable[r] = 1, changed = 1;
            }
        }
    }
    /* iterative DFS over left-corner edges; the stack holds (rule, alternative,
     * position): the next left corner to look at, so each edge is seen once */
    int rc = 0;
    for (int32_t s0 = 0; s0 < R && !rc; s0++) {
        if (color[s0]) continue;
        int32_t sp = 1;
        stack[0] = s0, stack[1] = 0, stack[2] = 0;
        color[s0] = 1;
        while (sp > 0 && !rc) {
            int32_t *top = stack + 3 * (sp - 1);
            int32_t r = top[0], a = top[1], i = top[2];
            if (a >= b->rules[r].n) {
                color[r] = 2;
                sp--;
                continue;
            }
            const gb_altv *al = &b->rules[r].alts[a];
            if (i >= al->n || GE_KIND(al->el[i]) != GE_RULE) { /* this alternative's left corners are done */
                top[1] = a + 1, top[2] = 0;
                continue;
            }
            int32_t target = (int32_t)GE_ARG(al->el[i]);
            if (nullable[target]) top[2] = i + 1; /* the next element is a left corner too */
            else top[1] = a + 1, top[2] = 0;
            if (color[target] == 1) {
                char lb[32];
                gb_fail(b, "rule %s is left recursive (not supported: rewrite it with repetition)",
                        rule_label(b, target, lb, sizeof lb));
                rc = -1;
            } else if (!color[target]) {
                color[target] = 1;
                int32_t *nt = stack + 3 * sp;
                nt[0] = target, nt[1] = 0, nt[2] = 0;
                sp++;
            }
        }
    }
    xllm_free(nullable), xllm_free(color), xllm_free(stack);
    return rc;
}

/* A rule that is one alternative of byte classes only (inlined where used). */
static int is_leaf(const gbuild *b, int32_t r) {
    if (b->rules[r].n != 1 || b->rules[r].alts[0].n > 64) return 0;
    const gb_altv *a = &b->rules[r].alts[0];
    for (int32_t i = 0; i < a->n; i++)
        if (GE_KIND(a->el[i]) != GE_CHARS) return 0;
    return 1;
}

/* Splice leaf rules into the alternatives that use them, to a fixpoint. */
static void inline_leaves(gbuild *b) {
    for (int round = 0; round < 8; round++) {
        int changed = 0;
        for (int32_t r = 0; r < b->n_rules && gb_ok(b); r++) {
            for (int32_t a = 0; a < b->rules[r].n; a++) {
                gb_altv *al = &b->rules[r].alts[a];
                int32_t add = 0, any = 0;
                for (int32_t i = 0; i < al->n; i++) {
                    uint32_t e = al->el[i];
                    if (GE_KIND(e) == GE_RULE && (int32_t)GE_ARG(e) != r && is_leaf(b, (int32_t)GE_ARG(e))) {
                        add += b->rules[GE_ARG(e)].alts[0].n - 1;
                        any = 1;
                    }
                }
                if (!any) continue;
                int32_t n = al->n + add;
                uint32_t *el = mem_malloc_array((size_t)(n ? n : 1), sizeof(uint32_t));
                if (!el) {
                    b->oom = 1;
                    return;
                }
                int32_t k = 0;
                for (int32_t i = 0; i < al->n; i++) {
                    uint32_t e = al->el[i];
                    if (GE_KIND(e) == GE_RULE && (int32_t)GE_ARG(e) != r && is_leaf(b, (int32_t)GE_ARG(e))) {
                        const gb_altv *la = &b->rules[GE_ARG(e)].alts[0];
                        memcpy(el + k, la->el, (size_t)la->n * sizeof(uint32_t));
                        k += la->n;
                    } else {
                        el[k++] = e;
                    }
                }
                b->n_elems += add;
                xllm_free(al->el);
                al->el = el;
                al->n = al->cap = n;
                changed = 1;
            }
        }
        if (b->n_elems > (int64_t)GRAM_MAX_ELEMS) b->too_big = 1;
        if (!changed || !gb_ok(b)) break;
    }
}

static xllm_status finish_error(gbuild *b) {
    if (b->oom) return err_setf(b->err, XLLM_ERR_OUT_OF_MEMORY, "grammar: out of memory");
    if (b->too_big && !b->failed)
        return err_setf(b->err, XLLM_ERR_INVALID_ARGUMENT, "grammar: the constraint expands to more than %u elements",
                           (unsigned)GRAM_MAX_ELEMS);
    return err_setf(b->err, XLLM_ERR_INVALID_ARGUMENT, "%s", b->msg[0] ? b->msg : "grammar: invalid constraint");
}

xllm_status gb_finish(gbuild *b, int32_t root, gram **out) {
    *out = NULL;
    if (!gb_ok(b) || root < 0) return finish_error(b);
    for (int32_t r = 0; r < b->n_rules; r++)
        if (!b->rules[r].defined) {
            char lb[32];
            gb_fail(b, "rule %s is used but never defined", rule_label(b, r, lb, sizeof lb));
            return finish_error(b);
        }
    if (check_left_recursion(b)) return finish_error(b);
    inline_leaves(b);
    if (!gb_ok(b)) return finish_error(b);
    gram *g = mem_calloc(1, sizeof *g);
    int64_t n_alts = 0, n_el = 0;
    for (int32_t r = 0; r < b->n_rules; r++) {
        n_alts += b->rules[r].n;
        for (int32_t a = 0; a < b->rules[r].n; a++) n_el += b->rules[r].alts[a].n + 1;
    }
    if (n_el + 1 > (int64_t)GRAM_MAX_ELEMS * 2) {
        xllm_free(g);
        b->too_big = 1;
        return finish_error(b);
    }
    if (g) {
        g->el = mem_malloc_array((size_t)n_el + 2, sizeof(uint32_t));
        g->alts = mem_malloc_array((size_t)n_alts + 1, sizeof(int32_t));
        g->alt_off = mem_malloc_array((size_t)b->n_rules + 1, sizeof(int32_t));
        g->sets = mem_malloc_array((size_t)b->n_sets + 1, sizeof(gram_set));
    }
    if (!g || !g->el || !g->alts || !g->alt_off || !g->sets) {
        gram_free(g);
        b->oom = 1;
        return finish_error(b);
    }
    int32_t k = 0, na = 0;
    for (int32_t r = 0; r < b->n_rules; r++) {
        g->alt_off[r] = na;
        for (int32_t a = 0; a < b->rules[r].n; a++) {
            const gb_altv *al = &b->rules[r].alts[a];
            g->alts[na++] = k;
            memcpy(g->el + k, al->el, (size_t)al->n * sizeof(uint32_t));
            k += al->n;
            g->el[k++] = GE_MAKE(GE_END, r);
        }
    }
    g->alt_off[b->n_rules] = na;
    g->el[k] = GE_MAKE(GE_END, 0); /* a guard: position after the last END */
    g->n_el = k;
    g->n_rules = b->n_rules;
    if (b->n_sets) memcpy(g->sets, b->sets, (size_t)b->n_sets * sizeof(gram_set));
    g->n_sets = b->n_sets;
    g->root = root;
    g->tc_rule = mem_malloc_array((size_t)k + 1, sizeof(int32_t));
    if (!g->tc_rule) {
        gram_free(g);
        b->oom = 1;
        return finish_error(b);
    }
    for (int32_t i = 0; i <= k; i++) g->tc_rule[i] = -1;
    for (int32_t r = 0; r < b->n_rules; r++)
        if (b->rules[r].textchar)
            for (int32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) g->tc_rule[g->alts[a]] = r;
    *out = g;
    return XLLM_OK;
}

void gram_free(gram *g) {
    if (!g) return;
    xllm_free(g->el);
    xllm_free(g->alts);
    xllm_free(g->alt_off);
    xllm_free(g->sets);
    xllm_free(g->tc_rule);
    xllm_free(g);
}

int gram_n_rules(const gram *g) { return g ? g->n_rules : 0; }

/* ------------------------------------------------------------ compile */

xllm_status gram_compile(int kind, const char *text, const char *prefix, const char *suffix, gram **out,
                         xllm_error *err) {
    *out = NULL;
    size_t len = text ? strlen(text) : 0;
    if (len > GRAM_MAX_TEXT)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "the grammar text is %zu bytes; at most %u", len,
                           (unsigned)GRAM_MAX_TEXT);
    if ((prefix && strlen(prefix) > GRAM_MAX_AFFIX) || (suffix && strlen(suffix) > GRAM_MAX_AFFIX))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "grammar_prefix / grammar_suffix: at most %d bytes",
                           GRAM_MAX_AFFIX);
    if (kind != XLLM_GRAMMAR_JSON_OBJECT && !text)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "grammar_kind %d needs the grammar text (it is NULL)", kind);
    gbuild b;
    gb_init(&b, err);
    int32_t root;
    switch (kind) {
    case XLLM_GRAMMAR_JSON_SCHEMA: root = gram_front_json_schema(&b, text, len); break;
    case XLLM_GRAMMAR_JSON_OBJECT: root = gram_front_json_object(&b); break;
    case XLLM_GRAMMAR_GBNF: root = gram_front_gbnf(&b, text, len); break;
    case XLLM_GRAMMAR_REGEX: root = gram_front_regex(&b, text, len, 0); break;
    default:
        gb_free(&b);
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "unknown grammar_kind %d", kind);
    }
    if ((prefix && *prefix) || (suffix && *suffix)) {
        int32_t parts[3] = {gb_lit(&b, prefix ? prefix : "", prefix ? strlen(prefix) : 0), root,
                            gb_lit(&b, suffix ? suffix : "", suffix ? strlen(suffix) : 0)};
        root = gb_seq(&b, parts, 3);
    }
    /* the root as one rule of its own, so a start state has no continuation */
    xllm_status st = gb_finish(&b, root, out);
    gb_free(&b);
    return st;
}
