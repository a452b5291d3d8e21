/*
 * tok_util.c - the small utilities the tokenizer stages share: string
 * lists (over base/buf.h), two open-addressing hash maps (string -> id for
 * vocabularies, u64 -> u64 for merge pairs and trie edges) over one fast
 * byte hash, Unicode White_Space, and JSON string helpers. UTF-8 walking is
 * base/utf8.h's.
 */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------ containers */

int tok_list_begin(tok_list *l, int32_t id, int32_t flag) {
    if (array_reserve(&l->items, &l->cap, l->n + 1, sizeof *l->items, 16)) return -1;
    if (buf_reserve(&l->text, 0)) return -1;
    l->items[l->n].off = l->text.len;
    l->items[l->n].len = 0;
    l->items[l->n].id = id;
    l->items[l->n].flag = flag;
    l->n++;
    return 0;
}

int tok_list_extend(tok_list *l, const void *s, size_t n) {
    if (buf_append(&l->text, s, n)) return -1;
    l->items[l->n - 1].len += n;
    return 0;
}

int tok_list_push(tok_list *l, const void *s, size_t n, int32_t id, int32_t flag) {
    if (tok_list_begin(l, id, flag)) return -1;
    return tok_list_extend(l, s, n);
}

void tok_list_clear(tok_list *l) {
    l->n = 0;
    buf_clear(&l->text);
}

void tok_list_free(tok_list *l) {
    buf_free(&l->text);
    xllm_free(l->items);
    l->items = NULL;
    l->n = l->cap = 0;
}

void tok_list_swap(tok_list *a, tok_list *b) {
    tok_list t = *a;
    *a = *b;
    *b = t;
}

int tok_ids_push(tok_ids *a, int32_t id) {
    if (array_reserve(&a->v, &a->cap, a->n + 1, sizeof *a->v, 32)) return -1;
    a->v[a->n++] = id;
    return 0;
}

int tok_ids_append(tok_ids *a, const int32_t *ids, size_t n) {
    if (n > SIZE_MAX - a->n || array_reserve(&a->v, &a->cap, a->n + n, sizeof *a->v, 32)) return -1;
    if (n) memcpy(a->v + a->n, ids, n * sizeof *ids);
    a->n += n;
    return 0;
}

/* ---------------------------------------------------------------- hashing */

static inline uint64_t mix64(uint64_t x) { /* splitmix64 finalizer */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Eight bytes at a time, then the tail read as (possibly overlapping)
 * words; good enough for hash tables with linear probing. */
uint64_t tok_hash(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ ((uint64_t)n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        v = (uint64_t)a << 32 | b;
    } else if (n) {
        v = (uint64_t)s[0] | (uint64_t)s[n / 2] << 8 | (uint64_t)s[n - 1] << 16;
    }
    return mix64(h ^ v);
}

static size_t table_cap(size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2 + 2) cap *= 2; /* load factor <= 1/2 */
    return cap;
}

int tok_strmap_init(tok_strmap *m, size_t expected) {
    memset(m, 0, sizeof *m);
    m->cap = table_cap(expected);
    m->slots = mem_calloc(m->cap, sizeof *m->slots);
    if (!m->slots) {
        m->cap = 0;
        return -1;
    }
    return 0;
}

static int strmap_grow(tok_strmap *m) {
    tok_strmap big;
    if (tok_strmap_init(&big, m->cap)) return -1;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key) tok_strmap_put(&big, m->slots[i].key, m->slots[i].len, m->slots[i].val);
    tok_strmap_free(m);
    *m = big;
    return 0;
}

int tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val) {
    if (len > UINT32_MAX) return -1;
    if ((m->n + 1) * 2 > m->cap && strmap_grow(m)) return -1;
    size_t mask = m->cap - 1, i = (size_t)tok_hash(key, len) & mask;
    while (m->slots[i].key) {
        tok_strslot *s = &m->slots[i];
        if (s->len == len && memcmp(s->key, key, len) == 0) {
            s->val = val;
            return 0;
        }
        i = (i + 1) & mask;
    }
    m->slots[i].key = key;
    m->slots[i].len = (uint32_t)len;
    m->slots[i].val = val;
    m->n++;
    return 0;
}

void tok_strmap_put_h(tok_strmap *m, const char *key, uint32_t len, int32_t val, uint64_t h) {
    size_t mask = m->cap - 1, i = (size_t)h & mask;
    while (m->slots[i].key) {
        tok_strslot *s = &m->slots[i];
        if (s->len == len && memcmp(s->key, key, len) == 0) {
            s->val = val;
            return;
        }
        i = (i + 1) & mask;
    }
    m->slots[i] = (tok_strslot){key, len, val};
    m->n++;
}

void tok_strmap_prefetch(const tok_strmap *m, uint64_t h) { __builtin_prefetch(&m->slots[h & (m->cap - 1)], 1); }

