/*
 * responses.c - POST /v1/responses (OpenAI's Responses API) and GET
 * /v1/responses/{id}.
 *
 * The idea: a Responses request is a chat request in other clothes, so it is
 * translated and run as one. The input (a string, or items: messages with
 * text parts, function_call, function_call_output, item_reference; reasoning
 * items are dropped), instructions (a system message in front, not carried
 * into later turns), flat function tools, tool_choice and text.format become
 * a chat body that request.c parses and run.c runs as a stream. The chat
 * chunks that come back are translated into Responses events in OpenAI's
 * order (response.created, response.in_progress, then per output item:
 * output_item.added, content_part.added / reasoning_summary_part.added,
 * the text or argument deltas, their .done events, output_item.done; and
 * response.completed or response.incomplete), each with its sequence
 * number. The thinking is a reasoning item whose text is both its summary
 * (what the AI SDK reads) and its reasoning_text content (what the openai
 * client's stream helper reads), with both kinds of events. A non-streamed request runs the same translation without writing
 * events and answers the final response object, so both always agree.
 *
 * Stored responses (store, on by default as in OpenAI): the conversation so
 * far (messages, with this turn's output as assistant messages) and the
 * response object are kept in a bounded in-memory store (RSP_MAX_ENTRIES
 * responses, RSP_MAX_BYTES in all; the oldest go first). previous_response_id
 * continues a stored conversation; an id that was never stored or was evicted
 * is a 404 naming it, and so is an item_reference to an item no stored
 * response holds.
 */
#include "srv.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RSP_MAX_ENTRIES 256
#define RSP_MAX_BYTES ((size_t)32 << 20)
#define RSP_MAX_ITEMS 4096

#define BAD(e, param, ...) http_err(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

/* ------------------------------------------------------------------ store */

typedef struct rsp_entry {
    char id[64];
    char *response;      /* the response object's JSON */
    cJSON *history;      /* chat messages: the conversation including this response's output */
    cJSON *items;        /* its output items (for item_reference) */
    size_t bytes;
} rsp_entry;

static pthread_mutex_t g_store_mu = PTHREAD_MUTEX_INITIALIZER;
static rsp_entry g_store[RSP_MAX_ENTRIES];
static int g_store_head, g_store_n; /* a ring, oldest at head */
static size_t g_store_bytes;

static void entry_clear(rsp_entry *e) {
    free(e->response);
    cJSON_Delete(e->history);
    cJSON_Delete(e->items);
    g_store_bytes -= e->bytes;
    memset(e, 0, sizeof *e);
}

static void store_put(const char *id, char *response, cJSON *history, cJSON *items) {
    char *h = cJSON_PrintUnformatted(history);
    size_t bytes = strlen(response) + (h ? strlen(h) : 0) * 2;
    free(h);
    if (bytes > RSP_MAX_BYTES) { /* too big to keep at all (a later previous_response_id gets the 404) */
        free(response);
        cJSON_Delete(history);
        cJSON_Delete(items);
        return;
    }
    pthread_mutex_lock(&g_store_mu);
    while (g_store_n && (g_store_n == RSP_MAX_ENTRIES || g_store_bytes + bytes > RSP_MAX_BYTES)) {
        entry_clear(&g_store[g_store_head]);
        g_store_head = (g_store_head + 1) % RSP_MAX_ENTRIES;
        g_store_n--;
    }
    rsp_entry *e = &g_store[(g_store_head + g_store_n) % RSP_MAX_ENTRIES];
    snprintf(e->id, sizeof e->id, "%s", id);
    e->response = response;
    e->history = history;
    e->items = items;
    e->bytes = bytes;
    g_store_bytes += bytes;
    g_store_n++;
    pthread_mutex_unlock(&g_store_mu);
}

/* Stored entries by id (the store lock held); copies of their parts below (NULL: not stored). */
static rsp_entry *store_find_locked(const char *id) {
    for (int i = 0; i < g_store_n; i++) {
        rsp_entry *e = &g_store[(g_store_head + i) % RSP_MAX_ENTRIES];
        if (!strcmp(e->id, id)) return e;
    }
    return NULL;
}

static cJSON *store_history(const char *id) {
    pthread_mutex_lock(&g_store_mu);
    rsp_entry *e = store_find_locked(id);
    cJSON *h = e ? cJSON_Duplicate(e->history, 1) : NULL;
    pthread_mutex_unlock(&g_store_mu);
    return h;
}

static char *store_response(const char *id) {
    pthread_mutex_lock(&g_store_mu);
    rsp_entry *e = store_find_locked(id);
    char *r = e ? strdup(e->response) : NULL;
    pthread_mutex_unlock(&g_store_mu);
    return r;
}

