/*
 * pre_tokenizer.c - the `pre_tokenizer` stage: splits normalized text into
 * the pieces ("words") the model tokenizes one at a time.
 *
 * Implemented, as HF: Sequence; Split (String or Regex pattern, any
 * behaviour, invert); ByteLevel (a space in front of each piece that lacks
 * one when add_prefix_space, the GPT-2 regex when use_regex, then bytes to
 * GPT-2's printable characters); Metaspace (' ' -> the replacement, which is
 * prepended per prepend_scheme: always; first = only for a piece starting
 * at offset 0 of the original input; never; and with split=true each
 * replacement starts a new piece); Digits (each digit alone, or runs);
 * Punctuation; Whitespace (\w+|[^\w\s]+); WhitespaceSplit; CharDelimiterSplit;
 * BertPreTokenizer. Character-class splits treat each matching character as
 * one match (HF's char-predicate patterns). Every piece carries the "starts
 * at original offset 0" flag; empty pieces are dropped.
 */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"

#include <string.h>

typedef enum {
    PRE_SEQUENCE, PRE_METASPACE, PRE_SPLIT, PRE_BYTE_LEVEL, PRE_DIGITS, PRE_PUNCTUATION, PRE_WHITESPACE,
    PRE_WHITESPACE_SPLIT, PRE_CHAR_DELIMITER, PRE_BERT
} pre_type;
typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } prepend_scheme;

#define GPT2_REGEX "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define WHITESPACE_REGEX "\\w+|[^\\w\\s]+"

struct tok_pretok {
    pre_type type;
    tok_pretok **kids; /* Sequence */
    size_t n_kids;
    char repl[8];      /* Metaspace replacement / CharDelimiterSplit delimiter (one UTF-8 char) */
    size_t repl_len;
    prepend_scheme scheme;
    int split;         /* Metaspace */
    tok_pattern pat;   /* Split; ByteLevel / Whitespace: their regex in pat.re */
    tok_split_behavior behavior;
    int invert;
    int add_prefix_space, use_regex; /* ByteLevel */
    int individual;    /* Digits */
};

void tok_pretok_free(tok_pretok *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_kids; i++) tok_pretok_free(p->kids[i]);
    xllm_free(p->kids);
    tok_pattern_free(&p->pat);
    xllm_free(p);
}

#define OOM() err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path)

static int get_bool(const cJSON *j, const char *name, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static xllm_status one_char(const cJSON *j, const char *field, const char *path, const char *what, tok_pretok *p,
                            xllm_error *err) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, field);
    size_t len = cJSON_IsString(r) ? strlen(r->valuestring) : 0;
    if (!len || len >= sizeof p->repl || u8_len((const unsigned char *)r->valuestring, len) != len)
        return err_setf(err, XLLM_ERR_FORMAT, "%s: %s needs a one-character \"%s\"", path, what, field);
    memcpy(p->repl, r->valuestring, len);
    p->repl_len = len;
    return XLLM_OK;
}

static xllm_status parse_metaspace(const cJSON *j, const char *path, tok_pretok *p, xllm_error *err) {
    p->type = PRE_METASPACE;
    xllm_status st = one_char(j, "replacement", path, "Metaspace", p, err);
    if (st) return st;
    p->scheme = PREPEND_ALWAYS;
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(j, "prepend_scheme");
    const cJSON *aps = cJSON_GetObjectItemCaseSensitive(j, "add_prefix_space"); /* older files */
    if (cJSON_IsString(ps)) {
        if (strcmp(ps->valuestring, "always") == 0) p->scheme = PREPEND_ALWAYS;
        else if (strcmp(ps->valuestring, "first") == 0) p->scheme = PREPEND_FIRST;
        else if (strcmp(ps->valuestring, "never") == 0) p->scheme = PREPEND_NEVER;
        else
            return err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: unsupported Metaspace prepend_scheme \"%s\"", path,
                               ps->valuestring);
    } else if (cJSON_IsBool(aps)) {
        p->scheme = cJSON_IsTrue(aps) ? PREPEND_ALWAYS : PREPEND_NEVER;
    }
    p->split = get_bool(j, "split", 1);
    return XLLM_OK;
}

