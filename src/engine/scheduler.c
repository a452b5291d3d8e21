/*
 * scheduler.c - what runs in each step: aborts, resumption, admission,
 * the flattened batch, preemption when the KV pool runs out, sampling.
 *
 * Every sequence has a scheduling key: (class, arrival, sample), where class
 * is the request's priority (online 0, offline 1) in elastic mode and 0
 * otherwise. Lower keys go first everywhere: the running set, the waiting
 * queue (a sequence preempted by recompute keeps its key, so it goes back
 * ahead of newer requests), the swapped list.
 *
 * One step:
 *  1. aborted requests' sequences end; their blocks return at once;
 *  2. swapped sequences come back (in key order) while blocks and batch slots
 *     allow;
 *  3. waiting sequences are admitted in key order while a batch slot is free
 *     and their prompt (after prefix-cache hits) fits the available blocks
 *     with one block per running sequence kept as headroom; the first that
 *     does not fit stops admission (no overtaking), except that in elastic
 *     mode an online request preempts running offline sequences to get in.
 *     After a preemption nothing is admitted or resumed until a sequence
 *     ends (else the victim would be re-admitted into the blocks it just
 *     gave up, and preempted again: thrashing);
 *  4. the batch: one decode token for every running sequence that has its
 *     prompt done, then prefill chunks (up to max_step_tokens in all). KV
 *     blocks are taken as positions are written (bm_prepare_write: a new
 *     block at a block boundary, a private copy of a shared partial block).
 *     When none is available the scheduler preempts the running sequence
 *     with the highest key not yet in this step - possibly the one asking,
 *     which then sits the step out;
 *  5. one forward pass; each sequence with an output samples its next token
 *     (sample 0 of an n-sample request forks samples 1..n-1 at its first
 *     token: they share its blocks and sample from the same logits with
 *     their own seeds); full blocks are registered in the prefix cache;
 *     finished sequences release their blocks.
 *
 * Preemption, by preempt_mode: recompute drops the victim's blocks (full ones
 * stay in the prefix cache, so a resumed victim often gets them back) and
 * re-queues it with prompt + generated ids; swap copies its blocks to the host
 * pool (falling back to recompute when the pool is full); elastic picks
 * offline victims before online ones (the key's class) and swaps while the
 * host pool has room, recomputing after. The victim's sampler and detokenizer
 * stay with it, so it resumes with exactly the tokens it would have produced.
 */
#include "engine/engine.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"
#include "base/profile.h"
#include "pipeline/pipeline.h"

#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- lists */

static int key_cmp(const engine *e, const sequence *a, const sequence *b) {
    if (e->o.preempt_mode == XLLM_PREEMPT_ELASTIC && a->req->priority != b->req->priority)
        return a->req->priority < b->req->priority ? -1 : 1;
    if (a->req->order != b->req->order) return a->req->order < b->req->order ? -1 : 1;
    return a->sample < b->sample ? -1 : a->sample > b->sample;
}

static int list_insert(const engine *e, sequence ***list, int *n, int *cap, sequence *s) {
    size_t nc = (size_t)*cap;
    if (*n >= INT_MAX / 2 || array_reserve(list, &nc, (size_t)*n + 1, sizeof **list, 16)) return -1;
    *cap = (int)nc;
    int i = *n;
    while (i > 0 && key_cmp(e, (*list)[i - 1], s) > 0) {
        (*list)[i] = (*list)[i - 1];
        i--;
    }
    (*list)[i] = s;
    (*n)++;
    return 0;
}

static void list_remove(sequence **list, int *n, const sequence *s) {
    for (int i = 0; i < *n; i++)
        if (list[i] == s) {
            memmove(&list[i], &list[i + 1], (size_t)(*n - i - 1) * sizeof *list);
            (*n)--;
            return;
        }
    assert(0 && "sequence not in list");
}

static void touch(engine *e, engine_request *r) {
    if (r->dirty) return;
    r->dirty = 1;
    r->next_touched = NULL;
    if (e->touched_tail) e->touched_tail->next_touched = r;
    else e->touched_head = r;
    e->touched_tail = r;
}

