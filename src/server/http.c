/*
 * http.c - `xllm serve`'s router and endpoint handlers.
 *
 * The connection layer (listener.c) calls http_admit when a request's head
 * is complete, before any body byte is kept: the path must exist, the method
 * fit it (HEAD where GET does; 405 names the allowed ones in Allow), the API
 * key (when set) match, compared in constant time, on every path the
 * endpoint table (endpoints.c) guards, and a declared body fit the limit. An admitted request, body
 * read, comes to http_handle on a worker of the pool; each handler answers
 * through send_buf / send_json / send_error (listener.c's http_respond) or
 * a stream (http_stream_*); the table's newer endpoints have
 * transport-neutral handlers (srv_call), answered here. Each request is counted in the metrics and
 * logged in one line (srv_log escapes control bytes), without prompt or
 * output text unless --log-text.
 */
#include "srv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct conn {
    int endpoint;
    int status;
    double t0;
    srv_req req;
    int has_req;
    run *run;
    int counted; /* the request is already in the metrics (a stream, at its end) */
    int gone;    /* the client went away (or read nothing for the write deadline) */
    srv_state *s;
    const char *body;
    size_t body_len;
    const http_head *h;
} conn;

typedef int hres; /* 0, or -1 when the client is gone */

static hres send_buf(http_conn *c, conn *k, int status, const char *ctype, const char *data, size_t len) {
    k->status = status;
    char extra[256] = "";
    if (status == 401) snprintf(extra, sizeof extra, "WWW-Authenticate: Bearer\r\n");
    if (status == 429 || status == 503) snprintf(extra, sizeof extra, "Retry-After: 1\r\n");
    int r = http_respond(c, status, ctype, extra, data, len);
    if (r) k->gone = 1;
    return r;
}

static hres send_json(http_conn *c, conn *k, int status, sbuf *b) {
    if (b->oom) return send_buf(c, k, 500, "application/json", "{\"error\":{\"message\":\"out of memory\"}}", 38);
    return send_buf(c, k, status, "application/json", b->p ? b->p : "", b->len);
}

void http_error_body(const http_error *e, sbuf *b) {
    sb_puts(b, "{\"error\":{\"message\":");
    sb_json_str(b, e->message, strlen(e->message));
    sb_puts(b, ",\"type\":");
    sb_json_str(b, e->type ? e->type : "invalid_request_error", strlen(e->type ? e->type : "invalid_request_error"));
    sb_puts(b, ",\"param\":");
    if (e->param) sb_json_str(b, e->param, strlen(e->param));
    else sb_puts(b, "null");
    sb_puts(b, ",\"code\":");
    if (e->code) sb_json_str(b, e->code, strlen(e->code));
    else sb_puts(b, "null");
    sb_puts(b, "}}");
}

void http_error_headers(const http_error *e, char *out, size_t cap) {
    out[0] = 0;
    if (e->status == 401) snprintf(out, cap, "WWW-Authenticate: Bearer\r\n");
    else if (e->status == 405 && e->allow) snprintf(out, cap, "Allow: %s\r\n", e->allow);
    else if (e->status == 429 || e->status == 503) snprintf(out, cap, "Retry-After: 1\r\n");
}

static hres send_error(http_conn *c, conn *k, const http_error *e) {
    sbuf b = {0};
    http_error_body(e, &b);
    char extra[256];
    http_error_headers(e, extra, sizeof extra);
    k->status = e->status;
    int r = b.oom ? -1 : http_respond(c, e->status, "application/json", extra, b.p, b.len);
    if (r) k->gone = 1;
    sb_free(&b);
    return r;
}

static hres fail(http_conn *c, conn *k, int status, const char *type, const char *code, const char *msg) {
    http_error e;
    http_err(&e, status, type, NULL, code, "%s", msg);
    return send_error(c, k, &e);
}

/* Constant-time (in the candidate's content) comparison with the key. The
 * value is the whole header value: "Bearer KEY" exactly, the scheme
 * case-insensitive (RFC 9110); a NUL or anything after the key never
 * reaches here: the head parser refuses control bytes (400). */
static int key_ok(const char *key, const char *auth, size_t al) {
    if (!auth || al < 7 || strncasecmp(auth, "Bearer ", 7)) return 0;
    const char *cand = auth + 7;
    size_t kl = strlen(key), cl = al - 7;
    unsigned diff = (unsigned)(kl ^ cl);
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(cl ? cand[i % cl] : 0);
    return diff == 0;
}

