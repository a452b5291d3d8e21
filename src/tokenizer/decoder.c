/*
 * decoder.c - the `decoder` stage: token strings -> text.
 *
 * As in HF, a decoder maps a list of token strings to a new list (the final
 * text is their concatenation), and Sequence chains them. Implemented:
 * Replace (String or Regex pattern, in each token), ByteLevel (GPT-2's
 * printable characters back to bytes, all tokens fused and decoded as
 * Rust's from_utf8_lossy; a token with a character outside the map keeps
 * its own bytes), ByteFallback (runs of <0xXX>
 * tokens become their bytes when those form valid UTF-8, else one U+FFFD per
 * byte), Fuse (everything into one token), Strip (up to `start` / `stop`
 * copies of a character off each token's ends) and Metaspace (replacement ->
 * ' ', dropped in the first token unless prepend_scheme is never). Each step
 * writes into the scratch list and swaps it in.
 */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/utf8.h"

#include <string.h>

typedef enum { DEC_SEQUENCE, DEC_REPLACE, DEC_BYTE_FALLBACK, DEC_FUSE, DEC_STRIP, DEC_METASPACE, DEC_BYTE_LEVEL } dec_type;

struct tok_decoder {
    dec_type type;
    tok_decoder **kids; /* Sequence */
    size_t n_kids;
    tok_pattern pat;    /* Replace: pattern -> content b */
    char *b;
    size_t b_len;
    char ch[8];         /* Strip content / Metaspace replacement (one char) */
    size_t ch_len;
    size_t start, stop; /* Strip */
    int first_drop;     /* Metaspace: prepend_scheme != never */
};

void tok_decoder_free(tok_decoder *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n_kids; i++) tok_decoder_free(d->kids[i]);
    xllm_free(d->kids);
    tok_pattern_free(&d->pat);
    xllm_free(d->b);
    xllm_free(d);
}

#define OOM() err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path)

static xllm_status parse_char(const cJSON *j, const char *field, const char *path, const char *what, tok_decoder *d,
                              xllm_error *err) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, field);
    size_t len = cJSON_IsString(c) ? strlen(c->valuestring) : 0;
    if (!len || len >= sizeof d->ch || u8_len((const unsigned char *)c->valuestring, len) != len)
        return err_setf(err, XLLM_ERR_FORMAT, "%s: %s decoder needs a one-character \"%s\"", path, what, field);
    memcpy(d->ch, c->valuestring, len);
    d->ch_len = len;
    return XLLM_OK;
}

static xllm_status parse_count(const cJSON *j, const char *field, const char *path, size_t *out, xllm_error *err) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, field);
    if (!c) { *out = 0; return XLLM_OK; }
    if (!cJSON_IsNumber(c) || c->valuedouble < 0 || c->valuedouble > 1e9)
        return err_setf(err, XLLM_ERR_FORMAT, "%s: Strip decoder \"%s\" is not a count", path, field);
    *out = (size_t)c->valuedouble;
    return XLLM_OK;
}

