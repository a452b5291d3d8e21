/*
 * error.h - filling the caller-owned xllm_error.
 *
 * Every fallible internal function takes an xllm_error* (may be NULL) and
 * returns an xllm_status; err_setf() formats the message and returns the
 * code so a failure path is one line: `return err_setf(err, XLLM_ERR_IO, ...)`.
 */
#ifndef XLLM_BASE_ERROR_H
#define XLLM_BASE_ERROR_H

#include "xllm.h"

#if defined(__GNUC__)
#define XLLM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define XLLM_PRINTF(a, b)
#endif

xllm_status err_setf(xllm_error *err, xllm_status code, const char *fmt, ...) XLLM_PRINTF(3, 4);
/* Put "prefix: " in front of an existing message (adds context on the way up). */
void err_prefix(xllm_error *err, const char *fmt, ...) XLLM_PRINTF(2, 3);
void err_clear(xllm_error *err);

#endif
