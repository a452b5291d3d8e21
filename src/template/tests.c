/*
 * tests.c - Jinja2's tests (`value is name`, `value is name(arg)`,
 * `value is name arg`), with Python's notions of type: bool is a number but
 * not an integer, a dict is a sequence, Undefined is iterable and callable.
 */
#include "template/tpl.h"

#include <stdio.h>
#include <string.h>

#define TEST(name) static int name(tpl_ctx *c, const tv *v, const tpl_args *a, int *res)

static int one_arg(tpl_ctx *c, const char *what, const tpl_args *a, tv *arg) {
    static const char *const names[] = {"other"};
    if (tpl_bind(c, what, a, names, 1, arg)) return -1;
    if (arg->kind == TV_MISSING) return tpl_fail(c, XLLM_ERR_FORMAT, "test '%s' needs an argument", what);
    return 0;
}

static int no_arg(tpl_ctx *c, const char *what, const tpl_args *a) { return tpl_bind(c, what, a, NULL, 0, NULL); }

TEST(t_defined) { *res = v->kind != TV_UNDEF && v->kind != TV_MISSING; return no_arg(c, "defined", a); }
TEST(t_undefined) { *res = v->kind == TV_UNDEF || v->kind == TV_MISSING; return no_arg(c, "undefined", a); }
TEST(t_none) { *res = v->kind == TV_NONE; return no_arg(c, "none", a); }
TEST(t_boolean) { *res = v->kind == TV_BOOL; return no_arg(c, "boolean", a); }
TEST(t_true) { *res = v->kind == TV_BOOL && v->u.b; return no_arg(c, "true", a); }
TEST(t_false) { *res = v->kind == TV_BOOL && !v->u.b; return no_arg(c, "false", a); }
TEST(t_integer) { *res = v->kind == TV_INT; return no_arg(c, "integer", a); }
TEST(t_float) { *res = v->kind == TV_FLOAT; return no_arg(c, "float", a); }
TEST(t_number) { *res = tv_is_number(v); return no_arg(c, "number", a); }
TEST(t_string) { *res = v->kind == TV_STR; return no_arg(c, "string", a); }
TEST(t_mapping) { *res = v->kind == TV_DICT && v->u.d->kind == D_DICT; return no_arg(c, "mapping", a); }
TEST(t_escaped) { (void)v; *res = 0; return no_arg(c, "escaped", a); }

TEST(t_sequence) {
    switch (v->kind) {
    case TV_UNDEF: case TV_MISSING: case TV_STR: *res = 1; break;
    case TV_LIST: *res = v->u.l->kind == L_LIST || v->u.l->kind == L_TUPLE || v->u.l->kind == L_RANGE; break;
    case TV_DICT: *res = v->u.d->kind == D_DICT; break;
    default: *res = 0;
    }
    return no_arg(c, "sequence", a);
}

TEST(t_iterable) {
    switch (v->kind) {
    case TV_UNDEF: case TV_MISSING: case TV_STR: case TV_LIST: *res = 1; break;
    case TV_DICT: *res = v->u.d->kind != D_NAMESPACE; break;
    default: *res = 0;
    }
    return no_arg(c, "iterable", a);
}

TEST(t_callable) {
    *res = v->kind == TV_FUNC || v->kind == TV_UNDEF || (v->kind == TV_DICT && v->u.d->kind == D_LOOP);
    return no_arg(c, "callable", a);
}

static int cmp_test(tpl_ctx *c, const char *what, int op, const tv *v, const tpl_args *a, int *res) {
    tv o;
    if (one_arg(c, what, a, &o)) return -1;
    return tpl_compare(c, op, v, &o, res);
}
TEST(t_eq) { return cmp_test(c, "eq", OP_EQ, v, a, res); }
TEST(t_ne) { return cmp_test(c, "ne", OP_NE, v, a, res); }
TEST(t_lt) { return cmp_test(c, "lt", OP_LT, v, a, res); }
TEST(t_le) { return cmp_test(c, "le", OP_LE, v, a, res); }
TEST(t_gt) { return cmp_test(c, "gt", OP_GT, v, a, res); }
TEST(t_ge) { return cmp_test(c, "ge", OP_GE, v, a, res); }
TEST(t_in) { return cmp_test(c, "in", OP_IN, v, a, res); }

