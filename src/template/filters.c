/*
 * filters.c - Jinja2's builtin filters (`value|name(args)`), with Jinja2
 * 3.1's argument names, defaults and quirks, and HuggingFace's tojson
 * (json.dumps with ensure_ascii=False; indent, separators, sort_keys).
 *
 * Filters that Jinja2 implements as generators (map, select, reject,
 * selectattr, rejectattr, unique, items, reverse of a list) return a
 * generator value: it iterates and converts with |list, but has no len()
 * and no printable text, as in Python. Builtin filters we do not implement
 * are rejected by name when the template is compiled.
 */
#include "template/tpl.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define FILTER(name) static int name(tpl_ctx *c, const tv *in, const tpl_args *a, tv *out)

static int is_missing(const tv *v) { return v->kind == TV_MISSING; }

static int str_of(tpl_ctx *c, const tv *v, tv *out) { return tv_stringify(c, v, out); }

/* Call a str method implementation through the method table. */
static int call_method(tpl_ctx *c, const tv *self, const char *name, const tv *args, size_t nargs, tv *out) {
    tv m;
    if (tpl_method(c, self, name, strlen(name), &m)) return -1;
    if (m.kind != TV_FUNC) return tpl_fail(c, XLLM_ERR_INTERNAL, "no method %s", name);
    tpl_args ca = {args, nargs, NULL, NULL, 0};
    return tpl_call(c, &m, &ca, out);
}

/* Iterate, failing on undefined only where Jinja would. */
static int items_of(tpl_ctx *c, const tv *v, const tv **items, size_t *n) { return tv_iter(c, v, items, n); }

static tv_list *gen_new(tpl_ctx *c, size_t cap) { return tv_list_new(c, L_GEN, cap); }

/* ----------------------------------------------------------- text filters */

FILTER(f_trim) {
    static const char *const names[] = {"chars"};
    tv p[1], s;
    if (tpl_bind(c, "trim", a, names, 1, p) || str_of(c, in, &s)) return -1;
    tv args[1] = {p[0]};
    return call_method(c, &s, "strip", args, is_missing(&p[0]) ? 0 : 1, out);
}

static int text_method(tpl_ctx *c, const tv *in, const tpl_args *a, const char *what, const char *method, tv *out) {
    tv s;
    if (tpl_bind(c, what, a, NULL, 0, NULL) || str_of(c, in, &s)) return -1;
    return call_method(c, &s, method, NULL, 0, out);
}
FILTER(f_upper) { return text_method(c, in, a, "upper", "upper", out); }
FILTER(f_lower) { return text_method(c, in, a, "lower", "lower", out); }
FILTER(f_capitalize) { return text_method(c, in, a, "capitalize", "capitalize", out); }

/* Jinja's title: split before runs of - whitespace ( { [ <, then each piece is
 * piece[0].upper() + piece[1:].lower() (lower() sees only the piece). */
FILTER(f_title) {
    tv s;
    if (tpl_bind(c, "title", a, NULL, 0, NULL) || str_of(c, in, &s)) return -1;
    buf_t b = tpl_buf_make(c);
    size_t i = 0;
    while (i < s.len) {
        size_t st = i, j = i;
        uint32_t cp = py_utf8_next(s.u.s, s.len, &j);
        int sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || py_isspace(cp);
        /* a piece: a run of separators, or a run of other characters */
        while (i < s.len) {
            size_t k = i;
            uint32_t q = py_utf8_next(s.u.s, s.len, &k);
            int qs = q == '-' || q == '(' || q == '{' || q == '[' || q == '<' || py_isspace(q);
            if (qs != sep) break;
            i = k;
        }
        if (sep) {
            buf_append(&b, s.u.s + st, i - st);
        } else {
            py_upper(&b, s.u.s + st, j - st);
            py_lower(&b, s.u.s + j, i - j);
        }
    }
    return tpl_buf_to_value(c, &b, out);
}

FILTER(f_replace) {
    static const char *const names[] = {"old", "new", "count"};
    tv p[3], s, o, n;
    if (tpl_bind(c, "replace", a, names, 3, p)) return -1;
    if (is_missing(&p[0]) || is_missing(&p[1])) return tpl_fail(c, XLLM_ERR_FORMAT, "replace needs old and new");
    if (str_of(c, in, &s) || str_of(c, &p[0], &o) || str_of(c, &p[1], &n)) return -1;
    tv args[3] = {o, n, p[2]};
    if (p[2].kind == TV_NONE) args[2] = tv_int(-1);
    return call_method(c, &s, "replace", args, is_missing(&p[2]) ? 2 : 3, out);
}

FILTER(f_string) {
    if (tpl_bind(c, "string", a, NULL, 0, NULL)) return -1;
    return str_of(c, in, out);
}

FILTER(f_safe) {
    if (tpl_bind(c, "safe", a, NULL, 0, NULL)) return -1;
    return str_of(c, in, out);
}

FILTER(f_escape) {
    tv s;
    if (tpl_bind(c, "escape", a, NULL, 0, NULL) || str_of(c, in, &s)) return -1;
    buf_t b = tpl_buf_make(c);
    for (size_t i = 0; i < s.len; i++) {
        switch (s.u.s[i]) {
        case '&': buf_append(&b, "&amp;", 5); break;
        case '<': buf_append(&b, "&lt;", 4); break;
        case '>': buf_append(&b, "&gt;", 4); break;
        case '"': buf_append(&b, "&#34;", 5); break;
        case '\'': buf_append(&b, "&#39;", 5); break;
        default: buf_putc(&b, s.u.s[i]);
        }
    }
    return tpl_buf_to_value(c, &b, out);
}

