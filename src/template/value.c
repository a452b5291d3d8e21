/*
 * value.c - the interpreter's values: Python's None, bool, int, float, str,
 * list/tuple (and the lazy kinds Jinja hands out: generators, range, dict
 * views), dict (insertion-ordered; also Jinja's namespace and loop objects),
 * functions, and Jinja2's Undefined.
 *
 * Values are small structs copied by value; whatever they point to lives in
 * the render's arena. This file holds construction, truthiness, ==, <, len,
 * iteration, and str()/repr() exactly as Python prints them.
 */
#include "template/tpl.h"
#include "base/alloc.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ construction */

tv tv_str_cstr(const char *s) { return tv_str(s, strlen(s)); }

int tv_str_copy(tpl_ctx *c, const char *s, size_t len, tv *out) {
    char *p = tpl_alloc(c->arena, len + 1);
    if (!p) return tpl_oom(c);
    if (len) memcpy(p, s, len);
    p[len] = 0;
    *out = tv_str(p, len);
    return 0;
}

tv_list *tv_list_new(tpl_ctx *c, int kind, size_t cap) {
    tv_list *l = tpl_alloc(c->arena, sizeof *l);
    if (!l) { tpl_oom(c); return NULL; }
    memset(l, 0, sizeof *l);
    l->kind = kind;
    if (cap) {
        l->items = tpl_alloc(c->arena, cap * sizeof(tv));
        if (!l->items) { tpl_oom(c); return NULL; }
        l->cap = cap;
    }
    return l;
}

int tv_list_push(tpl_ctx *c, tv_list *l, tv v) {
    if (l->n == l->cap && tpl_arena_grow(c->arena, &l->items, l->n, &l->cap, sizeof(tv), 4)) return tpl_oom(c);
    l->items[l->n++] = v;
    return 0;
}

tv_dict *tv_dict_new(tpl_ctx *c, int kind) {
    tv_dict *d = tpl_alloc(c->arena, sizeof *d);
    if (!d) { tpl_oom(c); return NULL; }
    memset(d, 0, sizeof *d);
    d->kind = kind;
    return d;
}

/* ------------------------------------------------------------ dict index */

#define DICT_INDEX_MIN 8 /* below this many keys a scan is as fast */

static int eq_rec(const tv *a, const tv *b, int depth);

/* A hash consistent with ==: 1 == 1.0 == True hash alike, strings by bytes,
 * tuples by their items. Only called on hashable keys of bounded depth. */
static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
}

static uint64_t key_hash(const tv *k, int depth) {
    switch (k->kind) {
    case TV_STR: {
        uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a, then mixed */
        for (size_t i = 0; i < k->len; i++) h = (h ^ (unsigned char)k->u.s[i]) * 0x100000001b3ULL;
        return mix(h ^ k->len);
    }
    case TV_BOOL: return mix((uint64_t)k->u.b);
    case TV_INT: return mix((uint64_t)k->u.i);
    case TV_FLOAT: {
        double f = k->u.f;
        if (f == f && f >= -9.2e18 && f <= 9.2e18 && f == (double)(int64_t)f) return mix((uint64_t)(int64_t)f);
        uint64_t bits;
        memcpy(&bits, &f, sizeof bits);
        return mix(bits ^ 0x5555);
    }
    case TV_NONE: return 0x9e3779b97f4a7c15ULL;
    case TV_LIST: {
        if (k->u.l->kind == L_GEN) return (uint64_t)(uintptr_t)k->u.l; /* by identity, as Python */
        uint64_t h = 0x345678 + k->u.l->n;
        if (depth < TPL_MAX_DEPTH)
            for (size_t i = 0; i < k->u.l->n; i++) h = mix(h ^ key_hash(&k->u.l->items[i], depth + 1)) + i;
        return h;
    }
    default: return (uint64_t)(uintptr_t)k->u.fn; /* functions compare by identity */
    }
}

