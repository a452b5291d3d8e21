/*
 * fuzz_http.c - libFuzzer harness for the server's request bodies
 * (src/server/request.c: srv_req_parse, what POST /v1/completions and
 * /v1/chat/completions do with a body before anything reaches an engine).
 *
 * The first byte picks the endpoint (bit 0: chat) and the model the body
 * gets when it names none (bit 1: the one with a PII policy, every built-in
 * detector, a custom regex, restore on); the rest is the body. With bit 2
 * the rest is a whole HTTP request instead (the path a socket's bytes take
 * in listener.c, without the socket): the strict head parser, admission at
 * the head (API key "k", path, method, declared size), the body by
 * Content-Length or the chunked decoder, then the endpoint: the generating
 * ones' parsing (srv_req_parse; running them needs the engine), and the
 * others' whole handler (http_handle: /tokenize, /detokenize, /v1/models,
 * /health, /metrics, and /v1/embeddings for bodies up to 512 bytes) answering
 * into a fake connection (this file defines listener.c's functions, so the
 * socket layer is not linked), which must be answered exactly once with a
 * status the endpoint may give and a JSON body ({"error": ...} when it
 * refuses); each refusal must be one of the statuses its stage may give. Both models
 * are the bundled stories260k (its tokenizer and plain chat template) loaded
 * once per process; the PII model adds masking of prompts and messages. The
 * contract checked beyond ASan/UBSan/LSan: a failure is a 4xx with a message
 * (500 only for out of memory), naming a field when it is a 400 about one;
 * a success has 1..64 prompts of token ids inside the vocabulary that fit
 * the context with max_new_tokens. Leaks are LeakSanitizer's (libFuzzer
 * checks each input): unlike the loader harnesses, the model and template
 * live across inputs and keep caches (tokenizer, compiled template), so
 * mem_malloc's byte count is not expected to return to where it was.
 */
#include "server/srv.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a connection without a socket: listener.c's functions, answering into memory */
struct http_conn {
    int status, answers, streaming, ended, head;
    sbuf out;
};
int http_respond(http_conn *c, int status, const char *ctype, const char *extra, const char *body, size_t len) {
    (void)ctype;
    (void)extra;
    c->status = status;
    c->answers++;
    if (!c->head && len) sb_put(&c->out, body, len);
    return 0;
}
int http_stream_begin(http_conn *c, int status, const char *ctype, const char *extra) {
    (void)ctype;
    (void)extra;
    c->status = status;
    c->answers++;
    c->streaming = 1;
    return 0;
}
int http_stream_write(http_conn *c, const char *data, size_t len) {
    if (!c->streaming || c->ended) abort();
    sb_put(&c->out, data, len);
    return 0;
}
int http_stream_end(http_conn *c) {
    if (!c->streaming || c->ended) abort();
    c->ended = 1;
    return 0;
}
int http_conn_fd(const http_conn *c) { (void)c; return -1; }
int http_conn_status(const http_conn *c) { return c->status; }
int http_conn_minor(const http_conn *c) { (void)c; return 1; }
int http_conn_is_head(const http_conn *c) { return c->head; }
void *http_start(srv_state *s, char *err, size_t cap) {
    (void)s;
    snprintf(err, cap, "no sockets in the fuzz harness");
    return NULL;
}
void http_stop(void *d, srv_state *s) {
    (void)d;
    (void)s;
}

#ifndef XLLM_SOURCE_DIR
#define XLLM_SOURCE_DIR "."
#endif

static srv_model g_plain, g_masked;
static srv_state g_state;
static srv_model *g_one[1];
static int32_t g_vocab;