FILTER(f_center) {
    static const char *const names[] = {"width"};
    tv p[1], s;
    if (tpl_bind(c, "center", a, names, 1, p) || str_of(c, in, &s)) return -1;
    tv args[1] = {is_missing(&p[0]) ? tv_int(80) : p[0]};
    return call_method(c, &s, "center", args, 1, out);
}

FILTER(f_indent) {
    static const char *const names[] = {"width", "first", "blank"};
    tv p[3], s;
    if (tpl_bind(c, "indent", a, names, 3, p)) return -1;
    if (in->kind == TV_UNDEF) return tpl_fail_undef(c, in); /* s += "\n" on Undefined raises */
    if (in->kind != TV_STR)
        return tpl_fail(c, XLLM_ERR_FORMAT, "unsupported operand type(s) for +=: '%s' and 'str'", tv_type_name(in));
    s = *in;
    tv ind;
    if (!is_missing(&p[0]) && p[0].kind == TV_STR) ind = p[0];
    else {
        int64_t w = 4;
        if (!is_missing(&p[0]) && tpl_arg_int(c, "indent width", &p[0], &w)) return -1;
        if (w < 0) w = 0;
        if ((uint64_t)w > 4096) return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "indent width too large");
        char *sp = tpl_alloc(c->arena, (size_t)w + 1);
        if (!sp) return tpl_oom(c);
        memset(sp, ' ', (size_t)w);
        ind = tv_str(sp, (size_t)w);
    }
    int first = !is_missing(&p[1]) && tv_truthy(&p[1]), blank = !is_missing(&p[2]) && tv_truthy(&p[2]);
    /* s += "\n"; lines = s.splitlines() */
    char *tmp = tpl_alloc(c->arena, s.len + 2);
    if (!tmp) return tpl_oom(c);
    memcpy(tmp, s.u.s, s.len);
    tmp[s.len] = '\n';
    tv s2 = tv_str(tmp, s.len + 1), lines;
    if (call_method(c, &s2, "splitlines", NULL, 0, &lines)) return -1;
    const tv_list *L = lines.u.l;
    buf_t b = tpl_buf_make(c);
    if (first) buf_append(&b, ind.u.s, ind.len);
    for (size_t i = 0; i < L->n; i++) {
        if (i) {
            buf_putc(&b, '\n');
            if (blank || L->items[i].len) buf_append(&b, ind.u.s, ind.len);
        }
        buf_append(&b, L->items[i].u.s, L->items[i].len);
    }
    return tpl_buf_to_value(c, &b, out);
}

FILTER(f_truncate) {
    static const char *const names[] = {"length", "killwords", "end", "leeway"};
    tv p[4], s;
    if (tpl_bind(c, "truncate", a, names, 4, p)) return -1;
    if (in->kind != TV_STR) { /* len(s) first: short sized values come back as they are */
        size_t n;
        int64_t length = 255, leeway = 5;
        if (tv_len(c, in, &n)) return -1;
        if (!is_missing(&p[0]) && tpl_arg_int(c, "truncate length", &p[0], &length)) return -1;
        if (!is_missing(&p[3]) && p[3].kind != TV_NONE && tpl_arg_int(c, "truncate leeway", &p[3], &leeway)) return -1;
        int64_t lim;
        if (tpl_add_ovf(length, leeway, &lim)) lim = length > 0 ? INT64_MAX : INT64_MIN;
        if ((int64_t)n <= lim) { *out = *in; return 0; }
        return tpl_fail(c, XLLM_ERR_FORMAT, "'%s' object has no attribute 'rsplit'", tv_type_name(in));
    }
    s = *in;
    int64_t length = 255, leeway = 5;
    if (!is_missing(&p[0]) && tpl_arg_int(c, "truncate length", &p[0], &length)) return -1;
    if (!is_missing(&p[3]) && p[3].kind != TV_NONE && tpl_arg_int(c, "truncate leeway", &p[3], &leeway)) return -1;
    tv end = tv_str("...", 3);
    if (!is_missing(&p[2]) && str_of(c, &p[2], &end)) return -1;
    int64_t endn = (int64_t)py_cp_count(end.u.s, end.len), n = (int64_t)py_cp_count(s.u.s, s.len);
    if (length < endn) return tpl_fail(c, XLLM_ERR_FORMAT, "expected length >= %" PRId64 ", got %" PRId64, endn, length);
    if (leeway < 0) return tpl_fail(c, XLLM_ERR_FORMAT, "expected leeway >= 0");
    if (length > INT64_MAX - leeway || n <= length + leeway) { *out = s; return 0; } /* leeway >= 0 here */
    size_t cut = py_cp_offset(s.u.s, s.len, (size_t)(length - endn));
    tv head = tv_str(s.u.s, cut);
    if (!(!is_missing(&p[1]) && tv_truthy(&p[1]))) {
        for (size_t k = cut; k-- > 0;)
            if (s.u.s[k] == ' ') { head.len = k; break; }
    }
    buf_t b = tpl_buf_make(c);
    buf_append(&b, head.u.s, head.len);
    buf_append(&b, end.u.s, end.len);
    return tpl_buf_to_value(c, &b, out);
}

FILTER(f_wordcount) {
    tv s;
    if (tpl_bind(c, "wordcount", a, NULL, 0, NULL) || str_of(c, in, &s)) return -1;
    int64_t n = 0;
    int inword = 0;
    size_t i = 0;
    while (i < s.len) {
        uint32_t cp = py_utf8_next(s.u.s, s.len, &i);
        int w = cp == '_' || py_isalnum(cp);
        if (w && !inword) n++;
        inword = w;
    }
    *out = tv_int(n);
    return 0;
}

