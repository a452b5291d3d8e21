/*
 * knowledge.c - knowledge prefixes: named texts whose KV is computed once,
 * pinned in the pool, and reused by every request whose prompt starts with
 * them (the brief's "KV-cache knowledge injection").
 *
 * The mechanism is the prefix cache itself: a knowledge prefix is the chain
 * of full blocks of its token ids, registered under their prefix hashes and
 * pinned (a reference no sequence owns), so LRU never evicts them and any
 * request with the same leading ids hits them. The trailing partial block is
 * not kept (a request recomputes those few tokens).
 *
 * A prefix's KV can be written to a file and loaded back in a later process:
 *   "XLLMKV01" | u32 header length | JSON header {format, version, name,
 *   fingerprint, n_layers, n_kv_heads, head_dim, n_ids, n_positions,
 *   kv_dtype} | int32 ids[n_ids] | per position, per layer: K then V, each
 *   n_kv_heads rows as the pool stores them (quant/kvq.h: f32, f16 or q8) |
 *   u64 XXH3 of everything before.
 * A file records its kv_dtype (absent: f32, the files written before KV
 * compression) and loads only into a pool of that dtype: converting would
 * compound the quantization error, so a mismatch is an error that says so.
 * The fingerprint (model_fingerprint, src/model/fingerprint.c) hashes the
 * model's configuration and a sample of every tensor's bytes, so a file from
 * another model (or another quantization) is refused; the ids are checked against the text when it is given.
 *
 * Building and loading run on the scheduler thread (it owns the pool), as
 * jobs; saving reads pinned blocks, which never change, from the caller.
 */
#include "engine/engine.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/file.h"
#include "base/tmpfile.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define KV_MAGIC "XLLMKV01"
#define MAX_NAME 128

void knowledge_free_all(engine *e) {
    for (int k = 0; k < e->n_know; k++) {
        xllm_free(e->know[k].name);
        xllm_free(e->know[k].ids);
        xllm_free(e->know[k].blocks);
    }
    xllm_free(e->know);
    e->know = NULL;
    e->n_know = 0;
}

/* a KV file holds every layer; a pipeline stage holds some (not done yet) */
#define NO_PP_KNOWLEDGE "knowledge prefixes are not supported with pipeline parallelism (--pp) yet"

static knowledge *find(engine *e, const char *name) {
    for (int k = 0; k < e->n_know; k++)
        if (!strcmp(e->know[k].name, name)) return &e->know[k];
    return NULL;
}

/* ------------------------------------------------------------ the job */

