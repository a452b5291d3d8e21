/*
 * eval.c - running the AST: statements write into an output buffer,
 * expressions produce values.
 *
 * Scoping is Jinja2's: the template's top level is one scope; every for-loop
 * iteration runs in a fresh child scope (so a `set` inside a loop is gone at
 * the next iteration and after the loop, which is why templates use
 * namespace()); a macro call runs in a child of the scope the macro was
 * defined in and sees that scope's variables as they are at call time; `if`
 * makes no scope. Names not found in scopes come from the render's variables,
 * then from the globals (range, namespace, raise_exception...). Attribute and
 * item access follow jinja2.sandbox: methods first for `.name`, keys first
 * for `[key]`, a miss is Undefined; mutating methods are refused.
 */
#include "template/tpl.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ errors */

int tpl_fail(tpl_ctx *c, xllm_status code, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = 1;
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err_setf(c->err, code, "chat template line %d: %s", c->line, msg);
    return -1;
}

int tpl_fail_undef(tpl_ctx *c, const tv *v) {
    if (v->kind == TV_UNDEF && v->u.s) return tpl_fail(c, XLLM_ERR_FORMAT, "%s", v->u.s);
    return tpl_fail(c, XLLM_ERR_FORMAT, "a value is undefined");
}

int tpl_work(tpl_ctx *c, size_t n) {
    if (n > (size_t)TPL_MAX_WORK || (c->work += (long long)n) > TPL_MAX_WORK)
        return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "the template does too much work (more than %lld steps)", TPL_MAX_WORK);
    return 0;
}

int tpl_oom(tpl_ctx *c) {
    if (c->arena->cap && c->arena->used + 4096 > c->arena->cap)
        return tpl_fail(c, XLLM_ERR_OUT_OF_MEMORY, "rendering needs more than %zu bytes of memory", c->arena->cap);
    return tpl_fail(c, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
}

/* ------------------------------------------------------------------ scopes */

static scope *scope_new(tpl_ctx *c, scope *parent) {
    scope *s = tpl_alloc(c->arena, sizeof *s);
    if (!s) { tpl_oom(c); return NULL; }
    s->parent = parent;
    s->vars = NULL;
    return s;
}

static int scope_set(tpl_ctx *c, scope *s, const char *name, tv v) {
    if (!s->vars && !(s->vars = tv_dict_new(c, D_DICT))) return -1;
    return tv_dict_set(c, s->vars, tv_str_cstr(name), v);
}

static int lookup(tpl_ctx *c, scope *s, const char *name, tv *out) {
    size_t len = strlen(name);
    for (; s; s = s->parent) {
        if (!s->vars) continue;
        const tv *v = tv_dict_get_str(s->vars, name, len);
        if (v) { *out = *v; return 0; }
    }
    if (c->vars) {
        const tv *v = tv_dict_get_str(c->vars, name, len);
        if (v) { *out = *v; return 0; }
    }
    if (tpl_global(c, name, out)) return -1;
    if (out->kind == TV_MISSING) *out = tv_undef_fmt(c, "'%s' is undefined", name);
    return 0;
}

/* ------------------------------------------------------ attribute and item */

static const char *obj_desc(const tv *obj, char *buf, size_t cap) {
    if (obj->kind == TV_NONE) return "None";
    snprintf(buf, cap, "%s object", tv_type_name(obj));
    return buf;
}

static int loop_attr(tpl_ctx *c, const tv_dict *d, const char *name, size_t len, tv *out) {
#define IS(w) (len == sizeof(w) - 1 && !memcmp(name, w, len))
    const tpl_loop *L = d->loop;
    size_t i = L->index0, n = L->length;
    if (IS("index")) *out = tv_int((int64_t)i + 1);
    else if (IS("index0")) *out = tv_int((int64_t)i);
    else if (IS("revindex")) *out = tv_int((int64_t)(n - i));
    else if (IS("revindex0")) *out = tv_int((int64_t)(n - i - 1));
    else if (IS("first")) *out = tv_bool(i == 0);
    else if (IS("last")) *out = tv_bool(i + 1 == n);
    else if (IS("length")) *out = tv_int((int64_t)n);
    else if (IS("depth")) *out = tv_int(L->depth);
    else if (IS("depth0")) *out = tv_int(L->depth - 1);
    else if (IS("previtem"))
        *out = i > 0 ? L->items[i - 1] : tv_undef_fmt(c, "there is no previous item");
    else if (IS("nextitem"))
        *out = i + 1 < n ? L->items[i + 1] : tv_undef_fmt(c, "there is no next item");
    else if (IS("cycle") || IS("changed"))
        return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "loop.%.*s is not supported", (int)len, name);
    else *out = tv_undef_fmt(c, "'LoopContext object' has no attribute '%.*s'", (int)len, name);
    return 0;
#undef IS
}

