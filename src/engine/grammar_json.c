/*
 * grammar_json.c - JSON Schema and json_object as grammars.
 *
 * A schema compiles to the JSON texts it accepts, written compactly or
 * pretty-printed: between tokens at most one space, or a newline and up to 20
 * spaces/tabs (nothing before the value or after it), numbers with at most 15
 * significant digits and no exponent, so a schema whose strings and arrays
 * are bounded always completes within a bounded number of bytes. Properties
 * come in the schema's order; optional ones may be left out (rules
 * L_i(first) over the remaining properties keep the commas right); extra
 * properties are written only for a map (additionalProperties without
 * properties). The grammar may accept less than the schema (no exponent, no
 * Feb 29) but never more. oneOf is
 * written as anyOf, which is the same when no value matches two branches:
 * that is proven (grammar_json_disjoint.c) or the schema refused, naming
 * where the oneOf is.
 *
 * Supported: type (and type lists), properties, required, additionalProperties,
 * items / prefixItems, minItems / maxItems, minProperties / maxProperties and
 * propertyNames (maps), enum, const, minLength /
 * maxLength, pattern (grammar_regex.c, a search unless anchored), format
 * (date, time, date-time, uuid, email, ipv4, hostname, uri), minimum /
 * maximum / exclusiveMinimum / exclusiveMaximum and multipleOf (exactly,
 * decimal bounds included: grammar_json_number.c), anyOf, oneOf (when its
 * branches are provably disjoint), allOf (merged), $ref into
 * the document ($defs, definitions, any JSON pointer, "#" for recursion),
 * nullable; annotations are ignored. Every other JSON Schema keyword is
 * refused by name.
 */
#include "engine/grammar_impl.h"
#include "base/alloc.h"
#include "base/buf.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define MAX_DIGITS 15

typedef struct jref {
    const cJSON *node;
    int32_t rule;
} jref;

typedef struct js {
    gbuild *b;
    cJSON *doc;
    jref *refs;
    int n_refs, cap_refs;
    int depth;
    int32_t ws, chr, str, value, sep;
    cJSON **owned;     /* merged schemas (allOf, anyOf siblings) */
    int n_owned, cap_owned;
} js;

static int32_t schema(js *j, const cJSON *s);

/* ----------------------------------------------------------- common rules */

static int32_t lit(js *j, const char *s) { return gb_lit(j->b, s, strlen(s)); }

static int32_t ws(js *j) {
    if (j->ws >= 0) return j->ws;
    gram_set ind = {{0}};
    gram_set_add(&ind, ' ');
    gram_set_add(&ind, '\t');
    int32_t nl = gb_seq2(j->b, lit(j, "\n"), gb_rep(j->b, gb_bytes(j->b, &ind), 0, 20));
    return j->ws = gb_opt(j->b, gb_alt2(j->b, lit(j, " "), nl));
}

static int32_t sep(js *j) {
    if (j->sep >= 0) return j->sep;
    int32_t p[3] = {ws(j), lit(j, ","), ws(j)};
    return j->sep = gb_seq(j->b, p, 3);
}

static int32_t str_char(js *j) {
    if (j->chr >= 0) return j->chr;
    cpset any = {0};
    cpset_add(&any, 0, 0x10FFFF);
    j->chr = gb_cpset_json(j->b, &any);
    cpset_free(&any);
    return j->chr;
}

static int32_t quoted(js *j, int32_t body) {
    int32_t p[3] = {lit(j, "\""), body, lit(j, "\"")};
    return gb_seq(j->b, p, 3);
}

static int32_t string_len(js *j, int mn, int mx) { return quoted(j, gb_rep(j->b, str_char(j), mn, mx)); }

static int32_t any_string(js *j) {
    if (j->str < 0) j->str = string_len(j, 0, -1);
    return j->str;
}

static int32_t digits(js *j, int mn, int mx) {
    gram_set d = {{0}};
    gram_set_range(&d, '0', '9');
    return gb_rep(j->b, gb_bytes(j->b, &d), mn, mx);
}

static int32_t nonzero_digit(js *j) {
    gram_set d = {{0}};
    gram_set_range(&d, '1', '9');
    return gb_bytes(j->b, &d);
}

