/*
 * run.c - one OpenAI request run on its model's engine: submit, collect the
 * chunks, and write the response as JSON or as Server-Sent Events.
 *
 * A request becomes one engine request per prompt (n samples each); choice
 * i * n + j is prompt i's sample j. The connection's thread polls its engine
 * requests without waiting and, when nothing is new, sleeps on a waiter that
 * the engine's notify callback signals (so several prompts stream without
 * busy polling). Between waits it checks the client's socket: a client that
 * hung up has its requests released at once (the engine frees their KV
 * within a step). The request timeout and server shutdown abort the run.
 * A stream with nothing to send for --sse-keepalive ms (queued, preempted)
 * gets an SSE comment line, so read timeouts on the way do not end it.
 *
 * Text arrives already free of anything that could still become a stop
 * string (the engine holds it back). When the model has a PII policy that
 * filters output, each choice's text goes through a pii_stream, which holds
 * back what could still become a match or a placeholder. Log-probabilities
 * come with the chunks; a token's text is its share of the chunk's text.
 */
#include "srv.h"
#include "chat_out.h"

#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

/* ---------------------------------------------------------------- waiters */

static pthread_mutex_t g_wmu = PTHREAD_MUTEX_INITIALIZER;
static waiter *g_wfree, *g_wall_head;
static waiter *g_wall[1 << 16];
static int g_wall_n;

waiter *waiter_get(void) {
    pthread_mutex_lock(&g_wmu);
    waiter *w = g_wfree;
    if (w) {
        g_wfree = w->next;
    } else if (g_wall_n < (int)(sizeof g_wall / sizeof g_wall[0])) {
        w = calloc(1, sizeof *w);
        if (w) {
            pthread_mutex_init(&w->mu, NULL);
            pthread_condattr_t a;
            pthread_condattr_init(&a);
            pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
            pthread_cond_init(&w->cv, &a);
            pthread_condattr_destroy(&a);
            g_wall[g_wall_n++] = w;
        }
    }
    pthread_mutex_unlock(&g_wmu);
    (void)g_wall_head;
    return w;
}

void waiter_put(waiter *w) {
    if (!w) return;
    pthread_mutex_lock(&g_wmu);
    w->next = g_wfree;
    g_wfree = w;
    pthread_mutex_unlock(&g_wmu);
}

void waiter_notify(void *user, xllm_request_id id) {
    (void)id;
    waiter *w = user;
    pthread_mutex_lock(&w->mu);
    w->seq++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

unsigned long waiter_wait(waiter *w, unsigned long seen, int ms) {
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += ms / 1000;
    dl.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&w->mu);
    while (w->seq == seen)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &dl)) break;
    unsigned long s = w->seq;
    pthread_mutex_unlock(&w->mu);
    return s;
}

static unsigned long waiter_seq(waiter *w) {
    pthread_mutex_lock(&w->mu);
    unsigned long s = w->seq;
    pthread_mutex_unlock(&w->mu);
    return s;
}

void waiters_free_all(void) {
    pthread_mutex_lock(&g_wmu);
    for (int i = 0; i < g_wall_n; i++) {
        pthread_mutex_destroy(&g_wall[i]->mu);
        pthread_cond_destroy(&g_wall[i]->cv);
        free(g_wall[i]);
    }
    g_wall_n = 0;
    g_wfree = NULL;
    pthread_mutex_unlock(&g_wmu);
}

void make_id(char *buf, size_t cap, const char *prefix) {
    unsigned char r[12];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        static atomic_ulong ctr;
        unsigned long c = atomic_fetch_add(&ctr, 1) ^ (unsigned long)time(NULL);
        memcpy(r, &c, sizeof c);
    }
    size_t o = (size_t)snprintf(buf, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof r && o + 2 < cap; i++) o += (size_t)snprintf(buf + o, cap - o, "%02x", r[i]);
}

int client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return 0;
    return (p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0;
}

int client_gone_probe(int fd, int *probed) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return 1;
    if ((p.revents & POLLRDHUP) && !*probed) {
        /* half-closed or closed: an interim response tells them apart (a
           closed peer answers it with a reset); HTTP/1.1 clients skip it */
        *probed = 1;
        if (send(fd, "HTTP/1.1 100 Continue\r\n\r\n", 25, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) return 1;
    }
    return 0;
}

/* -------------------------------------------------------------------- run */

