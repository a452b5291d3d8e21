/*
 * tmpfile.h - the temporary files a writer creates next to its destination
 * ("<dest>.tmpXXXXXX", renamed into place when complete), made with the usual
 * mode (0644 less the umask) and remembered in a process-wide table, so that
 * a signal handler can remove them (xllm_remove_temp_files in xllm.h) when
 * the process is interrupted half-way.
 */
#ifndef XLLM_BASE_TMPFILE_H
#define XLLM_BASE_TMPFILE_H

#include <stddef.h>

/* Create "<dest>.tmpXXXXXX" (written into tmp, cap bytes; O_EXCL, a fresh
 * name) with mode 0644 less the umask, and remember it. Returns the open
 * descriptor, or -1 with errno set (tmp[0] is then 0). Thread-safe. */
int tmpfile_create(const char *dest, char *tmp, size_t cap);

/* Remember an existing path as temporary (e.g. a scratch file); forget one
 * that was renamed into place or removed. Unknown paths are ignored by
 * forget; a full table (64 entries) means the path is not remembered.
 * Thread-safe. */
void tmpfile_remember(const char *path);
void tmpfile_forget(const char *path);

#endif