static cJSON *store_item(const char *item_id) {
    cJSON *r = NULL;
    pthread_mutex_lock(&g_store_mu);
    for (int i = g_store_n - 1; i >= 0 && !r; i--) {
        const cJSON *it;
        cJSON_ArrayForEach(it, g_store[(g_store_head + i) % RSP_MAX_ENTRIES].items) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
            if (cJSON_IsString(id) && !strcmp(id->valuestring, item_id)) { r = cJSON_Duplicate(it, 1); break; }
        }
    }
    pthread_mutex_unlock(&g_store_mu);
    return r;
}

/* ------------------------------------------------------- request -> chat */

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The text of an item's content: a string or parts (input_text / output_text / text). */
static int item_text(const cJSON *c, sbuf *out, http_error *e) {
    if (cJSON_IsString(c)) { sb_puts(out, c->valuestring); return 0; }
    if (!cJSON_IsArray(c)) return BAD(e, "input", "a message's 'content' must be a string or a list of parts");
    const cJSON *p;
    cJSON_ArrayForEach(p, c) {
        const char *t = str(p, "type"), *x = str(p, "text");
        if (!t || (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text") && strcmp(t, "refusal")))
            return BAD(e, "input", "content parts of type '%.32s' are not supported", t ? t : "?");
        if (!strcmp(t, "refusal")) x = str(p, "refusal");
        if (!x) return BAD(e, "input", "a text part needs a string 'text'");
        sb_puts(out, x);
    }
    return 0;
}

/* Append a tool call to the last assistant message (or a new one). */
static void add_call(cJSON *msgs, const char *call_id, const char *name, const char *args) {
    cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
    const char *role = str(last, "role");
    cJSON *tcs = last ? cJSON_GetObjectItemCaseSensitive(last, "tool_calls") : NULL;
    if (!role || strcmp(role, "assistant") || !cJSON_IsArray(tcs)) {
        if (role && !strcmp(role, "assistant") && !tcs) {
            tcs = cJSON_AddArrayToObject(last, "tool_calls");
        } else {
            last = cJSON_CreateObject();
            cJSON_AddStringToObject(last, "role", "assistant");
            cJSON_AddNullToObject(last, "content");
            tcs = cJSON_AddArrayToObject(last, "tool_calls");
            cJSON_AddItemToArray(msgs, last);
        }
    }
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "id", call_id);
    cJSON_AddStringToObject(c, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(c, "function");
    cJSON_AddStringToObject(f, "name", name);
    cJSON_AddStringToObject(f, "arguments", args);
    cJSON_AddItemToArray(tcs, c);
}

static void add_msg(cJSON *msgs, const char *role, const char *text) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", text);
    cJSON_AddItemToArray(msgs, m);
}

static int add_item(cJSON *msgs, const cJSON *it, int depth, http_error *e);

/* One input item into chat messages. */
static int add_item(cJSON *msgs, const cJSON *it, int depth, http_error *e) {
    if (!cJSON_IsObject(it)) return BAD(e, "input", "each input item must be an object");
    const char *type = str(it, "type");
    const char *role = str(it, "role");
    if (!type || !strcmp(type, "message")) {
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") && strcmp(role, "developer")))
            return BAD(e, "input", "a message item needs a role: user, assistant, system or developer");
        sbuf t = {0};
        int st = item_text(cJSON_GetObjectItemCaseSensitive(it, "content"), &t, e);
        if (!st) add_msg(msgs, role, t.p ? t.p : "");
        sb_free(&t);
        return st;
    }
    if (!strcmp(type, "function_call")) {
        const char *id = str(it, "call_id"), *name = str(it, "name"), *args = str(it, "arguments");
        if (!id || !name || !args) return BAD(e, "input", "a function_call item needs call_id, name and arguments");
        add_call(msgs, id, name, args);
        return 0;
    }
    if (!strcmp(type, "function_call_output")) {
        const char *id = str(it, "call_id");
        const cJSON *out = cJSON_GetObjectItemCaseSensitive(it, "output");
        if (!id || !out) return BAD(e, "input", "a function_call_output item needs call_id and output");
        sbuf t = {0};
        int st = item_text(out, &t, e);
        if (!st) {
            cJSON *m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", "tool");
            cJSON_AddStringToObject(m, "tool_call_id", id);
            cJSON_AddStringToObject(m, "content", t.p ? t.p : "");
            cJSON_AddItemToArray(msgs, m);
        }
        sb_free(&t);
        return st;
    }
    if (!strcmp(type, "reasoning")) return 0; /* the model's past thinking is not replayed */
    if (!strcmp(type, "item_reference")) {
        const char *id = str(it, "id");
        if (!id || depth) return BAD(e, "input", "an item_reference needs an 'id'");
        cJSON *ref = store_item(id);
        if (!ref)
            return http_err(e, 404, "invalid_request_error", "input", "item_not_found",
                            "Item with id '%.100s' not found (never stored, or evicted from the store).", id);
        int st = add_item(msgs, ref, 1, e);
        cJSON_Delete(ref);
        return st;
    }
    return BAD(e, "input", "input items of type '%.40s' are not supported", type);
}

/* tools: [{type: "function", name, description?, parameters?, strict?}] -> chat tools */
static int convert_tools(const cJSON *tools, cJSON *chat, http_error *e) {
    if (!tools || cJSON_IsNull(tools)) return 0;
    if (!cJSON_IsArray(tools)) return BAD(e, "tools", "'tools' must be an array");
    cJSON *out = cJSON_AddArrayToObject(chat, "tools");
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const char *type = str(t, "type");
        if (!type || strcmp(type, "function"))
            return BAD(e, "tools", "tools of type '%.40s' are not supported (only function tools)", type ? type : "?");
        const char *name = str(t, "name");
        if (!name) return BAD(e, "tools", "a function tool needs a 'name'");
        cJSON *ct = cJSON_CreateObject();
        cJSON_AddStringToObject(ct, "type", "function");
        cJSON *fn = cJSON_AddObjectToObject(ct, "function");
        cJSON_AddStringToObject(fn, "name", name);
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(t, "description");
        if (cJSON_IsString(d)) cJSON_AddStringToObject(fn, "description", d->valuestring);
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(t, "parameters");
        if (cJSON_IsObject(p)) cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(p, 1));
        cJSON_AddItemToArray(out, ct);
    }
    return 0;
}