FILTER(f_format) {
    tv s;
    if (str_of(c, in, &s)) return -1;
    if (a->npos && a->nkw) return tpl_fail(c, XLLM_ERR_FORMAT, "can't handle positional and keyword arguments at the same time");
    tv args;
    if (a->nkw) {
        tv_dict *d = tv_dict_new(c, D_DICT);
        if (!d) return -1;
        for (size_t k = 0; k < a->nkw; k++)
            if (tv_dict_set(c, d, tv_str_cstr(a->kw_names[k]), a->kw[k])) return -1;
        args = tv_dict_val(d);
    } else {
        tv_list *l = tv_list_new(c, L_TUPLE, a->npos);
        if (!l) return -1;
        for (size_t i = 0; i < a->npos; i++) l->items[l->n++] = a->pos[i];
        args = tv_list_val(l);
    }
    return tpl_percent_format(c, &s, &args, out);
}

/* ------------------------------------------------------------------ JSON */

FILTER(f_tojson) {
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    tv p[4];
    if (tpl_bind(c, "tojson", a, names, 4, p)) return -1;
    tpl_json_opts o;
    memset(&o, 0, sizeof o);
    o.ensure_ascii = !is_missing(&p[0]) && tv_truthy(&p[0]);
    o.sort_keys = !is_missing(&p[3]) && tv_truthy(&p[3]);
    char *spaces = NULL;
    if (!is_missing(&p[1]) && p[1].kind != TV_NONE) {
        o.has_indent = 1;
        if (p[1].kind == TV_STR) {
            o.indent = p[1].u.s;
            o.indent_len = p[1].len;
        } else {
            int64_t w;
            if (tpl_arg_int(c, "tojson indent", &p[1], &w)) return -1;
            if (w < 0) w = 0;
            if (w > 256) return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "tojson indent too large");
            spaces = tpl_alloc(c->arena, (size_t)w + 1);
            if (!spaces) return tpl_oom(c);
            memset(spaces, ' ', (size_t)w);
            o.indent = spaces;
            o.indent_len = (size_t)w;
        }
    }
    o.item_sep = o.has_indent ? "," : ", ";
    o.item_sep_len = o.has_indent ? 1 : 2;
    o.key_sep = ": ";
    o.key_sep_len = 2;
    if (!is_missing(&p[2]) && p[2].kind != TV_NONE) {
        const tv *seps;
        size_t n;
        if (tv_iter(c, &p[2], &seps, &n)) return -1;
        if (n != 2 || seps[0].kind != TV_STR || seps[1].kind != TV_STR)
            return tpl_fail(c, XLLM_ERR_FORMAT, "tojson separators must be two strings");
        o.item_sep = seps[0].u.s;
        o.item_sep_len = seps[0].len;
        o.key_sep = seps[1].u.s;
        o.key_sep_len = seps[1].len;
    }
    buf_t b = tpl_buf_make(c);
    if (tpl_json_dump(c, in, &o, &b)) {
        buf_free(&b);
        return -1;
    }
    return tpl_buf_to_value(c, &b, out);
}

/* ------------------------------------------------------- sequence filters */

FILTER(f_length) {
    if (tpl_bind(c, "length", a, NULL, 0, NULL)) return -1;
    size_t n;
    if (tv_len(c, in, &n)) return -1;
    *out = tv_int((int64_t)n);
    return 0;
}

FILTER(f_list) {
    if (tpl_bind(c, "list", a, NULL, 0, NULL)) return -1;
    const tv *items;
    size_t n;
    if (items_of(c, in, &items, &n)) return -1;
    tv_list *l = tv_list_new(c, L_LIST, n);
    if (!l) return -1;
    if (n) memcpy(l->items, items, n * sizeof(tv));
    l->n = n;
    *out = tv_list_val(l);
    return 0;
}

FILTER(f_first) {
    if (tpl_bind(c, "first", a, NULL, 0, NULL)) return -1;
    if (in->kind == TV_LIST && in->u.l->kind == L_GEN) { /* next(gen): takes one item */
        tv_list *g = in->u.l;
        if (!g->n) { *out = tv_undef_fmt(c, "No first item, sequence was empty."); return 0; }
        *out = g->items[0];
        g->items++;
        g->n--;
        g->cap = g->n;
        return 0;
    }
    const tv *items;
    size_t n;
    if (items_of(c, in, &items, &n)) return -1;
    *out = n ? items[0] : tv_undef_fmt(c, "No first item, sequence was empty.");
    return 0;
}

FILTER(f_last) {
    if (tpl_bind(c, "last", a, NULL, 0, NULL)) return -1;
    if (in->kind == TV_LIST && in->u.l->kind == L_GEN)
        return tpl_fail(c, XLLM_ERR_FORMAT, "'generator' object is not reversible");
    const tv *items;
    size_t n;
    if (items_of(c, in, &items, &n)) return -1;
    *out = n ? items[n - 1] : tv_undef_fmt(c, "No last item, sequence was empty.");
    return 0;
}

FILTER(f_reverse) {
    if (tpl_bind(c, "reverse", a, NULL, 0, NULL)) return -1;
    if (in->kind == TV_STR) {
        char *p = tpl_alloc(c->arena, in->len + 1);
        if (!p) return tpl_oom(c);
        size_t i = 0, o = in->len;
        while (i < in->len) {
            size_t st = i;
            py_utf8_next(in->u.s, in->len, &i);
            o -= i - st;
            memcpy(p + o, in->u.s + st, i - st);
        }
        p[in->len] = 0;
        *out = tv_str(p, in->len);
        return 0;
    }
    const tv *items;
    size_t n;
    if (items_of(c, in, &items, &n)) return -1; /* reversed(Undefined) is empty */
    int gen = !(in->kind == TV_LIST && in->u.l->kind == L_GEN); /* reversed() gives an iterator */
    tv_list *l = tv_list_new(c, gen ? L_GEN : L_LIST, n);
    if (!l) return -1;
    for (size_t i = 0; i < n; i++) l->items[i] = items[n - 1 - i];
    l->n = n;
    *out = tv_list_val(l);
    return 0;
}

