/*
 * methods.c - the Python methods templates call on values: str (split,
 * strip, startswith, replace, format, ...), dict (items, keys, values, get)
 * and list/tuple (count, index). Index arguments count code points, as
 * Python's do.
 *
 * As in jinja2's ImmutableSandboxedEnvironment, methods that mutate a list or
 * dict (append, pop, update, ...) are refused: the attribute is an Undefined
 * whose use is an error. Python methods we do not implement are functions
 * that fail, naming the method, when called.
 */
#include "template/tpl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define SELF_STR(self) ((self)->u.s), ((self)->len)

/* ------------------------------------------------------------- helpers */

static int want_str(tpl_ctx *c, const char *what, const tv *v) {
    if (v->kind == TV_STR) return 0;
    if (v->kind == TV_UNDEF) return tpl_fail_undef(c, v);
    return tpl_fail(c, XLLM_ERR_FORMAT, "%s: must be str, not %s", what, tv_type_name(v));
}

/* Byte range of a str for optional code-point start/end arguments. */
static int sub_range(tpl_ctx *c, const tv *self, const tv *start, const tv *end, size_t *b0, size_t *b1) {
    size_t n = py_cp_count(SELF_STR(self));
    int64_t s = 0, e = (int64_t)n;
    if (start->kind != TV_MISSING && start->kind != TV_NONE) {
        if (tpl_arg_int(c, "slice index", start, &s)) return -1;
        if (s < 0) { s += (int64_t)n; if (s < 0) s = 0; }
    }
    if (end->kind != TV_MISSING && end->kind != TV_NONE) {
        if (tpl_arg_int(c, "slice index", end, &e)) return -1;
        if (e < 0) { e += (int64_t)n; if (e < 0) e = 0; }
    }
    if (s > (int64_t)n) s = (int64_t)n + 1; /* empty, and marks start past the end */
    if (e > (int64_t)n) e = (int64_t)n;
    if (s > (int64_t)n) {
        *b0 = self->len + 1;
        *b1 = self->len;
        return 0;
    }
    *b0 = py_cp_offset(SELF_STR(self), (size_t)s);
    *b1 = e < s ? *b0 : py_cp_offset(SELF_STR(self), (size_t)e);
    return 0;
}

static int new_str(tpl_ctx *c, buf_t *b, tv *out) { return tpl_buf_to_value(c, b, out); }

static int set_of_chars_has(const tv *chars, uint32_t cp) {
    size_t i = 0;
    while (i < chars->len)
        if (py_utf8_next(chars->u.s, chars->len, &i) == cp) return 1;
    return 0;
}

/* strip: which = 1 left, 2 right, 3 both */
static int do_strip(tpl_ctx *c, const tv *self, const tv *chars, int which, tv *out) {
    const char *s = self->u.s;
    size_t a = 0, b = self->len;
    int ws = chars->kind == TV_MISSING || chars->kind == TV_NONE;
    if (!ws && want_str(c, "strip arg", chars)) return -1;
    if (which & 1) {
        while (a < b) {
            size_t j = a;
            uint32_t cp = py_utf8_next(s, b, &j);
            if (ws ? !py_isspace(cp) : !set_of_chars_has(chars, cp)) break;
            a = j;
        }
    }
    if (which & 2) {
        while (b > a) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)s[st] & 0xC0) == 0x80) st--;
            size_t j = st;
            uint32_t cp = py_utf8_next(s, b, &j);
            if (ws ? !py_isspace(cp) : !set_of_chars_has(chars, cp)) break;
            b = st;
        }
    }
    *out = tv_str(s + a, b - a);
    return 0;
}

