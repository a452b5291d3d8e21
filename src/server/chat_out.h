/*
 * chat_out.h - a chat choice's output split into reasoning, content and
 * tool calls (chat_out.c). A chat_out belongs to one choice of one request.
 */
#ifndef XLLM_SERVER_CHAT_OUT_H
#define XLLM_SERVER_CHAT_OUT_H

#include "tool_calls.h"

typedef struct chat_out chat_out;
/* NULL when the request needs no split (no reasoning, no tools) or on OOM. */
chat_out *chat_out_new(const srv_req *r);
void chat_out_free(chat_out *c);
/* Push the choice's text; content and reasoning that can go out now are
 * appended. final: the end of the output (then the calls are parsed). */
void chat_out_push(chat_out *c, const char *t, size_t n, int final, sbuf *content, sbuf *reasoning);
/* After the final push: the calls found (0 for NULL). */
int chat_out_n_calls(const chat_out *c);
/* The calls as OpenAI's message.tool_calls array. */
void chat_out_calls_json(const chat_out *c, sbuf *b);
/* Streamed: the next tool-call delta's members (without braces), as OpenAI
 * streams them: a call's first delta has index, id, type, name and empty
 * arguments, the next ones its arguments in pieces, as the model writes them
 * (the calls recognized live, tool_live.c) or, for calls known only at the
 * end, in pieces then. Call it until it returns 0 after each push; the
 * deltas assemble to chat_out_calls_json's calls. */
int chat_out_next_delta(chat_out *c, sbuf *delta);

#endif
