/*
 * json.c - JSON in and out of template values, the way Python's json module
 * does it.
 *
 * In: messages, tools and extra variables arrive as JSON text; json.loads
 * semantics matter to the rendering (1 stays an int and 1.0 a float, keys keep
 * their order, "\u0000" is kept, a repeated key keeps its first place and last
 * value, NaN/Infinity are accepted). Out: the tojson filter is HuggingFace's
 * json.dumps(x, ensure_ascii=False, indent=indent, separators=..., sort_keys=...).
 */
#include "template/tpl.h"
#include "base/alloc.h"
#include "base/utf8.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 512

typedef struct jp {
    tpl_ctx *c;
    const char *s, *what;
    size_t n, i;
} jp;

static int jfail(jp *p, const char *msg) {
    if (!p->c->failed) {
        err_setf(p->c->err, XLLM_ERR_FORMAT, "%s: invalid JSON at byte %zu: %s", p->what, p->i, msg);
        p->c->failed = 1;
    }
    return -1;
}

static void jws(jp *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r')) p->i++;
}

static int jstring(jp *p, tv *out) {
    p->i++; /* opening quote */
    size_t start = p->i;
    /* fast path: no escapes */
    size_t k = start;
    while (k < p->n && p->s[k] != '"' && p->s[k] != '\\' && (unsigned char)p->s[k] >= 0x20) k++;
    if (k < p->n && p->s[k] == '"') {
        if (!u8_valid(p->s + start, k - start)) return jfail(p, "string is not valid UTF-8");
        p->i = k + 1;
        return tv_str_copy(p->c, p->s + start, k - start, out);
    }
    buf_t b = tpl_buf_make(p->c);
    b.max = (size_t)-1;
    while (p->i < p->n && p->s[p->i] != '"') {
        char ch = p->s[p->i];
        if ((unsigned char)ch < 0x20) { buf_free(&b); return jfail(p, "control character in string"); }
        if (ch != '\\') {
            size_t st = p->i;
            while (p->i < p->n && p->s[p->i] != '"' && p->s[p->i] != '\\' && (unsigned char)p->s[p->i] >= 0x20) p->i++;
            if (!u8_valid(p->s + st, p->i - st)) { buf_free(&b); return jfail(p, "string is not valid UTF-8"); }
            if (buf_append(&b, p->s + st, p->i - st)) break;
            continue;
        }
        if (p->i + 1 >= p->n) break;
        char e = p->s[p->i + 1], o = 0;
        p->i += 2;
        switch (e) {
        case '"': o = '"'; break;
        case '\\': o = '\\'; break;
        case '/': o = '/'; break;
        case 'b': o = '\b'; break;
        case 'f': o = '\f'; break;
        case 'n': o = '\n'; break;
        case 'r': o = '\r'; break;
        case 't': o = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (p->i + 4 > p->n || u8_hex4(p->s + p->i, &cp)) { buf_free(&b); return jfail(p, "bad \\u escape"); }
            p->i += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p->i + 6 <= p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u' &&
                !u8_hex4(p->s + p->i + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p->i += 6;
            } else if (cp >= 0xD800 && cp < 0xE000) {
                cp = 0xFFFD; /* a lone surrogate cannot be UTF-8 */
            }
            char u[4];
            if (buf_append(&b, u, u8_encode(cp, u))) goto oom;
            continue;
        }
        default: buf_free(&b); return jfail(p, "bad escape in string");
        }
        if (buf_putc(&b, o)) goto oom;
    }
    if (p->i >= p->n) { buf_free(&b); return jfail(p, "unterminated string"); }
    p->i++;
    return tpl_buf_to_value(p->c, &b, out);
oom:
    buf_free(&b);
    return tpl_oom(p->c);
}

