/*
 * tok_regex.c - the regular expressions of tokenizer.json, run by PCRE2.
 *
 * HF `tokenizers` runs its patterns with Oniguruma (Unicode-aware \s, \d,
 * \p{L}, ...). We compile them with PCRE2 in UTF + UCP mode and JIT, which
 * agrees on the constructs real tokenizers use; the few escapes whose
 * meaning differs are rewritten first (\h is a hex digit in Oniguruma, \w a
 * Unicode word character: Alphabetic, marks, decimal digits, connector
 * punctuation, joiners). PCRE2_MATCH_INVALID_UTF keeps matching defined on
 * input that is not valid UTF-8 (such bytes never match). Iteration follows
 * Oniguruma's find_iter: after an empty match that ends where the previous
 * match ended, the search moves on by one character.
 *
 * A compiled pattern is shared and read-only; each thread brings its own
 * tok_rx_ws (match data and JIT stack). Memory goes through mem_malloc.
 */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <string.h>

struct tok_regex {
    pcre2_general_context *gctx;
    pcre2_code *code;
};

struct tok_rx_ws {
    pcre2_general_context *gctx;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *stack;
    tok_ranges ranges;
    buf_t buf;
};

static void *rx_malloc(size_t n, void *data) {
    (void)data;
    return mem_malloc(n);
}

static void rx_free(void *p, void *data) {
    (void)data;
    xllm_free(p);
}

#define WORD_CLASS "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}"

/* Oniguruma -> PCRE2 for the escapes whose meaning differs. */
static int translate(const char *pat, size_t len, buf_t *out) {
    int in_class = 0;
    for (size_t i = 0; i < len; i++) {
        char c = pat[i];
        if (c == '\\' && i + 1 < len) {
            char e = pat[i + 1];
            const char *rep = NULL;
            if (e == 'h') rep = in_class ? "0-9A-Fa-f" : "[0-9A-Fa-f]";
            else if (e == 'H' && !in_class) rep = "[^0-9A-Fa-f]";
            else if (e == 'w') rep = in_class ? WORD_CLASS : "[" WORD_CLASS "]";
            else if (e == 'W' && !in_class) rep = "[^" WORD_CLASS "]";
            if (rep) {
                if (buf_append(out, rep, strlen(rep))) return -1;
            } else if (buf_append(out, pat + i, 2)) {
                return -1;
            }
            i++;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
            if (buf_append(out, &c, 1)) return -1;
            /* a ']' or '^]' right after '[' is literal */
            if (i + 1 < len && pat[i + 1] == '^') {
                if (buf_append(out, "^", 1)) return -1;
                i++;
            }
            if (i + 1 < len && pat[i + 1] == ']') {
                if (buf_append(out, "\\]", 2)) return -1;
                i++;
            }
            continue;
        }
        if (c == '[' && in_class) in_class++; /* nested class (Oniguruma) or [:alpha:] */
        else if (c == ']' && in_class) in_class--;
        if (buf_append(out, &c, 1)) return -1;
    }
    return 0;
}

void tok_regex_free(tok_regex *re) {
    if (!re) return;
    pcre2_code_free(re->code);
    pcre2_general_context_free(re->gctx);
    xllm_free(re);
}

xllm_status tok_regex_compile(const char *pat, size_t len, const char *path, const char *what, tok_regex **out,
                              xllm_error *err) {
    *out = NULL;
    buf_t t = {0};
    tok_regex *re = mem_calloc(1, sizeof *re);
    if (!re || translate(pat, len, &t) || buf_reserve(&t, 0) ||
        !(re->gctx = pcre2_general_context_create(rx_malloc, rx_free, NULL))) {
        buf_free(&t);
        tok_regex_free(re);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    pcre2_compile_context *cctx = pcre2_compile_context_create(re->gctx);
    int code;
    PCRE2_SIZE off;
    re->code = pcre2_compile((PCRE2_SPTR)t.p, t.len, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &off,
                             cctx);
    pcre2_compile_context_free(cctx);
    buf_free(&t);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        tok_regex_free(re);
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: %s regex \"%.*s\" is not supported: %s", path, what,
                           (int)(len > 200 ? 200 : len), pat, (const char *)msg);
    }
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE); /* best effort: the interpreter works too */
    *out = re;
    return XLLM_OK;
}

tok_rx_ws *tok_rx_ws_new(void) {
    tok_rx_ws *ws = mem_calloc(1, sizeof *ws);
    if (!ws) return NULL;
    ws->gctx = pcre2_general_context_create(rx_malloc, rx_free, NULL);
    if (ws->gctx) {
        ws->md = pcre2_match_data_create(1, ws->gctx);
        ws->mctx = pcre2_match_context_create(ws->gctx);
    }
    if (!ws->gctx || !ws->md || !ws->mctx) {
        tok_rx_ws_free(ws);
        return NULL;
    }
    return ws;
}

tok_ranges *tok_rx_ranges(tok_rx_ws *ws) { return &ws->ranges; }
buf_t *tok_rx_buf(tok_rx_ws *ws) { return &ws->buf; }

void tok_rx_ws_free(tok_rx_ws *ws) {
    if (!ws) return;
    tok_ranges_free(&ws->ranges);
    buf_free(&ws->buf);
    pcre2_jit_stack_free(ws->stack);
    pcre2_match_context_free(ws->mctx);
    pcre2_match_data_free(ws->md);
    pcre2_general_context_free(ws->gctx);
    xllm_free(ws);
}

static int run(const tok_regex *re, tok_rx_ws *ws, const char *s, size_t len, size_t at, uint32_t opts,
               size_t *ms, size_t *me) {
    for (int attempt = 0;; attempt++) {
        int rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, at, opts, ws->md, ws->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) return 0;
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && attempt == 0 && !ws->stack) {
            /* the default 32 KiB JIT stack is too small: give it room */
            ws->stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, ws->gctx);
            if (!ws->stack) return TOK_ERR_OOM;
            pcre2_jit_stack_assign(ws->mctx, NULL, ws->stack);
            continue;
        }
        if (rc == PCRE2_ERROR_NOMEMORY) return TOK_ERR_OOM;
        if (rc < 0) return TOK_ERR_REGEX;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(ws->md);
        *ms = ov[0];
        *me = ov[1] < ov[0] ? ov[0] : ov[1];
        return 1;
    }
}

int tok_regex_next(const tok_regex *re, tok_rx_ws *ws, const char *s, size_t len, size_t *pos, size_t *last,
                   size_t *ms, size_t *me) {
    while (*pos <= len) {
        int rc = run(re, ws, s, len, *pos, 0, ms, me);
        if (rc <= 0) return rc;
        if (*ms == *me && *last == *me) { /* empty, right after the last match */
            *pos += *pos < len ? u8_len((const unsigned char *)s + *pos, len - *pos) : 1;
            continue;
        }
        *pos = *me;
        *last = *me;
        return 1;
    }
    return 0;
}

int tok_regex_match_at(const tok_regex *re, tok_rx_ws *ws, const char *s, size_t len, size_t at) {
    size_t ms, me;
    return run(re, ws, s, len, at, PCRE2_ANCHORED, &ms, &me);
}