/* Python's split/rsplit. */
static int do_split(tpl_ctx *c, const tv *self, const tv *sep, const tv *maxsplit_v, int right, tv *out) {
    int64_t maxsplit = -1;
    if (maxsplit_v->kind != TV_MISSING && tpl_arg_int(c, "maxsplit", maxsplit_v, &maxsplit)) return -1;
    tv_list *l = tv_list_new(c, L_LIST, 0);
    if (!l) return -1;
    const char *s = self->u.s;
    size_t n = self->len;
    if (sep->kind == TV_MISSING || sep->kind == TV_NONE) {
        /* runs of whitespace; no empty strings */
        if (!right) {
            size_t i = 0;
            int64_t splits = 0;
            for (;;) {
                while (i < n) { size_t j = i; if (!py_isspace(py_utf8_next(s, n, &j))) break; i = j; }
                if (i >= n) break;
                if (maxsplit >= 0 && splits >= maxsplit) { /* the rest, as it is */
                    if (tv_list_push(c, l, tv_str(s + i, n - i))) return -1;
                    break;
                }
                size_t st = i;
                while (i < n) { size_t j = i; if (py_isspace(py_utf8_next(s, n, &j))) break; i = j; }
                if (tv_list_push(c, l, tv_str(s + st, i - st))) return -1;
                splits++;
            }
        } else {
            /* from the right: collect then reverse */
            size_t e = n;
            int64_t splits = 0;
            for (;;) {
                while (e > 0) {
                    size_t st = e - 1;
                    while (st > 0 && ((unsigned char)s[st] & 0xC0) == 0x80) st--;
                    size_t j = st;
                    if (!py_isspace(py_utf8_next(s, e, &j))) break;
                    e = st;
                }
                if (e == 0) break;
                if (maxsplit >= 0 && splits >= maxsplit) {
                    if (tv_list_push(c, l, tv_str(s, e))) return -1;
                    break;
                }
                size_t b = e;
                while (b > 0) {
                    size_t st = b - 1;
                    while (st > 0 && ((unsigned char)s[st] & 0xC0) == 0x80) st--;
                    size_t j = st;
                    if (py_isspace(py_utf8_next(s, b, &j))) break;
                    b = st;
                }
                if (tv_list_push(c, l, tv_str(s + b, e - b))) return -1;
                splits++;
                e = b;
            }
            for (size_t i = 0; i < l->n / 2; i++) {
                tv t = l->items[i];
                l->items[i] = l->items[l->n - 1 - i];
                l->items[l->n - 1 - i] = t;
            }
        }
        *out = tv_list_val(l);
        return 0;
    }
    if (want_str(c, "split separator", sep)) return -1;
    if (sep->len == 0) return tpl_fail(c, XLLM_ERR_FORMAT, "empty separator");
    if (!right) {
        size_t i = 0;
        int64_t splits = 0;
        for (;;) {
            const char *hit = (maxsplit < 0 || splits < maxsplit) ? memmem(s + i, n - i, sep->u.s, sep->len) : NULL;
            if (!hit) {
                if (tv_list_push(c, l, tv_str(s + i, n - i))) return -1;
                break;
            }
            size_t h = (size_t)(hit - s);
            if (tv_list_push(c, l, tv_str(s + i, h - i))) return -1;
            i = h + sep->len;
            splits++;
        }
    } else {
        size_t e = n;
        int64_t splits = 0;
        for (;;) {
            size_t h = (size_t)-1;
            if ((maxsplit < 0 || splits < maxsplit) && e >= sep->len) {
                for (size_t k = e - sep->len + 1; k-- > 0;)
                    if (!memcmp(s + k, sep->u.s, sep->len)) { h = k; break; }
            }
            if (h == (size_t)-1) {
                if (tv_list_push(c, l, tv_str(s, e))) return -1;
                break;
            }
            if (tv_list_push(c, l, tv_str(s + h + sep->len, e - h - sep->len))) return -1;
            e = h;
            splits++;
        }
        for (size_t i = 0; i < l->n / 2; i++) {
            tv t = l->items[i];
            l->items[i] = l->items[l->n - 1 - i];
            l->items[l->n - 1 - i] = t;
        }
    }
    *out = tv_list_val(l);
    return 0;
}

/* ---------------------------------------------------------- str methods */

#define METHOD(name) static int name(tpl_ctx *c, const tv *self, const tpl_args *a, tv *out)

static int starts_ends(tpl_ctx *c, const tv *self, const tpl_args *a, int ends, tv *out) {
    static const char *const names[] = {"prefix", "start", "end"};
    tv p[3];
    if (tpl_bind(c, ends ? "endswith()" : "startswith()", a, names, 3, p)) return -1;
    size_t b0, b1;
    if (sub_range(c, self, &p[1], &p[2], &b0, &b1)) return -1;
    const tv *cands = &p[0];
    size_t nc = 1;
    if (p[0].kind == TV_LIST && p[0].u.l->kind == L_TUPLE) {
        cands = p[0].u.l->items;
        nc = p[0].u.l->n;
    }
    int r = 0;
    for (size_t k = 0; k < nc && !r; k++) {
        if (cands[k].kind != TV_STR)
            return tpl_fail(c, XLLM_ERR_FORMAT, "%s first arg must be str or a tuple of str, not %s",
                            ends ? "endswith" : "startswith", tv_type_name(&cands[k]));
        if (b0 > self->len) continue;
        size_t L = b1 - b0, pl = cands[k].len;
        if (pl > L) continue;
        r = !memcmp(self->u.s + (ends ? b1 - pl : b0), cands[k].u.s, pl);
    }
    *out = tv_bool(r);
    return 0;
}
METHOD(m_startswith) { return starts_ends(c, self, a, 0, out); }
METHOD(m_endswith) { return starts_ends(c, self, a, 1, out); }

METHOD(m_split) {
    static const char *const names[] = {"sep", "maxsplit"};
    tv p[2];
    return tpl_bind(c, "split()", a, names, 2, p) || do_split(c, self, &p[0], &p[1], 0, out) ? -1 : 0;
}
METHOD(m_rsplit) {
    static const char *const names[] = {"sep", "maxsplit"};
    tv p[2];
    return tpl_bind(c, "rsplit()", a, names, 2, p) || do_split(c, self, &p[0], &p[1], 1, out) ? -1 : 0;
}

METHOD(m_splitlines) {
    static const char *const names[] = {"keepends"};
    tv p[1];
    if (tpl_bind(c, "splitlines()", a, names, 1, p)) return -1;
    int keep = p[0].kind != TV_MISSING && tv_truthy(&p[0]);
    tv_list *l = tv_list_new(c, L_LIST, 0);
    if (!l) return -1;
    const char *s = self->u.s;
    size_t n = self->len, i = 0, st = 0;
    while (i < n) {
        size_t j = i;
        uint32_t cp = py_utf8_next(s, n, &j);
        int br = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d || cp == 0x1e ||
                 cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (!br) { i = j; continue; }
        if (cp == '\r' && j < n && s[j] == '\n') j++;
        if (tv_list_push(c, l, tv_str(s + st, (keep ? j : i) - st))) return -1;
        st = i = j;
    }
    if (st < n && tv_list_push(c, l, tv_str(s + st, n - st))) return -1;
    *out = tv_list_val(l);
    return 0;
}

static int strip_m(tpl_ctx *c, const tv *self, const tpl_args *a, int which, tv *out) {
    static const char *const names[] = {"chars"};
    tv p[1];
    if (tpl_bind(c, "strip()", a, names, 1, p)) return -1;
    return do_strip(c, self, &p[0], which, out);
}
METHOD(m_strip) { return strip_m(c, self, a, 3, out); }
METHOD(m_lstrip) { return strip_m(c, self, a, 1, out); }
METHOD(m_rstrip) { return strip_m(c, self, a, 2, out); }

