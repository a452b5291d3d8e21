/*
 * backend.c - the registry of execution backends: a name -> constructor
 * table (backend.h). A backend compiled into the library is one line in
 * k_builtin; backend_register adds one at run time (tests, embedders).
 */
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/vulkan/vulkan_backend.h"
#include "base/alloc.h"
#include "base/error.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    backend_create_fn create;
} backend_entry;

#ifndef XLLM_HAVE_VULKAN
/* a build without the Vulkan headers or glslc: "vulkan" says so */
xllm_status vulkan_backend_create(backend *be, const backend_options *o, xllm_error *err) {
    (void)be, (void)o;
    return err_setf(err, XLLM_ERR_UNSUPPORTED,
                       "backend 'vulkan': this build has no Vulkan backend (built without the Vulkan headers or "
                       "glslc: Debian's libvulkan-dev and glslc)");
}
char *vulkan_describe_devices(void) { return mem_strdup("vulkan: this build has no Vulkan backend\n"); }
long vulkan_validation_messages(void) { return 0; }
int vulkan_backend_built(void) { return 0; }
size_t vulkan_own_bytes_held(const backend *be) { (void)be; return 0; }
#endif

static const backend_entry k_builtin[] = {
    {"cpu", cpu_backend_create},
    {"vulkan", vulkan_backend_create},
};

#define MAX_REGISTERED 8
static backend_entry g_registered[MAX_REGISTERED];
static int g_n_registered;
static char g_names[256];

static const backend_entry *find(const char *name) {
    for (size_t i = 0; i < sizeof k_builtin / sizeof *k_builtin; i++)
        if (!strcmp(name, k_builtin[i].name)) return &k_builtin[i];
    for (int i = 0; i < g_n_registered; i++)
        if (!strcmp(name, g_registered[i].name)) return &g_registered[i];
    return NULL;
}

xllm_status backend_register(const char *name, backend_create_fn create, xllm_error *err) {
    if (!name || !*name || !create) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "backend_register: no name or constructor");
    if (find(name)) return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "backend '%s' is already registered", name);
    if (g_n_registered == MAX_REGISTERED)
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "at most %d backends can be registered", MAX_REGISTERED);
    g_registered[g_n_registered].name = name;
    g_registered[g_n_registered].create = create;
    g_n_registered++;
    return XLLM_OK;
}

const char *backend_names(void) {
    size_t o = 0;
    g_names[0] = 0;
    for (size_t i = 0; i < sizeof k_builtin / sizeof *k_builtin && o < sizeof g_names; i++)
        o += (size_t)snprintf(g_names + o, sizeof g_names - o, "%s%s", o ? ", " : "", k_builtin[i].name);
    for (int i = 0; i < g_n_registered && o < sizeof g_names; i++)
        o += (size_t)snprintf(g_names + o, sizeof g_names - o, "%s%s", o ? ", " : "", g_registered[i].name);
    return g_names;
}

xllm_status backend_create(backend *be, const char *name, const backend_options *o, xllm_error *err) {
    memset(be, 0, sizeof *be);
    if (!name || !*name) name = "cpu";
    const backend_entry *e = find(name);
    if (e) return e->create(be, o, err);
    return err_setf(err, XLLM_ERR_UNSUPPORTED, "backend '%s' is unknown (known: %s)", name, backend_names());
}

void backend_destroy(backend *be) {
    if (be && be->ops) be->ops->destroy(be->ctx);
    if (be) memset(be, 0, sizeof *be);
}
