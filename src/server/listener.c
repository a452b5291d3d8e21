/*
 * listener.c - `xllm serve`'s connection layer: one epoll thread, a fixed
 * pool of worker threads for admitted requests, and a deadline on every phase.
 *
 * The idea (as nginx and Envoy do it): a client holds nothing it has not
 * earned. A connection that is still sending its head or body costs a small
 * struct and a 16 KiB buffer on the epoll thread, no thread. The head is
 * parsed strictly (http_parse.c) and judged as soon as it is complete (path,
 * method, API key, declared size: http_admit) before one body byte is kept;
 * a refusal is answered and the connection closed after a short lingering
 * read. Phases have total deadlines, not idle timers that restart on every
 * byte: the idle wait for a request (idle_timeout_s), its head
 * (header_timeout_s, 408), its body (body_timeout_s, 408), and while a
 * response is written, each write must make progress within write_timeout_s
 * (else the client is dropped and its run aborted). Limits: connections in
 * all (when full, the oldest connection still sending its head is closed to
 * make room), per client address, and a global budget of request-body bytes
 * in flight (503 + Retry-After when spent). A complete request goes to the
 * worker pool (http_handle on a worker), which answers through http_respond /
 * http_stream_*, then hands the connection back for keep-alive.
 *
 * The worker pool: a request goes to the worker that finished last among
 * those waiting (a stack: its thread stack and malloc caches are warm), or,
 * when none waits, to a new worker; a worker that has waited POOL_IDLE_S
 * (30 s) ends, down to POOL_CORE (4). So under a steady load no thread is
 * made or unmade per request, and after a burst the threads it needed go.
 * A request keeps its worker for its whole life (a stream: until its last
 * write), so the pool is sized for the most requests that can be in flight at
 * once: N = --http-workers, or by default the sum over the models of (batch
 * slots + --max-queue) + 64, at most --max-connections (so a generation
 * request beyond an engine's slots and queue still gets the engine's own 429,
 * not the pool's 503). Requests to /health, /metrics and /v1/models may use
 * every worker; the others all but a reserve of min(8, N/4), so a pool full
 * of long streams or never-reading clients still answers /health. Handing a
 * request over never blocks the epoll thread: when the pool (or the others'
 * share) is full, the request gets 503 + Retry-After; when a worker cannot be
 * started it waits in a queue for the next one free.
 *
 * Memory: each worker thread mallocs in one of glibc's per-thread arenas,
 * and freed memory stays in its arena. The arenas are capped at 4 (unless
 * MALLOC_ARENA_MAX says otherwise) and the epoll thread gives the kept free
 * memory back to the system every 10 s (malloc_trim). (With a thread per
 * request, RSS crept in a 30-minute soak with the bytes in use flat;
 * bench/hostile.md has the figures before and after the pool.)
 *
 * Thread-safety: connections and their list belong to the epoll thread;
 * a connection handed to the pool (under its mutex) belongs to the worker
 * that takes it until it is posted back through the return queue (mutex +
 * eventfd). Only the epoll thread starts and joins workers (http_stop, after
 * it ended, joins the rest).
 */
#include "srv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#define IN_CAP (HTTP_MAX_HEAD + 1024)
/* After a refusal the rest of the request is read and dropped (clients
   expect to finish sending before they read the answer), at most
   LINGER_FACTOR times the body limit and LINGER_S seconds; no byte is kept. */
#define LINGER_S 5.0
#define LINGER_FACTOR 4
/* A worker that waits this long for a request ends, unless it is one of the
   first POOL_CORE (see the top). */
#define POOL_IDLE_S 30
#define POOL_CORE 4
/* Workers kept for /health, /metrics and /v1/models (at most; see the top). */
#define POOL_RESERVE 8
/* The default pool's room beyond the engines' slots and queues: requests that
   hold a worker without an engine request (a 400, a 429 on its way out,
   /tokenize), and the reserve. */
#define POOL_MARGIN 64

enum { C_IDLE, C_HEAD, C_BODY, C_WORK, C_LINGER };

struct http_conn {
    srv_state *s;
    struct lsn *L;
    int fd;
    char ip[INET6_ADDRSTRLEN];
    int state;
    double deadline, born;
    char in[IN_CAP];
    size_t in_len;
    size_t lingered;
    http_head h;
    int endpoint;
    sbuf body;
    http_chunk ck;
    long long reserved;     /* bytes of the in-flight budget this request holds */
    int peer_eof;           /* the client's read side ended (half-close or close) */
    int broken;             /* a write failed or missed its deadline */
    int resp_started, chunked_resp, keep_alive, close_after;
    int served;             /* requests answered on this connection */
    int light;              /* its request is /health, /metrics or /v1/models (may use the pool's reserve) */
    int status;             /* the status of the answer written (0: none yet) */
    struct http_conn *prev, *next;
    struct http_conn *qnext; /* the return queue */
    struct http_conn *pnext; /* the pool's queue */
};

