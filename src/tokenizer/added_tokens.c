/*
 * added_tokens.c - the `added_tokens` of tokenizer.json (special tokens such
 * as <s>, and user-added ones) and the first step of encoding: cutting the
 * input on them.
 *
 * As in HF: tokens with normalized=false are found in the raw input, those
 * with normalized=true in each normalized stretch (their pattern being their
 * normalized content). Matching is leftmost-longest over a byte trie (edges
 * in a hash map keyed by node and byte), so scanning costs O(input * longest
 * token) at worst. single_word rejects a match touching a word character
 * (Unicode \w, as HF's regex; the scan then resumes after it); lstrip /
 * rstrip make the token swallow the whitespace on its left / right (the scan
 * resumes at the end of the match itself, as HF's does). A token whose
 * content the model already has takes the model's id; "special" is decided
 * by content when decoding, as in HF.
 */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"

#include <string.h>

typedef struct {
    tok_u64map edges; /* (node << 8 | byte) -> child node */
    int32_t *term;    /* node -> token index ending here, -1 if none */
    size_t n_nodes, cap_nodes;
    uint8_t first[32]; /* bitmap of first bytes, to skip positions fast */
} trie;

struct tok_added {
    tok_added_token *tokens;
    size_t n;
    tok_strmap by_content;
    trie raw, norm;
    char **patterns; /* per token: the string matched (normalized content or NULL = content) */
    tok_strmap special; /* contents of special tokens */
    tok_regex *word;    /* \w, when a token is single_word */
};

static void trie_free(trie *t) {
    tok_u64map_free(&t->edges);
    xllm_free(t->term);
}

static int trie_node(trie *t) {
    if (array_reserve(&t->term, &t->cap_nodes, t->n_nodes + 1, sizeof *t->term, 64)) return -1;
    t->term[t->n_nodes] = -1;
    return (int)t->n_nodes++;
}

static int trie_insert(trie *t, const char *s, size_t len, int32_t tok) {
    if (!t->n_nodes && (tok_u64map_init(&t->edges, 64) || trie_node(t) < 0)) return -1;
    uint64_t node = 0, child;
    for (size_t i = 0; i < len; i++) {
        uint64_t key = node << 8 | (unsigned char)s[i];
        if (!tok_u64map_get(&t->edges, key, &child)) {
            int c = trie_node(t);
            if (c < 0 || tok_u64map_put(&t->edges, key, (uint64_t)c)) return -1;
            child = (uint64_t)c;
        }
        node = child;
    }
    t->term[node] = tok;
    t->first[(unsigned char)s[0] >> 3] |= (uint8_t)(1u << (s[0] & 7));
    return 0;
}

/* Longest token starting at s[i]: its index (or -1), its end in *end. */
static int32_t trie_longest(const trie *t, const char *s, size_t len, size_t i, size_t *end) {
    if (!t->n_nodes || !(t->first[(unsigned char)s[i] >> 3] & (1u << (s[i] & 7)))) return -1;
    uint64_t node = 0;
    int32_t best = -1;
    for (size_t k = i; k < len; k++) {
        if (!tok_u64map_get(&t->edges, node << 8 | (unsigned char)s[k], &node)) break;
        if (t->term[node] >= 0) {
            best = t->term[node];
            *end = k + 1;
        }
    }
    return best;
}

void tok_added_free(tok_added *a) {
    if (!a) return;
    for (size_t i = 0; i < a->n; i++) {
        xllm_free(a->tokens[i].content);
        if (a->patterns) xllm_free(a->patterns[i]);
    }
    xllm_free(a->tokens);
    xllm_free(a->patterns);
    tok_strmap_free(&a->by_content);
    tok_strmap_free(&a->special);
    tok_regex_free(a->word);
    trie_free(&a->raw);
    trie_free(&a->norm);
    xllm_free(a);
}

size_t tok_added_count(const tok_added *a) { return a ? a->n : 0; }
const tok_added_token *tok_added_get(const tok_added *a, size_t i) { return &a->tokens[i]; }

int32_t tok_added_token_to_id(const tok_added *a, const char *s, size_t len) {
    return a ? tok_strmap_get(&a->by_content, s, len) : -1;
}

int tok_added_is_special_content(const tok_added *a, const char *s, size_t len) {
    return a && tok_strmap_get(&a->special, s, len) >= 0;
}

