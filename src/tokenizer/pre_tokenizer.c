/*
 * pre_tokenizer.c - the `pre_tokenizer` stage: splits normalized text into
 * the pieces ("words") the model tokenizes one at a time.
 *
 * Implemented: Sequence and Metaspace. Metaspace replaces ' ' by its
 * replacement character (U+2581), prepends one per prepend_scheme (always;
 * first = only for a piece starting at offset 0 of the original input;
 * never), and with split=true cuts before every replacement character (the
 * delimiter merged with the next piece). Each piece carries the "starts at
 * original offset 0" flag the `first` scheme needs; empty pieces are dropped.
 */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"

#include <string.h>

typedef enum { PRE_SEQUENCE, PRE_METASPACE } pre_type;
typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } prepend_scheme;

struct tok_pretok {
    pre_type type;
    tok_pretok **kids; /* Sequence */
    size_t n_kids;
    char repl[8];      /* Metaspace replacement (one UTF-8 char) */
    size_t repl_len;
    prepend_scheme scheme;
    int split;
};

void tok_pretok_free(tok_pretok *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_kids; i++) tok_pretok_free(p->kids[i]);
    xllm_free(p->kids);
    xllm_free(p);
}

static xllm_status parse_metaspace(const cJSON *j, const char *path, tok_pretok *p, xllm_error *err) {
    p->type = PRE_METASPACE;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "replacement");
    if (!cJSON_IsString(r) || !r->valuestring[0])
        return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: Metaspace without a \"replacement\" character", path);
    size_t len = strlen(r->valuestring);
    if (len >= sizeof p->repl || tok_utf8_len((const unsigned char *)r->valuestring, len) != len)
        return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: Metaspace replacement must be one character", path);
    memcpy(p->repl, r->valuestring, len);
    p->repl_len = len;

    p->scheme = PREPEND_ALWAYS;
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(j, "prepend_scheme");
    const cJSON *aps = cJSON_GetObjectItemCaseSensitive(j, "add_prefix_space"); /* older files */
    if (cJSON_IsString(ps)) {
        if (strcmp(ps->valuestring, "always") == 0) p->scheme = PREPEND_ALWAYS;
        else if (strcmp(ps->valuestring, "first") == 0) p->scheme = PREPEND_FIRST;
        else if (strcmp(ps->valuestring, "never") == 0) p->scheme = PREPEND_NEVER;
        else
            return xllm_errorf(err, XLLM_ERR_UNSUPPORTED, "%s: unsupported Metaspace prepend_scheme \"%s\"", path,
                               ps->valuestring);
    } else if (cJSON_IsBool(aps)) {
        p->scheme = cJSON_IsTrue(aps) ? PREPEND_ALWAYS : PREPEND_NEVER;
    }
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(j, "split");
    p->split = sp ? cJSON_IsTrue(sp) : 1;
    return XLLM_OK;
}

xllm_status tok_pretok_parse(const cJSON *j, const char *path, tok_pretok **out, xllm_error *err) {
    *out = NULL;
    if (!j || cJSON_IsNull(j)) return XLLM_OK;
    if (!cJSON_IsObject(j)) return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: pre_tokenizer is not an object", path);
    const char *type = tok_json_type(j);
    if (!type) return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: pre_tokenizer without a \"type\"", path);
    tok_pretok *p = xllm_calloc(1, sizeof *p);
    if (!p) return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    xllm_status st = XLLM_OK;
    if (strcmp(type, "Sequence") == 0) {
        p->type = PRE_SEQUENCE;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers");
        if (!cJSON_IsArray(arr)) {
            st = xllm_errorf(err, XLLM_ERR_FORMAT, "%s: Sequence pre_tokenizer without \"pretokenizers\"", path);
        } else {
            int cnt = cJSON_GetArraySize(arr);
            p->kids = xllm_calloc(cnt ? (size_t)cnt : 1, sizeof *p->kids);
            if (!p->kids) st = xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
            const cJSON *k;
            cJSON_ArrayForEach(k, arr) {
                if (st) break;
                st = tok_pretok_parse(k, path, &p->kids[p->n_kids], err);
                if (!st && p->kids[p->n_kids]) p->n_kids++;
            }
        }
    } else if (strcmp(type, "Metaspace") == 0) {
        st = parse_metaspace(j, path, p, err);
    } else {
        st = xllm_errorf(err, XLLM_ERR_UNSUPPORTED, "%s: unsupported pre_tokenizer type \"%s\"", path, type);
    }
    if (st) {
        tok_pretok_free(p);
        return st;
    }
    *out = p;
    return XLLM_OK;
}

/* One piece through Metaspace, appended to out. */
static int metaspace_piece(const tok_pretok *p, const char *s, size_t len, int32_t flag, tok_list *out) {
    /* the transformed piece is built as one item, then split if asked */
    size_t first = out->n;
    if (tok_list_begin(out, -1, flag)) return -1;
    int starts_with_repl = len >= p->repl_len && memcmp(s, p->repl, p->repl_len) == 0;
    if (len && s[0] == ' ') starts_with_repl = 1; /* the ' ' becomes the replacement */
    int prepend = p->scheme == PREPEND_ALWAYS || (p->scheme == PREPEND_FIRST && flag);
    if (prepend && !starts_with_repl && tok_list_extend(out, p->repl, p->repl_len)) return -1;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && s[j] != ' ') j++;
        if (tok_list_extend(out, s + i, j - i)) return -1;
        if (j < len && tok_list_extend(out, p->repl, p->repl_len)) return -1;
        i = j + (j < len);
    }
    if (!p->split) {
        if (out->items[first].len == 0) out->n--;
        return 0;
    }
    /* Split the item in place: new items are views into the same bytes. */
    tok_span whole = out->items[first];
    out->n = first;
    size_t start = 0;
    for (size_t i = 1; i <= whole.len; i++) {
        const char *t = out->text.p + whole.off; /* tok_list_begin may move it */
        int cut = i == whole.len ||
                  (i + p->repl_len <= whole.len && memcmp(t + i, p->repl, p->repl_len) == 0);
        if (!cut) continue;
        if (tok_list_begin(out, -1, start == 0 ? flag : 0)) return -1;
        out->items[out->n - 1].off = whole.off + start;
        out->items[out->n - 1].len = i - start;
        start = i;
    }
    return 0;
}

static int pretok_apply(const tok_pretok *p, tok_list *l, tok_list *scratch) {
    if (p->type == PRE_SEQUENCE) {
        for (size_t i = 0; i < p->n_kids; i++)
            if (pretok_apply(p->kids[i], l, scratch)) return -1;
        return 0;
    }
    tok_list_clear(scratch);
    for (size_t i = 0; i < l->n; i++)
        if (metaspace_piece(p, tok_list_str(l, i), l->items[i].len, l->items[i].flag, scratch)) return -1;
    tok_list_swap(l, scratch);
    return 0;
}

int tok_pretokenize(const tok_pretok *p, tok_list *l, tok_list *scratch) {
    return p ? pretok_apply(p, l, scratch) : 0;
}
