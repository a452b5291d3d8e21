/*
 * tmpfile.c - the table of live temporary files (see tmpfile.h).
 *
 * A fixed array of slots, so that the signal handler path
 * (xllm_remove_temp_files) needs no allocation and no lock: a slot's path is
 * written completely before its `used` flag is set (release), and the handler
 * reads the flag (acquire) before the path; unlink is async-signal-safe.
 * Registration and removal take a mutex among themselves.
 */
#include "base/tmpfile.h"
#include "xllm.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TMP_SLOTS 64
#define TMP_PATH_MAX 4352

static struct {
    atomic_int used;
    char path[TMP_PATH_MAX];
} g_slots[TMP_SLOTS];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

void tmpfile_remember(const char *path) {
    if (!path || strlen(path) >= TMP_PATH_MAX) return;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < TMP_SLOTS; i++) {
        if (atomic_load_explicit(&g_slots[i].used, memory_order_relaxed)) continue;
        memcpy(g_slots[i].path, path, strlen(path) + 1);
        atomic_store_explicit(&g_slots[i].used, 1, memory_order_release);
        break;
    }
    pthread_mutex_unlock(&g_lock);
}

void tmpfile_forget(const char *path) {
    if (!path || !path[0]) return;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < TMP_SLOTS; i++)
        if (atomic_load_explicit(&g_slots[i].used, memory_order_relaxed) && !strcmp(g_slots[i].path, path)) {
            atomic_store_explicit(&g_slots[i].used, 0, memory_order_release);
            break;
        }
    pthread_mutex_unlock(&g_lock);
}

int tmpfile_create(const char *dest, char *tmp, size_t cap) {
    if (snprintf(tmp, cap, "%s.tmpXXXXXX", dest) >= (int)cap) {
        tmp[0] = 0;
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        tmp[0] = 0;
        errno = e;
        return -1;
    }
    /* mkstemp makes 0600; an output file gets the usual rw-r--r-- */
    (void)fchmod(fd, 0644); /* not fatal if refused: the file is still ours */
    tmpfile_remember(tmp);
    return fd;
}

void xllm_remove_temp_files(void) {
    for (int i = 0; i < TMP_SLOTS; i++)
        if (atomic_load_explicit(&g_slots[i].used, memory_order_acquire)) {
            unlink(g_slots[i].path);
            atomic_store_explicit(&g_slots[i].used, 0, memory_order_relaxed);
        }
}
