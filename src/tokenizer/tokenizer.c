/*
 * tokenizer.c - loading tokenizer.json and running the HF pipeline.
 *
 * Load: each stage (normalizer, pre_tokenizer, model, post_processor,
 * decoder, added_tokens) is parsed by its own file; anything unknown fails
 * the load with XLLM_ERR_UNSUPPORTED naming it. tokenizer_config.json, when
 * present next to tokenizer.json, is only read for the bos / eos tokens.
 *
 * Encode, as HF: split the input on raw-matched added tokens; normalize each
 * remaining stretch and split it on normalized-matched added tokens; pre-
 * tokenize the text pieces; BPE each piece; then, if asked, the
 * post-processor template. Decode: ids -> token strings (added tokens first),
 * special ones dropped on request, then the decoder chain (no decoder: the
 * strings joined by spaces).
 */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/file.h"

#include <stdio.h>
#include <string.h>

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    tok_normalizer_free(t->normalizer);
    tok_pretok_free(t->pretok);
    tok_bpe_free(t->model);
    tok_postproc_free(t->post);
    tok_decoder_free(t->decoder);
    tok_added_free(t->added);
    xllm_free((void *)t->pieces);
    xllm_free(t->special);
    xllm_free(t->path);
    xllm_free(t);
}

static xllm_status parse_model(const cJSON *j, const char *path, tok_bpe **out, xllm_error *err) {
    if (!cJSON_IsObject(j)) return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: no \"model\" object", path);
    const char *type = tok_json_type(j);
    /* HF accepts an untagged model; one with merges is BPE */
    if (!type && cJSON_GetObjectItemCaseSensitive(j, "merges")) type = "BPE";
    if (!type) return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: model without a \"type\"", path);
    if (strcmp(type, "BPE") != 0)
        return xllm_errorf(err, XLLM_ERR_UNSUPPORTED, "%s: unsupported model type \"%s\"", path, type);
    return tok_bpe_parse(j, path, out, err);
}

/* Fill the id -> piece table: model vocab, then added tokens over it. */
static xllm_status build_pieces(tokenizer *t, xllm_error *err) {
    int32_t max_id = tok_bpe_vocab_max_id(t->model);
    size_t na = tok_added_count(t->added);
    for (size_t i = 0; i < na; i++)
        if (tok_added_get(t->added, i)->id > max_id) max_id = tok_added_get(t->added, i)->id;
    t->n_pieces = max_id + 1;
    size_t n = t->n_pieces ? (size_t)t->n_pieces : 1;
    t->pieces = xllm_calloc(n, sizeof *t->pieces);
    t->special = xllm_calloc(n, 1);
    if (!t->pieces || !t->special) return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", t->path);
    for (int32_t id = 0; id <= tok_bpe_vocab_max_id(t->model); id++) t->pieces[id] = tok_bpe_id_to_token(t->model, id);
    for (size_t i = 0; i < na; i++) {
        const tok_added_token *a = tok_added_get(t->added, i);
        t->pieces[a->id] = a->content;
        t->special[a->id] = a->special;
    }
    return XLLM_OK;
}

/* bos_token / eos_token: a string, {"content": ...} or null. */
static int32_t config_token(tokenizer *t, const cJSON *cfg, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, name);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? tokenizer_piece_to_id(t, v->valuestring) : -1;
}

static xllm_status read_config(tokenizer *t, const char *cfg_path, xllm_error *err) {
    if (!xllm_file_exists(cfg_path)) return XLLM_OK;
    cJSON *cfg;
    xllm_status st = xllm_json_load(cfg_path, &cfg, err);
    if (st) return st;
    if (!cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: not a JSON object", cfg_path);
    }
    t->bos_id = config_token(t, cfg, "bos_token");
    t->eos_id = config_token(t, cfg, "eos_token");
    cJSON_Delete(cfg);
    return XLLM_OK;
}

