/*
 * normalizer.c - the `normalizer` stage of tokenizer.json: text -> text,
 * applied to each stretch of input between added tokens.
 *
 * Implemented: Sequence, NFC, NFD, NFKC, NFKD (unicode.c, utf8proc),
 * Lowercase, Strip (Unicode whitespace on either side), StripAccents,
 * Prepend (adds its string in front of non-empty text), Replace with a
 * String or Regex pattern (all non-overlapping matches, left to right), and
 * ByteLevel (bytes to GPT-2's printable characters). Each step rewrites the
 * current buffer into a scratch buffer and swaps them, so a Sequence is just
 * a loop. Alignments to the original text are not tracked (xLLM does not
 * report offsets), except the one fact Metaspace's "first" scheme needs:
 * whether the text still starts at original offset 0, which is lost when a
 * step deletes the leading characters (Strip, StripAccents, a Replace by
 * nothing at offset 0). Anything else (e.g. Precompiled, BertNormalizer) is
 * a load error naming it.
 */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"

#include <string.h>

typedef enum {
    NORM_SEQUENCE, NORM_PREPEND, NORM_REPLACE, NORM_NF, NORM_LOWERCASE, NORM_STRIP, NORM_STRIP_ACCENTS,
    NORM_BYTE_LEVEL
} norm_type;

struct tok_normalizer {
    norm_type type;
    tok_normalizer **kids; /* Sequence */
    size_t n_kids;
    char *a;               /* Prepend: a; Replace: content */
    size_t a_len;
    tok_pattern pat;       /* Replace */
    tok_nf form;           /* NF* */
    int left, right;       /* Strip */
};

void tok_normalizer_free(tok_normalizer *n) {
    if (!n) return;
    for (size_t i = 0; i < n->n_kids; i++) tok_normalizer_free(n->kids[i]);
    xllm_free(n->kids);
    xllm_free(n->a);
    tok_pattern_free(&n->pat);
    xllm_free(n);
}

#define OOM() err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path)

static xllm_status parse_str(const cJSON *j, const char *field, const char *path, const char *what, tok_normalizer *n,
                             xllm_error *err) {
    int r = tok_json_strdup(cJSON_GetObjectItemCaseSensitive(j, field), &n->a);
    if (r == -2) return OOM();
    if (r || !n->a) return err_setf(err, XLLM_ERR_FORMAT, "%s: %s normalizer without \"%s\"", path, what, field);
    n->a_len = strlen(n->a);
    return XLLM_OK;
}

static xllm_status parse_one(const cJSON *j, const char *type, const char *path, tok_normalizer *n, xllm_error *err) {
    static const struct { const char *name; tok_nf form; } forms[] = {
        {"NFC", TOK_NF_C}, {"NFD", TOK_NF_D}, {"NFKC", TOK_NF_KC}, {"NFKD", TOK_NF_KD}};
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++)
        if (strcmp(type, forms[i].name) == 0) {
            n->type = NORM_NF;
            n->form = forms[i].form;
            return XLLM_OK;
        }
    if (strcmp(type, "Sequence") == 0) {
        n->type = NORM_SEQUENCE;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "normalizers");
        if (!cJSON_IsArray(arr))
            return err_setf(err, XLLM_ERR_FORMAT, "%s: Sequence normalizer without \"normalizers\"", path);
        int cnt = cJSON_GetArraySize(arr);
        n->kids = mem_calloc(cnt ? (size_t)cnt : 1, sizeof *n->kids);
        if (!n->kids) return OOM();
        const cJSON *k;
        cJSON_ArrayForEach(k, arr) {
            xllm_status st = tok_normalizer_parse(k, path, &n->kids[n->n_kids], err);
            if (st) return st;
            if (n->kids[n->n_kids]) n->n_kids++;
        }
        return XLLM_OK;
    }
    if (strcmp(type, "Prepend") == 0) {
        n->type = NORM_PREPEND;
        return parse_str(j, "prepend", path, "Prepend", n, err);
    }
    if (strcmp(type, "Replace") == 0) {
        n->type = NORM_REPLACE;
        xllm_status st = tok_pattern_parse(cJSON_GetObjectItemCaseSensitive(j, "pattern"), path, "Replace normalizer",
                                           &n->pat, err);
        return st ? st : parse_str(j, "content", path, "Replace", n, err);
    }
    if (strcmp(type, "Lowercase") == 0) {
        n->type = NORM_LOWERCASE;
        return XLLM_OK;
    }
    if (strcmp(type, "Strip") == 0) {
        n->type = NORM_STRIP;
        n->left = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "strip_left"));
        n->right = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "strip_right"));
        return XLLM_OK;
    }
    if (strcmp(type, "StripAccents") == 0) {
        n->type = NORM_STRIP_ACCENTS;
        return XLLM_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        n->type = NORM_BYTE_LEVEL;
        return XLLM_OK;
    }
    return err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: unsupported normalizer type \"%s\"", path, type);
}