/* Index of key in d, or -1. */
static long dict_find(const tv_dict *d, const tv *key, uint64_t h) {
    if (d->nslots) {
        size_t mask = d->nslots - 1;
        for (size_t s = (size_t)h & mask;; s = (s + 1) & mask) {
            uint32_t e = d->slots[s];
            if (!e) return -1;
            if (eq_rec(&d->keys[e - 1], key, 0) == 1) return (long)(e - 1);
        }
    }
    for (size_t i = 0; i < d->n; i++)
        if (eq_rec(&d->keys[i], key, 0) == 1) return (long)i;
    return -1;
}

static int dict_reindex(tpl_ctx *c, tv_dict *d) {
    size_t ns = 16;
    while (ns < 2 * d->cap) ns *= 2;
    uint32_t *slots = tpl_alloc(c->arena, ns * sizeof *slots);
    if (!slots) return tpl_oom(c);
    memset(slots, 0, ns * sizeof *slots);
    for (size_t i = 0; i < d->n; i++) {
        size_t s = (size_t)key_hash(&d->keys[i], 0) & (ns - 1);
        while (slots[s]) s = (s + 1) & (ns - 1);
        slots[s] = (uint32_t)(i + 1);
    }
    d->slots = slots;
    d->nslots = ns;
    return 0;
}

static int key_ok(const tv *v, int depth) { /* 0 ok, 1 unhashable, 2 too deep */
    if (v->kind == TV_DICT) return v->u.d->kind == D_DICT;
    if (v->kind == TV_UNDEF || v->kind == TV_MISSING) return 1;
    if (v->kind != TV_LIST) return 0;
    if (v->u.l->kind != L_TUPLE) return v->u.l->kind != L_RANGE && v->u.l->kind != L_GEN;
    if (depth >= TPL_MAX_DEPTH) return 2;
    for (size_t i = 0; i < v->u.l->n; i++) {
        int r = key_ok(&v->u.l->items[i], depth + 1);
        if (r) return r;
    }
    return 0;
}

int tv_check_hashable(tpl_ctx *c, const tv *v) {
    int r = key_ok(v, 0);
    if (r == 1) return tpl_fail(c, XLLM_ERR_FORMAT, "unhashable type: '%s'", tv_type_name(v));
    if (r == 2) return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "key nested too deeply (more than %d levels)", TPL_MAX_DEPTH);
    return 0;
}

const tv *tv_dict_get(const tv_dict *d, const tv *key) {
    if (key->kind == TV_STR) return tv_dict_get_str(d, key->u.s, key->len);
    if (key_ok(key, 0)) return NULL; /* never stored (tv_dict_set refuses it) */
    long i = dict_find(d, key, d->nslots ? key_hash(key, 0) : 0);
    return i < 0 ? NULL : &d->vals[i];
}

const tv *tv_dict_get_str(const tv_dict *d, const char *key, size_t len) {
    if (d->nslots) {
        tv k = tv_str(key, len);
        long i = dict_find(d, &k, key_hash(&k, 0));
        return i < 0 ? NULL : &d->vals[i];
    }
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].kind == TV_STR && d->keys[i].len == len && !memcmp(d->keys[i].u.s, key, len))
            return &d->vals[i];
    return NULL;
}

void tv_dict_clear(tv_dict *d) {
    d->n = 0;
    if (d->nslots) memset(d->slots, 0, d->nslots * sizeof *d->slots);
}

int tv_dict_set(tpl_ctx *c, tv_dict *d, tv key, tv val) {
    if (key.kind != TV_STR && tv_check_hashable(c, &key)) return -1;
    uint64_t h = d->nslots ? key_hash(&key, 0) : 0;
    long at = dict_find(d, &key, h);
    if (at >= 0) {
        d->vals[at] = val;
        return 0;
    }
    if (d->n >= UINT32_MAX - 1) return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "dict too large");
    if (d->n == d->cap) { /* keys and values share the capacity */
        size_t kcap = d->cap;
        if (tpl_arena_grow(c->arena, &d->keys, d->n, &kcap, sizeof(tv), 4) ||
            tpl_arena_grow(c->arena, &d->vals, d->n, &d->cap, sizeof(tv), 4))
            return tpl_oom(c);
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    if (d->n >= DICT_INDEX_MIN && d->nslots < 2 * d->cap) return dict_reindex(c, d);
    if (d->nslots) {
        size_t s = (size_t)h & (d->nslots - 1);
        while (d->slots[s]) s = (s + 1) & (d->nslots - 1);
        d->slots[s] = (uint32_t)d->n;
    }
    return 0;
}