typedef struct choice {
    sbuf text;                 /* non-streamed: the processed text */
    sbuf lp_content;           /* chat logprobs entries */
    sbuf lp_tokens, lp_vals, lp_tops, lp_offs; /* completions logprobs lists */
    size_t offset;             /* text offset of the next token (completions logprobs) */
    int n_tokens;
    int finished;
    xllm_finish_reason reason;
    pii_stream *ps;
    chat_out *co;              /* chat: reasoning / content / tool calls split (NULL: none) */
    sbuf reasoning;            /* non-streamed reasoning_content */
    int32_t last_id;           /* the token before the next one (the prompt's last at first) */
} choice;

struct run {
    srv_state *s;
    srv_req *r;
    srv_model *m;
    int fd;
    int probed;               /* client_gone_probe's interim response was sent */
    int n_sub;
    xllm_request_id id[SRV_MAX_PROMPTS];
    int sub_live[SRV_MAX_PROMPTS];   /* submitted and not yet released */
    int counted;                     /* inflight slots held */
    waiter *w;
    int n_choices;
    choice *ch;
    char rid[64];
    long created;
    double t0, t_last, deadline;
    double t_sse;                    /* when the stream last got bytes (for the keep-alive comment) */
    int got_first, aborted, gone, failed, started, ended;
    http_error err;
    sbuf *sse;                       /* where events go while streaming */
    size_t prompt_tokens, completion_tokens;
};

static const char *reason_str(xllm_finish_reason r) {
    return r == XLLM_FINISH_LENGTH ? "length" : r == XLLM_FINISH_STOP ? "stop" : "abort";
}

static void release_all(run *u) {
    for (int i = 0; i < u->n_sub; i++)
        if (u->sub_live[i]) {
            xllm_engine_release(u->m->engine, u->id[i]);
            u->sub_live[i] = 0;
            atomic_fetch_sub(&u->m->inflight, 1);
            u->counted--;
        }
}

void run_free(run *u) {
    if (!u) return;
    release_all(u);
    if (u->counted > 0) atomic_fetch_sub(&u->m->inflight, u->counted);
    for (int i = 0; i < u->n_choices; i++) {
        choice *c = &u->ch[i];
        sb_free(&c->text);
        sb_free(&c->lp_content);
        sb_free(&c->lp_tokens);
        sb_free(&c->lp_vals);
        sb_free(&c->lp_tops);
        sb_free(&c->lp_offs);
        if (c->ps) pii_stream_free(c->ps);
        chat_out_free(c->co);
        sb_free(&c->reasoning);
    }
    free(u->ch);
    waiter_put(u->w);
    free(u);
}