typedef struct lsn {
    srv_state *s;
    int lfd, ep, evfd;
    pthread_t thr;
    atomic_int quit;
    int n_conns;
    http_conn *head; /* every connection not in a worker's hands is here; workers' too */
    pthread_mutex_t qmu;
    http_conn *q;    /* connections handed back by workers */
    atomic_int workers;  /* requests handed to the pool and not yet handed back */
    atomic_int heavy;    /* of which not light */
    /* the worker pool (see the top) */
    pthread_mutex_t pmu;
    http_conn *pq, *pq_tail; /* handed over, no worker free to take it yet */
    struct pworker *idle;    /* workers waiting, the last one to finish on top */
    struct pworker *live;    /* every worker not yet joined (epoll thread and http_stop only) */
    int n_live;              /* workers started and not retired */
    int pool_quit;
    int pool_max, heavy_max, sized;
    atomic_int partial; /* connections in the middle of sending a request (as of the last scan) */
    atomic_llong inflight;
    int max_conns;
    double refused_logged; /* when the last line about refused connections was logged */
    long refused;          /* connections refused since then */
} lsn;

static const char *reason(int st) {
    switch (st) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Status";
    }
}

/* ------------------------------------------------------------ writing */

/* Write all of p[0..n), each write making progress within the write
 * deadline. 0, or -1 (the connection is then broken). */
static int write_all(http_conn *c, const char *p, size_t n) {
    if (c->broken) return -1;
    int wt = c->s->opt.write_timeout_s > 0 ? c->s->opt.write_timeout_s : 0;
    while (n) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w > 0) { p += w; n -= (size_t)w; continue; }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pf = {.fd = c->fd, .events = POLLOUT};
            int r = poll(&pf, 1, wt ? wt * 1000 : -1);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0 || (pf.revents & (POLLERR | POLLHUP | POLLNVAL))) break;
            continue;
        }
        break;
    }
    if (n) {
        c->broken = 1;
        return -1;
    }
    return 0;
}

static void head_line(http_conn *c, sbuf *b, int status, const char *ctype, const char *extra) {
    int ka = c->keep_alive && !c->close_after && !atomic_load(&c->s->stopping);
    c->keep_alive = ka;
    sb_printf(b, "HTTP/1.1 %d %s\r\n", status, reason(status));
    if (ctype) sb_printf(b, "Content-Type: %s\r\n", ctype);
    if (extra) sb_puts(b, extra);
    sb_printf(b, "Connection: %s\r\n", ka ? "keep-alive" : "close");
    /* Tell the client to drop an idle kept-alive connection well before we close it (undici
     * and other HTTP clients read this header and close first). A close of ours races the
     * next request the client sends on that connection, which then fails on the client with
     * "other side closed" (HTTP/1.1 cannot say whether the request was read, so a client does
     * not retry a POST). Undici keeps only 1-2 s of margin below the hint, which a client
     * starved of CPU overruns, so the hint is a third (1-10 s) below our own deadline. */
    int idle = c->s->opt.idle_timeout_s;
    if (ka && idle > 0) {
        int margin = idle / 3 < 1 ? 1 : idle / 3 > 10 ? 10 : idle / 3;
        sb_printf(b, "Keep-Alive: timeout=%d\r\n", idle - margin < 1 ? 1 : idle - margin);
    }
}

int http_respond(http_conn *c, int status, const char *ctype, const char *extra, const char *body, size_t len) {
    if (c->resp_started) return -1;
    c->resp_started = 1;
    c->status = status;
    sbuf b = {0};
    head_line(c, &b, status, ctype, extra);
    sb_printf(&b, "Content-Length: %zu\r\n\r\n", len);
    int is_head = !strcmp(c->h.method, "HEAD");
    if (!is_head && len < 65536) sb_put(&b, body, len);
    int r = b.oom ? -1 : write_all(c, b.p, b.len);
    if (!r && !is_head && len >= 65536) r = write_all(c, body, len);
    sb_free(&b);
    return r;
}

