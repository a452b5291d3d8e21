/*
 * xllm_file.c - .xllm writer (streaming, atomic) and reader (mmap, verified).
 *
 * Layout (docs/FORMAT.md): a 64-byte header, tensor data (each tensor at a
 * 64-byte aligned offset), then the JSON metadata and the binary tensor
 * table. The header is written last, so a file cut short anywhere has no
 * valid header; and the whole file is a temporary until the final rename.
 */
#include "format/xllm_file.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "base/error.h"
#include "base/tmpfile.h"
#include "quant/quant.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define HEADER_SIZE 64

/* little-endian field access (the format is little-endian; so are our targets) */
static void put_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get_u32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get_u64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* ---------------------------------------------------------------- writer */

struct xf_writer {
    char *dest, *tmp;
    FILE *f;
    uint64_t pos;
    unsigned char *table;
    size_t table_len, table_cap;
};

static xllm_status wr(xf_writer *w, const void *p, size_t n, xllm_error *err) {
    if (n && fwrite(p, 1, n, w->f) != n)
        return err_setf(err, XLLM_ERR_IO, "%s: write failed: %s", w->tmp, strerror(errno));
    w->pos += n;
    return XLLM_OK;
}

static xllm_status pad_to(xf_writer *w, uint64_t align, xllm_error *err) {
    static const unsigned char zeros[XF_ALIGN];
    size_t n = (size_t)((align - w->pos % align) % align);
    return wr(w, zeros, n, err);
}

xf_writer *xf_writer_open(const char *dest, xllm_error *err) {
    xf_writer *w = mem_calloc(1, sizeof *w);
    if (!w) {
        err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        return NULL;
    }
    size_t n = strlen(dest);
    w->dest = mem_strdup(dest);
    w->tmp = mem_malloc(n + 16);
    if (!w->dest || !w->tmp) {
        err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        goto fail;
    }
    int fd = tmpfile_create(dest, w->tmp, n + 16);
    if (fd < 0) {
        err_setf(err, XLLM_ERR_IO, "%s: cannot create a temporary file next to it: %s", dest, strerror(errno));
        goto fail;
    }
    w->f = fdopen(fd, "wb");
    if (!w->f) {
        close(fd);
        err_setf(err, XLLM_ERR_IO, "%s: %s", w->tmp, strerror(errno));
        goto fail;
    }
    unsigned char header[HEADER_SIZE] = {0}; /* placeholder; the real one is written last */
    if (wr(w, header, sizeof header, err)) goto fail;
    return w;
fail:
    xf_writer_abort(w);
    return NULL;
}

static xllm_status table_append(xf_writer *w, const void *p, size_t n, xllm_error *err) {
    if (n > SIZE_MAX - w->table_len || array_reserve(&w->table, &w->table_cap, w->table_len + n, 1, 4096))
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(w->table + w->table_len, p, n);
    w->table_len += n;
    return XLLM_OK;
}

xllm_status xf_writer_add(xf_writer *w, const char *name, dtype_t dtype, int group, int ndim, const int64_t *shape,
                          const void *data, size_t nbytes, xllm_error *err) {
    if (ndim < 1 || ndim > ST_MAX_DIMS)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "%s: %d dimensions", name, ndim);
    xllm_status st = pad_to(w, XF_ALIGN, err);
    if (st) return st;
    uint64_t offset = w->pos;
    if ((st = wr(w, data, nbytes, err))) return st;
    size_t name_len = strlen(name);
    unsigned char head[16];
    put_u32(head, (uint32_t)name_len);
    put_u32(head + 4, (uint32_t)dtype);
    put_u32(head + 8, (uint32_t)group);
    put_u32(head + 12, (uint32_t)ndim);
    if ((st = table_append(w, head, sizeof head, err))) return st;
    for (int i = 0; i < ndim; i++) {
        unsigned char d[8];
        put_u64(d, (uint64_t)shape[i]);
        if ((st = table_append(w, d, 8, err))) return st;
    }
    unsigned char loc[16];
    put_u64(loc, offset);
    put_u64(loc + 8, nbytes);
    if ((st = table_append(w, loc, sizeof loc, err))) return st;
    if ((st = table_append(w, name, name_len, err))) return st;
    static const unsigned char zeros[8];
    return table_append(w, zeros, (8 - name_len % 8) % 8, err);
}

