/*
 * pattern.c - the patterns of Split, Replace (normalizer and decoder):
 * {"String": "..."} or {"Regex": "..."}, and finding all their matches.
 *
 * A String pattern is matched literally, non-overlapping, left to right (HF
 * runs it as an escaped regex, which is the same); an empty one never
 * matches. A Regex pattern goes to tok_regex.c (PCRE2).
 */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"

#include <string.h>

int tok_ranges_push(tok_ranges *r, size_t a, size_t b) {
    if (array_reserve(&r->v, &r->cap, r->n + 1, 2 * sizeof *r->v, 64)) return -1; /* (start, end) pairs */
    r->v[2 * r->n] = a;
    r->v[2 * r->n + 1] = b;
    r->n++;
    return 0;
}

void tok_ranges_free(tok_ranges *r) {
    xllm_free(r->v);
    memset(r, 0, sizeof *r);
}

void tok_pattern_free(tok_pattern *p) {
    xllm_free(p->lit);
    tok_regex_free(p->re);
    memset(p, 0, sizeof *p);
}

xllm_status tok_pattern_parse(const cJSON *pat, const char *path, const char *what, tok_pattern *out,
                              xllm_error *err) {
    memset(out, 0, sizeof *out);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(pat, "String");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
    if (cJSON_IsString(s)) {
        out->lit_len = strlen(s->valuestring);
        out->lit = mem_strdup(s->valuestring);
        return out->lit ? XLLM_OK : err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    if (cJSON_IsString(r)) return tok_regex_compile(r->valuestring, strlen(r->valuestring), path, what, &out->re, err);
    return err_setf(err, XLLM_ERR_FORMAT, "%s: %s without a String or Regex pattern", path, what);
}

int tok_pattern_find(const tok_pattern *p, tok_rx_ws *rx, const char *s, size_t len, tok_ranges *out) {
    out->n = 0;
    if (p->re) {
        size_t pos = 0, last = SIZE_MAX, ms, me;
        int rc;
        while ((rc = tok_regex_next(p->re, rx, s, len, &pos, &last, &ms, &me)) > 0)
            if (tok_ranges_push(out, ms, me)) return TOK_ERR_OOM;
        return rc;
    }
    if (!p->lit_len) return 0;
    size_t i = 0;
    while (i + p->lit_len <= len) {
        const char *hit = tok_find(s + i, len - i, p->lit, p->lit_len);
        if (!hit) break;
        size_t a = (size_t)(hit - s);
        if (tok_ranges_push(out, a, a + p->lit_len)) return TOK_ERR_OOM;
        i = a + p->lit_len;
    }
    return 0;
}