FILTER(f_join) {
    static const char *const names[] = {"d", "attribute"};
    tv p[2], sep = tv_str("", 0);
    if (tpl_bind(c, "join", a, names, 2, p)) return -1;
    if (!is_missing(&p[0]) && str_of(c, &p[0], &sep)) return -1;
    const tv *items;
    size_t n;
    if (items_of(c, in, &items, &n)) return -1;
    buf_t b = tpl_buf_make(c);
    for (size_t i = 0; i < n; i++) {
        tv v = items[i];
        if (!is_missing(&p[1]) && p[1].kind != TV_NONE && tpl_attr_path(c, &items[i], &p[1], &v)) goto fail;
        if (i && buf_append(&b, sep.u.s, sep.len)) break;
        if (tv_to_str(c, &v, &b)) goto fail;
    }
    return tpl_buf_to_value(c, &b, out);
fail:
    buf_free(&b);
    return -1;
}

FILTER(f_default) {
    static const char *const names[] = {"default_value", "boolean"};
    tv p[2];
    if (tpl_bind(c, "default", a, names, 2, p)) return -1;
    int boolean = !is_missing(&p[1]) && tv_truthy(&p[1]);
    if (in->kind == TV_UNDEF || in->kind == TV_MISSING || (boolean && !tv_truthy(in)))
        *out = is_missing(&p[0]) ? tv_str("", 0) : p[0];
    else
        *out = *in;
    return 0;
}

FILTER(f_items) {
    if (tpl_bind(c, "items", a, NULL, 0, NULL)) return -1;
    tv_list *l = gen_new(c, 0);
    if (!l) return -1;
    if (in->kind != TV_UNDEF) {
        if (in->kind != TV_DICT || in->u.d->kind != D_DICT)
            return tpl_fail(c, XLLM_ERR_FORMAT, "items: can only get item pairs from a mapping");
        tv m;
        if (tpl_method(c, in, "items", 5, &m)) return -1;
        tpl_args none = {NULL, 0, NULL, NULL, 0};
        tv view;
        if (tpl_call(c, &m, &none, &view)) return -1;
        l->items = view.u.l->items;
        l->n = l->cap = view.u.l->n;
    }
    *out = tv_list_val(l);
    return 0;
}

/* Jinja's make_attrgetter: "a.b.0" walks getitem with digit parts as ints. */
int tpl_attr_path(tpl_ctx *c, const tv *item, const tv *path, tv *out) {
    if (path->kind != TV_STR) return tpl_getitem(c, item, path, out);
    tv cur = *item;
    size_t i = 0;
    for (;;) {
        size_t e = i;
        while (e < path->len && path->u.s[e] != '.') e++;
        int digits = e > i, big = 0;
        int64_t iv = 0;
        for (size_t k = i; k < e; k++) {
            if (path->u.s[k] < '0' || path->u.s[k] > '9') digits = 0;
            else if (tpl_mul_ovf(iv, 10, &iv) || tpl_add_ovf(iv, path->u.s[k] - '0', &iv)) big = 1;
        }
        tv key = digits ? tv_int(iv) : tv_str(path->u.s + i, e - i), nv;
        if (digits && big) /* beyond any index or int key we can hold: Python finds nothing either */
            nv = tv_undef_fmt(c, "no item %.*s", (int)(e - i < 64 ? e - i : 64), path->u.s + i);
        else if (tpl_getitem(c, &cur, &key, &nv))
            return -1;
        cur = nv;
        if (e >= path->len) break;
        i = e + 1;
    }
    *out = cur;
    return 0;
}

/* Case folding for comparisons when case_sensitive is false. */
static int fold(tpl_ctx *c, const tv *v, tv *out) {
    if (v->kind != TV_STR) { *out = *v; return 0; }
    buf_t b = tpl_buf_make(c);
    py_lower(&b, v->u.s, v->len);
    return tpl_buf_to_value(c, &b, out);
}

/* Keys for sorting/unique/min/max: attribute path (comma-separated for
 * sort), then case folding. */
static int key_of(tpl_ctx *c, const tv *item, const tv *attr, int case_sensitive, tv *out) {
    tv v = *item;
    if (attr && !is_missing(attr) && attr->kind != TV_NONE && tpl_attr_path(c, item, attr, &v)) return -1;
    if (!case_sensitive) return fold(c, &v, out);
    *out = v;
    return 0;
}

static int sort_keys_multi(tpl_ctx *c, const tv *item, const tv *attr, int cs, tv *out) {
    /* "a,b" -> a tuple of keys */
    if (attr->kind == TV_STR && memchr(attr->u.s, ',', attr->len)) {
        tv_list *t = tv_list_new(c, L_TUPLE, 0);
        if (!t) return -1;
        size_t i = 0;
        for (;;) {
            size_t e = i;
            while (e < attr->len && attr->u.s[e] != ',') e++;
            tv part = tv_str(attr->u.s + i, e - i), k;
            if (key_of(c, item, &part, cs, &k) || tv_list_push(c, t, k)) return -1;
            if (e >= attr->len) break;
            i = e + 1;
        }
        *out = tv_list_val(t);
        return 0;
    }
    return key_of(c, item, attr, cs, out);
}

/* Stable merge sort of idx[] by keys[]; reverse compares the other way
 * (Python's reverse=True keeps equal items in order). */