static int32_t integer_any(js *j) {
    int32_t mag = gb_alt2(j->b, lit(j, "0"), gb_seq2(j->b, nonzero_digit(j), digits(j, 0, MAX_DIGITS - 1)));
    return gb_seq2(j->b, gb_opt(j->b, lit(j, "-")), mag);
}

/* An optional fraction of up to n digits (n <= 0: none). */
static int32_t frac(js *j, int n) {
    if (n <= 0) return gb_empty(j->b);
    return gb_opt(j->b, gb_seq2(j->b, lit(j, "."), digits(j, 1, n)));
}

static int32_t number_any(js *j) {
    int32_t alts[MAX_DIGITS + 1];
    alts[0] = gb_seq2(j->b, lit(j, "0"), frac(j, MAX_DIGITS - 1));
    for (int k = 1; k <= MAX_DIGITS; k++) {
        int32_t p[3] = {nonzero_digit(j), digits(j, k - 1, k - 1), frac(j, MAX_DIGITS - k)};
        alts[k] = gb_seq(j->b, p, 3);
    }
    return gb_seq2(j->b, gb_opt(j->b, lit(j, "-")), gb_alt(j->b, alts, MAX_DIGITS + 1));
}

static int32_t any_value(js *j);

/* "{" members "}" with min..max members (max < 0: unbounded). */
static int32_t object_of_n(js *j, int32_t key, int32_t val, int mn, int mx) {
    int32_t kv[5] = {key, ws(j), lit(j, ":"), ws(j), val};
    int32_t alts[2], n = 0;
    if (mn == 0) {
        int32_t empty[3] = {lit(j, "{"), ws(j), lit(j, "}")};
        alts[n++] = gb_seq(j->b, empty, 3);
    }
    if (mx != 0) {
        int32_t member = gb_seq(j->b, kv, 5);
        int32_t more = gb_rep(j->b, gb_seq2(j->b, sep(j), member), mn > 0 ? mn - 1 : 0, mx < 0 ? -1 : mx - 1);
        int32_t full[6] = {lit(j, "{"), ws(j), member, more, ws(j), lit(j, "}")};
        alts[n++] = gb_seq(j->b, full, 6);
    }
    return gb_alt(j->b, alts, n);
}

static int32_t object_of(js *j, int32_t key, int32_t val) { return object_of_n(j, key, val, 0, -1); }

/* "[" items "]" with min..max items (max < 0: unbounded). */
static int32_t array_of(js *j, int32_t item, int mn, int mx) {
    int32_t alts[2], n = 0;
    if (mn == 0) {
        int32_t e[3] = {lit(j, "["), ws(j), lit(j, "]")};
        alts[n++] = gb_seq(j->b, e, 3);
    }
    if (mx != 0) {
        int32_t rest = gb_rep(j->b, gb_seq2(j->b, sep(j), item), mn > 0 ? mn - 1 : 0, mx < 0 ? -1 : mx - 1);
        int32_t f[6] = {lit(j, "["), ws(j), item, rest, ws(j), lit(j, "]")};
        alts[n++] = gb_seq(j->b, f, 6);
    }
    return gb_alt(j->b, alts, n);
}

static int32_t any_value(js *j) {
    if (j->value >= 0) return j->value;
    j->value = gb_new_rule(j->b); /* recursive: defined below */
    int32_t alts[7] = {object_of(j, any_string(j), j->value), array_of(j, j->value, 0, -1), any_string(j),
                       number_any(j), lit(j, "true"), lit(j, "false"), lit(j, "null")};
    if (!gb_ok(j->b)) return -1;
    for (int k = 0; k < 7; k++) {
        uint32_t e = gb_ref(alts[k]);
        gb_add_alt(j->b, j->value, &e, 1);
    }
    return j->value;
}

/* ------------------------------------------------------------- keywords */

static const cJSON *get(const cJSON *s, const char *k) { return cJSON_GetObjectItemCaseSensitive(s, k); }

static int num_of(const cJSON *s, const char *k, double *out) {
    const cJSON *v = get(s, k);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return -1;
    *out = v->valuedouble;
    return 1;
}

static int int_of(js *j, const cJSON *s, const char *k, int *out) {
    double d;
    int r = num_of(s, k, &d);
    if (r < 0 || (r && (d < 0 || d != floor(d))))
        return gb_fail(j->b, "json schema: \"%s\" must be a non-negative integer", k);
    if (r && d > GRAM_MAX_REPEAT)
        return gb_fail(j->b, "json schema: \"%s\" %.0f is above the supported %d", k, d, GRAM_MAX_REPEAT);
    if (r) *out = (int)d;
    return 0;
}