static xllm_status parse_one(const cJSON *j, const char *type, const char *path, tok_pretok *p, xllm_error *err) {
    if (strcmp(type, "Sequence") == 0) {
        p->type = PRE_SEQUENCE;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers");
        if (!cJSON_IsArray(arr))
            return err_setf(err, XLLM_ERR_FORMAT, "%s: Sequence pre_tokenizer without \"pretokenizers\"", path);
        int cnt = cJSON_GetArraySize(arr);
        p->kids = mem_calloc(cnt ? (size_t)cnt : 1, sizeof *p->kids);
        if (!p->kids) return OOM();
        const cJSON *k;
        cJSON_ArrayForEach(k, arr) {
            xllm_status st = tok_pretok_parse(k, path, &p->kids[p->n_kids], err);
            if (st) return st;
            if (p->kids[p->n_kids]) p->n_kids++;
        }
        return XLLM_OK;
    }
    if (strcmp(type, "Metaspace") == 0) return parse_metaspace(j, path, p, err);
    if (strcmp(type, "Split") == 0) {
        p->type = PRE_SPLIT;
        xllm_status st = tok_pattern_parse(cJSON_GetObjectItemCaseSensitive(j, "pattern"), path, "Split pre_tokenizer",
                                           &p->pat, err);
        if (!st) st = tok_split_behavior_parse(cJSON_GetObjectItemCaseSensitive(j, "behavior"), path,
                                               "Split pre_tokenizer", &p->behavior, err);
        p->invert = get_bool(j, "invert", 0);
        return st;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        p->type = PRE_BYTE_LEVEL;
        p->add_prefix_space = get_bool(j, "add_prefix_space", 1);
        p->use_regex = get_bool(j, "use_regex", 1);
        if (!p->use_regex) return XLLM_OK;
        return tok_regex_compile(GPT2_REGEX, strlen(GPT2_REGEX), path, "ByteLevel", &p->pat.re, err);
    }
    if (strcmp(type, "Digits") == 0) {
        p->type = PRE_DIGITS;
        p->individual = get_bool(j, "individual_digits", 0);
        return XLLM_OK;
    }
    if (strcmp(type, "Punctuation") == 0) {
        p->type = PRE_PUNCTUATION;
        p->behavior = SPLIT_ISOLATED;
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "behavior");
        return b ? tok_split_behavior_parse(b, path, "Punctuation pre_tokenizer", &p->behavior, err) : XLLM_OK;
    }
    if (strcmp(type, "Whitespace") == 0) {
        p->type = PRE_WHITESPACE;
        return tok_regex_compile(WHITESPACE_REGEX, strlen(WHITESPACE_REGEX), path, "Whitespace", &p->pat.re, err);
    }
    if (strcmp(type, "WhitespaceSplit") == 0) {
        p->type = PRE_WHITESPACE_SPLIT;
        return XLLM_OK;
    }
    if (strcmp(type, "CharDelimiterSplit") == 0) {
        p->type = PRE_CHAR_DELIMITER;
        return one_char(j, "delimiter", path, "CharDelimiterSplit", p, err);
    }
    if (strcmp(type, "BertPreTokenizer") == 0) {
        p->type = PRE_BERT;
        return XLLM_OK;
    }
    return err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: unsupported pre_tokenizer type \"%s\"", path, type);
}

xllm_status tok_pretok_parse(const cJSON *j, const char *path, tok_pretok **out, xllm_error *err) {
    *out = NULL;
    if (!j || cJSON_IsNull(j)) return XLLM_OK;
    if (!cJSON_IsObject(j)) return err_setf(err, XLLM_ERR_FORMAT, "%s: pre_tokenizer is not an object", path);
    const char *type = tok_json_type(j);
    if (!type) return err_setf(err, XLLM_ERR_FORMAT, "%s: pre_tokenizer without a \"type\"", path);
    tok_pretok *p = mem_calloc(1, sizeof *p);
    if (!p) return OOM();
    xllm_status st = parse_one(j, type, path, p, err);
    if (st) {
        tok_pretok_free(p);
        return st;
    }
    *out = p;
    return XLLM_OK;
}

