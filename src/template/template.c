/*
 * template.c - compile (normalize newlines as Jinja2 does, drop one trailing
 * newline, lex, parse, fold constants) and render (build the variables from JSON, run the
 * AST, hand the text to the caller).
 */
#include "template/template.h"
#include "template/tpl.h"
#include "base/alloc.h"

#include <string.h>

tpl_template *tpl_compile(const char *src, size_t len, xllm_error *err) {
    if (!src) {
        err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "chat template: source is NULL");
        return NULL;
    }
    if (!u8_valid(src, len)) {
        err_setf(err, XLLM_ERR_FORMAT, "chat template: not valid UTF-8");
        return NULL;
    }
    tpl_template *t = mem_calloc(1, sizeof *t);
    if (!t) {
        err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        return NULL;
    }
    /* \r\n and \r become \n; with keep_trailing_newline off, one final \n goes */
    char *s = tpl_alloc(&t->arena, len + 1);
    if (!s) {
        err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        tpl_free(t);
        return NULL;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n > 0 && s[n - 1] == '\n') n--;
    s[n] = 0;
    token *toks;
    size_t ntoks;
    if (tpl_lex(&t->arena, s, n, &toks, &ntoks, err) || tpl_parse(t, toks, ntoks, err) || tpl_fold(t, err)) {
        tpl_free(t);
        return NULL;
    }
    return t;
}

void tpl_free(tpl_template *t) {
    if (!t) return;
    tpl_arena_free(&t->arena);
    xllm_free(t);
}

static int fail_msg(tpl_ctx *c, xllm_status code, const char *msg) {
    err_setf(c->err, code, "%s", msg);
    c->failed = 1;
    return -1;
}

/* Members of a JSON object into vars. */
static int add_object(tpl_ctx *c, tv_dict *vars, const char *json, const char *what) {
    tv obj;
    if (tpl_json_parse(c, json, strlen(json), what, &obj)) return -1;
    if (obj.kind != TV_DICT) {
        err_setf(c->err, XLLM_ERR_INVALID_ARGUMENT, "%s: expected a JSON object of variables", what);
        c->failed = 1;
        return -1;
    }
    for (size_t i = 0; i < obj.u.d->n; i++) {
        const tv *k = &obj.u.d->keys[i];
        if (k->len == 8 && !memcmp(k->u.s, "messages", 8))
            return fail_msg(c, XLLM_ERR_INVALID_ARGUMENT, "template options: 'messages' is given separately");
        if (tv_dict_set(c, vars, *k, obj.u.d->vals[i])) return -1;
    }
    return 0;
}

xllm_status tpl_render(const tpl_template *t, const char *messages_json, const char *base_json, const char *vars_json,
                       char **out, size_t *out_len, xllm_error *err) {
    xllm_error local;
    if (!err) err = &local;
    if (!t || !messages_json || !out)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "chat template render: NULL argument");
    *out = NULL;
    if (out_len) *out_len = 0;
    size_t in_bytes = strlen(messages_json) + (vars_json ? strlen(vars_json) : 0);
    tpl_arena arena = {NULL, 0, TPL_MAX_MEMORY + 16 * in_bytes};
    tpl_ctx c;
    memset(&c, 0, sizeof c);
    c.arena = &arena;
    c.err = err;
    c.max_output = TPL_MAX_OUTPUT;
    tv_dict *vars = tv_dict_new(&c, D_DICT);
    tv messages;
    buf_t b;
    memset(&b, 0, sizeof b);
    b.max = c.max_output;
    if (!vars || tpl_json_parse(&c, messages_json, strlen(messages_json), "messages", &messages)) goto fail;
    if (messages.kind != TV_LIST) {
        fail_msg(&c, XLLM_ERR_INVALID_ARGUMENT, "messages: expected a JSON array of messages");
        goto fail;
    }
    if (tv_dict_set(&c, vars, tv_str_cstr("messages"), messages) ||
        tv_dict_set(&c, vars, tv_str_cstr("add_generation_prompt"), tv_bool(0)) ||
        tv_dict_set(&c, vars, tv_str_cstr("tools"), tv_none()) ||
        tv_dict_set(&c, vars, tv_str_cstr("documents"), tv_none()))
        goto fail;
    if (base_json && add_object(&c, vars, base_json, "special tokens")) goto fail;
    if (vars_json && add_object(&c, vars, vars_json, "template options")) goto fail;
    c.vars = vars;
    if (tpl_render_ast(&c, t, &b)) goto fail;
    if (!b.p) {
        b.p = mem_malloc(1);
        if (!b.p) {
            tpl_oom(&c);
            goto fail;
        }
        b.p[0] = 0;
    }
    *out = b.p;
    if (out_len) *out_len = b.len;
    tpl_arena_free(&arena);
    return XLLM_OK;
fail:
    buf_free(&b);
    tpl_arena_free(&arena);
    if (!c.failed) err_setf(err, XLLM_ERR_INTERNAL, "chat template: render failed");
    return err->code != XLLM_OK ? err->code : XLLM_ERR_INTERNAL;
}