static int convert_tool_choice(const cJSON *tc, cJSON *chat, http_error *e) {
    if (!tc || cJSON_IsNull(tc)) return 0;
    if (cJSON_IsString(tc)) {
        cJSON_AddStringToObject(chat, "tool_choice", tc->valuestring);
        return 0;
    }
    const char *type = str(tc, "type"), *name = str(tc, "name");
    if (cJSON_IsObject(tc) && type && !strcmp(type, "function") && name) {
        cJSON *o = cJSON_AddObjectToObject(chat, "tool_choice");
        cJSON_AddStringToObject(o, "type", "function");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "function"), "name", name);
        return 0;
    }
    return BAD(e, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}");
}

/* text.format -> response_format */
static int convert_format(const cJSON *text, cJSON *chat, http_error *e) {
    if (!text || cJSON_IsNull(text)) return 0;
    if (!cJSON_IsObject(text)) return BAD(e, "text", "'text' must be an object");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(text, "format");
    if (!f || cJSON_IsNull(f)) return 0;
    const char *type = str(f, "type");
    if (!type) return BAD(e, "text.format", "'text.format' needs a 'type'");
    if (!strcmp(type, "text")) return 0;
    cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
    cJSON_AddStringToObject(rf, "type", type);
    if (!strcmp(type, "json_schema")) {
        cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
        const char *keys[] = {"name", "schema", "strict", "description"};
        for (int i = 0; i < 4; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(f, keys[i]);
            if (v) cJSON_AddItemToObject(js, keys[i], cJSON_Duplicate(v, 1));
        }
    }
    return 0; /* the chat parser accepts or refuses the type */
}

/* ------------------------------------------------------------ the run */

enum { IT_NONE, IT_REASONING, IT_MESSAGE, IT_CALL };

typedef struct rsp_state {
    srv_state *s;
    srv_req req;
    int has_req;
    run *run;
    int stream, store;
    char id[64];
    long created;
    cJSON *echo;          /* the request fields echoed in the response object */
    cJSON *history;       /* the conversation for the store (without instructions) */
    cJSON *output;        /* output items so far */
    int cur;              /* the open item's kind */
    char cur_id[64];
    sbuf cur_text, cur_args;
    char call_id[64], call_name[260];
    int chat_call;        /* the chat tool-call index of the open call */
    long seq;             /* sequence_number */
    sbuf *ev;             /* events go here (streaming) */
    int started, ended, failed, gone;
    char fail_msg[512];
    const char *finish;
    long in_tokens, out_tokens;
} rsp_state;

static void emit(rsp_state *r, const char *type, cJSON *o) {
    if (!r->stream || !r->ev) { cJSON_Delete(o); return; }
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", type);
    cJSON_AddNumberToObject(ev, "sequence_number", (double)r->seq++);
    cJSON *c = o ? o->child : NULL;
    while (c) {
        cJSON *next = c->next;
        cJSON_AddItemToObject(ev, c->string, cJSON_DetachItemViaPointer(o, c));
        c = next;
    }
    cJSON_Delete(o);
    char *j = cJSON_PrintUnformatted(ev);
    cJSON_Delete(ev);
    sb_printf(r->ev, "event: %s\ndata: ", type);
    sb_puts(r->ev, j ? j : "{}");
    sb_puts(r->ev, "\n\n");
    free(j);
}

