/*
 * ops.c - Python's operators on template values: + - * / // % ** ~, the
 * comparisons, `in`, and printf-style `str % args`.
 *
 * Integers are 64-bit; where Python would silently grow a big integer we
 * stop with an error instead of wrapping. bool counts as int, as in Python.
 */
#include "template/tpl.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static int is_intlike(const tv *v) { return v->kind == TV_INT || v->kind == TV_BOOL; }
static int64_t ival(const tv *v) { return v->kind == TV_BOOL ? v->u.b : v->u.i; }

static const char *op_sym(int op) {
    switch (op) {
    case OP_ADD: return "+";
    case OP_SUB: return "-";
    case OP_MUL: return "*";
    case OP_DIV: return "/";
    case OP_FLOORDIV: return "//";
    case OP_MOD: return "%";
    case OP_POW: return "** or pow()";
    case OP_CONCAT: return "~";
    default: return "?";
    }
}

static int type_error(tpl_ctx *c, int op, const tv *a, const tv *b) {
    return tpl_fail(c, XLLM_ERR_FORMAT, "unsupported operand type(s) for %s: '%s' and '%s'", op_sym(op),
                    tv_type_name(a), tv_type_name(b));
}

static int overflow(tpl_ctx *c) {
    return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "integer overflow (Python integers are unbounded; ours are 64-bit)");
}

static int repeat(tpl_ctx *c, const tv *seq, int64_t times, tv *out) {
    if (times < 0) times = 0;
    /* an empty sequence repeated is empty at once, however large times is
     * (found by fuzz_template: [] * 4 ** 20 looped 10^12 times) */
    if ((seq->kind == TV_STR ? seq->len : seq->u.l->n) == 0) times = 0;
    if (seq->kind == TV_STR) {
        if (seq->len && (uint64_t)times > c->max_output / seq->len)
            return tpl_fail(c, XLLM_ERR_FORMAT, "string repetition larger than the output limit");
        size_t total = seq->len * (size_t)times;
        char *p = tpl_alloc(c->arena, total + 1);
        if (!p) return tpl_oom(c);
        for (int64_t k = 0; k < times; k++) memcpy(p + (size_t)k * seq->len, seq->u.s, seq->len);
        p[total] = 0;
        *out = tv_str(p, total);
        return 0;
    }
    const tv_list *l = seq->u.l;
    if (l->n && (uint64_t)times > (c->max_output / sizeof(tv)) / l->n)
        return tpl_fail(c, XLLM_ERR_FORMAT, "list repetition too large");
    tv_list *r = tv_list_new(c, l->kind, l->n * (size_t)times);
    if (!r) return -1;
    for (int64_t k = 0; k < times; k++)
        for (size_t i = 0; i < l->n; i++) r->items[r->n++] = l->items[i];
    *out = tv_list_val(r);
    return 0;
}

static int is_seq(const tv *v) { return v->kind == TV_LIST && (v->u.l->kind == L_LIST || v->u.l->kind == L_TUPLE); }

/* CPython's float floor division and modulo. */
static void float_divmod(double vx, double wx, double *floordiv, double *mod) {
    double m = fmod(vx, wx);
    double div = (vx - m) / wx;
    if (m) {
        if ((wx < 0) != (m < 0)) {
            m += wx;
            div -= 1.0;
        }
    } else {
        m = copysign(0.0, wx);
    }
    double fd;
    if (div) {
        fd = floor(div);
        if (div - fd > 0.5) fd += 1.0;
    } else {
        fd = copysign(0.0, vx / wx);
    }
    *floordiv = fd;
    *mod = m;
}

