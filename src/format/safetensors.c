/*
 * safetensors.c - zero-copy reader for safetensors checkpoints (see safetensors.h).
 *
 * Each file (a single model.safetensors, or every distinct shard named in
 * model.safetensors.index.json) is mmap-ed read-only whole and its fd closed.
 * The JSON header is copied out, parsed with cJSON and checked completely:
 * dtype names, shapes (non-negative integer dims, at most ST_MAX_DIMS),
 * data_offsets inside the data region, byte size == product(shape) * dtype
 * size (overflow-checked), and no two tensors of a file overlapping. A tensor
 * is then just a pointer into its file's mapping.
 *
 * All tensors of all files live in one array sorted by name, so lookup is a
 * binary search and duplicate names (within a file or across shards) show up
 * as neighbours. Any failure during open tears the partial archive down with
 * st_close, so every error path releases everything.
 */
#include "format/safetensors.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"
#include "base/file.h"
#include "base/progress.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A header larger than this is treated as corrupt (real ones are < a few MB). */
#define ST_MAX_HEADER ((uint64_t)100 << 20)
/* Largest integer a JSON number (a double) holds exactly. */
#define ST_MAX_JSON_INT 9007199254740992.0

typedef struct st_file {
    char *path;           /* as opened; st_tensor.file points here */
    char *shard;          /* name in the index's weight_map, or NULL */
    unsigned char *map;
    size_t size;
} st_file;

struct st_archive {
    st_file *files;
    size_t n_files, cap_files;
    st_tensor *tensors;   /* sorted by name once open completes */
    size_t n, cap;
};

/* ------------------------------------------------------------------ helpers */

void st_release_pages(const st_archive *a, const void *p, size_t n) {
    if (!a || !p || !n) return;
    /* the loader releases a matrix once it holds its packed copy: the load's progress (base/progress.h) */
    if (load_progress_wants_total(a)) {
        double total = 0;
        for (size_t i = 0; i < a->n; i++) total += (double)a->tensors[i].nbytes;
        load_progress_set_total(a, total);
    }
    load_progress_add(a, (double)n);
    const unsigned char *b = p, *e = b + n;
    for (size_t i = 0; i < a->n_files; i++) {
        const unsigned char *m = a->files[i].map;
        if (!m || b < m || e > m + a->files[i].size) continue;
        long ps = sysconf(_SC_PAGESIZE);
        uintptr_t pb = ((uintptr_t)b + (uintptr_t)ps - 1) & ~((uintptr_t)ps - 1), pe = (uintptr_t)e & ~((uintptr_t)ps - 1);
        if (ps > 0 && pe > pb) madvise((void *)pb, pe - pb, MADV_DONTNEED);
        return;
    }
}

static int has_suffix(const char *s, const char *suffix) {
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

/* dir + "/" + name, heap-allocated (NULL on out of memory). */
static char *join_path(const char *dir, const char *name) {
    size_t dl = strlen(dir), nl = strlen(name);
    while (dl > 1 && dir[dl - 1] == '/') dl--;
    char *p = mem_malloc(dl + 1 + nl + 1);
    if (!p) return NULL;
    memcpy(p, dir, dl);
    p[dl] = '/';
    memcpy(p + dl + 1, name, nl + 1);
    return p;
}

/* The directory part of path ("." when there is none). */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return mem_strdup(".");
    if (slash == path) return mem_strdup("/");
    return mem_strndup(path, (size_t)(slash - path));
}

/* A JSON number that is a non-negative integer exactly representable. */
static int json_to_u64(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!(d >= 0.0 && d <= ST_MAX_JSON_INT)) return 0; /* also rejects NaN */
    uint64_t v = (uint64_t)d;
    if ((double)v != d) return 0;
    *out = v;
    return 1;
}

static int parse_dtype(const char *s, dtype_t *out) {
    for (int t = 0; t <= XLLM_DT_BOOL; t++) { /* plain element types only */
        if (strcmp(s, dtype_name((dtype_t)t)) == 0) {
            *out = (dtype_t)t;
            return 1;
        }
    }
    return 0;
}

static int cmp_name(const void *x, const void *y) {
    const st_tensor *a = x, *b = y;
    return strcmp(a->name, b->name);
}

static int cmp_data(const void *x, const void *y) {
    const st_tensor *a = *(const st_tensor *const *)x, *b = *(const st_tensor *const *)y;
    const unsigned char *pa = a->data, *pb = b->data;
    if (pa != pb) return pa < pb ? -1 : 1;
    return a->nbytes < b->nbytes ? -1 : a->nbytes > b->nbytes;
}

