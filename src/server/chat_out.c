/*
 * chat_out.c - one chat choice's output made into what OpenAI returns:
 * reasoning_content, content and tool_calls.
 *
 * The idea: a pipeline over the text as it streams (after PII restore),
 * the same for streamed and whole answers so that the streamed deltas
 * always assemble to the non-streamed message. The reasoning split
 * (reasoning.c) comes first; what it calls content goes through the tool-call
 * stream (tool_calls.c), which passes content on and keeps what may be a call
 * for the end. At the end the calls get their ids, and are written whole
 * (non-streamed) or as OpenAI streams them: a first delta with index, id,
 * type and name and empty arguments, then the arguments in pieces.
 */
#include "chat_out.h"

#include <stdlib.h>
#include <string.h>

struct chat_out {
    think_stream *th;
    tool_stream *ts;
    int final;
    tool_call *calls;
    int n_calls;
    char (*ids)[40];
    size_t *sent;       /* per call: bytes of its arguments streamed */
    int n_ids;          /* calls with an id (announced or final) */
    int announced;      /* calls whose first delta went out */
    int cur;            /* the call now streaming */
};

chat_out *chat_out_new(const srv_req *r) {
    if (!r->chat || (!r->think && !r->tool_parse)) return NULL;
    chat_out *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    if (r->think && !(c->th = think_stream_new(r->think_open))) goto fail;
    if (r->tool_parse && !(c->ts = tool_stream_new((tool_format)r->tool_fmt, r->max_tool_calls))) goto fail;
    return c;
fail:
    chat_out_free(c);
    return NULL;
}

void chat_out_free(chat_out *c) {
    if (!c) return;
    think_stream_free(c->th);
    tool_stream_free(c->ts);
    tool_calls_free(c->calls, c->n_calls);
    free(c->ids);
    free(c->sent);
    free(c);
}

/* Ids (and streamed counts) for calls 0..n-1; 0, or -1 when out of memory. */
static int ensure_ids(chat_out *c, int n) {
    if (n <= c->n_ids) return 0;
    char (*ids)[40] = realloc(c->ids, (size_t)n * sizeof *ids);
    if (ids) c->ids = ids;
    size_t *sent = realloc(c->sent, (size_t)n * sizeof *sent);
    if (sent) c->sent = sent;
    if (!ids || !sent) return -1;
    for (int i = c->n_ids; i < n; i++) make_id(c->ids[i], sizeof c->ids[i], "call_"), c->sent[i] = 0;
    c->n_ids = n;
    return 0;
}

/* At the end: the calls streamed live (their arguments as streamed), then
 * any further ones the whole parse found; without live calls, the parse's. */
static void final_calls(chat_out *c, sbuf *content) {
    sbuf rest = {0};
    tool_call *parsed = NULL;
    int np = tool_stream_finish(c->ts, &rest, &parsed);
    const tool_live *lv = tool_stream_live(c->ts);
    int k = tool_live_n(lv);
    if (!k) {
        sb_put(content, rest.p, rest.len);
        c->calls = parsed, c->n_calls = np;
    } else { /* the call region is calls: what the parse calls content there is not passed on */
        int n = np > k ? np : k, ok;
        tool_call *v = calloc((size_t)n, sizeof *v);
        ok = v != NULL;
        for (int i = 0; ok && i < n; i++) {
            if (i < k) {
                size_t len;
                const char *a = tool_live_args(lv, i, &len);
                v[i].name = strdup(tool_live_name(lv, i));
                v[i].arguments = strndup(a, len);
            } else {
                v[i] = parsed[i];
                parsed[i].name = parsed[i].arguments = NULL;
            }
            ok = v[i].name && v[i].arguments;
        }
        tool_calls_free(parsed, np);
        if (!ok) tool_calls_free(v, v ? n : 0), v = NULL, n = 0;
        c->calls = v, c->n_calls = n;
    }
    sb_free(&rest);
    if (c->n_calls && ensure_ids(c, c->n_calls)) {
        tool_calls_free(c->calls, c->n_calls);
        c->calls = NULL;
        c->n_calls = 0;
    }
}

