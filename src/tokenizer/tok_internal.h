/*
 * tok_internal.h - shared pieces of the tokenizer module (not public).
 *
 * The pipeline stages are small tagged components, each parsed from its
 * tokenizer.json object by its own file. They exchange text through two tiny
 * containers: buf_t (a growable byte string) and tok_list (a list of
 * strings packed in one buffer, each with an id and a flag). A stage reads a
 * list and writes a fresh one into a caller-provided scratch list, which is
 * then swapped in, so a long-lived caller (detok_stream) reuses its buffers
 * and allocates only when they grow.
 *
 * Stages that run regular expressions take a tok_rx_ws: the per-thread
 * matching state (PCRE2 match data and JIT stack). Stage functions return
 * 0 on success, TOK_ERR_OOM or TOK_ERR_REGEX.
 */
#ifndef XLLM_TOK_INTERNAL_H
#define XLLM_TOK_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "tokenizer/tokenizer.h"
#include "base/buf.h"
#include "base/utf8.h"

#define TOK_ERR_OOM (-1)
#define TOK_ERR_REGEX (-2) /* a match limit was hit (pathological pattern) */

/* ------------------------------------------------------------ containers */

/* Byte strings are base/buf.h's buf_t (a reused one is emptied with
 * buf_clear, which also clears a failed append's sticky error). */

typedef struct tok_span {
    size_t off, len;
    int32_t id;   /* added-token id for a split, -1 for plain text */
    int32_t flag; /* pre-tokens: 1 if the piece starts at original offset 0 */
} tok_span;

typedef struct tok_list {
    buf_t text;
    tok_span *items;
    size_t n, cap;
} tok_list;

/* Start a new (empty) item; its bytes are appended with tok_list_extend. */
int tok_list_begin(tok_list *l, int32_t id, int32_t flag);
int tok_list_extend(tok_list *l, const void *s, size_t n); /* onto the last item */
int tok_list_push(tok_list *l, const void *s, size_t n, int32_t id, int32_t flag);
static inline const char *tok_list_str(const tok_list *l, size_t i) { return l->text.p + l->items[i].off; }
void tok_list_clear(tok_list *l);
void tok_list_free(tok_list *l);
void tok_list_swap(tok_list *a, tok_list *b);

typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;

int tok_ids_push(tok_ids *a, int32_t id);
int tok_ids_append(tok_ids *a, const int32_t *ids, size_t n);

/* ---------------------------------------------------------------- hashing */

uint64_t tok_hash(const void *s, size_t n); /* fast 64-bit hash of bytes */
/* memmem for short needles (memchr on the first byte, then compare). */
static inline const char *tok_find(const char *hay, size_t n, const char *needle, size_t m) {
    if (!m) return hay;
    for (const char *end = hay + n; (size_t)(end - hay) >= m;) {
        const char *p = (const char *)memchr(hay, needle[0], (size_t)(end - hay) - m + 1);
        if (!p) return NULL;
        if (memcmp(p + 1, needle + 1, m - 1) == 0) return p;
        hay = p + 1;
    }
    return NULL;
}

/* string -> int32 (open addressing, one 16-byte slot per entry); keys are
 * borrowed and must outlive the map. */
typedef struct tok_strslot {
    const char *key;
    uint32_t len;
    int32_t val;
} tok_strslot;

typedef struct tok_strmap {
    tok_strslot *slots;
    size_t cap, n;
} tok_strmap;

int tok_strmap_init(tok_strmap *m, size_t expected);
int tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val); /* overwrites */
/* The same with its tok_hash known; never grows the table (init it big enough). */
void tok_strmap_put_h(tok_strmap *m, const char *key, uint32_t len, int32_t val, uint64_t h);
void tok_strmap_prefetch(const tok_strmap *m, uint64_t h);
int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len);    /* -1 absent */
int32_t tok_strmap_get_h(const tok_strmap *m, const char *key, size_t len, uint64_t h); /* h = tok_hash */
/* n lookups at once (h = their tok_hash): the memory they touch is
 * prefetched first, so the cache misses overlap. */
void tok_strmap_get_many(const tok_strmap *m, size_t n, const char *const *keys, const uint32_t *lens,
                         const uint64_t *h, int32_t *out);
void tok_strmap_free(tok_strmap *m);

/* uint64 -> uint64 (open addressing); UINT64_MAX is reserved as "empty". */
typedef struct tok_u64slot {
    uint64_t key, val;
} tok_u64slot;

typedef struct tok_u64map {
    tok_u64slot *slots;
    size_t cap, n;
} tok_u64map;