/* ------------------------------------------------------------------ mapping */

/* mmap path whole and append it to a->files; *out points at the new entry. */
static xllm_status map_file(st_archive *a, const char *path, st_file **out, xllm_error *err) {
    if (array_reserve(&a->files, &a->cap_files, a->n_files + 1, sizeof *a->files, 4))
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    char *copy = mem_strdup(path);
    if (!copy) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        xllm_free(copy);
        return err_setf(err, XLLM_ERR_IO, "%s: cannot open: %s", path, strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        xllm_free(copy);
        return err_setf(err, XLLM_ERR_IO, "%s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    if (size < 8) {
        close(fd);
        xllm_free(copy);
        return err_setf(err, XLLM_ERR_FORMAT, "%s: file too short (%zu bytes) to hold a header", path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) {
        xllm_free(copy);
        return err_setf(err, XLLM_ERR_IO, "%s: cannot mmap %zu bytes: %s", path, size, strerror(e));
    }
    st_file *f = &a->files[a->n_files++];
    f->path = copy;
    f->shard = NULL;
    f->map = map;
    f->size = size;
    *out = f;
    return XLLM_OK;
}

/* ------------------------------------------------------------------ parsing */

static xllm_status add_tensor(st_archive *a, const st_file *f, const char *name, xllm_error *err,
                              st_tensor **out) {
    if (array_reserve(&a->tensors, &a->cap, a->n + 1, sizeof *a->tensors, 64))
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", f->path);
    char *copy = mem_strdup(name);
    if (!copy) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", f->path);
    st_tensor *t = &a->tensors[a->n++];
    memset(t, 0, sizeof *t);
    t->name = copy;
    t->file = f->path;
    *out = t;
    return XLLM_OK;
}

/* One "name": {"dtype", "shape", "data_offsets"} entry of f's header. */
static xllm_status parse_entry(st_archive *a, const st_file *f, const cJSON *item,
                               const unsigned char *data, size_t data_len, xllm_error *err) {
    const char *path = f->path, *name = item->string;
    if (!cJSON_IsObject(item))
        return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor '%s': entry is not a JSON object", path, name);

    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!jd) return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor '%s': missing \"dtype\"", path, name);
    if (!js) return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor '%s': missing \"shape\"", path, name);
    if (!jo)
        return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor '%s': missing \"data_offsets\"", path, name);

    if (!cJSON_IsString(jd))
        return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor '%s': \"dtype\" is not a string", path, name);
    dtype_t dt;
    if (!parse_dtype(jd->valuestring, &dt))
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "%s: tensor '%s': unsupported dtype '%s'", path,
                           name, jd->valuestring);

    if (!cJSON_IsArray(js))
        return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor '%s': \"shape\" is not an array", path, name);
    int ndim = cJSON_GetArraySize(js);
    if (ndim > ST_MAX_DIMS)
        return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor '%s': shape has too many dims (%d > %d)", path,
                           name, ndim, ST_MAX_DIMS);
    int64_t shape[ST_MAX_DIMS];
    uint64_t nelem = 1;
    int overflow = 0, i = 0;
    const cJSON *jdim;
    cJSON_ArrayForEach(jdim, js) {
        uint64_t d;
        if (!json_to_u64(jdim, &d))
            return err_setf(err, XLLM_ERR_FORMAT,
                               "%s: tensor '%s': shape dim %d is not a non-negative integer", path, name, i);
        shape[i++] = (int64_t)d;
    }
    for (i = 0; i < ndim; i++) { /* a zero dim makes the product 0 even after an "overflow" */
        uint64_t d = (uint64_t)shape[i];
        if (d == 0) { nelem = 0; overflow = 0; break; }
        if (nelem > UINT64_MAX / d) overflow = 1;
        else nelem *= d;
    }
    size_t esize = dtype_size(dt);
    if (overflow || nelem > UINT64_MAX / esize)
        return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor '%s': shape size overflows", path, name);
    uint64_t want = nelem * esize;

    uint64_t begin, end;
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 || !json_to_u64(cJSON_GetArrayItem(jo, 0), &begin) ||
        !json_to_u64(cJSON_GetArrayItem(jo, 1), &end))
        return err_setf(err, XLLM_ERR_FORMAT,
                           "%s: tensor '%s': \"data_offsets\" is not [begin, end] of non-negative integers",
                           path, name);
    if (begin > end)
        return err_setf(err, XLLM_ERR_FORMAT,
                           "%s: tensor '%s': data_offsets begin %" PRIu64 " > end %" PRIu64, path, name,
                           begin, end);
    if (end > data_len)
        return err_setf(err, XLLM_ERR_FORMAT,
                           "%s: tensor '%s': data_offsets end %" PRIu64 " beyond the data region (%zu bytes)",
                           path, name, end, data_len);
    if (end - begin != want)
        return err_setf(err, XLLM_ERR_FORMAT,
                           "%s: tensor '%s': data size %" PRIu64 " bytes does not match shape and dtype %s "
                           "(%" PRIu64 " bytes)", path, name, end - begin, dtype_name(dt), want);

    st_tensor *t = NULL;
    xllm_status st = add_tensor(a, f, name, err, &t);
    if (st) return st;
    t->dtype = dt;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof shape[0]);
    t->data = data + begin;
    t->nbytes = (size_t)want;
    return XLLM_OK;
}

