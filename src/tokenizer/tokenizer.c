/*
 * tokenizer.c - loading tokenizer.json and running the HF pipeline.
 *
 * Load: the file is read once; the two huge members (model.vocab and
 * model.merges) are located by tok_json.c and read by bpe.c straight from
 * the text, and cJSON parses the rest with those two values blanked out.
 * Each stage (normalizer, pre_tokenizer, model, post_processor, decoder,
 * added_tokens, truncation / padding) is parsed by its own file; anything
 * unknown fails the load with XLLM_ERR_UNSUPPORTED naming it.
 * tokenizer_config.json, when present next to tokenizer.json, is only read
 * for the bos / eos tokens.
 *
 * Encode, as HF: split the input on raw-matched added tokens; normalize each
 * remaining stretch and split it on normalized-matched added tokens; pre-
 * tokenize the text pieces; BPE each piece; then truncation, the
 * post-processor template if asked, padding. Decode: ids -> token strings
 * (added tokens first), special ones dropped on request, then the decoder
 * chain (no decoder: the strings joined by spaces).
 *
 * The tokenizer keeps one encode workspace (buffers, regex state and the BPE
 * word cache) that a call takes with a try-lock; a concurrent call that
 * finds it busy builds a private one, so calls never block each other.
 */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/file.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct encode_ws {
    tok_list splits, pieces, words, scratch;
    buf_t norm, norm_scratch;
    tok_ids ids, out;
    tok_bpe_ws *bpe;
    tok_rx_ws *rx;
};

static void encode_ws_free(encode_ws *w) {
    if (!w) return;
    tok_list_free(&w->splits);
    tok_list_free(&w->pieces);
    tok_list_free(&w->words);
    tok_list_free(&w->scratch);
    buf_free(&w->norm);
    buf_free(&w->norm_scratch);
    xllm_free(w->ids.v);
    xllm_free(w->out.v);
    tok_bpe_ws_free(w->bpe);
    tok_rx_ws_free(w->rx);
    xllm_free(w);
}

static encode_ws *encode_ws_new(int with_cache) {
    encode_ws *w = mem_calloc(1, sizeof *w);
    if (!w) return NULL;
    w->bpe = tok_bpe_ws_new(with_cache);
    w->rx = tok_rx_ws_new();
    if (!w->bpe || !w->rx) {
        encode_ws_free(w);
        return NULL;
    }
    return w;
}

/* The shared workspace when free (*shared = 1), else a private one. */
static encode_ws *ws_take(const tokenizer *t, int *shared) {
    tokenizer *mt = (tokenizer *)t; /* the lock and the workspace are the mutable part */
    *shared = 0;
    if (pthread_mutex_trylock(&mt->ws_lock) == 0) {
        if (!mt->ws) mt->ws = encode_ws_new(1);
        if (mt->ws) {
            *shared = 1;
            return mt->ws;
        }
        pthread_mutex_unlock(&mt->ws_lock);
    }
    return encode_ws_new(0);
}

static void ws_give(const tokenizer *t, encode_ws *w, int shared) {
    tokenizer *mt = (tokenizer *)t;
    if (!shared) {
        encode_ws_free(w);
        return;
    }
    /* do not keep buffers sized for one huge input */
    const size_t big = (size_t)16 << 20;
    if (w->splits.text.cap > big || w->words.text.cap > big || w->scratch.text.cap > big || w->norm.cap > big ||
        w->pieces.text.cap > big || w->out.cap > big / 4 || w->ids.cap > big / 4) {
        encode_ws_free(w);
        mt->ws = NULL;
    }
    pthread_mutex_unlock(&mt->ws_lock);
}

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    tok_normalizer_free(t->normalizer);
    tok_pretok_free(t->pretok);
    tok_bpe_free(t->model);
    tok_postproc_free(t->post);
    tok_decoder_free(t->decoder);
    tok_added_free(t->added);
    tok_trunc_free(t->trunc);
    encode_ws_free(t->ws);
    pthread_mutex_destroy(&t->ws_lock);
    xllm_free((void *)t->pieces);
    xllm_free(t->piece_len);
    xllm_free(t->special);
    xllm_free(t->path);
    xllm_free(t);
}

