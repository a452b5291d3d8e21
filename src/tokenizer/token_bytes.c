/*
 * token_bytes.c - each token's bytes as they read inside a text, for
 * constrained decoding: the grammar advances byte by byte, so it needs what a
 * token adds to the output, which is neither the token string (Metaspace's
 * U+2581, GPT-2's byte characters, <0xXX>) nor a lone decode (a leading space
 * dropped, a partial UTF-8 character turned into U+FFFD). The decoder chain
 * gives it token by token (decoder.c, tok_decoder_token_bytes).
 */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"

xllm_status tokenizer_token_bytes(const tokenizer *t, char **bytes, int64_t **off, int32_t *n, xllm_error *err) {
    *bytes = NULL;
    *off = NULL;
    *n = 0;
    const int32_t V = t->n_pieces;
    buf_t all = {0}, cur = {0}, tmp = {0};
    int64_t *o = mem_malloc_array((size_t)V + 1, sizeof(int64_t));
    tok_rx_ws *rx = tok_rx_ws_new();
    int rc = (!o || !rx) ? -1 : 0;
    for (int32_t i = 0; i < V && !rc; i++) {
        o[i] = (int64_t)all.len;
        if (!t->pieces[i] || t->special[i]) continue;
        buf_clear(&cur);
        rc = buf_append(&cur, t->pieces[i], t->piece_len[i]);
        if (!rc) rc = tok_decoder_token_bytes(t->decoder, &cur, &tmp, rx);
        if (!rc && cur.len) rc = buf_append(&all, cur.p, cur.len);
    }
    if (!rc) o[V] = (int64_t)all.len;
    buf_free(&cur);
    buf_free(&tmp);
    tok_rx_ws_free(rx);
    if (rc) {
        buf_free(&all);
        xllm_free(o);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "token bytes: out of memory");
    }
    char *b = buf_steal(&all, NULL);
    if (!b) {
        xllm_free(o);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "token bytes: out of memory");
    }
    *bytes = b;
    *off = o;
    *n = V;
    return XLLM_OK;
}