static xllm_status job_body(engine *e, engine_job *j, xllm_error *err) {
    int B = e->block_size, full = j->n_ids / B;
    if (!e->bm.caching)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "knowledge prefixes need the prefix cache (cache_policy: lru)");
    if (find(e, j->name)) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "knowledge '%s' exists already", j->name);
    if (e->n_know >= XLLM_MAX_KNOWLEDGE)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "at most %d knowledge prefixes", XLLM_MAX_KNOWLEDGE);
    if (full == 0)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                           "knowledge '%s' has %d tokens, less than one KV block (%d tokens): nothing to keep",
                           j->name, j->n_ids, B);
    int32_t pinned = bm_pinned(&e->bm);
    int32_t min_blocks = kv_blocks_for_tokens(&e->kv, e->max_context);
    if (e->kv.n_blocks - pinned - full < min_blocks)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                           "knowledge '%s' needs %d KV blocks; the pool has %d, %d are pinned and %d must stay free "
                           "for one full-context sequence: raise memory.workspace_size",
                           j->name, full, e->kv.n_blocks, pinned, min_blocks);
    if (j->kind == JOB_LOAD_KNOWLEDGE && j->n_kv_positions < full * B)
        return err_setf(err, XLLM_ERR_FORMAT, "knowledge '%s': the file holds K/V for %d positions, need %d",
                           j->name, j->n_kv_positions, full * B);
    kv_seq t = {0};
    uint64_t *hashes = mem_malloc_array((size_t)full, sizeof(uint64_t));
    knowledge kn = {0};
    kn.name = mem_strdup(j->name);
    kn.ids = mem_malloc_array((size_t)j->n_ids, sizeof(int32_t));
    kn.blocks = mem_malloc_array((size_t)full, sizeof(int32_t));
    /* the list is read by stats and save under the lock: grow it under the lock */
    pthread_mutex_lock(&e->lock);
    knowledge *grown = mem_realloc(e->know, (size_t)(e->n_know + 1) * sizeof *grown);
    if (grown) e->know = grown;
    pthread_mutex_unlock(&e->lock);
    xllm_status st = XLLM_OK;
    if (!hashes || !kn.name || !kn.ids || !kn.blocks || !grown) {
        st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    memcpy(kn.ids, j->ids, (size_t)j->n_ids * sizeof(int32_t));
    int32_t hit = bm_lookup(&e->bm, j->ids, full, &t, hashes);
    if (full - hit > bm_available(&e->bm)) {
        st = err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                         "knowledge '%s': %d KV blocks are needed but only %d are free now (requests hold the rest)",
                         j->name, full - hit, bm_available(&e->bm));
        goto out;
    }
    int from = hit * B, to = full * B;
    for (int p = from; p < to && !st; p++) st = bm_prepare_write(&e->bm, &t, p, err);
    if (st) goto out;
    if (j->kind == JOB_LOAD_KNOWLEDGE) {
        size_t sb = e->kv.slot_bytes;
        const unsigned char *src = j->kv + (size_t)from * (size_t)e->kv.n_layers * 2 * sb;
        for (int p = from; p < to; p++)
            for (int l = 0; l < e->kv.n_layers; l++) {
                kv_cache_slot_from_host(&e->kv, l, t.blocks, p, src, src + sb);
                src += 2 * sb;
            }
    } else {
        const int32_t *tables[1] = {t.blocks};
        for (int p = from; p < to && !st;) {
            int T = to - p < e->max_step_tokens ? to - p : e->max_step_tokens;
            for (int k = 0; k < T; k++) {
                e->tokens[k] = j->ids[p + k];
                e->pos[k] = p + k;
                e->seq[k] = 0;
            }
            fwd_batch b = {T, e->tokens, e->pos, e->seq, tables, 0, e->out_idx};
            pthread_mutex_lock(e->model_lock);
            st = model_forward(e->m, &e->kv, &b, e->logits, err);
            pthread_mutex_unlock(e->model_lock);
            p += T;
            e->st.prefill_tokens += (uint64_t)T;
        }
        if (st) goto out;
    }
    /* register and pin; where an identical block is registered already, pin that one */
    for (int k = 0; k < full; k++) {
        uint64_t h = k < hit ? hashes[k] : bm_block_hash(&e->bm, k ? hashes[k - 1] : BM_ROOT_HASH, j->ids + (size_t)k * B);
        hashes[k] = h;
        bm_register(&e->bm, t.blocks[k], h, j->ids + (size_t)k * B);
        int32_t b = bm_find(&e->bm, h, j->ids + (size_t)k * B);
        if (b < 0) b = t.blocks[k];
        bm_pin(&e->bm, b);
        kn.blocks[k] = b;
    }
    kn.n_ids = j->n_ids;
    kn.n_blocks = full;
    atomic_init(&kn.hits, 0);
    pthread_mutex_lock(&e->lock);
    e->know[e->n_know++] = kn;
    pthread_mutex_unlock(&e->lock);
    memset(&kn, 0, sizeof kn);
    atomic_store(&e->pinned_blocks, bm_pinned(&e->bm));
out:
    bm_release_table(&e->bm, &t);
    xllm_free(t.blocks);
    xllm_free(hashes);
    xllm_free(kn.name);
    xllm_free(kn.ids);
    xllm_free(kn.blocks);
    return st;
}

void knowledge_run_job(engine *e, engine_job *j) {
    j->st = job_body(e, j, &j->err);
}

/* --------------------------------------------------------------- public */