int run_start(srv_state *s, srv_req *r, int fd, run **out, http_error *e) {
    *out = NULL;
    srv_model *m = r->m;
    run *u = calloc(1, sizeof *u);
    if (!u) return http_err(e, 500, "server_error", NULL, NULL, "out of memory");
    u->s = s;
    u->r = r;
    u->m = m;
    u->fd = fd;
    u->n_choices = r->n_prompts * r->n;
    u->ch = calloc((size_t)u->n_choices, sizeof *u->ch);
    u->w = waiter_get();
    if (!u->ch || !u->w) { run_free(u); return http_err(e, 500, "server_error", NULL, NULL, "out of memory"); }
    make_id(u->rid, sizeof u->rid, r->chat ? "chatcmpl-" : "cmpl-");
    u->created = (long)time(NULL);
    u->t0 = u->t_last = srv_now();
    u->deadline = s->opt.request_timeout_s > 0 ? u->t0 + s->opt.request_timeout_s : INFINITY;
    if (m->pii && (pii_policy_restores(m->pii) || pii_policy_masks_output(m->pii)))
        for (int i = 0; i < u->n_choices; i++) {
            u->ch[i].ps = pii_stream_create(m->pii, r->pii[i / r->n]);
            if (!u->ch[i].ps) { run_free(u); return http_err(e, 500, "server_error", NULL, NULL, "out of memory"); }
        }
    for (int i = 0; r->chat && i < u->n_choices; i++) u->ch[i].co = chat_out_new(r);
    for (int i = 0; i < u->n_choices; i++) {
        const srv_req *q = r;
        size_t n = q->n_ids[i / q->n];
        u->ch[i].last_id = n ? q->ids[i / q->n][n - 1] : -1;
    }
    int limit = m->max_batch + s->opt.max_queue;
    if (r->n_prompts > limit) {
        /* it could never fit: a 429 would never clear */
        run_free(u);
        return http_err(e, 400, "invalid_request_error", "prompt", NULL,
                        "this request has %d prompts; model '%s' takes at most %d at once (%d batch slots + --max-queue %d)",
                        r->n_prompts, m->name, limit, m->max_batch, s->opt.max_queue);
    }
    for (int i = 0; i < r->n_prompts; i++) {
        if (atomic_fetch_add(&m->inflight, 1) >= limit) {
            atomic_fetch_sub(&m->inflight, 1);
            run_free(u);
            return http_err(e, 429, "rate_limit_error", NULL, "queue_full",
                            "The server's queue for model '%s' is full (%d requests); retry later", m->name, limit);
        }
        u->counted++;
        xllm_request q = {0};
        q.prompt_ids = r->ids[i];
        q.n_prompt_ids = r->n_ids[i];
        q.params = r->params;
        q.n = r->n;
        q.priority = r->priority;
        xllm_error xe;
        if (xllm_engine_submit(m->engine, &q, waiter_notify, u->w, &u->id[i], &xe)) {
            int status = xe.code == XLLM_ERR_CONTEXT_OVERFLOW || xe.code == XLLM_ERR_INVALID_ARGUMENT ? 400 : 500;
            http_err(e, status, status == 400 ? "invalid_request_error" : "server_error", NULL,
                     xe.code == XLLM_ERR_CONTEXT_OVERFLOW ? "context_length_exceeded" : NULL, "%s", xe.message);
            run_free(u);
            return status;
        }
        u->sub_live[i] = 1;
        u->n_sub = i + 1;
        u->prompt_tokens += r->n_ids[i];
    }
    atomic_fetch_add(&m->prompt_tokens, (long long)u->prompt_tokens);
    *out = u;
    return 0;
}

/* ------------------------------------------------------------ writing */

static void json_bytes(sbuf *b, const char *s, size_t n) {
    sb_puts(b, "[");
    for (size_t i = 0; i < n; i++) sb_printf(b, i ? ",%u" : "%u", (unsigned char)s[i]);
    sb_puts(b, "]");
}

/* A token's text where it stands: after `prev` (the token before it), so that
 * a SentencePiece word start keeps its space (" time", not "time"), as in the
 * completion text; alone when there is no previous token or the pair does
 * not decode to prev's text plus more. */
static char *token_text(srv_model *m, int32_t prev, int32_t id, size_t *len) {
    char *t = NULL, *p = NULL;
    size_t pl = 0;
    xllm_error xe;
    *len = 0;
    if (!m->tok) return NULL;
    int32_t two[2] = {prev, id};
    if (prev >= 0 && !xllm_detokenize(m->tok, &prev, 1, 0, &p, &pl, &xe) &&
        !xllm_detokenize(m->tok, two, 2, 0, &t, len, &xe) && *len >= pl && !memcmp(t, p, pl)) {
        memmove(t, t + pl, *len - pl + 1);
        *len -= pl;
        xllm_free(p);
        return t;
    }
    xllm_free(p);
    xllm_free(t);
    t = NULL;
    if (xllm_detokenize(m->tok, &id, 1, 0, &t, len, &xe)) {
        *len = 0;
        return NULL;
    }
    return t;
}