xllm_status xf_writer_finish(xf_writer *w, const cJSON *meta, xllm_error *err) {
    char *meta_text = cJSON_PrintUnformatted(meta);
    xllm_status st = XLLM_OK;
    if (!meta_text) {
        st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory serializing metadata");
        goto fail;
    }
    size_t meta_len = strlen(meta_text);
    if ((st = pad_to(w, 8, err))) goto fail;
    uint64_t meta_off = w->pos;
    if ((st = wr(w, meta_text, meta_len, err))) goto fail;
    if ((st = pad_to(w, 8, err))) goto fail;
    uint64_t table_off = w->pos;
    if ((st = wr(w, w->table, w->table_len, err))) goto fail;
    uint64_t file_size = w->pos;

    XXH64_state_t *h = XXH64_createState();
    if (!h) {
        st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        goto fail;
    }
    XXH64_reset(h, 0);
    XXH64_update(h, meta_text, meta_len);
    XXH64_update(h, w->table, w->table_len);
    uint64_t sum = XXH64_digest(h);
    XXH64_freeState(h);

    unsigned char header[HEADER_SIZE] = {0};
    memcpy(header, XF_MAGIC, 8);
    put_u32(header + 8, XF_VERSION);
    put_u32(header + 12, HEADER_SIZE);
    put_u64(header + 16, meta_off);
    put_u64(header + 24, meta_len);
    put_u64(header + 32, table_off);
    put_u64(header + 40, w->table_len);
    put_u64(header + 48, file_size);
    put_u64(header + 56, sum);
    if (fseek(w->f, 0, SEEK_SET) != 0 || fwrite(header, 1, sizeof header, w->f) != sizeof header ||
        fflush(w->f) != 0 || fsync(fileno(w->f)) != 0) {
        st = err_setf(err, XLLM_ERR_IO, "%s: write failed: %s", w->tmp, strerror(errno));
        goto fail;
    }
    if (fclose(w->f) != 0) {
        w->f = NULL;
        st = err_setf(err, XLLM_ERR_IO, "%s: close failed: %s", w->tmp, strerror(errno));
        goto fail;
    }
    w->f = NULL;
    if (rename(w->tmp, w->dest) != 0) {
        st = err_setf(err, XLLM_ERR_IO, "%s: cannot rename into place: %s", w->dest, strerror(errno));
        goto fail;
    }
    tmpfile_forget(w->tmp);
    w->tmp[0] = 0; /* nothing to clean up */
    cJSON_free(meta_text);
    xf_writer_abort(w);
    return XLLM_OK;
fail:
    cJSON_free(meta_text);
    xf_writer_abort(w);
    return st;
}

void xf_writer_abort(xf_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    if (w->tmp && w->tmp[0]) {
        unlink(w->tmp);
        tmpfile_forget(w->tmp);
    }
    xllm_free(w->dest);
    xllm_free(w->tmp);
    xllm_free(w->table);
    xllm_free(w);
}

/* ---------------------------------------------------------------- reader */

int xf_is_xllm(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char magic[8];
    int ok = fread(magic, 1, 8, f) == 8 && memcmp(magic, XF_MAGIC, 8) == 0;
    fclose(f);
    return ok;
}