xllm_status tok_normalizer_parse(const cJSON *j, const char *path, tok_normalizer **out, xllm_error *err) {
    *out = NULL;
    if (!j || cJSON_IsNull(j)) return XLLM_OK;
    if (!cJSON_IsObject(j)) return err_setf(err, XLLM_ERR_FORMAT, "%s: normalizer is not an object", path);
    const char *type = tok_json_type(j);
    if (!type) return err_setf(err, XLLM_ERR_FORMAT, "%s: normalizer without a \"type\"", path);
    tok_normalizer *n = mem_calloc(1, sizeof *n);
    if (!n) return OOM();
    xllm_status st = parse_one(j, type, path, n, err);
    if (st) {
        tok_normalizer_free(n);
        return st;
    }
    *out = n;
    return XLLM_OK;
}

/* Replace every match of the pattern in s by rep, into out. */
static int replace_all(const tok_normalizer *n, const char *s, size_t len, buf_t *out, tok_rx_ws *rx, int *kept) {
    tok_ranges *m = tok_rx_ranges(rx);
    int rc = tok_pattern_find(&n->pat, rx, s, len, m);
    if (rc < 0) return rc;
    if (m->n && m->v[0] == 0 && m->v[1] > 0 && n->a_len == 0) *kept = 0;
    buf_clear(out);
    if (buf_reserve(out, len)) return TOK_ERR_OOM;
    size_t start = 0;
    for (size_t i = 0; i < m->n; i++) {
        size_t a = m->v[2 * i], b = m->v[2 * i + 1];
        if (buf_append(out, s + start, a - start) || buf_append(out, n->a, n->a_len)) return TOK_ERR_OOM;
        start = b;
    }
    return buf_append(out, s + start, len - start) ? TOK_ERR_OOM : 0;
}

static int strip(const tok_normalizer *n, const char *s, size_t len, buf_t *out, int *kept) {
    size_t a = 0, b = len, l;
    while (n->left && a < b && tok_is_whitespace(u8_decode((const unsigned char *)s + a, b - a, &l))) a += l;
    if (a) *kept = 0;
    while (n->right && b > a) {
        size_t st;
        if (!tok_is_whitespace(u8_before(s, b, &st)) || st < a) break;
        b = st;
    }
    buf_clear(out);
    return buf_append(out, s + a, b - a);
}

static int byte_level(const char *s, size_t len, buf_t *out) {
    buf_clear(out);
    for (size_t i = 0; i < len; i++) {
        size_t l;
        const char *c = tok_bytelevel_char((unsigned char)s[i], &l);
        if (buf_append(out, c, l)) return -1;
    }
    return buf_reserve(out, 0);
}

/* Transform *cur in place (through scratch). */
static int norm_apply(const tok_normalizer *n, buf_t *cur, buf_t *scratch, tok_rx_ws *rx, int *kept) {
    int rc = 0;
    switch (n->type) {
    case NORM_SEQUENCE:
        for (size_t i = 0; i < n->n_kids; i++)
            if ((rc = norm_apply(n->kids[i], cur, scratch, rx, kept))) return rc;
        return 0;
    case NORM_PREPEND:
        if (cur->len == 0) return 0;
        buf_clear(scratch);
        rc = buf_append(scratch, n->a, n->a_len) || buf_append(scratch, cur->p, cur->len) ? TOK_ERR_OOM : 0;
        break;
    case NORM_REPLACE: rc = replace_all(n, cur->p, cur->len, scratch, rx, kept); break;
    case NORM_NF: rc = tok_uni_normalize(n->form, cur->p, cur->len, scratch) ? TOK_ERR_OOM : 0; break;
    case NORM_LOWERCASE: rc = tok_uni_lowercase(cur->p, cur->len, scratch) ? TOK_ERR_OOM : 0; break;
    case NORM_STRIP: rc = strip(n, cur->p, cur->len, scratch, kept) ? TOK_ERR_OOM : 0; break;
    case NORM_STRIP_ACCENTS:
        rc = tok_uni_strip_accents(cur->p, cur->len, scratch) ? TOK_ERR_OOM : 0;
        if (!rc && scratch->len < cur->len) { /* was the first character dropped? */
            int32_t c0 = u8_decode((const unsigned char *)cur->p, cur->len, &(size_t){0});
            if (c0 >= 0 && tok_uni_is_mark(c0)) *kept = 0;
        }
        break;
    case NORM_BYTE_LEVEL: rc = byte_level(cur->p, cur->len, scratch) ? TOK_ERR_OOM : 0; break;
    }
    if (rc) return rc;
    buf_t t = *cur;
    *cur = *scratch;
    *scratch = t;
    return 0;
}

int tok_normalize(const tok_normalizer *n, const char *in, size_t len, buf_t *out, buf_t *scratch,
                  tok_rx_ws *rx, int *start_kept) {
    int kept = 1;
    buf_clear(out);
    if (buf_append(out, in, len)) return TOK_ERR_OOM;
    int rc = n ? norm_apply(n, out, scratch, rx, &kept) : 0;
    if (start_kept) *start_kept = kept;
    return rc;
}