static const char *const k_unsupported[] = {
    "not", "if", "then", "else", "patternProperties", "dependentRequired", "dependentSchemas",
    "dependencies", "unevaluatedProperties", "unevaluatedItems", "contains", "minContains", "maxContains",
    "$dynamicRef", "$recursiveRef", "additionalItems", NULL};

static int check_keywords(js *j, const cJSON *s) {
    for (int k = 0; k_unsupported[k]; k++)
        if (get(s, k_unsupported[k]))
            return gb_fail(j->b, "json schema: keyword \"%s\" is not supported", k_unsupported[k]);
    const cJSON *u = get(s, "uniqueItems");
    if (u && cJSON_IsTrue(u)) return gb_fail(j->b, "json schema: keyword \"uniqueItems\" is not supported");
    return 0;
}

/* ---------------------------------------------------------------- $ref */

/* A local JSON pointer ("#/$defs/x", ~0 ~1 escapes, strict array indices) in doc; NULL when
   it does not resolve. Also used by grammar_json_disjoint.c. */
const cJSON *json_pointer_resolve(const cJSON *doc, const char *ref) {
    if (ref[0] != '#') return NULL;
    const cJSON *cur = doc;
    const char *p = ref + 1;
    while (*p == '/' && cur) {
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof tok) {
            if (p[0] == '~' && p[1] == '1') tok[n++] = '/', p += 2;
            else if (p[0] == '~' && p[1] == '0') tok[n++] = '~', p += 2;
            else tok[n++] = *p++;
        }
        tok[n] = 0;
        if (cJSON_IsArray(cur)) {
            char *e;
            long idx = strtol(tok, &e, 10);
            cur = *e ? NULL : cJSON_GetArrayItem(cur, (int)idx);
        } else {
            cur = get(cur, tok);
        }
    }
    return *p ? NULL : cur;
}

static int32_t ref_rule(js *j, const cJSON *target) {
    for (int k = 0; k < j->n_refs; k++)
        if (j->refs[k].node == target) return j->refs[k].rule;
    if (j->n_refs == j->cap_refs) {
        size_t cap = (size_t)j->cap_refs;
        if (j->n_refs >= INT_MAX / 2 || array_reserve(&j->refs, &cap, (size_t)j->n_refs + 1, sizeof *j->refs, 16)) {
            j->b->oom = 1;
            return -1;
        }
        j->cap_refs = (int)cap;
    }
    int32_t rule = gb_new_rule(j->b);
    if (rule < 0) return -1;
    j->refs[j->n_refs].node = target;
    j->refs[j->n_refs++].rule = rule;
    int32_t body = schema(j, target);
    if (body < 0) return -1;
    uint32_t e = gb_ref(body);
    gb_add_alt(j->b, rule, &e, 1);
    return rule;
}

/* ------------------------------------------------------------- merging */

static cJSON *own(js *j, cJSON *x) {
    if (!x) {
        j->b->oom = 1;
        return NULL;
    }
    if (j->n_owned == j->cap_owned) {
        size_t cap = (size_t)j->cap_owned;
        if (j->n_owned >= INT_MAX / 2 ||
            array_reserve(&j->owned, &cap, (size_t)j->n_owned + 1, sizeof *j->owned, 16)) {
            cJSON_Delete(x);
            j->b->oom = 1;
            return NULL;
        }
        j->cap_owned = (int)cap;
    }
    return j->owned[j->n_owned++] = x;
}

/* additionalProperties false in one part of a merge forbids the other part's
 * properties it does not list itself (JSON Schema reads each part alone). */
static int closed_conflict(js *j, const cJSON *closed, const cJSON *other) {
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(closed, "additionalProperties");
    if (!cJSON_IsFalse(ap)) return 0;
    const cJSON *mine = cJSON_GetObjectItemCaseSensitive(closed, "properties"), *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(other, "properties")) if (!mine || !get(mine, p->string))
        return gb_fail(j->b, "json schema: property \"%.64s\" of one part of an allOf/anyOf/oneOf/$ref is forbidden "
                             "by additionalProperties false of another (not supported)", p->string);
    return 0;
}

