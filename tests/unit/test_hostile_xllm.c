/*
 * test_hostile_xllm.c - .xllm files whose tensor table lies about where
 * things are: two tensors' ranges overlapping (aliasing), a tensor over the
 * metadata, the tensor table or the header, and the metadata and the table
 * over each other. Each is a crafted copy of a good file (written by
 * xf_writer) with table entries or header fields changed and the checksum
 * recomputed, so that only the aliasing check can refuse it; each must be a
 * clean XLLM_ERR_FORMAT naming what overlaps, never a successful open.
 */
#include "test.h"
#include "base/alloc.h"
#include "format/xllm_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

static char g_path[64];

static uint64_t get_u64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t get_u32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

typedef struct {
    unsigned char *p;
    size_t n;
} file;

static file good_file(void) {
    xllm_error e;
    xf_writer *w = xf_writer_open(g_path, &e);
    CHECK_MSG(w != NULL, "%s", e.message);
    float a[32], b[48];
    for (int i = 0; i < 32; i++) a[i] = (float)i;
    for (int i = 0; i < 48; i++) b[i] = (float)-i;
    int64_t sa[2] = {4, 8}, sb[1] = {48}, sc[1] = {5};
    CHECK(!xf_writer_add(w, "a.weight", XLLM_DT_F32, 0, 2, sa, a, sizeof a, &e));
    CHECK(!xf_writer_add(w, "b.weight", XLLM_DT_F32, 0, 1, sb, b, sizeof b, &e));
    CHECK(!xf_writer_add(w, XF_BLOB_PREFIX "note.txt", XLLM_DT_U8, 0, 1, sc, "hello", 5, &e));
    cJSON *meta = cJSON_CreateObject();
    char filler[301];
    memset(filler, 'x', 300), filler[300] = 0;
    cJSON_AddStringToObject(meta, "format", "test");
    cJSON_AddStringToObject(meta, "filler", filler); /* metadata longer than one 64-byte step */
    CHECK_MSG(!xf_writer_finish(w, meta, &e), "%s", e.message);
    cJSON_Delete(meta);
    file f = {0};
    FILE *fp = fopen(g_path, "rb");
    fseek(fp, 0, SEEK_END);
    f.n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f.p = malloc(f.n);
    CHECK(fread(f.p, 1, f.n, fp) == f.n);
    fclose(fp);
    return f;
}

/* The table entry of tensor i: where its offset field is. */
static unsigned char *offset_field(file *f, int i) {
    uint64_t table_off = get_u64(f->p + 32);
    unsigned char *p = f->p + table_off;
    for (int k = 0;; k++) {
        uint32_t name_len = get_u32(p), ndim = get_u32(p + 12);
        unsigned char *off = p + 16 + 8 * ndim;
        if (k == i) return off;
        p = off + 16 + name_len + (8 - name_len % 8) % 8;
    }
}

/* Write f with its checksum recomputed, open it, expect a refusal with words. */
static void expect(file *f, const char *w1, const char *w2, const char *what) {
    uint64_t mo = get_u64(f->p + 16), ml = get_u64(f->p + 24), to = get_u64(f->p + 32), tl = get_u64(f->p + 40);
    XXH64_state_t *h = XXH64_createState();
    XXH64_reset(h, 0);
    XXH64_update(h, f->p + mo, (size_t)ml);
    XXH64_update(h, f->p + to, (size_t)tl);
    put_u64(f->p + 56, XXH64_digest(h));
    XXH64_freeState(h);
    FILE *fp = fopen(g_path, "wb");
    fwrite(f->p, 1, f->n, fp);
    fclose(fp);
    size_t base = xllm_allocated_bytes();
    xllm_error e;
    e.message[0] = 0;
    cJSON *meta = NULL;
    st_archive *a = xf_open(g_path, &meta, &e);
    CHECK_MSG(!a && e.code == XLLM_ERR_FORMAT && strstr(e.message, g_path) && (!w1 || strstr(e.message, w1)) &&
                  (!w2 || strstr(e.message, w2)),
              "%s: %s (%s)", what, a ? "opened" : "refused", e.message);
    if (a) st_close(a), cJSON_Delete(meta);
    CHECK_MSG(xllm_allocated_bytes() == base, "%s: leaked", what);
    fprintf(stderr, "  %-40s %s\n", what, e.message + strlen(g_path) + 2);
}

int main(void) {
    snprintf(g_path, sizeof g_path, "/tmp/xllm_hostile_%d.xllm", (int)getpid());
    file good = good_file();
    xllm_error e;
    cJSON *meta = NULL;
    st_archive *a = xf_open(g_path, &meta, &e);
    CHECK_MSG(a && st_count(a) == 3, "the good file opens: %s", a ? "" : e.message);
    st_close(a);
    cJSON_Delete(meta);

    uint64_t off_a = get_u64(offset_field(&good, 0)), off_b = get_u64(offset_field(&good, 1));
    uint64_t meta_off = get_u64(good.p + 16), table_off = get_u64(good.p + 32);
    file f = {malloc(good.n), good.n};

    memcpy(f.p, good.p, good.n); /* b over a: the same bytes read as two tensors */
    put_u64(offset_field(&f, 1), off_a);
    expect(&f, "a.weight and tensor b.weight overlap", NULL, "two tensors at one offset");

    memcpy(f.p, good.p, good.n); /* a (128 bytes) moved to 64 bytes before b: runs into it */
    put_u64(offset_field(&f, 0), off_b - 64);
    expect(&f, "tensor a.weight and tensor b.weight overlap", NULL, "a tensor running into the next");

    memcpy(f.p, good.p, good.n); /* the 5-byte blob inside the metadata */
    put_u64(offset_field(&f, 2), (meta_off + 63) / 64 * 64);
    expect(&f, "the metadata and tensor " XF_BLOB_PREFIX "note.txt overlap", NULL, "a tensor over the metadata");

    memcpy(f.p, good.p, good.n); /* the blob inside the tensor table */
    put_u64(offset_field(&f, 2), (table_off + 63) / 64 * 64);
    expect(&f, "the tensor table and tensor " XF_BLOB_PREFIX "note.txt", NULL, "a tensor over the tensor table");

    memcpy(f.p, good.p, good.n); /* a over the header */
    put_u64(offset_field(&f, 0), 0);
    expect(&f, "a.weight", NULL, "a tensor over the header");

    memcpy(f.p, good.p, good.n); /* the metadata range stretched over the table */
    put_u64(f.p + 24, good.n - meta_off);
    expect(&f, "the metadata", "the tensor table", "metadata over the tensor table");

    free(f.p);
    free(good.p);
    unlink(g_path);
    return test_report("test_hostile_xllm");
}