static xllm_status parse_table(st_archive *a, const char *label, const unsigned char *map, size_t size,
                               const unsigned char *p, size_t len, xllm_error *err) {
    const unsigned char *end = p + len;
    size_t index = 0;
    char name[1024];
    while (p < end) {
        if ((size_t)(end - p) < 16) return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor table entry %zu truncated", label, index);
        uint32_t name_len = get_u32(p), dtype = get_u32(p + 4), group = get_u32(p + 8), ndim = get_u32(p + 12);
        p += 16;
        if (ndim < 1 || ndim > ST_MAX_DIMS || name_len == 0 || name_len >= sizeof name)
            return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor table entry %zu is malformed", label, index);
        size_t need = 8 * (size_t)ndim + 16 + name_len + (8 - name_len % 8) % 8;
        if ((size_t)(end - p) < need)
            return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor table entry %zu truncated", label, index);
        st_tensor t;
        memset(&t, 0, sizeof t);
        t.ndim = (int)ndim;
        uint64_t nelem = 1;
        int overflow = 0;
        for (uint32_t i = 0; i < ndim; i++) {
            uint64_t d = get_u64(p + 8 * i);
            if (d > ((uint64_t)1 << 40)) overflow = 1;
            t.shape[i] = (int64_t)d;
            if (d && nelem > UINT64_MAX / d) overflow = 1;
            else nelem *= d;
        }
        p += 8 * ndim;
        uint64_t off = get_u64(p), nbytes = get_u64(p + 8);
        p += 16;
        memcpy(name, p, name_len);
        name[name_len] = 0;
        p += name_len + (8 - name_len % 8) % 8;
        if (dtype >= XLLM_DT_COUNT)
            return err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: tensor %s has unknown type code %u (written by a newer xllm?)",
                               label, name, dtype);
        t.dtype = (dtype_t)dtype;
        t.group = (int)group;
        uint64_t want;
        if (dtype_is_quant(t.dtype)) {
            int64_t cols = t.shape[ndim - 1];
            if (overflow || !quant_format_ok(t.dtype, t.group, cols))
                return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor %s: bad quantized shape/group", label, name);
            want = (nelem / (uint64_t)cols) * quant_row_bytes(t.dtype, t.group, cols);
        } else {
            if (overflow || nelem > UINT64_MAX / 8)
                return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor %s: shape overflows", label, name);
            want = nelem * dtype_size(t.dtype);
        }
        if (nbytes != want)
            return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor %s: %llu bytes stored, shape and type need %llu", label,
                               name, (unsigned long long)nbytes, (unsigned long long)want);
        if (off % XF_ALIGN || off < HEADER_SIZE || off > size || nbytes > size - off)
            return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor %s: data [%llu, +%llu) is outside the file or unaligned",
                               label, name, (unsigned long long)off, (unsigned long long)nbytes);
        t.name = name;
        t.data = map + off;
        t.nbytes = (size_t)nbytes;
        t.file = label;
        xllm_status st = st_archive_add(a, &t, err);
        if (st) return st;
        index++;
    }
    return XLLM_OK;
}

/* No two regions of the file alias: the tensors' data, the metadata and the
 * tensor table each own their bytes (the header is below every offset
 * already). A tensor whose range covers another's, or the metadata's, would
 * read bytes meant as something else. Sorted by start; empty ranges own
 * nothing. */
typedef struct { uint64_t start, end; const char *what; int tensor; } extent;

static int cmp_extent(const void *a, const void *b) {
    const extent *x = a, *y = b;
    return (x->start > y->start) - (x->start < y->start);
}

static xllm_status check_extents(const st_archive *a, const char *label, const unsigned char *map, uint64_t meta_off,
                                 uint64_t meta_len, uint64_t table_off, uint64_t table_len, xllm_error *err) {
    size_t n = st_count(a);
    extent *x = mem_malloc_array(n + 2, sizeof *x);
    if (!x) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", label);
    size_t k = 0;
    x[k++] = (extent){meta_off, meta_off + meta_len, "the metadata", 0};
    x[k++] = (extent){table_off, table_off + table_len, "the tensor table", 0};
    for (size_t i = 0; i < n; i++) {
        const st_tensor *t = st_at(a, i);
        uint64_t off = (uint64_t)((const unsigned char *)t->data - map);
        x[k++] = (extent){off, off + t->nbytes, t->name, 1};
    }
    qsort(x, k, sizeof *x, cmp_extent);
    xllm_status st = XLLM_OK;
    size_t last = SIZE_MAX; /* the non-empty extent reaching furthest so far */
    for (size_t i = 0; i < k && !st; i++) {
        if (x[i].end == x[i].start) continue;
        if (last != SIZE_MAX && x[i].start < x[last].end)
            st = err_setf(err, XLLM_ERR_FORMAT, "%s: %s%s and %s%s overlap in the file", label,
                             x[last].tensor ? "tensor " : "", x[last].what, x[i].tensor ? "tensor " : "", x[i].what);
        if (last == SIZE_MAX || x[i].end > x[last].end) last = i;
    }
    xllm_free(x);
    return st;
}