int tok_u64map_init(tok_u64map *m, size_t expected);
int tok_u64map_init_load(tok_u64map *m, size_t expected, int load_pct); /* table at most load_pct % full */
int tok_u64map_put(tok_u64map *m, uint64_t key, uint64_t val); /* overwrites */
int tok_u64map_get(const tok_u64map *m, uint64_t key, uint64_t *val); /* 1 found */
/* Insert n pairs in order (later keys overwrite earlier ones); the table
 * must have room for them without growing. */
void tok_u64map_put_many(tok_u64map *m, const tok_u64slot *kv, size_t n);
void tok_u64map_free(tok_u64map *m);

/* ------------------------------------------------------------------ UTF-8 */

/* Decoding, encoding, validation and lossy decoding are base/utf8.h's
 * (xllm_utf8_*): an invalid or truncated sequence counts as one byte, so any
 * input can be walked. */
int tok_is_whitespace(int32_t cp); /* Unicode White_Space (Rust char::is_whitespace) */

/* ------------------------------------------------------------ JSON helpers */

/* Copy a JSON string field; NULL item or JSON null -> *out = NULL. Returns -1
 * when the item exists but is not a string, -2 on out of memory. */
int tok_json_strdup(const cJSON *item, char **out);
const char *tok_json_type(const cJSON *obj); /* obj["type"] or NULL */

/* tok_json.c: a small scanner for the raw text of tokenizer.json, used for
 * the two huge members (model.vocab, model.merges) that are read without
 * building a cJSON tree. Pointers walk [p, end); NULL means malformed. */
const char *tok_js_ws(const char *p, const char *end);
const char *tok_js_skip(const char *p, const char *end); /* one value */
/* Read the string at p ('"'); *s and *len: a view into the source when it has
 * no escapes, else decoded into scratch. Returns the position after it. */
const char *tok_js_string(const char *p, const char *end, buf_t *scratch, const char **s, size_t *len);
/* Spans [start, end) of the values of model.vocab and model.merges in the
 * document (0, 0 when absent); -1 if the document is malformed. */
int tok_js_find_model_parts(const char *doc, size_t len, size_t vocab[2], size_t merges[2]);
/* The span of the top-level member `key` of the object doc (*v0 = NULL when
 * absent); -1 if doc is not a well-formed object. */
int tok_js_member(const char *doc, size_t len, const char *key, const char **v0, const char **v1);

/* ------------------------------------------------------------ regex (PCRE2) */

typedef struct tok_regex tok_regex;
typedef struct tok_rx_ws tok_rx_ws;
/* Compile a pattern written for HF tokenizers (Oniguruma syntax) with
 * UTF + UCP (+ JIT); `what` names the component in the error. */
xllm_status tok_regex_compile(const char *pat, size_t len, const char *path, const char *what, tok_regex **out,
                              xllm_error *err);
void tok_regex_free(tok_regex *re);
tok_rx_ws *tok_rx_ws_new(void);
void tok_rx_ws_free(tok_rx_ws *ws);
struct tok_ranges *tok_rx_ranges(tok_rx_ws *ws); /* scratch match list the stages share */
buf_t *tok_rx_buf(tok_rx_ws *ws);               /* scratch text the stages share */
/* Iterate matches as HF does (Oniguruma find_iter: an empty match right
 * after the previous match is skipped). *pos is the iteration state (start
 * at 0, with *last = SIZE_MAX). 1: match [*ms, *me); 0: no more; <0 error. */
int tok_regex_next(const tok_regex *re, tok_rx_ws *ws, const char *s, size_t len, size_t *pos, size_t *last,
                   size_t *ms, size_t *me);
/* Does the regex match at exactly s[at] (anchored)? 1 yes, 0 no, <0 error. */
int tok_regex_match_at(const tok_regex *re, tok_rx_ws *ws, const char *s, size_t len, size_t at);

/* -------------------------------------------------------------- Unicode */

typedef enum { TOK_NF_C, TOK_NF_D, TOK_NF_KC, TOK_NF_KD } tok_nf;
/* Normalize s into out (cleared first). Invalid UTF-8 bytes pass through. */
int tok_uni_normalize(tok_nf form, const char *s, size_t n, buf_t *out);
int tok_uni_lowercase(const char *s, size_t n, buf_t *out);    /* Rust char::to_lowercase */
int tok_uni_strip_accents(const char *s, size_t n, buf_t *out); /* drop combining marks (M*) */
int tok_uni_is_numeric(int32_t cp);     /* Rust char::is_numeric: N* */
int tok_uni_is_mark(int32_t cp);        /* M* (what StripAccents drops) */
int tok_uni_is_punctuation(int32_t cp); /* ASCII punctuation or P* */

/* ------------------------------------------------------------ byte level */