/* ------------------------------------------------------------- running */

typedef int (*char_pred)(int32_t cp, const tok_pretok *p);

static int pred_numeric(int32_t cp, const tok_pretok *p) { (void)p; return tok_uni_is_numeric(cp); }
static int pred_punct(int32_t cp, const tok_pretok *p) { (void)p; return tok_uni_is_punctuation(cp); }
static int pred_space(int32_t cp, const tok_pretok *p) { (void)p; return tok_is_whitespace(cp); }

/* Each character of s satisfying pred is one match. */
static int char_matches(const char *s, size_t len, char_pred pred, const tok_pretok *p, tok_ranges *m) {
    m->n = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t l;
        int32_t cp = u8_decode(u + i, len - i, &l);
        if (cp >= 0 && pred(cp, p) && tok_ranges_push(m, i, i + l)) return TOK_ERR_OOM;
        i += l;
    }
    return 0;
}

static int literal_matches(const char *s, size_t len, const char *lit, size_t lit_len, tok_ranges *m) {
    m->n = 0;
    for (size_t i = 0; i + lit_len <= len;) {
        const char *hit = tok_find(s + i, len - i, lit, lit_len);
        if (!hit) break;
        size_t a = (size_t)(hit - s);
        if (tok_ranges_push(m, a, a + lit_len)) return TOK_ERR_OOM;
        i = a + lit_len;
    }
    return 0;
}

/* Metaspace on one piece: replace ' ', prepend, split before replacements. */
static int metaspace_piece(const tok_pretok *p, const char *s, size_t len, int32_t flag, tok_list *out,
                           tok_rx_ws *rx) {
    buf_t *t = tok_rx_buf(rx);
    buf_clear(t);
    int starts = (len && s[0] == ' ') || (len >= p->repl_len && memcmp(s, p->repl, p->repl_len) == 0);
    int prepend = p->scheme == PREPEND_ALWAYS || (p->scheme == PREPEND_FIRST && flag);
    if (prepend && !starts && buf_append(t, p->repl, p->repl_len)) return TOK_ERR_OOM;
    for (size_t i = 0; i < len;) {
        const char *sp = memchr(s + i, ' ', len - i);
        size_t j = sp ? (size_t)(sp - s) : len;
        if (buf_append(t, s + i, j - i)) return TOK_ERR_OOM;
        if (j < len && buf_append(t, p->repl, p->repl_len)) return TOK_ERR_OOM;
        i = j + 1;
    }
    if (!p->split) return t->len && tok_list_push(out, t->p, t->len, -1, flag) ? TOK_ERR_OOM : 0;
    tok_ranges *m = tok_rx_ranges(rx);
    if (literal_matches(t->p, t->len, p->repl, p->repl_len, m)) return TOK_ERR_OOM;
    return tok_split_apply(SPLIT_MERGED_NEXT, t->p, t->len, flag, m, 0, out);
}