int tpl_getattr(tpl_ctx *c, const tv *obj, const char *name, size_t len, tv *out) {
    char desc[64];
    if (obj->kind == TV_UNDEF || obj->kind == TV_MISSING) return tpl_fail_undef(c, obj);
    if (obj->kind == TV_DICT && obj->u.d->kind == D_LOOP) return loop_attr(c, obj->u.d, name, len, out);
    if (obj->kind == TV_DICT && obj->u.d->kind == D_NAMESPACE) {
        const tv *v = tv_dict_get_str(obj->u.d, name, len);
        *out = v ? *v : tv_undef_fmt(c, "'Namespace object' has no attribute '%.*s'", (int)len, name);
        return 0;
    }
    /* Python attributes (methods) first */
    if (tpl_method(c, obj, name, len, out)) return -1;
    if (out->kind != TV_MISSING) return 0;
    if (obj->kind == TV_DICT) {
        const tv *v = tv_dict_get_str(obj->u.d, name, len);
        if (v) { *out = *v; return 0; }
    }
    *out = tv_undef_fmt(c, "'%s' has no attribute '%.*s'", obj_desc(obj, desc, sizeof desc), (int)len, name);
    return 0;
}

/* Python index into a sequence of n items; -1 when out of range. */
static int64_t seq_index(int64_t k, size_t n) {
    if (k < 0) k += (int64_t)n;
    if (k < 0 || k >= (int64_t)n) return -1;
    return k;
}

int tpl_getitem(tpl_ctx *c, const tv *obj, const tv *key, tv *out) {
    char desc[64];
    if (obj->kind == TV_UNDEF || obj->kind == TV_MISSING) return tpl_fail_undef(c, obj);
    int int_key = key->kind == TV_INT || key->kind == TV_BOOL;
    int64_t k = key->kind == TV_BOOL ? key->u.b : key->kind == TV_INT ? key->u.i : 0;
    if (obj->kind == TV_DICT && obj->u.d->kind == D_DICT) {
        const tv *v = tv_dict_get(obj->u.d, key);
        if (v) { *out = *v; return 0; }
    } else if (obj->kind == TV_LIST && int_key &&
               (obj->u.l->kind == L_LIST || obj->u.l->kind == L_TUPLE || obj->u.l->kind == L_RANGE)) {
        int64_t i = seq_index(k, obj->u.l->n);
        if (i >= 0) { *out = obj->u.l->items[i]; return 0; }
        *out = tv_undef_fmt(c, "%s has no element %" PRId64, obj_desc(obj, desc, sizeof desc), k);
        return 0;
    } else if (obj->kind == TV_STR && int_key) {
        size_t n = py_cp_count(obj->u.s, obj->len);
        int64_t i = seq_index(k, n);
        if (i >= 0) {
            size_t st = py_cp_offset(obj->u.s, obj->len, (size_t)i), en = st;
            py_utf8_next(obj->u.s, obj->len, &en);
            *out = tv_str(obj->u.s + st, en - st);
            return 0;
        }
        *out = tv_undef_fmt(c, "str object has no element %" PRId64, k);
        return 0;
    }
    if (key->kind == TV_STR) {
        if (obj->kind == TV_DICT && obj->u.d->kind != D_DICT) return tpl_getattr(c, obj, key->u.s, key->len, out);
        if (tpl_method(c, obj, key->u.s, key->len, out)) return -1;
        if (out->kind != TV_MISSING) return 0;
        *out = tv_undef_fmt(c, "'%s' has no attribute '%.*s'", obj_desc(obj, desc, sizeof desc), (int)key->len, key->u.s);
        return 0;
    }
    *out = tv_undef_fmt(c, "'%s' has no item of that key", obj_desc(obj, desc, sizeof desc));
    return 0;
}

/* PySlice_AdjustIndices. */
static size_t slice_indices(int64_t n, const tv *sv[3], int64_t *start, int64_t *stop, int64_t *step) {
    *step = sv[2] ? (sv[2]->kind == TV_BOOL ? sv[2]->u.b : sv[2]->u.i) : 1;
    if (*step < -INT64_MAX) *step = -INT64_MAX; /* PySlice_Unpack: -step must exist */
    int64_t def_start = *step < 0 ? n - 1 : 0, def_stop = *step < 0 ? -1 : n;
    for (int w = 0; w < 2; w++) {
        int64_t *dst = w == 0 ? start : stop;
        if (!sv[w]) {
            *dst = w == 0 ? def_start : def_stop;
            continue;
        }
        int64_t v = sv[w]->kind == TV_BOOL ? sv[w]->u.b : sv[w]->u.i;
        if (v < 0) {
            v += n;
            if (v < 0) v = *step < 0 ? -1 : 0;
        } else if (v >= n) {
            v = *step < 0 ? n - 1 : n;
        }
        *dst = v;
    }
    if (*step < 0) return *stop < *start ? (size_t)((*start - *stop - 1) / (-*step) + 1) : 0;
    return *start < *stop ? (size_t)((*stop - *start - 1) / *step + 1) : 0;
}