void chat_out_push(chat_out *c, const char *t, size_t n, int final, sbuf *content, sbuf *reasoning) {
    if (c->final) return;
    sbuf mid = {0};
    if (c->th) {
        think_stream_push(c->th, t, n, final, reasoning, &mid);
        t = mid.p ? mid.p : "";
        n = mid.len;
    }
    if (c->ts) {
        tool_stream_push(c->ts, t, n, content);
        if (final) final_calls(c, content);
    } else {
        sb_put(content, t, n);
    }
    c->final = final;
    sb_free(&mid);
}

int chat_out_n_calls(const chat_out *c) { return c ? c->n_calls : 0; }

void chat_out_calls_json(const chat_out *c, sbuf *b) {
    sb_puts(b, "[");
    for (int i = 0; c && i < c->n_calls; i++) {
        sb_printf(b, "%s{\"id\":\"%s\",\"type\":\"function\",\"function\":{\"name\":", i ? "," : "", c->ids[i]);
        sb_json_str(b, c->calls[i].name, strlen(c->calls[i].name));
        sb_puts(b, ",\"arguments\":");
        sb_json_str(b, c->calls[i].arguments, strlen(c->calls[i].arguments));
        sb_puts(b, "}}");
    }
    sb_puts(b, "]");
}

#define ARG_PIECE 24 /* bytes of arguments per delta when they are all known at once (whole UTF-8 characters) */

/* The end of a piece a[from..e) backed off so it splits no UTF-8 character
 * (at len: the whole text when complete, else without a cut-short last one). */
static size_t char_end(const char *a, size_t from, size_t e, size_t len, int complete) {
    if (e < len) {
        while (e > from && ((unsigned char)a[e] & 0xc0) == 0x80) e--;
        return e;
    }
    if (complete) return e;
    size_t p = e;
    while (p > from && e - p < 4 && ((unsigned char)a[p - 1] & 0xc0) == 0x80) p--;
    if (p > from) {
        unsigned c = (unsigned char)a[p - 1];
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (need > e - (p - 1)) return p - 1; /* the last character is not all here yet */
    }
    return e;
}

int chat_out_next_delta(chat_out *c, sbuf *delta) {
    if (!c || !c->ts) return 0;
    const tool_live *lv = tool_stream_live(c->ts);
    int total = c->final ? c->n_calls : tool_live_n(lv);
    for (; c->cur < total; c->cur++) {
        int i = c->cur;
        if (i >= c->announced) {
            if (ensure_ids(c, i + 1)) return 0;
            const char *name = c->final ? c->calls[i].name : tool_live_name(lv, i);
            sb_printf(delta, "\"tool_calls\":[{\"index\":%d,\"id\":\"%s\",\"type\":\"function\",\"function\":{\"name\":", i,
                      c->ids[i]);
            sb_json_str(delta, name, strlen(name));
            sb_puts(delta, ",\"arguments\":\"\"}}]");
            c->announced = i + 1;
            return 1;
        }
        size_t len;
        const char *a = c->final ? (len = strlen(c->calls[i].arguments), c->calls[i].arguments) : tool_live_args(lv, i, &len);
        int complete = c->final || tool_live_complete(lv, i);
        if (c->sent[i] < len) {
            size_t e = c->final && len - c->sent[i] > ARG_PIECE ? c->sent[i] + ARG_PIECE : len;
            e = char_end(a, c->sent[i], e, len, complete);
            if (e > c->sent[i]) {
                sb_printf(delta, "\"tool_calls\":[{\"index\":%d,\"function\":{\"arguments\":", i);
                sb_json_str(delta, a + c->sent[i], e - c->sent[i]);
                sb_puts(delta, "}}]");
                c->sent[i] = e;
                return 1;
            }
        }
        if (!complete) return 0; /* more of this call's arguments to come */
    }
    return 0;
}
