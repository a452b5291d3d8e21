/*
 * embed_batch.c - concurrent /v1/embeddings requests share forward passes.
 *
 * The idea (group commit, as databases batch log writes): every request
 * queues its inputs; a request that finds no batch running becomes the
 * leader, takes every queued request for the same model, pooling and
 * normalization (up to EB_MAX_INPUTS inputs, the oldest first and always),
 * and embeds all their inputs in one xllm_model_embed call, which packs short
 * inputs into shared forward passes. The others wait; the requests that
 * arrive while a batch runs form the next batch. One request alone costs
 * what it did before (no timer, no waiting for company). An error in a
 * combined batch (one request's input the library refuses) is not charged to
 * the others: the leader then runs each request of the batch alone.
 *
 * Thread-safety: embed_batched may be called from any connection thread.
 */
#include "srv.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define EB_MAX_INPUTS 4096 /* inputs in one combined call (one request may have up to 2048) */

typedef struct eb_job {
    xllm_model *model;
    const int32_t *const *ids;
    const size_t *len;
    size_t n;
    xllm_pooling pool;
    int normalize;
    float *out;
    xllm_status st;
    xllm_error err;
    int done;
    struct eb_job *next;
} eb_job;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static eb_job *g_head;
static int g_busy;
static atomic_llong g_requests, g_calls;

void embed_batch_counts(long long *requests, long long *forward_calls) {
    *requests = atomic_load(&g_requests);
    *forward_calls = atomic_load(&g_calls);
}

static void run_alone(eb_job *j) {
    atomic_fetch_add(&g_calls, 1);
    j->st = xllm_model_embed(j->model, j->ids, j->len, j->n, j->pool, j->normalize, j->out, &j->err);
}

/* Embed the jobs of one batch (a list through next, all of one model/pool/normalize). */
static void run_batch(eb_job *b) {
    if (!b->next) {
        run_alone(b);
        return;
    }
    size_t total = 0;
    for (eb_job *j = b; j; j = j->next) total += j->n;
    size_t H = (size_t)xllm_model_hidden_size(b->model);
    const int32_t **ids = malloc(total * sizeof *ids);
    size_t *len = malloc(total * sizeof *len);
    float *out = malloc(total * H * sizeof *out);
    xllm_status st = XLLM_ERR_OUT_OF_MEMORY;
    xllm_error err;
    if (ids && len && out) {
        size_t k = 0;
        for (eb_job *j = b; j; j = j->next)
            for (size_t i = 0; i < j->n; i++, k++) ids[k] = j->ids[i], len[k] = j->len[i];
        atomic_fetch_add(&g_calls, 1);
        st = xllm_model_embed(b->model, (const int32_t *const *)ids, len, total, b->pool, b->normalize, out, &err);
    }
    size_t k = 0;
    for (eb_job *j = b; j; j = j->next) {
        if (st == XLLM_OK) {
            memcpy(j->out, out + k * H, j->n * H * sizeof *out);
            j->st = XLLM_OK;
        } else {
            run_alone(j); /* whose input it was: each request alone */
        }
        k += j->n;
    }
    free((void *)ids);
    free(len);
    free(out);
}

xllm_status embed_batched(xllm_model *model, const int32_t *const *ids, const size_t *len, size_t n, xllm_pooling pool,
                          int normalize, float *out, xllm_error *err) {
    eb_job me = {model, ids, len, n, pool, normalize, out, XLLM_OK, {0}, 0, NULL};
    atomic_fetch_add(&g_requests, 1);
    pthread_mutex_lock(&g_mu);
    eb_job **tail = &g_head;
    while (*tail) tail = &(*tail)->next;
    *tail = &me;
    while (!me.done) {
        if (g_busy) {
            pthread_cond_wait(&g_cv, &g_mu);
            continue;
        }
        /* lead: the oldest queued request and every other one that fits with it */
        g_busy = 1;
        eb_job *first = g_head, *batch = NULL, **bt = &batch;
        size_t inputs = 0;
        for (eb_job **p = &g_head; *p;) {
            eb_job *j = *p;
            if (j == first || (j->model == first->model && j->pool == first->pool && j->normalize == first->normalize &&
                               inputs + j->n <= EB_MAX_INPUTS)) {
                inputs += j->n;
                *p = j->next;
                j->next = NULL;
                *bt = j;
                bt = &j->next;
            } else {
                p = &j->next;
            }
        }
        pthread_mutex_unlock(&g_mu);
        run_batch(batch);
        pthread_mutex_lock(&g_mu);
        for (eb_job *j = batch, *nx; j; j = nx) nx = j->next, j->done = 1;
        g_busy = 0;
        pthread_cond_broadcast(&g_cv);
    }
    pthread_mutex_unlock(&g_mu);
    if (me.st && err) *err = me.err;
    return me.st;
}
