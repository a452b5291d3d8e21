/*
 * file.h - whole-file reads and JSON documents with error messages that name
 * the file. JSON is parsed by cJSON (Debian libcjson-dev).
 */
#ifndef XLLM_BASE_FILE_H
#define XLLM_BASE_FILE_H

#include <stddef.h>
#include <cjson/cJSON.h>
#include "xllm.h"

/* Read a whole file; *data is NUL-terminated, free with xllm_free. */
xllm_status file_read_all(const char *path, char **data, size_t *len, xllm_error *err);
/* Parse a JSON file; free *out with cJSON_Delete. */
xllm_status json_file_load(const char *path, cJSON **out, xllm_error *err);
/* Is text[0..len) one well-formed JSON value (cJSON's grammar, nesting up to
 * cJSON's limit), with only whitespace after it? Allocates nothing: when
 * cJSON fails on a text this accepts, the failure was out of memory (cJSON
 * does not say), so callers report XLLM_ERR_OUT_OF_MEMORY, not bad JSON. */
int json_well_formed(const char *text, size_t len);
/* Does a string of the JSON text hold an escaped NUL (\u0000)? cJSON's
 * strings end at the first NUL, so a name or a template holding one would be
 * silently cut: loaders refuse such files instead. */
int json_has_nul(const char *text, size_t len);
int path_exists(const char *path);
int file_is_dir(const char *path);
/* dir + "/" + name into buf; returns buf. */
char *path_join(char *buf, size_t cap, const char *dir, const char *name);

#endif