static int byte_level_piece(const tok_pretok *p, const char *s, size_t len, int32_t flag, tok_list *out,
                            tok_rx_ws *rx) {
    buf_t *t = tok_rx_buf(rx);
    if (p->add_prefix_space && !(len && s[0] == ' ')) {
        buf_clear(t);
        if (buf_append(t, " ", 1) || buf_append(t, s, len)) return TOK_ERR_OOM;
        s = t->p;
        len = t->len;
    }
    if (!p->use_regex) {
        if (!len) return 0;
        return tok_list_begin(out, -1, flag) || tok_bytelevel_encode(out, s, len) ? TOK_ERR_OOM : 0;
    }
    size_t pos = 0, last = SIZE_MAX, ms, me, done = 0;
    int rc;
    while ((rc = tok_regex_next(p->pat.re, rx, s, len, &pos, &last, &ms, &me)) > 0) {
        if (ms > done && (tok_list_begin(out, -1, done == 0 ? flag : 0) || tok_bytelevel_encode(out, s + done, ms - done)))
            return TOK_ERR_OOM;
        if (me > ms && (tok_list_begin(out, -1, ms == 0 ? flag : 0) || tok_bytelevel_encode(out, s + ms, me - ms)))
            return TOK_ERR_OOM;
        done = me;
    }
    if (rc < 0) return rc;
    if (len > done && (tok_list_begin(out, -1, done == 0 ? flag : 0) || tok_bytelevel_encode(out, s + done, len - done)))
        return TOK_ERR_OOM;
    return 0;
}

static int piece_apply(const tok_pretok *p, const char *s, size_t len, int32_t flag, tok_list *out, tok_rx_ws *rx) {
    tok_ranges *m = tok_rx_ranges(rx);
    int rc;
    switch (p->type) {
    case PRE_METASPACE: return metaspace_piece(p, s, len, flag, out, rx);
    case PRE_BYTE_LEVEL: return byte_level_piece(p, s, len, flag, out, rx);
    case PRE_SPLIT:
        if ((rc = tok_pattern_find(&p->pat, rx, s, len, m)) < 0) return rc;
        return tok_split_apply(p->behavior, s, len, flag, m, p->invert, out);
    case PRE_DIGITS:
        if (char_matches(s, len, pred_numeric, p, m)) return TOK_ERR_OOM;
        return tok_split_apply(p->individual ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS, s, len, flag, m, 0, out);
    case PRE_PUNCTUATION:
        if (char_matches(s, len, pred_punct, p, m)) return TOK_ERR_OOM;
        return tok_split_apply(p->behavior, s, len, flag, m, 0, out);
    case PRE_WHITESPACE:
        if ((rc = tok_pattern_find(&p->pat, rx, s, len, m)) < 0) return rc;
        return tok_split_apply(SPLIT_REMOVED, s, len, flag, m, 1, out);
    case PRE_WHITESPACE_SPLIT:
        if (char_matches(s, len, pred_space, p, m)) return TOK_ERR_OOM;
        return tok_split_apply(SPLIT_REMOVED, s, len, flag, m, 0, out);
    case PRE_CHAR_DELIMITER:
        if (literal_matches(s, len, p->repl, p->repl_len, m)) return TOK_ERR_OOM;
        return tok_split_apply(SPLIT_REMOVED, s, len, flag, m, 0, out);
    case PRE_BERT: /* whitespace removed, then punctuation isolated */
    case PRE_SEQUENCE:
        break;
    }
    return 0;
}

static int pretok_apply(const tok_pretok *p, tok_list *l, tok_list *scratch, tok_rx_ws *rx) {
    if (p->type == PRE_SEQUENCE) {
        for (size_t i = 0; i < p->n_kids; i++) {
            int rc = pretok_apply(p->kids[i], l, scratch, rx);
            if (rc) return rc;
        }
        return 0;
    }
    if (p->type == PRE_BERT) {
        static const tok_pretok ws = {.type = PRE_WHITESPACE_SPLIT}, punct = {.type = PRE_PUNCTUATION, .behavior = SPLIT_ISOLATED};
        int rc = pretok_apply(&ws, l, scratch, rx);
        return rc ? rc : pretok_apply(&punct, l, scratch, rx);
    }
    tok_list_clear(scratch);
    for (size_t i = 0; i < l->n; i++) {
        int rc = piece_apply(p, tok_list_str(l, i), l->items[i].len, l->items[i].flag, scratch, rx);
        if (rc) return rc;
    }
    tok_list_swap(l, scratch);
    return 0;
}

int tok_pretokenize(const tok_pretok *p, tok_list *l, tok_list *scratch, tok_rx_ws *rx) {
    return p ? pretok_apply(p, l, scratch, rx) : 0;
}
