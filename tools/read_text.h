/*
 * read_text.h - a whole file (or stdin for "-") read into memory, for the
 * commands that take a text, messages or template file. The tools link only
 * the public API, so this is their one reader (the library's is
 * base/file.h's file_read_all).
 */
#ifndef XLLM_TOOLS_READ_TEXT_H
#define XLLM_TOOLS_READ_TEXT_H

#include <stddef.h>

/* Read path ("-": stdin) into *out (malloc, NUL-terminated; free with free)
 * and its length into *len (when len is not NULL). 0 on success; else -1,
 * *out NULL, and *why says what failed: "cannot open", "out of memory" or
 * "cannot read", with the errno value in *errnum (0 for out of memory).
 * Not thread-safe when path is "-" (stdin). */
int read_text_file(const char *path, char **out, size_t *len, const char **why, int *errnum);

#endif
