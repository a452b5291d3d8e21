/*
 * progress.c - a load's progress sink, one per thread (see progress.h).
 */
#include "base/progress.h"

#include <stddef.h>

static _Thread_local struct {
    xllm_progress_fn fn;
    void *user;
    const char *stage;
    const void *key;
    double total, done;
    int pct;
} tl;

void load_progress_begin(xllm_progress_fn fn, void *user, const char *stage) {
    tl.fn = fn;
    tl.user = user;
    tl.stage = stage;
    tl.key = NULL;
    tl.total = tl.done = 0;
    tl.pct = -1;
}

void load_progress_end(void) { load_progress_begin(NULL, NULL, NULL); }

int load_progress_wants_total(const void *key) { return tl.fn && key != tl.key; }

void load_progress_set_total(const void *key, double total) {
    tl.key = key;
    tl.total = total;
    tl.done = 0;
}

void load_progress_add(const void *key, double amount) {
    if (!tl.fn || key != tl.key || !(tl.total > 0)) return;
    tl.done += amount;
    double f = tl.done / tl.total;
    if (f > 0.99) f = 0.99; /* 1 is the caller's, when the stage is over */
    int pct = (int)(f * 100.0);
    if (pct == tl.pct) return;
    tl.pct = pct;
    tl.fn(tl.user, tl.stage, f);
}