static xllm_status parse_model(const cJSON *j, const char *raw, const size_t vocab[2], const size_t merges[2],
                               const char *path, tok_bpe **out, xllm_error *err) {
    if (!cJSON_IsObject(j)) return err_setf(err, XLLM_ERR_FORMAT, "%s: no \"model\" object", path);
    const char *type = tok_json_type(j);
    /* HF accepts an untagged model; one with merges is BPE */
    if (!type && merges[1] > merges[0]) type = "BPE";
    if (!type) return err_setf(err, XLLM_ERR_FORMAT, "%s: model without a \"type\"", path);
    if (strcmp(type, "BPE") != 0)
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: unsupported model type \"%s\"", path, type);
    return tok_bpe_parse(j, raw, vocab, merges, path, out, err);
}

/* Fill the id -> piece table: model vocab, then added tokens over it. */
static xllm_status build_pieces(tokenizer *t, xllm_error *err) {
    int32_t max_id = tok_bpe_vocab_max_id(t->model);
    size_t na = tok_added_count(t->added);
    for (size_t i = 0; i < na; i++)
        if (tok_added_get(t->added, i)->id > max_id) max_id = tok_added_get(t->added, i)->id;
    size_t n_tokens = tok_bpe_vocab_count(t->model) + na;
    if (max_id >= 0 && (size_t)max_id >= 2 * n_tokens + 1024) /* the id tables are sized by the largest id */
        return err_setf(err, XLLM_ERR_FORMAT, "%s: token id %ld is far beyond its %zu tokens (ids must be dense)",
                           t->path, (long)max_id, n_tokens);
    t->n_pieces = max_id + 1;
    size_t n = t->n_pieces ? (size_t)t->n_pieces : 1;
    t->pieces = mem_calloc(n, sizeof *t->pieces);
    t->piece_len = mem_calloc(n, sizeof *t->piece_len);
    t->special = mem_calloc(n, 1);
    if (!t->pieces || !t->piece_len || !t->special)
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", t->path);
    for (int32_t id = 0; id <= tok_bpe_vocab_max_id(t->model); id++) {
        size_t len = 0;
        t->pieces[id] = tok_bpe_id_to_token(t->model, id, &len);
        t->piece_len[id] = (uint32_t)len;
    }
    for (size_t i = 0; i < na; i++) {
        const tok_added_token *a = tok_added_get(t->added, i);
        t->pieces[a->id] = a->content;
        t->piece_len[a->id] = (uint32_t)a->len;
    }
    /* HF skips by content: every id whose string is a special token's */
    for (size_t i = 0; i < na; i++) {
        const tok_added_token *a = tok_added_get(t->added, i);
        if (!a->special) continue;
        t->special[a->id] = 1;
        int32_t mid = tok_bpe_token_to_id(t->model, a->content, a->len);
        if (mid >= 0 && mid < t->n_pieces && t->pieces[mid] == tok_bpe_id_to_token(t->model, mid, NULL))
            t->special[mid] = 1;
    }
    return XLLM_OK;
}

/* bos_token / eos_token: a string, {"content": ...} or null. */
static int32_t config_token(tokenizer *t, const cJSON *v) {
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? tokenizer_piece_to_id(t, v->valuestring) : -1;
}

/* Only two small members are wanted: find them with the scanner (Gemma's
 * config is a megabyte of added_tokens_decoder) and parse just those. */
static xllm_status read_config_text(tokenizer *t, const char *text, size_t len, const char *cfg_path,
                                    xllm_error *err) {
    xllm_status st = XLLM_OK;
    const char *names[2] = {"bos_token", "eos_token"};
    int32_t *dst[2] = {&t->bos_id, &t->eos_id};
    for (int k = 0; k < 2 && !st; k++) {
        const char *v0, *v1;
        if (tok_js_member(text, len, names[k], &v0, &v1)) {
            st = err_setf(err, XLLM_ERR_FORMAT, "%s: not a well-formed JSON object", cfg_path);
            break;
        }
        if (!v0) continue;
        cJSON *v = cJSON_ParseWithLength(v0, (size_t)(v1 - v0));
        if (!v && json_well_formed(v0, (size_t)(v1 - v0)))
            st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", cfg_path);
        else if (!v) st = err_setf(err, XLLM_ERR_FORMAT, "%s: bad \"%s\"", cfg_path, names[k]);
        else *dst[k] = config_token(t, v);
        cJSON_Delete(v);
    }
    return st;
}

static xllm_status read_config(tokenizer *t, const char *cfg_path, xllm_error *err) {
    if (!path_exists(cfg_path)) return XLLM_OK;
    char *text;
    size_t len;
    xllm_status st = file_read_all(cfg_path, &text, &len, err);
    if (st) return st;
    st = read_config_text(t, text, len, cfg_path, err);
    xllm_free(text);
    return st;
}

