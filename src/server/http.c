/*
 * http.c - the HTTP side of `xllm serve` over libmicrohttpd.
 *
 * libmicrohttpd runs a thread per connection (MHD_USE_THREAD_PER_CONNECTION),
 * so a handler may block while its request generates: non-streamed requests
 * wait in the handler, streamed ones in the content-reader callback that
 * feeds Server-Sent Events. Bodies are collected up to the limit (a declared
 * Content-Length over it is refused at once with 413, a chunked body over it
 * is discarded and refused when complete). The API key (when set) is
 * compared in constant time on every path but /health. While a request
 * generates, libmicrohttpd's idle timeout is off for its connection (the
 * request timeout governs) and the client's socket is watched for a hang-up.
 * Each request is counted in the metrics and logged in one line, without
 * prompt or output text unless --log-text.
 */
#include "srv.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define DRAIN_FACTOR 4

typedef struct conn {
    sbuf body;
    size_t received;
    int too_large;
    int endpoint;
    int status;
    double t0;
    srv_req req;
    int has_req;
    run *run;
    sbuf sse;
    size_t sse_pos;
    int counted; /* the request is already in the metrics (a stream, at its end) */
    srv_state *s;
    srv_call call;           /* endpoints with a transport-neutral handler (endpoints.c) */
    char path[96];
    char method[12];
} conn;

static enum MHD_Result send_buf(struct MHD_Connection *c, conn *k, int status, const char *ctype, const char *data,
                                size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    k->status = status;
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, conn *k, int status, sbuf *b) {
    if (b->oom) return send_buf(c, k, 500, "application/json", "{\"error\":{\"message\":\"out of memory\"}}", 38);
    return send_buf(c, k, status, "application/json", b->p ? b->p : "", b->len);
}

static enum MHD_Result send_error(struct MHD_Connection *c, conn *k, const http_error *e) {
    sbuf b = {0};
    sb_puts(&b, "{\"error\":{\"message\":");
    sb_json_str(&b, e->message, strlen(e->message));
    sb_puts(&b, ",\"type\":");
    sb_json_str(&b, e->type ? e->type : "invalid_request_error", strlen(e->type ? e->type : "invalid_request_error"));
    sb_puts(&b, ",\"param\":");
    if (e->param) sb_json_str(&b, e->param, strlen(e->param));
    else sb_puts(&b, "null");
    sb_puts(&b, ",\"code\":");
    if (e->code) sb_json_str(&b, e->code, strlen(e->code));
    else sb_puts(&b, "null");
    sb_puts(&b, "}}");
    enum MHD_Result r = send_json(c, k, e->status, &b);
    sb_free(&b);
    return r;
}

static enum MHD_Result fail(struct MHD_Connection *c, conn *k, int status, const char *type, const char *code,
                            const char *msg) {
    http_error e;
    http_err(&e, status, type, NULL, code, "%s", msg);
    return send_error(c, k, &e);
}