static void setup(void) {
    xllm_error err;
    xllm_model_options o = xllm_model_options_default();
    o.n_threads = 1;
    const char *path = XLLM_SOURCE_DIR "/models/stories260k";
    xllm_model *m = xllm_model_load(path, &o, &err);
    if (!m) { fprintf(stderr, "fuzz_http: %s\n", err.message); abort(); }
    xllm_chat_template *t = xllm_chat_template_load(path, &err);
    if (!t) { fprintf(stderr, "fuzz_http: %s\n", err.message); abort(); }
    g_vocab = xllm_model_vocab_size(m);
    srv_model *both[2] = {&g_plain, &g_masked};
    for (int i = 0; i < 2; i++) {
        both[i]->name = i ? "masked" : "plain";
        both[i]->model = m;
        both[i]->tok = xllm_model_tokenizer(m);
        both[i]->tmpl = t;
        both[i]->ctx = xllm_model_context_size(m);
        both[i]->max_batch = 4;
    }
    cJSON *cfg = cJSON_Parse("{\"detectors\": [\"email\", \"phone\", \"card\", \"iban\", \"cn_id\"],"
                             " \"custom\": [{\"name\": \"MRN\", \"pattern\": \"MRN-[0-9]{4,8}\"}], \"restore\": true}");
    char e[512];
    g_masked.pii = pii_policy_create(cfg, e, sizeof e);
    cJSON_Delete(cfg);
    if (!g_masked.pii) { fprintf(stderr, "fuzz_http: %s\n", e); abort(); }
    g_state.models = g_one;
    g_state.n_models = 1;
    g_state.opt = srv_options_default();
    g_state.opt.api_key = "k";
    g_state.opt.max_body = 1 << 20;
    atomic_store(&g_state.ready, 1);
    metrics_init();
}

/* A whole request: head, admission, body; 0 with the endpoint and body when
 * it reaches an endpoint, else the status. */
static int whole_request(const char *p, size_t n, int *endpoint, char **body, size_t *blen) {
    size_t hl = 0;
    *body = NULL;
    *blen = 0;
    if (!http_head_end(p, n, &hl)) {
        http_head h;
        int st = http_head_parse(p, n, &h); /* an incomplete head: parsing must still end safely */
        (void)st;
        return -1;
    }
    http_head h;
    int st = http_head_parse(p, hl, &h);
    if (st) {
        if (st != 400 && st != 414 && st != 417 && st != 431 && st != 501 && st != 505) {
            fprintf(stderr, "fuzz_http: head parse gave %d\n", st);
            abort();
        }
        if (!h.why[0]) abort();
        return st;
    }
    if (h.content_length >= 0 && h.chunked) abort();
    http_error e;
    st = http_admit(&g_state, &h, endpoint, &e);
    if (st) {
        if (st != e.status || (st != 401 && st != 404 && st != 405 && st != 413)) abort();
        if (st == 405 && !e.allow) abort();
        return st;
    }
    const char *rest = p + hl;
    size_t rl = n - hl;
    if (h.content_length >= 0) {
        if ((size_t)h.content_length > g_state.opt.max_body) abort(); /* admission checks it */
        if (rl < (size_t)h.content_length) return -1;
        *body = malloc((size_t)h.content_length + 1);
        if (!*body) return -1;
        memcpy(*body, rest, (size_t)h.content_length);
        *blen = (size_t)h.content_length;
    } else if (h.chunked) {
        http_chunk ck;
        memset(&ck, 0, sizeof ck);
        sbuf b = {0};
        for (;;) {
            size_t used = 0, dl = 0;
            const char *d = NULL;
            int r = http_chunk_step(&ck, rest, rl, &used, &d, &dl);
            if (used > rl || (dl && (d < rest || d + dl > rest + rl))) abort();
            if (r < 0) { sb_free(&b); return 400; }
            if (dl) sb_put(&b, d, dl);
            rest += used;
            rl -= used;
            if (r == 1) break;
            if (!used && !dl) { sb_free(&b); return -1; }
        }
        sb_put(&b, "", 1);
        *blen = b.len - 1;
        *body = b.p;
    }
    return 0;
}

/* An admitted request to an endpoint that does not generate: its whole
 * handler, answering into a fake connection. */
