/*
 * pipeline_mpi.c - pipeline parallelism over MPI point-to-point messages
 * (the design is in pipeline.h).
 *
 * Messages, on a duplicate of MPI_COMM_WORLD:
 *   TAG_CTRL   rank 0 -> each worker, int32: OPEN (an engine's pool sizes),
 *              CLOSE, STEP (KV operations, then micro-batches), HEARTBEAT, END;
 *   TAG_READY  worker -> rank 0, int64: its layer range, shape, bound bytes;
 *   TAG_HIDDEN + k   rank r -> r + 1: micro-batch k's hidden states (f32);
 *   TAG_LOGITS + k   last rank -> 0: micro-batch k's logits rows (f32).
 * Messages between two ranks with one tag never overtake each other, so
 * consecutive steps need no step number in the tag.
 *
 * Every wait polls MPI_Test against a deadline; between layers each stage
 * polls its pending sends, so a rendezvous transfer progresses while the
 * stage computes (Open MPI has no progress thread by default).
 */
#include "pipeline/pipeline.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { TAG_CTRL = 1, TAG_READY = 2, TAG_HIDDEN = 100, TAG_LOGITS = 300 };
enum { MSG_OPEN = 1, MSG_CLOSE = 2, MSG_STEP = 3, MSG_HEARTBEAT = 4, MSG_END = 5 };
#define MAX_MICROBATCHES 64
#define HEARTBEAT_S 1.0

typedef struct worker_pool {
    int id;
    kv_cache kv;
    unsigned char *swap;
    int32_t swap_blocks;
    size_t swap_block_bytes;
    int swap_pinned; /* swap came from the backend's host_alloc (pinned), else mem_malloc_aligned */
} worker_pool;

struct pipeline {
    int rank, size, M, timeout_ms, stats, fail_after, fail_hang;
    MPI_Comm comm;
    pthread_mutex_t mu;           /* rank 0: one MPI user at a time */
    pthread_t hb;
    int hb_started;
    atomic_int hb_stop;
    double last_send;
    int next_id;
    int l0, l1, n_layers;
    size_t bound_bytes;
    /* buffers, grown as needed */
    int32_t *msg;
    size_t msg_cap, msg_len;
    float *hid_send, *hid_recv, *logits;
    size_t logits_cap;
    size_t hid_send_cap, hid_recv_cap;
    int32_t *seq_local, *out_local, *need;  /* rank 0: per token / output row / sequence of a step */
    size_t idx_cap;
    const int32_t **tables;                 /* workers: the step's block tables */
    size_t tables_cap;
    MPI_Request *pending;
    int n_pending, cap_pending;
    /* stats */
    uint64_t steps;
    double t_compute, t_wait, t_idle;
    /* workers */
    worker_pool *pools;
    int n_pools;
};

struct pipeline_link {
    pipeline *p;
    int id;
    int32_t *ops;
    size_t n_ops, cap_ops;        /* in quads: op, a, b, n */
};