static int do_slice(tpl_ctx *c, const tv *obj, const tv parts[3], const int given[3], tv *out) {
    const tv *sv[3];
    for (int k = 0; k < 3; k++) {
        sv[k] = NULL;
        if (!given[k] || parts[k].kind == TV_NONE) continue;
        if (parts[k].kind == TV_UNDEF) return tpl_fail_undef(c, &parts[k]);
        if (parts[k].kind != TV_INT && parts[k].kind != TV_BOOL)
            return tpl_fail(c, XLLM_ERR_FORMAT, "slice indices must be integers or None or have an __index__ method");
        sv[k] = &parts[k];
    }
    if (sv[2] && (sv[2]->kind == TV_BOOL ? sv[2]->u.b : sv[2]->u.i) == 0)
        return tpl_fail(c, XLLM_ERR_FORMAT, "slice step cannot be zero");
    int64_t start, stop, step;
    if (obj->kind == TV_UNDEF || obj->kind == TV_MISSING) return tpl_fail_undef(c, obj);
    if (obj->kind == TV_STR) {
        int ascii = 1;
        for (size_t i = 0; i < obj->len && ascii; i++) ascii = (unsigned char)obj->u.s[i] < 0x80;
        size_t n = ascii ? obj->len : py_cp_count(obj->u.s, obj->len);
        size_t cnt = slice_indices((int64_t)n, sv, &start, &stop, &step);
        if (step == 1) {
            size_t a = ascii ? (size_t)start : py_cp_offset(obj->u.s, obj->len, (size_t)start);
            size_t b = ascii ? (size_t)start + cnt : py_cp_offset(obj->u.s, obj->len, (size_t)start + cnt);
            *out = tv_str(obj->u.s + a, b - a);
            return 0;
        }
        /* general step: collect code point offsets */
        size_t *offs = tpl_alloc(c->arena, (n + 1) * sizeof *offs);
        char *dst = tpl_alloc(c->arena, obj->len + 1);
        if (!offs || !dst) return tpl_oom(c);
        size_t i = 0, k = 0;
        while (i < obj->len) { offs[k++] = i; py_utf8_next(obj->u.s, obj->len, &i); }
        offs[k] = obj->len;
        size_t o = 0;
        for (size_t m = 0; m < cnt; m++) {
            int64_t j = start + (int64_t)m * step; /* within [0, n): no overflow, unlike j += step past the end */
            size_t len = offs[j + 1] - offs[j];
            memcpy(dst + o, obj->u.s + offs[j], len);
            o += len;
        }
        dst[o] = 0;
        *out = tv_str(dst, o);
        return 0;
    }
    if (obj->kind == TV_LIST && (obj->u.l->kind == L_LIST || obj->u.l->kind == L_TUPLE || obj->u.l->kind == L_RANGE)) {
        const tv_list *l = obj->u.l;
        size_t cnt = slice_indices((int64_t)l->n, sv, &start, &stop, &step);
        tv_list *r = tv_list_new(c, l->kind, cnt);
        if (!r) return -1;
        for (size_t m = 0; m < cnt; m++) r->items[r->n++] = l->items[start + (int64_t)m * step];
        if (l->kind == L_RANGE) { /* range(10)[2:5] is range(2, 5) */
            int64_t a, b;
            if (tpl_mul_ovf(start, l->r_step, &a) || tpl_add_ovf(l->r_start, a, &r->r_start) ||
                tpl_mul_ovf(stop, l->r_step, &b) || tpl_add_ovf(l->r_start, b, &r->r_stop) ||
                tpl_mul_ovf(l->r_step, step, &r->r_step))
                return tpl_fail(c, XLLM_ERR_UNSUPPORTED,
                                "integer overflow in a range slice (Python integers are unbounded; ours are 64-bit)");
        }
        *out = tv_list_val(r);
        return 0;
    }
    /* slices use Python's own subscript (no sandbox fallback): anything else is a TypeError */
    if (c->folding) {
        char desc[64];
        *out = tv_undef_fmt(c, "'%s' has no item of that key", obj_desc(obj, desc, sizeof desc));
        return 0;
    }
    if (obj->kind == TV_DICT && obj->u.d->kind == D_DICT)
        return tpl_fail(c, XLLM_ERR_FORMAT, "unhashable type: 'slice'");
    return tpl_fail(c, XLLM_ERR_FORMAT, "'%s' object is not subscriptable", tv_type_name(obj));
}

