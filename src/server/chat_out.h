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
/* Streamed: the delta members (without braces) for call i's piece-th delta
 * (0: index, id, type, name and empty arguments; 1..: the arguments in
 * pieces); returns 0 when there is no such piece. */
int chat_out_call_deltas(const chat_out *c, int i, int piece, sbuf *delta);

#endif