int tpl_binop(tpl_ctx *c, int op, const tv *a, const tv *b, tv *out) {
    if (op == OP_CONCAT) {
        buf_t buf = tpl_buf_make(c);
        if (tv_to_str(c, a, &buf) || tv_to_str(c, b, &buf)) {
            buf_free(&buf);
            return -1;
        }
        return tpl_buf_to_value(c, &buf, out);
    }
    if (op == OP_MOD && a->kind == TV_STR) return tpl_percent_format(c, a, b, out); /* str % Undefined is fine */
    if (a->kind == TV_UNDEF || a->kind == TV_MISSING) return tpl_fail_undef(c, a);
    if (b->kind == TV_UNDEF || b->kind == TV_MISSING) return tpl_fail_undef(c, b);
    int nums = tv_is_number(a) && tv_is_number(b);
    int ints = is_intlike(a) && is_intlike(b);
    switch (op) {
    case OP_ADD:
        if (ints) {
            int64_t r;
            if (__builtin_add_overflow(ival(a), ival(b), &r)) return overflow(c);
            *out = tv_int(r);
            return 0;
        }
        if (nums) { *out = tv_float(tv_as_double(a) + tv_as_double(b)); return 0; }
        if (a->kind == TV_STR && b->kind == TV_STR) {
            if (a->len + b->len > c->max_output) return tpl_fail(c, XLLM_ERR_FORMAT, "string larger than the output limit");
            char *p = tpl_alloc(c->arena, a->len + b->len + 1);
            if (!p) return tpl_oom(c);
            memcpy(p, a->u.s, a->len);
            memcpy(p + a->len, b->u.s, b->len);
            p[a->len + b->len] = 0;
            *out = tv_str(p, a->len + b->len);
            return 0;
        }
        if (is_seq(a) && is_seq(b) && a->u.l->kind == b->u.l->kind) {
            tv_list *r = tv_list_new(c, a->u.l->kind, a->u.l->n + b->u.l->n);
            if (!r) return -1;
            for (size_t i = 0; i < a->u.l->n; i++) r->items[r->n++] = a->u.l->items[i];
            for (size_t i = 0; i < b->u.l->n; i++) r->items[r->n++] = b->u.l->items[i];
            *out = tv_list_val(r);
            return 0;
        }
        if (a->kind == TV_STR)
            return tpl_fail(c, XLLM_ERR_FORMAT, "can only concatenate str (not \"%s\") to str", tv_type_name(b));
        if (is_seq(a))
            return tpl_fail(c, XLLM_ERR_FORMAT, "can only concatenate %s (not \"%s\") to %s", tv_type_name(a),
                            tv_type_name(b), tv_type_name(a));
        return type_error(c, op, a, b);
    case OP_SUB:
        if (ints) {
            int64_t r;
            if (__builtin_sub_overflow(ival(a), ival(b), &r)) return overflow(c);
            *out = tv_int(r);
            return 0;
        }
        if (nums) { *out = tv_float(tv_as_double(a) - tv_as_double(b)); return 0; }
        return type_error(c, op, a, b);
    case OP_MUL:
        if (ints) {
            int64_t r;
            if (__builtin_mul_overflow(ival(a), ival(b), &r)) return overflow(c);
            *out = tv_int(r);
            return 0;
        }
        if (nums) { *out = tv_float(tv_as_double(a) * tv_as_double(b)); return 0; }
        if ((a->kind == TV_STR || is_seq(a)) && is_intlike(b)) return repeat(c, a, ival(b), out);
        if ((b->kind == TV_STR || is_seq(b)) && is_intlike(a)) return repeat(c, b, ival(a), out);
        if (a->kind == TV_STR || b->kind == TV_STR || is_seq(a) || is_seq(b))
            return tpl_fail(c, XLLM_ERR_FORMAT, "can't multiply sequence by non-int of type '%s'",
                            tv_type_name(a->kind == TV_STR || is_seq(a) ? b : a));
        return type_error(c, op, a, b);
    case OP_DIV:
        if (!nums) return type_error(c, op, a, b);
        if (tv_as_double(b) == 0) return tpl_fail(c, XLLM_ERR_FORMAT, "division by zero");
        *out = tv_float(tv_as_double(a) / tv_as_double(b));
        return 0;
    case OP_FLOORDIV:
    case OP_MOD:
        if (!nums) return type_error(c, op, a, b);
        if (ints) {
            int64_t x = ival(a), y = ival(b);
            if (y == 0) return tpl_fail(c, XLLM_ERR_FORMAT, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) {
                if (op == OP_MOD) { *out = tv_int(0); return 0; }
                return overflow(c);
            }
            int64_t q = x / y, r = x % y;
            if (r != 0 && ((r < 0) != (y < 0))) {
                r += y;
                q -= 1;
            }
            *out = tv_int(op == OP_MOD ? r : q);
            return 0;
        } else {
            double x = tv_as_double(a), y = tv_as_double(b), fd, m;
            if (y == 0) return tpl_fail(c, XLLM_ERR_FORMAT, "float division by zero");
            float_divmod(x, y, &fd, &m);
            *out = tv_float(op == OP_MOD ? m : fd);
            return 0;
        }
    case OP_POW:
        if (!nums) return type_error(c, op, a, b);
        if (ints && ival(b) >= 0) {
            int64_t base = ival(a), e = ival(b), r = 1;
            while (e > 0) {
                if (e & 1 && __builtin_mul_overflow(r, base, &r)) return overflow(c);
                e >>= 1;
                if (e && __builtin_mul_overflow(base, base, &base)) return overflow(c);
            }
            *out = tv_int(r);
            return 0;
        } else {
            double x = tv_as_double(a), y = tv_as_double(b);
            if (x == 0 && y < 0) return tpl_fail(c, XLLM_ERR_FORMAT, "0.0 cannot be raised to a negative power");
            if (x < 0 && y != floor(y))
                return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "a negative number to a fractional power is complex");
            double r = pow(x, y);
            if (isinf(r) && isfinite(x) && isfinite(y))
                return tpl_fail(c, XLLM_ERR_FORMAT, "(34, 'Numerical result out of range')");
            *out = tv_float(r);
            return 0;
        }
    default: return type_error(c, op, a, b);
    }
}