static xllm_status parse_one(const cJSON *j, const char *type, const char *path, tok_decoder *d, xllm_error *err) {
    if (strcmp(type, "Sequence") == 0) {
        d->type = DEC_SEQUENCE;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "decoders");
        if (!cJSON_IsArray(arr))
            return err_setf(err, XLLM_ERR_FORMAT, "%s: Sequence decoder without \"decoders\"", path);
        int cnt = cJSON_GetArraySize(arr);
        d->kids = mem_calloc(cnt ? (size_t)cnt : 1, sizeof *d->kids);
        if (!d->kids) return OOM();
        const cJSON *k;
        cJSON_ArrayForEach(k, arr) {
            xllm_status st = tok_decoder_parse(k, path, &d->kids[d->n_kids], err);
            if (st) return st;
            if (d->kids[d->n_kids]) d->n_kids++;
        }
        return XLLM_OK;
    }
    if (strcmp(type, "Replace") == 0) {
        d->type = DEC_REPLACE;
        xllm_status st = tok_pattern_parse(cJSON_GetObjectItemCaseSensitive(j, "pattern"), path, "Replace decoder",
                                           &d->pat, err);
        if (st) return st;
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "content");
        if (!cJSON_IsString(c)) return err_setf(err, XLLM_ERR_FORMAT, "%s: Replace decoder without \"content\"", path);
        d->b = mem_strdup(c->valuestring);
        if (!d->b) return OOM();
        d->b_len = strlen(d->b);
        return XLLM_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        d->type = DEC_BYTE_LEVEL;
        return XLLM_OK;
    }
    if (strcmp(type, "ByteFallback") == 0) {
        d->type = DEC_BYTE_FALLBACK;
        return XLLM_OK;
    }
    if (strcmp(type, "Fuse") == 0) {
        d->type = DEC_FUSE;
        return XLLM_OK;
    }
    if (strcmp(type, "Strip") == 0) {
        d->type = DEC_STRIP;
        xllm_status st = parse_char(j, "content", path, "Strip", d, err);
        if (!st) st = parse_count(j, "start", path, &d->start, err);
        if (!st) st = parse_count(j, "stop", path, &d->stop, err);
        return st;
    }
    if (strcmp(type, "Metaspace") == 0) {
        d->type = DEC_METASPACE;
        xllm_status st = parse_char(j, "replacement", path, "Metaspace", d, err);
        if (st) return st;
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(j, "prepend_scheme");
        const cJSON *aps = cJSON_GetObjectItemCaseSensitive(j, "add_prefix_space");
        d->first_drop = 1;
        if (cJSON_IsString(ps)) {
            if (strcmp(ps->valuestring, "never") == 0) d->first_drop = 0;
            else if (strcmp(ps->valuestring, "first") != 0 && strcmp(ps->valuestring, "always") != 0)
                return err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: unsupported Metaspace prepend_scheme \"%s\"", path,
                                   ps->valuestring);
        } else if (cJSON_IsBool(aps)) {
            d->first_drop = cJSON_IsTrue(aps);
        }
        return XLLM_OK;
    }
    return err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: unsupported decoder type \"%s\"", path, type);
}

xllm_status tok_decoder_parse(const cJSON *j, const char *path, tok_decoder **out, xllm_error *err) {
    *out = NULL;
    if (!j || cJSON_IsNull(j)) return XLLM_OK;
    if (!cJSON_IsObject(j)) return err_setf(err, XLLM_ERR_FORMAT, "%s: decoder is not an object", path);
    const char *type = tok_json_type(j);
    if (!type) return err_setf(err, XLLM_ERR_FORMAT, "%s: decoder without a \"type\"", path);
    tok_decoder *d = mem_calloc(1, sizeof *d);
    if (!d) return OOM();
    xllm_status st = parse_one(j, type, path, d, err);
    if (st) {
        tok_decoder_free(d);
        return st;
    }
    *out = d;
    return XLLM_OK;
}

/* ------------------------------------------------------------- decoding */

/* "<0xXX>" -> the byte, else -1 */
static int byte_token(const char *s, size_t len) {
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int h = s[3] == '+' ? 0 : u8_hex_value(s[3]), l = u8_hex_value(s[4]); /* Rust's from_str_radix takes a '+' */
    return h < 0 || l < 0 ? -1 : h * 16 + l;
}

static const char k_fffd[] = "\xef\xbf\xbd";

/* The pending byte run is the last item of out (open = 1). Keep it when its
 * bytes are valid UTF-8, else replace it by one U+FFFD token per byte. */
static int flush_bytes(tok_list *out, int *open) {
    if (!*open) return 0;
    *open = 0;
    tok_span run = out->items[out->n - 1];
    if (u8_valid(out->text.p + run.off, run.len)) return 0;
    out->n--;
    out->text.len = run.off;
    for (size_t i = 0; i < run.len; i++)
        if (tok_list_push(out, k_fffd, 3, -1, 0)) return -1;
    return 0;
}