st_archive *xf_open(const char *path, cJSON **meta, xllm_error *err) {
    *meta = NULL;
    st_archive *a = st_archive_new(err);
    if (!a) return NULL;
    const unsigned char *map;
    size_t size;
    const char *label;
    xllm_status st = st_archive_map(a, path, &map, &size, &label, err);
    if (st) goto fail;
    if (size < HEADER_SIZE || memcmp(map, XF_MAGIC, 8) != 0) {
        err_setf(err, XLLM_ERR_FORMAT, "%s: not an .xllm file (bad magic)", path);
        goto fail;
    }
    uint32_t version = get_u32(map + 8);
    if (version > XF_VERSION) {
        err_setf(err, XLLM_ERR_UNSUPPORTED,
                    "%s: format version %u is newer than this xllm reads (%d): upgrade xllm", path, version, XF_VERSION);
        goto fail;
    }
    if (version == 0 || get_u32(map + 12) != HEADER_SIZE) {
        err_setf(err, XLLM_ERR_FORMAT, "%s: corrupt header", path);
        goto fail;
    }
    uint64_t meta_off = get_u64(map + 16), meta_len = get_u64(map + 24), table_off = get_u64(map + 32),
             table_len = get_u64(map + 40), file_size = get_u64(map + 48), sum = get_u64(map + 56);
    if (file_size != size) {
        err_setf(err, XLLM_ERR_FORMAT, "%s: file is %zu bytes but its header says %llu (truncated or appended to)",
                    path, size, (unsigned long long)file_size);
        goto fail;
    }
    if (meta_off < HEADER_SIZE || meta_off > size || meta_len > size - meta_off || table_off > size ||
        table_len > size - table_off) {
        err_setf(err, XLLM_ERR_FORMAT, "%s: metadata or tensor table lies outside the file", path);
        goto fail;
    }
    /* the metadata and the table apart (the archive is still empty; every tensor is checked once read) */
    if ((st = check_extents(a, label, map, meta_off, meta_len, table_off, table_len, err))) goto fail;
    XXH64_state_t *h = XXH64_createState();
    if (!h) {
        err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
        goto fail;
    }
    XXH64_reset(h, 0);
    XXH64_update(h, map + meta_off, (size_t)meta_len);
    XXH64_update(h, map + table_off, (size_t)table_len);
    uint64_t got = XXH64_digest(h);
    XXH64_freeState(h);
    if (got != sum) {
        err_setf(err, XLLM_ERR_FORMAT, "%s: metadata checksum mismatch (file corrupt)", path);
        goto fail;
    }
    if (json_has_nul((const char *)map + meta_off, (size_t)meta_len)) {
        err_setf(err, XLLM_ERR_FORMAT, "%s: metadata: a string holds a NUL character (\\u0000)", path);
        goto fail;
    }
    *meta = cJSON_ParseWithLength((const char *)map + meta_off, (size_t)meta_len);
    if (!*meta && json_well_formed((const char *)map + meta_off, (size_t)meta_len)) {
        err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory parsing the metadata", path);
        goto fail;
    }
    if (!*meta || !cJSON_IsObject(*meta)) {
        err_setf(err, XLLM_ERR_FORMAT, "%s: metadata is not a JSON object", path);
        goto fail;
    }
    if ((st = parse_table(a, label, map, size, map + table_off, (size_t)table_len, err))) goto fail;
    if ((st = st_archive_seal(a, err))) goto fail;
    if ((st = check_extents(a, label, map, meta_off, meta_len, table_off, table_len, err))) goto fail;
    return a;
fail:
    if (err && err->code == XLLM_OK) err_setf(err, XLLM_ERR_FORMAT, "%s: cannot open", path);
    cJSON_Delete(*meta);
    *meta = NULL;
    st_close(a);
    return NULL;
}