static int no_args(tpl_ctx *c, const char *what, const tpl_args *a) {
    if (a->npos || a->nkw) return tpl_fail(c, XLLM_ERR_FORMAT, "%s takes no arguments", what);
    return 0;
}

METHOD(m_upper) {
    if (no_args(c, "upper()", a)) return -1;
    buf_t b = tpl_buf_make(c);
    py_upper(&b, SELF_STR(self));
    return new_str(c, &b, out);
}
METHOD(m_lower) {
    if (no_args(c, "lower()", a)) return -1;
    buf_t b = tpl_buf_make(c);
    py_lower(&b, SELF_STR(self));
    return new_str(c, &b, out);
}

static int is_cased(uint32_t cp) { return py_isupper(cp) || py_islower(cp); }

METHOD(m_title) {
    if (no_args(c, "title()", a)) return -1;
    buf_t b = tpl_buf_make(c);
    size_t i = 0;
    int prev_cased = 0;
    while (i < self->len) {
        size_t st = i;
        uint32_t cp = py_utf8_next(SELF_STR(self), &i);
        if (prev_cased) py_lower_range(&b, SELF_STR(self), st, i);
        else py_title_char(&b, self->u.s + st, i - st);
        prev_cased = is_cased(cp);
    }
    return new_str(c, &b, out);
}

METHOD(m_capitalize) {
    if (no_args(c, "capitalize()", a)) return -1;
    buf_t b = tpl_buf_make(c);
    size_t i = 0;
    if (self->len) {
        py_utf8_next(SELF_STR(self), &i);
        py_title_char(&b, self->u.s, i);
        py_lower_range(&b, SELF_STR(self), i, self->len);
    }
    return new_str(c, &b, out);
}

METHOD(m_swapcase) {
    if (no_args(c, "swapcase()", a)) return -1;
    buf_t b = tpl_buf_make(c);
    size_t i = 0;
    while (i < self->len) {
        size_t st = i;
        uint32_t cp = py_utf8_next(SELF_STR(self), &i);
        if (cp == 0x3A3) { /* final sigma, judged on the whole string as lower() does */
            py_lower_range(&b, SELF_STR(self), st, i);
        } else if (py_isupper(cp)) py_lower(&b, self->u.s + st, i - st);
        else if (py_islower(cp)) py_upper(&b, self->u.s + st, i - st);
        else buf_append(&b, self->u.s + st, i - st);
    }
    return new_str(c, &b, out);
}

METHOD(m_casefold) {
    if (no_args(c, "casefold()", a)) return -1;
    buf_t b = tpl_buf_make(c);
    py_casefold(&b, SELF_STR(self));
    return new_str(c, &b, out);
}

METHOD(m_replace) {
    static const char *const names[] = {"old", "new", "count"};
    tv p[3];
    if (tpl_bind(c, "replace()", a, names, 3, p)) return -1;
    if (p[0].kind == TV_MISSING || p[1].kind == TV_MISSING) return tpl_fail(c, XLLM_ERR_FORMAT, "replace() needs old and new");
    if (want_str(c, "replace() arg 1", &p[0]) || want_str(c, "replace() arg 2", &p[1])) return -1;
    int64_t count = -1;
    if (p[2].kind != TV_MISSING && tpl_arg_int(c, "replace() count", &p[2], &count)) return -1;
    buf_t b = tpl_buf_make(c);
    const char *s = self->u.s;
    size_t n = self->len, i = 0;
    int64_t done = 0;
    if (p[0].len == 0) { /* insert between code points */
        while (count < 0 || done < count) {
            buf_append(&b, p[1].u.s, p[1].len);
            done++;
            if (i >= n) break;
            size_t st = i;
            py_utf8_next(s, n, &i);
            buf_append(&b, s + st, i - st);
        }
        buf_append(&b, s + i, n - i);
        return new_str(c, &b, out);
    }
    while (i <= n) {
        const char *hit = (count < 0 || done < count) ? memmem(s + i, n - i, p[0].u.s, p[0].len) : NULL;
        if (!hit) {
            buf_append(&b, s + i, n - i);
            break;
        }
        buf_append(&b, s + i, (size_t)(hit - (s + i)));
        buf_append(&b, p[1].u.s, p[1].len);
        i = (size_t)(hit - s) + p[0].len;
        done++;
    }
    return new_str(c, &b, out);
}