static xllm_status parse_root(tokenizer *t, const cJSON *root, xllm_error *err) {
    const char *p = t->path;
    if (!cJSON_IsObject(root)) return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: not a JSON object", p);
    xllm_status st = parse_model(cJSON_GetObjectItemCaseSensitive(root, "model"), p, &t->model, err);
    if (!st) st = tok_normalizer_parse(cJSON_GetObjectItemCaseSensitive(root, "normalizer"), p, &t->normalizer, err);
    if (!st) st = tok_pretok_parse(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), p, &t->pretok, err);
    if (!st) st = tok_postproc_parse(cJSON_GetObjectItemCaseSensitive(root, "post_processor"), p, &t->post, err);
    if (!st) st = tok_decoder_parse(cJSON_GetObjectItemCaseSensitive(root, "decoder"), p, &t->decoder, err);
    if (!st)
        st = tok_added_parse(cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), t->normalizer, p, &t->added,
                             err);
    if (!st) st = build_pieces(t, err);
    return st;
}

tokenizer *tokenizer_load(const char *path, xllm_error *err) {
    if (!path) {
        xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "tokenizer_load: path is NULL");
        return NULL;
    }
    char json_path[4096], cfg_path[4096];
    if (strlen(path) + sizeof "/tokenizer_config.json" > sizeof json_path) {
        xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "tokenizer_load: path too long");
        return NULL;
    }
    if (xllm_is_dir(path)) {
        xllm_path_join(json_path, sizeof json_path, path, "tokenizer.json");
        xllm_path_join(cfg_path, sizeof cfg_path, path, "tokenizer_config.json");
    } else {
        snprintf(json_path, sizeof json_path, "%s", path);
        const char *slash = strrchr(path, '/');
        if (slash) snprintf(cfg_path, sizeof cfg_path, "%.*s/tokenizer_config.json", (int)(slash - path), path);
        else snprintf(cfg_path, sizeof cfg_path, "tokenizer_config.json");
    }
    tokenizer *t = xllm_calloc(1, sizeof *t);
    if (!t || !(t->path = xllm_strdup(json_path))) {
        xllm_free(t);
        xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", json_path);
        return NULL;
    }
    t->bos_id = t->eos_id = -1;
    cJSON *root;
    xllm_status st = xllm_json_load(json_path, &root, err);
    if (!st) {
        st = parse_root(t, root, err);
        cJSON_Delete(root);
    }
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

typedef struct {
    tok_list splits, pieces, words, scratch;
    tok_buf norm, norm_scratch;
    tok_ids ids;
    tok_bpe_ws *bpe;
} encode_ws;

static void encode_ws_free(encode_ws *w) {
    tok_list_free(&w->splits);
    tok_list_free(&w->pieces);
    tok_list_free(&w->words);
    tok_list_free(&w->scratch);
    tok_buf_free(&w->norm);
    tok_buf_free(&w->norm_scratch);
    xllm_free(w->ids.v);
    tok_bpe_ws_free(w->bpe);
}

#define ENC_OOM() xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "tokenizer: out of memory while encoding")

/* One stretch of input between raw-matched added tokens. */
static xllm_status encode_stretch(const tokenizer *t, encode_ws *w, const char *s, size_t len, int32_t flag,
                                  xllm_error *err) {
    if (tok_normalize(t->normalizer, s, len, &w->norm, &w->norm_scratch)) return ENC_OOM();
    tok_list_clear(&w->pieces);
    if (tok_added_split(t->added, 1, w->norm.p, w->norm.len, flag, &w->pieces)) return ENC_OOM();
    for (size_t i = 0; i < w->pieces.n; i++) {
        const tok_span *p = &w->pieces.items[i];
        if (p->id >= 0) {
            if (tok_ids_push(&w->ids, p->id)) return ENC_OOM();
            continue;
        }
        tok_list_clear(&w->words);
        if (tok_list_push(&w->words, tok_list_str(&w->pieces, i), p->len, -1, p->flag) ||
            tok_pretokenize(t->pretok, &w->words, &w->scratch))
            return ENC_OOM();
        for (size_t k = 0; k < w->words.n; k++) {
            xllm_status st = tok_bpe_tokenize(t->model, tok_list_str(&w->words, k), w->words.items[k].len, &w->ids,
                                              w->bpe, err);
            if (st) return st;
        }
    }
    return XLLM_OK;
}

