/*
 * tok_internal.h - shared pieces of the tokenizer module (not public).
 *
 * The pipeline stages are small tagged components, each parsed from its
 * tokenizer.json object by its own file. They exchange text through two tiny
 * containers: tok_buf (a growable byte string) and tok_list (a list of
 * strings packed in one buffer, each with an id and a flag). A stage reads a
 * list and writes a fresh one into a caller-provided scratch list, which is
 * then swapped in, so a long-lived caller (detok_stream) reuses its buffers
 * and allocates only when they grow.
 */
#ifndef XLLM_TOK_INTERNAL_H
#define XLLM_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "tokenizer/tokenizer.h"

/* ------------------------------------------------------------ containers */

typedef struct tok_buf {
    char *p;
    size_t len, cap;
} tok_buf;

int tok_buf_reserve(tok_buf *b, size_t extra); /* 0 ok, -1 out of memory */
int tok_buf_append(tok_buf *b, const void *s, size_t n);
void tok_buf_free(tok_buf *b);

typedef struct tok_span {
    size_t off, len;
    int32_t id;   /* added-token id for a split, -1 for plain text */
    int32_t flag; /* pre-tokens: 1 if the piece starts at original offset 0 */
} tok_span;

typedef struct tok_list {
    tok_buf text;
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

/* ---------------------------------------------------------------- hashing */

/* string -> int32 (open addressing); keys are borrowed and must outlive it. */
typedef struct tok_strmap {
    const char **keys;
    uint32_t *lens;
    int32_t *vals;
    size_t cap, n;
} tok_strmap;

int tok_strmap_init(tok_strmap *m, size_t expected);
int tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val); /* overwrites */
int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len);    /* -1 absent */
void tok_strmap_free(tok_strmap *m);

/* uint64 -> uint64 (open addressing); UINT64_MAX is reserved as "empty". */
typedef struct tok_u64map {
    uint64_t *keys, *vals;
    size_t cap, n;
} tok_u64map;

int tok_u64map_init(tok_u64map *m, size_t expected);
int tok_u64map_put(tok_u64map *m, uint64_t key, uint64_t val); /* overwrites */
int tok_u64map_get(const tok_u64map *m, uint64_t key, uint64_t *val); /* 1 found */
void tok_u64map_free(tok_u64map *m);

/* ------------------------------------------------------------------ UTF-8 */

/* Byte length of the character at s (n > 0 bytes left). An invalid or
 * truncated sequence counts as one byte, so any input can be walked. */
size_t tok_utf8_len(const unsigned char *s, size_t n);
/* Code point at s, or -1 for an invalid sequence; *len as tok_utf8_len. */
int32_t tok_utf8_decode(const unsigned char *s, size_t n, size_t *len);
int tok_is_whitespace(int32_t cp); /* Unicode White_Space (Rust char::is_whitespace) */
/* n minus the bytes of an unfinished multi-byte sequence at the end of s
 * (a lead byte not yet followed by all its continuation bytes). */
size_t tok_utf8_complete_prefix(const char *s, size_t n);
int tok_utf8_valid(const char *s, size_t n);

/* ------------------------------------------------------------ JSON helpers */

/* Copy a JSON string field; NULL item or JSON null -> *out = NULL. Returns -1
 * when the item exists but is not a string, -2 on out of memory. */
int tok_json_strdup(const cJSON *item, char **out);
const char *tok_json_type(const cJSON *obj); /* obj["type"] or NULL */

/* ------------------------------------------------------------- components */

/* normalizer.c */
typedef struct tok_normalizer tok_normalizer;
xllm_status tok_normalizer_parse(const cJSON *j, const char *path, tok_normalizer **out, xllm_error *err);
void tok_normalizer_free(tok_normalizer *n);
/* Normalize in[0..len) into out (cleared first); scratch is working space. */
int tok_normalize(const tok_normalizer *n, const char *in, size_t len, tok_buf *out, tok_buf *scratch);