/* Shallow merge of b into a copy of a: properties unite, required concatenate,
 * other keywords from b win; `drop` names a keyword left out of a. */
static cJSON *merge(js *j, const cJSON *a, const cJSON *b, const char *drop) {
    if (!cJSON_IsObject(a) || !cJSON_IsObject(b) || closed_conflict(j, a, b) || closed_conflict(j, b, a)) {
        if (gb_ok(j->b)) gb_fail(j->b, "json schema: allOf/anyOf/oneOf parts must be schema objects");
        return NULL;
    }
    cJSON *m = own(j, cJSON_Duplicate(a, 1));
    if (!m) return NULL;
    if (drop) cJSON_DeleteItemFromObjectCaseSensitive(m, drop);
    const cJSON *it;
    cJSON_ArrayForEach(it, b) {
        cJSON *cur = cJSON_GetObjectItemCaseSensitive(m, it->string);
        if (cur && !strcmp(it->string, "properties") && cJSON_IsObject(cur) && cJSON_IsObject(it)) {
            const cJSON *p;
            cJSON_ArrayForEach(p, it) {
                cJSON_DeleteItemFromObjectCaseSensitive(cur, p->string);
                cJSON_AddItemToObject(cur, p->string, cJSON_Duplicate(p, 1));
            }
        } else if (cur && !strcmp(it->string, "required") && cJSON_IsArray(cur) && cJSON_IsArray(it)) {
            const cJSON *p;
            cJSON_ArrayForEach(p, it) cJSON_AddItemToArray(cur, cJSON_Duplicate(p, 1));
        } else {
            cJSON_DeleteItemFromObjectCaseSensitive(m, it->string);
            cJSON_AddItemToObject(m, it->string, cJSON_Duplicate(it, 1));
        }
    }
    return m;
}

/* -------------------------------------------------------------- by type */

static int32_t json_literal(js *j, const cJSON *v) {
    char *t = cJSON_PrintUnformatted(v);
    if (!t) {
        j->b->oom = 1;
        return -1;
    }
    int32_t r = lit(j, t);
    cJSON_free(t);
    return r;
}

static int32_t string_schema(js *j, const cJSON *s) {
    int mn = 0, mx = -1;
    if (int_of(j, s, "minLength", &mn) || int_of(j, s, "maxLength", &mx)) return -1;
    if (mx >= 0 && mx < mn) return gb_fail(j->b, "json schema: maxLength %d is below minLength %d", mx, mn);
    const cJSON *pat = get(s, "pattern"), *fmt = get(s, "format");
    int has_len = get(s, "minLength") || get(s, "maxLength");
    if (pat) {
        if (!cJSON_IsString(pat)) return gb_fail(j->b, "json schema: \"pattern\" must be a string");
        if (has_len || fmt)
            return gb_fail(j->b, "json schema: \"pattern\" together with minLength/maxLength/format is not supported");
        return quoted(j, gram_front_regex(j->b, pat->valuestring, strlen(pat->valuestring), 1));
    }
    if (fmt) {
        if (!cJSON_IsString(fmt)) return gb_fail(j->b, "json schema: \"format\" must be a string");
        static const char date[] = "[0-9]{4}-(((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01]))|((0[469]|11)-(0[1-9]|[12][0-9]|30))"
                                   "|(02-(0[1-9]|1[0-9]|2[0-8])))";
        static const char time[] = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
        static const struct { const char *name, *re; } formats[] = {
            {"uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"},
            {"email", "[a-z0-9]{1,20}([._+-][a-z0-9]{1,20}){0,2}@[a-z0-9]{1,20}(-[a-z0-9]{1,20})?(\\.[a-z0-9]{1,20}(-[a-z0-9]{1,20})?){0,2}\\.[a-z]{2,6}"},
            {"ipv4", "((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"},
            {"hostname", "[a-z0-9]{1,20}(-[a-z0-9]{1,20})?(\\.[a-z0-9]{1,20}(-[a-z0-9]{1,20})?){0,4}"},
            {"uri", "https?://[a-z0-9]{1,20}(\\.[a-z0-9]{1,20}){1,4}(/[a-zA-Z0-9._~-]{1,20}){0,6}"},
            {NULL, NULL}};
        char re[1024];
        const char *f = fmt->valuestring;
        if (has_len) return gb_fail(j->b, "json schema: \"format\" together with minLength/maxLength is not supported");
        if (!strcmp(f, "date")) snprintf(re, sizeof re, "^%s$", date);
        else if (!strcmp(f, "time")) snprintf(re, sizeof re, "^%s$", time);
        else if (!strcmp(f, "date-time")) snprintf(re, sizeof re, "^%sT%s$", date, time);
        else {
            int k = 0;
            while (formats[k].name && strcmp(formats[k].name, f)) k++;
            if (!formats[k].name) return gb_fail(j->b, "json schema: string format \"%.64s\" is not supported", f);
            snprintf(re, sizeof re, "^%s$", formats[k].re);
        }
        return quoted(j, gram_front_regex(j->b, re, strlen(re), 1));
    }
    if (mn == 0 && mx < 0) return any_string(j);
    return string_len(j, mn, mx);
}