int tpl_contains(tpl_ctx *c, const tv *container, const tv *x, int *res) {
    *res = 0;
    if (container->kind != TV_DICT && tpl_work(c, tv_work_size(container))) return -1; /* dicts are hashed */
    switch (container->kind) {
    case TV_UNDEF: case TV_MISSING: return 0;
    case TV_STR:
        if (x->kind != TV_STR)
            return tpl_fail(c, XLLM_ERR_FORMAT, "'in <string>' requires string as left operand, not %s", tv_type_name(x));
        *res = x->len == 0 || memmem(container->u.s, container->len, x->u.s, x->len) != NULL;
        return 0;
    case TV_LIST: {
        tv_list *l = container->u.l;
        size_t i;
        for (i = 0; i < l->n; i++) {
            int eq;
            if (tv_eq(c, &l->items[i], x, &eq)) return -1;
            if (eq) { *res = 1; break; }
        }
        if (l->kind == L_GEN) { /* `in` runs a generator up to the match */
            size_t used = *res ? i + 1 : l->n;
            if (l->items) l->items += used;
            l->n -= used;
            l->cap = l->n;
        }
        return 0;
    }
    case TV_DICT:
        if (container->u.d->kind == D_DICT) {
            if (x->kind != TV_UNDEF && x->kind != TV_MISSING && tv_check_hashable(c, x)) return -1;
            *res = tv_dict_get(container->u.d, x) != NULL;
            return 0;
        }
        break;
    default: break;
    }
    return tpl_fail(c, XLLM_ERR_FORMAT, "argument of type '%s' is not iterable", tv_type_name(container));
}

int tpl_compare(tpl_ctx *c, int op, const tv *a, const tv *b, int *res) {
    int lt, in;
    switch (op) {
    case OP_EQ: return tv_eq(c, a, b, res);
    case OP_NE:
        if (tv_eq(c, a, b, res)) return -1;
        *res = !*res;
        return 0;
    case OP_LT: return tv_lt(c, a, b, res);
    case OP_GT: return tv_lt(c, b, a, res);
    case OP_LE:
        if (tv_lt(c, a, b, &lt)) return -1;
        if (lt) { *res = 1; return 0; }
        return tv_eq(c, a, b, res);
    case OP_GE:
        if (tv_lt(c, b, a, &lt)) return -1;
        if (lt) { *res = 1; return 0; }
        return tv_eq(c, a, b, res);
    case OP_IN:
    case OP_NOTIN:
        if (tpl_contains(c, b, a, &in)) return -1;
        *res = op == OP_IN ? in : !in;
        return 0;
    default: return tpl_fail(c, XLLM_ERR_INTERNAL, "bad comparison");
    }
}