static xllm_status check_name(const char *name, xllm_error *err) {
    if (!name || !*name) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "a knowledge prefix needs a name");
    size_t l = strlen(name);
    if (l > MAX_NAME) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "knowledge name longer than %d bytes", MAX_NAME);
    for (size_t i = 0; i < l; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == '"' || name[i] == '\\')
            return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "knowledge name: control characters, quotes and "
                                                               "backslashes are not allowed");
    return XLLM_OK;
}

static xllm_status tokenize_text(engine *e, const char *text, int32_t **ids, size_t *n, xllm_error *err) {
    if (!e->tok) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "the model has no tokenizer");
    xllm_status st = tokenizer_encode(e->tok, text, strlen(text), 1, ids, n, err);
    if (st) return st;
    if (*n >= (size_t)e->max_context) {
        xllm_free(*ids);
        *ids = NULL;
        return err_setf(err, XLLM_ERR_CONTEXT_OVERFLOW, "the knowledge text has %zu tokens; the context holds %d",
                           *n, e->max_context);
    }
    return XLLM_OK;
}

xllm_status xllm_engine_add_knowledge(xllm_engine *e, const char *name, const char *text, xllm_error *err) {
    err_clear(err);
    if (!e || !text) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "engine or text is NULL");
    if (e->pp) return err_setf(err, XLLM_ERR_UNSUPPORTED, NO_PP_KNOWLEDGE);
    xllm_status st = check_name(name, err);
    if (st) return st;
    int32_t *ids;
    size_t n;
    if ((st = tokenize_text(e, text, &ids, &n, err))) return st;
    engine_job j = {.kind = JOB_ADD_KNOWLEDGE, .name = name, .ids = ids, .n_ids = (int)n};
    st = engine_run_job(e, &j, err);
    xllm_free(ids);
    return st;
}

static void put_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }

xllm_status xllm_engine_save_knowledge(xllm_engine *e, const char *name, const char *path, xllm_error *err) {
    err_clear(err);
    if (!e || !name || !path) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "NULL argument");
    if (e->pp) return err_setf(err, XLLM_ERR_UNSUPPORTED, NO_PP_KNOWLEDGE);
    pthread_mutex_lock(&e->lock);
    knowledge *k = find(e, name);
    knowledge kn = k ? *k : (knowledge){0};
    pthread_mutex_unlock(&e->lock);
    if (!k) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "no knowledge prefix named '%s'", name);
    int B = e->block_size, n_pos = kn.n_blocks * B;
    char header[1024];
    int hl = snprintf(header, sizeof header,
                      "{\"format\":\"xllm-kv\",\"version\":1,\"name\":\"%s\",\"fingerprint\":\"%016llx\","
                      "\"n_layers\":%d,\"n_kv_heads\":%d,\"head_dim\":%d,\"n_ids\":%d,\"n_positions\":%d,"
                      "\"kv_dtype\":\"%s\"}",
                      kn.name, (unsigned long long)e->fingerprint, e->kv.n_layers, e->kv.n_kv_heads, e->kv.head_dim,
                      kn.n_ids, n_pos, kvq_name(e->kv.dtype));
    size_t sb = e->kv.slot_bytes;
    unsigned char *slot = mem_malloc_array(2, sb); /* one position's K and V, read back from the pool */
    if (!slot) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    char tmp[4200];
    int fd = tmpfile_create(path, tmp, sizeof tmp); /* removed by xllm_remove_temp_files if interrupted */
    if (fd < 0) {
        xllm_free(slot);
        return err_setf(err, XLLM_ERR_IO, "%s: cannot create a temporary file beside it", path);
    }
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        xllm_free(slot);
        close(fd);
        unlink(tmp);
        tmpfile_forget(tmp);
        return err_setf(err, XLLM_ERR_IO, "%s: cannot write", path);
    }
    XXH3_state_t *h = XXH3_createState();
    int ok = h != NULL;
    if (ok) XXH3_64bits_reset(h);