static int msort(tpl_ctx *c, size_t *idx, size_t *tmp, size_t n, const tv *keys, int reverse) {
    if (n < 2) return 0;
    size_t h = n / 2;
    if (msort(c, idx, tmp, h, keys, reverse) || msort(c, idx + h, tmp, n - h, keys, reverse)) return -1;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int lt;
        /* take right first only when right < left */
        if (reverse ? tv_lt(c, &keys[idx[i]], &keys[idx[j]], &lt) : tv_lt(c, &keys[idx[j]], &keys[idx[i]], &lt)) return -1;
        tmp[k++] = lt ? idx[j++] : idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
    return 0;
}

static int sorted_items(tpl_ctx *c, const tv *items, size_t n, const tv *keys, int reverse, tv_list **res) {
    size_t *idx = tpl_alloc(c->arena, (n + 1) * sizeof *idx), *tmp = tpl_alloc(c->arena, (n + 1) * sizeof *tmp);
    if (!idx || !tmp) return tpl_oom(c);
    for (size_t i = 0; i < n; i++) idx[i] = i;
    size_t lg = 1;
    while (((size_t)1 << lg) < n) lg++;
    if (tpl_work(c, n * lg) || msort(c, idx, tmp, n, keys, reverse)) return -1;
    tv_list *l = tv_list_new(c, L_LIST, n);
    if (!l) return -1;
    for (size_t i = 0; i < n; i++) l->items[i] = items[idx[i]];
    l->n = n;
    *res = l;
    return 0;
}

FILTER(f_sort) {
    static const char *const names[] = {"reverse", "case_sensitive", "attribute"};
    tv p[3];
    if (tpl_bind(c, "sort", a, names, 3, p)) return -1;
    int reverse = !is_missing(&p[0]) && tv_truthy(&p[0]), cs = !is_missing(&p[1]) && tv_truthy(&p[1]);
    const tv *items;
    size_t n;
    if (items_of(c, in, &items, &n)) return -1;
    tv *keys = tpl_alloc(c->arena, (n + 1) * sizeof(tv));
    if (!keys) return tpl_oom(c);
    for (size_t i = 0; i < n; i++)
        if (sort_keys_multi(c, &items[i], &p[2], cs, &keys[i])) return -1;
    tv_list *l;
    if (sorted_items(c, items, n, keys, reverse, &l)) return -1;
    *out = tv_list_val(l);
    return 0;
}

FILTER(f_dictsort) {
    static const char *const names[] = {"case_sensitive", "by", "reverse"};
    tv p[3];
    if (tpl_bind(c, "dictsort", a, names, 3, p)) return -1;
    if (in->kind != TV_DICT || in->u.d->kind != D_DICT)
        return tpl_fail(c, XLLM_ERR_FORMAT, "dictsort: can only sort a mapping");
    int cs = !is_missing(&p[0]) && tv_truthy(&p[0]), reverse = !is_missing(&p[2]) && tv_truthy(&p[2]);
    int by_value = 0;
    if (!is_missing(&p[1])) {
        if (p[1].kind == TV_STR && p[1].len == 5 && !memcmp(p[1].u.s, "value", 5)) by_value = 1;
        else if (!(p[1].kind == TV_STR && p[1].len == 3 && !memcmp(p[1].u.s, "key", 3)))
            return tpl_fail(c, XLLM_ERR_FORMAT, "You can only sort by either \"key\" or \"value\"");
    }
    const tv_dict *d = in->u.d;
    tv *pairs = tpl_alloc(c->arena, (d->n + 1) * sizeof(tv)), *keys = tpl_alloc(c->arena, (d->n + 1) * sizeof(tv));
    if (!pairs || !keys) return tpl_oom(c);
    for (size_t i = 0; i < d->n; i++) {
        tv_list *t = tv_list_new(c, L_TUPLE, 2);
        if (!t) return -1;
        t->items[0] = d->keys[i];
        t->items[1] = d->vals[i];
        t->n = 2;
        pairs[i] = tv_list_val(t);
        if (key_of(c, by_value ? &d->vals[i] : &d->keys[i], NULL, cs, &keys[i])) return -1;
    }
    tv_list *l;
    if (sorted_items(c, pairs, d->n, keys, reverse, &l)) return -1;
    *out = tv_list_val(l);
    return 0;
}

FILTER(f_unique) {
    static const char *const names[] = {"case_sensitive", "attribute"};
    tv p[2];
    if (tpl_bind(c, "unique", a, names, 2, p)) return -1;
    int cs = !is_missing(&p[0]) && tv_truthy(&p[0]);
    const tv *items;
    size_t n;
    if (items_of(c, in, &items, &n)) return -1;
    /* Jinja2 keeps a set of the keys seen: hashed (linear time), and an
     * unhashable key is Python's TypeError */
    tv_list *l = gen_new(c, n);
    tv_dict *seen = tv_dict_new(c, D_DICT);
    if (!l || !seen) return -1;
    for (size_t i = 0; i < n; i++) {
        tv k;
        if (key_of(c, &items[i], &p[1], cs, &k)) return -1;
        if (k.kind != TV_STR && tv_check_hashable(c, &k)) return -1;
        if (tv_dict_get(seen, &k)) continue;
        if (tv_dict_set(c, seen, k, tv_none())) return -1;
        l->items[l->n++] = items[i];
    }
    *out = tv_list_val(l);
    return 0;
}