/* find/rfind/index/rindex/count */
static int find_impl(tpl_ctx *c, const tv *self, const tpl_args *a, int mode, tv *out) {
    static const char *const names[] = {"sub", "start", "end"};
    const char *what = mode == 0 ? "find()" : mode == 1 ? "rfind()" : mode == 2 ? "index()" : mode == 3 ? "rindex()" : "count()";
    tv p[3];
    if (tpl_bind(c, what, a, names, 3, p)) return -1;
    if (p[0].kind == TV_MISSING) return tpl_fail(c, XLLM_ERR_FORMAT, "%s takes at least 1 argument", what);
    if (want_str(c, what, &p[0])) return -1;
    size_t b0, b1;
    if (sub_range(c, self, &p[1], &p[2], &b0, &b1)) return -1;
    const char *s = self->u.s;
    if (mode == 4) {
        int64_t cnt = 0;
        if (b0 <= self->len) {
            if (p[0].len == 0) cnt = (int64_t)py_cp_count(s + b0, b1 - b0) + 1;
            else
                for (size_t i = b0; i + p[0].len <= b1;) {
                    const char *h = memmem(s + i, b1 - i, p[0].u.s, p[0].len);
                    if (!h) break;
                    cnt++;
                    i = (size_t)(h - s) + p[0].len;
                }
        }
        *out = tv_int(cnt);
        return 0;
    }
    int64_t at = -1;
    if (b0 <= self->len && p[0].len <= b1 - b0) {
        if (mode == 0 || mode == 2) {
            const char *h = p[0].len ? memmem(s + b0, b1 - b0, p[0].u.s, p[0].len) : s + b0;
            if (h) at = (int64_t)py_cp_count(s, (size_t)(h - s));
        } else {
            for (size_t k = b1 - p[0].len + 1; k-- > b0;)
                if (!memcmp(s + k, p[0].u.s, p[0].len)) { at = (int64_t)py_cp_count(s, k); break; }
        }
    }
    if (at < 0 && mode >= 2) return tpl_fail(c, XLLM_ERR_FORMAT, "substring not found");
    *out = tv_int(at);
    return 0;
}
METHOD(m_find) { return find_impl(c, self, a, 0, out); }
METHOD(m_rfind) { return find_impl(c, self, a, 1, out); }
METHOD(m_index) { return find_impl(c, self, a, 2, out); }
METHOD(m_rindex) { return find_impl(c, self, a, 3, out); }
METHOD(m_count) { return find_impl(c, self, a, 4, out); }

METHOD(m_join) {
    static const char *const names[] = {"iterable"};
    tv p[1];
    if (tpl_bind(c, "join()", a, names, 1, p)) return -1;
    if (p[0].kind == TV_MISSING) return tpl_fail(c, XLLM_ERR_FORMAT, "join() takes exactly one argument");
    if (p[0].kind == TV_UNDEF) return tpl_fail_undef(c, &p[0]);
    const tv *items;
    size_t n;
    if (tv_iter(c, &p[0], &items, &n)) return -1;
    buf_t b = tpl_buf_make(c);
    for (size_t i = 0; i < n; i++) {
        if (items[i].kind != TV_STR) {
            buf_free(&b);
            return tpl_fail(c, XLLM_ERR_FORMAT, "sequence item %zu: expected str instance, %s found", i,
                            tv_type_name(&items[i]));
        }
        if (i) buf_append(&b, SELF_STR(self));
        buf_append(&b, items[i].u.s, items[i].len);
    }
    return new_str(c, &b, out);
}

static int partition_impl(tpl_ctx *c, const tv *self, const tpl_args *a, int right, tv *out) {
    static const char *const names[] = {"sep"};
    tv p[1];
    if (tpl_bind(c, "partition()", a, names, 1, p) || want_str(c, "partition()", &p[0])) return -1;
    if (p[0].len == 0) return tpl_fail(c, XLLM_ERR_FORMAT, "empty separator");
    const char *s = self->u.s;
    size_t n = self->len, h = (size_t)-1;
    if (!right) {
        const char *x = memmem(s, n, p[0].u.s, p[0].len);
        if (x) h = (size_t)(x - s);
    } else if (n >= p[0].len) {
        for (size_t k = n - p[0].len + 1; k-- > 0;)
            if (!memcmp(s + k, p[0].u.s, p[0].len)) { h = k; break; }
    }
    tv_list *l = tv_list_new(c, L_TUPLE, 3);
    if (!l) return -1;
    if (h == (size_t)-1) {
        l->items[0] = right ? tv_str("", 0) : *self;
        l->items[1] = tv_str("", 0);
        l->items[2] = right ? *self : tv_str("", 0);
    } else {
        l->items[0] = tv_str(s, h);
        l->items[1] = p[0];
        l->items[2] = tv_str(s + h + p[0].len, n - h - p[0].len);
    }
    l->n = 3;
    *out = tv_list_val(l);
    return 0;
}
METHOD(m_partition) { return partition_impl(c, self, a, 0, out); }
METHOD(m_rpartition) { return partition_impl(c, self, a, 1, out); }

static int remove_affix(tpl_ctx *c, const tv *self, const tpl_args *a, int suffix, tv *out) {
    static const char *const names[] = {"affix"};
    tv p[1];
    if (tpl_bind(c, suffix ? "removesuffix()" : "removeprefix()", a, names, 1, p) || want_str(c, "removeprefix()", &p[0]))
        return -1;
    *out = *self;
    if (p[0].len && p[0].len <= self->len) {
        if (!suffix && !memcmp(self->u.s, p[0].u.s, p[0].len)) *out = tv_str(self->u.s + p[0].len, self->len - p[0].len);
        if (suffix && !memcmp(self->u.s + self->len - p[0].len, p[0].u.s, p[0].len)) *out = tv_str(self->u.s, self->len - p[0].len);
    }
    return 0;
}
METHOD(m_removeprefix) { return remove_affix(c, self, a, 0, out); }
METHOD(m_removesuffix) { return remove_affix(c, self, a, 1, out); }