static int g_mpi_users;           /* pipelines alive in this process */
static int g_we_initialized;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The job cannot go on: say why and end every rank. */
static void fatal(const pipeline *p, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "xllm: error: pipeline rank %d of %d: %s; stopping every rank\n", p->rank, p->size, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

void pipeline_abort(pipeline *p, const char *msg) { fatal(p, "%s", msg); }

static void check_mpi(const pipeline *p, int rc, const char *what, int peer) {
    if (rc == MPI_SUCCESS) return;
    char es[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, es, &len);
    fatal(p, "MPI error %s rank %d: %s", what, peer, es);
}

/* Short waits spin (yielding), longer ones sleep 50 us at a time. */
static void backoff(int *spins) {
    if (++*spins < 200) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}

/* Sends in flight: tested between layers (progress), waited at step end. */
static void progress(pipeline *p) {
    int live = 0;
    for (int i = 0; i < p->n_pending; i++) {
        if (p->pending[i] == MPI_REQUEST_NULL) continue;
        int done = 0;
        check_mpi(p, MPI_Test(&p->pending[i], &done, MPI_STATUS_IGNORE), "sending to", -1);
        live += !done;
    }
    if (!live) p->n_pending = 0;
}

static void wait_req(pipeline *p, MPI_Request *r, const char *what, int peer, double *acc) {
    double t0 = now_s(), deadline = t0 + p->timeout_ms / 1000.0;
    int spins = 0;
    for (;;) {
        int done = 0;
        check_mpi(p, MPI_Test(r, &done, MPI_STATUS_IGNORE), what, peer);
        if (done) break;
        if (now_s() > deadline)
            fatal(p, "rank %d did not answer within %d ms (%s)", peer, p->timeout_ms, what);
        progress(p);
        backoff(&spins);
    }
    if (acc) *acc += now_s() - t0;
}

static void wait_pending(pipeline *p, double *acc) {
    for (int i = 0; i < p->n_pending; i++)
        if (p->pending[i] != MPI_REQUEST_NULL) wait_req(p, &p->pending[i], "a send was not received", -1, acc);
    p->n_pending = 0;
}

static void isend(pipeline *p, const void *buf, int count, MPI_Datatype type, int dest, int tag) {
    if (p->n_pending == p->cap_pending) {
        size_t cap = (size_t)p->cap_pending;
        if (p->n_pending >= INT_MAX / 2 ||
            array_reserve(&p->pending, &cap, (size_t)p->n_pending + 1, sizeof *p->pending, 32))
            fatal(p, "out of memory");
        p->cap_pending = (int)cap;
    }
    MPI_Request *r = &p->pending[p->n_pending++];
    check_mpi(p, MPI_Isend(buf, count, type, dest, tag, p->comm, r), "sending to", dest);
}

/* A small control message to every worker, waited for. */
static void ctrl_all(pipeline *p, const int32_t *m, int n) {
    for (int r = 1; r < p->size; r++) isend(p, m, n, MPI_INT32_T, r, TAG_CTRL);
    wait_pending(p, NULL);
    p->last_send = now_s();
}

/* rank 0's per-step index arrays, all of n entries */
static int grow_idx(pipeline *p, size_t n) {
    if (n <= p->idx_cap) return 0;
    size_t c = p->idx_cap; /* seq_local sets the capacity; the other two follow it */
    if (array_reserve(&p->seq_local, &c, n, sizeof(int32_t), 256)) return -1;
    int32_t *a;
    if (!(a = mem_realloc(p->out_local, c * sizeof(int32_t)))) return -1;
    p->out_local = a;
    if (!(a = mem_realloc(p->need, c * sizeof(int32_t)))) return -1;
    p->need = a;
    p->idx_cap = c;
    return 0;
}

static void msg_put(pipeline *p, int32_t v) {
    if (array_reserve(&p->msg, &p->msg_cap, p->msg_len + 1, sizeof(int32_t), 256)) fatal(p, "out of memory");
    p->msg[p->msg_len++] = v;
}

/* ------------------------------------------------------------------ start */

xllm_status pipeline_start(const pipeline_options *o, pipeline **out, int *rank, xllm_error *err) {
    *out = NULL;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited && !getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMIX_RANK") && !getenv("PMI_SIZE"))
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                           "--pp %d: not started by an MPI launcher (run it as: mpirun -np %d xllm ...)", o->size,
                           o->size);
    if (!inited) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (fin)
            return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                               "pipeline: MPI was already finalized in this process (one pipeline-parallel model "
                               "after another is not possible)");
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            return err_setf(err, XLLM_ERR_INTERNAL, "pipeline: MPI_Init_thread failed");
        g_we_initialized = 1;
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED)
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "pipeline: this MPI gives no MPI_THREAD_SERIALIZED");
    int size = 0, r = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    if (size != o->size)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                           "--pp %d but the MPI job has %d process%s (run it as: mpirun -np %d xllm ...)", o->size,
                           size, size == 1 ? "" : "es", o->size);
    pipeline *p = mem_calloc(1, sizeof *p);
    if (!p) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    p->rank = r;
    p->size = size;
    p->M = o->microbatches > 0 ? o->microbatches : PIPELINE_DEFAULT_MICROBATCHES;
    if (p->M > MAX_MICROBATCHES) p->M = MAX_MICROBATCHES;
    p->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : PIPELINE_DEFAULT_TIMEOUT_MS;
    p->stats = o->stats;
    p->fail_after = o->test_fail_after;
    p->fail_hang = o->test_fail_hang;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &p->comm) != MPI_SUCCESS) {
        xllm_free(p);
        return err_setf(err, XLLM_ERR_INTERNAL, "pipeline: MPI_Comm_dup failed");
    }
    MPI_Comm_set_errhandler(p->comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    pthread_mutex_init(&p->mu, NULL);
    atomic_init(&p->hb_stop, 0);
    g_mpi_users++;
    *out = p;
    *rank = r;
    return XLLM_OK;
}

