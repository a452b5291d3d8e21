/*
 * structured.c - structured output in a request body: OpenAI's
 * response_format ({"type": "text" | "json_object" | "json_schema",
 * "json_schema": {"name", "schema", "strict"}}) and the extension fields
 * grammar (llama.cpp GBNF), json_schema (a schema object) and regex (vLLM's
 * guided_json / guided_grammar / guided_regex spellings too), turned into the
 * sampling parameters' constraint. One constraint per request; an unknown
 * type is a 400 naming it. The engine compiles the constraint at submit, so
 * a schema feature it does not support is a 400 from there, naming it.
 */
#include "srv.h"

#include <stdlib.h>
#include <string.h>

#define BAD(e, param, ...) http_err(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

static const cJSON *member(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* The schema as text (an object, or a string holding one). */
static int schema_text(const cJSON *s, const char *param, char **out, http_error *e) {
    if (cJSON_IsString(s)) {
        *out = strdup(s->valuestring);
    } else if (cJSON_IsObject(s) || cJSON_IsBool(s)) {
        *out = cJSON_PrintUnformatted(s);
    } else {
        return BAD(e, param, "'%s' must be a JSON Schema object", param);
    }
    return *out ? 0 : http_err(e, 500, "server_error", NULL, NULL, "out of memory");
}

static int response_format(srv_req *r, const cJSON *rf, http_error *e) {
    if (!cJSON_IsObject(rf)) return BAD(e, "response_format", "'response_format' must be an object");
    const cJSON *type = member(rf, "type");
    if (!cJSON_IsString(type)) return BAD(e, "response_format.type", "'response_format.type' must be a string");
    const char *t = type->valuestring;
    if (!strcmp(t, "text")) return 0;
    if (!strcmp(t, "json_object")) {
        r->params.grammar_kind = XLLM_GRAMMAR_JSON_OBJECT;
        return 0;
    }
    if (strcmp(t, "json_schema"))
        return BAD(e, "response_format.type",
                   "response_format type '%.64s' is not supported (text, json_object, json_schema)", t);
    const cJSON *js = member(rf, "json_schema");
    if (!cJSON_IsObject(js))
        return BAD(e, "response_format.json_schema", "'response_format.json_schema' must be an object");
    const cJSON *name = member(js, "name"), *strict = member(js, "strict"), *schema = member(js, "schema");
    if (name && !cJSON_IsString(name))
        return BAD(e, "response_format.json_schema.name", "'response_format.json_schema.name' must be a string");
    if (strict && !cJSON_IsBool(strict))
        return BAD(e, "response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean");
    if (!schema) { /* no schema: any JSON object */
        r->params.grammar_kind = XLLM_GRAMMAR_JSON_OBJECT;
        return 0;
    }
    int st = schema_text(schema, "response_format.json_schema.schema", &r->grammar_text, e);
    if (!st) r->params.grammar_kind = XLLM_GRAMMAR_JSON_SCHEMA;
    return st;
}

int srv_parse_constraint(srv_req *r, const cJSON *o, http_error *e) {
    static const struct { const char *name; int kind; } ext[] = {
        {"json_schema", XLLM_GRAMMAR_JSON_SCHEMA}, {"guided_json", XLLM_GRAMMAR_JSON_SCHEMA},
        {"grammar", XLLM_GRAMMAR_GBNF},           {"guided_grammar", XLLM_GRAMMAR_GBNF},
        {"regex", XLLM_GRAMMAR_REGEX},            {"guided_regex", XLLM_GRAMMAR_REGEX}};
    const cJSON *rf = member(o, "response_format");
    const cJSON *rft = cJSON_IsObject(rf) ? member(rf, "type") : NULL;
    if (cJSON_IsString(rft) && !strcmp(rft->valuestring, "text")) rf = NULL; /* plain text: no constraint of its own */
    int n_given = 0, which = -1;
    for (int i = 0; i < (int)(sizeof ext / sizeof ext[0]); i++)
        if (member(o, ext[i].name)) n_given++, which = i;
    if (n_given > 1 || (n_given && rf))
        return BAD(e, rf ? "response_format" : ext[which].name,
                   "give one constraint: response_format, json_schema, grammar or regex");
    if (rf) return response_format(r, rf, e);
    if (which < 0) return 0;
    const cJSON *v = member(o, ext[which].name);
    int st;
    if (ext[which].kind == XLLM_GRAMMAR_JSON_SCHEMA) {
        st = schema_text(v, ext[which].name, &r->grammar_text, e);
    } else {
        if (!cJSON_IsString(v)) return BAD(e, ext[which].name, "'%s' must be a string", ext[which].name);
        r->grammar_text = strdup(v->valuestring);
        st = r->grammar_text ? 0 : http_err(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    if (!st) r->params.grammar_kind = ext[which].kind;
    return st;
}
