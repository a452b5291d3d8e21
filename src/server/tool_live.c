/*
 * tool_live.c - tool calls recognized while they are generated, so that
 * their arguments can stream as OpenAI streams them (a first delta with the
 * name, then the arguments in pieces as the model writes them).
 *
 * The idea: a small JSON lexer over the call region of the output (after
 * [TOOL_CALLS]; from <tool_call> or <|python_tag|> on, whose text it skips;
 * or from the answer's first '{' / '['), tracking depth and strings. Call objects are the
 * objects at the call depth (1 for a bare object or Hermes blocks, 2 inside a
 * list). In a call object, once "name" has its string value and
 * "arguments" (or "parameters") has opened its object, the call is
 * committed; from then on each byte of the arguments object is appended as
 * it arrives, without the whitespace outside strings (the arguments are the
 * model's JSON text, minified). Any other shape - the arguments before the
 * name, arguments as a JSON string, a {"tool_calls": [...]} wrapper - is left
 * to the whole parse at the end (tool_calls.c): the lexer then stops
 * committing.
 *
 * Thread-safety: a tool_live belongs to one output stream.
 */
#include "tool_calls.h"

#include <stdlib.h>
#include <string.h>

#define LIVE_KEY 16       /* bytes of a key kept (longer keys are none we look for) */
#define LIVE_NAME 256     /* a function name's bytes */
#define LIVE_MAX_CALLS 128

typedef struct live_call {
    char name[LIVE_NAME + 1];
    sbuf args;
    int complete;
} live_call;

struct tool_live {
    tool_format f;
    int max_calls;
    int started;          /* the first JSON byte was seen */
    int call_depth;       /* depth of the call objects (1, or 2 in a list) */
    int depth, in_str, esc, failed;
    /* inside a call object, at depth call_depth */
    int expect_key;       /* the next string at call depth is a key */
    int in_key;           /* lexing a key */
    char key[LIVE_KEY + 1];
    int key_len;
    int value_of;         /* the value now lexed belongs to: 0 other, 1 name, 2 arguments */
    int in_name;          /* lexing the name's string */
    char name[LIVE_NAME + 1];
    int name_len, have_name;
    int in_args;          /* inside the arguments object (depth > call_depth) */
    int cur;              /* the committed call being filled, -1 none */
    live_call *calls;
    int n;
};

tool_live *tool_live_new(tool_format f, int max_calls) {
    tool_live *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->f = f;
    l->max_calls = max_calls < 1 ? 1 : max_calls > LIVE_MAX_CALLS ? LIVE_MAX_CALLS : max_calls;
    l->cur = -1;
    return l;
}

void tool_live_free(tool_live *l) {
    if (!l) return;
    for (int i = 0; i < l->n; i++) sb_free(&l->calls[i].args);
    free(l->calls);
    free(l);
}

int tool_live_n(const tool_live *l) { return l ? l->n : 0; }
const char *tool_live_name(const tool_live *l, int i) { return l->calls[i].name; }
const char *tool_live_args(const tool_live *l, int i, size_t *len) {
    *len = l->calls[i].args.len;
    return l->calls[i].args.p ? l->calls[i].args.p : "";
}
int tool_live_complete(const tool_live *l, int i) { return l->calls[i].complete; }

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void commit(tool_live *l) {
    if (l->n >= l->max_calls) { /* beyond max_calls: dropped, as the whole parse drops them */
        l->cur = -1;
        return;
    }
    live_call *nc = realloc(l->calls, (size_t)(l->n + 1) * sizeof *nc);
    if (!nc) {
        l->failed = 1;
        return;
    }
    l->calls = nc;
    memset(&nc[l->n], 0, sizeof nc[l->n]);
    memcpy(nc[l->n].name, l->name, (size_t)l->name_len + 1);
    l->cur = l->n++;
}

