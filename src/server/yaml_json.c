/*
 * yaml_json.c - a YAML file read into a cJSON tree, for the server's config.
 *
 * libyaml's event stream is folded into cJSON nodes with an explicit stack:
 * mappings become objects (duplicate keys refused), sequences arrays. A plain
 * scalar that reads as an integer/float, true/false or null becomes that;
 * quoted scalars stay strings. Aliases, anchors and tags are refused, the
 * file is at most 1 MiB and nesting at most 32 deep, so a hostile file costs
 * bounded memory. The whole tree is checked by config.c against the schema.
 */
#include "srv.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#define YJ_MAX_BYTES (1 << 20)
#define YJ_MAX_DEPTH 32

static cJSON *scalar_node(const yaml_event_t *ev) {
    const char *v = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        if (n == 0 || !strcmp(v, "~") || !strcasecmp(v, "null")) return cJSON_CreateNull();
        if (!strcasecmp(v, "true") || !strcasecmp(v, "yes")) return cJSON_CreateTrue();
        if (!strcasecmp(v, "false") || !strcasecmp(v, "no")) return cJSON_CreateFalse();
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        if (end != v && *end == 0 && !errno && isfinite(d) && strlen(v) == n &&
            strspn(v, "+-0123456789.eE") == n)
            return cJSON_CreateNumber(d);
    }
    return cJSON_CreateString(v);
}

cJSON *yaml_read_json(const char *path, char *err, size_t err_cap) {
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, err_cap, "%s: %s", path, strerror(errno)); return NULL; }
    char *buf = malloc(YJ_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, YJ_MAX_BYTES + 1, f) : 0;
    fclose(f);
    if (!buf) { snprintf(err, err_cap, "out of memory"); return NULL; }
    if (n > YJ_MAX_BYTES) { free(buf); snprintf(err, err_cap, "%s: larger than 1 MiB", path); return NULL; }
    yaml_parser_t p;
    yaml_parser_initialize(&p);
    yaml_parser_set_input_string(&p, (const unsigned char *)buf, n);
    cJSON *stack[YJ_MAX_DEPTH + 1];
    char *keys[YJ_MAX_DEPTH + 1]; /* a mapping's pending key (NULL: expecting a key) */
    int depth = 0, done = 0;
    cJSON *root = NULL;
    memset(keys, 0, sizeof keys);
    while (!done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            snprintf(err, err_cap, "%s:%zu: %s", path, p.problem_mark.line + 1,
                     p.problem ? p.problem : "YAML syntax error");
            goto fail;
        }
        size_t line = ev.start_mark.line + 1;
        cJSON *node = NULL;
        int push = 0;
        switch (ev.type) {
        case YAML_STREAM_END_EVENT: done = 1; break;
        case YAML_ALIAS_EVENT:
            snprintf(err, err_cap, "%s:%zu: aliases are not allowed", path, line);
            yaml_event_delete(&ev);
            goto fail;
        case YAML_SCALAR_EVENT:
            if (ev.data.scalar.anchor || (ev.data.scalar.tag && ev.data.scalar.plain_implicit == 0 &&
                                          ev.data.scalar.quoted_implicit == 0)) {
                snprintf(err, err_cap, "%s:%zu: anchors and tags are not allowed", path, line);
                yaml_event_delete(&ev);
                goto fail;
            }
            if (depth > 0 && cJSON_IsObject(stack[depth - 1]) && !keys[depth - 1]) {
                const char *k = (const char *)ev.data.scalar.value;
                if (cJSON_GetObjectItemCaseSensitive(stack[depth - 1], k)) {
                    snprintf(err, err_cap, "%s:%zu: duplicate key '%.64s'", path, line, k);
                    yaml_event_delete(&ev);
                    goto fail;
                }
                keys[depth - 1] = strdup(k);
                yaml_event_delete(&ev);
                continue;
            }
            node = scalar_node(&ev);
            break;
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT:
            if (ev.type == YAML_SEQUENCE_START_EVENT ? ev.data.sequence_start.anchor != NULL
                                                     : ev.data.mapping_start.anchor != NULL) {
                snprintf(err, err_cap, "%s:%zu: anchors are not allowed", path, line);
                yaml_event_delete(&ev);
                goto fail;
            }
            if (depth >= YJ_MAX_DEPTH) {
                snprintf(err, err_cap, "%s:%zu: nested more than %d deep", path, line, YJ_MAX_DEPTH);
                yaml_event_delete(&ev);
                goto fail;
            }
            if (depth > 0 && cJSON_IsObject(stack[depth - 1]) && !keys[depth - 1]) {
                snprintf(err, err_cap, "%s:%zu: a key must be a scalar", path, line);
                yaml_event_delete(&ev);
                goto fail;
            }
            node = ev.type == YAML_SEQUENCE_START_EVENT ? cJSON_CreateArray() : cJSON_CreateObject();
            push = 1;
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            if (depth > 0) depth--;
            break;
        default: break;
        }
        yaml_event_delete(&ev);
        if (!node) continue;
        if (depth == 0) {
            if (root) { cJSON_Delete(node); snprintf(err, err_cap, "%s: more than one document", path); goto fail; }
            root = node;
        } else {
            cJSON *parent = stack[depth - 1];
            if (cJSON_IsObject(parent)) {
                cJSON_AddItemToObject(parent, keys[depth - 1], node);
                free(keys[depth - 1]);
                keys[depth - 1] = NULL;
            } else {
                cJSON_AddItemToArray(parent, node);
            }
        }
        if (push) stack[depth++] = node;
    }
    yaml_parser_delete(&p);
    free(buf);
    if (!root) { snprintf(err, err_cap, "%s: empty", path); return NULL; }
    return root;
fail:
    for (int i = 0; i <= YJ_MAX_DEPTH; i++) free(keys[i]);
    yaml_parser_delete(&p);
    free(buf);
    cJSON_Delete(root);
    return NULL;
}