void sched_enqueue(engine *e, engine_request *r) {
    /* samples 1..n-1 wait for sample 0's prompt (they fork from it) */
    for (int j = 1; j < r->n; j++) r->seqs[j].state = SEQ_FORK_WAIT;
    sequence *s = &r->seqs[0];
    s->state = SEQ_WAITING;
    if (s->finished) { /* max_new_tokens 0: nothing to compute */
        for (int j = 0; j < r->n; j++) {
            r->seqs[j].state = SEQ_DONE;
            r->n_done++;
        }
        touch(e, r);
        return;
    }
    if (list_insert(e, &e->waiting, &e->n_waiting, &e->cap_waiting, s)) {
        /* out of memory queueing: end it as cancelled rather than lose it */
        for (int j = 0; j < r->n; j++) {
            seq_cancel(&r->seqs[j]);
            r->seqs[j].state = SEQ_DONE;
            r->n_done++;
        }
        touch(e, r);
    }
}

int sched_has_work(const engine *e) { return e->n_running + e->n_waiting + e->n_swapped > 0; }

/* ------------------------------------------------------------- endings */

static void seq_done(engine *e, sequence *s) {
    e->hold_admission = 0; /* blocks come back: admission may resume */
    bm_release_table(&e->bm, &s->table);
    if (s->n_host) bm_swap_discard(&e->bm, s->host, s->n_host);
    s->n_host = 0;
    s->state = SEQ_DONE;
    s->req->n_done++;
    touch(e, s->req);
}

/* End every sequence of an aborted request, wherever it is. */
static void abort_request(engine *e, engine_request *r) {
    for (int j = 0; j < r->n; j++) {
        sequence *s = &r->seqs[j];
        switch (s->state) {
        case SEQ_RUNNING: list_remove(e->running, &e->n_running, s); break;
        case SEQ_WAITING: list_remove(e->waiting, &e->n_waiting, s); break;
        case SEQ_SWAPPED: list_remove(e->swapped, &e->n_swapped, s); break;
        case SEQ_FORK_WAIT: break;
        case SEQ_DONE: continue;
        }
        seq_cancel(s);
        seq_done(e, s);
    }
    e->st.aborted++;
}

static void handle_aborts(engine *e) {
    sequence **lists[3] = {e->running, e->waiting, e->swapped};
    int *counts[3] = {&e->n_running, &e->n_waiting, &e->n_swapped};
    for (int l = 0; l < 3; l++)
        for (int i = 0; i < *counts[l];) {
            engine_request *r = lists[l][i]->req;
            if (atomic_load(&r->abort_req)) {
                abort_request(e, r); /* removes from the lists: look at index i again */
                lists[0] = e->running;
                lists[1] = e->waiting;
                lists[2] = e->swapped;
                continue;
            }
            i++;
        }
}

void sched_cancel_all(engine *e) {
    while (e->n_running) abort_request(e, e->running[0]->req);
    while (e->n_waiting) abort_request(e, e->waiting[0]->req);
    while (e->n_swapped) abort_request(e, e->swapped[0]->req);
}

/* ----------------------------------------------------------- preemption */

static void preempt_recompute(engine *e, sequence *s) {
    bm_release_table(&e->bm, &s->table);
    s->n_cached = 0;
    s->n_registered = 0;
    s->state = SEQ_WAITING;
    if (list_insert(e, &e->waiting, &e->n_waiting, &e->cap_waiting, s)) {
        seq_cancel(s);
        seq_done(e, s);
    }
    e->st.preempt_recompute++;
}

static void preempt(engine *e, sequence *s) {
    /* no admission or resumption until a sequence ends: re-admitting the
     * victim into the blocks it just gave up would preempt it again */
    e->hold_admission = 1;
    list_remove(e->running, &e->n_running, s);
    if (e->o.preempt_mode != XLLM_PREEMPT_RECOMPUTE && s->table.n_blocks <= e->bm.swap_n_free) {
        int n = s->table.n_blocks;
        if (bm_swap_out(&e->bm, &s->table, s->host, n)) {
            s->n_host = n;
            s->state = SEQ_SWAPPED;
            if (!list_insert(e, &e->swapped, &e->n_swapped, &e->cap_swapped, s)) {
                e->st.preempt_swap++;
                return;
            }
            /* no memory for the list entry: drop the copy and recompute */
            bm_swap_discard(&e->bm, s->host, n);
            s->n_host = 0;
        }
    }
    preempt_recompute(e, s);
}

