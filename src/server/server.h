/*
 * server.h - `xllm serve`'s entry point for the command line (tools/cmd_serve.c).
 * The server itself is src/server (srv.h lists its files).
 */
#ifndef XLLM_SERVER_SERVER_H
#define XLLM_SERVER_SERVER_H

#include <stddef.h>
#include "xllm.h"

struct xllm_model_options;

typedef struct srv_options {
    const char *host;
    int port;
    const char *api_key;
    const char *config_path;
    const char *model_path;
    int n_threads;
    int max_queue;
    size_t max_body;
    int log_text;
    int parse_special;        /* special-token text in request strings becomes control tokens (HF/vLLM); default 0:
                                 only the chat template's markup makes them (a model's `parse_special:` overrides) */
    int request_timeout_s;
    int idle_timeout_s;
    int max_connections;
    int header_timeout_s;     /* a request's head, from its first byte (a connection's first: from its start); 408 */
    int body_timeout_s;       /* a request's body, from the end of its head; 408 */
    int write_timeout_s;      /* a response write making no progress this long drops the client (its run aborts) */
    int sse_keepalive_ms;     /* a stream with nothing to send this long gets an SSE comment (": keep-alive"),
                                 so clients' and proxies' read timeouts do not end a queued or preempted
                                 request's stream; 0 = never */
    int max_conns_per_ip;     /* connections from one client address */
    size_t max_inflight_bytes; /* request-body bytes held by all connections at once; 503 + Retry-After beyond */
    int http_workers;         /* worker threads at most (started as needed, reused, ended after 30 s idle); 0: the models' batch slots +
                                 max_queue each, + 64 (listener.c) */
    int verbose;
    const char *kv_dtype; /* every model's KV storage (xllm_model_options.kv_dtype); NULL: its config's */
    /* pipeline parallelism: when not NULL and pp_size > 1, its pp_* fields go
     * into the model options; -m only (one model); ranks above 0 serve their
     * stage instead of HTTP and return when rank 0 stops */
    const xllm_model_options *pp;
    /* called on each model's options before it loads (the CLI: the XLLM_*
     * environment switches, tools/options_env.h); NULL: none */
    void (*model_options_hook)(struct xllm_model_options *mo);
} srv_options;

/* Defaults: 127.0.0.1:8080, 8 MiB bodies, 256 queued requests per model,
 * 600 s per request, 30 s idle connections, 4096 connections (256 per
 * client address), heads within 10 s, bodies within 60 s, writes making
 * progress within 30 s, 256 MiB of request bodies in flight, worker threads
 * sized from the models (http_workers 0). */
srv_options srv_options_default(void);

/* Load the models, listen, print "xllm serve: listening on http://HOST:PORT"
 * on stdout when ready, serve until SIGINT or SIGTERM, then stop cleanly
 * (running requests aborted, engines and models freed). Returns the exit
 * status (1 after printing "xllm: error: ..." on stderr). Call once. */
int server_main(const srv_options *o);

#endif