int http_stream_begin(http_conn *c, int status, const char *ctype, const char *extra) {
    if (c->resp_started) return -1;
    c->resp_started = 1;
    c->status = status;
    sbuf b = {0};
    /* HTTP/1.0 has no chunked coding: the body ends when the connection does */
    c->chunked_resp = c->h.minor >= 1;
    if (!c->chunked_resp) c->close_after = 1;
    head_line(c, &b, status, ctype, extra);
    sb_puts(&b, c->chunked_resp ? "Transfer-Encoding: chunked\r\n\r\n" : "\r\n");
    int r = b.oom ? -1 : write_all(c, b.p, b.len);
    sb_free(&b);
    return r;
}

int http_stream_write(http_conn *c, const char *data, size_t len) {
    if (!len) return c->broken ? -1 : 0;
    if (!c->chunked_resp) return write_all(c, data, len);
    char hx[24];
    int hl = snprintf(hx, sizeof hx, "%zx\r\n", len);
    if (write_all(c, hx, (size_t)hl) || write_all(c, data, len)) return -1;
    return write_all(c, "\r\n", 2);
}

int http_stream_end(http_conn *c) {
    if (!c->chunked_resp) return c->broken ? -1 : 0;
    return write_all(c, "0\r\n\r\n", 5);
}

int http_conn_fd(const http_conn *c) { return c->fd; }
int http_conn_status(const http_conn *c) { return c->status; }
int http_conn_minor(const http_conn *c) { return c->h.minor; }
int http_conn_is_head(const http_conn *c) { return !strcmp(c->h.method, "HEAD"); }

/* ----------------------------------------------------- the epoll thread */

static void set_events(lsn *L, http_conn *c, int op) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
    epoll_ctl(L->ep, op, c->fd, &ev);
}