/* Log-probabilities of chunk tokens [0, n) into the given lists. */
static void add_logprobs(run *u, choice *c, const xllm_chunk *k, sbuf *content, sbuf *toks, sbuf *vals, sbuf *tops,
                         sbuf *offs) {
    uint32_t prev = 0;
    for (size_t t = 0; t < k->n_ids; t++) {
        const char *tx = k->text + prev;
        size_t tl = k->text_ends ? k->text_ends[t] - prev : 0;
        if (k->text_ends) prev = k->text_ends[t];
        double lp = k->logprobs ? k->logprobs[t] : NAN;
        if (u->r->chat) {
            if (content->len) sb_puts(content, ",");
            sb_puts(content, "{\"token\":");
            sb_json_str(content, tx, tl);
            sb_puts(content, ",\"logprob\":");
            sb_json_num(content, lp);
            sb_puts(content, ",\"bytes\":");
            json_bytes(content, tx, tl);
            sb_puts(content, ",\"top_logprobs\":[");
            for (int j = 0; k->top_ids && j < k->n_top; j++) {
                size_t al;
                char *alt = token_text(u->m, c->last_id, k->top_ids[t * (size_t)k->n_top + j], &al);
                sb_puts(content, j ? ",{\"token\":" : "{\"token\":");
                sb_json_str(content, alt ? alt : "", al);
                sb_puts(content, ",\"logprob\":");
                sb_json_num(content, k->top_logprobs[t * (size_t)k->n_top + j]);
                sb_puts(content, ",\"bytes\":");
                json_bytes(content, alt ? alt : "", al);
                sb_puts(content, "}");
                xllm_free(alt);
            }
            sb_puts(content, "]}");
        } else {
            if (toks->len) sb_puts(toks, ","), sb_puts(vals, ","), sb_puts(tops, ","), sb_puts(offs, ",");
            sb_json_str(toks, tx, tl);
            sb_json_num(vals, lp);
            sb_printf(offs, "%zu", c->offset);
            c->offset += tl;
            if (!k->top_ids || k->n_top == 0) {
                sb_puts(tops, "null");
            } else {
                sb_puts(tops, "{");
                int wrote = 0;
                for (int j = 0; j < k->n_top; j++) {
                    size_t al;
                    char *alt = token_text(u->m, c->last_id, k->top_ids[t * (size_t)k->n_top + j], &al);
                    /* a JSON object cannot hold one key twice: keep the first (most likely) */
                    int dup = 0;
                    for (int q = 0; q < j && !dup; q++) {
                        size_t bl;
                        char *b = token_text(u->m, c->last_id, k->top_ids[t * (size_t)k->n_top + q], &bl);
                        dup = b && alt && bl == al && !memcmp(b, alt, al);
                        xllm_free(b);
                    }
                    if (!dup) {
                        if (wrote++) sb_puts(tops, ",");
                        sb_json_str(tops, alt ? alt : "", al);
                        sb_puts(tops, ":");
                        sb_json_num(tops, k->top_logprobs[t * (size_t)k->n_top + j]);
                    }
                    xllm_free(alt);
                }
                sb_puts(tops, "}");
            }
        }
        c->last_id = k->ids[t];
    }
}

static void chunk_head(run *u, sbuf *b) {
    sb_printf(b, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%ld,\"model\":", u->rid,
              u->r->chat ? "chat.completion.chunk" : "text_completion", u->created);
    sb_json_str(b, u->r->model_name, strlen(u->r->model_name));
    if (u->r->chat) sb_puts(b, ",\"system_fingerprint\":null");
    sb_puts(b, ",\"choices\":[");
}

static void chunk_tail(run *u, sbuf *b) {
    sb_puts(b, "]");
    if (u->r->include_usage) sb_puts(b, ",\"usage\":null");
    sb_puts(b, "}\n\n");
}

/* One SSE event for choice idx: text (may be empty), logprobs (NULL = none), finish (NULL = not yet). */
static void sse_choice(run *u, int idx, const char *text, size_t len, int with_text, sbuf *lp, const char *finish,
                       int role) {
    sbuf *b = u->sse;
    chunk_head(u, b);
    sb_printf(b, "{\"index\":%d,", idx);
    if (u->r->chat) {
        sb_puts(b, "\"delta\":{");
        if (role) sb_puts(b, "\"role\":\"assistant\",\"content\":\"\"");
        else if (with_text) sb_puts(b, "\"content\":"), sb_json_str(b, text, len);
        sb_puts(b, "},\"logprobs\":");
        if (lp) sb_puts(b, "{\"content\":["), sb_put(b, lp->p, lp->len), sb_puts(b, "]}");
        else sb_puts(b, "null");
    } else {
        sb_puts(b, "\"text\":");
        sb_json_str(b, text ? text : "", text ? len : 0);
        sb_puts(b, ",\"logprobs\":");
        if (lp) sb_put(b, lp->p, lp->len);
        else sb_puts(b, "null");
    }
    sb_puts(b, ",\"finish_reason\":");
    if (finish) sb_printf(b, "\"%s\"", finish);
    else sb_puts(b, "null");
    sb_puts(b, "}");
    chunk_tail(u, b);
}

/* One chat SSE event whose delta holds the given members (e.g. "reasoning_content":"..."). */
static void sse_delta(run *u, int idx, const char *members, size_t n, const char *finish) {
    sbuf *b = u->sse;
    chunk_head(u, b);
    sb_printf(b, "{\"index\":%d,\"delta\":{", idx);
    sb_put(b, members, n);
    sb_puts(b, "},\"logprobs\":null,\"finish_reason\":");
    if (finish) sb_printf(b, "\"%s\"", finish);
    else sb_puts(b, "null");
    sb_puts(b, "}");
    chunk_tail(u, b);
}