static cJSON *usage_obj(const rsp_state *r) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", (double)r->in_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens", 0);
    cJSON_AddNumberToObject(u, "output_tokens", (double)r->out_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens", 0);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(r->in_tokens + r->out_tokens));
    return u;
}

/* The response object as it stands (status: in_progress, completed, incomplete, failed). */
static cJSON *response_obj(const rsp_state *r, const char *status) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)r->created);
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddNullToObject(o, "error");
    if (!strcmp(status, "incomplete")) {
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason", "max_output_tokens");
    } else {
        cJSON_AddNullToObject(o, "incomplete_details");
    }
    for (cJSON *c = r->echo ? r->echo->child : NULL; c; c = c->next)
        cJSON_AddItemToObject(o, c->string, cJSON_Duplicate(c, 1));
    cJSON_AddItemToObject(o, "output", cJSON_Duplicate(r->output, 1));
    if (strcmp(status, "in_progress")) cJSON_AddItemToObject(o, "usage", usage_obj(r));
    else cJSON_AddNullToObject(o, "usage");
    return o;
}

static cJSON *ev_obj(const rsp_state *r, int with_index) {
    cJSON *o = cJSON_CreateObject();
    if (r->cur != IT_NONE) cJSON_AddStringToObject(o, "item_id", r->cur_id);
    if (with_index) cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(r->output));
    return o;
}

/* The open item as it is now (status in_progress or completed). */
static cJSON *cur_item(const rsp_state *r, int done) {
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "id", r->cur_id);
    const char *txt = r->cur_text.p ? r->cur_text.p : "";
    if (r->cur == IT_REASONING) {
        cJSON_AddStringToObject(it, "type", "reasoning");
        cJSON *sum = cJSON_AddArrayToObject(it, "summary");
        cJSON *content = cJSON_AddArrayToObject(it, "content");
        if (done) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "type", "summary_text");
            cJSON_AddStringToObject(p, "text", txt);
            cJSON_AddItemToArray(sum, p);
            p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "type", "reasoning_text");
            cJSON_AddStringToObject(p, "text", txt);
            cJSON_AddItemToArray(content, p);
        }
    } else if (r->cur == IT_MESSAGE) {
        cJSON_AddStringToObject(it, "type", "message");
        cJSON_AddStringToObject(it, "status", done ? "completed" : "in_progress");
        cJSON_AddStringToObject(it, "role", "assistant");
        cJSON *content = cJSON_AddArrayToObject(it, "content");
        if (done) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "type", "output_text");
            cJSON_AddStringToObject(p, "text", txt);
            cJSON_AddArrayToObject(p, "annotations");
            cJSON_AddArrayToObject(p, "logprobs");
            cJSON_AddItemToArray(content, p);
        }
    } else {
        cJSON_AddStringToObject(it, "type", "function_call");
        cJSON_AddStringToObject(it, "status", done ? "completed" : "in_progress");
        cJSON_AddStringToObject(it, "call_id", r->call_id);
        cJSON_AddStringToObject(it, "name", r->call_name);
        cJSON_AddStringToObject(it, "arguments", done && r->cur_args.p ? r->cur_args.p : "");
    }
    return it;
}

static cJSON *text_part(const char *text) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "output_text");
    cJSON_AddStringToObject(p, "text", text);
    cJSON_AddArrayToObject(p, "annotations");
    return p;
}

static cJSON *summary_part(const char *text) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "summary_text");
    cJSON_AddStringToObject(p, "text", text);
    return p;
}

static cJSON *reasoning_part(const char *text) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "reasoning_text");
    cJSON_AddStringToObject(p, "text", text);
    return p;
}