static int jnumber(jp *p, tv *out) {
    size_t st = p->i;
    int is_float = 0;
    if (p->s[p->i] == '-') p->i++;
    if (p->i + 8 <= p->n && !memcmp(p->s + p->i, "Infinity", 8)) {
        p->i += 8;
        *out = tv_float(p->s[st] == '-' ? -INFINITY : INFINITY);
        return 0;
    }
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return jfail(p, "bad number");
    if (p->s[p->i] == '0') p->i++;
    else while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    if (p->i < p->n && p->s[p->i] == '.') {
        is_float = 1;
        p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return jfail(p, "bad number");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        is_float = 1;
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return jfail(p, "bad number");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    char buf[64];
    size_t len = p->i - st;
    if (len >= sizeof buf) {
        if (!is_float) return jfail(p, "integer too large (more than 64 bits)");
        char *tmp = mem_malloc(len + 1);
        if (!tmp) return tpl_oom(p->c);
        memcpy(tmp, p->s + st, len);
        tmp[len] = 0;
        *out = tv_float(strtod(tmp, NULL));
        xllm_free(tmp);
        return 0;
    }
    memcpy(buf, p->s + st, len);
    buf[len] = 0;
    if (is_float) {
        *out = tv_float(strtod(buf, NULL));
        return 0;
    }
    errno = 0;
    long long v = strtoll(buf, NULL, 10);
    if (errno == ERANGE) return jfail(p, "integer too large (more than 64 bits)");
    *out = tv_int(v);
    return 0;
}

static int jvalue(jp *p, tv *out, int depth) {
    if (depth > JSON_MAX_DEPTH) return jfail(p, "nested too deeply");
    jws(p);
    if (p->i >= p->n) return jfail(p, "unexpected end");
    char ch = p->s[p->i];
    if (ch == '"') return jstring(p, out);
    if (ch == '{') {
        tv_dict *d = tv_dict_new(p->c, D_DICT);
        if (!d) return -1;
        p->i++;
        jws(p);
        if (p->i < p->n && p->s[p->i] == '}') {
            p->i++;
            *out = tv_dict_val(d);
            return 0;
        }
        for (;;) {
            jws(p);
            if (p->i >= p->n || p->s[p->i] != '"') return jfail(p, "expected a string key");
            tv k, v;
            if (jstring(p, &k)) return -1;
            jws(p);
            if (p->i >= p->n || p->s[p->i] != ':') return jfail(p, "expected ':'");
            p->i++;
            if (jvalue(p, &v, depth + 1) || tv_dict_set(p->c, d, k, v)) return -1;
            jws(p);
            if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
            if (p->i < p->n && p->s[p->i] == '}') { p->i++; break; }
            return jfail(p, "expected ',' or '}'");
        }
        *out = tv_dict_val(d);
        return 0;
    }
    if (ch == '[') {
        tv_list *l = tv_list_new(p->c, L_LIST, 0);
        if (!l) return -1;
        p->i++;
        jws(p);
        if (p->i < p->n && p->s[p->i] == ']') {
            p->i++;
            *out = tv_list_val(l);
            return 0;
        }
        for (;;) {
            tv v;
            if (jvalue(p, &v, depth + 1) || tv_list_push(p->c, l, v)) return -1;
            jws(p);
            if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
            if (p->i < p->n && p->s[p->i] == ']') { p->i++; break; }
            return jfail(p, "expected ',' or ']'");
        }
        *out = tv_list_val(l);
        return 0;
    }
    static const struct { const char *w; int kind; } words[] = {{"true", 1}, {"false", 2}, {"null", 3}, {"NaN", 4}};
    for (size_t k = 0; k < sizeof words / sizeof *words; k++) {
        size_t wl = strlen(words[k].w);
        if (p->n - p->i >= wl && !memcmp(p->s + p->i, words[k].w, wl)) {
            p->i += wl;
            *out = words[k].kind == 1 ? tv_bool(1) : words[k].kind == 2 ? tv_bool(0) : words[k].kind == 3 ? tv_none() : tv_float(NAN);
            return 0;
        }
    }
    if (ch == '-' || (ch >= '0' && ch <= '9') || ch == 'I') {
        if (ch == 'I') {
            if (p->n - p->i >= 8 && !memcmp(p->s + p->i, "Infinity", 8)) {
                p->i += 8;
                *out = tv_float(INFINITY);
                return 0;
            }
            return jfail(p, "unexpected character");
        }
        return jnumber(p, out);
    }
    return jfail(p, "unexpected character");
}

int tpl_json_parse(tpl_ctx *c, const char *text, size_t len, const char *what, tv *out) {
    jp p = {c, text, what, len, 0};
    if (jvalue(&p, out, 0)) return -1;
    jws(&p);
    if (p.i != p.n) return jfail(&p, "extra data after the value");
    return 0;
}

/* ----------------------------------------------------------------- dumping */

static int dump_string(buf_t *b, const char *s, size_t len, int ascii) {
    if (buf_putc(b, '"')) return -1;
    size_t i = 0;
    while (i < len) {
        size_t st = i;
        /* runs of plain bytes go out at once */
        while (i < len) {
            unsigned char ch = (unsigned char)s[i];
            if (ch < 0x20 || ch == '"' || ch == '\\' || (ascii && ch >= 0x7F)) break;
            i++;
        }
        if (i > st && buf_append(b, s + st, i - st)) return -1;
        if (i >= len) break;
        uint32_t cp = py_utf8_next(s, len, &i);
        int rc;
        switch (cp) {
        case '"': rc = buf_append(b, "\\\"", 2); break;
        case '\\': rc = buf_append(b, "\\\\", 2); break;
        case '\n': rc = buf_append(b, "\\n", 2); break;
        case '\r': rc = buf_append(b, "\\r", 2); break;
        case '\t': rc = buf_append(b, "\\t", 2); break;
        case '\b': rc = buf_append(b, "\\b", 2); break;
        case '\f': rc = buf_append(b, "\\f", 2); break;
        default:
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                rc = buf_printf(b, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            } else {
                rc = buf_printf(b, "\\u%04x", cp);
            }
        }
        if (rc) return -1;
    }
    return buf_putc(b, '"');
}

static int dump_float(buf_t *b, double f) {
    if (isnan(f)) return buf_append(b, "NaN", 3);
    if (isinf(f)) return f < 0 ? buf_append(b, "-Infinity", 9) : buf_append(b, "Infinity", 8);
    char num[40];
    py_float_repr(f, num);
    return buf_append(b, num, strlen(num));
}

static int newline_indent(buf_t *b, const tpl_json_opts *o, int level) {
    if (buf_putc(b, '\n')) return -1;
    for (int k = 0; k < level; k++)
        if (buf_append(b, o->indent, o->indent_len)) return -1;
    return 0;
}

static int dump(tpl_ctx *c, const tv *v, const tpl_json_opts *o, buf_t *b, int level);

static int dump_key(tpl_ctx *c, const tv *k, const tpl_json_opts *o, buf_t *b) {
    char num[40];
    switch (k->kind) {
    case TV_STR: return dump_string(b, k->u.s, k->len, o->ensure_ascii);
    case TV_INT: return buf_printf(b, "\"%" PRId64 "\"", k->u.i);
    case TV_BOOL: return buf_append(b, k->u.b ? "\"true\"" : "\"false\"", k->u.b ? 6 : 7);
    case TV_NONE: return buf_append(b, "\"null\"", 6);
    case TV_FLOAT:
        if (isnan(k->u.f)) return buf_append(b, "\"NaN\"", 5);
        if (isinf(k->u.f)) return k->u.f < 0 ? buf_append(b, "\"-Infinity\"", 11) : buf_append(b, "\"Infinity\"", 10);
        py_float_repr(k->u.f, num);
        return buf_printf(b, "\"%s\"", num);
    default:
        return tpl_fail(c, XLLM_ERR_FORMAT, "tojson: keys must be str, int, float, bool or None, not %s",
                        tv_type_name(k));
    }
}

static int dump_dict(tpl_ctx *c, const tv_dict *d, const tpl_json_opts *o, buf_t *b, int level) {
    if (d->n == 0) return buf_append(b, "{}", 2);
    size_t *order = tpl_alloc(c->arena, d->n * sizeof *order);
    if (!order) return tpl_oom(c);
    for (size_t i = 0; i < d->n; i++) order[i] = i;
    if (o->sort_keys) { /* insertion sort (stable), Python's ordering of the keys */
        for (size_t i = 1; i < d->n; i++) {
            size_t cur = order[i], j = i;
            while (j > 0) {
                int lt;
                if (tv_lt(c, &d->keys[cur], &d->keys[order[j - 1]], &lt)) return -1;
                if (!lt) break;
                order[j] = order[j - 1];
                j--;
            }
            order[j] = cur;
        }
    }
    if (buf_putc(b, '{')) return -1;
    if (o->has_indent && newline_indent(b, o, level + 1)) return -1;
    for (size_t k = 0; k < d->n; k++) {
        size_t i = order[k];
        if (k) {
            if (buf_append(b, o->item_sep, o->item_sep_len)) return -1;
            if (o->has_indent && newline_indent(b, o, level + 1)) return -1;
        }
        if (dump_key(c, &d->keys[i], o, b) || buf_append(b, o->key_sep, o->key_sep_len) ||
            dump(c, &d->vals[i], o, b, level + 1))
            return -1;
    }
    if (o->has_indent && newline_indent(b, o, level)) return -1;
    return buf_putc(b, '}');
}

static int dump(tpl_ctx *c, const tv *v, const tpl_json_opts *o, buf_t *b, int level) {
    if (level > JSON_MAX_DEPTH) return tpl_fail(c, XLLM_ERR_FORMAT, "tojson: value nested too deeply");
    switch (v->kind) {
    case TV_NONE: return buf_append(b, "null", 4);
    case TV_BOOL: return v->u.b ? buf_append(b, "true", 4) : buf_append(b, "false", 5);
    case TV_INT: return buf_printf(b, "%" PRId64, v->u.i);
    case TV_FLOAT: return dump_float(b, v->u.f);
    case TV_STR: return dump_string(b, v->u.s, v->len, o->ensure_ascii);
    case TV_LIST: {
        const tv_list *l = v->u.l;
        if (l->kind != L_LIST && l->kind != L_TUPLE) break;
        if (l->n == 0) return buf_append(b, "[]", 2);
        if (buf_putc(b, '[')) return -1;
        if (o->has_indent && newline_indent(b, o, level + 1)) return -1;
        for (size_t i = 0; i < l->n; i++) {
            if (i) {
                if (buf_append(b, o->item_sep, o->item_sep_len)) return -1;
                if (o->has_indent && newline_indent(b, o, level + 1)) return -1;
            }
            if (dump(c, &l->items[i], o, b, level + 1)) return -1;
        }
        if (o->has_indent && newline_indent(b, o, level)) return -1;
        return buf_putc(b, ']');
    }
    case TV_DICT:
        if (v->u.d->kind != D_DICT) break;
        return dump_dict(c, v->u.d, o, b, level);
    default: break;
    }
    return tpl_fail(c, XLLM_ERR_FORMAT, "tojson: Object of type %s is not JSON serializable", tv_type_name(v));
}

int tpl_json_dump(tpl_ctx *c, const tv *v, const tpl_json_opts *o, buf_t *b) {
    if (dump(c, v, o, b, 0)) {
        if (c->failed) return -1;
        if (b->err == XLLM_BUF_OOM) return tpl_oom(c);
        return tpl_fail(c, XLLM_ERR_FORMAT, "the rendered text is larger than the limit (%zu bytes)", b->max);
    }
    return 0;
}