/* With calls: "tool_calls", unless max_tokens cut the output ("length", as OpenAI says of a cut call). */
static const char *finish_str(const choice *c, xllm_finish_reason r) {
    return chat_out_n_calls(c->co) && r == XLLM_FINISH_STOP ? "tool_calls" : reason_str(r);
}

/* Streamed: a choice's reasoning delta, and its tool-call deltas (as they come). */
static void sse_chat_extra(run *u, int idx, const sbuf *reasoning, int calls) {
    choice *c = &u->ch[idx];
    if (reasoning->len) {
        sbuf d = {0};
        sb_puts(&d, "\"reasoning_content\":");
        sb_json_str(&d, reasoning->p, reasoning->len);
        sse_delta(u, idx, d.p, d.len, NULL);
        sb_free(&d);
    }
    while (calls) {
        sbuf d = {0};
        int more = chat_out_next_delta(c->co, &d);
        if (more) sse_delta(u, idx, d.p, d.len, NULL);
        sb_free(&d);
        if (!more) break;
    }
}

/* A choice that ends without a final chunk (cancelled): flush its split. */
static void co_flush(run *u, int idx) {
    choice *c = &u->ch[idx];
    if (!c->co) return;
    sbuf ct = {0}, rs = {0};
    chat_out_push(c->co, "", 0, 1, &ct, &rs);
    if (u->r->stream) {
        sse_chat_extra(u, idx, &rs, 1);
        if (ct.len) sse_choice(u, idx, ct.p, ct.len, 1, NULL, NULL, 0);
    } else {
        sb_put(&c->reasoning, rs.p, rs.len);
        sb_put(&c->text, ct.p, ct.len);
    }
    sb_free(&ct);
    sb_free(&rs);
}

static void on_chunk(run *u, int prompt, const xllm_chunk *k) {
    srv_req *r = u->r;
    int idx = prompt * r->n + k->sample;
    if (idx < 0 || idx >= u->n_choices) return;
    choice *c = &u->ch[idx];
    double now = srv_now();
    if (k->n_ids) {
        if (!u->got_first) {
            u->got_first = 1;
            metrics_ttft(now - u->t0);
        } else {
            double per = (now - u->t_last) / (double)k->n_ids;
            for (size_t t = 0; t < k->n_ids; t++) metrics_token_latency(per);
        }
        u->t_last = now;
        c->n_tokens += (int)k->n_ids;
        u->completion_tokens += k->n_ids;
        atomic_fetch_add(&u->m->generated_tokens, (long long)k->n_ids);
    }
    sbuf proc = {0};
    const char *text = k->text;
    size_t len = k->text_len;
    if (c->ps) {
        pii_stream_push(c->ps, k->text, k->text_len, k->finished, &proc);
        text = proc.p ? proc.p : "";
        len = proc.len;
    }
    if (k->finished) {
        c->finished = 1;
        c->reason = k->finish_reason;
    }
    sbuf co_c = {0}, co_r = {0};
    if (c->co) {
        chat_out_push(c->co, text, len, k->finished, &co_c, &co_r);
        text = co_c.p ? co_c.p : "";
        len = co_c.len;
    }
    if (r->stream) {
        if (c->co) sse_chat_extra(u, idx, &co_r, !k->finished); /* at the end: the content first */
        sbuf lp = {0}, toks = {0}, vals = {0}, tops = {0}, offs = {0};
        int has_lp = r->logprobs && k->n_ids;
        if (has_lp) {
            add_logprobs(u, c, k, &lp, &toks, &vals, &tops, &offs);
            if (!r->chat) {
                sb_puts(&lp, "{\"tokens\":[");
                sb_put(&lp, toks.p, toks.len);
                sb_puts(&lp, "],\"token_logprobs\":[");
                sb_put(&lp, vals.p, vals.len);
                sb_puts(&lp, "],\"top_logprobs\":[");
                sb_put(&lp, tops.p, tops.len);
                sb_puts(&lp, "],\"text_offset\":[");
                sb_put(&lp, offs.p, offs.len);
                sb_puts(&lp, "]}");
            }
        }
        if (len || has_lp) sse_choice(u, idx, text, len, 1, has_lp ? &lp : NULL, NULL, 0);
        if (k->finished && c->co) sse_chat_extra(u, idx, &(sbuf){0}, 1);
        if (k->finished) sse_choice(u, idx, "", 0, 0, NULL, finish_str(c, k->finish_reason), 0);
        sb_free(&lp), sb_free(&toks), sb_free(&vals), sb_free(&tops), sb_free(&offs);
    } else {
        sb_put(&c->text, text, len);
        sb_put(&c->reasoning, co_r.p, co_r.len);
        if (r->logprobs && k->n_ids) add_logprobs(u, c, k, &c->lp_content, &c->lp_tokens, &c->lp_vals, &c->lp_tops, &c->lp_offs);
    }
    sb_free(&proc);
    sb_free(&co_c);
    sb_free(&co_r);
}

