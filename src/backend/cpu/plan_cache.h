/*
 * plan_cache.h - the CPU planner's measurements kept on disk, so that a
 * model's plan is measured once per machine and reused by later loads
 * (which then skip the planning cost and cannot flip on a noisy minute).
 *
 * A plan is keyed by what it depends on: the CPU model (cpuid brand string
 * or /proc/cpuinfo's "model name"), the kernel level, the thread count, the
 * largest batch the planner measured, and the matrix's type, group, layout
 * (packed or stored) and shape. The file is a small JSON object {"version":1,"plans":{key:
 * {"threads":[4],"kernel":[4]}}}, at most PLAN_CACHE_MAX_ENTRIES entries and
 * PLAN_CACHE_MAX_BYTES bytes; a file that is missing, unreadable, too large
 * or malformed is treated as empty (a plan never changes results, so the
 * worst a bad cache can do is cost speed). Saving writes a temporary file
 * in the same directory and renames it over the old one, so readers never
 * see half a file; of two processes saving at once, the last one wins.
 * Not thread-safe for one plan_cache; separate caches are independent.
 */
#ifndef XLLM_BACKEND_CPU_PLAN_CACHE_H
#define XLLM_BACKEND_CPU_PLAN_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include "backend/backend.h"

#define PLAN_CACHE_MAX_ENTRIES 4096
#define PLAN_CACHE_MAX_BYTES ((size_t)1 << 20)

typedef struct plan_cache plan_cache;

/* Open the cache at path (NULL or "": none; then every call below is a
 * no-op and lookups miss). Returns NULL only when out of memory. */
plan_cache *plan_cache_open(const char *path);
/* The key prefix every entry of this process shares (CPU model, level, threads, max batch). */
void plan_cache_set_context(plan_cache *pc, const char *level, int n_threads, int max_T);
/* 1 and the plan of W's type and shape when the cache has it, else 0. */
int plan_cache_get(const plan_cache *pc, const matrix *W, uint8_t threads[MM_BUCKETS], uint8_t kernel[MM_BUCKETS]);
/* Remember a measured plan (dropped when the cache is full). */
void plan_cache_put(plan_cache *pc, const matrix *W, const uint8_t threads[MM_BUCKETS],
                    const uint8_t kernel[MM_BUCKETS]);
/* Write the cache back if put() changed it (creating its directory); a
 * failure to write is reported on stderr once and otherwise ignored. */
void plan_cache_save(plan_cache *pc);
void plan_cache_close(plan_cache *pc);
/* The CPU model's name (static storage), e.g. "AMD EPYC 9654 96-Core Processor". Thread-safe. */
const char *plan_cache_cpu_name(void);

#endif
