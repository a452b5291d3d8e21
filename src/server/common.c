/*
 * common.c - what every file of the server needs, at the bottom of src/server:
 * the clock, the log, the model lookup and the error object.
 *
 * The idea: handlers, the connection layer and the start-up code all call
 * down into this file and nothing here calls up, so no server file depends on
 * server.c (which only starts and stops) or on another handler. The log
 * escapes control bytes, so a value taken from a request (a path, a model
 * name, a header) can never forge a line.
 */
#include "srv.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t g_log = PTHREAD_MUTEX_INITIALIZER;

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void srv_log(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* control bytes escaped: a value from a request (a path, a model name)
       can never forge a line of the log */
    char esc[4 * sizeof msg];
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p && o + 5 < sizeof esc; p++) {
        if (*p < 0x20 || *p == 0x7f) o += (size_t)snprintf(esc + o, sizeof esc - o, "\\x%02x", *p);
        else esc[o++] = (char)*p;
    }
    esc[o] = 0;
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    char ts[32];
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    pthread_mutex_lock(&g_log);
    fprintf(stderr, "%s %s\n", ts, esc);
    pthread_mutex_unlock(&g_log);
}

srv_model *srv_find_model(srv_state *s, const char *name) {
    for (int i = 0; i < s->n_models; i++)
        if (!strcmp(s->models[i]->name, name)) return s->models[i];
    return NULL;
}

int http_err(http_error *e, int status, const char *type, const char *param, const char *code, const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->param = param;
    e->code = code;
    e->allow = NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return status;
}