tv tv_list_val(tv_list *l) { tv v = {TV_LIST, 0, {0}}; v.u.l = l; return v; }
tv tv_dict_val(tv_dict *d) { tv v = {TV_DICT, 0, {0}}; v.u.d = d; return v; }

tv tv_undef_fmt(tpl_ctx *c, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    size_t n = strlen(buf);
    char *p = tpl_alloc(c->arena, n + 1);
    if (!p) return tv_undef(NULL);
    memcpy(p, buf, n + 1);
    tv v = tv_undef(p);
    v.len = n;
    return v;
}

/* -------------------------------------------------------------- predicates */

int tv_is_str(const tv *v) { return v->kind == TV_STR; }
int tv_is_number(const tv *v) { return v->kind == TV_INT || v->kind == TV_FLOAT || v->kind == TV_BOOL; }

double tv_as_double(const tv *v) {
    switch (v->kind) {
    case TV_BOOL: return v->u.b;
    case TV_INT: return (double)v->u.i;
    case TV_FLOAT: return v->u.f;
    default: return 0;
    }
}

int tv_truthy(const tv *v) {
    switch (v->kind) {
    case TV_MISSING: case TV_UNDEF: case TV_NONE: return 0;
    case TV_BOOL: return v->u.b;
    case TV_INT: return v->u.i != 0;
    case TV_FLOAT: return v->u.f != 0;
    case TV_STR: return v->len != 0;
    case TV_LIST: return v->u.l->kind == L_GEN || v->u.l->n != 0;
    case TV_DICT: return v->u.d->kind != D_DICT || v->u.d->n != 0;
    case TV_FUNC: return 1;
    }
    return 0;
}

const char *tv_type_name(const tv *v) {
    switch (v->kind) {
    case TV_MISSING: case TV_UNDEF: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return "str";
    case TV_LIST:
        switch (v->u.l->kind) {
        case L_TUPLE: return "tuple";
        case L_GEN: return "generator";
        case L_RANGE: return "range";
        case L_KEYS: return "dict_keys";
        case L_VALUES: return "dict_values";
        case L_ITEMS: return "dict_items";
        default: return "list";
        }
    case TV_DICT: return v->u.d->kind == D_NAMESPACE ? "Namespace" : v->u.d->kind == D_LOOP ? "LoopContext" : "dict";
    case TV_FUNC: return v->u.fn->kind == F_MACRO ? "Macro" : "builtin_function_or_method";
    }
    return "object";
}

/* ----------------------------------------------------------------- == and < */

static int same_seq_kind(const tv_list *a, const tv_list *b) {
    if (a->kind == b->kind) return 1;
    return 0;
}

/* 1 / 0, or -1 when both sides nest deeper than TPL_MAX_DEPTH (the
 * recursion only continues while both are containers, so comparing with a
 * stored dict key is bounded by that key's depth). */