static int min_max(tpl_ctx *c, const tv *in, const tpl_args *a, int want_max, tv *out) {
    static const char *const names[] = {"case_sensitive", "attribute"};
    tv p[2];
    if (tpl_bind(c, want_max ? "max" : "min", a, names, 2, p)) return -1;
    int cs = !is_missing(&p[0]) && tv_truthy(&p[0]);
    const tv *items;
    size_t n;
    if (items_of(c, in, &items, &n)) return -1;
    if (!n) { *out = tv_undef_fmt(c, "No aggregated item, sequence was empty."); return 0; }
    size_t best = 0;
    tv bk;
    if (key_of(c, &items[0], &p[1], cs, &bk)) return -1;
    for (size_t i = 1; i < n; i++) {
        tv k;
        int lt;
        if (key_of(c, &items[i], &p[1], cs, &k)) return -1;
        if (want_max ? tv_lt(c, &bk, &k, &lt) : tv_lt(c, &k, &bk, &lt)) return -1;
        if (lt) { best = i; bk = k; }
    }
    *out = items[best];
    return 0;
}
FILTER(f_max) { return min_max(c, in, a, 1, out); }
FILTER(f_min) { return min_max(c, in, a, 0, out); }

FILTER(f_sum) {
    static const char *const names[] = {"attribute", "start"};
    tv p[2];
    if (tpl_bind(c, "sum", a, names, 2, p)) return -1;
    const tv *items;
    size_t n;
    if (items_of(c, in, &items, &n)) return -1;
    tv acc = is_missing(&p[1]) ? tv_int(0) : p[1];
    for (size_t i = 0; i < n; i++) {
        tv v = items[i], r;
        if (!is_missing(&p[0]) && p[0].kind != TV_NONE && tpl_attr_path(c, &items[i], &p[0], &v)) return -1;
        if (tpl_binop(c, OP_ADD, &acc, &v, &r)) return -1;
        acc = r;
    }
    *out = acc;
    return 0;
}

/* map / select / reject / selectattr / rejectattr */

static int call_filter_by_name(tpl_ctx *c, const tv *name, const tv *item, const tpl_args *rest, tv *out) {
    if (name->kind != TV_STR) return tpl_fail(c, XLLM_ERR_FORMAT, "map: the filter name must be a string");
    char nm[64];
    snprintf(nm, sizeof nm, "%.*s", (int)(name->len < 60 ? name->len : 60), name->u.s);
    tpl_filter_fn f = tpl_find_filter(nm);
    if (!f) return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "%s filter '%s'", tpl_is_jinja_filter(nm) ? "unsupported" : "unknown", nm);
    return f(c, item, rest, out);
}

FILTER(f_map) {
    const tv *items;
    size_t n;
    tv_list *l = gen_new(c, 0);
    if (!l) return -1;
    if (!tv_truthy(in)) { *out = tv_list_val(l); return 0; }
    if (items_of(c, in, &items, &n)) return -1;
    const tv *attr = NULL, *def = NULL;
    if (a->npos == 0) {
        for (size_t k = 0; k < a->nkw; k++) {
            if (!strcmp(a->kw_names[k], "attribute")) attr = &a->kw[k];
            else if (!strcmp(a->kw_names[k], "default")) def = &a->kw[k];
            else return tpl_fail(c, XLLM_ERR_FORMAT, "map: unexpected keyword argument '%s'", a->kw_names[k]);
        }
        if (!attr) return tpl_fail(c, XLLM_ERR_FORMAT, "map requires a filter argument");
    }
    for (size_t i = 0; i < n; i++) {
        tv v;
        if (attr) {
            if (tpl_attr_path(c, &items[i], attr, &v)) return -1;
            if (def && def->kind != TV_NONE && v.kind == TV_UNDEF) v = *def;
        } else {
            tpl_args rest = {a->pos + 1, a->npos - 1, a->kw_names, a->kw, a->nkw};
            if (call_filter_by_name(c, &a->pos[0], &items[i], &rest, &v)) return -1;
        }
        if (tv_list_push(c, l, v)) return -1;
    }
    *out = tv_list_val(l);
    return 0;
}

static int run_test(tpl_ctx *c, const tv *v, const tv *name, const tv *args, size_t nargs, int *res) {
    if (!name) { *res = tv_truthy(v); return 0; }
    if (name->kind != TV_STR) return tpl_fail(c, XLLM_ERR_FORMAT, "the test name must be a string");
    char nm[64];
    snprintf(nm, sizeof nm, "%.*s", (int)(name->len < 60 ? name->len : 60), name->u.s);
    tpl_test_fn t = tpl_find_test(nm);
    if (!t) return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "%s test '%s'", tpl_is_jinja_test(nm) ? "unsupported" : "unknown", nm);
    tpl_args ta = {args, nargs, NULL, NULL, 0};
    return t(c, v, &ta, res);
}

static int select_impl(tpl_ctx *c, const tv *in, const tpl_args *a, int by_attr, int keep, tv *out) {
    if (a->nkw) return tpl_fail(c, XLLM_ERR_FORMAT, "select/reject take no keyword arguments");
    size_t off = by_attr ? 1 : 0;
    if (by_attr && a->npos < 1) return tpl_fail(c, XLLM_ERR_FORMAT, "Missing parameter for attribute name");
    const tv *items;
    size_t n;
    tv_list *l = gen_new(c, 0);
    if (!l) return -1;
    if (!tv_truthy(in)) { *out = tv_list_val(l); return 0; }
    if (items_of(c, in, &items, &n)) return -1;
    const tv *name = a->npos > off ? &a->pos[off] : NULL;
    for (size_t i = 0; i < n; i++) {
        tv v = items[i];
        if (by_attr && tpl_attr_path(c, &items[i], &a->pos[0], &v)) return -1;
        int r;
        if (run_test(c, &v, name, name ? a->pos + off + 1 : NULL, name ? a->npos - off - 1 : 0, &r)) return -1;
        if ((r != 0) == keep && tv_list_push(c, l, items[i])) return -1;
    }
    *out = tv_list_val(l);
    return 0;
}
FILTER(f_select) { return select_impl(c, in, a, 0, 1, out); }
FILTER(f_reject) { return select_impl(c, in, a, 0, 0, out); }
FILTER(f_selectattr) { return select_impl(c, in, a, 1, 1, out); }
FILTER(f_rejectattr) { return select_impl(c, in, a, 1, 0, out); }

