/* file.c - whole-file reads and JSON loading (see file.h). */
#include "base/file.h"
#include "base/alloc.h"
#include "base/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

xllm_status xllm_read_file(const char *path, char **data, size_t *len, xllm_error *err) {
    *data = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return xllm_errorf(err, XLLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return xllm_errorf(err, XLLM_ERR_IO, "%s: not a regular file", path);
    }
    size_t n = (size_t)st.st_size;
    char *buf = xllm_malloc(n + 1);
    if (!buf) {
        fclose(f);
        return xllm_errorf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory reading %zu bytes", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    if (got != n) {
        xllm_free(buf);
        return xllm_errorf(err, XLLM_ERR_IO, "%s: short read (%zu of %zu bytes)", path, got, n);
    }
    buf[n] = 0;
    *data = buf;
    if (len) *len = n;
    return XLLM_OK;
}

xllm_status xllm_json_load(const char *path, cJSON **out, xllm_error *err) {
    *out = NULL;
    char *text;
    size_t len;
    xllm_status st = xllm_read_file(path, &text, &len, err);
    if (st) return st;
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!doc) {
        size_t off = end ? (size_t)(end - text) : 0;
        size_t line = 1;
        for (size_t i = 0; i < off && i < len; i++) line += text[i] == '\n';
        xllm_free(text);
        return xllm_errorf(err, XLLM_ERR_FORMAT, "%s: invalid JSON near byte %zu (line %zu)", path, off, line);
    }
    xllm_free(text);
    *out = doc;
    return XLLM_OK;
}

int xllm_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int xllm_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

char *xllm_path_join(char *buf, size_t cap, const char *dir, const char *name) {
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/') dl--;
    snprintf(buf, cap, "%.*s/%s", (int)dl, dir, name);
    return buf;
}
