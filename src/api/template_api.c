/*
 * template_api.c - the public chat-template functions of xllm.h: one-shot
 * rendering of a template string, and a loaded model's template(s) with its
 * special tokens, chosen and applied the way HuggingFace's
 * apply_chat_template does. The interpreter is src/template.
 */
#include "xllm.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/file.h"
#include "format/gguf.h"
#include "format/xllm_file.h"
#include "template/template.h"

#include <stdio.h>
#include <string.h>

typedef struct named_template {
    char *name;
    char *source;
    tpl_template *tpl;   /* NULL when it did not compile */
    xllm_error compile_err;
} named_template;

#define N_SPECIAL 7
static const char *const SPECIAL_NAMES[N_SPECIAL] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                                     "pad_token", "cls_token", "mask_token"};

struct xllm_chat_template {
    named_template *items;
    size_t n;
    char *special[N_SPECIAL];
    char *base_json; /* the special tokens as a JSON object of variables */
};

xllm_status xllm_chat_template_render(const char *template_source, const char *messages_json,
                                      const char *options_json, char **out, size_t *out_len, xllm_error *err) {
    err_clear(err);
    if (!template_source || !messages_json || !out)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "xllm_chat_template_render: NULL argument");
    *out = NULL;
    xllm_error local;
    if (!err) err = &local;
    tpl_template *t = tpl_compile(template_source, strlen(template_source), err);
    if (!t) return err->code;
    xllm_status st = tpl_render(t, messages_json, NULL, options_json, out, out_len, err);
    tpl_free(t);
    return st;
}

void xllm_chat_template_free(xllm_chat_template *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n; i++) {
        xllm_free(t->items[i].name);
        xllm_free(t->items[i].source);
        tpl_free(t->items[i].tpl);
    }
    xllm_free(t->items);
    for (int k = 0; k < N_SPECIAL; k++) xllm_free(t->special[k]);
    xllm_free(t->base_json);
    xllm_free(t);
}

static int add_template(xllm_chat_template *t, const char *name, const char *source) {
    named_template *ni = mem_realloc(t->items, (t->n + 1) * sizeof *ni);
    if (!ni) return -1;
    t->items = ni;
    named_template *it = &t->items[t->n];
    memset(it, 0, sizeof *it);
    it->name = mem_strdup(name);
    it->source = mem_strdup(source);
    if (!it->name || !it->source) {
        xllm_free(it->name);
        xllm_free(it->source);
        return -1;
    }
    it->tpl = tpl_compile(source, strlen(source), &it->compile_err);
    t->n++;
    return 0;
}

/* A special token: a string, or an AddedToken object {"content": ...}. */
static const char *token_text(const cJSON *v) {
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (cJSON_IsString(c)) return c->valuestring;
    }
    return NULL;
}

static xllm_status read_config(xllm_chat_template *t, const char *path, const cJSON *cfg, xllm_error *err) {
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsString(ct)) {
        if (add_template(t, "default", ct->valuestring)) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    } else if (cJSON_IsArray(ct)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, ct) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
            const cJSON *src = cJSON_GetObjectItemCaseSensitive(e, "template");
            if (!cJSON_IsString(nm) || !cJSON_IsString(src))
                return err_setf(err, XLLM_ERR_FORMAT, "%s: chat_template list entries need string \"name\" and \"template\"", path);
            if (add_template(t, nm->valuestring, src->valuestring)) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        }
    } else if (cJSON_IsObject(ct)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, ct) {
            if (!cJSON_IsString(e)) return err_setf(err, XLLM_ERR_FORMAT, "%s: chat_template \"%s\" is not a string", path, e->string);
            if (add_template(t, e->string, e->valuestring)) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        }
    } else if (ct && !cJSON_IsNull(ct)) {
        return err_setf(err, XLLM_ERR_FORMAT, "%s: chat_template must be a string or a list of {name, template}", path);
    }
    /* special tokens, as HF's special_tokens_map passes them */
    cJSON *base = cJSON_CreateObject();
    if (!base) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    for (int k = 0; k < N_SPECIAL; k++) {
        const char *s = token_text(cJSON_GetObjectItemCaseSensitive(cfg, SPECIAL_NAMES[k]));
        if (!s) continue;
        if (!(t->special[k] = mem_strdup(s)) || !cJSON_AddStringToObject(base, SPECIAL_NAMES[k], s)) {
            cJSON_Delete(base);
            return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        }
    }
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(cfg, "additional_special_tokens");
    if (cJSON_IsArray(extra) && cJSON_GetArraySize(extra) > 0) {
        cJSON *list = cJSON_AddArrayToObject(base, "additional_special_tokens");
        const cJSON *e;
        cJSON_ArrayForEach(e, extra) {
            const char *s = token_text(e);
            if (s && list) cJSON_AddItemToArray(list, cJSON_CreateString(s));
        }
    }
    char *json = cJSON_PrintUnformatted(base);
    cJSON_Delete(base);
    if (!json) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    t->base_json = mem_strdup(json);
    cJSON_free(json);
    if (!t->base_json) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    return XLLM_OK;
}

