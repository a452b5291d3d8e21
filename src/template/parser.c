/*
 * parser.c - tokens to an AST, with Jinja2's grammar and precedence.
 *
 * A recursive-descent parser that mirrors jinja2/parser.py function for
 * function (parse_tuple, parse_condexpr, parse_or ... parse_unary,
 * parse_primary, parse_postfix, parse_filter_expr), so precedence quirks come
 * out the same: filters and `is` tests bind tighter than any operator, `~`
 * binds tighter than + and -, ** is left-associative, `-x|abs` is abs(-x).
 * Filter and test names are resolved here, as Jinja2 does at compile time, so
 * an unknown one is an error even on a branch that never runs.
 */
#include "template/tpl.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct ps {
    tpl_template *t;
    const token *tk;
    size_t n, i;
    xllm_error *err;
    int depth;
    int loop_depth;
    node *macro;
    int failed;
} ps;

typedef struct nvec {
    node **v;
    size_t n, cap;
} nvec;

static int pfail(ps *p, xllm_status code, int line, const char *fmt, ...) XLLM_PRINTF(4, 5);
static int pfail(ps *p, xllm_status code, int line, const char *fmt, ...) {
    if (p->failed) return -1;
    p->failed = 1;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err_setf(p->err, code, "chat template line %d: %s", line, msg);
    return -1;
}

static const token *cur(ps *p) { return &p->tk[p->i]; }
static const token *look(ps *p) { return &p->tk[p->i + 1 < p->n ? p->i + 1 : p->i]; }
static void adv(ps *p) { if (p->i + 1 < p->n) p->i++; }

static int is_op(const token *t, const char *op) {
    return t->t == T_OP && t->len == strlen(op) && !memcmp(t->s, op, t->len);
}
static int is_name(const token *t, const char *name) {
    return t->t == T_NAME && t->len == strlen(name) && !memcmp(t->s, name, t->len);
}

static const char *describe(const token *t, char *buf, size_t cap) {
    switch (t->t) {
    case T_DATA: return "template data";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "end of print statement";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "end of statement block";
    case T_EOF: return "end of template";
    case T_STRING: return "string";
    case T_INT: return "integer";
    case T_FLOAT: return "float";
    default: snprintf(buf, cap, "'%.*s'", (int)(t->len > 40 ? 40 : t->len), t->s); return buf;
    }
}

static int unexpected(ps *p, const char *expected) {
    char b[64];
    if (expected) return pfail(p, XLLM_ERR_FORMAT, cur(p)->line, "expected %s, got %s", expected, describe(cur(p), b, sizeof b));
    return pfail(p, XLLM_ERR_FORMAT, cur(p)->line, "unexpected %s", describe(cur(p), b, sizeof b));
}

static int expect_op(ps *p, const char *op) {
    if (!is_op(cur(p), op)) {
        char e[16];
        snprintf(e, sizeof e, "'%s'", op);
        return unexpected(p, e);
    }
    adv(p);
    return 0;
}

static int expect_type(ps *p, tok_type t, const char *what) {
    if (cur(p)->t != t) return unexpected(p, what);
    adv(p);
    return 0;
}

static node *mk(ps *p, node_kind k, int line) {
    node *n = tpl_alloc(&p->t->arena, sizeof *n);
    if (!n) {
        pfail(p, XLLM_ERR_OUT_OF_MEMORY, line, "out of memory");
        return NULL;
    }
    memset(n, 0, sizeof *n);
    n->k = k;
    n->line = line;
    return n;
}

static int vpush(ps *p, nvec *v, node *x) {
    if (v->n == v->cap && tpl_arena_grow(&p->t->arena, &v->v, v->n, &v->cap, sizeof *v->v, 4))
        return pfail(p, XLLM_ERR_OUT_OF_MEMORY, cur(p)->line, "out of memory");
    v->v[v->n++] = x;
    return 0;
}

static char *tok_str(ps *p, const token *t) {
    char *s = tpl_alloc(&p->t->arena, t->len + 1);
    if (!s) {
        pfail(p, XLLM_ERR_OUT_OF_MEMORY, t->line, "out of memory");
        return NULL;
    }
    memcpy(s, t->s, t->len);
    s[t->len] = 0;
    return s;
}

/* ------------------------------------------------------------ expressions */

static node *parse_expression(ps *p, int with_condexpr);
static node *parse_tuple(ps *p, int simplified, int with_condexpr, const char *extra_end, int explicit_parens);
static node *parse_unary(ps *p, int with_filter);
static node *parse_primary(ps *p);
static node *parse_postfix(ps *p, node *n);
static node *parse_filter_expr(ps *p, node *n);
static node *parse_filter(ps *p, node *n, int start_inline);
static node *parse_or(ps *p);

