/*
 * tool_calls.c - a model's tool calls: the chat template's format detected
 * at load, the output parsed into OpenAI tool_calls (whole, or as it streams
 * with the text that may still become a call held back), and tool_choice
 * `required` / a named function turned into a constraint for the sampler.
 *
 * Formats (each model family documents its own):
 *   hermes   Hermes / Qwen2.5 / Qwen3: <tool_call>\n{"name": N, "arguments": {..}}\n</tool_call>,
 *            one block per call, text before the first block is content
 *   llama3   Llama 3.1-3.3: the whole answer is {"name": N, "parameters": {..}}
 *            (after <|python_tag|> when the template keeps special tokens)
 *   mistral  [TOOL_CALLS][{"name": N, "arguments": {..}}, ...]
 *   generic  any other template: the whole answer is a call object, a list of
 *            them, or {"tool_calls": [...]}
 * The idea: the parser never guesses. Output that does not parse as the
 * format's calls comes back whole as content (never dropped, never a crash).
 * While streaming, content is passed on as it comes except the part that
 * could still become a call (a prefix of the opening marker; for the
 * whole-answer formats an answer starting with '{' or '['), which waits
 * for the end of the output.
 */
#include "srv.h"
#include "tool_calls.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

const char *tool_format_name(tool_format f) {
    static const char *n[] = {"generic", "hermes", "llama3", "mistral"};
    return f >= 0 && f <= TOOL_FMT_MISTRAL ? n[f] : "generic";
}

tool_format tool_format_detect(const char *src) {
    if (!src) return TOOL_FMT_GENERIC;
    if (strstr(src, "<tool_call>")) return TOOL_FMT_HERMES;
    if (strstr(src, "[TOOL_CALLS]")) return TOOL_FMT_MISTRAL;
    if (strstr(src, "<|python_tag|>") || (strstr(src, "<|start_header_id|>") && strstr(src, "\"parameters\"")))
        return TOOL_FMT_LLAMA3;
    return TOOL_FMT_GENERIC;
}

void tool_calls_free(tool_call *c, int n) {
    for (int i = 0; c && i < n; i++) {
        free(c[i].name);
        free(c[i].arguments);
    }
    free(c);
}

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && isspace((unsigned char)*p)) p++;
    return p;
}

static int all_ws(const char *p, size_t n) { return skip_ws(p, p + n) == p + n; }

/* One call object: {"name": str, "arguments"|"parameters": object|string}. */
static int add_call(const cJSON *o, tool_call **v, int *n, int max) {
    if (!cJSON_IsObject(o)) return -1;
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(o, "function");
    if (cJSON_IsObject(fn)) o = fn; /* {"type": "function", "function": {...}} */
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    if (!cJSON_IsString(name) || !name->valuestring[0] || strlen(name->valuestring) > 256) return -1;
    char *a = NULL;
    if (!args || cJSON_IsNull(args)) a = strdup("{}");
    else if (cJSON_IsObject(args)) a = cJSON_PrintUnformatted(args);
    else if (cJSON_IsString(args)) {
        cJSON *inner = cJSON_Parse(args->valuestring); /* arguments sent as a JSON string */
        if (!cJSON_IsObject(inner)) { cJSON_Delete(inner); return -1; }
        a = cJSON_PrintUnformatted(inner);
        cJSON_Delete(inner);
    } else return -1;
    if (!a) return -1;
    if (*n >= max) { free(a); return 0; } /* beyond max_calls: dropped (parallel_tool_calls false) */
    tool_call *nv = realloc(*v, (size_t)(*n + 1) * sizeof **v);
    if (!nv) { free(a); return -1; }
    *v = nv;
    nv[*n].name = strdup(name->valuestring);
    nv[*n].arguments = a;
    (*n)++;
    return 0;
}

/* A JSON value holding calls: an object, a list of objects, {"tool_calls": [...]}. */
static int add_json(const char *p, size_t len, tool_call **v, int *n, int max) {
    cJSON *j = cJSON_ParseWithLength(p, len);
    if (!j) return -1;
    const cJSON *tc = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "tool_calls") : NULL;
    const cJSON *list = cJSON_IsArray(tc) ? tc : cJSON_IsArray(j) ? j : NULL;
    int st = 0;
    if (list) {
        if (!cJSON_GetArraySize(list)) st = -1;
        const cJSON *it;
        cJSON_ArrayForEach(it, list) if (!st) st = add_call(it, v, n, max);
    } else {
        st = add_call(j, v, n, max);
    }
    cJSON_Delete(j);
    return st;
}

static const char *find(const char *p, const char *end, const char *needle) {
    size_t k = strlen(needle);
    for (; p + k <= end; p++)
        if (!memcmp(p, needle, k)) return p;
    return NULL;
}