static xllm_status model_file_template(xllm_chat_template *t, const char *path, xllm_error *err) {
    char *text = NULL;
    size_t len = 0;
    if (gguf_is_gguf(path)) {
        gguf_model g;
        xllm_status st = gguf_open(path, &g, err);
        if (st) return st;
        text = g.tokenizer_config_json;
        g.tokenizer_config_json = NULL;
        gguf_close(&g);
        len = text ? strlen(text) : 0;
    } else {
        cJSON *meta;
        st_archive *a = xf_open(path, &meta, err);
        if (!a) return err ? err->code : XLLM_ERR_FORMAT;
        cJSON_Delete(meta);
        const st_tensor *b = st_find(a, XF_BLOB_PREFIX "tokenizer_config.json");
        if (b) {
            text = mem_strndup(b->data, b->nbytes);
            len = b->nbytes;
        }
        st_close(a);
    }
    if (!text) return XLLM_OK; /* no config: "no chat template" below */
    if (json_has_nul(text, len)) { /* the template (or a token) would be cut there */
        xllm_free(text);
        return err_setf(err, XLLM_ERR_FORMAT, "%s: tokenizer_config.json: a string holds a NUL character (\\u0000)",
                           path);
    }
    cJSON *cfg = cJSON_ParseWithLength(text, len);
    int oom = !cfg && json_well_formed(text, len); /* cJSON does not say which */
    xllm_free(text);
    if (oom) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory parsing tokenizer_config.json", path);
    if (!cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        return err_setf(err, XLLM_ERR_FORMAT, "%s: tokenizer_config.json inside is not a JSON object", path);
    }
    xllm_status st = read_config(t, path, cfg, err);
    cJSON_Delete(cfg);
    return st;
}

xllm_chat_template *xllm_chat_template_load(const char *path, xllm_error *err) {
    err_clear(err);
    if (!path) {
        err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "xllm_chat_template_load: path is NULL");
        return NULL;
    }
    char cfg_path[4096], jinja_path[4096];
    int is_dir = file_is_dir(path);
    if (is_dir) {
        path_join(cfg_path, sizeof cfg_path, path, "tokenizer_config.json");
        path_join(jinja_path, sizeof jinja_path, path, "chat_template.jinja");
    } else {
        snprintf(cfg_path, sizeof cfg_path, "%s", path);
        jinja_path[0] = 0;
    }
    xllm_chat_template *t = mem_calloc(1, sizeof *t);
    if (!t) {
        err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        return NULL;
    }
    if (!is_dir && (xf_is_xllm(path) || gguf_is_gguf(path))) {
        /* model files carry tokenizer_config.json (an .xllm blob, or synthesized from GGUF metadata) */
        if (model_file_template(t, path, err)) goto fail;
    } else if (path_exists(cfg_path)) {
        cJSON *cfg;
        if (json_file_load(cfg_path, &cfg, err)) goto fail;
        if (!cJSON_IsObject(cfg)) {
            cJSON_Delete(cfg);
            err_setf(err, XLLM_ERR_FORMAT, "%s: expected a JSON object", cfg_path);
            goto fail;
        }
        xllm_status st = read_config(t, cfg_path, cfg, err);
        cJSON_Delete(cfg);
        if (st) goto fail;
    } else if (!is_dir) {
        err_setf(err, XLLM_ERR_IO, "%s: no such file", path);
        goto fail;
    }
    if (t->n == 0 && jinja_path[0] && path_exists(jinja_path)) { /* newer HF checkpoints */
        char *src;
        size_t len;
        if (file_read_all(jinja_path, &src, &len, err)) goto fail;
        int rc = add_template(t, "default", src);
        xllm_free(src);
        if (rc) {
            err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
            goto fail;
        }
    }
    if (t->n == 0) {
        err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: no chat template (no \"chat_template\" in tokenizer_config.json%s)",
                    path, is_dir ? " and no chat_template.jinja" : "");
        goto fail;
    }
    return t;
fail:
    xllm_chat_template_free(t);
    return NULL;
}

static const named_template *find(const xllm_chat_template *t, const char *name) {
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->items[i].name, name)) return &t->items[i];
    return NULL;
}

const char *xllm_chat_template_source(const xllm_chat_template *t, const char *name) {
    if (!t) return NULL;
    const named_template *it = find(t, name ? name : "default");
    return it ? it->source : NULL;
}

const char *xllm_chat_template_special_token(const xllm_chat_template *t, const char *name) {
    if (!t || !name) return NULL;
    for (int k = 0; k < N_SPECIAL; k++)
        if (!strcmp(SPECIAL_NAMES[k], name)) return t->special[k];
    return NULL;
}

xllm_status xllm_chat_template_apply(const xllm_chat_template *t, const char *name, const char *messages_json,
                                     const char *options_json, char **out, size_t *out_len, xllm_error *err) {
    err_clear(err);
    if (!t || !messages_json || !out)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "xllm_chat_template_apply: NULL argument");
    *out = NULL;
    const named_template *it = NULL;
    if (name) {
        it = find(t, name);
        if (!it) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "no chat template named \"%s\"", name);
    } else {
        int has_tools = 0;
        if (options_json) {
            cJSON *o = cJSON_Parse(options_json);
            const cJSON *tools = o ? cJSON_GetObjectItemCaseSensitive(o, "tools") : NULL;
            has_tools = tools && !cJSON_IsNull(tools);
            cJSON_Delete(o);
        }
        if (has_tools) it = find(t, "tool_use");
        if (!it) it = find(t, "default");
        if (!it)
            return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                               "this model has several chat templates and none is named \"default\"; pick one by name");
    }
    if (!it->tpl) {
        if (err) *err = it->compile_err;
        return it->compile_err.code;
    }
    return tpl_render(it->tpl, messages_json, t->base_json, options_json, out, out_len, err);
}