/* Rank 0, idle: a heartbeat to every worker each second. */
static void *heartbeat_thread(void *arg) {
    pipeline *p = arg;
    static const int32_t hb[1] = {MSG_HEARTBEAT};
    while (!atomic_load(&p->hb_stop)) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&p->mu);
        if (!atomic_load(&p->hb_stop) && now_s() - p->last_send > HEARTBEAT_S) ctrl_all(p, hb, 1);
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

xllm_status pipeline_ready(pipeline *p, const model *m, xllm_error *err) {
    p->l0 = m->layer_begin;
    p->l1 = m->layer_end;
    p->n_layers = m->cfg.n_layers;
    p->bound_bytes = m->bound_bytes;
    int64_t mine[6] = {m->layer_begin, m->layer_end, m->cfg.n_layers, m->cfg.hidden, m->cfg.vocab,
                       (int64_t)m->bound_bytes};
    if (p->rank > 0) {
        MPI_Request r;
        check_mpi(p, MPI_Isend(mine, 6, MPI_INT64_T, 0, TAG_READY, p->comm, &r), "sending to", 0);
        wait_req(p, &r, "rank 0 did not take this rank's ready message", 0, NULL);
        return XLLM_OK;
    }
    int64_t prev_end = m->layer_end;
    for (int r = 1; r < p->size; r++) {
        int64_t w[6];
        MPI_Request q;
        check_mpi(p, MPI_Irecv(w, 6, MPI_INT64_T, r, TAG_READY, p->comm, &q), "receiving from", r);
        wait_req(p, &q, "loading its part of the model", r, NULL);
        if (w[2] != m->cfg.n_layers || w[3] != m->cfg.hidden || w[4] != m->cfg.vocab || w[0] != prev_end ||
            (r == p->size - 1 && w[1] != m->cfg.n_layers))
            return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                               "pipeline: rank %d loaded layers [%lld, %lld) of a model with %lld layers, hidden "
                               "%lld, vocab %lld; rank 0 expected layers from %lld of %d layers, hidden %d, vocab "
                               "%d (every rank must load the same model with the same --pp-layers)",
                               r, (long long)w[0], (long long)w[1], (long long)w[2], (long long)w[3],
                               (long long)w[4], (long long)prev_end, m->cfg.n_layers, m->cfg.hidden, m->cfg.vocab);
        prev_end = w[1];
    }
    p->last_send = now_s();
    if (pthread_create(&p->hb, NULL, heartbeat_thread, p) == 0) p->hb_started = 1;
    return XLLM_OK;
}

static size_t rss_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t v = 0, kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl)) v = (size_t)strtoull(line + kl, NULL, 10);
    fclose(f);
    return v;
}

static void print_stats(const pipeline *p) {
    double busy = p->t_compute + p->t_wait;
    fprintf(stderr,
            "xllm: pp rank %d/%d: layers [%d, %d) of %d | weights bound %zu bytes (%.1f MiB) | resident %.1f MiB (peak %.1f "
            "MiB) | steps %llu | compute %.3f s | wait in steps %.3f s | idle between steps %.3f s | bubble %.1f%%\n",
            p->rank, p->size, p->l0, p->l1, p->n_layers, p->bound_bytes, (double)p->bound_bytes / 1048576.0,
            (double)rss_kib("VmRSS:") / 1024.0, (double)rss_kib("VmHWM:") / 1024.0, (unsigned long long)p->steps,
            p->t_compute, p->t_wait, p->t_idle, busy > 0 ? 100.0 * p->t_wait / busy : 0.0);
    fflush(stderr);
}