int http_admit(srv_state *s, const http_head *h, int *endpoint, http_error *e) {
    int known = 0;
    /* HEAD is answered where GET is (headers only) */
    const char *method = !strcmp(h->method, "HEAD") ? "GET" : h->method;
    const srv_endpoint *ep = endpoint_find(h->path, method, &known);
    *endpoint = ep ? ep->id : EP_OTHER;
    if ((!ep || ep->auth) && s->opt.api_key && !key_ok(s->opt.api_key, h->has_auth ? h->auth : NULL, h->auth_len))
        return http_err(e, 401, "invalid_request_error", NULL, "invalid_api_key", "Incorrect or missing API key");
    if (!ep) return http_err(e, 404, "invalid_request_error", NULL, "not_found", "no such path");
    if (strcmp(method, ep->method)) {
        int post = !strcmp(ep->method, "POST");
        http_err(e, 405, "invalid_request_error", NULL, NULL, post ? "use POST" : "use GET");
        e->allow = post ? "POST" : "GET, HEAD";
        return 405;
    }
    if (h->content_length > (long long)s->opt.max_body)
        return http_err(e, 413, "invalid_request_error", NULL, "request_too_large", "the request body is over the limit");
    return 0;
}

/* A streamed run: the head, then each run_next_sse piece as a chunk. */
static hres stream_run(http_conn *c, conn *k) {
    k->status = 200;
    if (http_stream_begin(c, 200, "text/event-stream", "Cache-Control: no-cache\r\n")) { k->gone = 1; return -1; }
    sbuf sse = {0};
    int rc = 0;
    for (;;) {
        sse.len = 0;
        int r = run_next_sse(k->run, &sse);
        if (r < 0 || sse.oom) { rc = -1; break; }
        if (sse.len && http_stream_write(c, sse.p, sse.len)) { rc = -1; break; }
        if (r == 0 || !sse.len) break;
    }
    sb_free(&sse);
    if (!rc) {
        /* counted before the closing chunk: a client that has read the whole
           stream then finds it in /metrics */
        metrics_request(k->endpoint, k->status);
        k->counted = 1;
        rc = http_stream_end(c);
    }
    if (rc) k->gone = 1;
    return rc;
}

static hres handle_generate(http_conn *c, conn *k, int chat) {
    srv_state *s = k->s;
    http_error e;
    /* cascades are served by cascade.c */
    {
        cJSON *o = json_parse_body(k->body, k->body_len, &e);
        if (!o) return send_error(c, k, &e);
        const cJSON *mo = o ? cJSON_GetObjectItemCaseSensitive(o, "model") : NULL;
        srv_model *m = cJSON_IsString(mo) ? srv_find_model(s, mo->valuestring) : NULL;
        cJSON_Delete(o);
        if (m && m->n_stages) {
            sbuf out = {0};
            int is_stream = 0;
            int st = cascade_run(s, m, k->body, k->body_len, chat, http_conn_fd(c), &out, &is_stream, &e);
            hres r;
            if (st < 0) { k->gone = 1; r = -1; }
            else if (st) r = send_error(c, k, &e);
            else r = send_buf(c, k, 200, is_stream ? "text/event-stream" : "application/json", out.p ? out.p : "", out.len);
            sb_free(&out);
            return r;
        }
    }
    int st = srv_req_parse(s, chat, k->body, k->body_len, &k->req, &e);
    k->has_req = 1;
    if (st) return send_error(c, k, &e);
    if (s->opt.log_text) srv_log("request text: %.*s", (int)(k->body_len > 4096 ? 4096 : k->body_len), k->body);
    k->req.no_probe = http_conn_minor(c) == 0;
    st = run_start(s, &k->req, http_conn_fd(c), &k->run, &e);
    if (st) return send_error(c, k, &e);
    if (k->req.stream) return stream_run(c, k);
    sbuf out = {0};
    if (run_wait_json(k->run, &out, &e)) {
        sb_free(&out);
        if (client_gone(http_conn_fd(c))) { k->status = 499; k->gone = 1; return -1; }
        return send_error(c, k, &e);
    }
    hres r = send_json(c, k, 200, &out);
    sb_free(&out);
    return r;
}

static hres handle_models(http_conn *c, conn *k, const char *one) {
    srv_state *s = k->s;
    sbuf b = {0};
    if (one) {
        srv_model *m = srv_find_model(s, one);
        if (!m) {
            sb_free(&b);
            http_error e;
            http_err(&e, 404, "invalid_request_error", "model", "model_not_found", "The model '%.200s' does not exist", one);
            return send_error(c, k, &e);
        }
        sb_puts(&b, "{\"id\":");
        sb_json_str(&b, m->name, strlen(m->name));
        sb_printf(&b, ",\"object\":\"model\",\"created\":%ld,\"owned_by\":\"xllm\",\"max_model_len\":%d}", m->created, m->ctx);
    } else {
        sb_puts(&b, "{\"object\":\"list\",\"data\":[");
        for (int i = 0; i < s->n_models; i++) {
            srv_model *m = s->models[i];
            sb_puts(&b, i ? ",{\"id\":" : "{\"id\":");
            sb_json_str(&b, m->name, strlen(m->name));
            sb_printf(&b, ",\"object\":\"model\",\"created\":%ld,\"owned_by\":\"xllm\",\"max_model_len\":%d", m->created, m->ctx);
            if (m->n_stages) {
                sb_puts(&b, ",\"x_cascade\":[");
                for (int j = 0; j < m->n_stages; j++) {
                    if (j) sb_puts(&b, ",");
                    sb_json_str(&b, m->stages[j].model, strlen(m->stages[j].model));
                }
                sb_puts(&b, "]");
            }
            sb_puts(&b, "}");
        }
        sb_puts(&b, "]}");
    }
    hres r = send_json(c, k, 200, &b);
    sb_free(&b);
    return r;
}

