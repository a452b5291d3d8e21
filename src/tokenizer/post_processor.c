/*
 * post_processor.c - the `post_processor` stage: what encode adds around the
 * model's ids when special tokens are asked for.
 *
 * Implemented: TemplateProcessing, single-sequence template only (xLLM never
 * encodes pairs). The template is a list of pieces, each either the sequence
 * itself ($A) or a named special token whose ids come from the processor's
 * own `special_tokens` table; it is resolved to id lists at load time.
 * RobertaProcessing and BertProcessing are the fixed templates cls $A sep;
 * ByteLevel only adjusts offsets, so it leaves the ids alone; Sequence runs
 * its processors in order.
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
    tpl_piece *pieces; /* template (NULL for ByteLevel and Sequence) */
    size_t n;
    tok_postproc **kids; /* Sequence */
    size_t n_kids;
};

int32_t tok_postproc_max_id(const tok_postproc *p) {
    int32_t m = -1;
    if (!p) return m;
    for (size_t i = 0; i < p->n; i++)
        for (size_t k = 0; k < p->pieces[i].n; k++)
            if (p->pieces[i].ids[k] > m) m = p->pieces[i].ids[k];
    for (size_t i = 0; i < p->n_kids; i++) {
        int32_t k = tok_postproc_max_id(p->kids[i]);
        if (k > m) m = k;
    }
    return m;
}

void tok_postproc_free(tok_postproc *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) xllm_free(p->pieces[i].ids);
    xllm_free(p->pieces);
    for (size_t i = 0; i < p->n_kids; i++) tok_postproc_free(p->kids[i]);
    xllm_free(p->kids);
    xllm_free(p);
}

/* cls $A sep, from ["token", id] pairs */
static xllm_status parse_cls_sep(const cJSON *j, const char *path, const char *type, tok_postproc *p,
                                 xllm_error *err) {
    const char *names[2] = {"cls", "sep"};
    p->pieces = mem_calloc(3, sizeof *p->pieces);
    if (!p->pieces) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    for (int k = 0; k < 2; k++) {
        const cJSON *pair = cJSON_GetObjectItemCaseSensitive(j, names[k]);
        const cJSON *id = cJSON_GetArrayItem(pair, 1);
        int32_t idv;
        if (!cJSON_IsArray(pair) || !tok_json_int(id, 0, 0x7ffffffe, &idv))
            return err_setf(err, XLLM_ERR_FORMAT, "%s: %s without a [token, id] \"%s\"", path, type, names[k]);
        tpl_piece *pc = &p->pieces[k == 0 ? 0 : 2];
        pc->ids = mem_malloc(sizeof *pc->ids);
        if (!pc->ids) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        pc->ids[0] = idv;
        pc->n = 1;
    }
    p->pieces[1].is_seq = 1;
    p->n = 3;
    return XLLM_OK;
}

/* Resolve special token `name` through the special_tokens table. */
static xllm_status resolve_special(const cJSON *table, const char *name, const char *path, tpl_piece *pc,
                                   xllm_error *err) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(table, name);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(e, "ids");
    if (!cJSON_IsArray(ids))
        return err_setf(err, XLLM_ERR_FORMAT, "%s: TemplateProcessing uses \"%s\", missing from special_tokens",
                           path, name);
    int n = cJSON_GetArraySize(ids);
    pc->ids = mem_malloc_array(n ? (size_t)n : 1, sizeof *pc->ids);
    if (!pc->ids) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    const cJSON *x;
    cJSON_ArrayForEach(x, ids) {
        int32_t idv;
        if (!tok_json_int(x, 0, 0x7ffffffe, &idv))
            return err_setf(err, XLLM_ERR_FORMAT, "%s: special token \"%s\" has a bad id", path, name);
        pc->ids[pc->n++] = idv;
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
            return err_setf(err, XLLM_ERR_FORMAT, "%s: bad TemplateProcessing piece", path);
        if (s) seq_id = id->valuestring;
        else special = id->valuestring;
    }
    if (seq_id) {
        if (strcmp(seq_id, "A") != 0 && strcmp(seq_id, "0") != 0)
            return err_setf(err, XLLM_ERR_FORMAT, "%s: single template refers to sequence \"%s\"", path, seq_id);
        pc->is_seq = 1;
        return XLLM_OK;
    }
    return resolve_special(table, special, path, pc, err);
}