static void close_item(rsp_state *r) {
    if (r->cur == IT_NONE) return;
    /* NUL-terminate the texts (sbuf does not) */
    sb_put(&r->cur_text, "", 1), r->cur_text.len--;
    sb_put(&r->cur_args, "", 1), r->cur_args.len--;
    const char *txt = r->cur_text.p ? r->cur_text.p : "";
    cJSON *o;
    if (r->cur == IT_REASONING) {
        o = ev_obj(r, 1);
        cJSON_AddNumberToObject(o, "summary_index", 0);
        cJSON_AddStringToObject(o, "text", txt);
        emit(r, "response.reasoning_summary_text.done", o);
        o = ev_obj(r, 1);
        cJSON_AddNumberToObject(o, "summary_index", 0);
        cJSON_AddItemToObject(o, "part", summary_part(txt));
        emit(r, "response.reasoning_summary_part.done", o);
        o = ev_obj(r, 1);
        cJSON_AddNumberToObject(o, "content_index", 0);
        cJSON_AddStringToObject(o, "text", txt);
        emit(r, "response.reasoning_text.done", o);
        o = ev_obj(r, 1);
        cJSON_AddNumberToObject(o, "content_index", 0);
        cJSON_AddItemToObject(o, "part", reasoning_part(txt));
        emit(r, "response.content_part.done", o);
    } else if (r->cur == IT_MESSAGE) {
        o = ev_obj(r, 1);
        cJSON_AddNumberToObject(o, "content_index", 0);
        cJSON_AddStringToObject(o, "text", txt);
        cJSON_AddArrayToObject(o, "logprobs");
        emit(r, "response.output_text.done", o);
        o = ev_obj(r, 1);
        cJSON_AddNumberToObject(o, "content_index", 0);
        cJSON_AddItemToObject(o, "part", text_part(txt));
        emit(r, "response.content_part.done", o);
    } else {
        o = ev_obj(r, 1);
        cJSON_AddStringToObject(o, "arguments", r->cur_args.p ? r->cur_args.p : "");
        emit(r, "response.function_call_arguments.done", o);
    }
    cJSON *item = cur_item(r, 1);
    o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(r->output));
    cJSON_AddItemToObject(o, "item", cJSON_Duplicate(item, 1));
    emit(r, "response.output_item.done", o);
    cJSON_AddItemToArray(r->output, item);
    r->cur = IT_NONE;
    r->cur_text.len = r->cur_args.len = 0;
}

static void open_item(rsp_state *r, int kind) {
    close_item(r);
    r->cur = kind;
    make_id(r->cur_id, sizeof r->cur_id, kind == IT_REASONING ? "rs_" : kind == IT_MESSAGE ? "msg_" : "fc_");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(r->output));
    cJSON_AddItemToObject(o, "item", cur_item(r, 0));
    emit(r, "response.output_item.added", o);
    if (kind == IT_REASONING) {
        o = ev_obj(r, 1);
        cJSON_AddNumberToObject(o, "summary_index", 0);
        cJSON_AddItemToObject(o, "part", summary_part(""));
        emit(r, "response.reasoning_summary_part.added", o);
        o = ev_obj(r, 1);
        cJSON_AddNumberToObject(o, "content_index", 0);
        cJSON_AddItemToObject(o, "part", reasoning_part(""));
        emit(r, "response.content_part.added", o);
    } else if (kind == IT_MESSAGE) {
        o = ev_obj(r, 1);
        cJSON_AddNumberToObject(o, "content_index", 0);
        cJSON_AddItemToObject(o, "part", text_part(""));
        emit(r, "response.content_part.added", o);
    }
}

static void on_text(rsp_state *r, int kind, const char *t) {
    if (!t[0]) return;
    if (r->cur != kind) open_item(r, kind);
    sb_puts(&r->cur_text, t);
    cJSON *o = ev_obj(r, 1);
    if (kind == IT_REASONING) {
        cJSON_AddNumberToObject(o, "summary_index", 0);
        cJSON_AddStringToObject(o, "delta", t);
        emit(r, "response.reasoning_summary_text.delta", o);
        o = ev_obj(r, 1); /* the same text as reasoning content (clients read one or the other) */
        cJSON_AddNumberToObject(o, "content_index", 0);
        cJSON_AddStringToObject(o, "delta", t);
        emit(r, "response.reasoning_text.delta", o);
    } else {
        cJSON_AddNumberToObject(o, "content_index", 0);
        cJSON_AddStringToObject(o, "delta", t);
        cJSON_AddArrayToObject(o, "logprobs");
        emit(r, "response.output_text.delta", o);
    }
}

static void on_call(rsp_state *r, const cJSON *tc) {
    const cJSON *idx = cJSON_GetObjectItemCaseSensitive(tc, "index");
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
    const char *id = str(tc, "id"), *name = str(fn, "name"), *args = str(fn, "arguments");
    int i = cJSON_IsNumber(idx) ? idx->valueint : 0;
    if (id && name && (r->cur != IT_CALL || r->chat_call != i)) {
        close_item(r);
        snprintf(r->call_id, sizeof r->call_id, "%s", id);
        snprintf(r->call_name, sizeof r->call_name, "%s", name);
        r->chat_call = i;
        open_item(r, IT_CALL);
    }
    if (r->cur == IT_CALL && args && args[0]) {
        sb_puts(&r->cur_args, args);
        cJSON *o = ev_obj(r, 1);
        cJSON_AddStringToObject(o, "delta", args);
        emit(r, "response.function_call_arguments.delta", o);
    }
}