static void pool_free(worker_pool *w) {
    if (w->swap_pinned) w->kv.be->ops->host_free(w->kv.be->ctx, w->swap);
    else mem_free_aligned(w->swap);
    kv_cache_free(&w->kv);
    memset(w, 0, sizeof *w);
}

void pipeline_end(pipeline *p) {
    if (!p) return;
    if (p->rank == 0) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->hb_stop, 1);
        static const int32_t end[1] = {MSG_END};
        ctrl_all(p, end, 1);
        pthread_mutex_unlock(&p->mu);
        if (p->hb_started) pthread_join(p->hb, NULL);
    }
    if (p->stats) print_stats(p);
    for (int i = 0; i < p->n_pools; i++) pool_free(&p->pools[i]);
    xllm_free(p->pools);
    xllm_free(p->msg);
    xllm_free(p->hid_send);
    xllm_free(p->hid_recv);
    xllm_free(p->logits);
    xllm_free(p->seq_local);
    xllm_free(p->out_local);
    xllm_free(p->need);
    xllm_free((void *)p->tables);
    xllm_free(p->pending);
    MPI_Comm_free(&p->comm);
    pthread_mutex_destroy(&p->mu);
    xllm_free(p);
    if (--g_mpi_users == 0 && g_we_initialized) MPI_Finalize();
}

/* ------------------------------------------------------------ rank 0 side */

xllm_status pipeline_open(pipeline *p, const kv_cache *kv, int32_t swap_blocks, pipeline_link **out, xllm_error *err) {
    pipeline_link *l = mem_calloc(1, sizeof *l);
    if (!l) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    pthread_mutex_lock(&p->mu);
    l->p = p;
    l->id = ++p->next_id;
    int32_t m[6] = {MSG_OPEN, l->id, kv->n_blocks, kv->block_size, swap_blocks, (int32_t)kv->dtype};
    ctrl_all(p, m, 6);
    pthread_mutex_unlock(&p->mu);
    *out = l;
    return XLLM_OK;
}

void pipeline_close(pipeline_link *l) {
    if (!l) return;
    pipeline *p = l->p;
    pthread_mutex_lock(&p->mu);
    int32_t m[2] = {MSG_CLOSE, l->id};
    ctrl_all(p, m, 2);
    pthread_mutex_unlock(&p->mu);
    xllm_free(l->ops);
    xllm_free(l);
}

/* Called by the engine's block manager (its scheduler thread, before the
 * step's forward pass): the operation goes out with the next step. */
void pipeline_mirror(void *link, kv_op op, int32_t a, int32_t b, int32_t n) {
    pipeline_link *l = link;
    if (array_reserve(&l->ops, &l->cap_ops, (l->n_ops + 1) * 4, sizeof(int32_t), 256)) fatal(l->p, "out of memory");
    int32_t *q = l->ops + l->n_ops * 4;
    q[0] = (int32_t)op, q[1] = a, q[2] = b, q[3] = n;
    l->n_ops++;
}

typedef struct mb_range {
    int t0, t1, s0, s1, o0, o1;
} mb_range;

/* Cut the step into micro-batches of whole sequences with about T / M
 * tokens each. The engine lays the batch out sequence after sequence (seq
 * indices 0, 1, ... in token order, output rows in token order); any other
 * layout goes as one micro-batch. */
static int cut(const fwd_batch *b, int M, mb_range *mb) {
    int T = b->n_tokens, ordered = b->seq[0] == 0;
    for (int t = 1; t < T && ordered; t++) ordered = b->seq[t] == b->seq[t - 1] || b->seq[t] == b->seq[t - 1] + 1;
    for (int i = 1; i < b->n_out && ordered; i++) ordered = b->out_idx[i] > b->out_idx[i - 1];
    int n = 0;
    if (!ordered) {
        int smax = 0;
        for (int t = 0; t < T; t++) smax = b->seq[t] > smax ? b->seq[t] : smax;
        mb[0] = (mb_range){0, T, 0, smax + 1, 0, b->n_out};
        return 1;
    }
    int t0 = 0;
    for (int t = 1; t <= T; t++) {
        if (t < T && b->seq[t] == b->seq[t - 1]) continue;
        if (t == T || (n < M - 1 && (long)t * M >= (long)(n + 1) * T)) {
            mb[n].t0 = t0, mb[n].t1 = t;
            mb[n].s0 = b->seq[t0], mb[n].s1 = b->seq[t - 1] + 1;
            n++;
            t0 = t;
        }
    }
    int o = 0;
    for (int k = 0; k < n; k++) {
        mb[k].o0 = o;
        while (o < b->n_out && b->out_idx[o] < mb[k].t1) o++;
        mb[k].o1 = o;
    }
    return n;
}

