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
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
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
    size_t dl = strlen(dest);
    if (dl + sizeof ".tmpXXXXXX" > cap) {
        tmp[0] = 0;
        errno = ENAMETOOLONG;
        return -1;
    }
    /* mkstemp would make the file 0600 whatever the umask; open() with 0644
     * gives the usual rw-r--r-- less the umask, as any other output. The
     * name's six characters come from a counter, the pid and the clock,
     * mixed; O_EXCL makes a collision a retry. */
    static atomic_uint_fast64_t counter;
    static const char digits[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    for (int attempt = 0; attempt < 1000; attempt++) {
        uint64_t x = atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() << 32 ^
                     (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec * 0xBF58476D1CE4E5B9ull;
        x ^= x >> 31;
        x *= 0x94D049BB133111EBull;
        x ^= x >> 29;
        memcpy(tmp, dest, dl);
        memcpy(tmp + dl, ".tmp", 4);
        for (int i = 0; i < 6; i++, x /= 62) tmp[dl + 4 + i] = digits[x % 62];
        tmp[dl + 10] = 0;
        /* remembered before it exists: an interrupt right after open() must find it */
        tmpfile_remember(tmp);
        int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) return fd;
        int e = errno;
        tmpfile_forget(tmp);
        errno = e;
        if (errno != EEXIST) break;
    }
    int e = errno;
    tmp[0] = 0;
    errno = e;
    return -1;
}

void xllm_remove_temp_files(void) {
    for (int i = 0; i < TMP_SLOTS; i++)
        if (atomic_load_explicit(&g_slots[i].used, memory_order_acquire)) {
            unlink(g_slots[i].path);
            atomic_store_explicit(&g_slots[i].used, 0, memory_order_relaxed);
        }
}