static xllm_status parse_root(tokenizer *t, const cJSON *root, const char *raw, const size_t vocab[2],
                              const size_t merges[2], xllm_error *err) {
    const char *p = t->path;
    if (!cJSON_IsObject(root)) return err_setf(err, XLLM_ERR_FORMAT, "%s: not a JSON object", p);
    xllm_status st = parse_model(cJSON_GetObjectItemCaseSensitive(root, "model"), raw, vocab, merges, p, &t->model, err);
    if (!st) st = tok_normalizer_parse(cJSON_GetObjectItemCaseSensitive(root, "normalizer"), p, &t->normalizer, err);
    if (!st) st = tok_pretok_parse(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), p, &t->pretok, err);
    if (!st) st = tok_postproc_parse(cJSON_GetObjectItemCaseSensitive(root, "post_processor"), p, &t->post, err);
    if (!st) st = tok_decoder_parse(cJSON_GetObjectItemCaseSensitive(root, "decoder"), p, &t->decoder, err);
    if (!st)
        st = tok_trunc_parse(cJSON_GetObjectItemCaseSensitive(root, "truncation"),
                             cJSON_GetObjectItemCaseSensitive(root, "padding"), p, &t->trunc, err);
    if (!st)
        st = tok_added_parse(cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), t->normalizer, t->model, p,
                             &t->added, err);
    if (!st) st = build_pieces(t, err);
    if (!st) { /* ids the post-processor or padding insert must be tokens (decode looks them up) */
        int32_t pm = tok_postproc_max_id(t->post), pad = tok_trunc_pad_id(t->trunc);
        int32_t bad = pm >= t->n_pieces ? pm : pad >= t->n_pieces ? pad : -1;
        if (bad >= 0)
            st = err_setf(err, XLLM_ERR_FORMAT, "%s: %s id %ld is not a token (vocabulary of %ld)", p,
                             bad == pm ? "post_processor" : "padding", (long)bad, (long)t->n_pieces);
    }
    return st;
}

static xllm_status json_error(const char *path, const char *text, size_t len, size_t off, xllm_error *err) {
    if (json_well_formed(text, len)) /* then cJSON ran out of memory */
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory parsing JSON", path);
    size_t line = 1;
    for (size_t i = 0; i < off && i < len; i++) line += text[i] == '\n';
    return err_setf(err, XLLM_ERR_FORMAT, "%s: invalid JSON near byte %zu (line %zu)", path, off, line);
}

/* Parse tokenizer.json text: the huge spans located, the rest through cJSON. */
static xllm_status parse_json_text(tokenizer *t, const char *raw, size_t len, xllm_error *err) {
    xllm_status st;
    size_t vocab[2], merges[2];
    if (tok_js_find_model_parts(raw, len, vocab, merges)) {
        const char *end = NULL; /* let cJSON say where it breaks */
        cJSON *doc = cJSON_ParseWithLengthOpts(raw, len, &end, 0);
        size_t off = end ? (size_t)(end - raw) : 0;
        if (doc) st = err_setf(err, XLLM_ERR_FORMAT, "%s: not a JSON object", t->path);
        else st = json_error(t->path, raw, len, off, err);
        cJSON_Delete(doc);
        return st;
    }
    /* the skeleton: the document with the two spans replaced by {} and [] */
    size_t cut[2][2] = {{vocab[0], vocab[1]}, {merges[0], merges[1]}};
    const char *fill[2] = {"{}", "[]"};
    if (cut[0][0] > cut[1][0]) {
        size_t a = cut[0][0], b = cut[0][1];
        cut[0][0] = cut[1][0];
        cut[0][1] = cut[1][1];
        cut[1][0] = a;
        cut[1][1] = b;
        fill[0] = "[]";
        fill[1] = "{}";
    }
    buf_t skel = {0};
    size_t at = 0;
    for (int k = 0; k < 2; k++) {
        if (cut[k][1] <= cut[k][0]) continue;
        if (buf_append(&skel, raw + at, cut[k][0] - at) || buf_append(&skel, fill[k], 2)) goto oom;
        at = cut[k][1];
    }
    if (buf_append(&skel, raw + at, len - at)) goto oom;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(skel.p, skel.len, &end, 0);
    if (!root) {
        st = json_error(t->path, skel.p, skel.len, end ? (size_t)(end - skel.p) : 0, err);
    } else {
        st = parse_root(t, root, raw, vocab, merges, err);
        cJSON_Delete(root);
    }
    buf_free(&skel);
    return st;
oom:
    buf_free(&skel);
    return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", t->path);
}