xllm_status pipeline_forward(pipeline_link *l, model *m, kv_cache *kv, const fwd_batch *b, float *logits,
                             xllm_error *err) {
    pipeline *p = l->p;
    const model_config *c = &m->cfg;
    int T = b->n_tokens, H = c->hidden, B = kv->block_size;
    size_t V = (size_t)c->vocab;
    if (T <= 0 || T > m->s.max_tokens)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "forward batch of %d tokens (allowed 1..%d)", T,
                           m->s.max_tokens);
    for (int t = 0; t < T; t++)
        if (b->tokens[t] < 0 || b->tokens[t] >= c->vocab)
            return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "token id %d is outside the vocabulary (0..%d)",
                               b->tokens[t], c->vocab - 1);
    pthread_mutex_lock(&p->mu);
    double t_start = now_s();
    if (grow_idx(p, (size_t)T) || array_reserve(&p->hid_send, &p->hid_send_cap, (size_t)T * (size_t)H, sizeof(float), 256))
        fatal(p, "out of memory");

    mb_range mb[MAX_MICROBATCHES];
    int n_mb = cut(b, p->M, mb);
    /* the step's description */
    p->msg_len = 0;
    msg_put(p, MSG_STEP);
    msg_put(p, l->id);
    msg_put(p, (int32_t)(p->steps & 0x7fffffff));
    msg_put(p, (int32_t)l->n_ops);
    for (size_t i = 0; i < l->n_ops * 4; i++) msg_put(p, l->ops[i]);
    l->n_ops = 0;
    msg_put(p, n_mb);
    for (int k = 0; k < n_mb; k++) {
        const mb_range *r = &mb[k];
        int Tk = r->t1 - r->t0, S = r->s1 - r->s0;
        msg_put(p, Tk);
        msg_put(p, S);
        msg_put(p, r->o1 - r->o0);
        for (int t = r->t0; t < r->t1; t++) msg_put(p, b->pos[t]);
        for (int s = 0; s < S; s++) p->need[s] = 0;
        for (int t = r->t0; t < r->t1; t++) {
            int s = b->seq[t] - r->s0;
            p->seq_local[t] = s;
            msg_put(p, s);
            if (b->pos[t] / B + 1 > p->need[s]) p->need[s] = b->pos[t] / B + 1;
        }
        for (int o = r->o0; o < r->o1; o++) {
            p->out_local[o] = b->out_idx[o] - r->t0;
            msg_put(p, p->out_local[o]);
        }
        for (int s = 0; s < S; s++) {
            msg_put(p, p->need[s]);
            for (int j = 0; j < p->need[s]; j++) msg_put(p, b->block_tables[r->s0 + s][j]);
        }
    }
    if (p->msg_len > (size_t)INT32_MAX) fatal(p, "a step description of %zu ints is too long", p->msg_len);
    for (int r = 1; r < p->size; r++) isend(p, p->msg, (int)p->msg_len, MPI_INT32_T, r, TAG_CTRL);
    p->last_send = now_s();
    /* the logits come back from the last rank, micro-batch by micro-batch */
    MPI_Request lr[MAX_MICROBATCHES];
    for (int k = 0; k < n_mb; k++) {
        lr[k] = MPI_REQUEST_NULL;
        int no = mb[k].o1 - mb[k].o0;
        if (no)
            check_mpi(p, MPI_Irecv(logits + (size_t)mb[k].o0 * V, (int)((size_t)no * V), MPI_FLOAT, p->size - 1,
                                   TAG_LOGITS + k, p->comm, &lr[k]),
                      "receiving from", p->size - 1);
    }
    double t_compute = 0;
    for (int k = 0; k < n_mb; k++) {
        const mb_range *r = &mb[k];
        double t0 = now_s();
        fwd_batch mbb = {r->t1 - r->t0, b->tokens + r->t0, b->pos + r->t0, p->seq_local + r->t0,
                         b->block_tables + r->s0, r->o1 - r->o0, p->out_local + r->o0};
        if (model_embed(m, &mbb, err)) fatal(p, "%s", err ? err->message : "embedding failed");
        for (int ly = m->layer_begin; ly < m->layer_end; ly++) {
            model_layers(m, kv, &mbb, ly, ly + 1);
            progress(p);
        }
        float *dst = p->hid_send + (size_t)r->t0 * (size_t)H;
        /* the hidden states are backend memory: read through its copy (backend.h) */
        m->be.ops->copy(m->be.ctx, dst, model_hidden(m), (size_t)mbb.n_tokens * (size_t)H * sizeof(float),
                        BE_DEVICE_TO_HOST);
        isend(p, dst, mbb.n_tokens * H, MPI_FLOAT, 1, TAG_HIDDEN + k);
        t_compute += now_s() - t0;
    }
    double t_wait = 0;
    for (int k = 0; k < n_mb; k++)
        if (lr[k] != MPI_REQUEST_NULL) wait_req(p, &lr[k], "the logits of a step", p->size - 1, &t_wait);
    wait_pending(p, &t_wait);
    p->steps++;
    p->t_compute += t_compute;
    p->t_wait += (now_s() - t_start) - t_compute;
    (void)t_wait;
    p->last_send = now_s();
    pthread_mutex_unlock(&p->mu);
    return XLLM_OK;
}