/* Numbers without bounds or multipleOf here; with them, grammar_json_number.c. */
static int32_t numeric_schema(js *j, const cJSON *s, int integer) {
    if (get(s, "minimum") || get(s, "maximum") || get(s, "exclusiveMinimum") || get(s, "exclusiveMaximum") || get(s, "multipleOf"))
        return gram_json_number(j->b, s, integer);
    return integer ? integer_any(j) : number_any(j);
}

static int is_required(const cJSON *req, const char *name) {
    const cJSON *r;
    cJSON_ArrayForEach(r, req) if (cJSON_IsString(r) && !strcmp(r->valuestring, name)) return 1;
    return 0;
}

static int32_t key_literal(js *j, const char *name) {
    cJSON *k = cJSON_CreateString(name);
    if (!k) {
        j->b->oom = 1;
        return -1;
    }
    int32_t r = json_literal(j, k);
    cJSON_Delete(k);
    return r;
}

static int32_t object_schema(js *j, const cJSON *s) {
    const cJSON *props = get(s, "properties"), *req = get(s, "required"), *add = get(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return gb_fail(j->b, "json schema: \"properties\" must be an object");
    if (req && !cJSON_IsArray(req)) return gb_fail(j->b, "json schema: \"required\" must be an array");
    if (add && !cJSON_IsBool(add) && !cJSON_IsObject(add))
        return gb_fail(j->b, "json schema: \"additionalProperties\" must be a boolean or a schema");
    int n_props = props ? cJSON_GetArraySize(props) : 0;
    /* required names the properties do not list: written with additionalProperties' schema */
    int n_extra = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, req) {
        if (!cJSON_IsString(r)) return gb_fail(j->b, "json schema: \"required\" must list strings");
        if (!props || !get(props, r->valuestring)) n_extra++;
    }
    int min_p = 0, max_p = -1;
    if (int_of(j, s, "minProperties", &min_p) || int_of(j, s, "maxProperties", &max_p)) return -1;
    if (max_p >= 0 && max_p < min_p) return gb_fail(j->b, "json schema: maxProperties is below minProperties");
    if (n_props == 0 && n_extra == 0) {
        if (add && cJSON_IsFalse(add)) {
            if (min_p > 0) return gb_fail(j->b, "json schema: minProperties > 0 with no properties allowed");
            int32_t e[3] = {lit(j, "{"), ws(j), lit(j, "}")};
            return gb_seq(j->b, e, 3);
        }
        const cJSON *names = get(s, "propertyNames"); /* only a bound on the key's length / pattern */
        int32_t key = names ? schema(j, names) : any_string(j);
        return object_of_n(j, key, add && cJSON_IsObject(add) ? schema(j, add) : any_value(j), min_p, max_p);
    }
    int n = n_props + n_extra, n_req = 0;
    cJSON_ArrayForEach(r, req) n_req++;
    if (min_p > n_req || (max_p >= 0 && max_p < n))
        return gb_fail(j->b, "json schema: minProperties/maxProperties that bind the listed properties are not supported");
    if (get(s, "propertyNames")) return gb_fail(j->b, "json schema: keyword \"propertyNames\" with properties is not supported");
    int32_t *kv = mem_calloc((size_t)n, sizeof(int32_t));
    uint8_t *required = mem_calloc((size_t)n, 1);
    if (!kv || !required) {
        xllm_free(kv), xllm_free(required);
        j->b->oom = 1;
        return -1;
    }
    int i = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, props) {
        int32_t parts[5] = {key_literal(j, p->string), ws(j), lit(j, ":"), ws(j), schema(j, p)};
        kv[i] = gb_seq(j->b, parts, 5);
        required[i++] = (uint8_t)is_required(req, p->string);
    }
    cJSON_ArrayForEach(r, req) {
        if (props && get(props, r->valuestring)) continue;
        int32_t v = add && cJSON_IsObject(add) ? schema(j, add) : any_value(j);
        int32_t parts[5] = {key_literal(j, r->valuestring), ws(j), lit(j, ":"), ws(j), v};
        kv[i] = gb_seq(j->b, parts, 5);
        required[i++] = 1;
    }
    /* L_i(c): the members from i on; c = a member came before (a comma first) */
    int32_t next[2] = {gb_empty(j->b), gb_empty(j->b)};
    for (i = n - 1; i >= 0 && gb_ok(j->b); i--) {
        int32_t cur[2];
        for (int c = 0; c < 2; c++) {
            int32_t with = c ? gb_seq(j->b, (int32_t[]){sep(j), kv[i], next[1]}, 3) : gb_seq2(j->b, kv[i], next[1]);
            cur[c] = required[i] ? with : gb_alt2(j->b, with, next[c]);
        }
        next[0] = cur[0], next[1] = cur[1];
    }
    xllm_free(kv), xllm_free(required);
    int32_t parts[5] = {lit(j, "{"), ws(j), next[0], ws(j), lit(j, "}")};
    return gb_seq(j->b, parts, 5);
}

