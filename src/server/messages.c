/*
 * messages.c - chat messages as OpenAI clients send them, made into what a
 * model's chat template expects, and rendered.
 *
 * Clients send what the templates of the model families were not written
 * for: an assistant turn with "content": null beside its tool_calls (a stock
 * Qwen3 template fails on it, others print "None"), tool-call arguments as a
 * JSON string (Llama 3.1 and Mistral templates apply tojson to them and
 * expect an object; DeepSeek-V3's concatenates them as text and tells a
 * tool-call turn by its null content: both read from the source), content as a list of parts, and the `developer` role,
 * which OpenAI treats as `system`. So each message is normalized: content a
 * string (text parts joined, null -> ""), arguments an object when they
 * parse as one, developer -> system when the template does not name the
 * role. The same normalization serves chat completions, /tokenize with
 * messages and the Responses API, so one conversation renders the same
 * everywhere. What the template can do (its tool-call format, whether it
 * thinks, whether it knows `developer`) is read from its source once, at load.
 */
#include "srv.h"
#include "tool_calls.h"

#include <stdlib.h>
#include <string.h>

#define BAD(e, param, ...) http_err(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

static const char *tmpl_source(const srv_model *m, const char *name) {
    return m->tmpl ? xllm_chat_template_source(m->tmpl, name) : name ? NULL : m->tmpl_src;
}

void chat_features_detect(srv_model *m) {
    const char *d = tmpl_source(m, NULL), *t = tmpl_source(m, "tool_use");
    m->tool_fmt = tool_format_detect(t ? t : d);
    m->thinks = template_thinks(d);
    m->knows_developer = d && strstr(d, "developer") != NULL;
    m->keeps_null_content = d && (strstr(d, "content'] is none") || strstr(d, "content is none"));
    m->args_as_text = d && (strstr(d, "['arguments'] +") || strstr(d, "arguments + ") || strstr(d, ".arguments +"));
}

/* The text of a message's content: a string, or an array of parts of which
 * the {"type": "text", "text": ...} ones are joined. */
static int content_text(const cJSON *c, sbuf *out, http_error *e) {
    if (cJSON_IsString(c)) { sb_puts(out, c->valuestring); return 0; }
    if (!cJSON_IsArray(c)) return BAD(e, "messages", "a message's 'content' must be a string or an array of parts");
    const cJSON *p;
    cJSON_ArrayForEach(p, c) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsObject(p) || !cJSON_IsString(t)) return BAD(e, "messages", "a content part must be an object with a 'type'");
        if (strcmp(t->valuestring, "text") && strcmp(t->valuestring, "input_text") && strcmp(t->valuestring, "output_text"))
            return BAD(e, "messages", "content parts of type '%.32s' are not supported", t->valuestring);
        if (!cJSON_IsString(x)) return BAD(e, "messages", "a text part needs a string 'text'");
        sb_puts(out, x->valuestring);
    }
    return 0;
}

/* tool_calls[i].function.arguments: a JSON string that holds an object becomes the object. */
static int normalize_tool_calls(cJSON *msg, int as_text, http_error *e) {
    cJSON *tc = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
    if (!tc || cJSON_IsNull(tc)) return 0;
    if (!cJSON_IsArray(tc)) return BAD(e, "messages", "'tool_calls' must be an array");
    cJSON *c;
    cJSON_ArrayForEach(c, tc) {
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsObject(c) || !cJSON_IsObject(fn) || !cJSON_IsString(name))
            return BAD(e, "messages", "a tool call needs 'function': {'name', 'arguments'}");
        cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (as_text) {
            if (!args) cJSON_AddStringToObject(fn, "arguments", "{}");
            else if (!cJSON_IsString(args)) {
                char *t = cJSON_PrintUnformatted(args);
                cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", cJSON_CreateString(t ? t : "{}"));
                free(t);
            }
        } else if (cJSON_IsString(args)) {
            cJSON *o = cJSON_Parse(args->valuestring);
            if (cJSON_IsObject(o)) cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", o);
            else cJSON_Delete(o);
        } else if (!args) {
            cJSON_AddItemToObject(fn, "arguments", cJSON_CreateObject());
        }
    }
    return 0;
}