static void handle_whole(int ep, const char *p, size_t n, const char *body, size_t bl) {
    http_head h;
    size_t hl = 0;
    if (!http_head_end(p, n, &hl) || http_head_parse(p, hl, &h)) abort(); /* parsed once already */
    struct http_conn c;
    memset(&c, 0, sizeof c);
    c.head = !strcmp(h.method, "HEAD");
    http_handle(&g_state, &c, &h, ep, body ? body : "", bl);
    if (c.answers != 1 || (c.streaming && !c.ended)) {
        fprintf(stderr, "fuzz_http: endpoint %d answered %d times\n", ep, c.answers);
        abort();
    }
    int st = c.status;
    int ok = st == 200 || (st == 500 && c.out.len && strstr(c.out.p, "out of memory"));
    if (ep == EP_TOKENIZE || ep == EP_DETOKENIZE || ep == EP_EMBEDDINGS) ok |= st == 400 || st == 404;
    if (ep == EP_MODELS) ok |= st == 404;
    if (!ok) {
        fprintf(stderr, "fuzz_http: endpoint %d answered %d\n", ep, st);
        abort();
    }
    if (ep != EP_METRICS && !c.head) {
        sb_put(&c.out, "", 1);
        cJSON *o = cJSON_ParseWithLength(c.out.p, c.out.len - 1);
        if (!o) abort(); /* every answer here is JSON */
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(o, "error");
        if ((st >= 400) != (err != NULL)) abort();
        if (err && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(err, "message"))) abort();
        if (st == 200 && ep == EP_TOKENIZE) { /* ids inside the vocabulary, as many as it says */
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "tokens"), *it;
            const cJSON *cnt = cJSON_GetObjectItemCaseSensitive(o, "count");
            if (!cJSON_IsArray(t) || !cJSON_IsNumber(cnt) || cJSON_GetArraySize(t) != (int)cnt->valuedouble) abort();
            cJSON_ArrayForEach(it, t) if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= g_vocab) abort();
        }
        cJSON_Delete(o);
    }
    sb_free(&c.out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_vocab) setup();
    if (size < 1) return 0;
    int chat = data[0] & 1;
    g_one[0] = data[0] & 2 ? &g_masked : &g_plain;
    if (data[0] & 4) {
        int ep = 0;
        char *body = NULL;
        size_t bl = 0;
        int st = whole_request((const char *)data + 1, size - 1, &ep, &body, &bl);
        if (!st && (ep == EP_COMPLETIONS || ep == EP_CHAT)) {
            srv_req r;
            http_error e;
            memset(&e, 0, sizeof e);
            int s2 = srv_req_parse(&g_state, ep == EP_CHAT, body ? body : "", bl, &r, &e);
            if (s2 && (s2 != e.status || !e.message[0])) abort();
            srv_req_free(&r);
        } else if (!st && ep != EP_RESPONSES && (ep != EP_EMBEDDINGS || bl <= 512)) {
            handle_whole(ep, (const char *)data + 1, size - 1, body, bl);
        }
        free(body);
        return 0;
    }
    srv_req r;
    http_error e;
    memset(&e, 0, sizeof e);
    int st = srv_req_parse(&g_state, chat, (const char *)data + 1, size - 1, &r, &e);
    if (st) {
        if (st != e.status || !e.message[0] || !((st >= 400 && st < 500) || st == 500) || !e.type) {
            fprintf(stderr, "fuzz_http: bad error %d/%d '%s'\n", st, e.status, e.message);
            abort();
        }
        if (st == 500 && !strstr(e.message, "out of memory")) abort();
    } else {
        if (!r.m || r.n_prompts < 1 || r.n_prompts > SRV_MAX_PROMPTS || r.n < 1) abort();
        for (int i = 0; i < r.n_prompts; i++) {
            if (!r.ids[i] || r.n_ids[i] == 0 || r.n_ids[i] + (size_t)r.params.max_new_tokens > (size_t)r.m->ctx) {
                fprintf(stderr, "fuzz_http: prompt %d: %zu ids + %d new > %d\n", i, r.n_ids[i],
                        r.params.max_new_tokens, r.m->ctx);
                abort();
            }
            for (size_t k = 0; k < r.n_ids[i]; k++)
                if (r.ids[i][k] < 0 || r.ids[i][k] >= g_vocab) abort();
        }
        if (!(r.params.temperature >= 0 && r.params.temperature <= 2) || !(r.params.top_p > 0 && r.params.top_p <= 1))
            abort();
    }
    srv_req_free(&r);
    return 0;
}