static int32_t array_schema(js *j, const cJSON *s) {
    int mn = 0, mx = -1;
    if (int_of(j, s, "minItems", &mn) || int_of(j, s, "maxItems", &mx)) return -1;
    if (mx >= 0 && mx < mn) return gb_fail(j->b, "json schema: maxItems %d is below minItems %d", mx, mn);
    const cJSON *items = get(s, "items"), *prefix = get(s, "prefixItems");
    if (cJSON_IsArray(items)) prefix = items, items = NULL; /* draft 4-7 tuples */
    if (prefix) {
        if (!cJSON_IsArray(prefix)) return gb_fail(j->b, "json schema: \"prefixItems\" must be an array");
        int k = cJSON_GetArraySize(prefix);
        if (k == 0 || k < mn || (mx >= 0 && k > mx))
            return gb_fail(j->b, "json schema: a tuple of %d items with minItems/maxItems other than that is not supported", k);
        int32_t parts[4 * 64 + 3];
        int n = 0;
        if (k > 64) return gb_fail(j->b, "json schema: a tuple of more than 64 items is not supported");
        parts[n++] = lit(j, "[");
        parts[n++] = ws(j);
        const cJSON *it;
        int idx = 0;
        cJSON_ArrayForEach(it, prefix) {
            if (idx++) parts[n++] = sep(j);
            parts[n++] = schema(j, it);
        }
        parts[n++] = ws(j);
        parts[n++] = lit(j, "]");
        return gb_seq(j->b, parts, n);
    }
    if (items && !cJSON_IsObject(items) && !cJSON_IsBool(items))
        return gb_fail(j->b, "json schema: \"items\" must be a schema");
    if (items && cJSON_IsFalse(items)) {
        if (mn > 0) return gb_fail(j->b, "json schema: items false with minItems > 0 matches nothing");
        int32_t e[3] = {lit(j, "["), ws(j), lit(j, "]")};
        return gb_seq(j->b, e, 3);
    }
    int32_t item = items && cJSON_IsObject(items) ? schema(j, items) : any_value(j);
    return array_of(j, item, mn, mx);
}

/* One type by name. */
static int32_t typed(js *j, const cJSON *s, const char *t) {
    if (!strcmp(t, "string")) return string_schema(j, s);
    if (!strcmp(t, "integer")) return numeric_schema(j, s, 1);
    if (!strcmp(t, "number")) return numeric_schema(j, s, 0);
    if (!strcmp(t, "boolean")) return gb_alt2(j->b, lit(j, "true"), lit(j, "false"));
    if (!strcmp(t, "null")) return lit(j, "null");
    if (!strcmp(t, "object")) return object_schema(j, s);
    if (!strcmp(t, "array")) return array_schema(j, s);
    return gb_fail(j->b, "json schema: unknown type \"%.32s\"", t);
}