/* ------------------------------------------------------------ worker side */

static worker_pool *pool_find(pipeline *p, int id) {
    for (int i = 0; i < p->n_pools; i++)
        if (p->pools[i].id == id) return &p->pools[i];
    return NULL;
}

static void worker_open(pipeline *p, const model *m, const int32_t *q, int n) {
    if (n < 6 || q[2] <= 0 || q[3] <= 0 || q[4] < 0 || q[5] < 0 || q[5] >= KV_DTYPES || pool_find(p, q[1])) fatal(p, "malformed OPEN message");
    worker_pool *np = mem_realloc(p->pools, (size_t)(p->n_pools + 1) * sizeof *np);
    if (!np) fatal(p, "out of memory");
    p->pools = np;
    worker_pool *w = &p->pools[p->n_pools];
    memset(w, 0, sizeof *w);
    xllm_error e;
    if (kv_cache_init(&w->kv, &m->be, m->layer_end - m->layer_begin, m->cfg.n_kv_heads, m->cfg.head_dim, q[3], q[2],
                      (kv_dtype)q[5], &e))
        fatal(p, "%s", e.message);
    w->kv.layer0 = m->layer_begin;
    w->id = q[1];
    w->swap_blocks = q[4];
    w->swap_block_bytes = 2 * (size_t)w->kv.n_layers * kv_cache_block_bytes(&w->kv);
    if (w->swap_blocks) {
        /* the backend's pinned host memory where it has one (a GPU: a swap is
         * one direct device copy, as the engine's block manager does), else plain memory */
        size_t bytes = (size_t)w->swap_blocks * w->swap_block_bytes;
        const backend *be = w->kv.be;
        if (be->ops->host_alloc && (w->swap = be->ops->host_alloc(be->ctx, bytes))) w->swap_pinned = 1;
        else w->swap = mem_malloc_aligned(bytes);
        if (!w->swap) fatal(p, "cannot allocate the KV swap pool (%d blocks)", w->swap_blocks);
    }
    p->n_pools++;
}

static void worker_close(pipeline *p, const int32_t *q, int n) {
    worker_pool *w = n >= 2 ? pool_find(p, q[1]) : NULL;
    if (!w) fatal(p, "malformed CLOSE message");
    pool_free(w);
    *w = p->pools[--p->n_pools];
}

/* A bounds-checked reader over the step message. */
typedef struct reader {
    const pipeline *p;
    const int32_t *q;
    size_t n, i;
} reader;

static int32_t rd(reader *r, int32_t lo, int32_t hi) {
    if (r->i >= r->n || r->q[r->i] < lo || r->q[r->i] > hi) fatal(r->p, "malformed STEP message at %zu", r->i);
    return r->q[r->i++];
}

