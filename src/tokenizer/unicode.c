/*
 * unicode.c - the Unicode operations of the normalizers and pre-tokenizers,
 * on top of utf8proc: NFC / NFD / NFKC / NFKD, lowercase as Rust's
 * char::to_lowercase, dropping combining marks, and the character classes
 * HF uses (char::is_numeric, punctuation).
 *
 * Normalizing is skipped when a quick check proves the text is already in
 * the form (every character a starter without decomposition that cannot
 * compose with what precedes it), which is the common case for ASCII and
 * most scripts; otherwise utf8proc decomposes and recomposes. Bytes that are
 * not valid UTF-8 pass through untouched (HF never sees them).
 */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"

#include <string.h>
#include <utf8proc.h>

static int is_hangul_vt(int32_t c) { return (c >= 0x1161 && c <= 0x1175) || (c >= 0x11a8 && c <= 0x11c2); }

/* Is c unchanged by the form whatever surrounds it? */
static int nf_inert(tok_nf form, int32_t c) {
    if (c < 0x80) return 1;
    int compose = form == TOK_NF_C || form == TOK_NF_KC;
    if (form == TOK_NF_C && c < 0x300) return 1;
    const utf8proc_property_t *p = utf8proc_get_property(c);
    if (p->combining_class != 0 || p->decomp_seqindex != UINT16_MAX) return 0;
    if (compose) return !(p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) && !is_hangul_vt(c);
    return !(c >= 0xac00 && c <= 0xd7a3);
}

static int encode_utf32(const int32_t *u, size_t n, buf_t *out) {
    if (buf_reserve(out, n * 4)) return -1;
    for (size_t i = 0; i < n; i++) out->len += u8_encode(u[i], out->p + out->len);
    out->p[out->len] = 0;
    return 0;
}

/* One valid UTF-8 run through utf8proc. */
static int normalize_run(tok_nf form, const char *s, size_t n, buf_t *out) {
    utf8proc_option_t opt = UTF8PROC_STABLE;
    if (form == TOK_NF_C || form == TOK_NF_KC) opt |= UTF8PROC_COMPOSE;
    else opt |= UTF8PROC_DECOMPOSE;
    if (form == TOK_NF_KC || form == TOK_NF_KD) opt |= UTF8PROC_COMPAT;
    size_t cap = n + 16;
    for (;;) {
        int32_t *u = mem_malloc_array(cap, sizeof *u);
        if (!u) return -1;
        utf8proc_ssize_t r = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, u,
                                                (utf8proc_ssize_t)cap, opt);
        if (r >= 0 && (size_t)r <= cap) {
            r = utf8proc_normalize_utf32(u, r, opt);
            int rc = r < 0 ? -1 : encode_utf32(u, (size_t)r, out);
            xllm_free(u);
            return rc;
        }
        xllm_free(u);
        if (r < 0) return buf_append(out, s, n); /* cannot happen on valid input */
        cap = (size_t)r;
    }
}

int tok_uni_normalize(tok_nf form, const char *s, size_t n, buf_t *out) {
    buf_clear(out);
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, l;
    while (i < n && (u[i] < 0x80 || nf_inert(form, u8_decode(u + i, n - i, &l)))) i += u[i] < 0x80 ? 1 : l;
    if (i == n) return buf_append(out, s, n);
    /* slow path: valid runs through utf8proc, invalid bytes copied */
    i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && u8_decode(u + j, n - j, &l) >= 0) j += l;
        if (j > i && normalize_run(form, s + i, j - i, out)) return -1;
        if (j < n && buf_append(out, s + j, 1)) return -1;
        i = j + (j < n);
    }
    return 0;
}

int tok_uni_lowercase(const char *s, size_t n, buf_t *out) {
    buf_clear(out);
    if (buf_reserve(out, n)) return -1;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        if (u[i] < 0x80) {
            char c = (char)(u[i] >= 'A' && u[i] <= 'Z' ? u[i] + 32 : u[i]);
            if (buf_append(out, &c, 1)) return -1;
            i++;
            continue;
        }
        size_t l;
        int32_t cp = u8_decode(u + i, n - i, &l);
        if (cp < 0) {
            if (buf_append(out, s + i, l)) return -1;
        } else if (cp == 0x130) { /* the one unconditional multi-char lowercase */
            if (buf_append(out, "i\xcc\x87", 3)) return -1;
        } else {
            char b[4];
            if (buf_append(out, b, u8_encode(utf8proc_tolower(cp), b))) return -1;
        }
        i += l;
    }
    return 0;
}

int tok_uni_is_mark(int32_t cp) {
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

int tok_uni_strip_accents(const char *s, size_t n, buf_t *out) {
    buf_clear(out);
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t l;
        int32_t cp = u8_decode(u + i, n - i, &l);
        if ((cp < 0 || !tok_uni_is_mark(cp)) && buf_append(out, s + i, l)) return -1;
        i += l;
    }
    return buf_reserve(out, 0);
}

int tok_uni_is_numeric(int32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

int tok_uni_is_punctuation(int32_t cp) {
    if (cp < 0x80) return cp > 0x20 && cp < 0x7f && !((cp >= '0' && cp <= '9') || ((cp | 32) >= 'a' && (cp | 32) <= 'z'));
    utf8proc_category_t c = utf8proc_category(cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}