/* ------------------------------------------------------------- evaluation */

static int eval(tpl_ctx *c, scope *s, const node *n, tv *out);
static int exec(tpl_ctx *c, scope *s, const node *n, buf_t *out);
static int call_loop(tpl_ctx *c, const tpl_loop *L, const tpl_args *a, tv *out);

static int eval_args(tpl_ctx *c, scope *s, const node *n, tv *first, tpl_args *a) {
    size_t extra = first ? 1 : 0;
    tv *pos = tpl_alloc(c->arena, (n->nk + extra + 1) * sizeof(tv));
    tv *kw = tpl_alloc(c->arena, (n->nkw + 1) * sizeof(tv));
    if (!pos || !kw) return tpl_oom(c);
    if (first) pos[0] = *first;
    for (size_t i = 0; i < n->nk; i++)
        if (eval(c, s, n->kids[i], &pos[i + extra])) return -1;
    for (size_t i = 0; i < n->nkw; i++)
        if (eval(c, s, n->kwv[i], &kw[i])) return -1;
    a->pos = pos;
    a->npos = n->nk + extra;
    a->kw_names = n->kwn;
    a->kw = kw;
    a->nkw = n->nkw;
    return 0;
}

static int assign(tpl_ctx *c, scope *s, const node *target, const tv *v) {
    if (target->k == E_NAME) return scope_set(c, s, target->name, *v);
    if (target->k == E_TUPLE) {
        if (v->kind == TV_UNDEF) return tpl_fail_undef(c, v);
        const tv *items;
        size_t n;
        if (tv_iter(c, v, &items, &n)) return -1;
        if (n != target->nk)
            return tpl_fail(c, XLLM_ERR_FORMAT, n > target->nk ? "too many values to unpack (expected %zu)"
                                                               : "not enough values to unpack (expected %zu, got %zu)",
                            target->nk, n);
        for (size_t i = 0; i < n; i++)
            if (assign(c, s, target->kids[i], &items[i])) return -1;
        return 0;
    }
    if (target->k == E_ATTR) { /* ns.attr = value */
        tv ns;
        if (lookup(c, s, target->a->name, &ns)) return -1;
        if (ns.kind != TV_DICT || ns.u.d->kind != D_NAMESPACE)
            return tpl_fail(c, XLLM_ERR_FORMAT, "cannot assign attribute on non-namespace object");
        return tv_dict_set(c, ns.u.d, tv_str_cstr(target->name), *v);
    }
    return tpl_fail(c, XLLM_ERR_FORMAT, "can't assign to this expression");
}

static int call_macro(tpl_ctx *c, const tv_func *fn, const tpl_args *a, tv *out) {
    const node *m = fn->macro;
    scope *s = scope_new(c, fn->closure);
    if (!s) return -1;
    size_t np = m->nk;
    tv *vals = tpl_alloc(c->arena, (np + 1) * sizeof(tv));
    if (!vals) return tpl_oom(c);
    for (size_t i = 0; i < np; i++) vals[i] = tv_missing();
    tv_list *varargs = tv_list_new(c, L_TUPLE, 0);
    tv_dict *kwargs = tv_dict_new(c, D_DICT);
    if (!varargs || !kwargs) return -1;
    for (size_t i = 0; i < a->npos; i++) {
        if (i < np) vals[i] = a->pos[i];
        else if (m->uses_varargs) { if (tv_list_push(c, varargs, a->pos[i])) return -1; }
        else return tpl_fail(c, XLLM_ERR_FORMAT, "macro '%s' takes not more than %zu argument(s)", m->name, np);
    }
    for (size_t k = 0; k < a->nkw; k++) {
        size_t i;
        for (i = 0; i < np; i++)
            if (!strcmp(m->kids[i]->name, a->kw_names[k])) break;
        if (i < np) {
            if (vals[i].kind != TV_MISSING)
                return tpl_fail(c, XLLM_ERR_FORMAT, "macro '%s' got multiple values for argument '%s'", m->name,
                                a->kw_names[k]);
            vals[i] = a->kw[k];
        } else if (m->uses_kwargs) {
            if (tv_dict_set(c, kwargs, tv_str_cstr(a->kw_names[k]), a->kw[k])) return -1;
        } else {
            return tpl_fail(c, XLLM_ERR_FORMAT, "macro '%s' takes no keyword argument '%s'", m->name, a->kw_names[k]);
        }
    }
    for (size_t i = 0; i < np; i++) {
        if (vals[i].kind == TV_MISSING) {
            if (m->kids2[i]) {
                if (eval(c, s, m->kids2[i], &vals[i])) return -1;
            } else {
                vals[i] = tv_undef_fmt(c, "parameter '%s' was not provided", m->kids[i]->name);
            }
        }
        if (scope_set(c, s, m->kids[i]->name, vals[i])) return -1;
    }
    if (m->uses_varargs && scope_set(c, s, "varargs", tv_list_val(varargs))) return -1;
    if (m->uses_kwargs && scope_set(c, s, "kwargs", tv_dict_val(kwargs))) return -1;
    buf_t b = tpl_buf_make(c);
    int saved_line = c->line;
    int rc = exec(c, s, m->b, &b);
    c->line = saved_line;
    if (rc < 0) {
        buf_free(&b);
        return -1;
    }
    return tpl_buf_to_value(c, &b, out);
}

