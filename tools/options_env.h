/*
 * options_env.h - the environment variables that set xllm_model_options'
 * execution switches. The library never reads the environment; the CLI
 * (and the C test programs the scripts drive with these variables) call
 * this before loading a model. python/xllm/__init__.py does the same in Python.
 *
 *   XLLM_BACKEND=NAME   backend          (cpu, vulkan; the --backend flag sets it)
 *   XLLM_DEVICE=N       device           (a device backend's device; the --device flag sets it)
 *   XLLM_CPU=LEVEL      cpu_level        (scalar, avx2, avx512, neon, auto)
 *   XLLM_ATTN=S         attention        (per-item, split, shared)
 *   XLLM_FUSE=0         no_fuse = 1
 *   XLLM_REPACK=0       no_repack = 1
 *   XLLM_PLAN=0         no_plan = 1
 *   XLLM_PROFILE=1      profile = 1
 *   XLLM_DEBUG=1        debug_checks = 1
 *   XLLM_KV_DTYPE=D     kv_dtype         (f32, f16, q8, auto; a --kv-dtype flag or a config's wins)
 *   XLLM_ARITH=A        arithmetic       (xllm, llama; an --arith flag wins)
 *   XLLM_PLAN_CACHE=F   plan_cache       (default $XDG_CACHE_HOME/xllm/plans.json, else
 *                                         ~/.cache/xllm/plans.json; "off" or "0": none)
 *
 * A variable that is unset (or empty) leaves the field as it is. The strings
 * point into the environment. Not thread-safe (getenv).
 */
#ifndef XLLM_TOOLS_OPTIONS_ENV_H
#define XLLM_TOOLS_OPTIONS_ENV_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "xllm.h"

static inline void cli_model_options_from_env(xllm_model_options *o) {
    const char *v;
    if ((v = getenv("XLLM_BACKEND")) && *v) o->backend = v;
    if ((v = getenv("XLLM_DEVICE")) && *v) o->device = atoi(v);
    if ((v = getenv("XLLM_CPU")) && *v) o->cpu_level = v;
    if ((v = getenv("XLLM_ATTN")) && *v) o->attention = v;
    if ((v = getenv("XLLM_FUSE")) && !strcmp(v, "0")) o->no_fuse = 1;
    if ((v = getenv("XLLM_REPACK")) && !strcmp(v, "0")) o->no_repack = 1;
    if ((v = getenv("XLLM_PLAN")) && !strcmp(v, "0")) o->no_plan = 1;
    if ((v = getenv("XLLM_PROFILE")) && *v && strcmp(v, "0")) o->profile = 1;
    if ((v = getenv("XLLM_DEBUG")) && *v && strcmp(v, "0")) o->debug_checks = 1;
    if ((v = getenv("XLLM_KV_DTYPE")) && *v && !o->kv_dtype) o->kv_dtype = v;
    if ((v = getenv("XLLM_ARITH")) && *v && !o->arithmetic) o->arithmetic = v;
    static char cache[4096];
    if ((v = getenv("XLLM_PLAN_CACHE")) && *v) {
        o->plan_cache = strcmp(v, "off") && strcmp(v, "0") ? v : NULL;
    } else if ((v = getenv("XDG_CACHE_HOME")) && *v) {
        snprintf(cache, sizeof cache, "%s/xllm/plans.json", v);
        o->plan_cache = cache;
    } else if ((v = getenv("HOME")) && *v) {
        snprintf(cache, sizeof cache, "%s/.cache/xllm/plans.json", v);
        o->plan_cache = cache;
    }
}

#endif