static int classify(tpl_ctx *c, const tv *self, const tpl_args *a, int kind, tv *out) {
    if (no_args(c, "is...()", a)) return -1;
    size_t i = 0;
    int r = self->len > 0, any_cased = 0;
    while (i < self->len && r) {
        uint32_t cp = py_utf8_next(SELF_STR(self), &i);
        switch (kind) {
        case 0: r = py_isdigit(cp); break;
        case 1: r = py_isalpha(cp); break;
        case 2: r = py_isalnum(cp); break;
        case 3: r = py_isspace(cp); break;
        case 4: if (py_islower(cp) || py_istitle(cp)) r = 0; else if (py_isupper(cp)) any_cased = 1; break;
        case 5: if (py_isupper(cp) || py_istitle(cp)) r = 0; else if (py_islower(cp)) any_cased = 1; break;
        case 6: r = py_isdecimal(cp); break;
        case 7: r = py_isnumeric(cp); break;
        }
    }
    if (kind == 4 || kind == 5) r = r && any_cased;
    *out = tv_bool(r);
    return 0;
}
METHOD(m_isdigit) { return classify(c, self, a, 0, out); }
METHOD(m_isdecimal) { return classify(c, self, a, 6, out); }
METHOD(m_isnumeric) { return classify(c, self, a, 7, out); }
METHOD(m_isalpha) { return classify(c, self, a, 1, out); }
METHOD(m_isalnum) { return classify(c, self, a, 2, out); }
METHOD(m_isspace) { return classify(c, self, a, 3, out); }
METHOD(m_isupper) { return classify(c, self, a, 4, out); }
METHOD(m_islower) { return classify(c, self, a, 5, out); }

static int justify(tpl_ctx *c, const tv *self, const tpl_args *a, int mode, tv *out) {
    static const char *const names[] = {"width", "fillchar"};
    tv p[2];
    int64_t w;
    if (tpl_bind(c, "justify()", a, names, 2, p) || tpl_arg_int(c, "width", &p[0], &w)) return -1;
    const char *fill = " ";
    size_t fl = 1;
    if (p[1].kind != TV_MISSING) {
        if (want_str(c, "fillchar", &p[1])) return -1;
        if (py_cp_count(p[1].u.s, p[1].len) != 1)
            return tpl_fail(c, XLLM_ERR_FORMAT, "The fill character must be exactly one character long");
        fill = p[1].u.s;
        fl = p[1].len;
    }
    size_t n = py_cp_count(SELF_STR(self));
    if (w <= (int64_t)n) { *out = *self; return 0; }
    if ((uint64_t)w > c->max_output) return tpl_fail(c, XLLM_ERR_FORMAT, "width larger than the output limit");
    size_t pad = (size_t)w - n, left;
    if (mode == 0) left = pad / 2 + (pad & (size_t)w & 1); /* center: CPython's rule */
    else if (mode == 1) left = 0;                          /* ljust */
    else left = pad;                                       /* rjust */
    buf_t b = tpl_buf_make(c);
    int rc = 0;
    if (fl == 1) rc = buf_fill(&b, fill[0], left);
    else for (size_t k = 0; k < left && !rc; k++) rc = buf_append(&b, fill, fl);
    if (!rc) rc = buf_append(&b, SELF_STR(self));
    if (fl == 1 && !rc) rc = buf_fill(&b, fill[0], pad - left);
    else for (size_t k = left; k < pad && !rc; k++) rc = buf_append(&b, fill, fl);
    return new_str(c, &b, out);
}
METHOD(m_center) { return justify(c, self, a, 0, out); }
METHOD(m_ljust) { return justify(c, self, a, 1, out); }
METHOD(m_rjust) { return justify(c, self, a, 2, out); }

METHOD(m_zfill) {
    static const char *const names[] = {"width"};
    tv p[1];
    int64_t w;
    if (tpl_bind(c, "zfill()", a, names, 1, p) || tpl_arg_int(c, "width", &p[0], &w)) return -1;
    size_t n = py_cp_count(SELF_STR(self));
    if (w <= (int64_t)n) { *out = *self; return 0; }
    if ((uint64_t)w > c->max_output) return tpl_fail(c, XLLM_ERR_FORMAT, "width larger than the output limit");
    buf_t b = tpl_buf_make(c);
    size_t sign = self->len && (self->u.s[0] == '+' || self->u.s[0] == '-');
    buf_append(&b, self->u.s, sign);
    buf_fill(&b, '0', (size_t)w - n);
    buf_append(&b, self->u.s + sign, self->len - sign);
    return new_str(c, &b, out);
}

/* str.format: {} {0} {name} {0.attr} {0[key]}, !s/!r, and a small format
 * spec (fill/align/width for text; width/precision/type for numbers). */
