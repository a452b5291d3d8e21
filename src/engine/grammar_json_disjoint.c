/*
 * grammar_json_disjoint.c - when a JSON Schema oneOf is an anyOf.
 *
 * A grammar can take the union of oneOf's branches (an anyOf) but cannot
 * take "exactly one of them". The two are the same language when no value
 * matches two branches, so the JSON Schema front end compiles a oneOf only
 * when every pair of branches is provably disjoint, and refuses it (naming
 * where it is) otherwise. The proof is conservative, by rules that cover
 * the shapes schemas use to tell branches apart:
 *   - their types do not meet (type, or the types of const / enum values;
 *     integer lies inside number);
 *   - both fix the value (const / enum) to sets that do not meet;
 *   - both are objects with a property required by both whose subschemas
 *     are disjoint (a discriminator: {"kind": {"const": "a"}}), or one
 *     requires a property the other forbids (additionalProperties false).
 * Local $refs are followed. Anything else is "maybe overlapping".
 */
#include "engine/grammar_impl.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T_NULL 1u
#define T_BOOL 2u
#define T_OBJECT 4u
#define T_ARRAY 8u
#define T_STRING 16u
#define T_INTEGER 32u
#define T_FRACTION 64u /* numbers that are not integers */
#define T_ALL 127u
#define MAX_HOPS 8
#define MAX_NEST 8

static const cJSON *get(const cJSON *s, const char *k) { return cJSON_IsObject(s) ? cJSON_GetObjectItemCaseSensitive(s, k) : NULL; }


/* s with a bare {"$ref": ...} followed (a $ref with siblings is left as it is: not followed). */
static const cJSON *deref(const cJSON *doc, const cJSON *s) {
    for (int hop = 0; hop < MAX_HOPS && cJSON_IsObject(s); hop++) {
        const cJSON *r = get(s, "$ref");
        if (!cJSON_IsString(r) || cJSON_GetArraySize(s) != 1) break;
        const cJSON *t = json_pointer_resolve(doc, r->valuestring);
        if (!t) break;
        s = t;
    }
    return s;
}

static unsigned value_type(const cJSON *v) {
    if (cJSON_IsNull(v)) return T_NULL;
    if (cJSON_IsBool(v)) return T_BOOL;
    if (cJSON_IsObject(v)) return T_OBJECT;
    if (cJSON_IsArray(v)) return T_ARRAY;
    if (cJSON_IsString(v)) return T_STRING;
    return v->valuedouble == (double)(long long)v->valuedouble ? T_INTEGER : T_FRACTION;
}

static unsigned type_name(const char *t) {
    if (!strcmp(t, "null")) return T_NULL;
    if (!strcmp(t, "boolean")) return T_BOOL;
    if (!strcmp(t, "object")) return T_OBJECT;
    if (!strcmp(t, "array")) return T_ARRAY;
    if (!strcmp(t, "string")) return T_STRING;
    if (!strcmp(t, "integer")) return T_INTEGER;
    if (!strcmp(t, "number")) return T_INTEGER | T_FRACTION;
    return T_ALL;
}

/* The types a schema's values may have (T_ALL when it does not say). */
static unsigned types_of(const cJSON *s) {
    if (!cJSON_IsObject(s)) return cJSON_IsFalse(s) ? 0 : T_ALL;
    unsigned t = T_ALL;
    const cJSON *ty = get(s, "type"), *c = get(s, "const"), *e = get(s, "enum"), *it;
    if (cJSON_IsString(ty)) t = type_name(ty->valuestring);
    else if (cJSON_IsArray(ty)) {
        t = 0;
        cJSON_ArrayForEach(it, ty) t |= cJSON_IsString(it) ? type_name(it->valuestring) : T_ALL;
    }
    if (cJSON_IsTrue(get(s, "nullable"))) t |= T_NULL;
    if (c) t &= value_type(c);
    if (cJSON_IsArray(e)) {
        unsigned u = 0;
        cJSON_ArrayForEach(it, e) u |= value_type(it);
        t &= u;
    }
    return t;
}