/* ------------------------------------------------------ printf-style % */

static int pad_text(buf_t *b, const char *s, size_t len, int width, int left) {
    size_t cps = py_cp_count(s, len);
    size_t padn = width > 0 && (size_t)width > cps ? (size_t)width - cps : 0;
    if (!left && buf_fill(b, ' ', padn)) return -1;
    if (buf_append(b, s, len)) return -1;
    if (left && buf_fill(b, ' ', padn)) return -1;
    return 0;
}

/* One conversion's flags, width, precision and letter. */
typedef struct pct_spec {
    char flags[8];
    int width, prec, left;
    char conv;
} pct_spec;

/* %s %r %a */
static int pct_str(tpl_ctx *c, buf_t *b, const tv *arg, const pct_spec *p) {
    tv sv;
    int rc;
    if (p->conv == 's') rc = tv_stringify(c, arg, &sv);
    else {
        buf_t rb = tpl_buf_make(c);
        rc = tv_repr(c, arg, &rb) || tpl_buf_to_value(c, &rb, &sv);
        if (rc) buf_free(&rb);
    }
    if (rc) return rc;
    size_t len = sv.len;
    if (p->prec >= 0) len = py_cp_offset(sv.u.s, sv.len, (size_t)p->prec);
    return pad_text(b, sv.u.s, len, p->width, p->left);
}

/* %c: a one-character string, or a code point */
static int pct_char(tpl_ctx *c, buf_t *b, const tv *arg, const pct_spec *p) {
    if (arg->kind == TV_STR && py_cp_count(arg->u.s, arg->len) == 1) return pad_text(b, arg->u.s, arg->len, p->width, p->left);
    if (!is_intlike(arg)) return tpl_fail(c, XLLM_ERR_FORMAT, "%%c requires int or char");
    if (ival(arg) < 0 || ival(arg) > 0x10FFFF) return tpl_fail(c, XLLM_ERR_FORMAT, "%%c arg not in range(0x110000)");
    uint32_t cp = (uint32_t)ival(arg);
    if (cp >= 0xD800 && cp < 0xE000) return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "%%c of a surrogate");
    char u[4];
    return pad_text(b, u, u8_encode(cp, u), p->width, p->left);
}

/* %d %i %u %x %X %o in Python's layout: sign, 0x/0X/0o prefix with '#',
 * digits (precision = least digits), padding */
