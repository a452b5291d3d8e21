/* profile.c - the per-operator counters and the public xllm_profile_* calls (see profile.h). */
#include "base/profile.h"
#include "base/alloc.h"
#include "base/error.h"
#include "xllm.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int prof_enabled;

/* Each counter's report name; a fused operator is reported under the
 * operator it grew from ("op", so existing readers of the report still find
 * it), with what was folded into it ("fused"). */
static const struct {
    const char *name, *op, *fused;
} k_names[] = {
    {"embed", "embed", NULL},
    {"rmsnorm", "rmsnorm", NULL},
    {"rmsnorm+act_quant", "rmsnorm", "act_quant"},
    {"matmul.qkv", "matmul.qkv", NULL},
    {"rope+kv_write", "rope+kv_write", NULL},
    {"matmul.qkv+rope+kv_write", "matmul.qkv", "rope+kv_write"},
    {"attention", "attention", NULL},
    {"matmul.o", "matmul.o", NULL},
    {"matmul.o+residual", "matmul.o", "residual"},
    {"matmul.gate_up", "matmul.gate_up", NULL},
    {"silu_mul", "silu_mul", NULL},
    {"matmul.gate_up+silu_mul", "matmul.gate_up", "silu_mul"},
    {"matmul.down", "matmul.down", NULL},
    {"matmul.down+residual", "matmul.down", "residual"},
    {"moe.router", "moe.router", NULL},
    {"residual", "residual", NULL},
    {"lm_head", "lm_head", NULL},
    {"sample", "sample", NULL},
};
_Static_assert(sizeof k_names / sizeof *k_names == PROF_COUNT, "one name per prof_op");

static struct {
    _Atomic uint64_t ns, calls, flops, bytes;
} g_ops[PROF_COUNT];

const char *prof_op_name(prof_op op) { return (unsigned)op < PROF_COUNT ? k_names[op].name : "?"; }

uint64_t prof_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void prof_add(prof_op op, uint64_t t0, double flops, double bytes) {
    uint64_t dt = prof_now_ns() - t0;
    atomic_fetch_add(&g_ops[op].ns, dt);
    atomic_fetch_add(&g_ops[op].calls, 1);
    atomic_fetch_add(&g_ops[op].flops, (uint64_t)flops);
    atomic_fetch_add(&g_ops[op].bytes, (uint64_t)bytes);
}

void xllm_profile_enable(int on) { prof_enabled = on != 0; }

void xllm_profile_reset(void) {
    for (int i = 0; i < PROF_COUNT; i++) {
        atomic_store(&g_ops[i].ns, 0);
        atomic_store(&g_ops[i].calls, 0);
        atomic_store(&g_ops[i].flops, 0);
        atomic_store(&g_ops[i].bytes, 0);
    }
}

xllm_status xllm_profile_report(char **json, xllm_error *err) {
    *json = NULL;
    double total = 0;
    for (int i = 0; i < PROF_COUNT; i++) total += (double)atomic_load(&g_ops[i].ns);
    cJSON *root = cJSON_CreateObject(), *ops = cJSON_AddArrayToObject(root, "ops");
    cJSON_AddNumberToObject(root, "total_ms", total / 1e6);
    for (int i = 0; i < PROF_COUNT; i++) {
        double ns = (double)atomic_load(&g_ops[i].ns), calls = (double)atomic_load(&g_ops[i].calls);
        if (calls == 0) continue;
        double flops = (double)atomic_load(&g_ops[i].flops), bytes = (double)atomic_load(&g_ops[i].bytes);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "op", k_names[i].op);
        if (k_names[i].fused) cJSON_AddStringToObject(o, "fused", k_names[i].fused);
        cJSON_AddNumberToObject(o, "ms", ns / 1e6);
        cJSON_AddNumberToObject(o, "share", total > 0 ? ns / total : 0);
        cJSON_AddNumberToObject(o, "calls", calls);
        cJSON_AddNumberToObject(o, "gflop_s", ns > 0 ? flops / ns : 0);
        cJSON_AddNumberToObject(o, "gb_s", ns > 0 ? bytes / ns : 0);
        cJSON_AddItemToArray(ops, o);
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    *json = mem_strdup(text);
    cJSON_free(text);
    return *json ? XLLM_OK : err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
}