int tool_calls_parse(tool_format f, const char *text, size_t len, int max_calls, size_t *content_len,
                     tool_call **calls) {
    *calls = NULL;
    *content_len = len;
    const char *end = text + len;
    tool_call *v = NULL;
    int n = 0, st = 0;
    if (max_calls < 1) max_calls = 1;
    if (f == TOOL_FMT_HERMES) {
        const char *first = find(text, end, "<tool_call>");
        if (!first) return 0;
        for (const char *p = first; p && !st;) {
            const char *b = p + strlen("<tool_call>");
            const char *close = find(b, end, "</tool_call>");
            const char *e = close ? close : end;
            st = add_json(b, (size_t)(e - b), &v, &n, max_calls);
            if (!close) break;
            p = close + strlen("</tool_call>");
            const char *q = skip_ws(p, end);
            p = q < end ? find(q, end, "<tool_call>") : NULL;
        }
        if (!st && n) *content_len = (size_t)(first - text);
    } else {
        const char *p = skip_ws(text, end);
        const char *start = p;
        if (f == TOOL_FMT_MISTRAL) {
            const char *m = find(text, end, "[TOOL_CALLS]");
            if (m) start = m, p = m + strlen("[TOOL_CALLS]");
        }
        if (end - p >= 14 && !memcmp(p, "<|python_tag|>", 14)) p += 14;
        p = skip_ws(p, end);
        if (p == end || (*p != '{' && *p != '[')) return 0;
        st = add_json(p, (size_t)(end - p), &v, &n, max_calls);
        if (!st && n) *content_len = (size_t)(start - text);
    }
    if (st || !n) {
        tool_calls_free(v, n);
        *content_len = len;
        return 0;
    }
    if (all_ws(text, *content_len)) *content_len = 0;
    *calls = v;
    return n;
}

/* ------------------------------------------------------------ streaming */

struct tool_stream {
    tool_format f;
    int max_calls;
    sbuf held;     /* not yet passed on */
    int in_call;   /* held holds a (possible) call up to the end */
    int decided;   /* whole-answer formats: the first non-space byte was seen */
    int emitted;   /* some non-space content was passed on */
    tool_live *live; /* the call region, lexed as it comes (tool_live.c) */
};

tool_stream *tool_stream_new(tool_format f, int max_calls) {
    tool_stream *s = calloc(1, sizeof *s);
    if (s) s->f = f, s->max_calls = max_calls;
    return s;
}

void tool_stream_free(tool_stream *s) {
    if (!s) return;
    sb_free(&s->held);
    tool_live_free(s->live);
    free(s);
}

/* The longest suffix of p[0..n) that is a proper prefix of marker. */
static size_t partial_suffix(const char *p, size_t n, const char *marker) {
    size_t k = strlen(marker);
    for (size_t l = k - 1 < n ? k - 1 : n; l > 0; l--)
        if (!memcmp(p + n - l, marker, l)) return l;
    return 0;
}

/* Pass on held[0..k) as content, keeping whitespace-only content held until
 * something else follows (a call may come and then it is dropped). */
static void pass(tool_stream *s, size_t k, sbuf *out) {
    if (!s->emitted && all_ws(s->held.p, k)) return;
    s->emitted = 1;
    sb_put(out, s->held.p, k);
    memmove(s->held.p, s->held.p + k, s->held.len - k);
    s->held.len -= k;
}

const tool_live *tool_stream_live(const tool_stream *s) { return s ? s->live : NULL; }

/* The call region begins with held (after the content passed on). */
static void start_call(tool_stream *s) {
    s->in_call = 1;
    if (!(s->live = tool_live_new(s->f, s->max_calls))) return;
    size_t skip = 0; /* held may start with whitespace kept back; [TOOL_CALLS] itself is not JSON */
    const char *mk = s->f == TOOL_FMT_MISTRAL ? find(s->held.p, s->held.p + s->held.len, "[TOOL_CALLS]") : NULL;
    if (mk) skip = (size_t)(mk - s->held.p) + 12;
    tool_live_push(s->live, s->held.p + skip, s->held.len - skip);
}

void tool_stream_push(tool_stream *s, const char *t, size_t n, sbuf *content) {
    sb_put(&s->held, t, n);
    if (s->in_call) {
        tool_live_push(s->live, t, n);
        return;
    }
    if (!s->held.len) return;
    const char *marker = s->f == TOOL_FMT_HERMES ? "<tool_call>" : s->f == TOOL_FMT_MISTRAL ? "[TOOL_CALLS]" : NULL;
    const char *p = s->held.p, *end = p + s->held.len;
    if (marker) {
        const char *m = find(p, end, marker);
        if (m) {
            if (m > p) pass(s, (size_t)(m - p), content);
            start_call(s);
            return;
        }
        size_t keep = partial_suffix(p, s->held.len, marker);
        if (s->f != TOOL_FMT_MISTRAL || s->emitted) {
            if (s->held.len > keep) pass(s, s->held.len - keep, content);
            return;
        }
    }
    /* whole-answer formats (and Mistral without its marker): decided by the first non-space byte */
    if (!s->decided) {
        const char *q = skip_ws(p, end);
        if (q == end) return;
        s->decided = 1;
        if (*q == '{' || *q == '[' || *q == '<') {
            start_call(s);
            return;
        }
    }
    if (marker) {
        size_t keep = partial_suffix(p, s->held.len, marker);
        if (s->held.len > keep) pass(s, s->held.len - keep, content);
    } else {
        pass(s, s->held.len, content);
    }
}