static int format_field_spec(tpl_ctx *c, const tv *v, const char *spec, size_t sl, buf_t *b) {
    if (sl == 0) return tv_to_str(c, v, b);
    char fill = ' ', align = 0, type = 0;
    size_t i = 0;
    int width = -1, prec = -1, zero = 0, comma = 0;
    char sign = 0;
    if (sl >= 2 && strchr("<>^=", spec[1])) { fill = spec[0]; align = spec[1]; i = 2; }
    else if (sl >= 1 && strchr("<>^=", spec[0])) { align = spec[0]; i = 1; }
    if (i < sl && strchr("+- ", spec[i])) sign = spec[i++];
    if (i < sl && spec[i] == '0') { zero = 1; i++; }
    if (i < sl && spec[i] >= '0' && spec[i] <= '9') width = (int)tpl_digits_sat(spec, sl, &i, INT32_MAX);
    if (i < sl && spec[i] == ',') { comma = 1; i++; }
    if (i < sl && spec[i] == '.') {
        i++;
        prec = (int)tpl_digits_sat(spec, sl, &i, INT32_MAX);
    }
    if (i < sl) type = spec[i++];
    if (i != sl || comma || width > 1000 || prec > 100)
        return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "format spec '%.*s' is not supported", (int)sl, spec);
    char num[160];
    tv text;
    if (v->kind == TV_STR && (!type || type == 's')) {
        size_t len = v->len;
        if (prec >= 0) len = py_cp_offset(v->u.s, v->len, (size_t)prec);
        text = tv_str(v->u.s, len);
        if (!align) align = '<';
    } else if (tv_is_number(v) && (!type || strchr("dfFeEgG%", type))) {
        char fmt[32];
        if (!type && v->kind != TV_FLOAT && prec < 0) type = 'd';
        if (!type && v->kind == TV_FLOAT && prec < 0) {
            py_float_repr(v->u.f, num);
            if (sign == '+' && v->u.f >= 0) { memmove(num + 1, num, strlen(num) + 1); num[0] = '+'; }
        } else {
            if (!type) type = 'g';
            if (type == 'd') {
                if (v->kind == TV_FLOAT) return tpl_fail(c, XLLM_ERR_FORMAT, "Unknown format code 'd' for object of type 'float'");
                snprintf(fmt, sizeof fmt, "%%%slld", sign == '+' ? "+" : sign == ' ' ? " " : "");
                snprintf(num, sizeof num, fmt, (long long)(v->kind == TV_BOOL ? v->u.b : v->u.i));
            } else {
                double d = tv_as_double(v) * (type == '%' ? 100.0 : 1.0);
                snprintf(fmt, sizeof fmt, "%%%s.%d%c", sign == '+' ? "+" : sign == ' ' ? " " : "", prec < 0 ? 6 : prec,
                         type == '%' ? 'f' : type);
                snprintf(num, sizeof num, fmt, d);
                if (type == '%') strcat(num, "%");
            }
        }
        text = tv_str(num, strlen(num));
        if (!align) align = '>';
        if (zero && align == '>') { fill = '0'; align = '='; }
    } else {
        return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "format spec '%.*s' for %s is not supported", (int)sl, spec, tv_type_name(v));
    }
    size_t n = py_cp_count(text.u.s, text.len);
    size_t pad = width > 0 && (size_t)width > n ? (size_t)width - n : 0, left = 0;
    if (align == '>' ) left = pad;
    else if (align == '^') left = pad / 2;
    if (align == '=' && text.len && (text.u.s[0] == '-' || text.u.s[0] == '+' || text.u.s[0] == ' ')) {
        buf_putc(b, text.u.s[0]);
        text.u.s++;
        text.len--;
        left = pad;
    } else if (align == '=') left = pad;
    int rc = buf_fill(b, fill, left);
    if (!rc) rc = buf_append(b, text.u.s, text.len);
    if (!rc) rc = buf_fill(b, fill, pad - left);
    return rc;
}

METHOD(m_format) {
    buf_t b = tpl_buf_make(c);
    const char *s = self->u.s;
    size_t n = self->len, i = 0, auto_idx = 0;
    int rc = 0;
    while (i < n && !rc) {
        char ch = s[i];
        if (ch == '}' ) {
            if (i + 1 < n && s[i + 1] == '}') { buf_putc(&b, '}'); i += 2; continue; }
            rc = tpl_fail(c, XLLM_ERR_FORMAT, "Single '}' encountered in format string");
            break;
        }
        if (ch != '{') { buf_putc(&b, ch); i++; continue; }
        if (i + 1 < n && s[i + 1] == '{') { buf_putc(&b, '{'); i += 2; continue; }
        size_t e = i + 1;
        int nest = 0;
        while (e < n && (s[e] != '}' || nest)) {
            if (s[e] == '{') nest++;
            if (s[e] == '}') nest--;
            e++;
        }
        if (e >= n) { rc = tpl_fail(c, XLLM_ERR_FORMAT, "Single '{' encountered in format string"); break; }
        const char *f = s + i + 1;
        size_t fl = e - i - 1, k = 0;
        while (k < fl && f[k] != '.' && f[k] != '[' && f[k] != '!' && f[k] != ':') k++;
        tv v;
        if (k == 0) {
            if (auto_idx >= a->npos) { rc = tpl_fail(c, XLLM_ERR_FORMAT, "Replacement index %zu out of range for positional args tuple", auto_idx); break; }
            v = a->pos[auto_idx++];
        } else if (f[0] >= '0' && f[0] <= '9') {
            size_t q = 0;
            size_t idx = (size_t)tpl_digits_sat(f, k, &q, INT32_MAX); /* saturates: out of range, never wrapped */
            if (idx >= a->npos) { rc = tpl_fail(c, XLLM_ERR_FORMAT, "Replacement index %zu out of range for positional args tuple", idx); break; }
            v = a->pos[idx];
        } else {
            size_t q;
            for (q = 0; q < a->nkw; q++)
                if (strlen(a->kw_names[q]) == k && !memcmp(a->kw_names[q], f, k)) break;
            if (q == a->nkw) { rc = tpl_fail(c, XLLM_ERR_FORMAT, "KeyError: '%.*s'", (int)k, f); break; }
            v = a->kw[q];
        }
        while (k < fl && (f[k] == '.' || f[k] == '[') && !rc) {
            if (f[k] == '.') {
                size_t st = ++k;
                while (k < fl && f[k] != '.' && f[k] != '[' && f[k] != '!' && f[k] != ':') k++;
                tv nv;
                rc = tpl_getattr(c, &v, f + st, k - st, &nv);
                v = nv;
            } else {
                size_t st = ++k;
                while (k < fl && f[k] != ']') k++;
                tv key = tv_str(f + st, k - st), nv;
                int digits = k > st;
                int64_t iv = 0;
                int big = 0;
                for (size_t q = st; q < k; q++) {
                    if (f[q] < '0' || f[q] > '9') digits = 0;
                    else if (tpl_mul_ovf(iv, 10, &iv) || tpl_add_ovf(iv, f[q] - '0', &iv)) big = 1;
                }
                if (digits) key = tv_int(iv);
                if (digits && big) { rc = tpl_fail(c, XLLM_ERR_FORMAT, "IndexError: index larger than 64 bits"); break; }
                rc = tpl_getitem(c, &v, &key, &nv);
                v = nv;
                k++;
            }
        }
        if (rc) break;
        char conv = 0;
        if (k < fl && f[k] == '!') { conv = k + 1 < fl ? f[k + 1] : 0; k += 2; }
        const char *spec = "";
        size_t sl = 0;
        if (k < fl && f[k] == ':') { spec = f + k + 1; sl = fl - k - 1; k = fl; }
        if (k != fl || memchr(spec, '{', sl)) { rc = tpl_fail(c, XLLM_ERR_UNSUPPORTED, "format field '{%.*s}' is not supported", (int)fl, f); break; }
        if (v.kind == TV_UNDEF && (sl || conv)) { rc = tpl_fail_undef(c, &v); break; } /* format(Undefined, '') is '' */
        if (conv == 'r' || conv == 's' || conv == 'a') {
            buf_t tb = tpl_buf_make(c);
            rc = conv == 's' ? tv_to_str(c, &v, &tb) : tv_repr(c, &v, &tb);
            if (!rc) rc = tpl_buf_to_value(c, &tb, &v);
            else buf_free(&tb);
            if (rc) break;
        } else if (conv) { rc = tpl_fail(c, XLLM_ERR_FORMAT, "Unknown conversion specifier %c", conv); break; }
        rc = format_field_spec(c, &v, spec, sl, &b);
        i = e + 1;
    }
    if (rc && !c->failed) return new_str(c, &b, out); /* the buffer's limit: reported by new_str */
    if (rc) { buf_free(&b); return -1; }
    return new_str(c, &b, out);
}