/* Tensors [first, a->n) all belong to f: no two may share a byte. */
static xllm_status check_overlaps(const st_archive *a, size_t first, const st_file *f, xllm_error *err) {
    size_t n = a->n - first;
    if (n < 2) return XLLM_OK;
    const st_tensor **v = mem_malloc_array(n, sizeof *v);
    if (!v) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", f->path);
    for (size_t i = 0; i < n; i++) v[i] = &a->tensors[first + i];
    qsort(v, n, sizeof *v, cmp_data);
    xllm_status st = XLLM_OK;
    const st_tensor *last = NULL; /* the non-empty tensor reaching furthest so far */
    for (size_t i = 0; i < n; i++) {
        const st_tensor *t = v[i];
        if (t->nbytes == 0) continue;
        const unsigned char *b = t->data;
        if (last && b < (const unsigned char *)last->data + last->nbytes) {
            const unsigned char *base = f->map;
            st = err_setf(err, XLLM_ERR_FORMAT,
                             "%s: tensors '%s' and '%s' overlap (bytes %td..%td and %td..%td of the file)",
                             f->path, last->name, t->name, (const unsigned char *)last->data - base,
                             (const unsigned char *)last->data + last->nbytes - base, b - base,
                             b + t->nbytes - base);
            break;
        }
        if (!last || b + t->nbytes > (const unsigned char *)last->data + last->nbytes) last = t;
    }
    xllm_free(v);
    return st;
}

/* Validate f's header and append its tensors. */
static xllm_status parse_file(st_archive *a, const st_file *f, xllm_error *err) {
    const char *path = f->path;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->map[i];
    if (hlen > ST_MAX_HEADER)
        return err_setf(err, XLLM_ERR_FORMAT,
                           "%s: header length %" PRIu64 " is too large (limit %" PRIu64 " bytes); not a "
                           "safetensors file?", path, hlen, ST_MAX_HEADER);
    if (hlen > f->size - 8)
        return err_setf(err, XLLM_ERR_FORMAT,
                           "%s: header length %" PRIu64 " runs beyond the end of the file (%zu bytes)", path,
                           hlen, f->size);
    size_t hl = (size_t)hlen;
    const unsigned char *data = f->map + 8 + hl;
    size_t data_len = f->size - 8 - hl;

    /* Parse a NUL-terminated copy so cJSON can never read past the mapping. */
    char *text = mem_malloc(hl + 1);
    if (!text) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory for header", path);
    memcpy(text, f->map + 8, hl);
    text[hl] = 0;
    if (json_has_nul(text, hl)) { /* a tensor name cut at a NUL would be another name */
        xllm_free(text);
        return err_setf(err, XLLM_ERR_FORMAT, "%s: header: a string holds a NUL character (\\u0000)", path);
    }
    const char *end = NULL;
    cJSON *root = hl ? cJSON_ParseWithLengthOpts(text, hl, &end, 0) : NULL;
    if (root) { /* only (space) padding may follow the JSON value */
        for (const char *p = end; p < text + hl; p++) {
            if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
                cJSON_Delete(root);
                root = NULL;
                end = p;
                break;
            }
        }
    }
    if (!root && hl && json_well_formed(text, hl)) { /* then cJSON ran out of memory */
        xllm_free(text);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory parsing the header", path);
    }
    if (!root) {
        size_t off = end && end >= text ? (size_t)(end - text) : 0;
        xllm_free(text);
        return err_setf(err, XLLM_ERR_FORMAT, "%s: header is not valid JSON (near byte %zu of %zu)", path,
                           off, hl);
    }
    xllm_free(text);

    xllm_status st = XLLM_OK;
    if (!cJSON_IsObject(root)) {
        st = err_setf(err, XLLM_ERR_FORMAT, "%s: header is not a JSON object", path);
        goto done;
    }
    size_t first = a->n;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        if (strcmp(item->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(item)) {
                st = err_setf(err, XLLM_ERR_FORMAT, "%s: \"__metadata__\" is not a JSON object", path);
                goto done;
            }
            const cJSON *m;
            cJSON_ArrayForEach(m, item) {
                if (!cJSON_IsString(m)) {
                    st = err_setf(err, XLLM_ERR_FORMAT, "%s: \"__metadata__\" value '%s' is not a string",
                                     path, m->string);
                    goto done;
                }
            }
            continue;
        }
        st = parse_entry(a, f, item, data, data_len, err);
        if (st) goto done;
    }
    st = check_overlaps(a, first, f, err);
