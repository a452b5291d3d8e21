/*
 * server.c - `xllm serve` from start to stop: options, the model registry,
 * the ready line, signals and a clean shutdown.
 *
 * SIGINT and SIGTERM are blocked in every thread and taken by the main
 * thread with sigwait, so no handler runs in the middle of anything. The
 * HTTP daemon starts first (GET /health answers 503 and every other endpoint
 * but /metrics 503 "not_ready" while the models load); when every model is
 * loaded the server prints its one ready line. At a signal it stops admitting
 * work (a request arriving on an open connection gets 503), stops accepting
 * connections, running requests abort and answer (their SSE streams end with
 * finish_reason "abort"; at most 10 s are given to what is still open), the
 * HTTP daemon joins its connection threads, and engines and models are freed.
 */
#include "srv.h"

#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

srv_options srv_options_default(void) {
    srv_options o;
    memset(&o, 0, sizeof o);
    o.host = "127.0.0.1";
    o.port = 8080;
    o.max_queue = 256;
    o.max_body = (size_t)8 << 20;
    o.request_timeout_s = 600;
    o.idle_timeout_s = 30;
    o.max_connections = 4096;
    o.header_timeout_s = 10;
    o.body_timeout_s = 60;
    o.write_timeout_s = 30;
    o.sse_keepalive_ms = 15000;
    o.max_conns_per_ip = 256;
    o.max_inflight_bytes = (size_t)256 << 20;
    return o;
}

/* The served name of a model path: its last component. */
static const char *model_name(const char *path) {
    static char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    size_t l = strlen(tmp);
    while (l > 1 && tmp[l - 1] == '/') tmp[--l] = 0;
    return basename(tmp);
}

int server_main(const srv_options *o) {
    srv_state *s = calloc(1, sizeof *s);
    if (!s) return 1;
    s->opt = *o;
    s->started = (long)time(NULL);
    metrics_init();
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    char err[1024] = "";
    int rc = 1;
    void *d = NULL;
    srv_model *first = NULL;
    if (o->pp && o->pp->pp_size > 1) {
        /* pipeline parallelism: load before listening; a worker rank serves its stage only */
        if (o->config_path || !o->model_path) {
            snprintf(err, sizeof err, "--pp serves one model given with -m (not --config)");
            goto out;
        }
        first = model_open(model_name(o->model_path), o->model_path, NULL, NULL, &s->opt, 0, err, sizeof err);
        if (!first) goto out;
        if (xllm_model_pp_rank(first->model) > 0) {
            xllm_error xe;
            rc = xllm_model_pp_worker(first->model, &xe) ? 1 : 0;
            if (rc) snprintf(err, sizeof err, "%s", xe.message);
            model_close(first);
            goto out;
        }
    }
    d = http_start(s, err, sizeof err);
    if (!d) {
        model_close(first);
        goto out;
    }
    if (first) {
        s->models = malloc(sizeof *s->models);
        if (!s->models) { model_close(first); goto out; }
        s->models[s->n_models++] = first;
    } else if (o->config_path) {
        if (config_load_server(s, o->config_path, err, sizeof err)) goto out;
    } else if (o->model_path) {
        srv_model *m = model_open(model_name(o->model_path), o->model_path, NULL, NULL, &s->opt, 0, err, sizeof err);
        if (!m) goto out;
        s->models = malloc(sizeof *s->models);
        if (!s->models) { model_close(m); goto out; }
        s->models[s->n_models++] = m;
    } else {
        snprintf(err, sizeof err, "give a model (-m PATH) or a config (--config FILE.yaml)");
        goto out;
    }
    atomic_store(&s->ready, 1);
    printf("xllm serve: listening on http://%s%s%s:%d\n", strchr(o->host, ':') ? "[" : "", o->host,
           strchr(o->host, ':') ? "]" : "", s->actual_port);
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    srv_log("signal %d: shutting down", sig);
    rc = 0;
out:
    atomic_store(&s->stopping, 1);
    if (d) http_stop(d, s);
    for (int i = 0; i < s->n_models; i++) model_close(s->models[i]);
    free(s->models);
    waiters_free_all();
    if (rc) fprintf(stderr, "xllm: error: %s\n", err);
    free(s);
    return rc;
}