static xllm_status parse_template(const cJSON *j, const char *path, tok_postproc *p, xllm_error *err) {
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(j, "single");
    const cJSON *table = cJSON_GetObjectItemCaseSensitive(j, "special_tokens");
    if (!cJSON_IsArray(single))
        return err_setf(err, XLLM_ERR_FORMAT, "%s: TemplateProcessing without a \"single\" template", path);
    int n = cJSON_GetArraySize(single);
    p->pieces = mem_calloc(n ? (size_t)n : 1, sizeof *p->pieces);
    if (!p->pieces) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    const cJSON *it;
    cJSON_ArrayForEach(it, single) {
        xllm_status st = parse_piece(it, table, path, &p->pieces[p->n++], err);
        if (st) return st;
    }
    return XLLM_OK;
}

static xllm_status parse_one(const cJSON *j, const char *type, const char *path, tok_postproc *p, xllm_error *err) {
    if (strcmp(type, "TemplateProcessing") == 0) return parse_template(j, path, p, err);
    if (strcmp(type, "ByteLevel") == 0) return XLLM_OK;
    if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0)
        return parse_cls_sep(j, path, type, p, err);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "processors");
        if (!cJSON_IsArray(arr))
            return err_setf(err, XLLM_ERR_FORMAT, "%s: Sequence post_processor without \"processors\"", path);
        int cnt = cJSON_GetArraySize(arr);
        p->kids = mem_calloc(cnt ? (size_t)cnt : 1, sizeof *p->kids);
        if (!p->kids) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        const cJSON *k;
        cJSON_ArrayForEach(k, arr) {
            xllm_status st = tok_postproc_parse(k, path, &p->kids[p->n_kids], err);
            if (st) return st;
            if (p->kids[p->n_kids]) p->n_kids++;
        }
        return XLLM_OK;
    }
    return err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: unsupported post_processor type \"%s\"", path, type);
}

xllm_status tok_postproc_parse(const cJSON *j, const char *path, tok_postproc **out, xllm_error *err) {
    *out = NULL;
    if (!j || cJSON_IsNull(j)) return XLLM_OK;
    if (!cJSON_IsObject(j)) return err_setf(err, XLLM_ERR_FORMAT, "%s: post_processor is not an object", path);
    const char *type = tok_json_type(j);
    if (!type) return err_setf(err, XLLM_ERR_FORMAT, "%s: post_processor without a \"type\"", path);
    tok_postproc *p = mem_calloc(1, sizeof *p);
    if (!p) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    xllm_status st = parse_one(j, type, path, p, err);
    if (st) {
        tok_postproc_free(p);
        return st;
    }
    *out = p;
    return XLLM_OK;
}

size_t tok_postproc_added(const tok_postproc *p) {
    if (!p) return 0;
    size_t n = 0;
    for (size_t k = 0; k < p->n; k++)
        if (!p->pieces[k].is_seq) n += p->pieces[k].n;
    for (size_t k = 0; k < p->n_kids; k++) n += tok_postproc_added(p->kids[k]);
    return n;
}

/* One processor: ids -> out (cleared first). */
static int apply_one(const tok_postproc *p, const int32_t *ids, size_t n, tok_ids *out) {
    out->n = 0;
    if (!p->pieces) return tok_ids_append(out, ids, n);
    for (size_t k = 0; k < p->n; k++) {
        const int32_t *src = p->pieces[k].is_seq ? ids : p->pieces[k].ids;
        size_t cnt = p->pieces[k].is_seq ? n : p->pieces[k].n;
        if (tok_ids_append(out, src, cnt)) return -1;
    }
    return 0;
}

int tok_postprocess(const tok_postproc *p, const int32_t *ids, size_t n, tok_ids *out) {
    out->n = 0;
    if (!p) return tok_ids_append(out, ids, n);
    if (!p->kids) return apply_one(p, ids, n, out);
    if (tok_ids_append(out, ids, n)) return -1;
    tok_ids tmp = {0};
    for (size_t k = 0; k < p->n_kids; k++) {
        if (tok_postprocess(p->kids[k], out->v, out->n, &tmp)) {
            xllm_free(tmp.v);
            return -1;
        }
        tok_ids t = *out;
        *out = tmp;
        tmp = t;
    }
    xllm_free(tmp.v);
    return 0;
}
