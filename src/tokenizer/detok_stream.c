/*
 * detok_stream.c - incremental detokenization for streaming output.
 *
 * The idea (as in HF text-generation-inference): keep a small window of ids,
 * [prefix, read) already turned into text plus the ids pushed since. Decode
 * the window with and without the new ids; the new text is the difference,
 * emitted only once it does not end in U+FFFD or an unfinished UTF-8
 * sequence (a byte-fallback character still arriving). Then the window slides
 * to start at the old read offset. Decoding a window that starts with an
 * already-emitted token keeps start-of-text rules (Strip, Metaspace) from
 * eating a space that belongs mid-text, so the pushes concatenated equal the
 * full decode. Special tokens to skip are dropped at push time, which makes
 * the window decode equal to a skip_special decode.
 *
 * Known limit: HF turns a whole run of <0xXX> tokens into U+FFFD when the run
 * is not valid UTF-8, so a complete character followed by a stray
 * continuation byte retroactively changes text already emitted; the stream
 * then emits from where the texts diverge (still whole characters).
 */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"

#include <string.h>

struct detok_stream {
    const tokenizer *t;
    int skip_special;
    int32_t *ids; /* the window: ids[0] is the prefix offset */
    size_t n, cap;
    size_t read;  /* ids[0..read) have been emitted */
    tok_list toks, scratch;
    buf_t prefix_text, new_text;
    tok_rx_ws *rx;
};

detok_stream *detok_stream_new(const tokenizer *t, int skip_special) {
    if (!t) return NULL;
    detok_stream *s = mem_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->t = t;
    s->skip_special = skip_special;
    if (!(s->rx = tok_rx_ws_new())) {
        xllm_free(s);
        return NULL;
    }
    return s;
}

void detok_stream_free(detok_stream *s) {
    if (!s) return;
    xllm_free(s->ids);
    tok_list_free(&s->toks);
    tok_list_free(&s->scratch);
    buf_free(&s->prefix_text);
    buf_free(&s->new_text);
    tok_rx_ws_free(s->rx);
    xllm_free(s);
}

static int ends_unfinished(const buf_t *b) {
    if (b->len >= 3 && memcmp(b->p + b->len - 3, "\xef\xbf\xbd", 3) == 0) return 1;
    return u8_complete_prefix(b->p, b->len) != b->len;
}

/* Decode the window; emit what is new (force: even if unfinished). */
static xllm_status emit(detok_stream *s, int force, const char **out, size_t *out_len, xllm_error *err) {
    *out = "";
    *out_len = 0;
    if (tok_decode_into(s->t, s->ids, s->read, 0, &s->toks, &s->scratch, &s->prefix_text, s->rx) ||
        tok_decode_into(s->t, s->ids, s->n, 0, &s->toks, &s->scratch, &s->new_text, s->rx))
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "detok_stream: out of memory");
    const buf_t *pre = &s->prefix_text, *cur = &s->new_text;
    if (cur->len <= pre->len || (!force && ends_unfinished(cur))) return XLLM_OK;
    size_t k = 0;
    while (k < pre->len && pre->p[k] == cur->p[k]) k++;
    while (k > 0 && k < cur->len && ((unsigned char)cur->p[k] & 0xc0) == 0x80) k--; /* whole characters */
    *out = cur->p + k;
    *out_len = cur->len - k;
    /* slide: the ids just emitted become the context of the next window */
    memmove(s->ids, s->ids + s->read, (s->n - s->read) * sizeof *s->ids);
    s->n -= s->read;
    s->read = s->n;
    return XLLM_OK;
}

xllm_status detok_stream_push(detok_stream *s, int32_t id, const char **out, size_t *out_len, xllm_error *err) {
    if (!s || !out || !out_len) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "detok_stream_push: NULL argument");
    *out = "";
    *out_len = 0;
    const tokenizer *t = s->t;
    if (id < 0 || id >= t->n_pieces || !t->pieces[id])
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "detok_stream_push: id %ld is not in the vocabulary (size %d)",
                           (long)id, (int)t->n_pieces);
    if (s->skip_special && t->special[id]) return XLLM_OK;
    if (array_reserve(&s->ids, &s->cap, s->n + 1, sizeof *s->ids, 16))
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "detok_stream: out of memory");
    s->ids[s->n++] = id;
    return emit(s, 0, out, out_len, err);
}

/* The prompt's last DETOK_CONTEXT ids (specials that are skipped left out)
 * become the window's already-emitted context: the first generated token is
 * then decoded after them, as it is in a decode of prompt + completion (a
 * Metaspace / Strip decoder would otherwise eat its leading space). */
#define DETOK_CONTEXT 8
xllm_status detok_stream_seed(detok_stream *s, const int32_t *ids, size_t n, xllm_error *err) {
    if (!s) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "detok_stream_seed: NULL stream");
    const tokenizer *t = s->t;
    int32_t ctx[DETOK_CONTEXT];
    size_t k = 0;
    for (size_t i = n; i > 0 && k < DETOK_CONTEXT; i--) {
        int32_t id = ids[i - 1];
        if (id < 0 || id >= t->n_pieces || !t->pieces[id]) continue;
        if (s->skip_special && t->special[id]) continue;
        ctx[DETOK_CONTEXT - 1 - k++] = id;
    }
    if (s->cap < k + 16) {
        int32_t *v = mem_realloc(s->ids, (k + 16) * sizeof *v);
        if (!v) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "detok_stream: out of memory");
        s->ids = v;
        s->cap = k + 16;
    }
    memcpy(s->ids, ctx + DETOK_CONTEXT - k, k * sizeof *s->ids);
    s->n = s->read = k;
    return XLLM_OK;
}

xllm_status detok_stream_flush(detok_stream *s, const char **out, size_t *out_len, xllm_error *err) {
    if (!s || !out || !out_len) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "detok_stream_flush: NULL argument");
    *out = "";
    *out_len = 0;
    return s->n > s->read ? emit(s, 1, out, out_len, err) : XLLM_OK;
}
