/*
 * post_processor.c - the `post_processor` stage: what encode adds around the
 * model's ids when special tokens are asked for.
 *
 * Implemented: TemplateProcessing, single-sequence template only (xLLM never
 * encodes pairs). The template is a list of pieces, each either the sequence
 * itself ($A) or a named special token whose ids come from the processor's
 * own `special_tokens` table; it is resolved to id lists at load time.
 */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    int is_seq;   /* 1: the input sequence; 0: the ids below */
    int32_t *ids;
    size_t n;
} tpl_piece;

struct tok_postproc {
    tpl_piece *pieces;
    size_t n;
};

void tok_postproc_free(tok_postproc *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) xllm_free(p->pieces[i].ids);
    xllm_free(p->pieces);
    xllm_free(p);
}

/* Resolve special token `name` through the special_tokens table. */
static xllm_status resolve_special(const cJSON *table, const char *name, const char *path, tpl_piece *pc,
                                   xllm_error *err) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(table, name);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(e, "ids");
    if (!cJSON_IsArray(ids))
        return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: TemplateProcessing uses \"%s\", missing from special_tokens",
                           path, name);
    int n = cJSON_GetArraySize(ids);
    pc->ids = xllm_malloc_array(n ? (size_t)n : 1, sizeof *pc->ids);
    if (!pc->ids) return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    const cJSON *x;
    cJSON_ArrayForEach(x, ids) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 0x7ffffffe)
            return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: special token \"%s\" has a bad id", path, name);
        pc->ids[pc->n++] = (int32_t)x->valuedouble;
    }
    return XLLM_OK;
}

static xllm_status parse_piece(const cJSON *it, const cJSON *table, const char *path, tpl_piece *pc,
                               xllm_error *err) {
    const char *seq_id = NULL, *special = NULL;
    char buf[256];
    if (cJSON_IsString(it)) { /* shorthand: "$A", "$0", "$A:1", "<s>", "[CLS]:0" */
        snprintf(buf, sizeof buf, "%s", it->valuestring);
        char *colon = strrchr(buf, ':');
        if (colon && colon != buf) *colon = 0;
        if (buf[0] == '$') seq_id = buf[1] ? buf + 1 : "A";
        else special = buf;
    } else {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(s ? s : t, "id");
        if (!cJSON_IsString(id))
            return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: bad TemplateProcessing piece", path);
        if (s) seq_id = id->valuestring;
        else special = id->valuestring;
    }
    if (seq_id) {
        if (strcmp(seq_id, "A") != 0 && strcmp(seq_id, "0") != 0)
            return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: single template refers to sequence \"%s\"", path, seq_id);
        pc->is_seq = 1;
        return XLLM_OK;
    }
    return resolve_special(table, special, path, pc, err);
}

xllm_status tok_postproc_parse(const cJSON *j, const char *path, tok_postproc **out, xllm_error *err) {
    *out = NULL;
    if (!j || cJSON_IsNull(j)) return XLLM_OK;
    if (!cJSON_IsObject(j)) return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: post_processor is not an object", path);
    const char *type = tok_json_type(j);
    if (!type) return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: post_processor without a \"type\"", path);
    if (strcmp(type, "TemplateProcessing") != 0)
        return xllm_errorf(err, XLLM_ERR_UNSUPPORTED, "%s: unsupported post_processor type \"%s\"", path, type);
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(j, "single");
    const cJSON *table = cJSON_GetObjectItemCaseSensitive(j, "special_tokens");
    if (!cJSON_IsArray(single))
        return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: TemplateProcessing without a \"single\" template", path);
    tok_postproc *p = xllm_calloc(1, sizeof *p);
    int n = cJSON_GetArraySize(single);
    if (p) p->pieces = xllm_calloc(n ? (size_t)n : 1, sizeof *p->pieces);
    if (!p || !p->pieces) {
        tok_postproc_free(p);
        return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, single) {
        xllm_status st = parse_piece(it, table, path, &p->pieces[p->n++], err);
        if (st) {
            tok_postproc_free(p);
            return st;
        }
    }
    *out = p;
    return XLLM_OK;
}

int tok_postprocess(const tok_postproc *p, const int32_t *ids, size_t n, tok_ids *out) {
    out->n = 0;
    if (!p) {
        for (size_t i = 0; i < n; i++)
            if (tok_ids_push(out, ids[i])) return -1;
        return 0;
    }
    for (size_t k = 0; k < p->n; k++) {
        const int32_t *src = p->pieces[k].is_seq ? ids : p->pieces[k].ids;
        size_t cnt = p->pieces[k].is_seq ? n : p->pieces[k].n;
        for (size_t i = 0; i < cnt; i++)
            if (tok_ids_push(out, src[i])) return -1;
    }
    return 0;
}