/* ------------------------------------------------------- dict and list */

static int view(tpl_ctx *c, const tv *self, const tpl_args *a, int kind, tv *out) {
    if (no_args(c, kind == L_ITEMS ? "items()" : kind == L_KEYS ? "keys()" : "values()", a)) return -1;
    const tv_dict *d = self->u.d;
    tv_list *l = tv_list_new(c, kind, d->n);
    if (!l) return -1;
    for (size_t i = 0; i < d->n; i++) {
        if (kind == L_KEYS) l->items[i] = d->keys[i];
        else if (kind == L_VALUES) l->items[i] = d->vals[i];
        else {
            tv_list *pair = tv_list_new(c, L_TUPLE, 2);
            if (!pair) return -1;
            pair->items[0] = d->keys[i];
            pair->items[1] = d->vals[i];
            pair->n = 2;
            l->items[i] = tv_list_val(pair);
        }
    }
    l->n = d->n;
    *out = tv_list_val(l);
    return 0;
}
METHOD(m_items) { return view(c, self, a, L_ITEMS, out); }
METHOD(m_keys) { return view(c, self, a, L_KEYS, out); }
METHOD(m_values) { return view(c, self, a, L_VALUES, out); }

METHOD(m_get) {
    static const char *const names[] = {"key", "default"};
    tv p[2];
    if (tpl_bind(c, "get()", a, names, 2, p)) return -1;
    if (p[0].kind == TV_MISSING) return tpl_fail(c, XLLM_ERR_FORMAT, "get expected at least 1 argument, got 0");
    const tv *v = tv_dict_get(self->u.d, &p[0]);
    *out = v ? *v : p[1].kind == TV_MISSING ? tv_none() : p[1];
    return 0;
}

METHOD(m_dict_copy) {
    if (no_args(c, "copy()", a)) return -1;
    tv_dict *d = tv_dict_new(c, D_DICT);
    if (!d) return -1;
    for (size_t i = 0; i < self->u.d->n; i++)
        if (tv_dict_set(c, d, self->u.d->keys[i], self->u.d->vals[i])) return -1;
    *out = tv_dict_val(d);
    return 0;
}

METHOD(m_list_count) {
    static const char *const names[] = {"value"};
    tv p[1];
    if (tpl_bind(c, "count()", a, names, 1, p)) return -1;
    int64_t n = 0;
    for (size_t i = 0; i < self->u.l->n; i++) {
        int eq;
        if (tv_eq(c, &self->u.l->items[i], &p[0], &eq)) return -1;
        n += eq;
    }
    *out = tv_int(n);
    return 0;
}

METHOD(m_list_index) {
    static const char *const names[] = {"value", "start", "stop"};
    tv p[3];
    if (tpl_bind(c, "index()", a, names, 3, p)) return -1;
    int64_t n = (int64_t)self->u.l->n, s = 0, e = n;
    if (p[1].kind != TV_MISSING && tpl_arg_int(c, "index()", &p[1], &s)) return -1;
    if (p[2].kind != TV_MISSING && tpl_arg_int(c, "index()", &p[2], &e)) return -1;
    if (s < 0) { s += n; if (s < 0) s = 0; }
    if (e < 0) { e += n; if (e < 0) e = 0; }
    if (e > n) e = n;
    for (int64_t i = s; i < e; i++) {
        int eq;
        if (tv_eq(c, &self->u.l->items[i], &p[0], &eq)) return -1;
        if (eq) { *out = tv_int(i); return 0; }
    }
    return tpl_fail(c, XLLM_ERR_FORMAT, "value is not in list");
}

METHOD(m_list_copy) {
    if (no_args(c, "copy()", a)) return -1;
    tv_list *l = tv_list_new(c, L_LIST, self->u.l->n);
    if (!l) return -1;
    if (self->u.l->n) memcpy(l->items, self->u.l->items, self->u.l->n * sizeof(tv));
    l->n = self->u.l->n;
    *out = tv_list_val(l);
    return 0;
}