#define OUT(p, n) do { if (ok && fwrite((p), 1, (n), f) != (n)) ok = 0; if (ok) XXH3_64bits_update(h, (p), (n)); } while (0)
    unsigned char hdr[12];
    memcpy(hdr, KV_MAGIC, 8);
    put_u32(hdr + 8, (uint32_t)hl);
    OUT(hdr, 12);
    OUT(header, (size_t)hl);
    OUT(kn.ids, (size_t)kn.n_ids * sizeof(int32_t));
    for (int p = 0; p < n_pos && ok; p++)
        for (int l = 0; l < e->kv.n_layers; l++) {
            kv_cache_slot_to_host(&e->kv, l, kn.blocks, p, slot, slot + sb);
            OUT(slot, 2 * sb);
        }
#undef OUT
    xllm_free(slot);
    uint64_t sum = ok ? XXH3_64bits_digest(h) : 0;
    if (ok && fwrite(&sum, 1, 8, f) != 8) ok = 0;
    XXH3_freeState(h);
    if (fclose(f)) ok = 0;
    if (!ok || rename(tmp, path)) {
        unlink(tmp);
        tmpfile_forget(tmp);
        return err_setf(err, XLLM_ERR_IO, "%s: cannot write the knowledge file", path);
    }
    tmpfile_forget(tmp);
    return XLLM_OK;
}