static int32_t schema_body(js *j, const cJSON *s) {
    if (cJSON_IsTrue(s)) return any_value(j);
    if (cJSON_IsFalse(s)) return gb_fail(j->b, "json schema: the schema false matches nothing");
    if (!cJSON_IsObject(s)) return gb_fail(j->b, "json schema: a schema must be an object or a boolean");
    if (check_keywords(j, s)) return -1;
    const cJSON *ref = get(s, "$ref");
    if (ref) {
        if (!cJSON_IsString(ref)) return gb_fail(j->b, "json schema: \"$ref\" must be a string");
        const cJSON *target = json_pointer_resolve(j->doc, ref->valuestring);
        if (!target) return gb_fail(j->b, "json schema: \"$ref\" %.128s does not resolve (only local refs are supported)", ref->valuestring);
        int others = 0;
        const cJSON *it;
        static const char *const annotations[] = {"$ref", "title", "description", "default", "examples", "$comment",
                                                  "$schema", "$id", "$defs", "definitions", "deprecated", NULL};
        cJSON_ArrayForEach(it, s) {
            int k = 0;
            while (annotations[k] && strcmp(annotations[k], it->string)) k++;
            if (!annotations[k]) others = 1;
        }
        if (!others) return ref_rule(j, target);
        return schema(j, merge(j, target, s, NULL)) >= 0 ? schema(j, merge(j, s, target, "$ref")) : -1;
    }
    const cJSON *all = get(s, "allOf");
    if (all) {
        if (!cJSON_IsArray(all)) return gb_fail(j->b, "json schema: \"allOf\" must be an array");
        const cJSON *m = s, *it;
        int first = 1;
        cJSON_ArrayForEach(it, all) {
            const cJSON *sub = it;
            const cJSON *r2 = get(it, "$ref");
            if (r2 && cJSON_IsString(r2) && !(sub = json_pointer_resolve(j->doc, r2->valuestring)))
                return gb_fail(j->b, "json schema: \"$ref\" %.128s does not resolve", r2->valuestring);
            if (!cJSON_IsObject(sub)) return gb_fail(j->b, "json schema: allOf items must be schemas");
            m = merge(j, m, sub, first ? "allOf" : NULL);
            first = 0;
            if (!m) return -1;
        }
        if (first) m = merge(j, s, cJSON_GetArrayItem(all, 0) ? cJSON_GetArrayItem(all, 0) : s, "allOf");
        return m ? schema(j, m) : -1;
    }
    const char *comb = get(s, "anyOf") ? "anyOf" : get(s, "oneOf") ? "oneOf" : NULL;
    if (comb) {
        const cJSON *arr = get(s, comb), *it;
        if (!cJSON_IsArray(arr) || !cJSON_GetArraySize(arr))
            return gb_fail(j->b, "json schema: \"%s\" must be a non-empty array", comb);
        int plain = 1; /* siblings other than annotations? then merge them into every branch */
        cJSON_ArrayForEach(it, s) if (strcmp(it->string, comb) && strcmp(it->string, "title") && strcmp(it->string, "description") &&
                                      strcmp(it->string, "$defs") && strcmp(it->string, "definitions") && strcmp(it->string, "$schema")) plain = 0;
        int n = cJSON_GetArraySize(arr), k = 0;
        if (!strcmp(comb, "oneOf") && n > 1 && n <= 64) { /* exactly one: compiled as anyOf when no two branches meet */
            const cJSON *bi, *bj;
            int i = 0;
            cJSON_ArrayForEach(bi, arr) {
                int jx = 0;
                cJSON_ArrayForEach(bj, arr) {
                    if (jx > i && !json_schemas_disjoint(j->doc, bi, bj)) {
                        char path[200];
                        json_schema_path(j->doc, s, path, sizeof path);
                        return gb_fail(j->b, "json schema: oneOf at %s: branches %d and %d may both match, and a grammar "
                                             "cannot enforce exactly one; tell them apart by type, by const / enum, or by a "
                                             "required property with different const values (or use anyOf)", path, i, jx);
                    }
                    jx++;
                }
                i++;
            }
        } else if (!strcmp(comb, "oneOf") && n > 64) {
            return gb_fail(j->b, "json schema: oneOf with more than 64 branches is not supported (use anyOf)");
        }
        int32_t *alts = mem_calloc((size_t)n, sizeof(int32_t));
        if (!alts) {
            j->b->oom = 1;
            return -1;
        }
        cJSON_ArrayForEach(it, arr) alts[k++] = plain ? schema(j, it) : schema(j, merge(j, s, it, comb));
        int32_t r = gb_alt(j->b, alts, n);
        xllm_free(alts);
        return r;
    }
    const cJSON *c = get(s, "const");
    if (c) return json_literal(j, c);
    const cJSON *e = get(s, "enum");
    if (e) {
        if (!cJSON_IsArray(e) || !cJSON_GetArraySize(e)) return gb_fail(j->b, "json schema: \"enum\" must be a non-empty array");
        int n = cJSON_GetArraySize(e), k = 0;
        int32_t *alts = mem_calloc((size_t)n, sizeof(int32_t));
        if (!alts) {
            j->b->oom = 1;
            return -1;
        }
        const cJSON *it;
        cJSON_ArrayForEach(it, e) alts[k++] = json_literal(j, it);
        int32_t r = gb_alt(j->b, alts, n);
        xllm_free(alts);
        return r;
    }
    const cJSON *type = get(s, "type");
    int nullable = cJSON_IsTrue(get(s, "nullable"));
    int32_t r;
    if (cJSON_IsString(type)) {
        r = typed(j, s, type->valuestring);
    } else if (cJSON_IsArray(type)) {
        int n = cJSON_GetArraySize(type), k = 0;
        if (!n || n > 8) return gb_fail(j->b, "json schema: \"type\" lists 1 to 7 types");
        int32_t alts[8];
        const cJSON *it;
        cJSON_ArrayForEach(it, type) {
            if (!cJSON_IsString(it)) return gb_fail(j->b, "json schema: \"type\" must list strings");
            alts[k++] = typed(j, s, it->valuestring);
        }
        r = gb_alt(j->b, alts, k);
    } else if (type) {
        return gb_fail(j->b, "json schema: \"type\" must be a string or a list of strings");
    } else if (get(s, "properties") || get(s, "required") || get(s, "additionalProperties")) {
        r = object_schema(j, s);
    } else if (get(s, "items") || get(s, "prefixItems") || get(s, "minItems") || get(s, "maxItems")) {
        r = array_schema(j, s);
    } else if (get(s, "minLength") || get(s, "maxLength") || get(s, "pattern") || get(s, "format")) {
        r = string_schema(j, s);
    } else if (get(s, "minimum") || get(s, "maximum") || get(s, "exclusiveMinimum") || get(s, "exclusiveMaximum")) {
        r = numeric_schema(j, s, 0);
    } else {
        r = any_value(j);
    }
    return nullable ? gb_alt2(j->b, r, lit(j, "null")) : r;
}