/* GPT-2's byte <-> printable character map. */
const char *tok_bytelevel_char(unsigned char b, size_t *len); /* UTF-8 of the char for byte b */
int tok_bytelevel_byte(int32_t cp); /* the byte a char stands for, -1 if none */
/* Map each byte of s to its char, appended to the last item of l. */
int tok_bytelevel_encode(tok_list *l, const char *s, size_t n);

/* ------------------------------------------------------------- components */

/* normalizer.c */
typedef struct tok_normalizer tok_normalizer;
xllm_status tok_normalizer_parse(const cJSON *j, const char *path, tok_normalizer **out, xllm_error *err);
void tok_normalizer_free(tok_normalizer *n);
/* Normalize in[0..len) into out (cleared first); scratch is working space.
 * *start_kept (may be NULL): 0 when leading characters were deleted, so the
 * output no longer starts at the input's offset 0. */
int tok_normalize(const tok_normalizer *n, const char *in, size_t len, buf_t *out, buf_t *scratch,
                  tok_rx_ws *rx, int *start_kept);

/* pre_tokenizer.c */
typedef struct tok_pretok tok_pretok;
xllm_status tok_pretok_parse(const cJSON *j, const char *path, tok_pretok **out, xllm_error *err);
void tok_pretok_free(tok_pretok *p);
/* Split/transform the pieces in *l (flag = starts at original offset 0). */
int tok_pretokenize(const tok_pretok *p, tok_list *l, tok_list *scratch, tok_rx_ws *rx);

/* pattern.c: a {"String": ...} or {"Regex": ...} pattern and its matches */
typedef struct tok_ranges {
    size_t *v; /* pairs: start, end */
    size_t n, cap; /* n pairs */
} tok_ranges;

typedef struct tok_pattern {
    char *lit; /* String pattern (lit_len may be 0), or NULL */
    size_t lit_len;
    tok_regex *re; /* Regex pattern */
} tok_pattern;

xllm_status tok_pattern_parse(const cJSON *pat, const char *path, const char *what, tok_pattern *out,
                              xllm_error *err);
void tok_pattern_free(tok_pattern *p);
/* All non-overlapping matches of p in s[0..len), left to right, into out
 * (cleared first). */
int tok_pattern_find(const tok_pattern *p, tok_rx_ws *rx, const char *s, size_t len, tok_ranges *out);
int tok_ranges_push(tok_ranges *r, size_t a, size_t b);
void tok_ranges_free(tok_ranges *r);

/* split.c: HF's NormalizedString::split given the matches of a pattern. */
typedef enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS } tok_split_behavior;
xllm_status tok_split_behavior_parse(const cJSON *j, const char *path, const char *what, tok_split_behavior *out,
                                     xllm_error *err);
/* Cut piece s[0..len) (flag = starts at original offset 0) into out per the
 * behaviour, given the matching ranges (sorted, disjoint); invert swaps
 * matches and the text between them; empty pieces are dropped. */
int tok_split_apply(tok_split_behavior b, const char *s, size_t len, int32_t flag, const tok_ranges *m, int invert,
                    tok_list *out);

/* bpe.c */
typedef struct tok_bpe tok_bpe;
typedef struct tok_bpe_ws tok_bpe_ws; /* per-call working memory (and the word cache) */
/* raw: the tokenizer.json text; vocab/merges: spans of those members in it. */
xllm_status tok_bpe_parse(const cJSON *j, const char *raw, const size_t vocab[2], const size_t merges[2],
                          const char *path, tok_bpe **out, xllm_error *err);
void tok_bpe_free(tok_bpe *m);
int32_t tok_bpe_vocab_max_id(const tok_bpe *m); /* -1 if empty */
size_t tok_bpe_vocab_count(const tok_bpe *m);   /* entries */
/* A JSON number that is an integer in [lo, hi] (ids, counts): 1 and *out, else 0
 * (1.5, 1e20 or a string is not silently truncated into an id). */
int tok_json_int(const cJSON *v, double lo, double hi, int32_t *out);
/* Iterate the vocabulary: piece of id, NULL where no piece has that id. */
const char *tok_bpe_id_to_token(const tok_bpe *m, int32_t id, size_t *len);
int32_t tok_bpe_token_to_id(const tok_bpe *m, const char *s, size_t len);
tok_bpe_ws *tok_bpe_ws_new(int with_cache);
void tok_bpe_ws_free(tok_bpe_ws *ws);
xllm_status tok_bpe_tokenize(const tok_bpe *m, const char *s, size_t len, tok_ids *out, tok_bpe_ws *ws,
                             xllm_error *err);