/* The running sequence with the highest key that is not in this step. */
static sequence *pick_victim(engine *e) {
    for (int i = e->n_running - 1; i >= 0; i--)
        if (!e->running[i]->in_step) return e->running[i];
    return NULL;
}

/* --------------------------------------------------------- prefix cache */

/* Chain hashes of the sequence's full blocks up to n_cached go to the cache. */
static void register_blocks(engine *e, sequence *s) {
    int B = e->block_size;
    while ((s->n_registered + 1) * B <= s->n_cached && s->n_registered < s->table.n_blocks) {
        int k = s->n_registered;
        uint64_t parent = k ? s->hashes[k - 1] : BM_ROOT_HASH;
        const int32_t *ids = s->ids + (size_t)k * (size_t)B;
        s->hashes[k] = bm_block_hash(&e->bm, parent, ids);
        bm_register(&e->bm, s->table.blocks[k], s->hashes[k], ids);
        s->n_registered++;
    }
}

/* Attach cached blocks for the sequence's leading full blocks (never all of
 * its ids: the last one is computed, for its logits). */
static void prefix_lookup(engine *e, sequence *s) {
    if (s->table.n_blocks || !e->bm.caching) return;
    int max_blocks = (s->n_ids - 1) / e->block_size;
    if (max_blocks <= 0) {
        e->bm.lookups++; /* a lookup that cannot hit: shorter than one block plus one token */
        return;
    }
    int32_t hit = bm_lookup(&e->bm, s->ids, max_blocks, &s->table, s->hashes);
    s->n_cached = hit * e->block_size;
    s->n_registered = hit;
    if (hit)
        for (int k = 0; k < e->n_know; k++)
            if (e->know[k].n_blocks && e->know[k].blocks[0] == s->table.blocks[0]) {
                e->know[k].hits++;
                break;
            }
}

/* ------------------------------------------------------ resume / admit */

static int slots_needed(const sequence *s) {
    return (s->sample == 0 && !s->req->forked) ? s->req->n : 1;
}

static int headroom(const engine *e) { return e->n_running; }

/* Batch slots the running set holds, counting the samples an unforked
 * n-sample request will add. */
static int slots_in_use(const engine *e) {
    int n = 0;
    for (int i = 0; i < e->n_running; i++) n += slots_needed(e->running[i]);
    return n;
}

static void resume_swapped(engine *e) {
    while (e->n_swapped && !(e->hold_admission && e->n_running)) {
        sequence *s = e->swapped[0];
        if (slots_in_use(e) + slots_needed(s) > e->max_seqs) return;
        if (s->n_host + headroom(e) > bm_available(&e->bm)) return;
        if (!bm_swap_in(&e->bm, &s->table, s->host, s->n_host)) return;
        s->n_host = 0;
        list_remove(e->swapped, &e->n_swapped, s);
        s->state = SEQ_RUNNING;
        if (list_insert(e, &e->running, &e->n_running, &e->cap_running, s)) {
            seq_cancel(s);
            seq_done(e, s);
        }
    }
}

static int running_offline(const engine *e) {
    for (int i = 0; i < e->n_running; i++)
        if (e->running[i]->req->priority == XLLM_PRIORITY_OFFLINE) return 1;
    return 0;
}