static void conn_close(lsn *L, http_conn *c) {
    if (c->reserved) atomic_fetch_sub(&L->inflight, c->reserved);
    c->reserved = 0;
    epoll_ctl(L->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (c->prev) c->prev->next = c->next;
    else L->head = c->next;
    if (c->next) c->next->prev = c->prev;
    L->n_conns--;
    sb_free(&c->body);
    free(c);
}

/* Answer a refusal from the epoll thread (a small response: one
 * non-blocking write), then close after a lingering read so that a client
 * still sending gets to read it. */
static void refuse(lsn *L, http_conn *c, const http_error *e) {
    sbuf b = {0}, body = {0};
    char extra[256];
    http_error_body(e, &body);
    http_error_headers(e, extra, sizeof extra);
    sb_printf(&b, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n%sConnection: close\r\nContent-Length: %zu\r\n\r\n",
              e->status, reason(e->status), extra, body.len);
    if (strcmp(c->h.method, "HEAD")) sb_put(&b, body.p, body.len);
    if (!b.oom) (void)!send(c->fd, b.p, b.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    metrics_request(c->endpoint, e->status);
    srv_log("%s %s %d %s", c->h.method[0] ? c->h.method : "-", c->h.target[0] ? c->h.target : "-", e->status,
            e->message);
    sb_free(&b);
    sb_free(&body);
    sb_free(&c->body);
    if (c->reserved) atomic_fetch_sub(&L->inflight, c->reserved);
    c->reserved = 0;
    shutdown(c->fd, SHUT_WR);
    c->state = C_LINGER;
    c->deadline = srv_now() + LINGER_S;
    c->in_len = 0;
}

static void refuse_st(lsn *L, http_conn *c, int status, const char *msg) {
    http_error e;
    http_err(&e, status, status >= 500 ? "server_error" : "invalid_request_error", NULL, NULL, "%s", msg);
    refuse(L, c, &e);
}

/* A worker of the pool. Fields under L->pmu, except t and lnext (the epoll
 * thread's, and http_stop's once it has ended). */
typedef struct pworker {
    lsn *L;
    pthread_t t;
    pthread_cond_t cv;
    http_conn *job;          /* handed to it while it waited */
    struct pworker *inext;   /* the idle stack */
    struct pworker *lnext;   /* L->live */
    int done;                /* retired or quit: it touches nothing more; join it */
} pworker;

static void *pool_main(void *arg);

/* Join and free the workers that have ended (epoll thread, or http_stop after it). */
static void pool_reap(lsn *L, int all) {
    for (pworker **pp = &L->live; *pp;) {
        pworker *w = *pp;
        pthread_mutex_lock(&L->pmu);
        int done = w->done;
        pthread_mutex_unlock(&L->pmu);
        if (!done && !all) { pp = &w->lnext; continue; }
        pthread_join(w->t, NULL);
        *pp = w->lnext;
        pthread_cond_destroy(&w->cv);
        free(w);
    }
}

/* The pool's size (see the top): once the models are loaded, from their batch
 * slots; before, what --http-workers says or the reserve (everything but
 * /health and /metrics answers 503 then). */
static void pool_size(lsn *L) {
    srv_state *s = L->s;
    long n = s->opt.http_workers;
    if (!n) {
        if (!atomic_load(&s->ready)) {
            n = 2 * POOL_RESERVE;
        } else {
            n = POOL_MARGIN;
            for (int i = 0; i < s->n_models; i++)
                n += (s->models[i]->max_batch > 0 ? s->models[i]->max_batch : 0) + (s->opt.max_queue > 0 ? s->opt.max_queue : 0);
            L->sized = 1;
        }
    } else {
        L->sized = 1;
    }
    if (n > L->max_conns) n = L->max_conns;
    if (n < 1) n = 1;
    L->pool_max = (int)n;
    int reserve = L->pool_max / 4 < POOL_RESERVE ? L->pool_max / 4 : POOL_RESERVE;
    L->heavy_max = L->pool_max - reserve;
    if (L->sized) srv_log("http workers: at most %d (%d for requests other than /health, /metrics, /v1/models)", L->pool_max, L->heavy_max);
}

/* Hand a complete request to the pool (never blocks: a full pool is 503). */
static void dispatch(lsn *L, http_conn *c) {
    if (!L->sized) pool_size(L);
    c->light = c->endpoint == EP_HEALTH || c->endpoint == EP_METRICS || c->endpoint == EP_MODELS;
    if (atomic_load(&L->workers) >= L->pool_max || (!c->light && atomic_load(&L->heavy) >= L->heavy_max)) {
        http_error e;
        http_err(&e, 503, "server_error", NULL, "busy", "every worker of the server is busy; retry");
        refuse(L, c, &e);
        return;
    }
    pthread_mutex_lock(&L->pmu);
    pworker *w = L->idle, *nw = NULL;
    if (!w && L->n_live < L->pool_max) {
        /* none waiting: a new worker, which takes this request first */
        nw = calloc(1, sizeof *nw);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        if (nw) {
            nw->L = L;
            pthread_cond_init(&nw->cv, &ca);
            nw->job = c;
            if (pthread_create(&nw->t, NULL, pool_main, nw)) {
                pthread_cond_destroy(&nw->cv);
                free(nw);
                nw = NULL;
            }
        }
        pthread_condattr_destroy(&ca);
        if (nw) {
            L->n_live++;
            nw->lnext = L->live;
            L->live = nw;
        } else if (!L->n_live) {
            pthread_mutex_unlock(&L->pmu);
            refuse_st(L, c, 503, "the server cannot start a worker thread");
            return;
        }
        /* else: it waits in the queue for the next worker free */
    }
    c->state = C_WORK;
    epoll_ctl(L->ep, EPOLL_CTL_DEL, c->fd, NULL);
    c->resp_started = c->broken = c->chunked_resp = c->close_after = c->status = 0;
    c->keep_alive = c->h.keep_alive && !c->peer_eof;
    atomic_fetch_add(&L->workers, 1);
    if (!c->light) atomic_fetch_add(&L->heavy, 1);
    atomic_fetch_add(&c->s->active, 1);
    if (nw) {
        /* it has its job already */
    } else if (w) { /* the worker that waited least: its stack and caches are warm */
        L->idle = w->inext;
        w->job = c;
        pthread_cond_signal(&w->cv);
    } else {
        c->pnext = NULL;
        if (L->pq_tail) L->pq_tail->pnext = c;
        else L->pq = c;
        L->pq_tail = c;
    }
    pthread_mutex_unlock(&L->pmu);
}

static void consume(http_conn *c, size_t n) {
    memmove(c->in, c->in + n, c->in_len - n);
    c->in_len -= n;
}

/* Budget: reserve more request-body bytes; 0 when the global budget is spent. */
static int reserve(lsn *L, http_conn *c, long long n) {
    long long cap = (long long)L->s->opt.max_inflight_bytes;
    long long now = atomic_fetch_add(&L->inflight, n) + n;
    if (cap > 0 && now > cap) {
        atomic_fetch_sub(&L->inflight, n);
        return 0;
    }
    c->reserved += n;
    return 1;
}

/* Take what is in c->in as far as the state allows. */
static void process(lsn *L, http_conn *c) {
    srv_state *s = L->s;
    for (;;) {
        if (c->state == C_LINGER) { c->lingered += c->in_len; c->in_len = 0; return; }
        if (c->state == C_IDLE) {
            if (!c->in_len) return;
            c->state = C_HEAD;
            if (c->served) /* a fresh connection's deadline runs from its start */
                c->deadline = srv_now() + (s->opt.header_timeout_s > 0 ? s->opt.header_timeout_s : 1e9);
        }
        if (c->state == C_HEAD) {
            size_t hl = 0;
            if (!http_head_end(c->in, c->in_len, &hl)) {
                if (c->in_len >= HTTP_MAX_HEAD) { memset(&c->h, 0, sizeof c->h); refuse_st(L, c, 431, "the request head is over 16 KiB"); }
                else if (memchr(c->in, 0, c->in_len)) { memset(&c->h, 0, sizeof c->h); refuse_st(L, c, 400, "a NUL byte in the request head"); }
                return;
            }
            int st = http_head_parse(c->in, hl, &c->h);
            c->endpoint = EP_OTHER;
            if (st) { refuse_st(L, c, st, c->h.why); return; }
            http_error e;
            st = http_admit(s, &c->h, &c->endpoint, &e);
            if (st) { refuse(L, c, &e); return; }
            if (c->h.content_length > 0 && !reserve(L, c, c->h.content_length)) {
                http_err(&e, 503, "server_error", NULL, "busy", "the server has too many request bytes in flight; retry");
                refuse(L, c, &e);
                return;
            }
            consume(c, hl);
            memset(&c->body, 0, sizeof c->body);
            memset(&c->ck, 0, sizeof c->ck);
            if (c->h.content_length <= 0 && !c->h.chunked) { dispatch(L, c); return; }
            c->state = C_BODY;
            c->deadline = srv_now() + (s->opt.body_timeout_s > 0 ? s->opt.body_timeout_s : 1e9);
            if (c->h.expect_continue) (void)!send(c->fd, "HTTP/1.1 100 Continue\r\n\r\n", 25, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        if (c->state == C_BODY) {
            if (!c->h.chunked) {
                size_t need = (size_t)c->h.content_length - c->body.len, k = c->in_len < need ? c->in_len : need;
                if (k) {
                    /* at most the declared size, never more */
                    size_t max = (size_t)c->h.content_length + 1, first = max < 65537 ? max : 65537;
                    if (srv_reserve(&c->body.p, &c->body.cap, c->body.len + k + 1, 1, first, max)) {
                        refuse_st(L, c, 500, "out of memory");
                        return;
                    }
                    memcpy(c->body.p + c->body.len, c->in, k);
                    c->body.len += k;
                    consume(c, k);
                }
                if (c->body.len < (size_t)c->h.content_length) return;
                c->body.p[c->body.len] = 0;
                dispatch(L, c);
                return;
            }
            for (;;) {
                size_t used = 0, dl = 0;
                const char *d = NULL;
                int r = http_chunk_step(&c->ck, c->in, c->in_len, &used, &d, &dl);
                if (r < 0) { refuse_st(L, c, 400, "malformed chunked body"); return; }
                if (dl) {
                    if (c->body.len + dl > s->opt.max_body) {
                        http_error e;
                        http_err(&e, 413, "invalid_request_error", NULL, "request_too_large", "the request body is over the limit");
                        refuse(L, c, &e);
                        return;
                    }
                    while ((long long)(c->body.len + dl) > c->reserved)
                        if (!reserve(L, c, 65536)) {
                            http_error e;
                            http_err(&e, 503, "server_error", NULL, "busy", "the server has too many request bytes in flight; retry");
                            refuse(L, c, &e);
                            return;
                        }
                    sb_put(&c->body, d, dl);
                    if (c->body.oom) { refuse_st(L, c, 500, "out of memory"); return; }
                }
                consume(c, used);
                if (r == 1) {
                    sb_put(&c->body, "", 1);
                    if (c->body.oom) { refuse_st(L, c, 500, "out of memory"); return; }
                    c->body.len--;
                    dispatch(L, c);
                    return;
                }
                if (!used && !dl) return;
            }
        }
        return;
    }
}

static void on_readable(lsn *L, http_conn *c) {
    for (int rounds = 0; rounds < 16 && c->state != C_WORK; rounds++) {
        if (c->in_len == IN_CAP) {
            if (c->state == C_LINGER) c->in_len = 0;
            else return; /* process() left it full: it is waiting for nothing more */
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, IN_CAP - c->in_len, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
            process(L, c);
            if (c->state == C_LINGER && c->lingered > LINGER_FACTOR * c->s->opt.max_body) { conn_close(L, c); return; }
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        /* end of input (or an error): nothing more will come */
        c->peer_eof = 1;
        if (c->state == C_WORK) return;
        conn_close(L, c);
        return;
    }
}

static int same_ip_count(lsn *L, const char *ip) {
    int n = 0;
    for (http_conn *c = L->head; c; c = c->next) n += !strcmp(c->ip, ip);
    return n;
}

static void on_accept(lsn *L) {
    srv_state *s = L->s;
    for (int k = 0; k < 256; k++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(L->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE) srv_log("accept: out of file descriptors");
            return;
        }
        char ip[INET6_ADDRSTRLEN] = "?";
        if (ss.ss_family == AF_INET) inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, ip, sizeof ip);
        else if (ss.ss_family == AF_INET6) inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, ip, sizeof ip);
        const char *why = NULL;
        if (s->opt.max_conns_per_ip > 0 && same_ip_count(L, ip) >= s->opt.max_conns_per_ip)
            why = "too many connections from this address";
        if (!why && L->n_conns >= L->max_conns) {
            /* full: make room by closing the oldest connection still sending its head */
            http_conn *old = NULL;
            for (http_conn *c = L->head; c; c = c->next)
                if ((c->state == C_HEAD || c->state == C_IDLE || c->state == C_LINGER) && (!old || c->born < old->born)) old = c;
            if (old) conn_close(L, old);
            else why = "too many connections";
        }
        if (why) {
            char body[160], msg[512];
            int bl = snprintf(body, sizeof body, "{\"error\":{\"message\":\"%s\",\"type\":\"server_error\",\"param\":null,\"code\":\"busy\"}}", why);
            int n = snprintf(msg, sizeof msg,
                             "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                             "Connection: close\r\nContent-Length: %d\r\n\r\n%s", bl, body);
            /* logged, but at most a line a second: a flood of connections must not flood the log;
             * before the answer, so a client that has its 503 finds the line written */
            L->refused++;
            double now = srv_now();
            if (now - L->refused_logged >= 1.0) {
                srv_log("accept: 503 to %s: %s (%d from it, %d connections in all; %ld refused since the last such line)",
                        ip, why, same_ip_count(L, ip), L->n_conns, L->refused);
                L->refused_logged = now;
                L->refused = 0;
            }
            (void)!send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
            metrics_request(EP_OTHER, 503);
            close(fd);
            continue;
        }
        http_conn *c = calloc(1, sizeof *c);
        if (!c) { close(fd); continue; }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        /* a fixed send buffer: a client that reads nothing holds at most this much of the kernel's memory */
        int sndbuf = 256 << 10;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
        c->s = s;
        c->L = L;
        c->fd = fd;
        snprintf(c->ip, sizeof c->ip, "%s", ip);
        c->state = C_IDLE;
        c->born = srv_now();
        /* the first request's head is due within the header deadline of the connection's start */
        c->deadline = c->born + (s->opt.header_timeout_s > 0 ? s->opt.header_timeout_s : 1e9);
        c->next = L->head;
        if (L->head) L->head->prev = c;
        L->head = c;
        L->n_conns++;
        set_events(L, c, EPOLL_CTL_ADD);
    }
}

static void on_deadlines(lsn *L) {
    double now = srv_now();
    http_conn *n;
    int partial = 0;
    for (http_conn *c = L->head; c; c = n) {
        n = c->next;
        partial += c->state == C_HEAD || c->state == C_BODY;
        if (c->state == C_WORK || now < c->deadline) continue;
        if (c->state == C_HEAD || c->state == C_BODY) {
            http_error e;
            http_err(&e, 408, "invalid_request_error", NULL, "request_timeout",
                     c->state == C_HEAD ? "the request head did not arrive in time" : "the request body did not arrive in time");
            if (c->state == C_HEAD) memset(&c->h, 0, sizeof c->h);
            c->endpoint = c->state == C_HEAD ? EP_OTHER : c->endpoint;
            refuse(L, c, &e);
            continue;
        }
        conn_close(L, c); /* idle keep-alive, or lingering done */
    }
    atomic_store(&L->partial, partial);
    pool_reap(L, 0);
}

static void on_returns(lsn *L) {
    pthread_mutex_lock(&L->qmu);
    http_conn *q = L->q;
    L->q = NULL;
    pthread_mutex_unlock(&L->qmu);
    uint64_t v;
    (void)!read(L->evfd, &v, sizeof v);
    while (q) {
        http_conn *c = q;
        q = q->qnext;
        if (c->broken || !c->keep_alive || c->peer_eof || atomic_load(&L->s->stopping)) {
            conn_close(L, c);
            continue;
        }
        c->state = C_IDLE;
        c->served++;
        c->deadline = srv_now() + (L->s->opt.idle_timeout_s > 0 ? L->s->opt.idle_timeout_s : 1e9);
        memset(&c->h, 0, sizeof c->h);
        set_events(L, c, EPOLL_CTL_ADD);
        process(L, c); /* a pipelined request already read */
    }
}

static void *loop(void *arg) {
    lsn *L = arg;
    struct epoll_event evs[64];
    double next_scan = 0, next_trim = srv_now() + 10;
    (void)next_trim;
    while (!atomic_load(&L->quit)) {
        int n = epoll_wait(L->ep, evs, 64, 100);
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == (void *)L) on_accept(L);
            else if (p == (void *)&L->evfd) on_returns(L);
            else {
                http_conn *c = p;
                if (c->state != C_WORK) on_readable(L, c);
            }
        }
        double now = srv_now();
        if (now >= next_scan) {
            on_deadlines(L);
            next_scan = now + 0.1;
        }
#ifdef __GLIBC__
        if (now >= next_trim) { /* the arenas' free memory back to the system (see the top) */
            malloc_trim(0);
            next_trim = now + 10;
        }
#endif
    }
    return NULL;
}

/* One request on a worker: answer it, hand the connection back. */
static void serve(lsn *L, http_conn *c) {
    srv_state *s = c->s;
    int light = c->light;
    http_handle(s, c, &c->h, c->endpoint, c->body.p ? c->body.p : "", c->body.len);
    if (!c->resp_started) {
        http_error e;
        http_err(&e, 500, "server_error", NULL, NULL, "no answer");
        sbuf b = {0};
        http_error_body(&e, &b);
        http_respond(c, 500, "application/json", NULL, b.p, b.len);
        sb_free(&b);
    }
    sb_free(&c->body);
    if (c->reserved) atomic_fetch_sub(&L->inflight, c->reserved);
    c->reserved = 0;
    /* did the client close its side while we worked? */
    struct pollfd pf = {.fd = c->fd, .events = POLLRDHUP};
    if (poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR))) c->peer_eof = 1;
    pthread_mutex_lock(&L->qmu);
    c->qnext = L->q;
    L->q = c;
    pthread_mutex_unlock(&L->qmu);
    uint64_t one = 1;
    (void)!write(L->evfd, &one, sizeof one);
    atomic_fetch_sub(&s->active, 1);
    if (!light) atomic_fetch_sub(&L->heavy, 1);
    atomic_fetch_sub(&L->workers, 1);
}