/* POST /tokenize {"model"?, "prompt": str | "messages": [...], "add_special_tokens"?}
 * POST /detokenize {"model"?, "tokens": [ids]} */
static hres handle_tokens(http_conn *c, conn *k, int detok) {
    srv_state *s = k->s;
    http_error e;
    cJSON *o = json_parse_body(k->body, k->body_len, &e);
    if (!o) return send_error(c, k, &e);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        http_err(&e, 400, "invalid_request_error", NULL, NULL, "the body is not a JSON object");
        return send_error(c, k, &e);
    }
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(o, "model");
    srv_model *m = NULL;
    if (cJSON_IsString(mo)) m = srv_find_model(s, mo->valuestring);
    else if (!mo && s->n_models >= 1) m = s->models[0];
    if (!m || m->n_stages || !m->tok) {
        cJSON_Delete(o);
        http_err(&e, 404, "invalid_request_error", "model", "model_not_found", "no such model with a tokenizer");
        return send_error(c, k, &e);
    }
    sbuf b = {0};
    hres r;
    if (detok) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "tokens");
        int n = cJSON_IsArray(t) ? cJSON_GetArraySize(t) : -1;
        int32_t vocab = xllm_tokenizer_vocab_size(m->tok);
        int32_t *ids = n > 0 ? malloc((size_t)n * sizeof *ids) : NULL;
        int ok = n >= 0 && (n == 0 || ids), i = 0;
        const cJSON *it;
        if (ok) cJSON_ArrayForEach(it, t) {
            if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= vocab ||
                it->valuedouble != (double)(int32_t)it->valuedouble) { ok = 0; break; }
            ids[i++] = (int32_t)it->valuedouble;
        }
        char *txt = NULL;
        size_t tl = 0;
        xllm_error xe;
        if (!ok) {
            http_err(&e, 400, "invalid_request_error", "tokens", NULL, "'tokens' must be a list of ids in [0, %d)", vocab);
            r = send_error(c, k, &e);
        } else if (xllm_detokenize(m->tok, ids, (size_t)n, 0, &txt, &tl, &xe)) {
            http_err(&e, 400, "invalid_request_error", "tokens", NULL, "%s", xe.message);
            r = send_error(c, k, &e);
        } else {
            sb_puts(&b, "{\"prompt\":");
            sb_json_str(&b, txt, tl);
            sb_puts(&b, "}");
            r = send_json(c, k, 200, &b);
        }
        xllm_free(txt);
        free(ids);
    } else {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prompt");
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages");
        const cJSON *as = cJSON_GetObjectItemCaseSensitive(o, "add_special_tokens");
        char *rendered = NULL;
        int st = 0;
        const char *text = NULL;
        if (cJSON_IsString(p) && utf8_valid(p->valuestring, strlen(p->valuestring))) {
            text = p->valuestring;
        } else if (msgs) {
            st = render_request_messages(m, o, &rendered, &e);
            text = rendered;
        } else {
            st = http_err(&e, 400, "invalid_request_error", "prompt", NULL, "'prompt' (a UTF-8 string) or 'messages' is required");
        }
        int32_t *ids = NULL;
        size_t n = 0;
        xllm_error xe;
        if (!st && xllm_tokenize_ex(m->tok, text, strlen(text), prompt_flags(m, as ? cJSON_IsTrue(as) : !rendered, rendered != NULL),
                                    &ids, &n, &xe))
            st = http_err(&e, 400, "invalid_request_error", "prompt", NULL, "%s", xe.message);
        if (st) {
            r = send_error(c, k, &e);
        } else {
            sb_printf(&b, "{\"count\":%zu,\"max_model_len\":%d,\"tokens\":[", n, m->ctx);
            for (size_t i = 0; i < n; i++) sb_printf(&b, i ? ",%d" : "%d", ids[i]);
            sb_puts(&b, "]}");
            r = send_json(c, k, 200, &b);
        }
        xllm_free(ids);
        xllm_free(rendered);
    }
    sb_free(&b);
    cJSON_Delete(o);
    return r;
}

