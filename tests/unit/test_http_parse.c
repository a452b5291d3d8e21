/*
 * test_http_parse.c - the server's strict HTTP/1.1 head parser, chunked
 * decoder and strict JSON check (src/server/http_parse.c, json_strict.c):
 * what they accept, what they refuse with which status, the chunked body
 * fed in every split, and the JSON allocation bound. Deterministic and
 * socket-free, so it also runs in the sanitizer pass (the socket-level
 * suite, tests/e2e/hostile_net.py, does not).
 */
#include "test.h"
#include "server/srv.h"

#include <stdlib.h>
#include <string.h>

static int parse(const char *s, http_head *h) {
    size_t hl = 0;
    if (!http_head_end(s, strlen(s), &hl)) return -1;
    return http_head_parse(s, hl, h);
}

static void test_heads(void) {
    http_head h;
    CHECK(parse("GET /health HTTP/1.1\r\nHost: x\r\n\r\n", &h) == 0);
    CHECK(!strcmp(h.method, "GET") && !strcmp(h.path, "/health") && h.minor == 1 && h.keep_alive && h.content_length == -1);
    CHECK(parse("\r\nPOST /v1/completions?a=b HTTP/1.0\r\nContent-Length: 12\r\nAuthorization: Bearer k\r\n\r\n", &h) == 0);
    CHECK(!strcmp(h.path, "/v1/completions") && !strcmp(h.target, "/v1/completions?a=b") && h.minor == 0 && !h.keep_alive);
    CHECK(h.content_length == 12 && h.has_auth && !strcmp(h.auth, "Bearer k") && h.auth_len == 8);
    CHECK(parse("POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\nConnection: close\r\nExpect: 100-continue\r\n\r\n", &h) == 0);
    CHECK(h.chunked && !h.keep_alive && h.expect_continue);
    CHECK(parse("GET / HTTP/1.1\r\nX: a \t\r\n\r\n", &h) == 0);
    struct { const char *req; int status; } bad[] = {
        {"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: 1234567890123456789\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\ny: z\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\ry: z\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\x01z\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\n: x\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
        {"GET / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
        {"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 400},
        {"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nAuthorization: a\r\nAuthorization: b\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nExpect: nothing\r\n\r\n", 417},
        {"GET / HTTP/2.0\r\n\r\n", 400},
        {"GET / HTTP/1.2\r\n\r\n", 505},
        {"GET  / HTTP/1.1\r\n\r\n", 400},
        {"GET x HTTP/1.1\r\n\r\n", 400},
        {"G\x01T / HTTP/1.1\r\n\r\n", 400},
        {"GET / HTTP/1.1\n\r\n\r\n", 400},
        {"VERYLONGMETHODNAMEHERE / HTTP/1.1\r\n\r\n", 501},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int st = parse(bad[i].req, &h);
        CHECK_MSG(st == bad[i].status && h.why[0], "case %zu: %d (want %d)", i, st, bad[i].status);
    }
    /* a NUL in a header value */
    const char nul[] = "GET / HTTP/1.1\r\nX: a\0b\r\n\r\n";
    size_t hl = 0;
    CHECK(http_head_end(nul, sizeof nul - 1, &hl) && http_head_parse(nul, hl, &h) == 400);
    /* too many fields, too long a target */
    char big[HTTP_MAX_HEAD * 2];
    size_t o = (size_t)snprintf(big, sizeof big, "GET / HTTP/1.1\r\n");
    for (int i = 0; i <= HTTP_MAX_FIELDS; i++) o += (size_t)snprintf(big + o, sizeof big - o, "X%d: y\r\n", i);
    snprintf(big + o, sizeof big - o, "\r\n");
    CHECK(parse(big, &h) == 431);
    o = (size_t)snprintf(big, sizeof big, "GET /");
    memset(big + o, 'a', 3000);
    snprintf(big + o + 3000, sizeof big - o - 3000, " HTTP/1.1\r\n\r\n");
    CHECK(parse(big, &h) == 414);
    CHECK(!http_head_end("GET / HTTP/1.1\r\nHost: x\r\n", 25, &hl));
    /* a head cut anywhere is refused without reading past its end (an exact-size copy: ASan sees any overread;
       fuzz/corpus/http/regress_head_name_at_end found one after a header name) */
    const char *full = "POST /v1/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (size_t cut = 0; cut + 2 < strlen(full); cut++) {
        char *tb = malloc(cut ? cut : 1);
        memcpy(tb, full, cut);
        int st = http_head_parse(tb, cut, &h);
        CHECK_MSG(st >= 400, "cut %zu: %d", cut, st);
        free(tb);
    }
}

/* A chunked body decoded from pieces split at every position. */
static void test_chunked(void) {
    const char *body = "5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nTrailer: x\r\n\r\nNEXT";
    size_t n = strlen(body);
    for (size_t cut = 0; cut <= n; cut++) {
        http_chunk c;
        memset(&c, 0, sizeof c);
        char out[64];
        size_t ol = 0, pos = 0;
        int done = 0, bad = 0;
        for (int part = 0; part < 2 && !done && !bad; part++) {
            size_t end = part ? n : cut;
            while (pos < end) {
                size_t used = 0, dl = 0;
                const char *d = NULL;
                int r = http_chunk_step(&c, body + pos, end - pos, &used, &d, &dl);
                if (r < 0) { bad = 1; break; }
                if (dl) memcpy(out + ol, d, dl);
                ol += dl;
                pos += used;
                if (r == 1) { done = 1; break; }
                if (!used) break;
            }
        }
        CHECK_MSG(done && ol == 12 && !memcmp(out, "hello, world", 12) && !strcmp(body + pos, "NEXT"), "cut %zu", cut);
    }
    const char *bads[] = {"x\r\n", "5\r\nhelloXX", "\r\n", "12345678901234567\r\n", "5\n", "0\r\nbad\x01\r\n\r\n"};
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        http_chunk c;
        memset(&c, 0, sizeof c);
        size_t used = 0, dl = 0, pos = 0, len = strlen(bads[i]);
        const char *d;
        int r = 0;
        while (pos < len && (r = http_chunk_step(&c, bads[i] + pos, len - pos, &used, &d, &dl)) == 0 && used) pos += used;
        CHECK_MSG(r < 0, "bad chunked %zu", i);
    }
}

static void test_json(void) {
    size_t pos;
    const char *why;
    const char *good[] = {"{}", " [1, -0.5e+3, \"a\\u00e9\\n\", true, false, null, {\"k\": []}] ", "0", "\"x\""};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        CHECK_MSG(json_check(good[i], strlen(good[i]), 1000, &pos, &why) == 0, "good %zu", i);
    struct { const char *s; size_t at; } bad[] = {
        {"{} x", 3}, {"{}{}", 2}, {"[007]", 1}, {"[-]", 2}, {"[1.]", 3}, {"[\"a\x01\"]", 3}, {"{\"a\":1,}", 7},
        {"[1,]", 3}, {"[\"\\x\"]", 3}, {"{\"a\" 1}", 5}, {"{1:2}", 1}, {"[tru]", 1}, {"", 0}, {"[1", 2},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int r = json_check(bad[i].s, strlen(bad[i].s), 1000, &pos, &why);
        CHECK_MSG(r == -1 && pos == bad[i].at && why, "bad %zu: pos %zu (want %zu) %s", i, pos, bad[i].at, why ? why : "");
    }
    char deep[300];
    memset(deep, '[', 200);
    CHECK(json_check(deep, 200, 1000, &pos, &why) == -1 && strstr(why, "deep"));
    /* the allocation bound: values, keys and string copies are counted */
    CHECK(json_check("[1,2,3]", 7, 4, &pos, &why) == 0);
    CHECK(json_check("[1,2,3,4]", 9, 4, &pos, &why) == -1 && strstr(why, "too many"));
    CHECK(json_check("{\"a\":\"b\"}", 9, 4, &pos, &why) == 0); /* object, key copy, string node and copy */
    CHECK(json_check("{\"a\":\"b\"}", 9, 3, &pos, &why) == -1);
    CHECK(json_alloc_limit(100) == 65536 && json_alloc_limit((size_t)8 << 20) == ((size_t)8 << 20) / 48);
}

int main(void) {
    test_heads();
    test_chunked();
    test_json();
    return test_report("test_http_parse");
}