static int eq_rec(const tv *a, const tv *b, int depth) {
    if (a->kind == TV_UNDEF || a->kind == TV_MISSING) return b->kind == TV_UNDEF || b->kind == TV_MISSING;
    if (tv_is_number(a) && tv_is_number(b)) {
        if (a->kind != TV_FLOAT && b->kind != TV_FLOAT) {
            int64_t x = a->kind == TV_BOOL ? a->u.b : a->u.i, y = b->kind == TV_BOOL ? b->u.b : b->u.i;
            return x == y;
        }
        return tv_as_double(a) == tv_as_double(b);
    }
    if (a->kind != b->kind) return 0;
    switch (a->kind) {
    case TV_NONE: return 1;
    case TV_STR: return a->len == b->len && !memcmp(a->u.s, b->u.s, a->len);
    case TV_LIST: {
        const tv_list *x = a->u.l, *y = b->u.l;
        if (x == y) return 1;
        if (x->kind == L_GEN || y->kind == L_GEN || !same_seq_kind(x, y) || x->n != y->n) return 0;
        if (depth >= TPL_MAX_DEPTH) return -1;
        for (size_t i = 0; i < x->n; i++) {
            int r = eq_rec(&x->items[i], &y->items[i], depth + 1);
            if (r != 1) return r;
        }
        return 1;
    }
    case TV_DICT: {
        const tv_dict *x = a->u.d, *y = b->u.d;
        if (x == y) return 1;
        if (x->kind != D_DICT || y->kind != D_DICT || x->n != y->n) return 0;
        if (depth >= TPL_MAX_DEPTH) return -1;
        for (size_t i = 0; i < x->n; i++) {
            const tv *o = tv_dict_get(y, &x->keys[i]);
            if (!o) return 0;
            int r = eq_rec(&x->vals[i], o, depth + 1);
            if (r != 1) return r;
        }
        return 1;
    }
    case TV_FUNC: return a->u.fn == b->u.fn;
    default: return 0;
    }
}

int tv_eq(tpl_ctx *c, const tv *a, const tv *b, int *res) {
    if (a->kind == b->kind && (a->kind == TV_LIST || a->kind == TV_DICT || a->kind == TV_STR) &&
        tpl_work(c, tv_work_size(a)))
        return -1;
    int r = eq_rec(a, b, 0);
    if (r < 0)
        return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "values nested too deeply to compare (more than %d levels)",
                        TPL_MAX_DEPTH);
    *res = r;
    return 0;
}

static int lt_rec(tpl_ctx *c, const tv *a, const tv *b, int *res, int depth) {
    if (tv_is_number(a) && tv_is_number(b)) {
        if (a->kind != TV_FLOAT && b->kind != TV_FLOAT) {
            int64_t x = a->kind == TV_BOOL ? a->u.b : a->u.i, y = b->kind == TV_BOOL ? b->u.b : b->u.i;
            *res = x < y;
        } else {
            *res = tv_as_double(a) < tv_as_double(b);
        }
        return 0;
    }
    if (a->kind == TV_UNDEF) return tpl_fail_undef(c, a);
    if (b->kind == TV_UNDEF) return tpl_fail_undef(c, b);
    if (a->kind == TV_STR && b->kind == TV_STR) {
        size_t n = a->len < b->len ? a->len : b->len;
        int r = memcmp(a->u.s, b->u.s, n);
        *res = r < 0 || (r == 0 && a->len < b->len);
        return 0;
    }
    if (a->kind == TV_LIST && b->kind == TV_LIST && a->u.l->kind == b->u.l->kind &&
        (a->u.l->kind == L_LIST || a->u.l->kind == L_TUPLE)) {
        const tv_list *x = a->u.l, *y = b->u.l;
        if (depth >= TPL_MAX_DEPTH)
            return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "values nested too deeply to compare (more than %d levels)",
                            TPL_MAX_DEPTH);
        for (size_t i = 0; i < x->n && i < y->n; i++) {
            int r = eq_rec(&x->items[i], &y->items[i], depth + 1);
            if (r < 0)
                return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "values nested too deeply to compare (more than %d levels)",
                                TPL_MAX_DEPTH);
            if (r) continue;
            return lt_rec(c, &x->items[i], &y->items[i], res, depth + 1);
        }
        *res = x->n < y->n;
        return 0;
    }
    return tpl_fail(c, XLLM_ERR_FORMAT, "'<' not supported between instances of '%s' and '%s'", tv_type_name(a),
                    tv_type_name(b));
}

int tv_lt(tpl_ctx *c, const tv *a, const tv *b, int *res) {
    if (a->kind == TV_LIST && tpl_work(c, tv_work_size(a))) return -1;
    return lt_rec(c, a, b, res, 0);
}