/* One chat chunk (an SSE data line's JSON). */
static void on_chunk(rsp_state *r, const char *json) {
    cJSON *o = cJSON_Parse(json);
    if (!o) return;
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(o, "error");
    if (err) {
        r->failed = 1;
        snprintf(r->fail_msg, sizeof r->fail_msg, "%s", str(err, "message") ? str(err, "message") : "generation failed");
    }
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(o, "usage");
    if (cJSON_IsObject(u)) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens"), *c = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
        if (cJSON_IsNumber(p)) r->in_tokens = (long)p->valuedouble;
        if (cJSON_IsNumber(c)) r->out_tokens = (long)c->valuedouble;
    }
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(ch, "delta");
    if (d) {
        const char *rc = str(d, "reasoning_content"), *c = str(d, "content");
        if (rc) on_text(r, IT_REASONING, rc);
        if (c) on_text(r, IT_MESSAGE, c);
        const cJSON *tc;
        cJSON_ArrayForEach(tc, cJSON_GetObjectItemCaseSensitive(d, "tool_calls")) on_call(r, tc);
    }
    const char *fr = str(ch, "finish_reason");
    if (fr) r->finish = !strcmp(fr, "length") ? "length" : !strcmp(fr, "abort") ? "abort" : "stop";
    cJSON_Delete(o);
}

/* This turn's output as chat messages, appended to the history. */
static void history_add_output(rsp_state *r) {
    const cJSON *it;
    cJSON_ArrayForEach(it, r->output) {
        const char *type = str(it, "type");
        if (!strcmp(type, "message")) {
            const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(it, "content"), 0);
            add_msg(r->history, "assistant", str(p, "text") ? str(p, "text") : "");
        } else if (!strcmp(type, "function_call")) {
            add_call(r->history, str(it, "call_id"), str(it, "name"), str(it, "arguments"));
        }
    }
}

static void finish(rsp_state *r) {
    close_item(r);
    const char *status = r->failed ? "failed" : r->finish && !strcmp(r->finish, "length") ? "incomplete" : "completed";
    cJSON *resp = response_obj(r, status);
    if (r->failed) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "code", "server_error");
        cJSON_AddStringToObject(e, "message", r->fail_msg);
        cJSON_ReplaceItemInObjectCaseSensitive(resp, "error", e);
    }
    if (r->store && !r->failed) {
        history_add_output(r);
        store_put(r->id, cJSON_PrintUnformatted(resp), r->history, cJSON_Duplicate(r->output, 1));
        r->history = NULL;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", resp);
    emit(r, r->failed ? "response.failed" : !strcmp(status, "incomplete") ? "response.incomplete" : "response.completed", o);
    r->ended = 1;
}

/* Run the chat stream until it has produced something (or ended). Returns 0 at the end, -1 when the client left. */
static int pump(rsp_state *r) {
    sbuf chunk = {0};
    int st = run_next_sse(r->run, &chunk);
    if (st < 0) { sb_free(&chunk); r->gone = 1; return -1; }
    size_t i = 0;
    int done = 0;
    while (i < chunk.len) {
        char *line = chunk.p + i;
        char *end = memchr(line, '\n', chunk.len - i);
        size_t l = end ? (size_t)(end - line) : chunk.len - i;
        i += l + 1;
        if (l < 6 || memcmp(line, "data: ", 6)) continue;
        if (l == 12 && !memcmp(line + 6, "[DONE]", 6)) { done = 1; continue; }
        line[l] = 0;
        on_chunk(r, line + 6);
    }
    sb_free(&chunk);
    if (done || st == 0) { finish(r); return 0; }
    return 1;
}

static void rsp_free(void *p) {
    rsp_state *r = p;
    if (!r) return;
    run_free(r->run);
    if (r->has_req) srv_req_free(&r->req);
    cJSON_Delete(r->echo);
    cJSON_Delete(r->history);
    cJSON_Delete(r->output);
    sb_free(&r->cur_text);
    sb_free(&r->cur_args);
    free(r);
}

static int rsp_next(void *p, sbuf *out) {
    rsp_state *r = p;
    r->ev = out;
    if (!r->started) {
        r->started = 1;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "response", response_obj(r, "in_progress"));
        emit(r, "response.created", o);
        o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "response", response_obj(r, "in_progress"));
        emit(r, "response.in_progress", o);
        return 1;
    }
    while (!r->ended) {
        int st = pump(r);
        if (st < 0) return -1;
        if (out->len) return 1;
    }
    return 0;
}

