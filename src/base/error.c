/* error.c - formatting of xllm_error messages (see error.h). */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

xllm_status err_setf(xllm_error *err, xllm_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

void err_prefix(xllm_error *err, const char *fmt, ...) {
    if (!err) return;
    char prefix[512], old[sizeof err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->message, sizeof old);
    size_t pl = strlen(prefix);
    if (pl > sizeof err->message - 3) pl = sizeof err->message - 3;
    memcpy(err->message, prefix, pl);
    memcpy(err->message + pl, ": ", 2);
    size_t room = sizeof err->message - pl - 3, ol = strlen(old);
    if (ol > room) ol = room;
    memcpy(err->message + pl + 2, old, ol);
    err->message[pl + 2 + ol] = 0;
}

void err_clear(xllm_error *err) {
    if (err) {
        err->code = XLLM_OK;
        err->message[0] = 0;
    }
}