int tpl_call(tpl_ctx *c, const tv *fn, const tpl_args *a, tv *out) {
    if (fn->kind == TV_UNDEF || fn->kind == TV_MISSING) return tpl_fail_undef(c, fn);
    int is_loop = fn->kind == TV_DICT && fn->u.d->kind == D_LOOP;
    if (fn->kind != TV_FUNC && !is_loop)
        return tpl_fail(c, XLLM_ERR_FORMAT, "'%s' object is not callable", tv_type_name(fn));
    if (++c->depth > TPL_MAX_DEPTH) return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "calls nested too deeply (recursion?)");
    if (!is_loop && fn->u.fn->kind == F_BUILTIN && tpl_work(c, tv_work_size(&fn->u.fn->self))) return -1; /* a method scans its receiver */
    int rc = is_loop ? call_loop(c, fn->u.d->loop, a, out)
             : fn->u.fn->kind == F_MACRO ? call_macro(c, fn->u.fn, a, out)
                                         : fn->u.fn->fn(c, &fn->u.fn->self, a, out);
    c->depth--;
    return rc;
}

static int eval_filter(tpl_ctx *c, scope *s, const node *n, tv *out) {
    tv in;
    if (c->folding && (!n->a || !strcmp(n->name, "map") || !strcmp(n->name, "select") || !strcmp(n->name, "reject") ||
                       !strcmp(n->name, "selectattr") || !strcmp(n->name, "rejectattr")))
        return tpl_fail(c, XLLM_ERR_FORMAT, "not constant"); /* filters that take the context */
    if (n->a) {
        if (eval(c, s, n->a, &in)) return -1;
    } else {
        in = c->filter_input ? *c->filter_input : tv_str("", 0);
    }
    tpl_args a;
    if (eval_args(c, s, n, NULL, &a)) return -1;
    c->line = n->line;
    if (tpl_work(c, tv_work_size(&in))) return -1; /* a filter scans its input */
    return n->filter(c, &in, &a, out);
}