static int pct_int(tpl_ctx *c, buf_t *b, const tv *arg, const pct_spec *p) {
    char conv = p->conv;
    const char *flags = p->flags;
    int64_t v = 0;
    const char *big = NULL; /* a float beyond 64 bits: its exact integer digits */
    char bigbuf[400];
    if (is_intlike(arg)) v = ival(arg);
    else if (arg->kind == TV_FLOAT && (conv == 'd' || conv == 'i' || conv == 'u')) {
        if (!isfinite(arg->u.f)) return tpl_fail(c, XLLM_ERR_FORMAT, "cannot convert float %s to integer", isnan(arg->u.f) ? "NaN" : "infinity");
        if (fabs(arg->u.f) >= 9.2e18) {
            snprintf(bigbuf, sizeof bigbuf, "%.0f", fabs(trunc(arg->u.f)));
            big = bigbuf;
            v = arg->u.f < 0 ? -1 : 1;
        } else {
            v = (int64_t)arg->u.f;
        }
    } else {
        return tpl_fail(c, XLLM_ERR_FORMAT, "%%%c format: %s is required, not %s", conv,
                        conv == 'x' || conv == 'X' || conv == 'o' ? "an integer" : "a real number", tv_type_name(arg));
    }
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    char digits[400], sign[2] = {0, 0};
    const char *prefix = "";
    if (conv == 'x') snprintf(digits, sizeof digits, "%llx", (unsigned long long)mag);
    else if (conv == 'X') snprintf(digits, sizeof digits, "%llX", (unsigned long long)mag);
    else if (conv == 'o') snprintf(digits, sizeof digits, "%llo", (unsigned long long)mag);
    else snprintf(digits, sizeof digits, "%llu", (unsigned long long)mag);
    if (big) snprintf(digits, sizeof digits, "%s", big);
    if (strchr(flags, '#')) prefix = conv == 'x' ? "0x" : conv == 'X' ? "0X" : conv == 'o' ? "0o" : "";
    if (v < 0) sign[0] = '-';
    else if (strchr(flags, '+')) sign[0] = '+';
    else if (strchr(flags, ' ')) sign[0] = ' ';
    int width = p->width, prec = p->prec, left = p->left;
    size_t nd = strlen(digits), zeros = prec > 0 && (size_t)prec > nd ? (size_t)prec - nd : 0;
    if (prec > 300) return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "precision too large");
    size_t body = strlen(sign) + strlen(prefix) + zeros + nd;
    size_t pad = width > 0 && (size_t)width > body ? (size_t)width - body : 0;
    int zero_pad = strchr(flags, '0') && !left;
    int rc = 0;
    if (!left && !zero_pad) rc = buf_fill(b, ' ', pad);
    if (!rc) rc = buf_append(b, sign, strlen(sign));
    if (!rc) rc = buf_append(b, prefix, strlen(prefix));
    if (zero_pad && !rc) rc = buf_fill(b, '0', pad);
    if (!rc) rc = buf_fill(b, '0', zeros);
    if (!rc) rc = buf_append(b, digits, nd);
    if (left && !rc) rc = buf_fill(b, ' ', pad);
    return rc;
}

/* %f %F %e %E %g %G through C's printf (the same digits as Python's) */
static int pct_float(tpl_ctx *c, buf_t *b, const tv *arg, const pct_spec *p) {
    char conv = p->conv, spec[48], num[400];
    if (!tv_is_number(arg)) return tpl_fail(c, XLLM_ERR_FORMAT, "%%%c format: a real number is required, not %s", conv, tv_type_name(arg));
    if (p->width > 300 || p->prec > 100) /* num[] holds the whole field; Python would print it */
        return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "%%%c format: width over 300 or precision over 100 is not supported", conv);
    int k = snprintf(spec, sizeof spec, "%%%s", p->flags);
    if (p->width >= 0) k += snprintf(spec + k, sizeof spec - (size_t)k, "%d", p->width);
    if (p->prec >= 0) k += snprintf(spec + k, sizeof spec - (size_t)k, ".%d", p->prec);
    snprintf(spec + k, sizeof spec - (size_t)k, "%c", conv);
    snprintf(num, sizeof num, spec, tv_as_double(arg));
    return buf_append(b, num, strlen(num));
}

/* The flags, width, precision and letter at s[*i] (after the '%' and any
 * "(key)"); -1 (reported) for a form that is not supported. */
static int pct_parse(tpl_ctx *c, const char *s, size_t n, size_t *pi, pct_spec *p) {
    size_t i = *pi, nf = 0;
    while (i < n && strchr("-+ #0", s[i]) && nf < sizeof p->flags - 1) p->flags[nf++] = s[i++];
    p->flags[nf] = 0;
    p->width = -1, p->prec = -1;
    if (i < n && s[i] == '*') return tpl_fail(c, XLLM_ERR_UNSUPPORTED, "'*' widths in %% formats are not supported");
    /* widths and precisions saturate (no int overflow) and are bounded by the output limit */
    if (i < n && s[i] >= '0' && s[i] <= '9') p->width = (int)tpl_digits_sat(s, n, &i, INT32_MAX);
    if (i < n && s[i] == '.') {
        i++;
        p->prec = (int)tpl_digits_sat(s, n, &i, INT32_MAX);
    }
    if ((p->width > 0 && (size_t)p->width > c->max_output) || (p->prec > 0 && (size_t)p->prec > c->max_output))
        return tpl_fail(c, XLLM_ERR_FORMAT, "%% format width or precision larger than the output limit");
    while (i < n && (s[i] == 'l' || s[i] == 'h' || s[i] == 'L')) i++;
    if (i >= n) return tpl_fail(c, XLLM_ERR_FORMAT, "incomplete format");
    p->conv = s[i++];
    p->left = strchr(p->flags, '-') != NULL;
    *pi = i;
    return 0;
}