static void admit(engine *e) {
    while (e->n_waiting && !(e->hold_admission && e->n_running)) {
        sequence *s = e->waiting[0];
        int slots = slots_needed(s);
        int elastic_online = e->o.preempt_mode == XLLM_PREEMPT_ELASTIC && s->req->priority == XLLM_PRIORITY_ONLINE;
        while (slots_in_use(e) + slots > e->max_seqs && elastic_online && running_offline(e))
            preempt(e, e->running[e->n_running - 1]);
        if (slots_in_use(e) + slots > e->max_seqs && e->n_running) return;
        prefix_lookup(e, s);
        int32_t need = bm_blocks_needed(&e->bm, &s->table, s->n_cached, s->n_ids);
        while (need + headroom(e) > bm_available(&e->bm) && elastic_online && running_offline(e))
            preempt(e, e->running[e->n_running - 1]);
        if (need + headroom(e) > bm_available(&e->bm) && e->n_running > 0) {
            /* give the hits back (they stay cached) and wait */
            bm_release_table(&e->bm, &s->table);
            s->n_cached = 0;
            s->n_registered = 0;
            return;
        }
        list_remove(e->waiting, &e->n_waiting, s);
        s->state = SEQ_RUNNING;
        if (list_insert(e, &e->running, &e->n_running, &e->cap_running, s)) {
            seq_cancel(s);
            seq_done(e, s);
            continue;
        }
    }
}

/* ------------------------------------------------------------- batching */

/* Make room for `need` blocks by preempting sequences with a key above s's
 * (or any, when s is NULL) that are not in this step. */
static int make_room(engine *e, sequence *s, int32_t need) {
    while (need > bm_available(&e->bm)) {
        sequence *v = pick_victim(e);
        if (!v) return 0;
        if (s && v != s && key_cmp(e, v, s) < 0) return 0;
        if (v == s) return 0;
        preempt(e, v);
    }
    return 1;
}

/* Log-probabilities of the raw logits row (before the sampler edits it):
 * the log-sum-exp and the top n ids, kept for seq_record_logprob. */
typedef struct lp_state {
    double lse;
    int n_top;
} lp_state;

static void logprobs_before(engine *e, const sequence *s, const float *row, int32_t V, lp_state *ls) {
    ls->n_top = 0;
    ls->lse = 0;
    if (!s->lp) return;
    float mx = row[0];
    for (int32_t v = 1; v < V; v++)
        if (row[v] > mx) mx = row[v];
    double sum = 0;
    for (int32_t v = 0; v < V; v++) sum += exp((double)row[v] - (double)mx);
    ls->lse = (double)mx + log(sum);
    /* top n by value, ties to the lower id (a small insertion list: n <= 20) */
    int n = s->n_top, k = 0;
    for (int32_t v = 0; v < V && n > 0; v++) {
        if (k == n && row[v] <= row[e->lp_top[k - 1]]) continue;
        int i = k < n ? k++ : n - 1;
        while (i > 0 && row[e->lp_top[i - 1]] < row[v]) {
            e->lp_top[i] = e->lp_top[i - 1];
            i--;
        }
        e->lp_top[i] = v;
    }
    ls->n_top = k;
    memcpy(e->lp_row, row, (size_t)V * sizeof(float));
}

/* After seq_accept: store the sampled token's log-probability and the top n. */
static void logprobs_after(engine *e, sequence *s, const lp_state *ls, int32_t tok) {
    if (!s->lp) return;
    int g = seq_n_generated(s) - 1;
    s->lp[g] = (float)((double)e->lp_row[tok] - ls->lse);
    for (int i = 0; i < s->n_top; i++) {
        int32_t id = i < ls->n_top ? e->lp_top[i] : 0;
        s->top_ids[(size_t)g * (size_t)s->n_top + (size_t)i] = id;
        s->top_lp[(size_t)g * (size_t)s->n_top + (size_t)i] = (float)((double)e->lp_row[id] - ls->lse);
    }
}

/* Sample the next id of s from row (edited in place), with log-probabilities. */
static xllm_status sample_one(engine *e, sequence *s, float *row, int32_t V, xllm_error *err) {
    lp_state ls;
    logprobs_before(e, s, row, V, &ls);
    if (s->gm && seq_constrain(s, row, V)) return XLLM_OK; /* no id allowed: it ended */
    int32_t tok;
    PROF(PROF_SAMPLE, 0, 4.0 * V, tok = sampler_sample(&s->smp, row));
    xllm_status st = seq_accept(s, tok, err);
    if (!st) logprobs_after(e, s, &ls, tok);
    return st;
}