static int enter(ps *p) {
    if (++p->depth > TPL_MAX_DEPTH) return pfail(p, XLLM_ERR_UNSUPPORTED, cur(p)->line, "template nested too deeply");
    return 0;
}

static node *parse_condexpr(ps *p) {
    int line = cur(p)->line;
    node *e1 = NULL;
    if (enter(p)) return NULL;
    e1 = parse_or(p);
    while (e1 && is_name(cur(p), "if")) {
        adv(p);
        node *cond = parse_or(p), *e3 = NULL;
        if (!cond) return NULL;
        if (is_name(cur(p), "else")) {
            adv(p);
            e3 = parse_condexpr(p);
            if (!e3) return NULL;
        }
        node *n = mk(p, E_COND, line);
        if (!n) return NULL;
        n->a = cond;
        n->b = e1;
        n->c = e3;
        e1 = n;
    }
    p->depth--;
    return e1;
}

static node *parse_expression(ps *p, int with_condexpr) {
    if (with_condexpr) return parse_condexpr(p);
    return parse_or(p);
}

static node *parse_math1(ps *p);

static node *parse_compare(ps *p) {
    int line = cur(p)->line;
    node *first = parse_math1(p);
    if (!first) return NULL;
    nvec operands = {0};
    int ops[64];
    size_t nops = 0;
    for (;;) {
        const token *t = cur(p);
        int op = 0;
        if (is_op(t, "==")) op = OP_EQ;
        else if (is_op(t, "!=")) op = OP_NE;
        else if (is_op(t, "<")) op = OP_LT;
        else if (is_op(t, "<=")) op = OP_LE;
        else if (is_op(t, ">")) op = OP_GT;
        else if (is_op(t, ">=")) op = OP_GE;
        else if (is_name(t, "in")) op = OP_IN;
        else if (is_name(t, "not") && is_name(look(p), "in")) { op = OP_NOTIN; adv(p); }
        if (!op) break;
        adv(p);
        if (nops == sizeof ops / sizeof *ops) {
            pfail(p, XLLM_ERR_UNSUPPORTED, line, "too many chained comparisons");
            return NULL;
        }
        node *rhs = parse_math1(p);
        if (!rhs || vpush(p, &operands, rhs)) return NULL;
        ops[nops++] = op;
    }
    if (!nops) return first;
    node *n = mk(p, E_CMP, line);
    if (!n) return NULL;
    n->a = first;
    n->kids = operands.v;
    n->nk = operands.n;
    n->ops = tpl_alloc(&p->t->arena, nops * sizeof(int));
    if (!n->ops) { pfail(p, XLLM_ERR_OUT_OF_MEMORY, line, "out of memory"); return NULL; }
    memcpy(n->ops, ops, nops * sizeof(int));
    return n;
}

static node *parse_not(ps *p) {
    if (is_name(cur(p), "not")) {
        int line = cur(p)->line;
        adv(p);
        if (enter(p)) return NULL;
        node *x = parse_not(p);
        p->depth--;
        if (!x) return NULL;
        node *n = mk(p, E_NOT, line);
        if (n) n->a = x;
        return n;
    }
    return parse_compare(p);
}

static node *parse_and(ps *p) {
    node *l = parse_not(p);
    while (l && is_name(cur(p), "and")) {
        int line = cur(p)->line;
        adv(p);
        node *r = parse_not(p);
        if (!r) return NULL;
        node *n = mk(p, E_AND, line);
        if (!n) return NULL;
        n->a = l;
        n->b = r;
        l = n;
    }
    return l;
}

static node *parse_or(ps *p) {
    node *l = parse_and(p);
    while (l && is_name(cur(p), "or")) {
        int line = cur(p)->line;
        adv(p);
        node *r = parse_and(p);
        if (!r) return NULL;
        node *n = mk(p, E_OR, line);
        if (!n) return NULL;
        n->a = l;
        n->b = r;
        l = n;
    }
    return l;
}

static node *binop(ps *p, int op, node *l, node *r, int line) {
    if (!l || !r) return NULL;
    node *n = mk(p, E_BIN, line);
    if (!n) return NULL;
    n->op = op;
    n->a = l;
    n->b = r;
    return n;
}

static node *parse_pow(ps *p) {
    node *l = parse_unary(p, 1);
    while (l && is_op(cur(p), "**")) {
        int line = cur(p)->line;
        adv(p);
        l = binop(p, OP_POW, l, parse_unary(p, 1), line);
    }
    return l;
}