static void *pool_main(void *arg) {
    pworker *w = arg;
    lsn *L = w->L;
#ifdef __GLIBC__
    pthread_setname_np(pthread_self(), "xllm-http"); /* seen in top -H, /proc/PID/task/ * /comm */
#endif
    pthread_mutex_lock(&L->pmu);
    for (;;) {
        http_conn *c = w->job;
        w->job = NULL;
        if (!c && L->pq) { /* a request that found no worker free */
            c = L->pq;
            L->pq = c->pnext;
            if (!L->pq) L->pq_tail = NULL;
        }
        if (c) {
            pthread_mutex_unlock(&L->pmu);
            serve(L, c);
            pthread_mutex_lock(&L->pmu);
            continue;
        }
        if (L->pool_quit) break;
        /* wait on top of the idle stack; one that waited POOL_IDLE_S retires (beyond POOL_CORE) */
        w->inext = L->idle;
        L->idle = w;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += POOL_IDLE_S;
        int timed_out = 0;
        while (!w->job && !L->pool_quit && !timed_out)
            timed_out = pthread_cond_timedwait(&w->cv, &L->pmu, &until) == ETIMEDOUT;
        if (w->job) continue; /* dispatch took it off the stack */
        for (pworker **pp = &L->idle; *pp; pp = &(*pp)->inext)
            if (*pp == w) { *pp = w->inext; break; }
        if (L->pool_quit) break;
        if (L->n_live > POOL_CORE) break; /* retire */
    }
    L->n_live--;
    w->done = 1;
    pthread_mutex_unlock(&L->pmu);
    return NULL;
}

