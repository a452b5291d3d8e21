/*
 * vulkan_backend.h - the Vulkan compute backend's entry points (backend.h's
 * "vulkan"): create, what the loader sees, and the validation-message count
 * the tests check. Declared whether or not the build has the backend
 * (backend.c answers for a build without it).
 */
#ifndef XLLM_VULKAN_BACKEND_H
#define XLLM_VULKAN_BACKEND_H
#include <stddef.h>
#include "backend/backend.h"

/* backend_create_fn for "vulkan": loads libvulkan.so.1 at run time, picks
 * device o->device (0: the first), builds its pipelines. Without a loader or
 * a device: XLLM_ERR_UNSUPPORTED saying what was found. */
xllm_status vulkan_backend_create(backend *be, const backend_options *o, xllm_error *err);
/* A text listing of the devices the Vulkan loader sees ("0: llvmpipe (cpu,
 * Vulkan 1.3) ..."), one per line, or why there are none. Caller frees
 * (xllm_free). Thread-safe. */
char *vulkan_describe_devices(void);
/* Validation messages (warnings and errors) seen since the process started,
 * when XLLM_VULKAN_VALIDATE=1 enabled the Khronos validation layer; each is
 * also printed to stderr. Thread-safe. */
long vulkan_validation_messages(void);
/* The memory a "vulkan" backend holds for itself now (ring, staging pool,
 * scratch, split attention's partials): what backend_ops.own_bytes bounds;
 * 0 for another backend or a build without Vulkan. For tests. Not
 * thread-safe (the model's forward lock). */
size_t vulkan_own_bytes_held(const backend *be);
/* 1 when this build has the backend compiled in. */
int vulkan_backend_built(void);
#endif