static xllm_status load_json(tokenizer *t, xllm_error *err) {
    char *raw;
    size_t len;
    xllm_status st = file_read_all(t->path, &raw, &len, err);
    if (st) return st;
    st = parse_json_text(t, raw, len, err);
    xllm_free(raw);
    return st;
}

tokenizer *tokenizer_load_text(const char *json, size_t json_len, const char *config_json, size_t config_len,
                               const char *label, xllm_error *err) {
    if (!json || !label) {
        err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "tokenizer_load_text: NULL argument");
        return NULL;
    }
    tokenizer *t = mem_calloc(1, sizeof *t);
    if (!t || !(t->path = mem_strdup(label))) {
        xllm_free(t);
        err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", label);
        return NULL;
    }
    pthread_mutex_init(&t->ws_lock, NULL);
    t->bos_id = t->eos_id = -1;
    xllm_status st = parse_json_text(t, json, json_len, err);
    if (!st && config_json) st = read_config_text(t, config_json, config_len, label, err);
    if (st) {
        tokenizer_free(t);
        return NULL;
    }
    return t;
}

tokenizer *tokenizer_load(const char *path, xllm_error *err) {
    if (!path) {
        err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "tokenizer_load: path is NULL");
        return NULL;
    }
    char json_path[4096], cfg_path[4096];
    if (strlen(path) + sizeof "/tokenizer_config.json" > sizeof json_path) {
        err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "tokenizer_load: path too long");
        return NULL;
    }
    if (file_is_dir(path)) {
        path_join(json_path, sizeof json_path, path, "tokenizer.json");
        path_join(cfg_path, sizeof cfg_path, path, "tokenizer_config.json");
    } else {
        snprintf(json_path, sizeof json_path, "%s", path);
        const char *slash = strrchr(path, '/');
        if (slash) snprintf(cfg_path, sizeof cfg_path, "%.*s/tokenizer_config.json", (int)(slash - path), path);
        else snprintf(cfg_path, sizeof cfg_path, "tokenizer_config.json");
    }
    tokenizer *t = mem_calloc(1, sizeof *t);
    if (!t || !(t->path = mem_strdup(json_path))) {
        xllm_free(t);
        err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", json_path);
        return NULL;
    }
    pthread_mutex_init(&t->ws_lock, NULL);
    t->bos_id = t->eos_id = -1;
    xllm_status st = load_json(t, err);
    if (!st) st = read_config(t, cfg_path, err);
    if (st) {
        tokenizer_free(t);
        return NULL;
    }
    return t;
}

/* ------------------------------------------------------------- queries */

int32_t tokenizer_vocab_size(const tokenizer *t) { return t ? t->n_pieces : 0; }

int tokenizer_is_special(const tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_pieces && t->special[id];
}

const char *tokenizer_id_to_piece(const tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_pieces ? t->pieces[id] : NULL;
}

int32_t tokenizer_piece_to_id(const tokenizer *t, const char *piece) {
    if (!t || !piece) return -1;
    size_t len = strlen(piece);
    int32_t id = tok_added_token_to_id(t->added, piece, len);
    return id >= 0 ? id : tok_bpe_token_to_id(t->model, piece, len);
}

int32_t tokenizer_bos_id(const tokenizer *t) { return t ? t->bos_id : -1; }
int32_t tokenizer_eos_id(const tokenizer *t) { return t ? t->eos_id : -1; }

/* -------------------------------------------------------------- encode */

static xllm_status stage_error(int rc, xllm_error *err) {
    if (rc == TOK_ERR_REGEX)
        return err_setf(err, XLLM_ERR_INTERNAL, "tokenizer: a regular expression hit its match limit");
    return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "tokenizer: out of memory while encoding");
}