done:
    cJSON_Delete(root);
    return st;
}

/* Sort all tensors by name and reject duplicates. */
static xllm_status finish(st_archive *a, xllm_error *err) {
    if (a->n > 1) qsort(a->tensors, a->n, sizeof *a->tensors, cmp_name);
    for (size_t i = 1; i < a->n; i++) {
        const st_tensor *p = &a->tensors[i - 1], *t = &a->tensors[i];
        if (strcmp(p->name, t->name) == 0) {
            if (p->file == t->file)
                return err_setf(err, XLLM_ERR_FORMAT, "%s: duplicate tensor name '%s'", t->file, t->name);
            return err_setf(err, XLLM_ERR_FORMAT, "duplicate tensor name '%s' in %s and %s", t->name,
                               p->file, t->file);
        }
    }
    return XLLM_OK;
}

static xllm_status open_single(st_archive *a, const char *path, xllm_error *err) {
    st_file *f;
    xllm_status st = map_file(a, path, &f, err);
    if (!st) st = parse_file(a, f, err);
    if (!st) st = finish(a, err);
    return st;
}

static st_file *find_shard(const st_archive *a, const char *shard) {
    for (size_t i = a->n_files; i-- > 0;) /* newest first: weight_map is usually grouped */
        if (a->files[i].shard && strcmp(a->files[i].shard, shard) == 0) return &a->files[i];
    return NULL;
}

static xllm_status open_index(st_archive *a, const char *index_path, xllm_error *err) {
    cJSON *doc;
    xllm_status st = json_file_load(index_path, &doc, err);
    if (st) return st;
    char *dir = dir_of(index_path);
    if (!dir) {
        cJSON_Delete(doc);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", index_path);
    }
    const cJSON *wm = NULL, *e;
    if (!cJSON_IsObject(doc)) {
        st = err_setf(err, XLLM_ERR_FORMAT, "%s: not a JSON object", index_path);
        goto done;
    }
    wm = cJSON_GetObjectItemCaseSensitive(doc, "weight_map");
    if (!wm) {
        st = err_setf(err, XLLM_ERR_FORMAT, "%s: missing \"weight_map\"", index_path);
        goto done;
    }
    if (!cJSON_IsObject(wm) || !wm->child) {
        st = err_setf(err, XLLM_ERR_FORMAT, "%s: \"weight_map\" is not a non-empty JSON object", index_path);
        goto done;
    }

    /* Map and parse each distinct shard once. */
    cJSON_ArrayForEach(e, wm) {
        if (!cJSON_IsString(e) || !e->valuestring[0]) {
            st = err_setf(err, XLLM_ERR_FORMAT, "%s: weight_map entry '%s' is not a shard file name",
                             index_path, e->string);
            goto done;
        }
        if (find_shard(a, e->valuestring)) continue;
        char *shard_path = join_path(dir, e->valuestring);
        char *shard = mem_strdup(e->valuestring);
        st_file *f = NULL;
        if (!shard_path || !shard) st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", index_path);
        else st = map_file(a, shard_path, &f, err);
        xllm_free(shard_path);
        if (st) {
            xllm_free(shard);
            if (st == XLLM_ERR_IO) err_prefix(err, "%s: shard '%s' of weight_map", index_path, e->valuestring);
            goto done;
        }
        f->shard = shard;
        st = parse_file(a, f, err);
        if (st) goto done;
    }
    st = finish(a, err);
    if (st) goto done;

    /* Every tensor the index promises must be in the shard it names. */
    cJSON_ArrayForEach(e, wm) {
        const st_tensor *t = st_find(a, e->string);
        const st_file *f = find_shard(a, e->valuestring);
        if (!t) {
            st = err_setf(err, XLLM_ERR_FORMAT, "%s: tensor '%s' listed in weight_map is missing from shard %s",
                             index_path, e->string, f->path);
            goto done;
        }
        if (t->file != f->path) {
            st = err_setf(err, XLLM_ERR_FORMAT,
                             "%s: tensor '%s' listed in weight_map under shard %s is missing from it (found in %s)",
                             index_path, e->string, f->path, t->file);
            goto done;
        }
    }
done:
    xllm_free(dir);
    cJSON_Delete(doc);
    return st;
}