/* Fields echoed in the response object. */
static cJSON *echo_fields(const cJSON *o, const char *model, int store) {
    cJSON *e = cJSON_CreateObject();
    static const char *copy[] = {"instructions", "max_output_tokens", "previous_response_id", "metadata", "user", "tools"};
    for (size_t i = 0; i < sizeof copy / sizeof *copy; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, copy[i]);
        if (v && !cJSON_IsNull(v)) cJSON_AddItemToObject(e, copy[i], cJSON_Duplicate(v, 1));
        else if (!strcmp(copy[i], "tools")) cJSON_AddArrayToObject(e, "tools");
        else if (!strcmp(copy[i], "metadata")) cJSON_AddObjectToObject(e, "metadata");
        else cJSON_AddNullToObject(e, copy[i]);
    }
    cJSON_AddStringToObject(e, "model", model);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "parallel_tool_calls");
    cJSON_AddBoolToObject(e, "parallel_tool_calls", !cJSON_IsFalse(v));
    v = cJSON_GetObjectItemCaseSensitive(o, "temperature");
    cJSON_AddNumberToObject(e, "temperature", cJSON_IsNumber(v) ? v->valuedouble : 1.0);
    v = cJSON_GetObjectItemCaseSensitive(o, "top_p");
    cJSON_AddNumberToObject(e, "top_p", cJSON_IsNumber(v) ? v->valuedouble : 1.0);
    v = cJSON_GetObjectItemCaseSensitive(o, "tool_choice");
    if (v && !cJSON_IsNull(v)) cJSON_AddItemToObject(e, "tool_choice", cJSON_Duplicate(v, 1));
    else cJSON_AddStringToObject(e, "tool_choice", "auto");
    v = cJSON_GetObjectItemCaseSensitive(o, "text");
    if (cJSON_IsObject(v)) cJSON_AddItemToObject(e, "text", cJSON_Duplicate(v, 1));
    else cJSON_AddStringToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(e, "text"), "format"), "type", "text");
    cJSON *rs = cJSON_AddObjectToObject(e, "reasoning");
    cJSON_AddNullToObject(rs, "effort");
    cJSON_AddNullToObject(rs, "summary");
    cJSON_AddBoolToObject(e, "store", store);
    cJSON_AddStringToObject(e, "truncation", "disabled");
    return e;
}