/* One stretch of input between raw-matched added tokens. */
static xllm_status encode_stretch(const tokenizer *t, encode_ws *w, const char *s, size_t len, int32_t flag,
                                  int no_special, xllm_error *err) {
    int kept;
    int rc = tok_normalize(t->normalizer, s, len, &w->norm, &w->norm_scratch, w->rx, &kept);
    if (rc) return stage_error(rc, err);
    if (!kept) flag = 0; /* the text no longer starts at original offset 0 */
    tok_list_clear(&w->pieces);
    if (tok_added_split(t->added, 1, w->norm.p, w->norm.len, flag, &w->pieces, w->rx, no_special, NULL))
        return stage_error(-1, err);
    for (size_t i = 0; i < w->pieces.n; i++) {
        const tok_span *p = &w->pieces.items[i];
        if (p->id >= 0) {
            if (tok_ids_push(&w->ids, p->id)) return stage_error(-1, err);
            continue;
        }
        tok_list_clear(&w->words);
        if (tok_list_push(&w->words, tok_list_str(&w->pieces, i), p->len, -1, p->flag))
            return stage_error(-1, err);
        if ((rc = tok_pretokenize(t->pretok, &w->words, &w->scratch, w->rx))) return stage_error(rc, err);
        for (size_t k = 0; k < w->words.n; k++) {
            xllm_status st = tok_bpe_tokenize(t->model, tok_list_str(&w->words, k), w->words.items[k].len, &w->ids,
                                              w->bpe, err);
            if (st) return st;
        }
    }
    return XLLM_OK;
}

/* XLLM_TOKENIZE_MARKED: the marks (U+FDD0 opens, U+FDD1 closes) removed
 * from text into *clean, with plain[i] = 1 for the bytes between them. */
static int unmark(const char *text, size_t len, char **clean, uint8_t **plain, size_t *clen) {
    *clean = mem_malloc(len + 1);
    *plain = mem_malloc(len + 1);
    if (!*clean || !*plain) return -1;
    size_t o = 0;
    int inside = 0;
    for (size_t i = 0; i < len;) {
        const unsigned char *u = (const unsigned char *)text + i;
        if (len - i >= 3 && u[0] == 0xEF && u[1] == 0xB7 && (u[2] == 0x90 || u[2] == 0x91)) {
            inside = u[2] == 0x90;
            i += 3;
            continue;
        }
        (*clean)[o] = text[i++];
        (*plain)[o++] = (uint8_t)inside;
    }
    *clen = o;
    return 0;
}

static xllm_status encode_with(const tokenizer *t, encode_ws *w, const char *text, size_t len, unsigned flags,
                               xllm_error *err) {
    int add_special = (flags & XLLM_TOKENIZE_ADD_SPECIAL) != 0;
    int no_special = !(flags & (XLLM_TOKENIZE_PARSE_SPECIAL | XLLM_TOKENIZE_MARKED));
    char *clean = NULL;
    uint8_t *plain = NULL;
    if (flags & XLLM_TOKENIZE_MARKED) {
        size_t cl = 0;
        if (unmark(text, len, &clean, &plain, &cl)) {
            xllm_free(clean);
            xllm_free(plain);
            return stage_error(-1, err);
        }
        text = clean;
        len = cl;
    }
    tok_list_clear(&w->splits);
    w->ids.n = 0;
    xllm_status st = XLLM_OK;
    if (tok_added_split(t->added, 0, text, len, 1, &w->splits, w->rx, no_special, plain)) st = stage_error(-1, err);
    xllm_free(clean);
    xllm_free(plain);
    if (st) return st;
    /* special tokens matched after normalization: only where every special token is parsed */
    int norm_no_special = !(flags & XLLM_TOKENIZE_PARSE_SPECIAL) || (flags & XLLM_TOKENIZE_MARKED);
    for (size_t i = 0; i < w->splits.n; i++) {
        const tok_span *sp = &w->splits.items[i];
        if (sp->id >= 0) st = tok_ids_push(&w->ids, sp->id) ? stage_error(-1, err) : XLLM_OK;
        else st = encode_stretch(t, w, tok_list_str(&w->splits, i), sp->len, sp->flag, norm_no_special, err);
        if (st) return st;
    }
    tok_truncate(t->trunc, &w->ids, add_special ? tok_postproc_added(t->post) : 0);
    if (add_special && t->post) {
        if (tok_postprocess(t->post, w->ids.v, w->ids.n, &w->out)) return stage_error(-1, err);
    } else {
        w->out.n = 0;
        if (tok_ids_append(&w->out, w->ids.v, w->ids.n)) return stage_error(-1, err);
    }
    if (tok_pad(t->trunc, &w->out)) return stage_error(-1, err);
    return XLLM_OK;
}

xllm_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids,
                             size_t *n_ids, xllm_error *err) {
    return tokenizer_encode_ex(t, text, len, XLLM_TOKENIZE_PARSE_SPECIAL | (add_special ? XLLM_TOKENIZE_ADD_SPECIAL : 0),
                               ids, n_ids, err);
}

