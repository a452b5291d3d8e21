/*
 * fold.c - Jinja2's compile-time constant folding, done the same way so that
 * its visible effects match.
 *
 * Jinja2's optimizer replaces, bottom-up, every expression whose value it can
 * compute without variables or calls and whose value has a "safe repr"
 * (None, bool, numbers, str, range, and lists/tuples/dicts of those) by that
 * constant; and a {{ }} whose whole expression is constant is printed at
 * compile time. It matters where folding and running differ: a folded
 * subscript uses the sandbox's getitem (a failed slice is Undefined) while a
 * run-time slice is Python's own (a TypeError), so `{{ (7)[1:] }}` prints ""
 * and `{{ x ~ (7)[1:] }}` fails, exactly as in Python.
 */
#include "template/tpl.h"
#include "template/template.h"

#include <string.h>

static int safe_repr(const tv *v, int depth) {
    if (depth > 100) return 0;
    switch (v->kind) {
    case TV_NONE: case TV_BOOL: case TV_INT: case TV_FLOAT: case TV_STR: return 1;
    case TV_LIST:
        if (v->u.l->kind != L_LIST && v->u.l->kind != L_TUPLE && v->u.l->kind != L_RANGE) return 0;
        for (size_t i = 0; i < v->u.l->n; i++)
            if (!safe_repr(&v->u.l->items[i], depth + 1)) return 0;
        return 1;
    case TV_DICT:
        if (v->u.d->kind != D_DICT) return 0;
        for (size_t i = 0; i < v->u.d->n; i++)
            if (!safe_repr(&v->u.d->keys[i], depth + 1) || !safe_repr(&v->u.d->vals[i], depth + 1)) return 0;
        return 1;
    default: return 0;
    }
}

/* Evaluate n with no variables; 0 and *out when it is constant. */
static int try_const(tpl_ctx *c, const node *n, tv *out) {
    c->failed = 0;
    c->depth = 0;
    int rc = tpl_eval_const(c, n, out);
    c->failed = 0;
    return rc;
}

static void fold_expr(tpl_ctx *c, node *n, int depth);

static void fold_list(tpl_ctx *c, node **v, size_t k, int depth) {
    for (size_t i = 0; v && i < k; i++)
        if (v[i]) fold_expr(c, v[i], depth + 1);
}

static void fold_expr(tpl_ctx *c, node *n, int depth) {
    if (!n || depth > TPL_MAX_DEPTH) return;
    switch (n->k) {
    case E_CONST: case E_NAME: return;
    default: break;
    }
    fold_expr(c, n->a, depth + 1);
    fold_expr(c, n->b, depth + 1);
    fold_expr(c, n->c, depth + 1);
    fold_list(c, n->kids, n->nk, depth);
    if (n->k == E_DICT) fold_list(c, n->kids2, n->nk, depth);
    fold_list(c, n->kwv, n->nkw, depth);
    switch (n->k) {
    case E_LIST: case E_TUPLE: case E_DICT: case E_ATTR: case E_ITEM: case E_FILTER: case E_TEST: case E_NOT:
    case E_NEG: case E_POS: case E_BIN: case E_CMP: case E_AND: case E_OR: case E_COND: {
        tv v;
        if (try_const(c, n, &v) == 0 && safe_repr(&v, 0)) {
            n->k = E_CONST;
            n->val = v;
        }
        return;
    }
    default: return;
    }
}

static void fold_stmt(tpl_ctx *c, node *n, int depth);

static void fold_body(tpl_ctx *c, node *body, int depth) {
    if (!body) return;
    if (body->k != S_BODY) {
        fold_stmt(c, body, depth);
        return;
    }
    for (size_t i = 0; i < body->nk; i++) fold_stmt(c, body->kids[i], depth + 1);
}

static void fold_stmt(tpl_ctx *c, node *n, int depth) {
    if (!n || depth > TPL_MAX_DEPTH) return;
    switch (n->k) {
    case S_BODY: fold_body(c, n, depth); return;
    case S_OUT: {
        fold_expr(c, n->a, depth + 1);
        /* a constant {{ }} is printed at compile time, even when it is Undefined */
        tv v, text;
        if (try_const(c, n->a, &v) == 0 && tv_stringify(c, &v, &text) == 0) {
            n->k = S_DATA;
            n->val = text;
        }
        c->failed = 0;
        return;
    }
    case S_IF:
        fold_expr(c, n->a, depth + 1);
        fold_body(c, n->b, depth + 1);
        fold_body(c, n->c, depth + 1);
        return;
    case S_FOR:
        fold_expr(c, n->b, depth + 1);
        fold_expr(c, n->c, depth + 1);
        fold_body(c, n->d, depth + 1);
        fold_body(c, n->e, depth + 1);
        return;
    case S_SET: fold_expr(c, n->b, depth + 1); return;
    case S_SETBLOCK: fold_body(c, n->b, depth + 1); return;
    case S_MACRO:
        fold_list(c, n->kids2, n->nk, depth);
        fold_body(c, n->b, depth + 1);
        return;
    case S_FILTERBLOCK: fold_body(c, n->b, depth + 1); return;
    case S_WITH:
        fold_list(c, n->kids2, n->nk, depth);
        fold_body(c, n->b, depth + 1);
        return;
    case S_GENERATION: fold_body(c, n->b, depth + 1); return;
    default: return;
    }
}

int tpl_fold(tpl_template *t, xllm_error *err) {
    (void)err;
    tpl_ctx c;
    memset(&c, 0, sizeof c);
    /* errors while folding only mean "not constant": they go to a scratch
     * report that lives as long as the whole fold (the stringify after an
     * evaluation can fail too) */
    xllm_error scratch;
    c.err = &scratch;
    c.arena = &t->arena; /* folded constants live as long as the template */
    c.max_output = TPL_MAX_OUTPUT;
    c.folding = 1;
    fold_stmt(&c, t->root, 0);
    return 0;
}
