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
    free(c);
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
        if (final) {
            c->n_calls = tool_stream_finish(c->ts, content, &c->calls);
            if (c->n_calls && (c->ids = calloc((size_t)c->n_calls, sizeof *c->ids)))
                for (int i = 0; i < c->n_calls; i++) make_id(c->ids[i], sizeof c->ids[i], "call_");
            if (!c->ids) { tool_calls_free(c->calls, c->n_calls); c->calls = NULL; c->n_calls = 0; }
        }
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

#define ARG_PIECE 24 /* bytes of arguments per streamed delta (whole UTF-8 characters) */

int chat_out_call_deltas(const chat_out *c, int i, int piece, sbuf *delta) {
    if (!c || i >= c->n_calls) return 0;
    const tool_call *k = &c->calls[i];
    if (piece == 0) {
        sb_printf(delta, "\"tool_calls\":[{\"index\":%d,\"id\":\"%s\",\"type\":\"function\",\"function\":{\"name\":", i,
                  c->ids[i]);
        sb_json_str(delta, k->name, strlen(k->name));
        sb_puts(delta, ",\"arguments\":\"\"}}]");
        return 1;
    }
    size_t len = strlen(k->arguments), at = 0;
    for (int p = 1; p < piece && at < len; p++) {
        at += ARG_PIECE;
        while (at < len && ((unsigned char)k->arguments[at] & 0xc0) == 0x80) at++;
    }
    if (at >= len) return 0;
    size_t e = at + ARG_PIECE;
    if (e > len) e = len;
    while (e < len && ((unsigned char)k->arguments[e] & 0xc0) == 0x80) e++;
    sb_printf(delta, "\"tool_calls\":[{\"index\":%d,\"function\":{\"arguments\":", i);
    sb_json_str(delta, k->arguments + at, e - at);
    sb_puts(delta, "}}]");
    return 1;
}