static node *parse_math2(ps *p) {
    node *l = parse_pow(p);
    for (;;) {
        if (!l) return NULL;
        int op = is_op(cur(p), "*") ? OP_MUL : is_op(cur(p), "/") ? OP_DIV : is_op(cur(p), "//") ? OP_FLOORDIV
               : is_op(cur(p), "%") ? OP_MOD : 0;
        if (!op) return l;
        int line = cur(p)->line;
        adv(p);
        l = binop(p, op, l, parse_pow(p), line);
    }
}

static node *parse_concat(ps *p) {
    node *l = parse_math2(p);
    while (l && is_op(cur(p), "~")) {
        int line = cur(p)->line;
        adv(p);
        l = binop(p, OP_CONCAT, l, parse_math2(p), line);
    }
    return l;
}

static node *parse_math1(ps *p) {
    node *l = parse_concat(p);
    for (;;) {
        if (!l) return NULL;
        int op = is_op(cur(p), "+") ? OP_ADD : is_op(cur(p), "-") ? OP_SUB : 0;
        if (!op) return l;
        int line = cur(p)->line;
        adv(p);
        l = binop(p, op, l, parse_concat(p), line);
    }
}

static node *parse_unary(ps *p, int with_filter) {
    const token *t = cur(p);
    int line = t->line;
    node *n;
    if (enter(p)) return NULL;
    if (is_op(t, "-") || is_op(t, "+")) {
        int neg = is_op(t, "-");
        adv(p);
        node *x = parse_unary(p, 0);
        if (!x) return NULL;
        n = mk(p, neg ? E_NEG : E_POS, line);
        if (!n) return NULL;
        n->a = x;
    } else {
        n = parse_primary(p);
    }
    if (n) n = parse_postfix(p, n);
    if (n && with_filter) n = parse_filter_expr(p, n);
    p->depth--;
    return n;
}

static node *parse_call_args(ps *p, node *n);

static node *parse_primary(ps *p) {
    const token *t = cur(p);
    int line = t->line;
    node *n;
    if (t->t == T_NAME) {
        static const struct { const char *w; int v; } consts[] = {
            {"true", 1}, {"True", 1}, {"false", 0}, {"False", 0}, {"none", 2}, {"None", 2}};
        for (size_t k = 0; k < sizeof consts / sizeof *consts; k++) {
            if (is_name(t, consts[k].w)) {
                adv(p);
                n = mk(p, E_CONST, line);
                if (n) n->val = consts[k].v == 2 ? tv_none() : tv_bool(consts[k].v);
                return n;
            }
        }
        n = mk(p, E_NAME, line);
        if (!n || !(n->name = tok_str(p, t))) return NULL;
        if (p->macro && !strcmp(n->name, "varargs")) p->macro->uses_varargs = 1;
        if (p->macro && !strcmp(n->name, "kwargs")) p->macro->uses_kwargs = 1;
        adv(p);
        return n;
    }
    if (t->t == T_STRING) {
        /* adjacent literals concatenate */
        size_t total = 0, k = p->i;
        while (p->tk[k].t == T_STRING) total += p->tk[k++].len;
        char *s = tpl_alloc(&p->t->arena, total + 1);
        if (!s) { pfail(p, XLLM_ERR_OUT_OF_MEMORY, line, "out of memory"); return NULL; }
        size_t off = 0;
        while (cur(p)->t == T_STRING) {
            memcpy(s + off, cur(p)->s, cur(p)->len);
            off += cur(p)->len;
            adv(p);
        }
        s[off] = 0;
        n = mk(p, E_CONST, line);
        if (n) n->val = tv_str(s, off);
        return n;
    }
    if (t->t == T_INT || t->t == T_FLOAT) {
        n = mk(p, E_CONST, line);
        if (n) n->val = t->t == T_INT ? tv_int(t->i) : tv_float(t->f);
        adv(p);
        return n;
    }
    if (is_op(t, "(")) {
        adv(p);
        n = parse_tuple(p, 0, 1, NULL, 1);
        if (!n || expect_op(p, ")")) return NULL;
        return n;
    }
    if (is_op(t, "[")) {
        adv(p);
        nvec items = {0};
        while (!is_op(cur(p), "]")) {
            if (items.n && expect_op(p, ",")) return NULL;
            if (is_op(cur(p), "]")) break;
            node *x = parse_expression(p, 1);
            if (!x || vpush(p, &items, x)) return NULL;
        }
        if (expect_op(p, "]")) return NULL;
        n = mk(p, E_LIST, line);
        if (!n) return NULL;
        n->kids = items.v;
        n->nk = items.n;
        return n;
    }
    if (is_op(t, "{")) {
        adv(p);
        nvec keys = {0}, vals = {0};
        while (!is_op(cur(p), "}")) {
            if (keys.n && expect_op(p, ",")) return NULL;
            if (is_op(cur(p), "}")) break;
            node *k = parse_expression(p, 1);
            if (!k || expect_op(p, ":")) return NULL;
            node *v = parse_expression(p, 1);
            if (!v || vpush(p, &keys, k) || vpush(p, &vals, v)) return NULL;
        }
        if (expect_op(p, "}")) return NULL;
        n = mk(p, E_DICT, line);
        if (!n) return NULL;
        n->kids = keys.v;
        n->kids2 = vals.v;
        n->nk = keys.n;
        return n;
    }
    unexpected(p, NULL);
    return NULL;
}