/* Fork samples 1..n-1 from sample 0 at its first output. */
static xllm_status fork_samples(engine *e, sequence *s0, const float *logits, int32_t vocab, xllm_error *err) {
    engine_request *r = s0->req;
    r->forked = 1;
    for (int j = 1; j < r->n; j++) {
        sequence *s = &r->seqs[j];
        if (s->state != SEQ_FORK_WAIT) continue;
        xllm_status st;
        if (s->table.cap < s0->table.n_blocks) {
            int32_t *nb = mem_realloc(s->table.blocks, (size_t)s0->table.cap * sizeof(int32_t));
            if (!nb) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory forking samples");
            s->table.blocks = nb;
            s->table.cap = s0->table.cap;
        }
        for (int32_t k = 0; k < s0->table.n_blocks; k++) {
            s->table.blocks[k] = s0->table.blocks[k];
            kv_cache_ref(&e->kv, s0->table.blocks[k]);
        }
        s->table.n_blocks = s0->table.n_blocks;
        s->n_cached = s0->n_cached;
        s->n_registered = s0->n_registered;
        memcpy(s->hashes, s0->hashes, (size_t)s0->n_registered * sizeof(uint64_t));
        s->state = SEQ_RUNNING;
        if (list_insert(e, &e->running, &e->n_running, &e->cap_running, s))
            return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory forking samples");
        memcpy(e->fork_logits, logits, (size_t)vocab * sizeof(float));
        if ((st = sample_one(e, s, e->fork_logits, vocab, err))) return st;
        touch(e, r);
        if (s->finished) {
            list_remove(e->running, &e->n_running, s);
            seq_done(e, s);
        }
    }
    return XLLM_OK;
}