int chat_messages_normalize(srv_model *m, const cJSON *msgs, pii_map *map, cJSON **out, sbuf *user_text,
                            http_error *e) {
    *out = NULL;
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
        return BAD(e, "messages", "'messages' must be a non-empty array");
    cJSON *arr = cJSON_CreateArray();
    const cJSON *msg;
    int st = 0;
    cJSON_ArrayForEach(msg, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        if (!cJSON_IsObject(msg) || !cJSON_IsString(role)) {
            st = BAD(e, "messages", "each message must be an object with a string 'role'");
            break;
        }
        const char *r = role->valuestring;
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool") &&
            strcmp(r, "developer")) {
            st = BAD(e, "messages", "unknown message role '%.32s'", r);
            break;
        }
        cJSON *copy = cJSON_Duplicate(msg, 1);
        cJSON_AddItemToArray(arr, copy);
        if (!strcmp(r, "developer") && !m->knows_developer)
            cJSON_ReplaceItemInObjectCaseSensitive(copy, "role", cJSON_CreateString("system"));
        if ((st = normalize_tool_calls(copy, m->args_as_text, e))) break;
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
        if (!c || cJSON_IsNull(c)) {
            if (strcmp(r, "assistant")) {
                st = BAD(e, "messages", "a '%s' message needs 'content'", r);
                break;
            }
            /* content null beside tool_calls: "" (templates iterate or print it), unless
             * the template tells tool-call turns by their null content */
            if (m->keeps_null_content) {
                if (!c) cJSON_AddNullToObject(copy, "content");
                continue;
            }
            if (c) cJSON_ReplaceItemInObjectCaseSensitive(copy, "content", cJSON_CreateString(""));
            else cJSON_AddStringToObject(copy, "content", "");
            continue;
        }
        sbuf t = {0};
        if ((st = content_text(c, &t, e))) { sb_free(&t); break; }
        if (!strcmp(r, "user") && user_text) { user_text->len = 0; sb_put(user_text, t.p ? t.p : "", t.len); }
        if (m->pii && map) {
            sbuf masked = {0};
            atomic_fetch_add(&m->pii_masked, pii_mask(m->pii, map, t.p ? t.p : "", t.len, &masked));
            sb_free(&t);
            t = masked;
        }
        cJSON_ReplaceItemInObjectCaseSensitive(copy, "content", cJSON_CreateString(t.p ? t.p : ""));
        sb_free(&t);
    }
    if (st) { cJSON_Delete(arr); return st; }
    *out = arr;
    return 0;
}

int chat_kwargs_check(const cJSON *kw, http_error *e) {
    if (!kw || cJSON_IsNull(kw)) return 0;
    if (!cJSON_IsObject(kw)) return BAD(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    char *s = cJSON_PrintUnformatted(kw);
    size_t n = s ? strlen(s) : 0;
    free(s);
    if (n > 65536) return BAD(e, "chat_template_kwargs", "'chat_template_kwargs' is over 64 KiB");
    return 0;
}

int render_request_messages(srv_model *m, const cJSON *body, char **out, http_error *e) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(body, "tools");
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(body, "chat_template_kwargs");
    int st;
    if (tools && !cJSON_IsNull(tools) && (st = tools_validate(tools, e))) return st;
    if ((st = chat_kwargs_check(kw, e))) return st;
    cJSON *norm = NULL;
    if ((st = chat_messages_normalize(m, msgs, NULL, &norm, NULL, e))) return st;
    st = render_chat(m, norm, cJSON_IsArray(tools) ? tools : NULL, kw, out, e);
    cJSON_Delete(norm);
    return st;
}