xllm_status tokenizer_encode_ex(const tokenizer *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                                size_t *n_ids, xllm_error *err) {
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (!t || !ids || !n_ids || (!text && len))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "tokenizer_encode: NULL argument");
    if (!text) text = "";
    int shared;
    encode_ws *w = ws_take(t, &shared);
    if (!w) return stage_error(-1, err);
    xllm_status st = encode_with(t, w, text, len, flags, err);
    int32_t *res = NULL;
    if (!st) {
        res = mem_malloc_array(w->out.n ? w->out.n : 1, sizeof *res); /* never hand out NULL */
        if (!res) st = stage_error(-1, err);
        else if (w->out.n) memcpy(res, w->out.v, w->out.n * sizeof *res);
    }
    size_t n = w->out.n;
    ws_give(t, w, shared);
    if (st) return st;
    *ids = res;
    *n_ids = n;
    return XLLM_OK;
}

xllm_status tokenizer_mark_special(const tokenizer *t, const char *text, size_t len, char **out, size_t *out_len,
                                   xllm_error *err) {
    *out = NULL;
    *out_len = 0;
    if (!t || (!text && len)) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "tokenizer_mark_special: NULL argument");
    /* worst case: every byte a one-byte special token (3 + 1 + 3 bytes each) */
    if (len > (SIZE_MAX - 1) / 7) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "tokenizer_mark_special: text too long");
    char *o = mem_malloc(len * 7 + 1);
    if (!o) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "tokenizer_mark_special: out of memory");
    size_t n = 0, pos = 0;
    while (pos < len) {
        size_t b = len, e = len;
        if (!tok_added_next_special(t->added, text, len, pos, &b, &e)) b = e = len;
        for (size_t i = pos; i < b;) {
            const unsigned char *u = (const unsigned char *)text + i;
            if (b - i >= 3 && u[0] == 0xEF && u[1] == 0xB7 && (u[2] == 0x90 || u[2] == 0x91)) {
                memcpy(o + n, "\xEF\xBF\xBD", 3); /* a mark in the text itself: U+FFFD */
                n += 3;
                i += 3;
                continue;
            }
            o[n++] = text[i++];
        }
        if (b < len) {
            memcpy(o + n, "\xEF\xB7\x90", 3);
            memcpy(o + n + 3, text + b, e - b);
            memcpy(o + n + 3 + (e - b), "\xEF\xB7\x91", 3);
            n += 6 + (e - b);
        }
        pos = e > b ? e : b + 1;
        if (b == len) break;
    }
    o[n] = 0;
    *out = o;
    *out_len = n;
    return XLLM_OK;
}

/* -------------------------------------------------------------- decode */

int tok_decode_into(const tokenizer *t, const int32_t *ids, size_t n, int skip_special, tok_list *toks,
                    tok_list *scratch, buf_t *out, tok_rx_ws *rx) {
    tok_list_clear(toks);
    buf_clear(out);
    if (buf_reserve(out, 0)) return -1;
    out->p[0] = 0;
    for (size_t i = 0; i < n; i++) {
        if (skip_special && t->special[ids[i]]) continue;
        if (tok_list_push(toks, t->pieces[ids[i]], t->piece_len[ids[i]], -1, 0)) return -1;
    }
    if (t->decoder && tok_decode_chain(t->decoder, toks, scratch, rx)) return -1;
    for (size_t i = 0; i < toks->n; i++) {
        if (!t->decoder && i && buf_append(out, " ", 1)) return -1;
        if (buf_append(out, tok_list_str(toks, i), toks->items[i].len)) return -1;
    }
    return 0;
}

xllm_status tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n_ids, int skip_special, char **text,
                             size_t *len, xllm_error *err) {
    if (text) *text = NULL;
    if (len) *len = 0;
    if (!t || !text || (!ids && n_ids))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "tokenizer_decode: NULL argument");
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= t->n_pieces || !t->pieces[ids[i]])
            return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "tokenizer_decode: id %ld at position %zu is not in the vocabulary (size %d)",
                               (long)ids[i], i, (int)t->n_pieces);
    int shared;
    encode_ws *w = ws_take(t, &shared);
    if (!w) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "tokenizer: out of memory while decoding");
    buf_t out = {0};
    int rc = tok_decode_into(t, ids, n_ids, skip_special, &w->words, &w->scratch, &out, w->rx);
    ws_give(t, w, shared);
    if (rc) {
        buf_free(&out);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "tokenizer: out of memory while decoding");
    }
    *text = out.p;
    if (len) *len = out.len;
    return XLLM_OK;
}