/* pre_tokenizer.c */
typedef struct tok_pretok tok_pretok;
xllm_status tok_pretok_parse(const cJSON *j, const char *path, tok_pretok **out, xllm_error *err);
void tok_pretok_free(tok_pretok *p);
/* Split/transform the pieces in *l (flag = starts at original offset 0). */
int tok_pretokenize(const tok_pretok *p, tok_list *l, tok_list *scratch);

/* bpe.c */
typedef struct tok_bpe tok_bpe;
typedef struct tok_bpe_ws tok_bpe_ws; /* per-call working memory */
xllm_status tok_bpe_parse(const cJSON *j, const char *path, tok_bpe **out, xllm_error *err);
void tok_bpe_free(tok_bpe *m);
int32_t tok_bpe_vocab_max_id(const tok_bpe *m); /* -1 if empty */
/* Iterate the vocabulary: piece of id, NULL where no piece has that id. */
const char *tok_bpe_id_to_token(const tok_bpe *m, int32_t id);
int32_t tok_bpe_token_to_id(const tok_bpe *m, const char *s, size_t len);
tok_bpe_ws *tok_bpe_ws_new(void);
void tok_bpe_ws_free(tok_bpe_ws *ws);
xllm_status tok_bpe_tokenize(const tok_bpe *m, const char *s, size_t len, tok_ids *out,
                             tok_bpe_ws *ws, xllm_error *err);

/* post_processor.c */
typedef struct tok_postproc tok_postproc;
/* Special-token names are resolved by the processor's own table. */
xllm_status tok_postproc_parse(const cJSON *j, const char *path, tok_postproc **out, xllm_error *err);
void tok_postproc_free(tok_postproc *p);
/* Wrap ids (a single sequence) with the template's special tokens. */
int tok_postprocess(const tok_postproc *p, const int32_t *ids, size_t n, tok_ids *out);

/* decoder.c */
typedef struct tok_decoder tok_decoder;
xllm_status tok_decoder_parse(const cJSON *j, const char *path, tok_decoder **out, xllm_error *err);
void tok_decoder_free(tok_decoder *d);
/* Run the decode chain over the token strings in *l (in place). */
int tok_decode_chain(const tok_decoder *d, tok_list *l, tok_list *scratch);

/* added_tokens.c */
typedef struct tok_added_token {
    char *content;
    size_t len;
    int32_t id;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} tok_added_token;

typedef struct tok_added tok_added;
/* Tokens with normalized=true are matched in their normalized form. */
xllm_status tok_added_parse(const cJSON *arr, const tok_normalizer *norm, const char *path, tok_added **out,
                            xllm_error *err);
void tok_added_free(tok_added *a);
size_t tok_added_count(const tok_added *a);
const tok_added_token *tok_added_get(const tok_added *a, size_t i);
int32_t tok_added_token_to_id(const tok_added *a, const char *s, size_t len); /* -1 absent */
/* Split s[0..len) on added tokens (normalized = 0: tokens matched on raw
 * text; 1: on normalized text), HF style: leftmost-longest, honouring
 * single_word / lstrip / rstrip. Appends to out: text pieces (id -1) and
 * token pieces (id = token id). base_flag is copied to a piece at offset 0. */
int tok_added_split(const tok_added *a, int normalized, const char *s, size_t len, int32_t base_flag,
                    tok_list *out);

/* --------------------------------------------------------------- the whole */

struct tokenizer {
    char *path; /* the tokenizer.json path, for messages */
    tok_normalizer *normalizer;
    tok_pretok *pretok;
    tok_bpe *model;
    tok_postproc *post;
    tok_decoder *decoder;
    tok_added *added;
    const char **pieces; /* id -> token string (added tokens win); NULL = hole */
    uint8_t *special;    /* id -> 1 for special added tokens */
    int32_t n_pieces;    /* max id + 1 */
    int32_t bos_id, eos_id;
};

/* Decode (already filtered) ids into out (cleared first), reusing the lists.
 * Ids must have been validated by the caller. */
int tok_decode_into(const tokenizer *t, const int32_t *ids, size_t n, int skip_special, tok_list *toks,
                    tok_list *scratch, tok_buf *out);

#endif