/* Constant-time (in the candidate's content) comparison with the key. */
static int key_ok(const char *key, const char *auth) {
    if (!auth) return 0;
    if (strncasecmp(auth, "Bearer ", 7)) return 0; /* the scheme is case-insensitive (RFC 9110) */
    const char *cand = auth + 7;
    size_t kl = strlen(key), cl = strlen(cand);
    unsigned diff = (unsigned)(kl ^ cl);
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(cl ? cand[i % cl] : 0);
    return diff == 0;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    conn *k = cls;
    if (k->sse_pos == k->sse.len) {
        k->sse.len = 0;
        k->sse_pos = 0;
        int r = run_next_sse(k->run, &k->sse);
        if (r < 0 || k->sse.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (k->sse.len == 0) {
            /* Count the stream now, before MHD sends the closing chunk: a
             * client that has read the whole stream then finds it in /metrics,
             * and a client that closes right after "[DONE]" is not a 499. */
            if (!k->counted) metrics_request(k->endpoint, k->status);
            k->counted = 1;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
    }
    size_t n = k->sse.len - k->sse_pos;
    if (n > max) n = max;
    memcpy(buf, k->sse.p + k->sse_pos, n);
    k->sse_pos += n;
    return (ssize_t)n;
}

static enum MHD_Result handle_generate(struct MHD_Connection *c, conn *k, int chat) {
    srv_state *s = k->s;
    http_error e;
    /* cascades are served by cascade.c */
    {
        cJSON *o = cJSON_ParseWithLength(k->body.p ? k->body.p : "", k->body.len);
        const cJSON *mo = o ? cJSON_GetObjectItemCaseSensitive(o, "model") : NULL;
        srv_model *m = cJSON_IsString(mo) ? srv_find_model(s, mo->valuestring) : NULL;
        cJSON_Delete(o);
        if (m && m->n_stages) {
            sbuf out = {0};
            int is_stream = 0;
            MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
            int st = cascade_run(s, m, k->body.p, k->body.len, chat, conn_fd(c), &out, &is_stream, &e);
            enum MHD_Result r;
            if (st < 0) r = MHD_NO;
            else if (st) r = send_error(c, k, &e);
            else r = send_buf(c, k, 200, is_stream ? "text/event-stream" : "application/json", out.p ? out.p : "",
                              out.len);
            sb_free(&out);
            return r;
        }
    }
    int st = srv_req_parse(s, chat, k->body.p ? k->body.p : "", k->body.len, &k->req, &e);
    k->has_req = 1;
    if (st) return send_error(c, k, &e);
    if (s->opt.log_text) srv_log("request text: %.*s", (int)(k->body.len > 4096 ? 4096 : k->body.len), k->body.p);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    st = run_start(s, &k->req, conn_fd(c), &k->run, &e);
    if (st) return send_error(c, k, &e);
    if (k->req.stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_reader, k, NULL);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        k->status = 200;
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    sbuf out = {0};
    if (run_wait_json(k->run, &out, &e)) {
        sb_free(&out);
        if (client_gone(conn_fd(c))) { k->status = 499; return MHD_NO; }
        return send_error(c, k, &e);
    }
    enum MHD_Result r = send_json(c, k, 200, &out);
    sb_free(&out);
    return r;
}

static enum MHD_Result handle_models(struct MHD_Connection *c, conn *k, const char *one) {
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
    enum MHD_Result r = send_json(c, k, 200, &b);
    sb_free(&b);
    return r;
}

/* POST /tokenize {"model"?, "prompt": str | "messages": [...], "add_special_tokens"?}
 * POST /detokenize {"model"?, "tokens": [ids]} */
static enum MHD_Result handle_tokens(struct MHD_Connection *c, conn *k, int detok) {
    srv_state *s = k->s;
    http_error e;
    cJSON *o = cJSON_ParseWithLength(k->body.p ? k->body.p : "", k->body.len);
    if (!o || !cJSON_IsObject(o)) {
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
    enum MHD_Result r;
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
        } else if (cJSON_IsArray(msgs)) {
            st = render_request_messages(m, o, &rendered, &e);
            text = rendered;
        } else {
            st = http_err(&e, 400, "invalid_request_error", "prompt", NULL, "'prompt' (a UTF-8 string) or 'messages' is required");
        }
        int32_t *ids = NULL;
        size_t n = 0;
        xllm_error xe;
        if (!st && xllm_tokenize(m->tok, text, strlen(text), as ? cJSON_IsTrue(as) : !rendered, &ids, &n, &xe))
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

static ssize_t call_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    conn *k = cls;
    if (k->sse_pos == k->sse.len) {
        k->sse.len = 0;
        k->sse_pos = 0;
        int r = k->call.next(k->call.st, &k->sse);
        if (r < 0 || k->sse.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (k->sse.len == 0) {
            if (!k->counted) metrics_request(k->endpoint, k->status);
            k->counted = 1;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
    }
    size_t n = k->sse.len - k->sse_pos;
    if (n > max) n = max;
    memcpy(buf, k->sse.p + k->sse_pos, n);
    k->sse_pos += n;
    return (ssize_t)n;
}

/* An endpoint with a transport-neutral handler (endpoints.c). */
static enum MHD_Result handle_call(struct MHD_Connection *c, conn *k, const srv_endpoint *ep, const char *url) {
    srv_call *call = &k->call;
    call->s = k->s;
    call->path = url;
    call->body = k->body.p ? k->body.p : "";
    call->len = k->body.len;
    call->fd = conn_fd(c);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    int st = ep->handler(call);
    if (st) return send_error(c, k, &call->err);
    if (call->next) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, call_reader, k, NULL);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, "Content-Type", call->ctype ? call->ctype : "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        k->status = 200;
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    if (call->status < 0 || client_gone(call->fd)) { k->status = 499; return MHD_NO; }
    return send_buf(c, k, call->status ? call->status : 200, call->ctype ? call->ctype : "application/json",
                    call->out.p ? call->out.p : "", call->out.len);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv_state *s = cls;
    conn *k = *con_cls;
    if (!k) {
        k = calloc(1, sizeof *k);
        if (!k) return MHD_NO;
        atomic_fetch_add(&s->active, 1); /* until completed() */
        k->s = s;
        k->t0 = srv_now();
        k->endpoint = EP_OTHER;
        snprintf(k->path, sizeof k->path, "%s", url);
        snprintf(k->method, sizeof k->method, "%s", method);
        *con_cls = k;
        /* a body over the limit is read and dropped (clients expect to finish sending before
           they read the 413), up to DRAIN_FACTOR times the limit; beyond, the connection is closed */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned long long len = cl ? strtoull(cl, NULL, 10) : 0;
        if (len > s->opt.max_body * DRAIN_FACTOR)
            return fail(c, k, 413, "invalid_request_error", "request_too_large", "the request body is over the limit");
        if (len > s->opt.max_body) k->too_large = 1;
        return MHD_YES;
    }
    if (*upload_size) {
        k->received += *upload_size;
        if (k->received > s->opt.max_body * DRAIN_FACTOR) return MHD_NO;
        if (k->received > s->opt.max_body) {
            k->too_large = 1;
            sb_free(&k->body);
        } else if (!k->too_large) {
            sb_put(&k->body, upload, *upload_size);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (k->too_large) return fail(c, k, 413, "invalid_request_error", "request_too_large", "the request body is over the limit");
    if (k->body.oom) return fail(c, k, 500, "server_error", NULL, "out of memory");
    int known = 0;
    const srv_endpoint *ep = endpoint_find(url, method, &known);
    if (ep) k->endpoint = ep->id;
    if ((!ep || ep->auth) && s->opt.api_key &&
        !key_ok(s->opt.api_key, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization")))
        return fail(c, k, 401, "invalid_request_error", "invalid_api_key", "Incorrect or missing API key");
    if (!ep) return fail(c, k, 404, "invalid_request_error", "not_found", "no such path");
    if (strcmp(method, ep->method))
        return fail(c, k, 405, "invalid_request_error", NULL, !strcmp(ep->method, "POST") ? "use POST" : "use GET");
    if (k->endpoint == EP_HEALTH) {
        int ready = atomic_load(&s->ready) && !atomic_load(&s->stopping);
        const char *b = ready ? "{\"status\":\"ok\"}" : "{\"status\":\"loading\"}";
        return send_buf(c, k, ready ? 200 : 503, "application/json", b, strlen(b));
    }
    if (k->endpoint == EP_METRICS) {
        sbuf b = {0};
        metrics_render(s, &b);
        enum MHD_Result r = send_buf(c, k, b.oom ? 500 : 200, "text/plain; version=0.0.4", b.p ? b.p : "", b.len);
        sb_free(&b);
        return r;
    }
    if (!atomic_load(&s->ready) || atomic_load(&s->stopping))
        return fail(c, k, 503, "server_error", "not_ready", "the server is loading its models or shutting down");
    if (ep->handler) return handle_call(c, k, ep, url);
    switch (k->endpoint) {
    case EP_MODELS: return handle_models(c, k, ep->prefix ? url + strlen(ep->path) : NULL);
    case EP_COMPLETIONS: return handle_generate(c, k, 0);
    case EP_CHAT: return handle_generate(c, k, 1);
    case EP_TOKENIZE: return handle_tokens(c, k, 0);
    default: return handle_tokens(c, k, 1);
    }
}



static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv_state *s = cls;
    conn *k = *con_cls;
    if (!k) return;
    *con_cls = NULL;
    int status = k->status ? k->status : 499;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && k->endpoint <= EP_CHAT && k->run) status = 499;
    if (k->counted) status = k->status;
    else metrics_request(k->endpoint, status);
    if (k->endpoint <= EP_CHAT || status >= 400)
        srv_log("%s %s %d model=%s prompt_tokens=%zu completion_tokens=%zu %.1f ms%s", k->method, k->path, status,
                k->has_req && k->req.model_name ? k->req.model_name : "-",
                k->has_req ? k->req.n_ids[0] : (size_t)0, k->run ? run_completion_tokens(k->run) : (size_t)0,
                1e3 * (srv_now() - k->t0), toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection closed)");
    run_free(k->run);
    if (k->has_req) srv_req_free(&k->req);
    if (k->call.free_state) k->call.free_state(k->call.st);
    sb_free(&k->call.out);
    sb_free(&k->body);
    sb_free(&k->sse);
    free(k);
    atomic_fetch_sub(&s->active, 1);
    if (s->opt.idle_timeout_s > 0) MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->opt.idle_timeout_s);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && buf[n - 1] == '\n') buf[--n] = 0;
    srv_log("http: %s", buf);
}

void *http_start(srv_state *s, char *err, size_t cap);
void http_stop(void *d, srv_state *s);

void *http_start(srv_state *s, char *err, size_t cap) {
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    /* MHD_USE_ITC: needed by MHD_quiesce_daemon (http_stop) */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG |
                     MHD_USE_ITC;
    const char *host = s->opt.host;
    if (strchr(host, ':')) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)s->opt.port);
        if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1) { snprintf(err, cap, "bad --host '%s'", host); return NULL; }
        flags |= MHD_USE_IPv6;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)s->opt.port);
        if (inet_pton(AF_INET, host, &a->sin_addr) != 1) { snprintf(err, cap, "bad --host '%s' (an IPv4 or IPv6 address)", host); return NULL; }
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, NULL, NULL, handler, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED,
        completed, s, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(s->opt.idle_timeout_s > 0 ? s->opt.idle_timeout_s : 0),
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->opt.max_connections, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)65536, MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u,
        MHD_OPTION_END);
    if (!d) { snprintf(err, cap, "cannot listen on %s:%d (in use, or not an address of this machine?)", host, s->opt.port); return NULL; }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    s->actual_port = di ? di->port : s->opt.port;
    return d;
}

/* Shutdown, with s->stopping already set: stop accepting connections, let
 * the requests in progress end (running ones abort within a step and answer;
 * one arriving now on an open connection gets 503; a body still uploading is
 * read and answered 503), at most HTTP_DRAIN_S seconds, then close what is
 * left and join the connection threads. */
#define HTTP_DRAIN_S 10.0
void http_stop(void *d, srv_state *s) {
    if (!d) return;
    MHD_socket ls = MHD_quiesce_daemon(d);
    double until = srv_now() + HTTP_DRAIN_S;
    while (atomic_load(&s->active) > 0 && srv_now() < until) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (atomic_load(&s->active) > 0) srv_log("shutdown: %d requests still open after %.0f s: closed", atomic_load(&s->active), HTTP_DRAIN_S);
    MHD_stop_daemon(d);
    if (ls != MHD_INVALID_SOCKET) close(ls);
}
