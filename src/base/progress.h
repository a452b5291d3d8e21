/*
 * progress.h - progress of a model load, reported from deep inside it.
 *
 * xllm_model_load hands its options' progress callback to the loading thread
 * (thread-local, so concurrent loads on other threads report to their own);
 * the code that does the long part of a load reports what it has got
 * through, against a total it names once. Today that is the weight archive
 * (format/safetensors.c): the loader repacks each matmul matrix into its
 * kernel's order and then releases the stored copy's pages, so the bytes
 * released, over the archive's tensor bytes, measure how far the load is.
 * The fraction is capped below 1: the caller reports 1 when the stage ends.
 * Everything here is a no-op on a thread with no callback.
 */
#ifndef XLLM_BASE_PROGRESS_H
#define XLLM_BASE_PROGRESS_H

#include "xllm.h"

/* Route this thread's reports to fn under stage (fn NULL: stop). Not
 * thread-safe across threads by design: each thread has its own. */
void load_progress_begin(xllm_progress_fn fn, void *user, const char *stage);
void load_progress_end(void);
/* 1 when a callback is set and key (the archive) has no total yet: the
 * reporter computes it and calls load_progress_set_total. */
int load_progress_wants_total(const void *key);
void load_progress_set_total(const void *key, double total);
/* amount more of key's total is done; the callback hears whole percents. */
void load_progress_add(const void *key, double amount);

#endif