static int eval(tpl_ctx *c, scope *s, const node *n, tv *out) {
    if (++c->work > TPL_MAX_WORK && tpl_work(c, 0)) return -1;
    if (++c->depth > TPL_MAX_DEPTH) return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "expression nested too deeply");
    c->line = n->line;
    int rc = 0;
    tv a = tv_missing(), b = tv_missing();
    switch (n->k) {
    case E_CONST: *out = n->val; break;
    case E_NAME:
        if (c->folding) { rc = tpl_fail(c, XLLM_ERR_FORMAT, "not constant"); break; }
        rc = lookup(c, s, n->name, out);
        break;
    case E_LIST:
    case E_TUPLE: {
        tv_list *l = tv_list_new(c, n->k == E_LIST ? L_LIST : L_TUPLE, n->nk);
        if (!l) { rc = -1; break; }
        for (size_t i = 0; i < n->nk && !rc; i++) rc = eval(c, s, n->kids[i], &l->items[l->n++]);
        *out = tv_list_val(l);
        break;
    }
    case E_DICT: {
        tv_dict *d = tv_dict_new(c, D_DICT);
        if (!d) { rc = -1; break; }
        for (size_t i = 0; i < n->nk && !rc; i++) {
            rc = eval(c, s, n->kids[i], &a) || eval(c, s, n->kids2[i], &b);
            if (!rc) rc = tv_dict_set(c, d, a, b); /* refuses unhashable (and Undefined) keys */
        }
        *out = tv_dict_val(d);
        break;
    }
    case E_ATTR:
        rc = eval(c, s, n->a, &a);
        c->line = n->line;
        if (!rc) rc = tpl_getattr(c, &a, n->name, strlen(n->name), out);
        break;
    case E_ITEM:
        rc = eval(c, s, n->a, &a);
        if (rc) break;
        if (n->b->k == E_SLICE) {
            tv parts[3];
            int given[3] = {n->b->a != NULL, n->b->b != NULL, n->b->c != NULL};
            const node *pn[3] = {n->b->a, n->b->b, n->b->c};
            for (int k = 0; k < 3 && !rc; k++)
                if (given[k]) rc = eval(c, s, pn[k], &parts[k]);
            c->line = n->line;
            if (!rc) rc = do_slice(c, &a, parts, given, out);
        } else {
            rc = eval(c, s, n->b, &b);
            c->line = n->line;
            if (!rc) rc = tpl_getitem(c, &a, &b, out);
        }
        break;
    case E_SLICE: rc = tpl_fail(c, XLLM_ERR_FORMAT, "a slice outside a subscript"); break;
    case E_CALL: {
        tpl_args args;
        if (c->folding) { rc = tpl_fail(c, XLLM_ERR_FORMAT, "not constant"); break; }
        rc = eval(c, s, n->a, &a) || eval_args(c, s, n, NULL, &args);
        c->line = n->line;
        if (!rc) rc = tpl_call(c, &a, &args, out);
        break;
    }
    case E_FILTER: rc = eval_filter(c, s, n, out); break;
    case E_TEST: {
        tpl_args args;
        int res = 0;
        rc = eval(c, s, n->a, &a) || eval_args(c, s, n, NULL, &args);
        c->line = n->line;
        if (!rc) rc = n->test(c, &a, &args, &res);
        *out = tv_bool(res);
        break;
    }
    case E_NOT:
        rc = eval(c, s, n->a, &a);
        if (!rc) *out = tv_bool(!tv_truthy(&a));
        break;
    case E_NEG:
    case E_POS:
        rc = eval(c, s, n->a, &a);
        c->line = n->line;
        if (rc) break;
        if (a.kind == TV_UNDEF) rc = tpl_fail_undef(c, &a);
        else if (a.kind == TV_INT || a.kind == TV_BOOL) {
            int64_t v = a.kind == TV_BOOL ? a.u.b : a.u.i;
            if (n->k == E_NEG && v == INT64_MIN) rc = tpl_fail(c, XLLM_ERR_UNSUPPORTED, "integer overflow");
            else *out = tv_int(n->k == E_NEG ? -v : v);
        } else if (a.kind == TV_FLOAT) *out = tv_float(n->k == E_NEG ? -a.u.f : a.u.f);
        else rc = tpl_fail(c, XLLM_ERR_FORMAT, "bad operand type for unary %c: '%s'", n->k == E_NEG ? '-' : '+',
                           tv_type_name(&a));
        break;
    case E_BIN:
        rc = eval(c, s, n->a, &a) || eval(c, s, n->b, &b);
        c->line = n->line;
        if (!rc && n->op == OP_POW && !c->folding && n->a->k == E_CONST && tv_is_number(&a) &&
            signbit(tv_as_double(&a))) {
            /* Jinja2 writes a folded negative constant unparenthesized into the
             * Python it generates, so (-3) ** y runs as -(3 ** y) */
            if (a.kind == TV_INT && a.u.i == INT64_MIN) { rc = tpl_fail(c, XLLM_ERR_UNSUPPORTED, "integer overflow"); break; }
            tv pos = a.kind == TV_FLOAT ? tv_float(-a.u.f) : tv_int(-a.u.i), r;
            rc = tpl_binop(c, OP_POW, &pos, &b, &r);
            if (!rc) {
                tv zero = tv_int(0);
                rc = tpl_binop(c, OP_SUB, &zero, &r, out);
                if (!rc && r.kind == TV_FLOAT) *out = tv_float(-r.u.f);
            }
            break;
        }
        if (!rc) rc = tpl_binop(c, n->op, &a, &b, out);
        break;
    case E_CMP: {
        rc = eval(c, s, n->a, &a);
        int res = 1;
        for (size_t i = 0; i < n->nk && !rc && res; i++) {
            rc = eval(c, s, n->kids[i], &b);
            c->line = n->line;
            if (!rc) rc = tpl_compare(c, n->ops[i], &a, &b, &res);
            a = b;
        }
        *out = tv_bool(res);
        break;
    }
    case E_AND:
        rc = eval(c, s, n->a, &a);
        if (!rc) {
            if (!tv_truthy(&a)) *out = a;
            else rc = eval(c, s, n->b, out);
        }
        break;
    case E_OR:
        rc = eval(c, s, n->a, &a);
        if (!rc) {
            if (tv_truthy(&a)) *out = a;
            else rc = eval(c, s, n->b, out);
        }
        break;
    case E_COND:
        rc = eval(c, s, n->a, &a);
        if (rc) break;
        if (tv_truthy(&a)) rc = eval(c, s, n->b, out);
        else if (n->c) rc = eval(c, s, n->c, out);
        else *out = tv_undef_fmt(c, "the inline if-expression on line %d evaluated to false and no else section was defined", n->line);
        break;
    default: rc = tpl_fail(c, XLLM_ERR_INTERNAL, "unexpected node in an expression"); break;
    }
    c->depth--;
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------- statements */