static void worker_step(pipeline *p, model *m, const int32_t *q, size_t n) {
    const model_config *c = &m->cfg;
    reader R = {p, q, n, 1};
    worker_pool *w = pool_find(p, rd(&R, 0, INT32_MAX));
    if (!w) fatal(p, "STEP for an engine this rank does not know");
    kv_cache *kv = &w->kv;
    rd(&R, 0, INT32_MAX); /* step number */
    int n_ops = rd(&R, 0, INT32_MAX);
    for (int i = 0; i < n_ops; i++) {
        int op = rd(&R, KV_OP_COPY, KV_OP_SWAP_IN);
        int32_t a = rd(&R, 0, kv->n_blocks - 1);
        if (op == KV_OP_COPY) {
            int32_t src = rd(&R, 0, kv->n_blocks - 1), slots = rd(&R, 0, kv->block_size);
            kv_cache_copy_block(kv, a, src, slots);
        } else {
            int32_t h = rd(&R, 0, w->swap_blocks - 1);
            rd(&R, 0, 0);
            unsigned char *host = w->swap + (size_t)h * w->swap_block_bytes;
            if (op == KV_OP_SWAP_OUT) kv_cache_block_to_host(kv, a, host);
            else kv_cache_block_from_host(kv, a, host);
        }
    }
    int n_mb = rd(&R, 1, MAX_MICROBATCHES);
    struct {
        fwd_batch b;
        int t0, o0;
    } mb[MAX_MICROBATCHES];
    int T = 0, O = 0, S_total = 0;
    size_t mark = R.i;
    /* first pass: sizes, so the table pointers have room */
    for (int k = 0; k < n_mb; k++) {
        int Tk = rd(&R, 1, m->s.max_tokens - T), S = rd(&R, 1, Tk), No = rd(&R, 0, Tk);
        R.i += (size_t)(2 * Tk + No);
        for (int s = 0; s < S; s++) R.i += (size_t)rd(&R, 0, INT32_MAX / 2);
        T += Tk, O += No, S_total += S;
    }
    if (array_reserve(&p->tables, &p->tables_cap, (size_t)S_total, sizeof(*p->tables), 256)) fatal(p, "out of memory");
    R.i = mark;
    T = 0, O = 0;
    int S0 = 0;
    for (int k = 0; k < n_mb; k++) {
        int Tk = rd(&R, 1, m->s.max_tokens), S = rd(&R, 1, Tk), No = rd(&R, 0, Tk);
        fwd_batch *b = &mb[k].b;
        b->n_tokens = Tk;
        b->tokens = NULL;
        b->pos = q + R.i;
        for (int t = 0; t < Tk; t++) rd(&R, 0, INT32_MAX - 1);
        b->seq = q + R.i;
        for (int t = 0; t < Tk; t++) rd(&R, 0, S - 1);
        b->out_idx = q + R.i;
        for (int o = 0; o < No; o++) rd(&R, 0, Tk - 1);
        b->n_out = No;
        for (int s = 0; s < S; s++) {
            int nb = rd(&R, 0, INT32_MAX / 2);
            p->tables[S0 + s] = q + R.i;
            for (int j = 0; j < nb; j++) rd(&R, 0, kv->n_blocks - 1);
        }
        /* each token's position must have its block */
        for (int t = 0; t < Tk; t++) {
            const int32_t *tb = p->tables[S0 + b->seq[t]];
            int32_t nb = tb[-1];
            if (b->pos[t] / kv->block_size >= nb) fatal(p, "malformed STEP message: a position without a block");
        }
        b->block_tables = p->tables + S0;
        mb[k].t0 = T;
        mb[k].o0 = O;
        T += Tk, O += No, S0 += S;
    }
    int H = c->hidden, last = p->rank == p->size - 1;
    size_t V = (size_t)c->vocab;
    if (array_reserve(&p->hid_recv, &p->hid_recv_cap, (size_t)T * (size_t)H, sizeof(float), 256) ||
        (!last && array_reserve(&p->hid_send, &p->hid_send_cap, (size_t)T * (size_t)H, sizeof(float), 256)))
        fatal(p, "out of memory");
    if (last && O > 0 && array_reserve(&p->logits, &p->logits_cap, (size_t)O * V, sizeof(float), 256))
        fatal(p, "out of memory");
    MPI_Request hr[MAX_MICROBATCHES];
    for (int k = 0; k < n_mb; k++)
        check_mpi(p, MPI_Irecv(p->hid_recv + (size_t)mb[k].t0 * H, mb[k].b.n_tokens * H, MPI_FLOAT, p->rank - 1,
                               TAG_HIDDEN + k, p->comm, &hr[k]),
                  "receiving from", p->rank - 1);
    double t_wait = 0, t_compute = 0;
    for (int k = 0; k < n_mb; k++) {
        fwd_batch *b = &mb[k].b;
        wait_req(p, &hr[k], "hidden states", p->rank - 1, &t_wait);
        double t0 = now_s();
        size_t nf = (size_t)b->n_tokens * (size_t)H;
        m->be.ops->copy(m->be.ctx, model_hidden(m), p->hid_recv + (size_t)mb[k].t0 * H, nf * sizeof(float),
                        BE_HOST_TO_DEVICE);
        for (int ly = m->layer_begin; ly < m->layer_end; ly++) {
            model_layers(m, kv, b, ly, ly + 1);
            progress(p);
        }
        if (last) {
            if (b->n_out) {
                float *dst = p->logits + (size_t)mb[k].o0 * V;
                model_head(m, b, dst);
                isend(p, dst, (int)((size_t)b->n_out * V), MPI_FLOAT, 0, TAG_LOGITS + k);
            }
        } else {
            float *dst = p->hid_send + (size_t)mb[k].t0 * H;
            m->be.ops->copy(m->be.ctx, dst, model_hidden(m), nf * sizeof(float), BE_DEVICE_TO_HOST);
            isend(p, dst, (int)nf, MPI_FLOAT, p->rank + 1, TAG_HIDDEN + k);
        }
        t_compute += now_s() - t0;
    }
    wait_pending(p, &t_wait);
    p->steps++;
    p->t_compute += t_compute;
    p->t_wait += t_wait;
}

