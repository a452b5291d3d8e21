/*
 * backend.c - the registry of execution backends: a name -> constructor
 * table (backend.h). Adding a backend is one line here plus its directory.
 */
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/error.h"

#include <string.h>

typedef struct {
    const char *name;
    xllm_status (*create)(backend *be, const backend_options *o, xllm_error *err);
} backend_entry;

static const backend_entry k_backends[] = {
    {"cpu", cpu_backend_create},
};

const char *backend_names(void) { return "cpu"; }

xllm_status backend_create(backend *be, const char *name, const backend_options *o, xllm_error *err) {
    memset(be, 0, sizeof *be);
    if (!name || !*name) name = "cpu";
    for (size_t i = 0; i < sizeof k_backends / sizeof *k_backends; i++)
        if (!strcmp(name, k_backends[i].name)) return k_backends[i].create(be, o, err);
    return xllm_errorf(err, XLLM_ERR_UNSUPPORTED, "backend '%s' is unknown (known: %s)", name, backend_names());
}

void backend_destroy(backend *be) {
    if (be && be->ops) be->ops->destroy(be->ctx);
    if (be) memset(be, 0, sizeof *be);
}
