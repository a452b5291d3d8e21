/*
 * engine_stats.c - the engine's counters for readers: the scheduler's live
 * counters copied under the lock after each step (publish), and the JSON
 * that xllm_engine_stats returns from that copy, so a reader never waits for
 * a step.
 */
#include "engine/engine.h"
#include "base/alloc.h"

#include <stdio.h>

/* A KV block of the layers this process holds, stored as dt. */
static int64_t block_bytes(const engine *e, int B, kv_dtype dt) {
    const model *m = e->m;
    return (int64_t)B * (int64_t)kv_bytes_per_token(dt, m->layer_end - m->layer_begin, m->cfg.n_kv_heads, m->cfg.head_dim);
}

/* Copy the scheduler's counters for readers. Under the lock. */
void engine_publish_stats(engine *e) {
    engine_stats *p = &e->pub;
    *p = e->st;
    p->pc_lookups = e->bm.lookups;
    p->pc_hit_blocks = e->bm.hit_blocks;
    p->pc_hit_tokens = e->bm.hit_tokens;
    p->pc_evictions = e->bm.evictions;
    p->blocks_free = e->kv.n_free;
    p->blocks_cached = e->bm.n_cached;
    p->blocks_used = bm_used(&e->bm);
    p->blocks_pinned = bm_pinned(&e->bm);
    p->swap_used = e->bm.swap_total - e->bm.swap_n_free;
    p->running = e->n_running;
    p->waiting = e->n_waiting;
    p->swapped = e->n_swapped;
}

char *xllm_engine_stats(xllm_engine *e) {
    if (!e) return NULL;
    pthread_mutex_lock(&e->lock);
    engine_stats p = e->pub;
    uint64_t rc_hits = e->rc.hits, rc_misses = e->rc.misses;
    int rc_entries = e->rc.n_entries;
    size_t rc_bytes = e->rc.bytes;
    int32_t know_n = e->n_know;
    char know[4096];
    size_t kl = 0;
    know[0] = 0;
    for (int k = 0; k < know_n && kl < sizeof know - 200; k++)
        kl += (size_t)snprintf(know + kl, sizeof know - kl, "%s{\"name\":\"%s\",\"tokens\":%d,\"blocks\":%d,\"hits\":%llu}",
                               k ? "," : "", e->know[k].name, e->know[k].n_ids, e->know[k].n_blocks,
                               (unsigned long long)atomic_load(&e->know[k].hits));
    pthread_mutex_unlock(&e->lock);
    char buf[8192];
    int len = snprintf(
        buf, sizeof buf,
        "{\"requests_submitted\":%llu,\"requests_finished\":%llu,\"requests_aborted\":%llu,\"requests_failed\":%llu,"
        "\"requests_running\":%d,\"requests_waiting\":%d,\"requests_swapped\":%d,"
        "\"prefill_tokens\":%llu,\"decode_tokens\":%llu,\"steps\":%llu,"
        "\"preemptions\":%llu,\"preemptions_by_mode\":{\"recompute\":%llu,\"swap\":%llu},"
        "\"prefix_cache\":{\"lookups\":%llu,\"hit_blocks\":%llu,\"hit_tokens\":%llu,\"evictions\":%llu},"
        "\"response_cache\":{\"hits\":%llu,\"misses\":%llu,\"entries\":%d,\"bytes\":%zu},"
        "\"kv\":{\"block_size\":%d,\"blocks_total\":%d,\"blocks_free\":%d,\"blocks_cached\":%d,\"blocks_used\":%d,"
        "\"blocks_pinned\":%d,\"swap_blocks_total\":%d,\"swap_blocks_used\":%d},"
        "\"memory\":{\"scratch_bytes\":%zu,\"backend_bytes\":%zu,\"kv_bytes\":%lld,\"swap_bytes\":%zu,\"swap_locked\":%s},"
        "\"kv_dtype\":\"%s\",\"kv_dtype_auto\":%s,\"kv_bytes_per_token\":%lld,"
        "\"knowledge\":[%s]}",
        (unsigned long long)p.submitted, (unsigned long long)p.finished, (unsigned long long)p.aborted,
        (unsigned long long)p.failed, p.running, p.waiting, p.swapped, (unsigned long long)p.prefill_tokens,
        (unsigned long long)p.decode_tokens, (unsigned long long)p.steps,
        (unsigned long long)(p.preempt_recompute + p.preempt_swap), (unsigned long long)p.preempt_recompute,
        (unsigned long long)p.preempt_swap, (unsigned long long)p.pc_lookups, (unsigned long long)p.pc_hit_blocks,
        (unsigned long long)p.pc_hit_tokens, (unsigned long long)p.pc_evictions, (unsigned long long)rc_hits,
        (unsigned long long)rc_misses, rc_entries, rc_bytes, e->block_size, e->kv.n_blocks, p.blocks_free,
        p.blocks_cached, p.blocks_used, p.blocks_pinned, e->bm.swap_total, p.swap_used, e->scratch_bytes, e->backend_bytes,
        (long long)e->kv.n_blocks * block_bytes(e, e->block_size, e->kv.dtype), e->bm.swap_bytes,
        e->bm.swap_locked ? "true" : "false", kvq_name(e->kv.dtype), e->kv_auto ? "true" : "false",
        (long long)block_bytes(e, 1, e->kv.dtype), know);
    if (len < 0 || (size_t)len >= sizeof buf) return mem_strdup("{}");
    return mem_strdup(buf);
}