/* A Python method we do not implement: an error when called (self holds
 * its description). */
static int unsupported_call(tpl_ctx *c, const tv *self, const tpl_args *a, tv *out) {
    (void)a;
    (void)out;
    return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "the %.*s method is not supported", (int)self->len, self->u.s);
}

/* --------------------------------------------------------------- tables */

typedef struct mdef {
    const char *name;
    tpl_builtin fn;
} mdef;

static const mdef STR_METHODS[] = {
    {"startswith", m_startswith}, {"endswith", m_endswith}, {"split", m_split}, {"rsplit", m_rsplit},
    {"splitlines", m_splitlines}, {"strip", m_strip}, {"lstrip", m_lstrip}, {"rstrip", m_rstrip},
    {"upper", m_upper}, {"lower", m_lower}, {"casefold", m_casefold}, {"title", m_title},
    {"capitalize", m_capitalize}, {"swapcase", m_swapcase}, {"replace", m_replace}, {"find", m_find},
    {"rfind", m_rfind}, {"index", m_index}, {"rindex", m_rindex}, {"count", m_count}, {"join", m_join},
    {"partition", m_partition}, {"rpartition", m_rpartition}, {"removeprefix", m_removeprefix},
    {"removesuffix", m_removesuffix}, {"isdigit", m_isdigit}, {"isdecimal", m_isdecimal}, {"isnumeric", m_isnumeric},
    {"isalpha", m_isalpha}, {"isalnum", m_isalnum}, {"isspace", m_isspace}, {"isupper", m_isupper},
    {"islower", m_islower}, {"center", m_center}, {"ljust", m_ljust}, {"rjust", m_rjust}, {"zfill", m_zfill},
    {"format", m_format},
    /* the rest of str's methods */
    {"encode", NULL}, {"expandtabs", NULL}, {"format_map", NULL}, {"isascii", NULL}, {"isidentifier", NULL},
    {"isprintable", NULL}, {"istitle", NULL}, {"maketrans", NULL}, {"translate", NULL}};

static const mdef DICT_METHODS[] = {{"items", m_items}, {"keys", m_keys}, {"values", m_values}, {"get", m_get},
                                    {"copy", m_dict_copy}, {"fromkeys", NULL}};
static const char *const DICT_MUTATORS[] = {"clear", "pop", "popitem", "setdefault", "update"};

static const mdef LIST_METHODS[] = {{"count", m_list_count}, {"index", m_list_index}, {"copy", m_list_copy}};
static const char *const LIST_MUTATORS[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};

static int bind_method(tpl_ctx *c, const tv *self, const char *name, tpl_builtin fn, tv *out) {
    tv_func *f = tpl_alloc(c->arena, sizeof *f);
    if (!f) return tpl_oom(c);
    memset(f, 0, sizeof *f);
    f->kind = F_BUILTIN;
    f->name = name;
    f->fn = fn;
    f->self = *self;
    out->kind = TV_FUNC;
    out->len = 0;
    out->u.fn = f;
    return 0;
}

static int find_in(tpl_ctx *c, const tv *self, const mdef *tab, size_t n, const char *name, size_t len, tv *out) {
    for (size_t i = 0; i < n; i++) {
        if (strlen(tab[i].name) != len || memcmp(tab[i].name, name, len)) continue;
        if (tab[i].fn) return bind_method(c, self, tab[i].name, tab[i].fn, out);
        buf_t b = tpl_buf_make(c);
        tv desc;
        buf_printf(&b, "%s '%s'", tv_type_name(self), tab[i].name);
        if (tpl_buf_to_value(c, &b, &desc)) return -1;
        return bind_method(c, &desc, tab[i].name, unsupported_call, out);
    }
    return 1;
}

int tpl_method(tpl_ctx *c, const tv *self, const char *name, size_t len, tv *out) {
    *out = tv_missing();
    int r = 1;
    if (len && name[0] == '_') return 0; /* the sandbox hides underscore attributes */
    if (self->kind == TV_STR) r = find_in(c, self, STR_METHODS, sizeof STR_METHODS / sizeof *STR_METHODS, name, len, out);
    else if (self->kind == TV_DICT && self->u.d->kind == D_DICT) {
        r = find_in(c, self, DICT_METHODS, sizeof DICT_METHODS / sizeof *DICT_METHODS, name, len, out);
        for (size_t i = 0; r == 1 && i < sizeof DICT_MUTATORS / sizeof *DICT_MUTATORS; i++)
            if (strlen(DICT_MUTATORS[i]) == len && !memcmp(DICT_MUTATORS[i], name, len)) {
                *out = tv_undef_fmt(c, "access to attribute '%s' of 'dict' object is unsafe.", DICT_MUTATORS[i]);
                return 0;
            }
    } else if (self->kind == TV_LIST && (self->u.l->kind == L_LIST || self->u.l->kind == L_TUPLE)) {
        r = find_in(c, self, LIST_METHODS, self->u.l->kind == L_LIST ? 3 : 2, name, len, out);
        for (size_t i = 0; r == 1 && self->u.l->kind == L_LIST && i < sizeof LIST_MUTATORS / sizeof *LIST_MUTATORS; i++)
            if (strlen(LIST_MUTATORS[i]) == len && !memcmp(LIST_MUTATORS[i], name, len)) {
                *out = tv_undef_fmt(c, "access to attribute '%s' of 'list' object is unsafe.", LIST_MUTATORS[i]);
                return 0;
            }
    }
    return r < 0 ? -1 : 0;
}
