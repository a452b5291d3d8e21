/* file.c - whole-file reads and JSON loading (see file.h). */
#include "base/file.h"
#include "base/alloc.h"
#include "base/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

xllm_status file_read_all(const char *path, char **data, size_t *len, xllm_error *err) {
    *data = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return err_setf(err, XLLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return err_setf(err, XLLM_ERR_IO, "%s: not a regular file", path);
    }
    size_t n = (size_t)st.st_size;
    char *buf = mem_malloc(n + 1);
    if (!buf) {
        fclose(f);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory reading %zu bytes", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    if (got != n) {
        xllm_free(buf);
        return err_setf(err, XLLM_ERR_IO, "%s: short read (%zu of %zu bytes)", path, got, n);
    }
    buf[n] = 0;
    *data = buf;
    if (len) *len = n;
    return XLLM_OK;
}

xllm_status json_file_load(const char *path, cJSON **out, xllm_error *err) {
    *out = NULL;
    char *text;
    size_t len;
    xllm_status st = file_read_all(path, &text, &len, err);
    if (st) return st;
    if (json_has_nul(text, len)) {
        xllm_free(text);
        return err_setf(err, XLLM_ERR_FORMAT, "%s: a string holds a NUL character (\\u0000), which would cut it",
                           path);
    }
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!doc && json_well_formed(text, len)) {
        xllm_free(text);
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "%s: out of memory parsing JSON", path);
    }
    if (!doc) {
        size_t off = end ? (size_t)(end - text) : 0;
        size_t line = 1;
        for (size_t i = 0; i < off && i < len; i++) line += text[i] == '\n';
        xllm_free(text);
        return err_setf(err, XLLM_ERR_FORMAT, "%s: invalid JSON near byte %zu (line %zu)", path, off, line);
    }
    xllm_free(text);
    *out = doc;
    return XLLM_OK;
}

int path_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int file_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

char *path_join(char *buf, size_t cap, const char *dir, const char *name) {
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/') dl--;
    snprintf(buf, cap, "%.*s/%s", (int)dl, dir, name);
    return buf;
}

/* ------------------------------------------------ JSON well-formedness */

static const char *js_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static const char *js_string(const char *p, const char *e) { /* at '"' */
    for (p++; p < e; p++) {
        if (*p == '"') return p + 1;
        if ((unsigned char)*p < 0x20) return NULL;
        if (*p == '\\') {
            if (++p >= e) return NULL;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (p + i >= e || !strchr("0123456789abcdefABCDEF", p[i]) || !p[i]) return NULL;
                p += 4;
            } else if (!strchr("\"\\/bfnrt", *p) || !*p) {
                return NULL;
            }
        }
    }
    return NULL;
}

static const char *js_number(const char *p, const char *e) {
    const char *s = p;
    if (p < e && *p == '-') p++;
    if (p >= e || *p < '0' || *p > '9') return NULL;
    while (p < e && ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E' || *p == '+' || *p == '-')) p++;
    return p > s ? p : NULL;
}

int json_well_formed(const char *text, size_t len) {
    enum { MAX_DEPTH = 1000 }; /* cJSON's CJSON_NESTING_LIMIT */
    unsigned char stack[MAX_DEPTH]; /* 1 = object, 2 = array */
    int depth = 0;
    const char *p = text, *e = text + len;
    for (;;) {
        /* a value */
        p = js_ws(p, e);
        if (p >= e) return 0;
        if (*p == '{' || *p == '[') {
            if (depth >= MAX_DEPTH) return 0;
            stack[depth++] = *p == '{' ? 1 : 2;
            p = js_ws(p + 1, e);
            if (p < e && *p == (stack[depth - 1] == 1 ? '}' : ']')) {
                depth--;
                p++;
                goto after_value;
            }
            if (stack[depth - 1] == 1) {
                if (p >= e || *p != '"' || !(p = js_string(p, e))) return 0;
                p = js_ws(p, e);
                if (p >= e || *p != ':') return 0;
                p++;
            }
            continue;
        }
        if (*p == '"') p = js_string(p, e);
        else if (*p == '-' || (*p >= '0' && *p <= '9')) p = js_number(p, e);
        else if (e - p >= 4 && !memcmp(p, "true", 4)) p += 4;
        else if (e - p >= 5 && !memcmp(p, "false", 5)) p += 5;
        else if (e - p >= 4 && !memcmp(p, "null", 4)) p += 4;
        else return 0;
        if (!p) return 0;
    after_value:
        p = js_ws(p, e);
        if (!depth) return p == e || (p < e && *p == 0); /* cJSON stops at a NUL */
        if (p >= e) return 0;
        if (*p == ',') {
            p++;
            if (stack[depth - 1] == 1) {
                p = js_ws(p, e);
                if (p >= e || *p != '"' || !(p = js_string(p, e))) return 0;
                p = js_ws(p, e);
                if (p >= e || *p != ':') return 0;
                p++;
            }
            continue;
        }
        if (*p != (stack[depth - 1] == 1 ? '}' : ']')) return 0;
        depth--;
        p++;
        goto after_value;
    }
}

int json_has_nul(const char *text, size_t len) {
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (!in_str) {
            in_str = c == '"';
            continue;
        }
        if (c == '"') in_str = 0;
        else if (c == 0) return 1;
        else if (c == '\\' && i + 1 < len) {
            if (text[i + 1] == 'u' && i + 5 < len && !memcmp(text + i + 2, "0000", 4)) return 1;
            i++;
        }
    }
    return 0;
}