/* ------------------------------------------------------------------ public */

st_archive *st_open(const char *path, xllm_error *err) {
    if (!path) {
        err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "st_open: path is NULL");
        return NULL;
    }
    st_archive *a = mem_calloc(1, sizeof *a);
    if (!a) {
        err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        return NULL;
    }
    xllm_status st;
    if (file_is_dir(path)) {
        char *single = join_path(path, "model.safetensors");
        char *index = join_path(path, "model.safetensors.index.json");
        if (!single || !index) st = err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        else if (path_exists(single)) st = open_single(a, single, err);
        else if (path_exists(index)) st = open_index(a, index, err);
        else
            st = err_setf(err, XLLM_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json in directory",
                             path);
        xllm_free(single);
        xllm_free(index);
    } else if (has_suffix(path, ".index.json")) {
        st = open_index(a, path, err);
    } else {
        st = open_single(a, path, err);
    }
    if (st) {
        st_close(a);
        return NULL;
    }
    return a;
}

void st_close(st_archive *a) {
    if (!a) return;
    for (size_t i = 0; i < a->n; i++) xllm_free((void *)a->tensors[i].name);
    xllm_free(a->tensors);
    for (size_t i = 0; i < a->n_files; i++) {
        munmap(a->files[i].map, a->files[i].size);
        xllm_free(a->files[i].path);
        xllm_free(a->files[i].shard);
    }
    xllm_free(a->files);
    xllm_free(a);
}

const st_tensor *st_find(const st_archive *a, const char *name) {
    if (!a || !name) return NULL;
    size_t lo = 0, hi = a->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(a->tensors[mid].name, name);
        if (c == 0) return &a->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

size_t st_count(const st_archive *a) { return a ? a->n : 0; }

const st_tensor *st_at(const st_archive *a, size_t i) { return a && i < a->n ? &a->tensors[i] : NULL; }

/* ------------------------------------------------------- builder (other formats) */

st_archive *st_archive_new(xllm_error *err) {
    st_archive *a = mem_calloc(1, sizeof *a);
    if (!a) err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    return a;
}

xllm_status st_archive_map(st_archive *a, const char *path, const unsigned char **map, size_t *size,
                           const char **label, xllm_error *err) {
    st_file *f = NULL;
    xllm_status st = map_file(a, path, &f, err);
    if (st) return st;
    *map = f->map;
    *size = f->size;
    *label = f->path;
    return XLLM_OK;
}

xllm_status st_archive_add(st_archive *a, const st_tensor *src, xllm_error *err) {
    const st_file *f = NULL;
    for (size_t i = 0; i < a->n_files && !f; i++)
        if (a->files[i].path == src->file) f = &a->files[i];
    if (!f) return err_setf(err, XLLM_ERR_INTERNAL, "st_archive_add: tensor %s is not in a mapped file", src->name);
    const unsigned char *p = src->data;
    if (p < f->map || src->nbytes > f->size || (size_t)(p - f->map) > f->size - src->nbytes)
        return err_setf(err, XLLM_ERR_FORMAT, "%s: tensor '%s' lies outside the file", f->path, src->name);
    st_tensor *t;
    xllm_status st = add_tensor(a, f, src->name, err, &t);
    if (st) return st;
    const char *name = t->name;
    *t = *src;
    t->name = name;
    t->file = f->path;
    return XLLM_OK;
}

xllm_status st_archive_seal(st_archive *a, xllm_error *err) { return finish(a, err); }
