/*
 * xllm_file.h - the .xllm model file: one mmap-able file holding weights
 * (any dtype incl. block-quantized), config, tokenizer files, precision
 * policy and provenance. Specified in docs/FORMAT.md.
 *
 * Writing streams tensors into a temporary file next to the destination and
 * renames it into place only when complete, so an interrupted convert leaves
 * nothing at the destination. Reading maps the file, verifies the header,
 * sizes and the checksum of metadata + tensor table, and loads the tensor
 * table into an st_archive (zero copy).
 */
#ifndef XLLM_FORMAT_XLLM_FILE_H
#define XLLM_FORMAT_XLLM_FILE_H

#include <stdint.h>
#include <cjson/cJSON.h>
#include "format/safetensors.h"
#include "xllm.h"

#define XF_MAGIC "XLLM\r\n\x1a\n"
#define XF_VERSION 1
#define XF_ALIGN 64
/* Tensors named with this prefix are opaque byte blobs (U8), e.g. tokenizer files. */
#define XF_BLOB_PREFIX "__blob__/"

typedef struct xf_writer xf_writer;

xf_writer *xf_writer_open(const char *dest, xllm_error *err);
/* Append one tensor (data copied into the file now, aligned to XF_ALIGN). */
xllm_status xf_writer_add(xf_writer *w, const char *name, dtype_t dtype, int group, int ndim, const int64_t *shape,
                          const void *data, size_t nbytes, xllm_error *err);
/* Write metadata + table + header, fsync, rename into place; frees w. */
xllm_status xf_writer_finish(xf_writer *w, const cJSON *meta, xllm_error *err);
/* Remove the temporary file; frees w. */
void xf_writer_abort(xf_writer *w);

/* Is this path an .xllm file (by its magic)? */
int xf_is_xllm(const char *path);
/* Open an .xllm file: *meta (free with cJSON_Delete) and the tensor archive. */
st_archive *xf_open(const char *path, cJSON **meta, xllm_error *err);

#endif