static int is_tuple_end(ps *p, const char *extra_end) {
    const token *t = cur(p);
    if (t->t == T_VAR_END || t->t == T_BLOCK_END || t->t == T_EOF || is_op(t, ")")) return 1;
    return extra_end && is_name(t, extra_end);
}

static node *parse_tuple(ps *p, int simplified, int with_condexpr, const char *extra_end, int explicit_parens) {
    int line = cur(p)->line;
    nvec args = {0};
    int is_tuple = 0;
    for (;;) {
        if (args.n && expect_op(p, ",")) return NULL;
        if (is_tuple_end(p, extra_end)) break;
        node *x = simplified ? parse_primary(p) : parse_expression(p, with_condexpr);
        if (!x || vpush(p, &args, x)) return NULL;
        if (is_op(cur(p), ",")) is_tuple = 1;
        else break;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens) {
            unexpected(p, "an expression");
            return NULL;
        }
    }
    node *n = mk(p, E_TUPLE, line);
    if (!n) return NULL;
    n->kids = args.v;
    n->nk = args.n;
    return n;
}

static node *parse_subscribed(ps *p) {
    int line = cur(p)->line;
    node *parts[3] = {NULL, NULL, NULL};
    if (is_op(cur(p), ":")) {
        adv(p);
    } else {
        node *x = parse_expression(p, 1);
        if (!x) return NULL;
        if (!is_op(cur(p), ":")) return x;
        adv(p);
        parts[0] = x;
    }
    if (!is_op(cur(p), ":") && !is_op(cur(p), "]") && !is_op(cur(p), ",")) {
        if (!(parts[1] = parse_expression(p, 1))) return NULL;
    }
    if (is_op(cur(p), ":")) {
        adv(p);
        if (!is_op(cur(p), "]") && !is_op(cur(p), ",")) {
            if (!(parts[2] = parse_expression(p, 1))) return NULL;
        }
    }
    node *n = mk(p, E_SLICE, line);
    if (!n) return NULL;
    n->a = parts[0];
    n->b = parts[1];
    n->c = parts[2];
    return n;
}

static node *parse_postfix(ps *p, node *n) {
    for (;;) {
        const token *t = cur(p);
        int line = t->line;
        if (is_op(t, ".")) {
            adv(p);
            const token *a = cur(p);
            node *x;
            if (a->t == T_NAME) {
                x = mk(p, E_ATTR, line);
                if (!x || !(x->name = tok_str(p, a))) return NULL;
                x->a = n;
            } else if (a->t == T_INT) {
                node *k = mk(p, E_CONST, line);
                x = mk(p, E_ITEM, line);
                if (!k || !x) return NULL;
                k->val = tv_int(a->i);
                x->a = n;
                x->b = k;
            } else {
                unexpected(p, "a name or number after '.'");
                return NULL;
            }
            adv(p);
            n = x;
        } else if (is_op(t, "[")) {
            adv(p);
            nvec args = {0};
            while (!is_op(cur(p), "]")) {
                if (args.n && expect_op(p, ",")) return NULL;
                node *x = parse_subscribed(p);
                if (!x || vpush(p, &args, x)) return NULL;
            }
            if (expect_op(p, "]")) return NULL;
            if (!args.n) { pfail(p, XLLM_ERR_FORMAT, line, "expected a subscript"); return NULL; }
            node *key = args.v[0];
            if (args.n > 1) {
                key = mk(p, E_TUPLE, line);
                if (!key) return NULL;
                key->kids = args.v;
                key->nk = args.n;
            }
            node *x = mk(p, E_ITEM, line);
            if (!x) return NULL;
            x->a = n;
            x->b = key;
            n = x;
        } else if (is_op(t, "(")) {
            n = parse_call_args(p, n);
            if (!n) return NULL;
        } else {
            return n;
        }
    }
}