int responses_handle(srv_call *c) {
    http_error *e = &c->err;
    cJSON *o = json_parse_body(c->body, c->len, e);
    cJSON *chat = NULL, *msgs = NULL;
    rsp_state *r = NULL;
    int st = 0;
    if (!o) { st = e->status; goto fail; }
    if (!cJSON_IsObject(o)) { st = BAD(e, NULL, "the body must be a JSON object"); goto fail; }
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(o, "input");
    if (!input || (!cJSON_IsString(input) && !cJSON_IsArray(input))) {
        st = BAD(e, "input", "'input' must be a string or a list of items");
        goto fail;
    }
    if (cJSON_IsArray(input) && cJSON_GetArraySize(input) > RSP_MAX_ITEMS) {
        st = BAD(e, "input", "at most %d input items", RSP_MAX_ITEMS);
        goto fail;
    }
    const cJSON *store = cJSON_GetObjectItemCaseSensitive(o, "store");
    const cJSON *stream = cJSON_GetObjectItemCaseSensitive(o, "stream");
    if ((store && !cJSON_IsNull(store) && !cJSON_IsBool(store)) || (stream && !cJSON_IsNull(stream) && !cJSON_IsBool(stream))) {
        st = BAD(e, store && !cJSON_IsBool(store) ? "store" : "stream", "'store' and 'stream' must be booleans");
        goto fail;
    }
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(o, "instructions");
    if (ins && !cJSON_IsNull(ins) && !cJSON_IsString(ins)) { st = BAD(e, "instructions", "'instructions' must be a string"); goto fail; }
    const cJSON *prev = cJSON_GetObjectItemCaseSensitive(o, "previous_response_id");
    if (prev && !cJSON_IsNull(prev) && !cJSON_IsString(prev)) {
        st = BAD(e, "previous_response_id", "'previous_response_id' must be a string");
        goto fail;
    }
    /* the conversation: the stored one, then this input */
    msgs = cJSON_IsString(prev) ? store_history(prev->valuestring) : cJSON_CreateArray();
    if (!msgs) {
        st = http_err(e, 404, "invalid_request_error", "previous_response_id", "previous_response_not_found",
                      "Previous response with id '%.100s' not found (never stored, or evicted from the store).",
                      prev->valuestring);
        goto fail;
    }
    if (cJSON_IsString(input)) add_msg(msgs, "user", input->valuestring);
    else {
        const cJSON *it;
        cJSON_ArrayForEach(it, input) if ((st = add_item(msgs, it, 0, e))) goto fail;
    }
    if (!cJSON_GetArraySize(msgs)) { st = BAD(e, "input", "'input' has no messages"); goto fail; }
    /* the chat request */
    chat = cJSON_CreateObject();
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model");
    if (model && !cJSON_IsNull(model)) cJSON_AddItemToObject(chat, "model", cJSON_Duplicate(model, 1));
    cJSON *cm = cJSON_Duplicate(msgs, 1);
    if (cJSON_IsString(ins)) {
        cJSON *sys = cJSON_CreateObject();
        cJSON_AddStringToObject(sys, "role", "system");
        cJSON_AddStringToObject(sys, "content", ins->valuestring);
        cJSON_InsertItemInArray(cm, 0, sys);
    }
    cJSON_AddItemToObject(chat, "messages", cm);
    static const struct { const char *from, *to; } same[] = {
        {"temperature", "temperature"}, {"top_p", "top_p"}, {"max_output_tokens", "max_tokens"},
        {"parallel_tool_calls", "parallel_tool_calls"}, {"seed", "seed"}, {"chat_template_kwargs", "chat_template_kwargs"},
        {"user", "user"}, {"top_k", "top_k"}, {"min_p", "min_p"}, {"presence_penalty", "presence_penalty"},
        {"frequency_penalty", "frequency_penalty"}, {"repetition_penalty", "repetition_penalty"}};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, same[i].from);
        if (v && !cJSON_IsNull(v)) cJSON_AddItemToObject(chat, same[i].to, cJSON_Duplicate(v, 1));
    }
    if ((st = convert_tools(cJSON_GetObjectItemCaseSensitive(o, "tools"), chat, e))) goto fail;
    if ((st = convert_tool_choice(cJSON_GetObjectItemCaseSensitive(o, "tool_choice"), chat, e))) goto fail;
    if ((st = convert_format(cJSON_GetObjectItemCaseSensitive(o, "text"), chat, e))) goto fail;
    cJSON_AddTrueToObject(chat, "stream");
    cJSON_AddTrueToObject(cJSON_AddObjectToObject(chat, "stream_options"), "include_usage");
    char *cj = cJSON_PrintUnformatted(chat);
    r = calloc(1, sizeof *r);
    if (!r || !cj) { free(cj); st = http_err(e, 500, "server_error", NULL, NULL, "out of memory"); goto fail; }
    r->s = c->s;
    st = srv_req_parse(c->s, 1, cj, strlen(cj), &r->req, e);
    r->has_req = 1;
    free(cj);
    if (st) {
        if (e->param && !strcmp(e->param, "messages")) e->param = "input";
        if (e->param && !strcmp(e->param, "max_tokens")) e->param = "max_output_tokens";
        if (e->param && !strcmp(e->param, "response_format")) e->param = "text.format";
        goto fail;
    }
    if (r->req.n != 1) { st = BAD(e, "n", "the Responses API makes one answer"); goto fail; }
    r->stream = cJSON_IsTrue(stream);
    r->store = !cJSON_IsFalse(store);
    make_id(r->id, sizeof r->id, "resp_");
    r->created = (long)time(NULL);
    r->echo = echo_fields(o, r->req.model_name, r->store);
    r->history = msgs;
    msgs = NULL;
    r->output = cJSON_CreateArray();
    if ((st = run_start(c->s, &r->req, c->fd, &r->run, e))) goto fail;
    cJSON_Delete(o);
    cJSON_Delete(chat);
    if (r->stream) {
        c->next = rsp_next;
        c->free_state = rsp_free;
        c->st = r;
        c->ctype = "text/event-stream";
        return 0;
    }
    while (!r->ended)
        if (pump(r) < 0) break;
    if (r->gone) { c->status = -1; rsp_free(r); return 0; }
    if (r->failed) {
        st = http_err(e, 500, "server_error", NULL, NULL, "%s", r->fail_msg);
        rsp_free(r);
        return st;
    }
    cJSON *resp = response_obj(r, r->finish && !strcmp(r->finish, "length") ? "incomplete" : "completed");
    char *j = cJSON_PrintUnformatted(resp);
    cJSON_Delete(resp);
    sb_puts(&c->out, j ? j : "");
    free(j);
    rsp_free(r);
    return 0;
fail:
    cJSON_Delete(o);
    cJSON_Delete(chat);
    cJSON_Delete(msgs);
    rsp_free(r);
    return st;
}

int responses_get(srv_call *c) {
    const char *id = c->path + strlen("/v1/responses/");
    char *j = store_response(id);
    if (!j)
        return http_err(&c->err, 404, "invalid_request_error", NULL, "response_not_found",
                        "Response with id '%.100s' not found (never stored, or evicted from the store).", id);
    sb_puts(&c->out, j);
    free(j);
    return 0;
}