/* All tokens back to bytes through the byte-level map, one lossy string. */
static int byte_level(const tok_list *l, tok_list *sc, buf_t *bytes) {
    buf_clear(bytes);
    for (size_t i = 0; i < l->n; i++) {
        const unsigned char *s = (const unsigned char *)tok_list_str(l, i);
        size_t len = l->items[i].len, start = bytes->len, k = 0;
        while (k < len) {
            size_t cl;
            int b = tok_bytelevel_byte(u8_decode(s + k, len - k, &cl));
            if (b < 0) break;
            unsigned char c = (unsigned char)b;
            if (buf_append(bytes, &c, 1)) return -1;
            k += cl;
        }
        if (k < len) { /* a character outside the map: the token's own bytes */
            bytes->len = start;
            if (buf_append(bytes, s, len)) return -1;
        }
    }
    if (tok_list_begin(sc, -1, 0)) return -1;
    size_t before = sc->text.len;
    if (u8_lossy_append(&sc->text, bytes->p ? bytes->p : "", bytes->len)) return -1;
    sc->items[sc->n - 1].len = sc->text.len - before;
    return 0;
}

static int dec_apply(const tok_decoder *d, tok_list *l, tok_list *sc, tok_rx_ws *rx) {
    if (d->type == DEC_SEQUENCE) {
        for (size_t i = 0; i < d->n_kids; i++)
            if (dec_apply(d->kids[i], l, sc, rx)) return -1;
        return 0;
    }
    tok_list_clear(sc);
    switch (d->type) {
    case DEC_SEQUENCE:
        break;
    case DEC_REPLACE: {
        tok_ranges *m = tok_rx_ranges(rx);
        for (size_t i = 0; i < l->n; i++) {
            const char *s = tok_list_str(l, i);
            size_t len = l->items[i].len, start = 0;
            int rc = tok_pattern_find(&d->pat, rx, s, len, m);
            if (rc < 0) return rc;
            if (tok_list_begin(sc, -1, 0)) return -1;
            for (size_t k = 0; k < m->n; k++) {
                size_t a = m->v[2 * k], b = m->v[2 * k + 1];
                if (tok_list_extend(sc, s + start, a - start) || tok_list_extend(sc, d->b, d->b_len)) return -1;
                start = b;
            }
            if (tok_list_extend(sc, s + start, len - start)) return -1;
        }
        break;
    }
    case DEC_BYTE_LEVEL:
        if (byte_level(l, sc, tok_rx_buf(rx))) return -1;
        break;
    case DEC_BYTE_FALLBACK: {
        int open = 0;
        for (size_t i = 0; i < l->n; i++) {
            const char *s = tok_list_str(l, i);
            int b = byte_token(s, l->items[i].len);
            if (b >= 0) {
                unsigned char c = (unsigned char)b;
                if (!open && tok_list_begin(sc, -1, 0)) return -1;
                open = 1;
                if (tok_list_extend(sc, &c, 1)) return -1;
            } else if (flush_bytes(sc, &open) || tok_list_push(sc, s, l->items[i].len, -1, 0)) {
                return -1;
            }
        }
        if (flush_bytes(sc, &open)) return -1;
        break;
    }
    case DEC_FUSE:
        if (tok_list_begin(sc, -1, 0)) return -1;
        for (size_t i = 0; i < l->n; i++)
            if (tok_list_extend(sc, tok_list_str(l, i), l->items[i].len)) return -1;
        break;
    case DEC_STRIP:
        for (size_t i = 0; i < l->n; i++) {
            const char *s = tok_list_str(l, i);
            size_t b = 0, e = l->items[i].len;
            for (size_t k = 0; k < d->start && e - b >= d->ch_len && memcmp(s + b, d->ch, d->ch_len) == 0; k++)
                b += d->ch_len;
            for (size_t k = 0; k < d->stop && e - b >= d->ch_len && memcmp(s + e - d->ch_len, d->ch, d->ch_len) == 0;
                 k++)
                e -= d->ch_len;
            if (tok_list_push(sc, s + b, e - b, -1, 0)) return -1;
        }
        break;
    case DEC_METASPACE:
        for (size_t i = 0; i < l->n; i++) {
            const char *s = tok_list_str(l, i);
            size_t len = l->items[i].len, start = 0, k = 0;
            if (tok_list_begin(sc, -1, 0)) return -1;
            while (k + d->ch_len <= len) {
                if (memcmp(s + k, d->ch, d->ch_len) == 0) {
                    if (tok_list_extend(sc, s + start, k - start)) return -1;
                    if (!(i == 0 && d->first_drop) && tok_list_extend(sc, " ", 1)) return -1;
                    k += d->ch_len;
                    start = k;
                } else {
                    k++;
                }
            }
            if (tok_list_extend(sc, s + start, len - start)) return -1;
        }
        break;
    }
    tok_list_swap(l, sc);
    return 0;
}