/* Parses "(args)" into node n (a call, filter or test node already made) or,
 * when n is not one of those, makes a call of n. */
static node *parse_args_into(ps *p, node *n) {
    if (expect_op(p, "(")) return NULL;
    nvec args = {0}, kwv = {0};
    const char **kwn = NULL;
    size_t kwcap = 0;
    int require_comma = 0;
    while (!is_op(cur(p), ")")) {
        if (require_comma) {
            if (expect_op(p, ",")) return NULL;
            if (is_op(cur(p), ")")) break;
        }
        if (is_op(cur(p), "*") || is_op(cur(p), "**")) {
            pfail(p, XLLM_ERR_UNSUPPORTED, cur(p)->line, "*args and **kwargs in calls are not supported");
            return NULL;
        }
        if (cur(p)->t == T_NAME && is_op(look(p), "=")) {
            char *key = tok_str(p, cur(p));
            if (!key) return NULL;
            adv(p);
            adv(p);
            node *v = parse_expression(p, 1);
            if (!v) return NULL;
            if (kwv.n == kwcap && tpl_arena_grow(&p->t->arena, &kwn, kwv.n, &kwcap, sizeof *kwn, 4)) {
                pfail(p, XLLM_ERR_OUT_OF_MEMORY, cur(p)->line, "out of memory");
                return NULL;
            }
            kwn[kwv.n] = key;
            if (vpush(p, &kwv, v)) return NULL;
        } else {
            if (kwv.n) {
                pfail(p, XLLM_ERR_FORMAT, cur(p)->line, "positional argument after a keyword argument");
                return NULL;
            }
            node *v = parse_expression(p, 1);
            if (!v || vpush(p, &args, v)) return NULL;
        }
        require_comma = 1;
    }
    if (expect_op(p, ")")) return NULL;
    n->kids = args.v;
    n->nk = args.n;
    n->kwn = kwn;
    n->kwv = kwv.v;
    n->nkw = kwv.n;
    return n;
}

static node *parse_call_args(ps *p, node *callee) {
    node *n = mk(p, E_CALL, cur(p)->line);
    if (!n) return NULL;
    n->a = callee;
    return parse_args_into(p, n);
}