xllm_status xllm_engine_load_knowledge(xllm_engine *e, const char *name, const char *path, const char *text,
                                       xllm_error *err) {
    err_clear(err);
    if (!e || !path) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "NULL argument");
    if (e->pp) return err_setf(err, XLLM_ERR_UNSUPPORTED, NO_PP_KNOWLEDGE);
    xllm_status st = check_name(name, err);
    if (st) return st;
    char *data = NULL;
    size_t len = 0;
    if ((st = file_read_all(path, &data, &len, err))) return st;
    cJSON *hj = NULL;
    int32_t *text_ids = NULL;
    uint32_t hl = 0;
    if (len < 20 || memcmp(data, KV_MAGIC, 8)) {
        st = err_setf(err, XLLM_ERR_FORMAT, "%s: not an xLLM knowledge (KV) file", path);
        goto out;
    }
    memcpy(&hl, data + 8, 4);
    uint64_t sum;
    memcpy(&sum, data + len - 8, 8);
    if ((size_t)hl > len - 20 || XXH3_64bits(data, len - 8) != sum) {
        st = err_setf(err, XLLM_ERR_FORMAT, "%s: the file is damaged (checksum or size mismatch)", path);
        goto out;
    }
    hj = cJSON_ParseWithLength(data + 12, hl);
    cJSON *fp = cJSON_GetObjectItemCaseSensitive(hj, "fingerprint");
    const char *keys[] = {"n_layers", "n_kv_heads", "head_dim", "n_ids", "n_positions"};
    double v[5];
    for (int i = 0; i < 5 && hj; i++) {
        cJSON *x = cJSON_GetObjectItemCaseSensitive(hj, keys[i]);
        v[i] = cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (v[i] < 0 || v[i] > 1e9) {
            cJSON_Delete(hj);
            hj = NULL;
        }
    }
    if (!hj || !cJSON_IsString(fp)) {
        st = err_setf(err, XLLM_ERR_FORMAT, "%s: malformed header", path);
        goto out;
    }
    char want[32];
    snprintf(want, sizeof want, "%016llx", (unsigned long long)e->fingerprint);
    if (strcmp(fp->valuestring, want) || (int)v[0] != e->kv.n_layers || (int)v[1] != e->kv.n_kv_heads ||
        (int)v[2] != e->kv.head_dim) {
        st = err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                         "%s was written for another model (fingerprint %s, %d layers x %d KV heads x %d; this model: "
                         "%s, %d x %d x %d): refusing its KV",
                         path, fp->valuestring, (int)v[0], (int)v[1], (int)v[2], want, e->kv.n_layers,
                         e->kv.n_kv_heads, e->kv.head_dim);
        goto out;
    }
    cJSON *dtj = cJSON_GetObjectItemCaseSensitive(hj, "kv_dtype");
    kv_dtype fdt = KV_F32;
    int f_auto = 0;
    if (dtj && (!cJSON_IsString(dtj) || kvq_parse(dtj->valuestring, &fdt, &f_auto) || f_auto)) {
        st = err_setf(err, XLLM_ERR_FORMAT, "%s: malformed header (kv_dtype)", path);
        goto out;
    }
    if (fdt != e->kv.dtype) {
        st = err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                         "%s holds %s KV but this engine's pool stores %s (kv_dtype): load it into an engine with "
                         "kv_dtype %s, or rebuild the knowledge from its text",
                         path, kvq_name(fdt), kvq_name(e->kv.dtype), kvq_name(fdt));
        goto out;
    }
    int n_ids = (int)v[3], n_pos = (int)v[4];
    size_t sb = e->kv.slot_bytes;
    size_t want_len = 12 + hl + (size_t)n_ids * 4 + (size_t)n_pos * (size_t)e->kv.n_layers * 2 * sb + 8;
    if (want_len != len || n_pos > n_ids || n_ids >= e->max_context) {
        st = err_setf(err, XLLM_ERR_FORMAT, "%s: sizes in the header do not match the file", path);
        goto out;
    }
    int32_t *ids = (int32_t *)(void *)(data + 12 + hl);
    int32_t *idcopy = mem_malloc_array((size_t)n_ids + 1, sizeof(int32_t));
    if (!idcopy) {
        st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    memcpy(idcopy, ids, (size_t)n_ids * sizeof(int32_t)); /* aligned copy */
    for (int i = 0; i < n_ids; i++)
        if (idcopy[i] < 0 || idcopy[i] >= e->m->cfg.vocab) {
            xllm_free(idcopy);
            st = err_setf(err, XLLM_ERR_FORMAT, "%s: token id %d outside the vocabulary", path, ids[i]);
            goto out;
        }
    if (text) {
        size_t tn;
        if ((st = tokenize_text(e, text, &text_ids, &tn, err))) {
            xllm_free(idcopy);
            goto out;
        }
        if (tn != (size_t)n_ids || memcmp(text_ids, idcopy, tn * sizeof(int32_t))) {
            xllm_free(idcopy);
            st = err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                             "%s holds the KV of other token ids than the text's (%d ids in the file, %zu in the text)",
                             path, n_ids, tn);
            goto out;
        }
    }
    unsigned char *kv = mem_malloc_array((size_t)n_pos * (size_t)e->kv.n_layers * 2 * sb + 1, 1);
    if (!kv) {
        xllm_free(idcopy);
        st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    memcpy(kv, data + 12 + hl + (size_t)n_ids * 4, (size_t)n_pos * (size_t)e->kv.n_layers * 2 * sb);
    engine_job j = {.kind = JOB_LOAD_KNOWLEDGE, .name = name, .ids = idcopy, .n_ids = n_ids, .kv = kv,
                    .n_kv_positions = n_pos};
    st = engine_run_job(e, &j, err);
    xllm_free(kv);
    xllm_free(idcopy);
out:
    cJSON_Delete(hj);
    xllm_free(text_ids);
    xllm_free(data);
    return st;
}

xllm_status knowledge_from_options(engine *e, xllm_error *err) {
    for (int k = 0; k < e->o.n_knowledge; k++) {
        const char *name = e->o.knowledge_name[k], *path = e->o.knowledge_path[k], *kvp = e->o.knowledge_kv_path[k];
        if (!name || !path) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "knowledge %d: name or path missing", k);
        char *text = NULL;
        size_t len;
        xllm_status st = file_read_all(path, &text, &len, err);
        if (st) return err_prefix(err, "knowledge '%s'", name), st;
        if (strlen(text) != len) {
            xllm_free(text);
            return err_setf(err, XLLM_ERR_FORMAT, "knowledge '%s': %s holds a NUL byte", name, path);
        }
        if (kvp && path_exists(kvp)) {
            st = xllm_engine_load_knowledge(e, name, kvp, text, err);
        } else {
            st = xllm_engine_add_knowledge(e, name, text, err);
            if (!st && kvp) st = xllm_engine_save_knowledge(e, name, kvp, err);
        }
        xllm_free(text);
        if (st) return st;
    }
    return XLLM_OK;
}