FILTER(f_attr) {
    static const char *const names[] = {"name"};
    tv p[1];
    if (tpl_bind(c, "attr", a, names, 1, p)) return -1;
    if (p[0].kind != TV_STR) return tpl_fail(c, XLLM_ERR_FORMAT, "attr: the name must be a string");
    if (in->kind == TV_UNDEF) return tpl_fail_undef(c, in);
    if (in->kind == TV_DICT && in->u.d->kind != D_DICT) return tpl_getattr(c, in, p[0].u.s, p[0].len, out);
    if (tpl_method(c, in, p[0].u.s, p[0].len, out)) return -1;
    if (out->kind == TV_MISSING) *out = tv_undef_fmt(c, "'%s object' has no attribute '%.*s'", tv_type_name(in), (int)p[0].len, p[0].u.s);
    return 0;
}

/* ---------------------------------------------------------------- numbers */

FILTER(f_abs) {
    if (tpl_bind(c, "abs", a, NULL, 0, NULL)) return -1;
    if (in->kind == TV_INT || in->kind == TV_BOOL) {
        int64_t v = in->kind == TV_BOOL ? in->u.b : in->u.i;
        if (v == INT64_MIN) return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "integer overflow");
        *out = tv_int(v < 0 ? -v : v);
        return 0;
    }
    if (in->kind == TV_FLOAT) { *out = tv_float(fabs(in->u.f)); return 0; }
    if (in->kind == TV_UNDEF) return tpl_fail_undef(c, in);
    return tpl_fail(c, XLLM_ERR_FORMAT, "bad operand type for abs(): '%s'", tv_type_name(in));
}