/* 1 when v satisfies s's const / enum (or s has neither). */
static int value_allowed(const cJSON *s, const cJSON *v) {
    const cJSON *c = get(s, "const"), *e = get(s, "enum"), *it;
    if (c && !cJSON_Compare(c, v, 1)) return 0;
    if (cJSON_IsArray(e)) {
        cJSON_ArrayForEach(it, e) if (cJSON_Compare(it, v, 1)) return 1;
        return 0;
    }
    return 1;
}

static int requires(const cJSON *s, const char *name) {
    const cJSON *r = get(s, "required"), *it;
    cJSON_ArrayForEach(it, r) if (cJSON_IsString(it) && !strcmp(it->valuestring, name)) return 1;
    return 0;
}

/* s allows no property `name` (additionalProperties false and not listed). */
static int forbids(const cJSON *s, const char *name) {
    return cJSON_IsFalse(get(s, "additionalProperties")) && !get(get(s, "properties"), name) &&
           !get(s, "patternProperties");
}

static int disjoint(const cJSON *doc, const cJSON *a, const cJSON *b, int nest) {
    if (nest > MAX_NEST) return 0;
    a = deref(doc, a);
    b = deref(doc, b);
    if (!(types_of(a) & types_of(b))) return 1;
    /* const / enum on one side: disjoint when none of its values fits the other's const / enum */
    const cJSON *va = get(a, "const") ? get(a, "const") : get(a, "enum");
    const cJSON *vb = get(b, "const") ? get(b, "const") : get(b, "enum");
    if (va || vb) {
        const cJSON *fixed = va ? a : b, *other = va ? b : a;
        const cJSON *vals = get(fixed, "const"), *it;
        int any = 0;
        if (vals) any = value_allowed(other, vals) && (types_of(other) & value_type(vals)) != 0;
        else cJSON_ArrayForEach(it, get(fixed, "enum")) any |= value_allowed(fixed, it) && value_allowed(other, it) &&
                                                              (types_of(other) & value_type(it)) != 0;
        if (!any) return 1; /* no value of the fixed side fits the other */
    }
    /* objects: a discriminating property, or one the other forbids */
    const cJSON *pa = get(a, "properties"), *pb = get(b, "properties"), *it;
    cJSON_ArrayForEach(it, pa) {
        if (!requires(a, it->string)) continue;
        if (forbids(b, it->string)) return 1;
        const cJSON *sb = get(pb, it->string);
        if (sb && requires(b, it->string) && disjoint(doc, it, sb, nest + 1)) return 1;
    }
    const cJSON *r = get(a, "required");
    cJSON_ArrayForEach(it, r) if (cJSON_IsString(it) && !get(pa, it->valuestring) && forbids(b, it->valuestring)) return 1;
    r = get(b, "required");
    cJSON_ArrayForEach(it, r) if (cJSON_IsString(it) && forbids(a, it->valuestring)) return 1;
    return 0;
}

int json_schemas_disjoint(const cJSON *doc, const cJSON *a, const cJSON *b) { return disjoint(doc, a, b, 0); }

/* The JSON pointer of target inside node (path so far in buf[0..len)); 1 when found. */
static int find_path(const cJSON *node, const cJSON *target, char *buf, size_t len, size_t cap) {
    if (node == target) {
        buf[len < cap ? len : cap - 1] = 0;
        return 1;
    }
    int i = 0;
    for (const cJSON *c = node ? node->child : NULL; c; c = c->next, i++) {
        char seg[80];
        if (cJSON_IsArray(node)) snprintf(seg, sizeof seg, "/%d", i);
        else snprintf(seg, sizeof seg, "/%.70s", c->string ? c->string : "");
        size_t l = strlen(seg);
        if (len + l + 1 < cap) memcpy(buf + len, seg, l);
        if (find_path(c, target, buf, len + l < cap ? len + l : len, cap)) return 1;
    }
    return 0;
}

void json_schema_path(const cJSON *doc, const cJSON *target, char *buf, size_t cap) {
    if (!cap) return;
    buf[0] = 0;
    if (!find_path(doc, target, buf, 0, cap)) snprintf(buf, cap, "(a schema merged from allOf or $ref siblings)");
    else if (!buf[0]) snprintf(buf, cap, "(the root)");
}
