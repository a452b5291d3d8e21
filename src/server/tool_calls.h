/*
 * tool_calls.h - tool-call formats, parsing and tool_choice constraints
 * (tool_calls.c), and the reasoning split (reasoning.c). All functions are
 * thread-safe on distinct objects; a tool_stream / think_stream belongs to
 * one output stream.
 */
#ifndef XLLM_SERVER_TOOL_CALLS_H
#define XLLM_SERVER_TOOL_CALLS_H

#include "srv.h"

typedef enum tool_format {
    TOOL_FMT_GENERIC = 0,
    TOOL_FMT_HERMES = 1,   /* <tool_call>{json}</tool_call> (Hermes, Qwen2.5, Qwen3) */
    TOOL_FMT_LLAMA3 = 2,   /* {"name", "parameters"} (Llama 3.1-3.3, <|python_tag|>) */
    TOOL_FMT_MISTRAL = 3   /* [TOOL_CALLS][{...}] */
} tool_format;

/* The format a chat template's source writes tool calls in. */
tool_format tool_format_detect(const char *template_source);
const char *tool_format_name(tool_format f);

typedef struct tool_call {
    char *name;
    char *arguments; /* a JSON object's text */
} tool_call;

/* Parse a whole output: returns the number of calls (at most max_calls; 0 =
 * none or malformed, and then *calls is NULL and *content_len == len) and
 * the length of the content before them (0 when it is only whitespace). */
int tool_calls_parse(tool_format f, const char *text, size_t len, int max_calls, size_t *content_len,
                     tool_call **calls);
void tool_calls_free(tool_call *c, int n);

/* Streaming: push text, get the content that can be passed on now; at the
 * end, the rest of the content and the calls (as tool_calls_parse). */
typedef struct tool_stream tool_stream;
tool_stream *tool_stream_new(tool_format f, int max_calls);
void tool_stream_push(tool_stream *s, const char *t, size_t n, sbuf *content);
int tool_stream_finish(tool_stream *s, sbuf *content, tool_call **calls);
void tool_stream_free(tool_stream *s);

/* The calls recognized while the output streams (tool_live.c): each call
 * committed once its name is known and its arguments object has opened; its
 * arguments (the model's JSON text, minified) grow as bytes are pushed. */
typedef struct tool_live tool_live;
tool_live *tool_live_new(tool_format f, int max_calls);
void tool_live_push(tool_live *l, const char *t, size_t n);
void tool_live_free(tool_live *l);
int tool_live_n(const tool_live *l);
const char *tool_live_name(const tool_live *l, int i);
const char *tool_live_args(const tool_live *l, int i, size_t *len);
int tool_live_complete(const tool_live *l, int i);
int tool_live_failed(const tool_live *l); /* a shape it leaves to the whole parse */
/* The stream's live calls (NULL before a call region begins). */
const tool_live *tool_stream_live(const tool_stream *s);

/* 'tools' is a list of {"type": "function", "function": {"name", "parameters"?}}. */
int tools_validate(const cJSON *tools, http_error *e);
/* tool_choice "required" (named NULL) or a named function as a constraint
 * for the sampler (xllm_sampling_params.grammar_*): *grammar (malloc-ed) is a
 * JSON Schema of the format's call object (name const, arguments = the
 * tool's parameters; anyOf over the tools), *prefix / *suffix the format's
 * opening and closing text around it (static strings or NULL). 0, or the
 * HTTP status with e filled (a name not in tools). */
int tool_choice_constraint(tool_format f, const cJSON *tools, const char *named, int parallel, char **grammar,
                           const char **prefix, const char **suffix, http_error *e);

/* ------------------------------------------------------------ reasoning.c */

/* <think>...</think> split from the answer: text pushed goes to reasoning
 * while inside the tags (from the start when the prompt already opened
 * them), to content after (its leading whitespace dropped). Tag prefixes
 * at the end of a push are held back until resolved; final flushes. */
typedef struct think_stream think_stream;
think_stream *think_stream_new(int start_inside);
void think_stream_push(think_stream *s, const char *t, size_t n, int final, sbuf *reasoning, sbuf *content);
void think_stream_free(think_stream *s);
/* 1 when a template writes reasoning in <think> tags. */
int template_thinks(const char *template_source);
/* 1 when a rendered prompt ends inside an opened <think> (a generation prompt that starts the thinking). */
int prompt_opens_think(const char *prompt, size_t len);

#endif