int tok_decode_chain(const tok_decoder *d, tok_list *l, tok_list *scratch, tok_rx_ws *rx) {
    return d ? dec_apply(d, l, scratch, rx) : 0;
}

/* ------------------------------------------- one token's bytes inside a text */

/* The chain on a lone token as it reads in the middle of a text: a Metaspace
 * replacement is always a space, byte-fallback and byte-level tokens give
 * their raw bytes (no UTF-8 check: a partial character is a partial
 * character), and a Strip after Fuse (it trims the whole text's ends) is
 * skipped. cur holds the token on entry and the bytes on return. */
static int dec_token_bytes(const tok_decoder *d, buf_t *cur, buf_t *tmp, tok_rx_ws *rx, int *fused) {
    if (d->type == DEC_SEQUENCE) {
        for (size_t i = 0; i < d->n_kids; i++)
            if (dec_token_bytes(d->kids[i], cur, tmp, rx, fused)) return -1;
        return 0;
    }
    const char *s = cur->p ? cur->p : "";
    size_t len = cur->len;
    buf_clear(tmp);
    switch (d->type) {
    case DEC_SEQUENCE:
    case DEC_FUSE:
        *fused = 1;
        return 0;
    case DEC_REPLACE: {
        tok_ranges *m = tok_rx_ranges(rx);
        int rc = tok_pattern_find(&d->pat, rx, s, len, m);
        if (rc < 0) return rc;
        size_t start = 0;
        for (size_t k = 0; k < m->n; k++) {
            size_t a = m->v[2 * k], b = m->v[2 * k + 1];
            if (buf_append(tmp, s + start, a - start) || buf_append(tmp, d->b, d->b_len)) return -1;
            start = b;
        }
        if (buf_append(tmp, s + start, len - start)) return -1;
        break;
    }
    case DEC_BYTE_FALLBACK: {
        int b = byte_token(s, len);
        if (b < 0) return 0;
        unsigned char c = (unsigned char)b;
        if (buf_append(tmp, &c, 1)) return -1;
        break;
    }
    case DEC_BYTE_LEVEL: {
        size_t k = 0;
        while (k < len) {
            size_t cl;
            int b = tok_bytelevel_byte(u8_decode((const unsigned char *)s + k, len - k, &cl));
            if (b < 0) break;
            unsigned char c = (unsigned char)b;
            if (buf_append(tmp, &c, 1)) return -1;
            k += cl;
        }
        if (k < len) return 0; /* a character outside the map: the token's own bytes */
        break;
    }
    case DEC_STRIP: {
        if (*fused) return 0;
        size_t b = 0, e = len;
        for (size_t k = 0; k < d->start && e - b >= d->ch_len && memcmp(s + b, d->ch, d->ch_len) == 0; k++)
            b += d->ch_len;
        for (size_t k = 0; k < d->stop && e - b >= d->ch_len && memcmp(s + e - d->ch_len, d->ch, d->ch_len) == 0; k++)
            e -= d->ch_len;
        if (buf_append(tmp, s + b, e - b)) return -1;
        break;
    }
    case DEC_METASPACE: {
        size_t start = 0, k = 0;
        while (k + d->ch_len <= len) {
            if (memcmp(s + k, d->ch, d->ch_len) == 0) {
                if (buf_append(tmp, s + start, k - start) || buf_append(tmp, " ", 1)) return -1;
                k += d->ch_len;
                start = k;
            } else {
                k++;
            }
        }
        if (buf_append(tmp, s + start, len - start)) return -1;
        break;
    }
    }
    buf_t t = *cur;
    *cur = *tmp;
    *tmp = t;
    return 0;
}

int tok_decoder_token_bytes(const tok_decoder *d, buf_t *cur, buf_t *tmp, tok_rx_ws *rx) {
    int fused = 0;
    return d ? dec_token_bytes(d, cur, tmp, rx, &fused) : 0;
}