static char *dotted_name(ps *p) {
    const token *t = cur(p);
    if (t->t != T_NAME) {
        unexpected(p, "a name");
        return NULL;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%.*s", (int)t->len, t->s);
    adv(p);
    while (is_op(cur(p), ".")) {
        adv(p);
        if (cur(p)->t != T_NAME) {
            unexpected(p, "a name");
            return NULL;
        }
        size_t bl = strlen(buf);
        snprintf(buf + bl, sizeof buf - bl, ".%.*s", (int)cur(p)->len, cur(p)->s);
        adv(p);
    }
    size_t n = strlen(buf);
    char *s = tpl_alloc(&p->t->arena, n + 1);
    if (!s) { pfail(p, XLLM_ERR_OUT_OF_MEMORY, t->line, "out of memory"); return NULL; }
    memcpy(s, buf, n + 1);
    return s;
}

static node *parse_filter(ps *p, node *in, int start_inline) {
    while (is_op(cur(p), "|") || start_inline) {
        if (!start_inline) adv(p);
        start_inline = 0;
        int line = cur(p)->line;
        node *n = mk(p, E_FILTER, line);
        if (!n || !(n->name = dotted_name(p))) return NULL;
        n->a = in;
        n->filter = tpl_find_filter(n->name);
        if (!n->filter) {
            if (tpl_is_jinja_filter(n->name))
                pfail(p, XLLM_ERR_UNSUPPORTED, line, "filter '%s' is not supported", n->name);
            else
                pfail(p, XLLM_ERR_UNSUPPORTED, line, "unknown filter '%s'", n->name);
            return NULL;
        }
        if (is_op(cur(p), "(") && !parse_args_into(p, n)) return NULL;
        in = n;
    }
    return in;
}

static node *parse_test(ps *p, node *in) {
    int line = cur(p)->line;
    adv(p); /* 'is' */
    int negated = 0;
    if (is_name(cur(p), "not")) {
        negated = 1;
        adv(p);
    }
    node *n = mk(p, E_TEST, line);
    if (!n || !(n->name = dotted_name(p))) return NULL;
    n->a = in;
    n->test = tpl_find_test(n->name);
    if (!n->test) {
        if (tpl_is_jinja_test(n->name)) pfail(p, XLLM_ERR_UNSUPPORTED, line, "test '%s' is not supported", n->name);
        else pfail(p, XLLM_ERR_UNSUPPORTED, line, "unknown test '%s'", n->name);
        return NULL;
    }
    const token *t = cur(p);
    if (is_op(t, "(")) {
        if (!parse_args_into(p, n)) return NULL;
    } else if ((t->t == T_NAME || t->t == T_STRING || t->t == T_INT || t->t == T_FLOAT || is_op(t, "(") ||
                is_op(t, "[") || is_op(t, "{")) &&
               !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and")) {
        if (is_name(t, "is")) {
            pfail(p, XLLM_ERR_FORMAT, t->line, "you cannot chain multiple tests with is");
            return NULL;
        }
        node *arg = parse_primary(p);
        if (!arg || !(arg = parse_postfix(p, arg))) return NULL;
        n->kids = tpl_alloc(&p->t->arena, sizeof(node *));
        if (!n->kids) { pfail(p, XLLM_ERR_OUT_OF_MEMORY, line, "out of memory"); return NULL; }
        n->kids[0] = arg;
        n->nk = 1;
    }
    if (negated) {
        node *x = mk(p, E_NOT, line);
        if (!x) return NULL;
        x->a = n;
        n = x;
    }
    return n;
}

static node *parse_filter_expr(ps *p, node *n) {
    for (;;) {
        if (!n) return NULL;
        if (is_op(cur(p), "|")) n = parse_filter(p, n, 0);
        else if (is_name(cur(p), "is")) n = parse_test(p, n);
        else if (is_op(cur(p), "(")) n = parse_call_args(p, n);
        else return n;
    }
}

/* ------------------------------------------------------------- statements */

static node *subparse(ps *p, const char *const *end_names, size_t nend);

static int expect_block_end(ps *p) { return expect_type(p, T_BLOCK_END, "end of statement block"); }

static int check_target(ps *p, node *t) {
    if (t->k == E_NAME) {
        if (!strcmp(t->name, "loop") || !strcmp(t->name, "self")) {}
        return 0;
    }
    if (t->k == E_TUPLE) {
        for (size_t i = 0; i < t->nk; i++)
            if (check_target(p, t->kids[i])) return -1;
        return 0;
    }
    return pfail(p, XLLM_ERR_FORMAT, t->line, "can't assign to this expression");
}

static node *parse_assign_target(ps *p, const char *extra_end, int with_namespace) {
    int line = cur(p)->line;
    if (with_namespace && cur(p)->t == T_NAME && is_op(look(p), ".")) {
        node *ns = mk(p, E_NAME, line);
        if (!ns || !(ns->name = tok_str(p, cur(p)))) return NULL;
        adv(p);
        adv(p);
        if (cur(p)->t != T_NAME) {
            unexpected(p, "an attribute name");
            return NULL;
        }
        node *n = mk(p, E_ATTR, line);
        if (!n || !(n->name = tok_str(p, cur(p)))) return NULL;
        adv(p);
        n->a = ns;
        return n;
    }
    node *t = parse_tuple(p, 1, 1, extra_end, 0);
    if (!t || check_target(p, t)) return NULL;
    return t;
}

static node *parse_body_until(ps *p, const char *end1, const char *end2, const char *end3) {
    const char *ends[3];
    size_t n = 0;
    if (end1) ends[n++] = end1;
    if (end2) ends[n++] = end2;
    if (end3) ends[n++] = end3;
    return subparse(p, ends, n);
}

/* After subparse stopped at an end name: consume it and the block end. */
static int end_tag(ps *p) {
    adv(p);
    return expect_block_end(p);
}

static node *parse_if(ps *p, int line) {
    node *top = mk(p, S_IF, line), *n = top;
    if (!n) return NULL;
    for (;;) {
        n->a = parse_tuple(p, 0, 0, NULL, 0);
        if (!n->a || expect_block_end(p)) return NULL;
        n->b = parse_body_until(p, "elif", "else", "endif");
        if (!n->b) return NULL;
        if (is_name(cur(p), "elif")) {
            int l2 = cur(p)->line;
            adv(p);
            node *e = mk(p, S_IF, l2);
            if (!e) return NULL;
            n->c = e;
            n = e;
            continue;
        }
        if (is_name(cur(p), "else")) {
            if (end_tag(p)) return NULL;
            n->c = parse_body_until(p, "endif", NULL, NULL);
            if (!n->c) return NULL;
        }
        if (end_tag(p)) return NULL;
        return top;
    }
}

static node *parse_for(ps *p, int line) {
    node *n = mk(p, S_FOR, line);
    if (!n) return NULL;
    n->a = parse_assign_target(p, "in", 0);
    if (!n->a) return NULL;
    if (!is_name(cur(p), "in")) {
        unexpected(p, "'in'");
        return NULL;
    }
    adv(p);
    n->b = parse_tuple(p, 0, 0, "recursive", 0);
    if (!n->b) return NULL;
    if (is_name(cur(p), "if")) {
        adv(p);
        n->c = parse_expression(p, 1);
        if (!n->c) return NULL;
    }
    if (is_name(cur(p), "recursive")) {
        n->op = 1;
        adv(p);
    }
    if (expect_block_end(p)) return NULL;
    p->loop_depth++;
    n->d = parse_body_until(p, "endfor", "else", NULL);
    p->loop_depth--;
    if (!n->d) return NULL;
    if (is_name(cur(p), "else")) {
        if (end_tag(p)) return NULL;
        n->e = parse_body_until(p, "endfor", NULL, NULL);
        if (!n->e) return NULL;
    }
    if (end_tag(p)) return NULL;
    return n;
}

static node *parse_set(ps *p, int line) {
    node *target = parse_assign_target(p, NULL, 1);
    if (!target) return NULL;
    if (is_op(cur(p), "=")) {
        adv(p);
        node *n = mk(p, S_SET, line);
        if (!n) return NULL;
        n->a = target;
        n->b = parse_tuple(p, 0, 1, NULL, 0);
        if (!n->b || expect_block_end(p)) return NULL;
        return n;
    }
    node *n = mk(p, S_SETBLOCK, line);
    if (!n) return NULL;
    n->a = target;
    if (is_op(cur(p), "|")) {
        n->c = parse_filter(p, NULL, 0);
        if (!n->c) return NULL;
    }
    if (expect_block_end(p)) return NULL;
    n->b = parse_body_until(p, "endset", NULL, NULL);
    if (!n->b || end_tag(p)) return NULL;
    return n;
}

static node *parse_macro(ps *p, int line) {
    node *n = mk(p, S_MACRO, line);
    if (!n) return NULL;
    if (cur(p)->t != T_NAME) {
        unexpected(p, "a macro name");
        return NULL;
    }
    if (!(n->name = tok_str(p, cur(p)))) return NULL;
    adv(p);
    if (expect_op(p, "(")) return NULL;
    nvec params = {0}, defaults = {0};
    int seen_default = 0;
    while (!is_op(cur(p), ")")) {
        if (params.n && expect_op(p, ",")) return NULL;
        if (cur(p)->t != T_NAME) {
            unexpected(p, "a parameter name");
            return NULL;
        }
        node *pn = mk(p, E_NAME, cur(p)->line);
        if (!pn || !(pn->name = tok_str(p, cur(p)))) return NULL;
        adv(p);
        node *def = NULL;
        if (is_op(cur(p), "=")) {
            adv(p);
            if (!(def = parse_expression(p, 1))) return NULL;
            seen_default = 1;
        } else if (seen_default) {
            pfail(p, XLLM_ERR_FORMAT, pn->line, "non-default argument follows default argument");
            return NULL;
        }
        if (vpush(p, &params, pn) || vpush(p, &defaults, def)) return NULL;
    }
    if (expect_op(p, ")") || expect_block_end(p)) return NULL;
    n->kids = params.v;
    n->kids2 = defaults.v;
    n->nk = params.n;
    node *outer = p->macro;
    int outer_loops = p->loop_depth;
    p->macro = n;
    p->loop_depth = 0;
    n->b = parse_body_until(p, "endmacro", NULL, NULL);
    p->macro = outer;
    p->loop_depth = outer_loops;
    if (!n->b || end_tag(p)) return NULL;
    return n;
}

static node *parse_filter_block(ps *p, int line) {
    node *n = mk(p, S_FILTERBLOCK, line);
    if (!n) return NULL;
    n->a = parse_filter(p, NULL, 1);
    if (!n->a || expect_block_end(p)) return NULL;
    n->b = parse_body_until(p, "endfilter", NULL, NULL);
    if (!n->b || end_tag(p)) return NULL;
    return n;
}

static node *parse_with(ps *p, int line) {
    node *n = mk(p, S_WITH, line);
    if (!n) return NULL;
    nvec targets = {0}, values = {0};
    while (cur(p)->t != T_BLOCK_END) {
        if (targets.n && expect_op(p, ",")) return NULL;
        node *t = parse_assign_target(p, NULL, 0);
        if (!t || expect_op(p, "=")) return NULL;
        node *v = parse_expression(p, 1);
        if (!v || vpush(p, &targets, t) || vpush(p, &values, v)) return NULL;
    }
    if (expect_block_end(p)) return NULL;
    n->kids = targets.v;
    n->kids2 = values.v;
    n->nk = targets.n;
    n->b = parse_body_until(p, "endwith", NULL, NULL);
    if (!n->b || end_tag(p)) return NULL;
    return n;
}

static node *parse_statement(ps *p) {
    const token *t = cur(p);
    int line = t->line;
    if (t->t != T_NAME) {
        unexpected(p, "a tag name");
        return NULL;
    }
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(t->len < 60 ? t->len : 60), t->s);
    adv(p);
    if (enter(p)) return NULL;
    node *n = NULL;
    if (!strcmp(name, "if")) n = parse_if(p, line);
    else if (!strcmp(name, "for")) n = parse_for(p, line);
    else if (!strcmp(name, "set")) n = parse_set(p, line);
    else if (!strcmp(name, "macro")) n = parse_macro(p, line);
    else if (!strcmp(name, "filter")) n = parse_filter_block(p, line);
    else if (!strcmp(name, "with")) n = parse_with(p, line);
    else if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        if (!p->loop_depth) {
            pfail(p, XLLM_ERR_FORMAT, line, "'%s' outside a loop", name);
            return NULL;
        }
        n = mk(p, name[0] == 'b' ? S_BREAK : S_CONTINUE, line);
        if (n && expect_block_end(p)) return NULL;
    } else if (!strcmp(name, "generation")) {
        /* HuggingFace's AssistantTracker: marks assistant text, renders as is */
        if (expect_block_end(p)) return NULL;
        n = mk(p, S_GENERATION, line);
        if (!n) return NULL;
        n->b = parse_body_until(p, "endgeneration", NULL, NULL);
        if (!n->b || end_tag(p)) return NULL;
    } else {
        static const char *const unsupported[] = {"include", "extends", "block", "import", "from", "call",
                                                  "autoescape", "do", "trans", "pluralize", "cycle"};
        for (size_t k = 0; k < sizeof unsupported / sizeof *unsupported; k++)
            if (!strcmp(name, unsupported[k])) {
                pfail(p, XLLM_ERR_UNSUPPORTED, line, "the '%s' tag is not supported", name);
                return NULL;
            }
        if (!strncmp(name, "end", 3) || !strcmp(name, "else") || !strcmp(name, "elif"))
            pfail(p, XLLM_ERR_FORMAT, line, "unexpected '%s' (no block is open that it could close)", name);
        else
            pfail(p, XLLM_ERR_FORMAT, line, "unknown tag '%s'", name);
        return NULL;
    }
    p->depth--;
    return n;
}

