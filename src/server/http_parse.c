/*
 * http_parse.c - a strict HTTP/1.x request head parser (RFC 9112), for the
 * server's own connection layer (listener.c).
 *
 * The idea: refuse anything a lenient parser upstream or downstream could
 * read differently (the request-smuggling family), rather than guess. Lines
 * end in CRLF only (a bare CR or LF is a 400); a header name is a token with
 * the colon right after it (no whitespace before the colon); values carry no
 * NUL or other control byte but HTAB; obsolete line folding is refused;
 * Content-Length is digits only and appears at most once; Transfer-Encoding
 * must be exactly "chunked" (anything else 501) and never comes with a
 * Content-Length. The parser is a pure function of the bytes: no allocation,
 * no state, thread-safe.
 */
#include "srv.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static int tchar(unsigned char c) {
    if (c >= '0' && c <= '9') return 1;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int bad(http_head *h, int status, const char *fmt, const char *arg) {
    snprintf(h->why, sizeof h->why, fmt, arg);
    return status;
}

const char *http_head_end(const char *buf, size_t n, size_t *head_len) {
    /* leading empty lines are ignored (RFC 9112 2.2) */
    size_t i = 0;
    while (i + 1 < n && buf[i] == '\r' && buf[i + 1] == '\n') i += 2;
    for (; i + 3 < n; i++)
        if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n') {
            *head_len = i + 4;
            return buf + i + 4;
        }
    return NULL;
}

int http_head_parse(const char *buf, size_t n, http_head *h) {
    memset(h, 0, sizeof *h);
    h->content_length = -1;
    size_t i = 0;
    while (i + 1 < n && buf[i] == '\r' && buf[i + 1] == '\n') i += 2;
    /* request line: METHOD SP target SP HTTP/1.x CRLF */
    size_t m = 0;
    while (i < n && tchar((unsigned char)buf[i])) {
        if (m + 1 >= sizeof h->method) return bad(h, 501, "%s", "the method is not implemented");
        h->method[m++] = buf[i++];
    }
    if (!m || i >= n || buf[i] != ' ') return bad(h, 400, "%s", "malformed request line");
    i++;
    size_t t = 0;
    while (i < n && buf[i] != ' ') {
        unsigned char c = (unsigned char)buf[i];
        if (c <= 0x20 || c == 0x7f) return bad(h, 400, "%s", "a control byte or space in the request target");
        if (t + 1 >= sizeof h->target) return bad(h, 414, "%s", "the request target is too long");
        h->target[t++] = buf[i++];
    }
    if (!t || h->target[0] != '/') return bad(h, 400, "%s", "the request target must start with '/'");
    if (i >= n || buf[i] != ' ') return bad(h, 400, "%s", "malformed request line");
    i++;
    if (n - i < 10 || memcmp(buf + i, "HTTP/1.", 7) || buf[i + 8] != '\r' || buf[i + 9] != '\n')
        return bad(h, 400, "%s", "malformed request line (HTTP/1.0 or HTTP/1.1 expected)");
    if (buf[i + 7] != '0' && buf[i + 7] != '1') return bad(h, 505, "%s", "HTTP version not supported");
    h->minor = buf[i + 7] - '0';
    h->keep_alive = h->minor == 1;
    i += 10;
    int te = 0, n_fields = 0;
    for (;;) {
        if (i + 1 < n && buf[i] == '\r' && buf[i + 1] == '\n') { i += 2; break; }
        if (i >= n) return bad(h, 400, "%s", "the header block does not end");
        if (buf[i] == ' ' || buf[i] == '\t') return bad(h, 400, "%s", "obsolete header line folding");
        if (++n_fields > HTTP_MAX_FIELDS) return bad(h, 431, "%s", "too many header fields");
        size_t ns = i;
        while (i < n && tchar((unsigned char)buf[i])) i++;
        size_t nl = i - ns;
        if (!nl) return bad(h, 400, "%s", "malformed header field name");
        if (i >= n) return bad(h, 400, "%s", "the header block does not end");
        if (buf[i] != ':')
            return bad(h, 400, "%s", buf[i] == ' ' || buf[i] == '\t' ? "whitespace before a header's colon"
                                                                     : "malformed header field name");
        i++;
        while (i < n && (buf[i] == ' ' || buf[i] == '\t')) i++;
        size_t vs = i;
        while (i < n && buf[i] != '\r' && buf[i] != '\n') {
            unsigned char c = (unsigned char)buf[i];
            if ((c < 0x20 && c != '\t') || c == 0x7f) return bad(h, 400, "%s", "a control byte in a header value");
            i++;
        }
        if (i + 1 >= n || buf[i] != '\r' || buf[i + 1] != '\n') return bad(h, 400, "%s", "a bare CR or LF in the header block");
        size_t ve = i;
        while (ve > vs && (buf[ve - 1] == ' ' || buf[ve - 1] == '\t')) ve--;
        i += 2;
        const char *name = buf + ns, *val = buf + vs;
        size_t vl = ve - vs;
#define IS(s) (nl == sizeof(s) - 1 && !strncasecmp(name, s, nl))
        if (IS("content-length")) {
            if (h->content_length >= 0) return bad(h, 400, "%s", "more than one Content-Length");
            if (!vl || vl > 18) return bad(h, 400, "%s", "malformed Content-Length");
            long long v = 0;
            for (size_t k = 0; k < vl; k++) {
                if (val[k] < '0' || val[k] > '9') return bad(h, 400, "%s", "malformed Content-Length");
                v = v * 10 + (val[k] - '0');
            }
            h->content_length = v;
        } else if (IS("transfer-encoding")) {
            if (te) return bad(h, 400, "%s", "more than one Transfer-Encoding");
            te = 1;
            if (vl != 7 || strncasecmp(val, "chunked", 7)) return bad(h, 501, "%s", "only Transfer-Encoding: chunked is implemented");
            h->chunked = 1;
        } else if (IS("authorization")) {
            if (h->has_auth) return bad(h, 400, "%s", "more than one Authorization");
            h->has_auth = 1;
            if (vl >= sizeof h->auth) vl = sizeof h->auth - 1;  /* too long to be the key: compared as is, fails */
            memcpy(h->auth, val, vl);
            h->auth[vl] = 0;
            h->auth_len = vl;
        } else if (IS("connection")) {
            /* a token list; "close" and "keep-alive" are the ones that matter */
            for (size_t k = 0; k + 5 <= vl; k++)
                if (!strncasecmp(val + k, "close", 5)) h->keep_alive = 0;
            for (size_t k = 0; k + 10 <= vl; k++)
                if (!strncasecmp(val + k, "keep-alive", 10) && h->minor == 0) h->keep_alive = 1;
        } else if (IS("expect")) {
            if (vl == 12 && !strncasecmp(val, "100-continue", 12)) h->expect_continue = h->minor == 1;
            else return bad(h, 417, "%s", "only Expect: 100-continue is understood");
        }
#undef IS
    }
    if (h->chunked && h->content_length >= 0) return bad(h, 400, "%s", "both Content-Length and Transfer-Encoding");
    if (h->chunked && h->minor == 0) return bad(h, 400, "%s", "Transfer-Encoding in an HTTP/1.0 request");
    h->head_len = i;
    /* the path without its query */
    size_t pl = strcspn(h->target, "?");
    if (pl >= sizeof h->path) pl = sizeof h->path - 1;
    memcpy(h->path, h->target, pl);
    h->path[pl] = 0;
    return 0;
}

