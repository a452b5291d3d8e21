/*
 * arena.c - the bump allocator behind templates and renders.
 *
 * A compiled template keeps its AST and literals in one arena; each render
 * allocates every value in its own arena and drops it whole at the end. The
 * cap bounds what a runaway template can take (long loops that build strings).
 */
#include "template/tpl.h"
#include "base/alloc.h"

#include <stdint.h>
#include <string.h>

#define BLOCK_MIN (64 * 1024)

struct tpl_arena_block {
    tpl_arena_block *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

void *tpl_alloc(tpl_arena *a, size_t size) {
    size = (size + 15) & ~(size_t)15;
    if (size == 0) size = 16;
    if (a->cap && (size > a->cap || a->used > a->cap - size)) return NULL;
    tpl_arena_block *b = a->head;
    if (!b || b->size - b->used < size) {
        size_t bs = size > BLOCK_MIN ? size : BLOCK_MIN;
        if (b && b->size < 4 * 1024 * 1024 && bs < b->size * 2) bs = b->size * 2; /* grow geometrically */
        if (bs > SIZE_MAX - sizeof *b) return NULL;
        tpl_arena_block *nb = mem_malloc(sizeof *nb + bs);
        if (!nb) return NULL;
        nb->size = bs;
        nb->used = 0;
        /* a big one-off allocation goes behind the current block so its free space stays in use */
        if (b && size > BLOCK_MIN && b->size - b->used >= BLOCK_MIN / 4) {
            nb->next = b->next;
            b->next = nb;
        } else {
            nb->next = b;
            a->head = nb;
        }
        b = nb;
    }
    void *p = b->data + b->used;
    b->used += size;
    a->used += size;
    return p;
}

int tpl_arena_grow(tpl_arena *a, void *items, size_t n, size_t *cap, size_t size, size_t first) {
    size_t nc = *cap ? *cap * 2 : first; /* own growth: arena memory is copied into a new block, never realloc-ed */
    if (nc < *cap || (size && nc > SIZE_MAX / size)) return -1;
    void *old, *p = tpl_alloc(a, nc * size);
    if (!p) return -1;
    memcpy(&old, items, sizeof old);
    if (n) memcpy(p, old, n * size);
    memcpy(items, &p, sizeof p);
    *cap = nc;
    return 0;
}

void tpl_arena_free(tpl_arena *a) {
    tpl_arena_block *b = a->head;
    while (b) {
        tpl_arena_block *n = b->next;
        xllm_free(b);
        b = n;
    }
    a->head = NULL;
    a->used = 0;
}
