/*
 * globals.c - the functions a template can call by name: Jinja2's range,
 * dict, namespace (cycler, joiner and lipsum are refused), and HuggingFace's
 * raise_exception and strftime_now. range is jinja2.sandbox's safe_range:
 * more than 100000 items is an error.
 */
#include "template/tpl.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static int g_range(tpl_ctx *c, const tv *self, const tpl_args *a, tv *out) {
    (void)self;
    if (a->nkw) return tpl_fail(c, XLLM_ERR_FORMAT, "range() takes no keyword arguments");
    if (a->npos < 1 || a->npos > 3)
        return tpl_fail(c, XLLM_ERR_FORMAT, "range expected 1 to 3 arguments, got %zu", a->npos);
    int64_t v[3] = {0, 0, 1};
    for (size_t i = 0; i < a->npos; i++)
        if (tpl_arg_int(c, "range", &a->pos[i], &v[i])) return -1;
    int64_t start = a->npos == 1 ? 0 : v[0], stop = a->npos == 1 ? v[0] : v[1], step = a->npos == 3 ? v[2] : 1;
    if (step == 0) return tpl_fail(c, XLLM_ERR_FORMAT, "range() arg 3 must not be zero");
    /* exact in uint64: stop - start and -step may not fit an int64
     * (range(0, 1, -2**63), range(-2**63, 2**63 - 1, 2**62)) */
    uint64_t span = step > 0 ? (stop > start ? (uint64_t)stop - (uint64_t)start : 0)
                             : (start > stop ? (uint64_t)start - (uint64_t)stop : 0);
    uint64_t astep = step > 0 ? (uint64_t)step : (uint64_t)0 - (uint64_t)step;
    uint64_t cnt64 = span ? (span - 1) / astep + 1 : 0;
    if (cnt64 > TPL_MAX_RANGE)
        return tpl_fail(c, XLLM_ERR_FORMAT, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).",
                        TPL_MAX_RANGE);
    size_t cnt = (size_t)cnt64;
    if (tpl_work(c, cnt)) return -1; /* the list is built now */
    tv_list *l = tv_list_new(c, L_RANGE, cnt);
    if (!l) return -1;
    /* start + i * step lies between start and stop, but i * step alone may not fit an
     * int64 (range(-2**63, 2**63 - 1, 2**62)): computed modulo 2^64, exact in the end */
    for (size_t i = 0; i < cnt; i++)
        l->items[l->n++] = tv_int((int64_t)((uint64_t)start + (uint64_t)i * (uint64_t)step));
    l->r_start = start;
    l->r_stop = stop;
    l->r_step = step;
    *out = tv_list_val(l);
    return 0;
}

static int merge_mapping(tpl_ctx *c, tv_dict *d, const tv *src, const char *what) {
    if (src->kind == TV_DICT && src->u.d->kind == D_DICT) {
        for (size_t i = 0; i < src->u.d->n; i++)
            if (tv_dict_set(c, d, src->u.d->keys[i], src->u.d->vals[i])) return -1;
        return 0;
    }
    if (src->kind == TV_LIST) { /* a sequence of pairs */
        for (size_t i = 0; i < src->u.l->n; i++) {
            const tv *pair = &src->u.l->items[i];
            const tv *kv;
            size_t n;
            if (tv_iter(c, pair, &kv, &n)) return -1;
            if (n != 2) return tpl_fail(c, XLLM_ERR_FORMAT, "%s: sequence element #%zu has length %zu; 2 is required", what, i, n);
            if (tv_dict_set(c, d, kv[0], kv[1])) return -1;
        }
        return 0;
    }
    return tpl_fail(c, XLLM_ERR_FORMAT, "%s: '%s' object is not a mapping", what, tv_type_name(src));
}

static int make_dict(tpl_ctx *c, const tpl_args *a, int kind, const char *what, tv *out) {
    tv_dict *d = tv_dict_new(c, kind);
    if (!d) return -1;
    if (a->npos > 1) return tpl_fail(c, XLLM_ERR_FORMAT, "%s expected at most 1 positional argument, got %zu", what, a->npos);
    if (a->npos == 1 && merge_mapping(c, d, &a->pos[0], what)) return -1;
    for (size_t k = 0; k < a->nkw; k++)
        if (tv_dict_set(c, d, tv_str_cstr(a->kw_names[k]), a->kw[k])) return -1;
    *out = tv_dict_val(d);
    return 0;
}

static int g_dict(tpl_ctx *c, const tv *self, const tpl_args *a, tv *out) {
    (void)self;
    return make_dict(c, a, D_DICT, "dict()", out);
}

static int g_namespace(tpl_ctx *c, const tv *self, const tpl_args *a, tv *out) {
    (void)self;
    return make_dict(c, a, D_NAMESPACE, "namespace()", out);
}

static int g_raise_exception(tpl_ctx *c, const tv *self, const tpl_args *a, tv *out) {
    (void)self;
    (void)out;
    tv msg = a->npos ? a->pos[0] : tv_str("", 0);
    tv s;
    if (tv_stringify(c, &msg, &s)) return -1;
    return tpl_fail(c, XLLM_ERR_INVALID_ARGUMENT, "raise_exception: %.*s", (int)(s.len > 700 ? 700 : s.len), s.u.s);
}

static int g_strftime_now(tpl_ctx *c, const tv *self, const tpl_args *a, tv *out) {
    (void)self;
    static const char *const names[] = {"format"};
    tv f;
    if (tpl_bind(c, "strftime_now()", a, names, 1, &f)) return -1;
    if (f.kind != TV_STR) return tpl_fail(c, XLLM_ERR_FORMAT, "strftime_now() needs a format string");
    char fmt[256], buf[512];
    if (f.len >= sizeof fmt) return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "strftime_now(): format too long");
    memcpy(fmt, f.u.s, f.len);
    fmt[f.len] = 0;
    time_t now = time(NULL);
    struct tm tmv;
    localtime_r(&now, &tmv);
    size_t n = fmt[0] ? strftime(buf, sizeof buf, fmt, &tmv) : 0;
    return tv_str_copy(c, buf, n, out);
}

static int g_refused(tpl_ctx *c, const tv *self, const tpl_args *a, tv *out) {
    (void)a;
    (void)out;
    return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "the global '%.*s' is not supported", (int)self->len, self->u.s);
}

static const struct {
    const char *name;
    tpl_builtin fn;
} GLOBALS[] = {{"range", g_range},         {"dict", g_dict},           {"namespace", g_namespace},
               {"raise_exception", g_raise_exception}, {"strftime_now", g_strftime_now},
               {"cycler", g_refused},      {"joiner", g_refused},      {"lipsum", g_refused}};

int tpl_global(tpl_ctx *c, const char *name, tv *out) {
    *out = tv_missing();
    for (size_t i = 0; i < sizeof GLOBALS / sizeof *GLOBALS; i++) {
        if (strcmp(name, GLOBALS[i].name)) continue;
        tv_func *f = tpl_alloc(c->arena, sizeof *f);
        if (!f) return tpl_oom(c);
        memset(f, 0, sizeof *f);
        f->kind = F_BUILTIN;
        f->name = GLOBALS[i].name;
        f->fn = GLOBALS[i].fn;
        f->self = tv_str_cstr(GLOBALS[i].name);
        out->kind = TV_FUNC;
        out->len = 0;
        out->u.fn = f;
        return 0;
    }
    return 0;
}