int tpl_percent_format(tpl_ctx *c, const tv *fmt, const tv *args, tv *out) {
    const tv *items = args;
    size_t nargs = 1, used = 0;
    const tv_dict *map = NULL;
    if (args->kind == TV_LIST && args->u.l->kind == L_TUPLE) {
        items = args->u.l->items;
        nargs = args->u.l->n;
    } else if (args->kind == TV_DICT && args->u.d->kind == D_DICT) {
        map = args->u.d;
    }
    buf_t b = tpl_buf_make(c);
    const char *s = fmt->u.s;
    size_t n = fmt->len, i = 0;
    int rc = 0;
    while (i < n && !rc) {
        const char *pct = memchr(s + i, '%', n - i);
        size_t lit = pct ? (size_t)(pct - (s + i)) : n - i;
        if (lit && buf_append(&b, s + i, lit)) { rc = -1; break; }
        i += lit;
        if (i >= n) break;
        i++; /* '%' */
        const tv *arg = NULL;
        if (i < n && s[i] == '(') {
            size_t e = i + 1;
            while (e < n && s[e] != ')') e++;
            if (e >= n || !map) { rc = tpl_fail(c, XLLM_ERR_FORMAT, "format requires a mapping"); break; }
            arg = tv_dict_get_str(map, s + i + 1, e - i - 1);
            if (!arg) { rc = tpl_fail(c, XLLM_ERR_FORMAT, "KeyError in %% format: '%.*s'", (int)(e - i - 1), s + i + 1); break; }
            i = e + 1;
        }
        pct_spec p;
        if ((rc = pct_parse(c, s, n, &i, &p))) break;
        if (p.conv == '%') { rc = buf_putc(&b, '%'); continue; }
        if (!arg) {
            if (map) arg = args;
            else if (used >= nargs) { rc = tpl_fail(c, XLLM_ERR_FORMAT, "not enough arguments for format string"); break; }
            else arg = &items[used++];
        }
        switch (p.conv) {
        case 's': case 'r': case 'a': rc = pct_str(c, &b, arg, &p); break;
        case 'c': rc = pct_char(c, &b, arg, &p); break;
        case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': rc = pct_int(c, &b, arg, &p); break;
        case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': rc = pct_float(c, &b, arg, &p); break;
        default: rc = tpl_fail(c, XLLM_ERR_UNSUPPORTED, "unsupported format character '%c'", p.conv); break;
        }
    }
    /* leftover arguments are an error, except for mapping-like ones (anything
     * subscriptable that is not a tuple or str: dicts, lists), as in CPython */
    int is_tuple = args->kind == TV_LIST && args->u.l->kind == L_TUPLE;
    int mapping_like = !is_tuple && (args->kind == TV_DICT || args->kind == TV_UNDEF ||
                                     (args->kind == TV_LIST && args->u.l->kind != L_GEN));
    if (!rc && !map && !mapping_like && used < nargs)
        rc = tpl_fail(c, XLLM_ERR_FORMAT, "not all arguments converted during string formatting");
    if (rc) {
        if (!c->failed) {
            tpl_buf_to_value(c, &b, out); /* reports the buffer's problem */
            return -1;
        }
        buf_free(&b);
        return -1;
    }
    return tpl_buf_to_value(c, &b, out);
}