/* Statements until `{% <end name>` (left at that name) or, with no end names,
 * the end of the template. */
static node *subparse(ps *p, const char *const *end_names, size_t nend) {
    node *body = mk(p, S_BODY, cur(p)->line);
    if (!body) return NULL;
    nvec st = {0};
    for (;;) {
        const token *t = cur(p);
        if (t->t == T_EOF) {
            if (nend) {
                char want[96] = "";
                for (size_t k = 0; k < nend; k++) {
                    size_t l = strlen(want);
                    snprintf(want + l, sizeof want - l, "%s'%s'", k ? " or " : "", end_names[k]);
                }
                pfail(p, XLLM_ERR_FORMAT, t->line, "unexpected end of template; expected %s", want);
                return NULL;
            }
            break;
        }
        node *n = NULL;
        if (t->t == T_DATA) {
            n = mk(p, S_DATA, t->line);
            if (!n) return NULL;
            n->val = tv_str(t->s, t->len);
            adv(p);
        } else if (t->t == T_VAR_BEGIN) {
            adv(p);
            n = mk(p, S_OUT, t->line);
            if (!n) return NULL;
            n->a = parse_tuple(p, 0, 1, NULL, 0);
            if (!n->a || expect_type(p, T_VAR_END, "end of print statement")) return NULL;
        } else if (t->t == T_BLOCK_BEGIN) {
            adv(p);
            for (size_t k = 0; k < nend; k++)
                if (is_name(cur(p), end_names[k])) goto done;
            n = parse_statement(p);
            if (!n) return NULL;
        } else {
            unexpected(p, NULL);
            return NULL;
        }
        if (vpush(p, &st, n)) return NULL;
    }
done:
    body->kids = st.v;
    body->nk = st.n;
    return body;
}

int tpl_parse(tpl_template *t, const token *toks, size_t ntoks, xllm_error *err) {
    ps p;
    memset(&p, 0, sizeof p);
    p.t = t;
    p.tk = toks;
    p.n = ntoks;
    p.err = err;
    t->root = subparse(&p, NULL, 0);
    return t->root ? 0 : -1;
}
