/*
 * normalizer.c - the `normalizer` stage of tokenizer.json: text -> text,
 * applied to each stretch of input between added tokens.
 *
 * Implemented: Sequence, Prepend (adds its string in front of non-empty
 * text), Replace with a String pattern (all non-overlapping occurrences,
 * left to right). Each step rewrites the current buffer into a scratch buffer
 * and swaps them, so a Sequence is just a loop. Alignments to the original
 * text are not tracked (xLLM does not report offsets).
 */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"

#include <string.h>

typedef enum { NORM_SEQUENCE, NORM_PREPEND, NORM_REPLACE } norm_type;

struct tok_normalizer {
    norm_type type;
    tok_normalizer **kids; /* Sequence */
    size_t n_kids;
    char *a, *b;           /* Prepend: a; Replace: pattern a -> content b */
    size_t a_len, b_len;
};

void tok_normalizer_free(tok_normalizer *n) {
    if (!n) return;
    for (size_t i = 0; i < n->n_kids; i++) tok_normalizer_free(n->kids[i]);
    xllm_free(n->kids);
    xllm_free(n->a);
    xllm_free(n->b);
    xllm_free(n);
}

/* Read a {"String": "..."} pattern; {"Regex": ...} is not supported yet. */
static xllm_status parse_string_pattern(const cJSON *pat, const char *path, const char *what, char **out,
                                        xllm_error *err) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(pat, "String");
    if (cJSON_IsString(s)) {
        *out = xllm_strdup(s->valuestring);
        return *out ? XLLM_OK : xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    if (cJSON_GetObjectItemCaseSensitive(pat, "Regex"))
        return xllm_errorf(err, XLLM_ERR_UNSUPPORTED, "%s: %s with a Regex pattern is not supported", path, what);
    return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: %s without a String pattern", path, what);
}

xllm_status tok_normalizer_parse(const cJSON *j, const char *path, tok_normalizer **out, xllm_error *err) {
    *out = NULL;
    if (!j || cJSON_IsNull(j)) return XLLM_OK;
    if (!cJSON_IsObject(j)) return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: normalizer is not an object", path);
    const char *type = tok_json_type(j);
    if (!type) return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: normalizer without a \"type\"", path);
    tok_normalizer *n = xllm_calloc(1, sizeof *n);
    if (!n) return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    xllm_status st = XLLM_OK;
    if (strcmp(type, "Sequence") == 0) {
        n->type = NORM_SEQUENCE;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "normalizers");
        if (!cJSON_IsArray(arr)) {
            st = xllm_errorf(err, XLLM_ERR_FORMAT, "%s: Sequence normalizer without \"normalizers\"", path);
        } else {
            int cnt = cJSON_GetArraySize(arr);
            n->kids = xllm_calloc(cnt ? (size_t)cnt : 1, sizeof *n->kids);
            if (!n->kids) st = xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
            const cJSON *k;
            cJSON_ArrayForEach(k, arr) {
                if (st) break;
                st = tok_normalizer_parse(k, path, &n->kids[n->n_kids], err);
                if (!st && n->kids[n->n_kids]) n->n_kids++;
            }
        }
    } else if (strcmp(type, "Prepend") == 0) {
        n->type = NORM_PREPEND;
        int r = tok_json_strdup(cJSON_GetObjectItemCaseSensitive(j, "prepend"), &n->a);
        if (r == -2) st = xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        else if (r || !n->a) st = xllm_errorf(err, XLLM_ERR_FORMAT, "%s: Prepend normalizer without \"prepend\"", path);
        else n->a_len = strlen(n->a);
    } else if (strcmp(type, "Replace") == 0) {
        n->type = NORM_REPLACE;
        st = parse_string_pattern(cJSON_GetObjectItemCaseSensitive(j, "pattern"), path, "Replace normalizer",
                                  &n->a, err);
        if (!st) {
            int r = tok_json_strdup(cJSON_GetObjectItemCaseSensitive(j, "content"), &n->b);
            if (r == -2) st = xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
            else if (r || !n->b)
                st = xllm_errorf(err, XLLM_ERR_FORMAT, "%s: Replace normalizer without \"content\"", path);
            else {
                n->a_len = strlen(n->a);
                n->b_len = strlen(n->b);
            }
        }
    } else {
        st = xllm_errorf(err, XLLM_ERR_UNSUPPORTED, "%s: unsupported normalizer type \"%s\"", path, type);
    }
    if (st) {
        tok_normalizer_free(n);
        return st;
    }
    *out = n;
    return XLLM_OK;
}

/* Replace every non-overlapping occurrence of pat in s by rep, into out. */
static int replace_all(const char *s, size_t len, const char *pat, size_t pat_len, const char *rep,
                       size_t rep_len, tok_buf *out) {
    out->len = 0;
    if (tok_buf_reserve(out, len)) return -1;
    size_t i = 0, start = 0;
    if (pat_len)
        while (i + pat_len <= len) {
            if (memcmp(s + i, pat, pat_len) == 0) {
                if (tok_buf_append(out, s + start, i - start) || tok_buf_append(out, rep, rep_len)) return -1;
                i += pat_len;
                start = i;
            } else {
                i++;
            }
        }
    return tok_buf_append(out, s + start, len - start);
}

/* Transform *cur in place (through scratch). */
static int norm_apply(const tok_normalizer *n, tok_buf *cur, tok_buf *scratch) {
    switch (n->type) {
    case NORM_SEQUENCE:
        for (size_t i = 0; i < n->n_kids; i++)
            if (norm_apply(n->kids[i], cur, scratch)) return -1;
        return 0;
    case NORM_PREPEND:
        if (cur->len == 0) return 0;
        scratch->len = 0;
        if (tok_buf_append(scratch, n->a, n->a_len) || tok_buf_append(scratch, cur->p, cur->len)) return -1;
        break;
    case NORM_REPLACE:
        if (replace_all(cur->p, cur->len, n->a, n->a_len, n->b, n->b_len, scratch)) return -1;
        break;
    }
    tok_buf t = *cur;
    *cur = *scratch;
    *scratch = t;
    return 0;
}

int tok_normalize(const tok_normalizer *n, const char *in, size_t len, tok_buf *out, tok_buf *scratch) {
    out->len = 0;
    if (tok_buf_append(out, in, len)) return -1;
    return n ? norm_apply(n, out, scratch) : 0;
}