static int get_flag(const cJSON *tok, const char *name, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(tok, name);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

xllm_status tok_added_parse(const cJSON *arr, const tok_normalizer *norm, const tok_bpe *model, const char *path,
                            tok_added **out, xllm_error *err) {
    *out = NULL;
    if (arr && !cJSON_IsNull(arr) && !cJSON_IsArray(arr))
        return err_setf(err, XLLM_ERR_FORMAT, "%s: \"added_tokens\" is not an array", path);
    size_t cnt = arr && cJSON_IsArray(arr) ? (size_t)cJSON_GetArraySize(arr) : 0;
    buf_t nb = {0}, scratch = {0}; /* a normalized content */
    tok_rx_ws *rx = tok_rx_ws_new();
    tok_added *a = rx ? mem_calloc(1, sizeof *a) : NULL;
    if (a) {
        a->tokens = mem_calloc(cnt ? cnt : 1, sizeof *a->tokens);
        a->patterns = mem_calloc(cnt ? cnt : 1, sizeof *a->patterns);
    }
    if (!a || !a->tokens || !a->patterns || tok_strmap_init(&a->by_content, cnt) || tok_strmap_init(&a->special, 8))
        goto oom;
    const cJSON *e;
    if (cnt) cJSON_ArrayForEach(e, arr) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        int32_t idv;
        if (!tok_json_int(id, 0, 0x7ffffffe, &idv) || !cJSON_IsString(content)) {
            buf_free(&nb);
            buf_free(&scratch);
            tok_rx_ws_free(rx);
            tok_added_free(a);
            return err_setf(err, XLLM_ERR_FORMAT, "%s: added token without an id and a content", path);
        }
        if (!content->valuestring[0]) continue; /* HF ignores empty added tokens */
        tok_added_token *t = &a->tokens[a->n];
        t->content = mem_strdup(content->valuestring);
        if (!t->content) goto oom;
        a->n++;
        t->len = strlen(t->content);
        t->id = idv;
        int32_t mid = model ? tok_bpe_token_to_id(model, t->content, t->len) : -1;
        if (mid >= 0) t->id = mid;
        t->special = (uint8_t)get_flag(e, "special", 0);
        t->lstrip = (uint8_t)get_flag(e, "lstrip", 0);
        t->rstrip = (uint8_t)get_flag(e, "rstrip", 0);
        t->single_word = (uint8_t)get_flag(e, "single_word", 0);
        t->normalized = (uint8_t)get_flag(e, "normalized", !t->special);
        if (tok_strmap_put(&a->by_content, t->content, t->len, t->id)) goto oom;
        if (t->special && tok_strmap_put(&a->special, t->content, t->len, t->id)) goto oom;
        if (t->single_word && !a->word) {
            xllm_status st = tok_regex_compile("\\w", 2, path, "single_word", &a->word, err);
            if (st) {
                buf_free(&nb);
                buf_free(&scratch);
                tok_rx_ws_free(rx);
                tok_added_free(a);
                return st;
            }
        }
        int32_t idx = (int32_t)(a->n - 1);
        if (!t->normalized) {
            if (trie_insert(&a->raw, t->content, t->len, idx)) goto oom;
            continue;
        }
        if (tok_normalize(norm, t->content, t->len, &nb, &scratch, rx, NULL)) goto oom;
        if (!nb.len) continue;
        a->patterns[idx] = mem_strndup(nb.p, nb.len);
        if (!a->patterns[idx] || trie_insert(&a->norm, nb.p, nb.len, idx)) goto oom;
    }
    buf_free(&nb);
    buf_free(&scratch);
    tok_rx_ws_free(rx);
    *out = a;
    return XLLM_OK;
oom:
    buf_free(&nb);
    buf_free(&scratch);
    tok_rx_ws_free(rx);
    tok_added_free(a);
    return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
}

/* ---------------------------------------------------------------- split */

/* Is there a \w character ending at s[end) (before = 1) or starting at s[at]? */
static int word_char_at(const tok_added *a, tok_rx_ws *rx, const char *s, size_t len, size_t at, int before) {
    if (before) {
        size_t st;
        if (u8_before(s, at, &st) < 0) return 0;
        at = st;
    }
    return tok_regex_match_at(a->word, rx, s, len, at) == 1;
}

static int push_text(tok_list *out, const char *s, size_t from, size_t to, int32_t base_flag) { /* to < from: nothing */
    if (to <= from) return 0;
    return tok_list_push(out, s + from, to - from, -1, from == 0 ? base_flag : 0);
}

int tok_added_split(const tok_added *a, int normalized, const char *s, size_t len, int32_t base_flag, tok_list *out,
                    tok_rx_ws *rx, int no_special, const uint8_t *plain) {
    const trie *t = a ? (normalized ? &a->norm : &a->raw) : NULL;
    size_t done = 0; /* input consumed up to here */
    size_t pos = 0;  /* scanning resumes here */
    if (t && t->n_nodes)
        while (pos < len) {
            size_t start = pos, stop = 0;
            int32_t idx = -1;
            for (; start < len; start++)
                if ((idx = trie_longest(t, s, len, start, &stop)) >= 0) break;
            if (idx < 0) break;
            const tok_added_token *tk = &a->tokens[idx];
            pos = stop;
            if (tk->special) {
                /* a special token's text where special tokens are not parsed stays text (HF's split_special_tokens) */
                int skip = no_special;
                for (size_t k = start; plain && !skip && k < stop; k++) skip = plain[k];
                if (skip) {
                    pos = start + 1;
                    while (pos < len && ((unsigned char)s[pos] & 0xC0) == 0x80) pos++;
                    continue;
                }
            }
            if (tk->single_word) {
                int left_ok = start == 0 || !word_char_at(a, rx, s, len, start, 1);
                int right_ok = stop == len || !word_char_at(a, rx, s, len, stop, 0);
                if (!left_ok || !right_ok) continue;
            }
            if (tk->lstrip) {
                size_t b = start, cs;
                while (b > 0 && tok_is_whitespace(u8_before(s, b, &cs))) b = cs;
                start = b > done ? b : done; /* HF: max(new start, end of the last split) */
            }
            if (tk->rstrip) {
                size_t l;
                while (stop < len && tok_is_whitespace(u8_decode((const unsigned char *)s + stop, len - stop, &l)))
                    stop += l;
            }
            if (push_text(out, s, done, start, base_flag)) return -1;
            if (tok_list_push(out, s + start, stop - start, tk->id, start == 0 ? base_flag : 0)) return -1;
            done = stop;
        }
    return push_text(out, s, done, len, base_flag);
}

int tok_added_next_special(const tok_added *a, const char *s, size_t len, size_t pos, size_t *b, size_t *e) {
    const trie *t = a ? &a->raw : NULL;
    if (!t || !t->n_nodes) return 0;
    for (size_t start = pos; start < len; start++) {
        size_t stop = 0;
        int32_t idx = trie_longest(t, s, len, start, &stop);
        if (idx >= 0 && a->tokens[idx].special) {
            *b = start;
            *e = stop;
            return 1;
        }
    }
    return 0;
}