static int mod_test(tpl_ctx *c, const tv *v, const tv *m, int64_t want, int *res) {
    tv r, w = tv_int(want);
    if (tpl_binop(c, OP_MOD, v, m, &r)) return -1;
    return tv_eq(c, &r, &w, res);
}
TEST(t_odd) { tv two = tv_int(2); return no_arg(c, "odd", a) || mod_test(c, v, &two, 1, res) ? -1 : 0; }
TEST(t_even) { tv two = tv_int(2); return no_arg(c, "even", a) || mod_test(c, v, &two, 0, res) ? -1 : 0; }
TEST(t_divisibleby) {
    static const char *const names[] = {"num"};
    tv n;
    if (tpl_bind(c, "divisibleby", a, names, 1, &n)) return -1;
    if (n.kind == TV_MISSING) return tpl_fail(c, XLLM_ERR_FORMAT, "test 'divisibleby' needs an argument");
    return mod_test(c, v, &n, 0, res);
}

static int case_test(tpl_ctx *c, const tv *v, const tpl_args *a, int upper, int *res) {
    tv s, r;
    if (no_arg(c, upper ? "upper" : "lower", a) || tv_stringify(c, v, &s)) return -1;
    if (tpl_method(c, &s, upper ? "isupper" : "islower", 7, &r)) return -1;
    tpl_args none = {NULL, 0, NULL, NULL, 0};
    tv b;
    if (tpl_call(c, &r, &none, &b)) return -1;
    *res = b.u.b;
    return 0;
}
TEST(t_lower) { return case_test(c, v, a, 0, res); }
TEST(t_upper) { return case_test(c, v, a, 1, res); }

TEST(t_sameas) {
    tv o;
    if (one_arg(c, "sameas", a, &o)) return -1;
    if (v->kind != o.kind) *res = 0;
    else switch (v->kind) {
        case TV_NONE: case TV_UNDEF: *res = v->kind == TV_NONE; break;
        case TV_BOOL: *res = v->u.b == o.u.b; break;
        case TV_INT: *res = v->u.i == o.u.i; break;
        case TV_FLOAT: *res = 0; break;
        case TV_STR: *res = v->u.s == o.u.s && v->len == o.len; break;
        case TV_LIST: *res = v->u.l == o.u.l; break;
        case TV_DICT: *res = v->u.d == o.u.d; break;
        case TV_FUNC: *res = v->u.fn == o.u.fn; break;
        default: *res = 0;
        }
    return 0;
}

TEST(t_filter) {
    if (no_arg(c, "filter", a)) return -1;
    char nm[64];
    *res = v->kind == TV_STR && v->len < sizeof nm &&
           (snprintf(nm, sizeof nm, "%.*s", (int)v->len, v->u.s), tpl_find_filter(nm) != NULL);
    return 0;
}

TEST(t_test) {
    if (no_arg(c, "test", a)) return -1;
    char nm[64];
    *res = v->kind == TV_STR && v->len < sizeof nm &&
           (snprintf(nm, sizeof nm, "%.*s", (int)v->len, v->u.s), tpl_find_test(nm) != NULL);
    return 0;
}

static const struct {
    const char *name;
    tpl_test_fn fn;
} TESTS[] = {
    {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined}, {"divisibleby", t_divisibleby},
    {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"escaped", t_escaped}, {"even", t_even}, {"false", t_false},
    {"filter", t_filter}, {"float", t_float}, {"ge", t_ge}, {">=", t_ge}, {"gt", t_gt}, {"greaterthan", t_gt},
    {">", t_gt}, {"in", t_in}, {"integer", t_integer}, {"iterable", t_iterable}, {"le", t_le}, {"<=", t_le},
    {"lower", t_lower}, {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"mapping", t_mapping}, {"ne", t_ne},
    {"!=", t_ne}, {"none", t_none}, {"number", t_number}, {"odd", t_odd}, {"sameas", t_sameas},
    {"sequence", t_sequence}, {"string", t_string}, {"test", t_test}, {"true", t_true}, {"undefined", t_undefined},
    {"upper", t_upper}};

tpl_test_fn tpl_find_test(const char *name) {
    for (size_t i = 0; i < sizeof TESTS / sizeof *TESTS; i++)
        if (!strcmp(TESTS[i].name, name)) return TESTS[i].fn;
    return NULL;
}

int tpl_is_jinja_test(const char *name) {
    (void)name;
    return 0; /* every Jinja2 builtin test is implemented */
}
