/*
 * tokenizer_api.c - the public tokenizer functions of xllm.h.
 *
 * An xllm_tokenizer is the internal `tokenizer` (src/tokenizer) under its
 * public name; these wrappers check arguments and forward.
 */
#include "xllm.h"
#include "base/error.h"
#include "tokenizer/tokenizer.h"

xllm_tokenizer *xllm_tokenizer_load(const char *path, xllm_error *err) {
    if (err) err_clear(err);
    if (!path) {
        err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "xllm_tokenizer_load: path is NULL");
        return NULL;
    }
    return (xllm_tokenizer *)tokenizer_load(path, err);
}

void xllm_tokenizer_free(xllm_tokenizer *tok) { tokenizer_free((tokenizer *)tok); }

xllm_status xllm_tokenize(const xllm_tokenizer *tok, const char *text, size_t len, int add_special, int32_t **ids,
                          size_t *n_ids, xllm_error *err) {
    if (err) err_clear(err);
    if (!tok || !ids || !n_ids || (!text && len))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "xllm_tokenize: NULL argument");
    return tokenizer_encode(tokenizer_from_public(tok), text, len, add_special, ids, n_ids, err);
}

xllm_status xllm_tokenize_ex(const xllm_tokenizer *tok, const char *text, size_t len, unsigned flags, int32_t **ids,
                             size_t *n_ids, xllm_error *err) {
    if (err) err_clear(err);
    if (!tok || !ids || !n_ids || (!text && len))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "xllm_tokenize_ex: NULL argument");
    if (flags & ~7u) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "xllm_tokenize_ex: unknown flags 0x%x", flags);
    return tokenizer_encode_ex(tokenizer_from_public(tok), text, len, flags, ids, n_ids, err);
}

xllm_status xllm_tokenizer_mark_special(const xllm_tokenizer *tok, const char *text, size_t len, char **out,
                                        size_t *out_len, xllm_error *err) {
    if (err) err_clear(err);
    if (!tok || !out || !out_len || (!text && len))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "xllm_tokenizer_mark_special: NULL argument");
    return tokenizer_mark_special(tokenizer_from_public(tok), text ? text : "", len, out, out_len, err);
}

xllm_status xllm_detokenize(const xllm_tokenizer *tok, const int32_t *ids, size_t n_ids, int skip_special,
                            char **text, size_t *text_len, xllm_error *err) {
    if (err) err_clear(err);
    if (!tok || !text || (!ids && n_ids))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "xllm_detokenize: NULL argument");
    return tokenizer_decode(tokenizer_from_public(tok), ids, n_ids, skip_special, text, text_len, err);
}

int32_t xllm_tokenizer_vocab_size(const xllm_tokenizer *tok) {
    return tok ? tokenizer_vocab_size(tokenizer_from_public(tok)) : 0;
}