/* Drain what is ready; wait up to ms when nothing was. Returns 1 when every
 * engine request is done. */
static int pump(run *u, int ms) {
    unsigned long seen = waiter_seq(u->w);
    int got = 0, live = 0;
    for (int i = 0; i < u->n_sub; i++) {
        if (!u->sub_live[i]) continue;
        for (;;) {
            xllm_chunk k;
            xllm_error xe;
            xllm_poll_result pr = xllm_engine_poll(u->m->engine, u->id[i], &k, 0, &xe);
            if (pr == XLLM_POLL_CHUNK) {
                on_chunk(u, i, &k);
                got = 1;
                continue;
            }
            if (pr == XLLM_POLL_DONE || pr == XLLM_POLL_ERROR) {
                if (pr == XLLM_POLL_ERROR && !u->failed) {
                    u->failed = 1;
                    http_err(&u->err, 500, "server_error", NULL, NULL, "generation failed: %s", xe.message);
                }
                xllm_engine_release(u->m->engine, u->id[i]);
                u->sub_live[i] = 0;
                atomic_fetch_sub(&u->m->inflight, 1);
                u->counted--;
                got = 1;
            } else {
                live = 1;
            }
            break;
        }
    }
    if (!live) return 1;
    if (!u->aborted && (srv_now() > u->deadline || atomic_load(&u->s->stopping))) {
        u->aborted = 1;
        for (int i = 0; i < u->n_sub; i++)
            if (u->sub_live[i]) xllm_engine_abort(u->m->engine, u->id[i]);
    }
    if (u->r->stream || u->r->no_probe ? client_gone(u->fd) : client_gone_probe(u->fd, &u->probed)) {
        u->gone = 1;
        release_all(u);
        return 1;
    }
    if (!got) waiter_wait(u->w, seen, ms);
    return 0;
}

static void usage_json(run *u, sbuf *b) {
    sb_printf(b, "{\"prompt_tokens\":%zu,\"completion_tokens\":%zu,\"total_tokens\":%zu}", u->prompt_tokens,
              u->completion_tokens, u->prompt_tokens + u->completion_tokens);
}