int32_t tok_strmap_get_h(const tok_strmap *m, const char *key, size_t len, uint64_t h) {
    if (!m->cap) return -1;
    size_t mask = m->cap - 1, i = (size_t)h & mask;
    for (;;) {
        const tok_strslot *s = &m->slots[i];
        if (!s->key) return -1;
        if (s->len == len && memcmp(s->key, key, len) == 0) return s->val;
        i = (i + 1) & mask;
    }
}

void tok_strmap_get_many(const tok_strmap *m, size_t n, const char *const *keys, const uint32_t *lens,
                         const uint64_t *h, int32_t *out) {
    if (!m->cap) {
        for (size_t i = 0; i < n; i++) out[i] = -1;
        return;
    }
    size_t mask = m->cap - 1;
    for (size_t i = 0; i < n; i++) __builtin_prefetch(&m->slots[h[i] & mask]);
    for (size_t i = 0; i < n; i++) {
        const tok_strslot *s = &m->slots[h[i] & mask];
        if (s->key) __builtin_prefetch(s->key);
    }
    for (size_t i = 0; i < n; i++) out[i] = tok_strmap_get_h(m, keys[i], lens[i], h[i]);
}

int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len) {
    return tok_strmap_get_h(m, key, len, tok_hash(key, len));
}

void tok_strmap_free(tok_strmap *m) {
    xllm_free(m->slots);
    memset(m, 0, sizeof *m);
}

int tok_u64map_init(tok_u64map *m, size_t expected) { return tok_u64map_init_load(m, expected, 50); }

int tok_u64map_init_load(tok_u64map *m, size_t expected, int load_pct) {
    memset(m, 0, sizeof *m);
    m->cap = 16;
    while (m->cap * (size_t)load_pct < (expected + 1) * 100) m->cap *= 2;
    m->slots = mem_malloc_array(m->cap, sizeof *m->slots);
    if (!m->slots) {
        m->cap = 0;
        return -1;
    }
    memset(m->slots, 0xff, m->cap * sizeof *m->slots);
    return 0;
}

static int u64map_grow(tok_u64map *m) {
    tok_u64map big;
    if (tok_u64map_init(&big, m->cap)) return -1;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key != UINT64_MAX) tok_u64map_put(&big, m->slots[i].key, m->slots[i].val);
    tok_u64map_free(m);
    *m = big;
    return 0;
}

void tok_u64map_put_many(tok_u64map *m, const tok_u64slot *kv, size_t n) {
    size_t mask = m->cap - 1;
    enum { AHEAD = 16 };
    for (size_t i = 0; i < n && i < AHEAD; i++) __builtin_prefetch(&m->slots[mix64(kv[i].key) & mask], 1);
    for (size_t i = 0; i < n; i++) {
        if (i + AHEAD < n) __builtin_prefetch(&m->slots[mix64(kv[i + AHEAD].key) & mask], 1);
        size_t k = (size_t)mix64(kv[i].key) & mask;
        while (m->slots[k].key != UINT64_MAX && m->slots[k].key != kv[i].key) k = (k + 1) & mask;
        if (m->slots[k].key == UINT64_MAX) m->n++;
        m->slots[k] = kv[i];
    }
}

int tok_u64map_put(tok_u64map *m, uint64_t key, uint64_t val) {
    if (key == UINT64_MAX) return -1;
    if ((m->n + 1) * 2 > m->cap && u64map_grow(m)) return -1;
    size_t mask = m->cap - 1, i = (size_t)mix64(key) & mask;
    while (m->slots[i].key != UINT64_MAX) {
        if (m->slots[i].key == key) {
            m->slots[i].val = val;
            return 0;
        }
        i = (i + 1) & mask;
    }
    m->slots[i].key = key;
    m->slots[i].val = val;
    m->n++;
    return 0;
}

int tok_u64map_get(const tok_u64map *m, uint64_t key, uint64_t *val) {
    if (!m->cap) return 0;
    size_t mask = m->cap - 1, i = (size_t)mix64(key) & mask;
    for (;;) {
        const tok_u64slot *s = &m->slots[i];
        if (s->key == key) {
            *val = s->val;
            return 1;
        }
        if (s->key == UINT64_MAX) return 0;
        i = (i + 1) & mask;
    }
}

void tok_u64map_free(tok_u64map *m) {
    xllm_free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------- White_Space */

int tok_is_whitespace(int32_t c) {
    return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

/* ------------------------------------------------------------ JSON helpers */

int tok_json_strdup(const cJSON *item, char **out) {
    *out = NULL;
    if (!item || cJSON_IsNull(item)) return 0;
    if (!cJSON_IsString(item) || !item->valuestring) return -1;
    *out = mem_strdup(item->valuestring);
    return *out ? 0 : -2;
}

const char *tok_json_type(const cJSON *obj) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

int tok_json_int(const cJSON *v, double lo, double hi, int32_t *out) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi) || v->valuedouble != floor(v->valuedouble))
        return 0;
    *out = (int32_t)v->valuedouble;
    return 1;
}