xllm_status pipeline_worker(pipeline *p, model *m, xllm_error *err) {
    if (p->rank == 0) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "rank 0 runs the engine, not a worker loop");
    for (;;) {
        double t0 = now_s(), deadline = t0 + p->timeout_ms / 1000.0;
        int flag = 0, spins = 0;
        MPI_Status stt;
        for (;;) {
            check_mpi(p, MPI_Iprobe(0, TAG_CTRL, p->comm, &flag, &stt), "waiting for", 0);
            if (flag) break;
            if (now_s() > deadline)
                fatal(p, "rank 0 did not answer within %d ms (no step or heartbeat)", p->timeout_ms);
            backoff(&spins);
        }
        int count = 0;
        MPI_Get_count(&stt, MPI_INT32_T, &count);
        if (count < 1) fatal(p, "an empty control message");
        if (array_reserve(&p->msg, &p->msg_cap, (size_t)count, sizeof(int32_t), 256)) fatal(p, "out of memory");
        check_mpi(p, MPI_Recv(p->msg, count, MPI_INT32_T, 0, TAG_CTRL, p->comm, MPI_STATUS_IGNORE), "receiving from", 0);
        switch (p->msg[0]) {
        case MSG_HEARTBEAT: p->t_idle += now_s() - t0; break;
        case MSG_OPEN: worker_open(p, m, p->msg, count); break;
        case MSG_CLOSE: worker_close(p, p->msg, count); break;
        case MSG_END: return XLLM_OK;
        case MSG_STEP:
            if (p->steps) p->t_idle += now_s() - t0;
            worker_step(p, m, p->msg, (size_t)count);
            if (p->rank == 1 && p->fail_after > 0 && p->steps == (uint64_t)p->fail_after) {
                fprintf(stderr, "xllm: pp rank 1: test: %s after step %d\n", p->fail_hang ? "hanging" : "exiting",
                        p->fail_after);
                fflush(stderr);
                if (!p->fail_hang) _exit(3);
                for (;;) pause();
            }
            break;
        default: fatal(p, "unknown control message %d", p->msg[0]);
        }
    }
}