/* ------------------------------------------------------------ len and iter */

int tv_len(tpl_ctx *c, const tv *v, size_t *n) {
    switch (v->kind) {
    case TV_UNDEF: case TV_MISSING: *n = 0; return 0;
    case TV_STR: *n = py_cp_count(v->u.s, v->len); return 0;
    case TV_LIST:
        if (v->u.l->kind == L_GEN) break;
        *n = v->u.l->n;
        return 0;
    case TV_DICT:
        if (v->u.d->kind == D_NAMESPACE) break;
        *n = v->u.d->kind == D_LOOP ? v->u.d->loop->length : v->u.d->n;
        return 0;
    default: break;
    }
    return tpl_fail(c, XLLM_ERR_FORMAT, "object of type '%s' has no len()", tv_type_name(v));
}

int tv_iter(tpl_ctx *c, const tv *v, const tv **items, size_t *n) {
    switch (v->kind) {
    case TV_UNDEF: case TV_MISSING: *items = NULL; *n = 0; return 0;
    case TV_LIST: {
        tv_list *l = v->u.l;
        *items = l->items;
        *n = l->n;
        if (l->kind == L_GEN) { /* a generator runs once: later iterations see nothing */
            if (l->items) l->items += l->n; /* (NULL + 0 is undefined in C) */
            l->n = l->cap = 0;
        }
        return 0;
    }
    case TV_DICT:
        if (v->u.d->kind != D_DICT) break;
        *items = v->u.d->keys;
        *n = v->u.d->n;
        return 0;
    case TV_STR: {
        size_t cnt = py_cp_count(v->u.s, v->len);
        tv *arr = tpl_alloc(c->arena, (cnt ? cnt : 1) * sizeof(tv));
        if (!arr) return tpl_oom(c);
        size_t i = 0, k = 0;
        while (i < v->len) {
            size_t st = i;
            py_utf8_next(v->u.s, v->len, &i);
            arr[k++] = tv_str(v->u.s + st, i - st);
        }
        *items = arr;
        *n = k;
        return 0;
    }
    default: break;
    }
    return tpl_fail(c, XLLM_ERR_FORMAT, "'%s' object is not iterable", tv_type_name(v));
}

/* ------------------------------------------------------------------ buffer */

buf_t tpl_buf_make(tpl_ctx *c) {
    buf_t b;
    memset(&b, 0, sizeof b);
    b.max = c->max_output;
    return b;
}

/* A buffer failure becomes the render's error. */
static int buf_fail(tpl_ctx *c, const buf_t *b) {
    if (b->err == XLLM_BUF_OOM) return tpl_oom(c);
    if (b->err == XLLM_BUF_OVER) return tpl_fail(c, XLLM_ERR_FORMAT, "the rendered text is larger than the limit (%zu bytes)", b->max);
    return -1; /* an error was reported already */
}

int tpl_buf_to_value(tpl_ctx *c, buf_t *b, tv *out) {
    if (b->err) {
        int rc = buf_fail(c, b);
        buf_free(b);
        return rc;
    }
    int rc = tv_str_copy(c, b->p ? b->p : "", b->len, out);
    buf_free(b);
    return rc;
}

/* ---------------------------------------------------------- str() / repr() */

static int write_value(tpl_ctx *c, const tv *v, buf_t *b, int repr, int depth);

static int write_seq(tpl_ctx *c, const tv *items, size_t n, buf_t *b, int depth) {
    for (size_t i = 0; i < n; i++) {
        if (i && buf_append(b, ", ", 2)) return -1;
        if (write_value(c, &items[i], b, 1, depth + 1)) return -1;
    }
    return 0;
}

static int write_dict(tpl_ctx *c, const tv_dict *d, buf_t *b, int depth) {
    if (buf_putc(b, '{')) return -1;
    for (size_t i = 0; i < d->n; i++) {
        if (i && buf_append(b, ", ", 2)) return -1;
        if (write_value(c, &d->keys[i], b, 1, depth + 1) || buf_append(b, ": ", 2) ||
            write_value(c, &d->vals[i], b, 1, depth + 1))
            return -1;
    }
    return buf_putc(b, '}');
}