/* ------------------------------------------------------------ start, stop */

void *http_start(srv_state *s, char *err, size_t cap) {
    lsn *L = calloc(1, sizeof *L);
    if (!L) { snprintf(err, cap, "out of memory"); return NULL; }
    L->s = s;
    pthread_mutex_init(&L->qmu, NULL);
    pthread_mutex_init(&L->pmu, NULL);
#ifdef __GLIBC__
    if (!getenv("MALLOC_ARENA_MAX")) mallopt(M_ARENA_MAX, 4); /* see the top */
#endif
    /* a connection costs a descriptor: let the limit reach the hard one */
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    L->max_conns = s->opt.max_connections > 0 ? s->opt.max_connections : 1;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY && (long long)rl.rlim_cur < L->max_conns + 128LL) {
        L->max_conns = rl.rlim_cur > 256 ? (int)rl.rlim_cur - 128 : 128;
        srv_log("--max-connections lowered to %d by the descriptor limit (ulimit -n %llu)", L->max_conns,
                (unsigned long long)rl.rlim_cur);
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t sl;
    const char *host = s->opt.host;
    if (strchr(host, ':')) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)s->opt.port);
        if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1) { snprintf(err, cap, "bad --host '%s'", host); free(L); return NULL; }
        sl = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)s->opt.port);
        if (inet_pton(AF_INET, host, &a->sin_addr) != 1) {
            snprintf(err, cap, "bad --host '%s' (an IPv4 or IPv6 address)", host);
            free(L);
            return NULL;
        }
        sl = sizeof *a;
    }
    L->lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (L->lfd >= 0) setsockopt(L->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (L->lfd < 0 || bind(L->lfd, (struct sockaddr *)&ss, sl) || listen(L->lfd, 1024)) {
        snprintf(err, cap, "cannot listen on %s:%d (in use, or not an address of this machine?)", host, s->opt.port);
        if (L->lfd >= 0) close(L->lfd);
        free(L);
        return NULL;
    }
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    getsockname(L->lfd, (struct sockaddr *)&bound, &bl);
    s->actual_port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                       : ((struct sockaddr_in *)&bound)->sin_port);
    pool_size(L);
    L->ep = epoll_create1(EPOLL_CLOEXEC);
    L->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = L};
    epoll_ctl(L->ep, EPOLL_CTL_ADD, L->lfd, &ev);
    struct epoll_event ev2 = {.events = EPOLLIN, .data.ptr = &L->evfd};
    epoll_ctl(L->ep, EPOLL_CTL_ADD, L->evfd, &ev2);
    if (L->ep < 0 || L->evfd < 0 || pthread_create(&L->thr, NULL, loop, L)) {
        snprintf(err, cap, "cannot start the connection thread");
        close(L->lfd);
        free(L);
        return NULL;
    }
    return L;
}