xllm_status sched_step(engine *e, xllm_error *err) {
    handle_aborts(e);
    resume_swapped(e);
    admit(e);
    if (!e->n_running) return XLLM_OK;

    int T = 0, n_out = 0, n_seq = 0;
    for (int i = 0; i < e->n_running; i++) e->running[i]->in_step = 0;
    /* pass 1: decode tokens */
    for (int i = 0; i < e->n_running && n_seq < e->max_seqs; i++) {
        sequence *s = e->running[i];
        if (s->n_cached != s->n_ids - 1) continue;
        int32_t need = bm_blocks_needed(&e->bm, &s->table, s->n_cached, s->n_cached + 1);
        if (need > bm_available(&e->bm)) {
            while (need > bm_available(&e->bm)) {
                sequence *v = pick_victim(e);
                assert(v);
                preempt(e, v);
                if (v == s) break;
            }
            if (s->state != SEQ_RUNNING) {
                i--; /* s left the list; the next one moved into slot i */
                continue;
            }
        }
        xllm_status st = bm_prepare_write(&e->bm, &s->table, s->n_cached, err);
        if (st) return st;
        s->in_step = 1;
        s->step_index = n_seq;
        e->step_seqs[n_seq++] = s;
        e->tokens[T] = s->ids[s->n_cached];
        e->pos[T] = s->n_cached;
        e->seq[T] = s->step_index;
        e->out_seqs[n_out] = s;
        e->out_idx[n_out++] = T;
        s->n_cached++;
        T++;
        e->st.decode_tokens++;
    }
    /* pass 2: prefill chunks */
    for (int i = 0; i < e->n_running && T < e->max_step_tokens && n_seq < e->max_seqs; i++) {
        sequence *s = e->running[i];
        if (s->in_step || s->n_cached >= s->n_ids - 1) continue;
        int left = s->n_ids - s->n_cached, room = e->max_step_tokens - T;
        int chunk = left < room ? left : room;
        int32_t need = bm_blocks_needed(&e->bm, &s->table, s->n_cached, s->n_cached + chunk);
        if (need > bm_available(&e->bm)) make_room(e, s, need);
        if (s->state != SEQ_RUNNING) break; /* cannot happen: s is never its own victim here */
        if (need > bm_available(&e->bm)) {
            /* shorten the chunk to the blocks there are */
            int32_t avail = bm_available(&e->bm);
            int fit = 0;
            while (fit < chunk && bm_blocks_needed(&e->bm, &s->table, s->n_cached, s->n_cached + fit + 1) <= avail)
                fit++;
            chunk = fit;
            if (chunk == 0) continue;
        }
        for (int k = 0; k < chunk; k++) {
            xllm_status st = bm_prepare_write(&e->bm, &s->table, s->n_cached + k, err);
            if (st) return st;
        }
        s->in_step = 1;
        s->step_index = n_seq;
        e->step_seqs[n_seq++] = s;
        for (int k = 0; k < chunk; k++) {
            e->tokens[T] = s->ids[s->n_cached];
            e->pos[T] = s->n_cached;
            e->seq[T] = s->step_index;
            s->n_cached++;
            T++;
        }
        e->st.prefill_tokens += (uint64_t)chunk;
        if (s->n_cached == s->n_ids) {
            e->out_seqs[n_out] = s;
            e->out_idx[n_out++] = T - 1;
        }
    }
    if (T == 0) {
        /* nothing could be scheduled (cannot happen with a pool that holds one
         * full-context sequence, but never spin): give the newest one's blocks up */
        if (e->n_running) preempt(e, e->running[e->n_running - 1]);
        return XLLM_OK;
    }
    for (int i = 0; i < n_seq; i++) e->tables[i] = e->step_seqs[i]->table.blocks;
    fwd_batch b = {T, e->tokens, e->pos, e->seq, e->tables, n_out, e->out_idx};
    pthread_mutex_lock(e->model_lock);
    xllm_status st = e->pp ? pipeline_forward(e->pp, e->m, &e->kv, &b, e->logits, err)
                           : model_forward(e->m, &e->kv, &b, e->logits, err);
    pthread_mutex_unlock(e->model_lock);
    if (st) return st;
    e->st.steps++;
    for (int i = 0; i < n_seq; i++) register_blocks(e, e->step_seqs[i]);
    int32_t V = e->m->cfg.vocab;
    for (int k = 0; k < n_out; k++) {
        sequence *s = e->out_seqs[k];
        float *row = e->logits + (size_t)k * (size_t)V;
        if (s->sample == 0 && s->req->n > 1 && !s->req->forked) {
            /* the samples share this prompt and sample from these logits (copied: sampling edits them) */
            if ((st = fork_samples(e, s, row, V, err))) return st;
        }
        if ((st = sample_one(e, s, row, V, err))) return st;
        touch(e, s->req);
    }
    /* finished sequences leave the running set and free their blocks */
    for (int i = 0; i < e->n_running;) {
        sequence *s = e->running[i];
        if (s->finished) {
            list_remove(e->running, &e->n_running, s);
            seq_done(e, s);
            continue;
        }
        i++;
    }
    return XLLM_OK;
}

int sched_check(engine *e, char *msg, size_t len) {
    int n = e->n_running + e->n_know;
    const kv_seq **tables = mem_calloc((size_t)(n ? n : 1), sizeof *tables);
    if (!tables) return 0; /* cannot check now; not a violation */
    for (int i = 0; i < e->n_running; i++) tables[i] = &e->running[i]->table;
    /* waiting sequences hold no blocks (a failed admission gives hits back) */
    int nt = e->n_running;
    for (int i = 0; i < e->n_waiting; i++)
        if (e->waiting[i]->table.n_blocks) {
            snprintf(msg, len, "a waiting sequence holds %d KV blocks", e->waiting[i]->table.n_blocks);
            xllm_free((void *)tables);
            return -1;
        }
    int rc = bm_check(&e->bm, tables, nt, msg, len);
    int32_t swap_held = 0;
    for (int i = 0; i < e->n_swapped; i++) swap_held += e->swapped[i]->n_host;
    if (!rc && swap_held + e->bm.swap_n_free != e->bm.swap_total) {
        snprintf(msg, len, "swap pool: %d blocks held + %d free != %d total", swap_held, e->bm.swap_n_free,
                 e->bm.swap_total);
        rc = -1;
    }
    xllm_free((void *)tables);
    return rc;
}