static int write_value(tpl_ctx *c, const tv *v, buf_t *b, int repr, int depth) {
    if (depth > TPL_MAX_DEPTH) return tpl_fail(c, XLLM_ERR_FORMAT, "value nested too deeply to print");
    char num[48];
    switch (v->kind) {
    case TV_MISSING:
    case TV_UNDEF: return repr ? buf_append(b, "Undefined", 9) : 0;
    case TV_NONE: return buf_append(b, "None", 4);
    case TV_BOOL: return v->u.b ? buf_append(b, "True", 4) : buf_append(b, "False", 5);
    case TV_INT: return buf_printf(b, "%" PRId64, v->u.i);
    case TV_FLOAT: py_float_repr(v->u.f, num); return buf_append(b, num, strlen(num));
    case TV_STR: return repr ? py_str_repr(b, v->u.s, v->len) : buf_append(b, v->u.s, v->len);
    case TV_LIST: {
        const tv_list *l = v->u.l;
        switch (l->kind) {
        case L_LIST:
            return buf_putc(b, '[') || write_seq(c, l->items, l->n, b, depth) || buf_putc(b, ']') ? -1 : 0;
        case L_TUPLE:
            if (buf_putc(b, '(') || write_seq(c, l->items, l->n, b, depth)) return -1;
            if (l->n == 1 && buf_putc(b, ',')) return -1;
            return buf_putc(b, ')');
        case L_RANGE:
            if (l->r_step == 1) return buf_printf(b, "range(%" PRId64 ", %" PRId64 ")", l->r_start, l->r_stop);
            return buf_printf(b, "range(%" PRId64 ", %" PRId64 ", %" PRId64 ")", l->r_start, l->r_stop, l->r_step);
        case L_KEYS: case L_VALUES: case L_ITEMS: {
            const char *pre = l->kind == L_KEYS ? "dict_keys([" : l->kind == L_VALUES ? "dict_values([" : "dict_items([";
            return buf_append(b, pre, strlen(pre)) || write_seq(c, l->items, l->n, b, depth) || buf_append(b, "])", 2)
                       ? -1 : 0;
        }
        default:
            return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "a generator has no stable text (Python prints its address); "
                                                     "apply |list first");
        }
    }
    case TV_DICT: {
        const tv_dict *d = v->u.d;
        if (d->kind == D_LOOP) return buf_printf(b, "<LoopContext %zu/%zu>", d->loop->index0 + 1, d->loop->length);
        if (d->kind == D_NAMESPACE)
            return buf_append(b, "<Namespace ", 11) || write_dict(c, d, b, depth) || buf_putc(b, '>') ? -1 : 0;
        return write_dict(c, d, b, depth);
    }
    case TV_FUNC:
        return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "%s '%s' has no stable text (Python prints its address)",
                        v->u.fn->kind == F_MACRO ? "macro" : "function", v->u.fn->name);
    }
    return -1;
}

int tv_to_str(tpl_ctx *c, const tv *v, buf_t *b) {
    if (write_value(c, v, b, 0, 0)) return c->failed ? -1 : buf_fail(c, b);
    return 0;
}

int tv_repr(tpl_ctx *c, const tv *v, buf_t *b) {
    if (write_value(c, v, b, 1, 0)) return c->failed ? -1 : buf_fail(c, b);
    return 0;
}

int tv_stringify(tpl_ctx *c, const tv *v, tv *out) {
    if (v->kind == TV_STR) { *out = *v; return 0; }
    if (v->kind == TV_UNDEF || v->kind == TV_MISSING) { *out = tv_str("", 0); return 0; }
    buf_t b = tpl_buf_make(c);
    if (tv_to_str(c, v, &b)) {
        buf_free(&b);
        return -1;
    }
    return tpl_buf_to_value(c, &b, out);
}