/* post_processor.c */
typedef struct tok_postproc tok_postproc;
/* Special-token names are resolved by the processor's own table. */
xllm_status tok_postproc_parse(const cJSON *j, const char *path, tok_postproc **out, xllm_error *err);
void tok_postproc_free(tok_postproc *p);
/* Wrap ids (a single sequence) with the template's special tokens. */
int tok_postprocess(const tok_postproc *p, const int32_t *ids, size_t n, tok_ids *out);
size_t tok_postproc_added(const tok_postproc *p); /* ids a single sequence gains */
int32_t tok_postproc_max_id(const tok_postproc *p); /* the largest id it inserts, -1 if none */

/* decoder.c */
typedef struct tok_decoder tok_decoder;
xllm_status tok_decoder_parse(const cJSON *j, const char *path, tok_decoder **out, xllm_error *err);
void tok_decoder_free(tok_decoder *d);
/* Run the decode chain over the token strings in *l (in place). */
int tok_decode_chain(const tok_decoder *d, tok_list *l, tok_list *scratch, tok_rx_ws *rx);
/* One token's bytes as they read inside a text (cur: the token string in, the
 * bytes out; tmp: scratch). 0, or TOK_ERR_*. */
int tok_decoder_token_bytes(const tok_decoder *d, buf_t *cur, buf_t *tmp, tok_rx_ws *rx);

/* added_tokens.c */
typedef struct tok_added_token {
    char *content;
    size_t len;
    int32_t id;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} tok_added_token;

typedef struct tok_added tok_added;
/* Tokens with normalized=true are matched in their normalized form. ids of
 * contents the model already has are the model's (as HF). */
xllm_status tok_added_parse(const cJSON *arr, const tok_normalizer *norm, const tok_bpe *model, const char *path,
                            tok_added **out, xllm_error *err);
void tok_added_free(tok_added *a);
size_t tok_added_count(const tok_added *a);
const tok_added_token *tok_added_get(const tok_added *a, size_t i);
int32_t tok_added_token_to_id(const tok_added *a, const char *s, size_t len); /* -1 absent */
int tok_added_is_special_content(const tok_added *a, const char *s, size_t len);
/* Split s[0..len) on added tokens (normalized = 0: tokens matched on raw
 * text; 1: on normalized text), HF style: leftmost-longest, honouring
 * single_word / lstrip / rstrip. Appends to out: text pieces (id -1) and
 * token pieces (id = token id). base_flag is copied to a piece at offset 0.
 * Special tokens are not matched when no_special is set, nor where they
 * overlap a byte with plain[i] = 1 (plain: NULL or len flags). */
/* The leftmost-longest raw match of a special token at or after pos: 1 with
 * its bytes [*b, *e), or 0. */
int tok_added_next_special(const tok_added *a, const char *s, size_t len, size_t pos, size_t *b, size_t *e);
int tok_added_split(const tok_added *a, int normalized, const char *s, size_t len, int32_t base_flag,
                    tok_list *out, tok_rx_ws *rx, int no_special, const uint8_t *plain);

/* truncation.c: tokenizer.json "truncation" and "padding" for one sequence */
typedef struct tok_trunc tok_trunc;
xllm_status tok_trunc_parse(const cJSON *trunc, const cJSON *pad, const char *path, tok_trunc **out,
                            xllm_error *err);
void tok_trunc_free(tok_trunc *t);
int32_t tok_trunc_pad_id(const tok_trunc *t); /* -1 without padding */
/* Truncate ids (before post-processing; `added` = ids the post-processor
 * will add) and pad after it. */
void tok_truncate(const tok_trunc *t, tok_ids *ids, size_t added);
int tok_pad(const tok_trunc *t, tok_ids *ids);

/* --------------------------------------------------------------- the whole */

typedef struct encode_ws encode_ws;

struct tokenizer {
    char *path; /* the tokenizer.json path, for messages */
    tok_normalizer *normalizer;
    tok_pretok *pretok;
    tok_bpe *model;
    tok_postproc *post;
    tok_decoder *decoder;
    tok_added *added;
    tok_trunc *trunc;
    const char **pieces; /* id -> token string (added tokens win); NULL = hole */
    uint32_t *piece_len; /* id -> its length in bytes */
    uint8_t *special;    /* id -> 1 when its string is a special added token */
    int32_t n_pieces;    /* max id + 1 */
    int32_t bos_id, eos_id;
    /* one reusable encode workspace with the BPE word cache, taken with a
     * try-lock (a concurrent caller builds its own, uncached) */
    pthread_mutex_t ws_lock;
    encode_ws *ws;
};

/* Decode (already filtered) ids into out (cleared first), reusing the lists.
 * Ids must have been validated by the caller. */
int tok_decode_into(const tokenizer *t, const int32_t *ids, size_t n, int skip_special, tok_list *toks,
                    tok_list *scratch, buf_t *out, tok_rx_ws *rx);

#endif