/* Python float(str): strip whitespace, underscores between digits, inf/nan. */
static int parse_py_float(const tv *s, double *out) {
    tv t;
    size_t a = 0, b = s->len;
    while (a < b) { size_t j = a; if (!py_isspace(py_utf8_next(s->u.s, b, &j))) break; a = j; }
    while (b > a && py_isspace((unsigned char)s->u.s[b - 1])) b--;
    t = tv_str(s->u.s + a, b - a);
    if (t.len == 0 || t.len > 300) return -1;
    char buf[320];
    size_t n = 0;
    for (size_t i = 0; i < t.len; i++) {
        char ch = t.u.s[i];
        if (ch == '_') {
            if (i == 0 || i + 1 >= t.len || !(t.u.s[i - 1] >= '0' && t.u.s[i - 1] <= '9') ||
                !(t.u.s[i + 1] >= '0' && t.u.s[i + 1] <= '9'))
                return -1;
            continue;
        }
        buf[n++] = ch;
    }
    buf[n] = 0;
    const char *p = buf;
    if (*p == '+' || *p == '-') p++;
    if (!strcasecmp(p, "inf") || !strcasecmp(p, "infinity") || !strcasecmp(p, "nan")) {
        double v = tolower((unsigned char)p[0]) == 'n' ? NAN : INFINITY;
        *out = buf[0] == '-' ? -v : v;
        return 0;
    }
    for (const char *q = p; *q; q++)
        if (!((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E' || *q == '+' || *q == '-')) return -1;
    char *end;
    errno = 0;
    double v = strtod(buf, &end);
    if (*end || end == buf) return -1;
    *out = v;
    return 0;
}

/* Python int(str, base). */
static int parse_py_int(const tv *s, int64_t base, int64_t *out) {
    size_t a = 0, b = s->len;
    while (a < b) { size_t j = a; if (!py_isspace(py_utf8_next(s->u.s, b, &j))) break; a = j; }
    while (b > a && py_isspace((unsigned char)s->u.s[b - 1])) b--;
    if (a >= b) return -1;
    const char *p = s->u.s + a, *e = s->u.s + b;
    int neg = 0;
    if (*p == '+' || *p == '-') { neg = *p == '-'; p++; }
    if (e - p >= 2 && p[0] == '0') {
        char x = (char)tolower((unsigned char)p[1]);
        if ((x == 'x' && (base == 16 || base == 0)) || (x == 'o' && (base == 8 || base == 0)) || (x == 'b' && (base == 2 || base == 0))) {
            base = x == 'x' ? 16 : x == 'o' ? 8 : 2;
            p += 2;
            if (p < e && *p == '_') p++;
        }
    }
    if (base == 0) base = 10;
    if (base < 2 || base > 36 || p >= e) return -1;
    uint64_t v = 0;
    int prev_us = 1;
    for (; p < e; p++) {
        if (*p == '_') { if (prev_us) return -1; prev_us = 1; continue; }
        int d = *p >= '0' && *p <= '9' ? *p - '0' : isalpha((unsigned char)*p) ? tolower((unsigned char)*p) - 'a' + 10 : 99;
        if (d >= base) return -1;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return -2;
        v = v * (uint64_t)base + (uint64_t)d;
        prev_us = 0;
    }
    if (prev_us) return -1;
    if (v > (uint64_t)INT64_MAX + (neg ? 1 : 0)) return -2;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

static int float_to_int(tpl_ctx *c, double d, int64_t *out) {
    if (isnan(d) || isinf(d)) return tpl_fail(c, XLLM_ERR_FORMAT, "cannot convert float %s to integer", isnan(d) ? "NaN" : "infinity");
    if (d >= 9.2233720368547758e18 || d < -9.2233720368547758e18) return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "integer overflow");
    *out = (int64_t)d;
    return 0;
}

FILTER(f_int) {
    static const char *const names[] = {"default", "base"};
    tv p[2];
    if (tpl_bind(c, "int", a, names, 2, p)) return -1;
    tv def = is_missing(&p[0]) ? tv_int(0) : p[0];
    int64_t base = 10, v = 0;
    if (!is_missing(&p[1]) && tpl_arg_int(c, "int base", &p[1], &base)) return -1;
    switch (in->kind) {
    case TV_UNDEF: return tpl_fail_undef(c, in); /* int(Undefined) raises, past the default */
    case TV_INT: *out = *in; return 0;
    case TV_BOOL: *out = tv_int(in->u.b); return 0;
    case TV_FLOAT:
        if (float_to_int(c, in->u.f, &v)) return -1;
        *out = tv_int(v);
        return 0;
    case TV_STR: {
        int r = parse_py_int(in, base, &v);
        if (r == -2) return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "integer overflow");
        if (r == 0) { *out = tv_int(v); return 0; }
        double d;
        if (parse_py_float(in, &d) == 0) {
            if (float_to_int(c, d, &v)) return -1;
            *out = tv_int(v);
            return 0;
        }
        *out = def;
        return 0;
    }
    default: *out = def; return 0;
    }
}

FILTER(f_float) {
    static const char *const names[] = {"default"};
    tv p[1];
    if (tpl_bind(c, "float", a, names, 1, p)) return -1;
    tv def = is_missing(&p[0]) ? tv_float(0.0) : p[0];
    double d;
    switch (in->kind) {
    case TV_UNDEF: return tpl_fail_undef(c, in);
    case TV_INT: *out = tv_float((double)in->u.i); return 0;
    case TV_BOOL: *out = tv_float(in->u.b); return 0;
    case TV_FLOAT: *out = *in; return 0;
    case TV_STR: *out = parse_py_float(in, &d) == 0 ? tv_float(d) : def; return 0;
    default: *out = def; return 0;
    }
}

FILTER(f_round) {
    static const char *const names[] = {"precision", "method"};
    tv p[2];
    if (tpl_bind(c, "round", a, names, 2, p)) return -1;
    int64_t prec = 0;
    if (!is_missing(&p[0]) && tpl_arg_int(c, "round precision", &p[0], &prec)) return -1;
    int method = 0; /* common, ceil, floor */
    if (!is_missing(&p[1])) {
        if (p[1].kind == TV_STR && p[1].len == 4 && !memcmp(p[1].u.s, "ceil", 4)) method = 1;
        else if (p[1].kind == TV_STR && p[1].len == 5 && !memcmp(p[1].u.s, "floor", 5)) method = 2;
        else if (!(p[1].kind == TV_STR && p[1].len == 6 && !memcmp(p[1].u.s, "common", 6)))
            return tpl_fail(c, XLLM_ERR_FORMAT, "method must be common, ceil or floor");
    }
    if (in->kind == TV_UNDEF) return tpl_fail_undef(c, in);
    if (!tv_is_number(in)) return tpl_fail(c, XLLM_ERR_FORMAT, "type %s doesn't define __round__ method", tv_type_name(in));
    if (prec > 300 || prec < -300) return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "round precision out of range");
    double x = tv_as_double(in), scale = pow(10.0, (double)prec);
    if (method) {
        double y = method == 1 ? ceil(x * scale) : floor(x * scale);
        *out = tv_float(y / scale);
        return 0;
    }
    if (in->kind != TV_FLOAT) { /* round(int, n) stays an int */
        int64_t v = in->kind == TV_BOOL ? in->u.b : in->u.i;
        if (prec >= 0) { *out = tv_int(v); return 0; }
        if (prec < -18) { *out = tv_int(0); return 0; }
        int64_t m = 1;
        for (int64_t k = 0; k < -prec; k++) m *= 10;
        int64_t q = v / m, r = v % m;
        if (r < 0) { r += m; q -= 1; }
        if (2 * r > m || (2 * r == m && (q & 1))) q += 1;
        *out = tv_int(q * m);
        return 0;
    }
    if (isnan(x) || isinf(x)) { *out = *in; return 0; }
    if (prec == 0) { *out = tv_float(nearbyint(x)); return 0; }
    if (prec > 0) {
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)prec, x); /* correctly rounded, half-even on the exact value */
        *out = tv_float(strtod(buf, NULL));
        return 0;
    }
    *out = tv_float(nearbyint(x / pow(10.0, (double)-prec)) * pow(10.0, (double)-prec));
    return 0;
}

/* --------------------------------------------------------------- tables */

static const struct {
    const char *name;
    tpl_filter_fn fn;
} FILTERS[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"capitalize", f_capitalize}, {"center", f_center}, {"count", f_length},
    {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape}, {"escape", f_escape},
    {"first", f_first}, {"float", f_float}, {"forceescape", f_escape}, {"format", f_format}, {"indent", f_indent},
    {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last}, {"length", f_length}, {"list", f_list},
    {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min}, {"reject", f_reject},
    {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse}, {"round", f_round},
    {"safe", f_safe}, {"select", f_select}, {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string},
    {"sum", f_sum}, {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"truncate", f_truncate},
    {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount}};

static const char *const JINJA_FILTERS_NOT_HERE[] = {"batch", "filesizeformat", "groupby", "pprint", "random", "slice",
                                                     "striptags", "urlencode", "urlize", "wordwrap", "xmlattr"};

tpl_filter_fn tpl_find_filter(const char *name) {
    for (size_t i = 0; i < sizeof FILTERS / sizeof *FILTERS; i++)
        if (!strcmp(FILTERS[i].name, name)) return FILTERS[i].fn;
    return NULL;
}

int tpl_is_jinja_filter(const char *name) {
    for (size_t i = 0; i < sizeof JINJA_FILTERS_NOT_HERE / sizeof *JINJA_FILTERS_NOT_HERE; i++)
        if (!strcmp(JINJA_FILTERS_NOT_HERE[i], name)) return 1;
    return 0;
}