int tool_stream_finish(tool_stream *s, sbuf *content, tool_call **calls) {
    *calls = NULL;
    int n = 0;
    if (s->in_call && s->held.len) {
        size_t cl;
        n = tool_calls_parse(s->f, s->held.p, s->held.len, s->max_calls, &cl, calls);
        if (n) {
            if (s->emitted || !all_ws(s->held.p, cl)) sb_put(content, s->held.p, cl);
            s->held.len = 0;
            return n;
        }
    }
    if (s->held.len && (s->emitted || !all_ws(s->held.p, s->held.len))) sb_put(content, s->held.p, s->held.len);
    s->held.len = 0;
    return 0;
}

/* --------------------------------------------------------- tool_choice */

static int bad(http_error *e, const char *param, const char *msg, const char *name) {
    return http_err(e, 400, "invalid_request_error", param, NULL, msg, name ? name : "");
}

int tools_validate(const cJSON *tools, http_error *e) {
    if (!cJSON_IsArray(tools)) return bad(e, "tools", "'tools' must be an array%s", NULL);
    if (cJSON_GetArraySize(tools) > 128) return bad(e, "tools", "at most 128 tools%s", NULL);
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return bad(e, "tools", "each tool must be {\"type\": \"function\", \"function\": {...}}%s", NULL);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsObject(fn) || !cJSON_IsString(name) || !name->valuestring[0] || strlen(name->valuestring) > 64)
            return bad(e, "tools", "a tool's function needs a 'name' (1-64 characters)%s", NULL);
        const cJSON *par = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        if (par && !cJSON_IsNull(par) && !cJSON_IsObject(par))
            return bad(e, "tools", "function '%s': 'parameters' must be a JSON Schema object", name->valuestring);
    }
    return 0;
}

/* {"type":"object","properties":{"name":{"const":N},"arguments":P},"required":[...],"additionalProperties":false} */
static cJSON *call_schema(tool_format f, const cJSON *fn) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    const char *args = f == TOOL_FMT_LLAMA3 ? "parameters" : "arguments";
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "object");
    cJSON *props = cJSON_AddObjectToObject(o, "properties");
    cJSON *nm = cJSON_AddObjectToObject(props, "name");
    cJSON_AddStringToObject(nm, "const", name->valuestring);
    if (cJSON_IsObject(par)) cJSON_AddItemToObject(props, args, cJSON_Duplicate(par, 1));
    else cJSON_AddItemToObject(props, args, cJSON_Parse("{\"type\":\"object\"}"));
    cJSON *req = cJSON_AddArrayToObject(o, "required");
    cJSON_AddItemToArray(req, cJSON_CreateString("name"));
    cJSON_AddItemToArray(req, cJSON_CreateString(args));
    cJSON_AddFalseToObject(o, "additionalProperties");
    return o;
}

int tool_choice_constraint(tool_format f, const cJSON *tools, const char *named, int parallel, char **grammar,
                           const char **prefix, const char **suffix, http_error *e) {
    *grammar = NULL;
    *prefix = *suffix = NULL;
    cJSON *any = cJSON_CreateArray();
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (named && strcmp(name->valuestring, named)) continue;
        cJSON_AddItemToArray(any, call_schema(f, fn));
    }
    int n = cJSON_GetArraySize(any);
    if (!n) {
        cJSON_Delete(any);
        return named ? bad(e, "tool_choice", "tool_choice names function '%s', which is not in 'tools'", named)
                     : bad(e, "tool_choice", "tool_choice 'required' needs at least one tool in 'tools'%s", NULL);
    }
    cJSON *one = n == 1 ? cJSON_DetachItemFromArray(any, 0) : cJSON_CreateObject();
    if (n > 1) cJSON_AddItemToObject(one, "anyOf", any);
    else cJSON_Delete(any);
    cJSON *root = one;
    if (f == TOOL_FMT_MISTRAL) { /* a list of calls */
        root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "type", "array");
        cJSON_AddItemToObject(root, "items", one);
        cJSON_AddNumberToObject(root, "minItems", 1);
        cJSON_AddNumberToObject(root, "maxItems", parallel && !named ? 8 : 1);
    }
    *grammar = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (f == TOOL_FMT_HERMES) {
        *prefix = "<tool_call>\n";
        *suffix = "\n</tool_call>";
    }
    return *grammar ? 0 : http_err(e, 500, "server_error", NULL, NULL, "out of memory");
}