static int32_t schema(js *j, const cJSON *s) {
    if (!s || !gb_ok(j->b)) return -1;
    if (++j->depth > MAX_DEPTH) return gb_fail(j->b, "json schema: nested deeper than %d", MAX_DEPTH);
    int32_t r = schema_body(j, s);
    j->depth--;
    return r;
}

static void js_init(js *j, gbuild *b) {
    memset(j, 0, sizeof *j);
    j->b = b;
    j->ws = j->chr = j->str = j->value = j->sep = -1;
}

static void js_free(js *j) {
    for (int k = 0; k < j->n_owned; k++) cJSON_Delete(j->owned[k]);
    xllm_free(j->owned);
    xllm_free(j->refs);
    if (j->doc) cJSON_Delete(j->doc);
}

int32_t gram_front_json_schema(gbuild *b, const char *text, size_t len) {
    js j;
    js_init(&j, b);
    j.doc = cJSON_ParseWithLength(text, len);
    if (!j.doc) return gb_fail(b, "json schema: the schema is not valid JSON");
    int32_t r = schema(&j, j.doc);
    js_free(&j);
    return r;
}

int32_t gram_front_json_object(gbuild *b) {
    js j;
    js_init(&j, b);
    int32_t r = object_of(&j, any_string(&j), any_value(&j));
    js_free(&j);
    return r;
}