static int write_value(tpl_ctx *c, const tv *v, buf_t *out) {
    if (v->kind == TV_STR) {
        if (buf_append(out, v->u.s, v->len))
            return out->err == XLLM_BUF_OOM ? tpl_oom(c) : tpl_fail(c, XLLM_ERR_FORMAT, "the rendered text is larger than the limit (%zu bytes)", out->max);
        return 0;
    }
    return tv_to_str(c, v, out);
}

/* One run of a for loop over seq (depth > 1: a recursive loop(...) call). */
static int run_loop(tpl_ctx *c, scope *s, const node *n, const tv *seq, int depth, buf_t *out) {
    const tv *items;
    size_t cnt;
    if (tv_iter(c, seq, &items, &cnt)) return -1;
    scope *it = scope_new(c, s);
    if (!it) return -1;
    if (n->c) { /* {% for x in xs if cond %}: filter first, loop.length counts what passed */
        tv *kept = tpl_alloc(c->arena, (cnt ? cnt : 1) * sizeof(tv));
        if (!kept) return tpl_oom(c);
        size_t k = 0;
        for (size_t i = 0; i < cnt; i++) {
            tv cond;
            if (it->vars) tv_dict_clear(it->vars);
            if (assign(c, it, n->a, &items[i]) || eval(c, it, n->c, &cond)) return -1;
            if (tv_truthy(&cond)) kept[k++] = items[i];
        }
        items = kept;
        cnt = k;
    }
    tpl_loop *L = tpl_alloc(c->arena, sizeof *L);
    tv_dict *ld = tv_dict_new(c, D_LOOP);
    if (!L || !ld) return tpl_oom(c);
    L->items = items;
    L->length = cnt;
    L->depth = depth;
    L->node = n;
    L->outer = s;
    ld->loop = L;
    /* Jinja2 clears its "no iteration" flag at the end of the body, so an
     * iteration left by break or continue does not count: {% else %} runs
     * unless some iteration ran to the end */
    int completed = 0;
    for (size_t i = 0; i < cnt; i++) {
        L->index0 = i;
        if (it->vars) tv_dict_clear(it->vars); /* a fresh scope each iteration */
        if (assign(c, it, n->a, &items[i]) || scope_set(c, it, "loop", tv_dict_val(ld))) return -1;
        int rc = exec(c, it, n->d, out);
        if (rc < 0) return -1;
        if (rc == 0) completed = 1;
        if (rc == 1) break;
    }
    if (!completed && n->e) {
        scope *es = scope_new(c, s);
        if (!es) return -1;
        int rc = exec(c, es, n->e, out);
        if (rc < 0) return -1;
    }
    return 0;
}

static int exec_for(tpl_ctx *c, scope *s, const node *n, buf_t *out) {
    tv seq;
    if (eval(c, s, n->b, &seq)) return -1;
    c->line = n->line;
    return run_loop(c, s, n, &seq, 1, out);
}

/* loop(children) inside a recursive for loop: the loop again, as text. */
static int call_loop(tpl_ctx *c, const tpl_loop *L, const tpl_args *a, tv *out) {
    if (!L->node->op) return tpl_fail(c, XLLM_ERR_FORMAT, "loop() is only callable in a recursive for loop");
    if (a->npos != 1 || a->nkw) return tpl_fail(c, XLLM_ERR_FORMAT, "loop() takes exactly one argument");
    buf_t b = tpl_buf_make(c);
    if (run_loop(c, L->outer, L->node, &a->pos[0], L->depth + 1, &b)) {
        buf_free(&b);
        return -1;
    }
    return tpl_buf_to_value(c, &b, out);
}

/* The text of a {% set x %} or {% filter %} body, run in its own scope (its
 * assignments stay inside, as in Jinja2). */
