/*
 * chat_cli.c - `xllm template` and the chat-template options of `xllm run
 * --chat` (see chat_cli.h). Options become one JSON object of template
 * variables for xllm_chat_template_apply: {"add_generation_prompt": true,
 * "tools": <file>, NAME: <json>...}.
 */
#include "chat_cli.h"
#include "cli.h"
#include "read_text.h"
#include "xllm.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *fmt, const char *a) { return cli_fail(fmt, a); }

/* Whole file (or stdin for "-"), NUL-terminated; NULL when it cannot be read. */
static char *read_all(const char *path, size_t *len) {
    char *text;
    const char *why;
    int errnum;
    return read_text_file(path, &text, len, &why, &errnum) ? NULL : text;
}

int chat_opts_parse(chat_opts *o, int argc, char **argv, int *i) {
    const char *f = argv[*i];
    const char **dst = NULL;
    if (!strcmp(f, "--messages")) dst = &o->messages_file;
    else if (!strcmp(f, "--tools")) dst = &o->tools_file;
    else if (!strcmp(f, "--template")) dst = &o->template_name;
    else if (!strcmp(f, "--chat-template")) dst = &o->template_file;
    else if (!strcmp(f, "--add-generation-prompt")) { o->add_generation_prompt = 1; return 1; }
    else if (!strcmp(f, "--var")) {
        if (*i + 1 >= argc) { fail("%s needs a value", f); return -1; }
        const char *v = argv[++*i];
        const char *eq = strchr(v, '=');
        if (!eq || eq == v) { fail("--var wants NAME=JSON, got \"%s\"", v); return -1; }
        if (o->n_vars >= (int)(sizeof o->vars / sizeof *o->vars)) { fail("%s", "too many --var options"); return -1; }
        o->vars[o->n_vars++] = v;
        return 1;
    } else return 0;
    if (*i + 1 >= argc) { fail("%s needs a value", f); return -1; }
    *dst = argv[++*i];
    return 1;
}

/* The options object; malloc-ed. Every value is parsed as exactly one JSON
 * value and written back from the parsed tree, so a --var value or a tools
 * file is data: it cannot close the object and add options of its own
 * (`--var 'x=1, "add_generation_prompt": false'` is refused). A --var
 * naming an option another flag set, or given twice, replaces it (the last
 * one wins); "messages" is not a variable (--messages gives them). */
static char *build_options(const chat_opts *o, int *rc) {
    *rc = 1;
    cJSON *obj = cJSON_CreateObject();
    if (!obj) { fail("%s", "out of memory"); return NULL; }
    if (o->add_generation_prompt && !cJSON_AddBoolToObject(obj, "add_generation_prompt", 1)) goto oom;
    if (o->tools_file) {
        char *text = read_all(o->tools_file, NULL);
        if (!text) {
            cJSON_Delete(obj);
            fail("cannot read %s", o->tools_file);
            return NULL;
        }
        cJSON *tools = cJSON_ParseWithOpts(text, NULL, 1);
        free(text);
        if (!tools || !cJSON_IsArray(tools)) {
            cJSON_Delete(tools);
            cJSON_Delete(obj);
            fail("%s: the tools must be one JSON array", o->tools_file);
            return NULL;
        }
        cJSON_AddItemToObject(obj, "tools", tools);
    }
    for (int k = 0; k < o->n_vars; k++) {
        const char *eq = strchr(o->vars[k], '=');
        char name[256];
        size_t nl = (size_t)(eq - o->vars[k]);
        if (nl >= sizeof name) {
            cJSON_Delete(obj);
            fail("--var: the name in \"%.64s...\" is too long", o->vars[k]);
            return NULL;
        }
        memcpy(name, o->vars[k], nl);
        name[nl] = 0;
        if (!strcmp(name, "messages")) {
            cJSON_Delete(obj);
            fail("%s", "--var messages=...: the messages come from -p or --messages FILE, not a variable");
            return NULL;
        }
        cJSON *val = cJSON_ParseWithOpts(eq + 1, NULL, 1);
        if (!val) {
            cJSON_Delete(obj);
            fail("--var %s: the value after '=' must be one JSON value (a string in quotes: NAME='\"text\"')",
                 o->vars[k]);
            return NULL;
        }
        if (cJSON_GetObjectItemCaseSensitive(obj, name)) cJSON_ReplaceItemInObjectCaseSensitive(obj, name, val);
        else if (!cJSON_AddItemToObject(obj, name, val)) { cJSON_Delete(val); goto oom; }
    }
    char *printed = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!printed) { fail("%s", "out of memory"); return NULL; }
    char *buf = strdup(printed);
    cJSON_free(printed);
    if (!buf) { fail("%s", "out of memory"); return NULL; }
    *rc = 0;
    return buf;
oom:
    cJSON_Delete(obj);
    fail("%s", "out of memory");
    return NULL;
}

int chat_render(const chat_opts *o, const char *model_path, const char *messages_json, char **out, size_t *out_len) {
    int rc;
    char *msgs = NULL;
    if (!messages_json) {
        if (!o->messages_file) return fail("%s", "give --messages FILE.json (a JSON array of messages)");
        msgs = read_all(o->messages_file, NULL);
        if (!msgs) return fail("cannot read %s", o->messages_file);
        messages_json = msgs;
    }
    char *options = build_options(o, &rc);
    if (rc) { free(msgs); return 1; }
    xllm_error err;
    char *text = NULL;
    size_t len = 0;
    xllm_status st;
    if (o->template_file) {
        char *src = read_all(o->template_file, NULL);
        if (!src) {
            free(msgs);
            free(options);
            return fail("cannot read %s", o->template_file);
        }
        st = xllm_chat_template_render(src, messages_json, options, &text, &len, &err);
        free(src);
    } else {
        if (!model_path) {
            free(msgs);
            free(options);
            return fail("%s", "give -m PATH (a model or tokenizer directory) or --chat-template FILE");
        }
        xllm_chat_template *t = xllm_chat_template_load(model_path, &err);
        st = t ? xllm_chat_template_apply(t, o->template_name, messages_json, options, &text, &len, &err) : err.code;
        xllm_chat_template_free(t);
    }
    free(msgs);
    free(options);
    if (st) return fail("%s", err.message);
    *out = malloc(len + 1);
    if (!*out) {
        xllm_free(text);
        return fail("%s", "out of memory");
    }
    memcpy(*out, text, len + 1);
    *out_len = len;
    xllm_free(text);
    return 0;
}

int cmd_template(int argc, char **argv) {
    chat_opts o;
    memset(&o, 0, sizeof o);
    const char *model_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        int r = chat_opts_parse(&o, argc, argv, &i);
        if (r < 0) return 1;
        if (r) continue;
        if (!strcmp(f, "-m") || !strcmp(f, "--model")) {
            if (i + 1 >= argc) return fail("%s needs a value", f);
            model_path = argv[++i];
        } else if (cli_is_help(f)) {
            cli_print_help(stdout, "template");
            return 0;
        } else {
            return cli_unknown_option("template", f);
        }
    }
    char *text;
    size_t len;
    if (chat_render(&o, model_path, NULL, &text, &len)) return 1;
    int rc = fwrite(text, 1, len, stdout) == len && fflush(stdout) == 0 ? 0 : fail("%s", "cannot write the output");
    free(text);
    return rc;
}