xllm_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids,
                             size_t *n_ids, xllm_error *err) {
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (!t || !ids || !n_ids || (!text && len))
        return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "tokenizer_encode: NULL argument");
    if (!text) text = "";
    encode_ws w;
    memset(&w, 0, sizeof w);
    xllm_status st = XLLM_OK;
    if (!(w.bpe = tok_bpe_ws_new()) || tok_added_split(t->added, 0, text, len, 1, &w.splits)) st = ENC_OOM();
    for (size_t i = 0; !st && i < w.splits.n; i++) {
        const tok_span *sp = &w.splits.items[i];
        if (sp->id >= 0) st = tok_ids_push(&w.ids, sp->id) ? ENC_OOM() : XLLM_OK;
        else st = encode_stretch(t, &w, tok_list_str(&w.splits, i), sp->len, sp->flag, err);
    }
    tok_ids res = {0};
    if (!st && add_special && t->post) {
        if (tok_postprocess(t->post, w.ids.v, w.ids.n, &res)) st = ENC_OOM();
    } else if (!st) {
        res = w.ids;
        memset(&w.ids, 0, sizeof w.ids);
    }
    if (!st && !res.v && !(res.v = xllm_malloc(sizeof *res.v))) st = ENC_OOM(); /* never hand out NULL */
    encode_ws_free(&w);
    if (st) {
        xllm_free(res.v);
        return st;
    }
    *ids = res.v;
    *n_ids = res.n;
    return XLLM_OK;
}

/* -------------------------------------------------------------- decode */

int tok_decode_into(const tokenizer *t, const int32_t *ids, size_t n, int skip_special, tok_list *toks,
                    tok_list *scratch, tok_buf *out) {
    tok_list_clear(toks);
    out->len = 0;
    if (tok_buf_reserve(out, 0)) return -1;
    out->p[0] = 0;
    for (size_t i = 0; i < n; i++) {
        if (skip_special && t->special[ids[i]]) continue;
        const char *p = t->pieces[ids[i]];
        if (tok_list_push(toks, p, strlen(p), -1, 0)) return -1;
    }
    if (t->decoder && tok_decode_chain(t->decoder, toks, scratch)) return -1;
    for (size_t i = 0; i < toks->n; i++) {
        if (!t->decoder && i && tok_buf_append(out, " ", 1)) return -1;
        if (tok_buf_append(out, tok_list_str(toks, i), toks->items[i].len)) return -1;
    }
    return 0;
}

xllm_status tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n_ids, int skip_special, char **text,
                             size_t *len, xllm_error *err) {
    if (text) *text = NULL;
    if (len) *len = 0;
    if (!t || !text || (!ids && n_ids))
        return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "tokenizer_decode: NULL argument");
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= t->n_pieces || !t->pieces[ids[i]])
            return xllm_errorf(err, XLLM_ERR_INVALID_ARGUMENT, "tokenizer_decode: id %ld at position %zu is not in the vocabulary (size %d)",
                               (long)ids[i], i, (int)t->n_pieces);
    tok_list toks = {0}, scratch = {0};
    tok_buf out = {0};
    int rc = tok_decode_into(t, ids, n_ids, skip_special, &toks, &scratch, &out);
    tok_list_free(&toks);
    tok_list_free(&scratch);
    if (rc) {
        tok_buf_free(&out);
        return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "tokenizer: out of memory while decoding");
    }
    *text = out.p;
    if (len) *len = out.len;
    return XLLM_OK;
}