/* An endpoint with a transport-neutral handler (endpoints.c): a whole
 * answer, or a stream of the pieces its next() gives. */
static hres handle_call(http_conn *c, conn *k, const srv_endpoint *ep) {
    srv_call call;
    memset(&call, 0, sizeof call);
    call.s = k->s;
    call.path = k->h->path;
    call.body = k->body ? k->body : "";
    call.len = k->body_len;
    call.fd = http_conn_fd(c);
    hres r = 0;
    if (ep->handler(&call)) {
        r = send_error(c, k, &call.err);
    } else if (call.next) {
        k->status = 200;
        if (http_stream_begin(c, 200, call.ctype ? call.ctype : "text/event-stream", "Cache-Control: no-cache\r\n")) {
            r = -1;
        } else {
            sbuf piece = {0};
            for (;;) {
                piece.len = 0;
                int more = call.next(call.st, &piece);
                if (more < 0 || piece.oom) { r = -1; break; }
                if (piece.len && http_stream_write(c, piece.p, piece.len)) { r = -1; break; }
                if (more == 0) break;
            }
            sb_free(&piece);
            if (!r) {
                metrics_request(k->endpoint, k->status); /* before the end: see stream_run */
                k->counted = 1;
                r = http_stream_end(c);
            }
        }
        if (r) k->gone = 1;
    } else if (call.status < 0 || client_gone(call.fd)) {
        k->status = 499;
        k->gone = 1;
        r = -1;
    } else {
        if (call.out.oom) r = send_buf(c, k, 500, "application/json", "{\"error\":{\"message\":\"out of memory\"}}", 38);
        else r = send_buf(c, k, call.status ? call.status : 200, call.ctype ? call.ctype : "application/json",
                          call.out.p ? call.out.p : "", call.out.len);
    }
    if (call.free_state) call.free_state(call.st);
    sb_free(&call.out);
    return r;
}

void http_handle(srv_state *s, http_conn *c, const http_head *h, int endpoint, const char *body, size_t len) {
    conn kk, *k = &kk;
    memset(k, 0, sizeof *k);
    k->s = s;
    k->t0 = srv_now();
    k->endpoint = endpoint;
    k->body = body;
    k->body_len = len;
    k->h = h;
    const char *url = h->path;
    int known = 0;
    const srv_endpoint *ep = endpoint_find(url, !strcmp(h->method, "HEAD") ? "GET" : h->method, &known);
    if (endpoint == EP_HEALTH) {
        int ready = atomic_load(&s->ready) && !atomic_load(&s->stopping);
        const char *b = ready ? "{\"status\":\"ok\"}" : "{\"status\":\"loading\"}";
        send_buf(c, k, ready ? 200 : 503, "application/json", b, strlen(b));
    } else if (endpoint == EP_METRICS) {
        sbuf b = {0};
        metrics_render(s, &b);
        send_buf(c, k, b.oom ? 500 : 200, "text/plain; version=0.0.4", b.p ? b.p : "", b.len);
        sb_free(&b);
    } else if (!atomic_load(&s->ready) || atomic_load(&s->stopping)) {
        fail(c, k, 503, "server_error", "not_ready", "the server is loading its models or shutting down");
    } else if (ep && ep->handler) {
        handle_call(c, k, ep);
    } else {
        switch (endpoint) {
        case EP_MODELS: handle_models(c, k, ep && ep->prefix ? url + strlen(ep->path) : NULL); break;
        case EP_COMPLETIONS: handle_generate(c, k, 0); break;
        case EP_CHAT: handle_generate(c, k, 1); break;
        case EP_TOKENIZE: handle_tokens(c, k, 0); break;
        case EP_DETOKENIZE: handle_tokens(c, k, 1); break;
        default: fail(c, k, 404, "invalid_request_error", "not_found", "no such path"); break;
        }
    }
    if (!k->status) k->status = http_conn_status(c); /* a handler that answered through http_respond itself */
    int status = k->status ? k->status : 499;
    if (k->gone && k->endpoint <= EP_CHAT && k->run) status = 499;
    if (k->counted) status = k->status;
    else metrics_request(k->endpoint, status);
    if (k->endpoint <= EP_CHAT || status >= 400)
        srv_log("%s %s %d model=%s prompt_tokens=%zu completion_tokens=%zu %.1f ms%s", h->method, h->target, status,
                k->has_req && k->req.model_name ? k->req.model_name : "-", k->has_req ? k->req.n_ids[0] : (size_t)0,
                k->run ? run_completion_tokens(k->run) : (size_t)0, 1e3 * (srv_now() - k->t0),
                k->gone ? " (connection closed)" : "");
    run_free(k->run);
    if (k->has_req) srv_req_free(&k->req);
}
