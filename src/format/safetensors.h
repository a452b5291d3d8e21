/*
 * safetensors.h - read-only, zero-copy access to HuggingFace safetensors files.
 *
 * A checkpoint directory holds either model.safetensors or shards listed in
 * model.safetensors.index.json. Each file is mmap-ed whole; a tensor is a
 * pointer into the mapping (never copied). Headers are validated fully at open
 * (JSON shape, dtype names, offsets within the file, sizes matching shapes,
 * no overlaps) so later lookups cannot read out of range.
 */
#ifndef XLLM_FORMAT_SAFETENSORS_H
#define XLLM_FORMAT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "xllm.h"
#include "base/dtype.h"

#define ST_MAX_DIMS 8

typedef struct st_tensor {
    const char *name;        /* owned by the archive */
    dtype_t dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int group;               /* block-quantized types: elements per scale group (else 0) */
    const void *data;        /* points into the mmap */
    size_t nbytes;
    const char *file;        /* path of the file holding it (for messages) */
} st_tensor;

typedef struct st_archive st_archive;

/* Drop the pages wholly inside [p, p + n) from memory when that range lies in
 * one of a's file mappings (a tensor copied elsewhere, e.g. repacked): they
 * are read again from the file if touched. Anything else: no-op. */
void st_release_pages(const st_archive *a, const void *p, size_t n);

/* Open a directory (model.safetensors, or model.safetensors.index.json and its
 * shards) or a single .safetensors file. On failure returns NULL with an error
 * naming the file and the problem. */
st_archive *st_open(const char *path, xllm_error *err);
void st_close(st_archive *a);

/*
 * Building an archive from another container format (.xllm, GGUF): the
 * st_archive is the one tensor table every format loads into. Map files with
 * st_archive_map (the returned label is what st_tensor.file must point to),
 * add tensors whose data lies inside those maps, then seal (sort + reject
 * duplicate names).
 */
st_archive *st_archive_new(xllm_error *err);
xllm_status st_archive_map(st_archive *a, const char *path, const unsigned char **map, size_t *size,
                           const char **label, xllm_error *err);
xllm_status st_archive_add(st_archive *a, const st_tensor *t, xllm_error *err);
xllm_status st_archive_seal(st_archive *a, xllm_error *err);

/* NULL when absent. */
const st_tensor *st_find(const st_archive *a, const char *name);
size_t st_count(const st_archive *a);
const st_tensor *st_at(const st_archive *a, size_t i);

#endif