static int render_body(tpl_ctx *c, scope *s, const node *body, tv *out) {
    scope *inner = scope_new(c, s);
    if (!inner) return -1;
    buf_t b = tpl_buf_make(c);
    int rc = exec(c, inner, body, &b);
    if (rc < 0) {
        buf_free(&b);
        return -1;
    }
    if (rc > 0) { /* break/continue: leaves the enclosing loop's body, the text is dropped */
        buf_free(&b);
        return rc;
    }
    return tpl_buf_to_value(c, &b, out) ? -1 : 0;
}

static int apply_filter_chain(tpl_ctx *c, scope *s, const node *chain, const tv *in, tv *out) {
    const tv *saved = c->filter_input;
    c->filter_input = in;
    int rc = eval(c, s, chain, out);
    c->filter_input = saved;
    return rc;
}

/* 0 done, 1 break, 2 continue, -1 error. */
static int exec(tpl_ctx *c, scope *s, const node *n, buf_t *out) {
    if (++c->work > TPL_MAX_WORK && tpl_work(c, 0)) return -1;
    if (++c->depth > TPL_MAX_DEPTH) return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "statements nested too deeply");
    c->line = n->line;
    int rc = 0;
    tv v;
    switch (n->k) {
    case S_BODY:
        for (size_t i = 0; i < n->nk && !rc; i++) rc = exec(c, s, n->kids[i], out);
        break;
    case S_DATA:
        if (buf_append(out, n->val.u.s, n->val.len))
            rc = out->err == XLLM_BUF_OOM ? tpl_oom(c) : tpl_fail(c, XLLM_ERR_FORMAT, "the rendered text is larger than the limit (%zu bytes)", out->max);
        break;
    case S_OUT:
        rc = eval(c, s, n->a, &v);
        if (!rc) rc = write_value(c, &v, out);
        break;
    case S_IF:
        rc = eval(c, s, n->a, &v);
        if (!rc) {
            if (tv_truthy(&v)) rc = exec(c, s, n->b, out);
            else if (n->c) rc = exec(c, s, n->c, out);
        }
        break;
    case S_FOR: rc = exec_for(c, s, n, out); break;
    case S_SET:
        rc = eval(c, s, n->b, &v);
        c->line = n->line;
        if (!rc) rc = assign(c, s, n->a, &v);
        break;
    case S_SETBLOCK:
        rc = render_body(c, s, n->b, &v);
        if (rc) break;
        if (n->c) {
            tv body = v;
            rc = apply_filter_chain(c, s, n->c, &body, &v);
        }
        c->line = n->line;
        if (!rc) rc = assign(c, s, n->a, &v);
        break;
    case S_MACRO: {
        tv_func *f = tpl_alloc(c->arena, sizeof *f);
        if (!f) { rc = tpl_oom(c); break; }
        memset(f, 0, sizeof *f);
        f->kind = F_MACRO;
        f->name = n->name;
        f->macro = n;
        f->closure = s;
        f->self = tv_missing();
        v.kind = TV_FUNC;
        v.len = 0;
        v.u.fn = f;
        rc = scope_set(c, s, n->name, v);
        break;
    }
    case S_FILTERBLOCK: {
        tv body;
        rc = render_body(c, s, n->b, &body);
        if (rc) break;
        rc = apply_filter_chain(c, s, n->a, &body, &v);
        if (!rc) rc = write_value(c, &v, out);
        break;
    }
    case S_WITH: {
        scope *ws = scope_new(c, s);
        if (!ws) { rc = -1; break; }
        for (size_t i = 0; i < n->nk && !rc; i++) {
            rc = eval(c, s, n->kids2[i], &v);
            if (!rc) rc = assign(c, ws, n->kids[i], &v);
        }
        if (!rc) rc = exec(c, ws, n->b, out);
        break;
    }
    case S_GENERATION: rc = exec(c, s, n->b, out); break;
    case S_BREAK: rc = 1; break;
    case S_CONTINUE: rc = 2; break;
    default: rc = tpl_fail(c, XLLM_ERR_INTERNAL, "unexpected node in a statement"); break;
    }
    c->depth--;
    return rc < 0 ? -1 : rc;
}

int tpl_eval_const(tpl_ctx *c, const node *n, tv *out) { return eval(c, NULL, n, out); }

int tpl_render_ast(tpl_ctx *c, const tpl_template *t, buf_t *out) {
    c->top = scope_new(c, NULL);
    if (!c->top) return -1;
    int rc = exec(c, c->top, t->root, out);
    if (rc > 0) return tpl_fail(c, XLLM_ERR_FORMAT, "break/continue outside a loop");
    return rc;
}