static void byte(tool_live *l, char c) {
    if (l->in_args) { /* the arguments object: kept minified */
        if (l->cur >= 0 && (l->in_str || !is_ws(c))) sb_put(&l->calls[l->cur].args, &c, 1);
        if (l->in_str) {
            if (l->esc) l->esc = 0;
            else if (c == '\\') l->esc = 1;
            else if (c == '"') l->in_str = 0;
            return;
        }
        if (c == '"') l->in_str = 1;
        else if (c == '{' || c == '[') l->depth++;
        else if (c == '}' || c == ']') {
            if (--l->depth == l->call_depth) {
                l->in_args = 0;
                if (l->cur >= 0) l->calls[l->cur].complete = 1;
                l->cur = -1;
            }
        }
        return;
    }
    if (l->in_str) {
        if (l->esc) {
            l->esc = 0;
            if (l->in_name || l->in_key) l->failed = 1; /* escapes in a name or key: the whole parse decides */
            return;
        }
        if (c == '\\') {
            l->esc = 1;
            return;
        }
        if (c == '"') {
            l->in_str = 0;
            if (l->in_key) {
                l->in_key = 0;
                l->key[l->key_len] = 0;
                l->value_of = !strcmp(l->key, "name") ? 1 : !strcmp(l->key, "arguments") || !strcmp(l->key, "parameters") ? 2 : 0;
            } else if (l->in_name) {
                l->in_name = 0;
                l->name[l->name_len] = 0;
                l->have_name = l->name_len > 0;
            }
            return;
        }
        if (l->in_key && l->key_len < LIVE_KEY) l->key[l->key_len++] = c;
        else if (l->in_key) l->key_len = LIVE_KEY, l->value_of = 0, l->key[0] = 0; /* too long to be ours */
        if (l->in_name) {
            if (l->name_len >= LIVE_NAME) l->failed = 1;
            else l->name[l->name_len++] = c;
        }
        return;
    }
    if (is_ws(c)) return;
    if (!l->started) {
        if (c != '{' && c != '[') return; /* marker text (<tool_call>, <|python_tag|>) */
        l->started = 1;
        l->call_depth = c == '[' ? 2 : 1;
    }
    if (l->depth == l->call_depth) { /* inside a call object */
        if (c == '"') {
            l->in_str = 1;
            if (l->expect_key) {
                l->in_key = 1, l->key_len = 0, l->expect_key = 0;
            } else if (l->value_of == 1) {
                l->in_name = 1, l->name_len = 0;
            }
            return;
        }
        if (c == ':') return;
        if (c == ',') {
            l->expect_key = 1, l->value_of = 0;
            return;
        }
        if (c == '{' && l->value_of == 2) {
            if (!l->have_name) { /* arguments before the name: left to the whole parse */
                l->failed = 1;
                return;
            }
            commit(l);
            l->depth++;
            l->in_args = 1;
            if (l->cur >= 0) sb_put(&l->calls[l->cur].args, "{", 1);
            return;
        }
        if (c == '{' || c == '[') {
            if (l->value_of == 1 || l->value_of == 2) l->failed = 1; /* a name or arguments of another type */
            l->depth++;
            return;
        }
        if (c == '}' || c == ']') {
            l->depth--;
            l->have_name = 0;
            return;
        }
        if (l->value_of == 1 || l->value_of == 2) l->failed = 1; /* a number, null, ... */
        return;
    }
    /* outside call objects: their openings and closings */
    if (c == '"') { /* a string outside a call object: some other shape */
        l->in_str = 1;
        l->failed = 1;
        return;
    }
    if (c == '{' || c == '[') {
        l->depth++;
        if (l->depth == l->call_depth) {
            if (c != '{') l->failed = 1;
            l->expect_key = 1, l->value_of = 0, l->have_name = 0;
        }
    } else if (c == '}' || c == ']') {
        if (l->depth > 0) l->depth--;
    }
}

void tool_live_push(tool_live *l, const char *t, size_t n) {
    if (!l) return;
    for (size_t i = 0; i < n && !l->failed; i++) {
        byte(l, t[i]);
    }
}

int tool_live_failed(const tool_live *l) { return !l || l->failed; }