/* Chunked body decoding, one step at a time (the bytes arrive in pieces). */
int http_chunk_step(http_chunk *c, const char *in, size_t n, size_t *used, const char **data, size_t *data_len) {
    size_t i = 0;
    *data = NULL;
    *data_len = 0;
    while (i < n) {
        char ch = in[i];
        switch (c->state) {
        case 0: /* size digits */
            if ((ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f')) {
                int d = ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10;
                if (c->digits++ >= 15) return -1;
                c->size = c->size * 16 + (unsigned long long)d;
                i++;
            } else if (c->digits && ch == ';') { c->state = 1; i++; }
            else if (c->digits && ch == '\r') { c->state = 2; i++; }
            else return -1;
            break;
        case 1: /* extension: skipped, no control bytes */
            if (ch == '\r') c->state = 2;
            else if ((unsigned char)ch < 0x20 && ch != '\t') return -1;
            if (++c->ext > 256) return -1;
            i++;
            break;
        case 2: /* LF after the size line */
            if (ch != '\n') return -1;
            i++;
            c->state = c->size ? 3 : 5;
            break;
        case 3: { /* data */
            size_t k = n - i;
            if (k > c->size) k = (size_t)c->size;
            *data = in + i;
            *data_len = k;
            c->size -= k;
            i += k;
            if (!c->size) c->state = 4;
            *used = i;
            return 0;
        }
        case 4: /* CRLF after data */
            if (ch != (c->crlf ? '\n' : '\r')) return -1;
            i++;
            if (c->crlf) { c->crlf = 0; c->state = 0; c->digits = 0; c->ext = 0; }
            else c->crlf = 1;
            break;
        case 5: /* trailer lines, then the final CRLF */
            if (ch == '\r') { c->state = 6; i++; }
            else { c->state = 7; }
            break;
        case 6:
            if (ch != '\n') return -1;
            i++;
            *used = i;
            c->state = 8;
            return 1;
        case 7: /* a trailer field: skipped to its CRLF */
            if (ch == '\r') { c->state = 9; i++; }
            else if ((unsigned char)ch < 0x20 && ch != '\t') return -1;
            else i++;
            if (++c->ext > 4096) return -1;
            break;
        case 9:
            if (ch != '\n') return -1;
            i++;
            c->state = 5;
            break;
        default: return -1;
        }
    }
    *used = i;
    return c->state == 8 ? 1 : 0;
}