int run_wait_json(run *u, sbuf *b, http_error *e) {
    while (!pump(u, 50)) {}
    if (u->gone) return -1;
    if (u->failed) { *e = u->err; return -1; }
    srv_req *r = u->r;
    sb_printf(b, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%ld,\"model\":", u->rid,
              r->chat ? "chat.completion" : "text_completion", u->created);
    sb_json_str(b, r->model_name, strlen(r->model_name));
    if (r->chat) sb_puts(b, ",\"system_fingerprint\":null");
    sb_puts(b, ",\"choices\":[");
    for (int i = 0; i < u->n_choices; i++) {
        choice *c = &u->ch[i];
        if (c->ps) {
            sbuf rest = {0};
            pii_stream_push(c->ps, "", 0, 1, &rest);
            sb_put(&c->text, rest.p, rest.len);
            sb_free(&rest);
        }
        if (!c->finished) co_flush(u, i);
        int n_calls = chat_out_n_calls(c->co);
        sb_printf(b, "%s{\"index\":%d,", i ? "," : "", i);
        if (r->chat) {
            sb_puts(b, "\"message\":{\"role\":\"assistant\",\"content\":");
            if (n_calls && !c->text.len) sb_puts(b, "null");
            else sb_json_str(b, c->text.p ? c->text.p : "", c->text.len);
            if (r->think) {
                sb_puts(b, ",\"reasoning_content\":");
                if (c->reasoning.len) sb_json_str(b, c->reasoning.p, c->reasoning.len);
                else sb_puts(b, "null");
            }
            if (n_calls) sb_puts(b, ",\"tool_calls\":"), chat_out_calls_json(c->co, b);
            sb_puts(b, ",\"refusal\":null},\"logprobs\":");
            if (r->logprobs) sb_puts(b, "{\"content\":["), sb_put(b, c->lp_content.p, c->lp_content.len), sb_puts(b, "]}");
            else sb_puts(b, "null");
        } else {
            sb_puts(b, "\"text\":");
            sbuf t = {0};
            if (r->echo && r->echo_text[i / r->n]) sb_puts(&t, r->echo_text[i / r->n]);
            sb_put(&t, c->text.p, c->text.len);
            sb_json_str(b, t.p ? t.p : "", t.len);
            sb_free(&t);
            sb_puts(b, ",\"logprobs\":");
            if (r->logprobs) {
                sb_puts(b, "{\"tokens\":[");
                sb_put(b, c->lp_tokens.p, c->lp_tokens.len);
                sb_puts(b, "],\"token_logprobs\":[");
                sb_put(b, c->lp_vals.p, c->lp_vals.len);
                sb_puts(b, "],\"top_logprobs\":[");
                sb_put(b, c->lp_tops.p, c->lp_tops.len);
                sb_puts(b, "],\"text_offset\":[");
                sb_put(b, c->lp_offs.p, c->lp_offs.len);
                sb_puts(b, "]}");
            } else {
                sb_puts(b, "null");
            }
        }
        sb_printf(b, ",\"finish_reason\":\"%s\"}", finish_str(c, c->finished ? c->reason : XLLM_FINISH_CANCELLED));
    }
    sb_puts(b, "],\"usage\":");
    usage_json(u, b);
    sb_puts(b, "}");
    return 0;
}

int run_next_sse(run *u, sbuf *out) {
    srv_req *r = u->r;
    u->sse = out;
    if (u->ended) return 0;
    if (!u->started) {
        u->started = 1;
        u->t_sse = srv_now();
        for (int i = 0; i < u->n_choices; i++) {
            if (r->chat) sse_choice(u, i, "", 0, 0, NULL, NULL, 1);
            else if (r->echo && r->echo_text[i / r->n])
                sse_choice(u, i, r->echo_text[i / r->n], strlen(r->echo_text[i / r->n]), 1, NULL, NULL, 0);
        }
        if (out->len) return 1;
    }
    for (;;) {
        int done = pump(u, 50);
        if (u->gone) return -1;
        if (out->len && !done) {
            u->t_sse = srv_now();
            return 1;
        }
        int ka = u->s->opt.sse_keepalive_ms;
        if (!done && ka > 0 && (srv_now() - u->t_sse) * 1000 >= ka) {
            /* nothing for a while (queued, preempted): a comment line, which SSE
             * readers skip, keeps read timeouts on the way from ending the stream */
            sb_puts(out, ": keep-alive\n\n");
            u->t_sse = srv_now();
            return 1;
        }
        if (done) {
            for (int i = 0; i < u->n_choices; i++) {
                choice *c = &u->ch[i];
                if (c->ps) {
                    sbuf rest = {0};
                    pii_stream_push(c->ps, "", 0, 1, &rest);
                    if (rest.len) sse_choice(u, i, rest.p, rest.len, 1, NULL, NULL, 0);
                    sb_free(&rest);
                }
                if (!c->finished) co_flush(u, i);
                if (!c->finished) sse_choice(u, i, "", 0, 0, NULL, reason_str(XLLM_FINISH_CANCELLED), 0);
            }
            if (u->failed) {
                sb_puts(out, "data: {\"error\":{\"message\":");
                sb_json_str(out, u->err.message, strlen(u->err.message));
                sb_puts(out, ",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n");
            }
            if (r->include_usage) {
                sb_printf(out, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%ld,\"model\":", u->rid,
                          r->chat ? "chat.completion.chunk" : "text_completion", u->created);
                sb_json_str(out, r->model_name, strlen(r->model_name));
                sb_puts(out, ",\"choices\":[],\"usage\":");
                usage_json(u, out);
                sb_puts(out, "}\n\n");
            }
            sb_puts(out, "data: [DONE]\n\n");
            u->ended = 1;
            return 1;
        }
    }
}


size_t run_completion_tokens(const run *u) { return u->completion_tokens; }