/* Shutdown, with s->stopping already set: stop accepting, let the requests
 * in progress end (running ones abort within a step and answer) for at most
 * HTTP_DRAIN_S seconds, then cut the sockets still open and wait for their
 * workers (each returns at its next write). */
#define HTTP_DRAIN_S 10.0
void http_stop(void *d, srv_state *s) {
    lsn *L = d;
    if (!L) return;
    epoll_ctl(L->ep, EPOLL_CTL_DEL, L->lfd, NULL);
    close(L->lfd);
    double until = srv_now() + HTTP_DRAIN_S;
    struct timespec scan = {0, 150 * 1000 * 1000};
    nanosleep(&scan, NULL); /* one deadline scan counts the requests half-sent */
    while (atomic_load(&L->workers) + atomic_load(&L->partial) > 0 && srv_now() < until) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (atomic_load(&L->workers) + atomic_load(&L->partial) > 0)
        srv_log("shutdown: %d requests still open after %.0f s: closed", atomic_load(&L->workers) + atomic_load(&L->partial), HTTP_DRAIN_S);
    atomic_store(&L->quit, 1);
    pthread_join(L->thr, NULL);
    for (http_conn *c = L->head; c; c = c->next)
        if (c->state == C_WORK) shutdown(c->fd, SHUT_RDWR);
    while (atomic_load(&L->workers) > 0) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&L->pmu);
    L->pool_quit = 1;
    for (pworker *w = L->idle; w; w = w->inext) pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&L->pmu);
    pool_reap(L, 1);
    while (L->head) conn_close(L, L->head);
    close(L->ep);
    close(L->evfd);
    pthread_mutex_destroy(&L->qmu);
    pthread_mutex_destroy(&L->pmu);
    free(L);
    (void)s;
}
