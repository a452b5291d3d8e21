/*
 * vk_device.c - the Vulkan backend's device layer: the loader opened at run
 * time (dlopen libvulkan.so.1, so a machine without one still runs on the
 * CPU), instance and device, memory handed out as addresses in a reserved
 * range (vk_internal.h), the recording of operations into one command buffer
 * per step, and copies between host and device.
 *
 * Device features required: Vulkan 1.2 with bufferDeviceAddress,
 * storageBuffer8BitAccess, storageBuffer16BitAccess and shaderInt64 (every
 * desktop GPU of the last years; Mesa's lavapipe). The validation layer is
 * enabled when XLLM_VULKAN_VALIDATE=1 (the tests), and every message it
 * gives is counted (vulkan_validation_messages) and printed.
 *
 * Memory: weights, the 1-D weights, the scratch and the KV pool are device
 * memory. On a unified-memory device (integrated GPU, lavapipe: device-local
 * memory the host can map) every allocation is mapped and host <-> device
 * copies are memcpy after the step's wait; weight matrices in their stored
 * layout are not copied at all but imported in place from the model file's
 * mapping (VK_EXT_external_memory_host: the pages around each matrix, at
 * minImportedHostPointerAlignment), falling back to a copy where the device
 * refuses. On a discrete GPU one host-visible, coherent staging pool,
 * allocated at creation, carries every copy between the host and device
 * memory: weight uploads, the logits read back, KV blocks swapped out and in.
 * Switches for tests and comparisons: XLLM_VULKAN_IMPORT=0 (copy the
 * weights), XLLM_VULKAN_UNIFIED=0 (treat a unified device as discrete:
 * unmapped device memory, everything through the staging pool).
 */
#include "backend/vulkan/vk_internal.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/error.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define VA_RESERVE ((size_t)1 << 40)   /* address space for device pointers (never backed) */
/* host inputs of one step, before a submit is forced: the least the ring
 * holds; vulkan_backend_create reserves the largest embedding batch on top
 * (max_tokens x max_cols floats), which leaves a step's other inputs (per
 * layer: positions, slots, block tables) room in all but odd shapes */
#define RING_BYTES ((size_t)256 << 10)
#define STAGING_BYTES ((size_t)16 << 20)
#define ALIGN 256

static atomic_long g_messages;
long vulkan_validation_messages(void) { return atomic_load(&g_messages); }
int vulkan_backend_built(void) { return 1; }

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                                 VkDebugUtilsMessageTypeFlagsEXT type,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *d, void *user) {
    (void)type, (void)user;
    if (sev >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
        atomic_fetch_add(&g_messages, 1);
        fprintf(stderr, "xllm vulkan validation: %s\n", d && d->pMessage ? d->pMessage : "(no text)");
    }
    return VK_FALSE;
}

static void *open_loader(char *why, size_t n) {
    const char *names[] = {"libvulkan.so.1", "libvulkan.so"};
    why[0] = 0;
    for (size_t i = 0; i < 2; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
        if (!why[0]) snprintf(why, n, "%s", dlerror());
    }
    return NULL;
}

static int validate_wanted(void) {
    const char *v = getenv("XLLM_VULKAN_VALIDATE");
    return v && *v && strcmp(v, "0");
}

/* Loader, instance, (optionally) the validation layer. */
static xllm_status open_instance(vk_ctx *c, int validate, xllm_error *err) {
    char why[256];
    if (!(c->lib = open_loader(why, sizeof why)))
        return err_setf(err, XLLM_ERR_UNSUPPORTED,
                           "backend 'vulkan': no Vulkan loader on this machine (%s); install one (Debian: "
                           "libvulkan1 and a driver such as mesa-vulkan-drivers) or use --backend cpu",
                           why);
    c->f.vkGetInstanceProcAddr = (PFN_vkGetInstanceProcAddr)dlsym(c->lib, "vkGetInstanceProcAddr");
    if (!c->f.vkGetInstanceProcAddr)
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "backend 'vulkan': the Vulkan loader has no vkGetInstanceProcAddr");
    c->f.vkCreateInstance = (PFN_vkCreateInstance)c->f.vkGetInstanceProcAddr(NULL, "vkCreateInstance");
    c->f.vkEnumerateInstanceLayerProperties =
        (PFN_vkEnumerateInstanceLayerProperties)c->f.vkGetInstanceProcAddr(NULL, "vkEnumerateInstanceLayerProperties");
    int have_layer = 0;
    if (validate && c->f.vkEnumerateInstanceLayerProperties) {
        uint32_t n = 0;
        c->f.vkEnumerateInstanceLayerProperties(&n, NULL);
        VkLayerProperties *lp = n ? mem_calloc(n, sizeof *lp) : NULL;
        if (lp && c->f.vkEnumerateInstanceLayerProperties(&n, lp) == VK_SUCCESS)
            for (uint32_t i = 0; i < n; i++) have_layer |= !strcmp(lp[i].layerName, "VK_LAYER_KHRONOS_validation");
        xllm_free(lp);
        if (!have_layer)
            return err_setf(err, XLLM_ERR_UNSUPPORTED,
                               "backend 'vulkan': XLLM_VULKAN_VALIDATE is set but VK_LAYER_KHRONOS_validation is "
                               "not installed (Debian: vulkan-validationlayers)");
    }
    VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO, NULL, "xllm", 1, "xllm", 1, VK_API_VERSION_1_2};
    const char *layer = "VK_LAYER_KHRONOS_validation", *ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ci.pApplicationInfo = &app;
    if (have_layer) ci.enabledLayerCount = 1, ci.ppEnabledLayerNames = &layer, ci.enabledExtensionCount = 1,
                    ci.ppEnabledExtensionNames = &ext;
    VkResult r = c->f.vkCreateInstance ? c->f.vkCreateInstance(&ci, NULL, &c->inst) : VK_ERROR_INITIALIZATION_FAILED;
    if (r != VK_SUCCESS)
        return err_setf(err, XLLM_ERR_UNSUPPORTED,
                           "backend 'vulkan': the Vulkan loader is present but creating an instance failed (VkResult "
                           "%d): no driver installed (Debian: mesa-vulkan-drivers)?",
                           (int)r);
#define X(fn) c->f.fn = (PFN_##fn)c->f.vkGetInstanceProcAddr(c->inst, #fn);
    VK_FUNCS_INSTANCE(X)
#undef X
    if (have_layer && c->f.vkCreateDebugUtilsMessengerEXT) {
        VkDebugUtilsMessengerCreateInfoEXT mi = {.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
        mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
        mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                         VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
        mi.pfnUserCallback = on_message;
        c->f.vkCreateDebugUtilsMessengerEXT(c->inst, &mi, NULL, &c->messenger);
    }
    return XLLM_OK;
}

static const char *type_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
    }
}

/* What the device lacks of what the shaders need ("" when nothing). */
static void missing_features(vk_ctx *c, VkPhysicalDevice pd, char *out, size_t n) {
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, .pNext = &f12};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
    VkPhysicalDeviceProperties p;
    c->f.vkGetPhysicalDeviceProperties(pd, &p);
    out[0] = 0;
    if (p.apiVersion < VK_API_VERSION_1_2) {
        snprintf(out, n, "Vulkan 1.2");
        return;
    }
    c->f.vkGetPhysicalDeviceFeatures2(pd, &f);
    size_t o = 0;
#define NEED(cond, name) \
    if (!(cond) && o < n) o += (size_t)snprintf(out + o, n - o, "%s%s", o ? ", " : "", name);
    NEED(f.features.shaderInt64, "shaderInt64")
    NEED(f11.storageBuffer16BitAccess, "storageBuffer16BitAccess")
    NEED(f12.storageBuffer8BitAccess, "storageBuffer8BitAccess")
    NEED(f12.bufferDeviceAddress, "bufferDeviceAddress")
#undef NEED
}

char *vulkan_describe_devices(void) {
    vk_ctx c;
    memset(&c, 0, sizeof c);
    xllm_error e = {0};
    char buf[4096];
    size_t o = 0;
    if (open_instance(&c, 0, &e)) {
        snprintf(buf, sizeof buf, "vulkan: %s\n", e.message);
    } else {
        uint32_t n = 0;
        c.f.vkEnumeratePhysicalDevices(c.inst, &n, NULL);
        VkPhysicalDevice pds[16];
        if (n > 16) n = 16;
        c.f.vkEnumeratePhysicalDevices(c.inst, &n, pds);
        if (!n) o += (size_t)snprintf(buf, sizeof buf, "vulkan: the loader sees no device (no driver installed?)\n");
        for (uint32_t i = 0; i < n && o < sizeof buf; i++) {
            VkPhysicalDeviceProperties p;
            c.f.vkGetPhysicalDeviceProperties(pds[i], &p);
            char miss[256];
            missing_features(&c, pds[i], miss, sizeof miss);
            o += (size_t)snprintf(buf + o, sizeof buf - o, "vulkan device %u: %s (%s, Vulkan %u.%u)%s%s\n", i,
                                  p.deviceName, type_name(p.deviceType), VK_API_VERSION_MAJOR(p.apiVersion),
                                  VK_API_VERSION_MINOR(p.apiVersion), miss[0] ? ": unusable, lacks " : "", miss);
        }
    }
    if (c.inst) c.f.vkDestroyInstance(c.inst, NULL);
    if (c.lib) dlclose(c.lib);
    return mem_strdup(buf);
}

static int find_mem_type(vk_ctx *c, uint32_t bits, VkMemoryPropertyFlags want) {
    VkPhysicalDeviceMemoryProperties mp;
    c->f.vkGetPhysicalDeviceMemoryProperties(c->phys, &mp);
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++)
        if ((bits & (1u << i)) && (mp.memoryTypes[i].propertyFlags & want) == want) return (int)i;
    return -1;
}

/* A buffer with its own memory of the given type (mapped when host-visible). */
static int make_buffer(vk_ctx *c, size_t bytes, int host, vk_alloc *a) {
    memset(a, 0, sizeof *a);
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bi.size = bytes ? bytes : 4;
    bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT |
               VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
    bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    if (c->f.vkCreateBuffer(c->dev, &bi, NULL, &a->buf) != VK_SUCCESS) return -1;
    VkMemoryRequirements mr;
    c->f.vkGetBufferMemoryRequirements(c->dev, a->buf, &mr);
    uint32_t type = host ? c->mem_type_host : c->mem_type_device;
    if (!(mr.memoryTypeBits & (1u << type))) {
        c->f.vkDestroyBuffer(c->dev, a->buf, NULL);
        return -1;
    }
    VkMemoryAllocateFlagsInfo fi = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
    fi.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
    VkMemoryAllocateInfo ai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, &fi, mr.size, type};
    if (c->f.vkAllocateMemory(c->dev, &ai, NULL, &a->mem) != VK_SUCCESS) {
        c->f.vkDestroyBuffer(c->dev, a->buf, NULL);
        return -1;
    }
    c->f.vkBindBufferMemory(c->dev, a->buf, a->mem, 0);
    if (host || c->unified) {
        void *m = NULL;
        if (c->f.vkMapMemory(c->dev, a->mem, 0, VK_WHOLE_SIZE, 0, &m) != VK_SUCCESS) {
            c->f.vkFreeMemory(c->dev, a->mem, NULL);
            c->f.vkDestroyBuffer(c->dev, a->buf, NULL);
            return -1;
        }
        a->mapped = m;
    }
    VkBufferDeviceAddressInfo di = {VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, NULL, a->buf};
    a->addr = c->f.vkGetBufferDeviceAddress(c->dev, &di);
    a->size = bytes;
    return 0;
}

static void drop_buffer(vk_ctx *c, vk_alloc *a) {
    if (!a->buf) return;
    if (a->mapped && !a->imported) c->f.vkUnmapMemory(c->dev, a->mem);
    c->f.vkDestroyBuffer(c->dev, a->buf, NULL);
    c->f.vkFreeMemory(c->dev, a->mem, NULL);
    memset(a, 0, sizeof *a);
}

/* an environment switch set to 0 */
static int env_off(const char *name) {
    const char *v = getenv(name);
    return v && !strcmp(v, "0");
}

/* XLLM_VULKAN_IMPORT=0: weights copied even where they could be imported */
static int import_wanted(void) { return !env_off("XLLM_VULKAN_IMPORT"); }

static int has_device_extension(vk_ctx *c, const char *name) {
    uint32_t n = 0;
    if (c->f.vkEnumerateDeviceExtensionProperties(c->phys, NULL, &n, NULL) != VK_SUCCESS || !n) return 0;
    VkExtensionProperties *e = mem_calloc(n, sizeof *e);
    int found = 0;
    if (e && c->f.vkEnumerateDeviceExtensionProperties(c->phys, NULL, &n, e) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(e[i].extensionName, name);
    xllm_free(e);
    return found;
}

xllm_status vk_open(vk_ctx *c, int device, xllm_error *err) {
    xllm_status st = open_instance(c, validate_wanted(), err);
    if (st) return st;
    uint32_t n = 0;
    c->f.vkEnumeratePhysicalDevices(c->inst, &n, NULL);
    if (n == 0)
        return err_setf(err, XLLM_ERR_UNSUPPORTED,
                           "backend 'vulkan': the Vulkan loader sees no device (install a driver, e.g. Debian's "
                           "mesa-vulkan-drivers, or use --backend cpu)");
    VkPhysicalDevice pds[16];
    if (n > 16) n = 16;
    c->f.vkEnumeratePhysicalDevices(c->inst, &n, pds);
    if (device < 0 || (uint32_t)device >= n)
        return err_setf(err, XLLM_ERR_INVALID_ARGUMENT, "backend 'vulkan': device %d does not exist (%u found: 0..%u)",
                           device, n, n - 1);
    c->phys = pds[device];
    c->f.vkGetPhysicalDeviceProperties(c->phys, &c->props);
    char miss[256];
    missing_features(c, c->phys, miss, sizeof miss);
    if (miss[0])
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "backend 'vulkan': device %d (%s) lacks %s", device,
                           c->props.deviceName, miss);
    uint32_t nq = 0;
    c->f.vkGetPhysicalDeviceQueueFamilyProperties(c->phys, &nq, NULL);
    VkQueueFamilyProperties qf[32];
    if (nq > 32) nq = 32;
    c->f.vkGetPhysicalDeviceQueueFamilyProperties(c->phys, &nq, qf);
    c->queue_family = UINT32_MAX;
    for (uint32_t i = 0; i < nq && c->queue_family == UINT32_MAX; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) c->queue_family = i;
    if (c->queue_family == UINT32_MAX)
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "backend 'vulkan': device %d has no compute queue", device);
    /* unified memory: a device-local type that is also host-visible and
     * coherent, on an integrated / CPU device; else device-local + staging */
    int host = find_mem_type(c, ~0u, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
    int both = find_mem_type(c, ~0u, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                         VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
    int local = find_mem_type(c, ~0u, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (host < 0) return err_setf(err, XLLM_ERR_UNSUPPORTED, "backend 'vulkan': no host-visible memory type");
    int integrated = c->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ||
                     c->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    c->mem_type_host = (uint32_t)host;
    if (integrated && both >= 0 && !env_off("XLLM_VULKAN_UNIFIED")) c->unified = 1, c->mem_type_device = (uint32_t)both;
    else c->mem_type_device = (uint32_t)(local >= 0 ? local : host);
    /* weights imported in place (the model file's mapping) on a unified device
     * that can import host memory: VK_EXT_external_memory_host */
    const char *exts[2];
    uint32_t n_exts = 0;
    if (c->unified && import_wanted() && has_device_extension(c, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME)) {
        VkPhysicalDeviceExternalMemoryHostPropertiesEXT hp = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
        VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &hp};
        c->f.vkGetPhysicalDeviceProperties2(c->phys, &p2);
        size_t a = (size_t)hp.minImportedHostPointerAlignment;
        if (a && !(a & (a - 1)) && a <= ((size_t)1 << 21)) {
            c->import_align = a;
            exts[n_exts++] = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
        }
    }
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, NULL, 0, c->queue_family, 1, &prio};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    f12.bufferDeviceAddress = VK_TRUE;
    f12.storageBuffer8BitAccess = VK_TRUE;
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, .pNext = &f12};
    f11.storageBuffer16BitAccess = VK_TRUE;
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
    f2.features.shaderInt64 = VK_TRUE;
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &f2};
    di.queueCreateInfoCount = 1;
    di.pQueueCreateInfos = &qi;
    /* int8 dot products (the kernels' fast path, vk_ops.c): enabled when the device has them */
    VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR fdot = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR};
    if (has_device_extension(c, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME)) {
        VkPhysicalDeviceFeatures2 q = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &fdot};
        c->f.vkGetPhysicalDeviceFeatures2(c->phys, &q);
        fdot.pNext = NULL;
        if (fdot.shaderIntegerDotProduct) {
            f12.pNext = &fdot;
            exts[n_exts++] = VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;
            c->int_dot = !env_off("XLLM_VULKAN_INT_DOT");
        }
    }
    di.enabledExtensionCount = n_exts;
    di.ppEnabledExtensionNames = n_exts ? exts : NULL;
    VkResult r = c->f.vkCreateDevice(c->phys, &di, NULL, &c->dev);
    if (r != VK_SUCCESS)
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "backend 'vulkan': creating device %d (%s) failed (VkResult %d)",
                           device, c->props.deviceName, (int)r);
    PFN_vkGetDeviceProcAddr gdpa = c->f.vkGetDeviceProcAddr;
#define X(fn) \
    if (!(c->f.fn = (PFN_##fn)gdpa(c->dev, #fn))) \
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "backend 'vulkan': the driver has no %s", #fn);
    VK_FUNCS_DEVICE(X)
#undef X
    c->f.vkGetDeviceQueue(c->dev, c->queue_family, 0, &c->queue);
    if (n_exts)
        c->get_host_pointer_props =
            (PFN_vkGetMemoryHostPointerPropertiesEXT)gdpa(c->dev, "vkGetMemoryHostPointerPropertiesEXT");
    if (!c->get_host_pointer_props) c->import_align = 0;
    VkCommandPoolCreateInfo pi = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, NULL,
                                  VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, c->queue_family};
    VkCommandBufferAllocateInfo ai = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, NULL, VK_NULL_HANDLE,
                                      VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1};
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (c->f.vkCreateCommandPool(c->dev, &pi, NULL, &c->pool) != VK_SUCCESS ||
        (ai.commandPool = c->pool, c->f.vkAllocateCommandBuffers(c->dev, &ai, &c->cmd) != VK_SUCCESS) ||
        c->f.vkCreateFence(c->dev, &fi, NULL, &c->fence) != VK_SUCCESS)
        return err_setf(err, XLLM_ERR_UNSUPPORTED, "backend 'vulkan': creating a command buffer failed");
    /* the staging pool: every copy between the host and memory it cannot map
     * (uploads, logits, KV blocks swapped out and in) goes through it; a
     * unified device maps all its memory and needs none */
    if (make_buffer(c, RING_BYTES, 1, &c->ring) || (!c->unified && make_buffer(c, STAGING_BYTES, 1, &c->staging)))
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "backend 'vulkan': no host-visible memory for the staging pool");
    void *va = mmap(NULL, VA_RESERVE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (va == MAP_FAILED)
        return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "backend 'vulkan': cannot reserve address space for device pointers");
    c->va = va;
    c->va_size = VA_RESERVE;
    return XLLM_OK;
}

void vk_close(vk_ctx *c) {
    if (c->dev) {
        vk_flush(c);
        for (size_t i = 0; i < c->n_allocs; i++) drop_buffer(c, &c->allocs[i]);
        for (size_t i = 0; i < c->n_hosts; i++) drop_buffer(c, &c->hosts[i]);
        drop_buffer(c, &c->ring);
        drop_buffer(c, &c->staging);
        for (int i = 0; i < VK_P_COUNT; i++)
            if (c->pipes[i]) c->f.vkDestroyPipeline(c->dev, c->pipes[i], NULL);
        if (c->layout) c->f.vkDestroyPipelineLayout(c->dev, c->layout, NULL);
        if (c->fence) c->f.vkDestroyFence(c->dev, c->fence, NULL);
        if (c->pool) c->f.vkDestroyCommandPool(c->dev, c->pool, NULL);
        c->f.vkDestroyDevice(c->dev, NULL);
    }
    if (c->messenger) c->f.vkDestroyDebugUtilsMessengerEXT(c->inst, c->messenger, NULL);
    if (c->inst) c->f.vkDestroyInstance(c->inst, NULL);
    if (c->lib) dlclose(c->lib);
    if (c->va) munmap(c->va, c->va_size);
    xllm_free(c->allocs);
    xllm_free(c->hosts);
}

/* ------------------------------------------------------------ memory */

/* a in the table, at the next address range (room for it checked first) */
static void *add_alloc(vk_ctx *c, vk_alloc *a, size_t handle_off) {
    size_t span = (a->size + ALIGN - 1) / ALIGN * ALIGN + ALIGN; /* a gap: one past the end is not the next buffer */
    a->base = (uintptr_t)(c->va + c->va_used);
    a->handle = a->base + handle_off;
    c->va_used += span;
    c->allocs[c->n_allocs++] = *a; /* bases only grow: the table stays sorted */
    return (void *)a->handle;
}

static int room_for(vk_ctx *c, size_t bytes) {
    size_t span = (bytes + ALIGN - 1) / ALIGN * ALIGN + ALIGN;
    if (c->va_used + span > c->va_size) return 0;
    return !array_reserve(&c->allocs, &c->cap_allocs, c->n_allocs + 1, sizeof *c->allocs, 64);
}

void *vk_alloc_device(vk_ctx *c, size_t bytes) {
    if (!room_for(c, bytes)) return NULL;
    vk_alloc a;
    if (make_buffer(c, bytes, 0, &a)) return NULL;
    c->device_bytes += bytes;
    return add_alloc(c, &a, 0);
}

/* Host memory [p, p + bytes) imported as device memory (the pages around it,
 * from one multiple of minImportedHostPointerAlignment to the next: a
 * neighbouring matrix may share the first and last page, imported again by
 * its own import). NULL when the device refuses it (the caller copies). */
static void *import_host(vk_ctx *c, const void *p, size_t bytes) {
    if (!c->import_align || !p || !bytes || (uintptr_t)p % VK_IMPORT_MIN_ALIGN) return NULL;
    uintptr_t start = (uintptr_t)p & ~(uintptr_t)(c->import_align - 1);
    uintptr_t end = ((uintptr_t)p + bytes + c->import_align - 1) & ~(uintptr_t)(c->import_align - 1);
    size_t size = end - start;
    if (!room_for(c, size)) return NULL;
    VkMemoryHostPointerPropertiesEXT hp = {.sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
    if (c->get_host_pointer_props(c->dev, VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, (void *)start, &hp) !=
        VK_SUCCESS)
        return NULL;
    vk_alloc a;
    memset(&a, 0, sizeof a);
    VkExternalMemoryBufferCreateInfo eb = {.sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO};
    eb.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .pNext = &eb};
    bi.size = size;
    bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
               VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
    bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    if (c->f.vkCreateBuffer(c->dev, &bi, NULL, &a.buf) != VK_SUCCESS) return NULL;
    VkMemoryRequirements mr;
    c->f.vkGetBufferMemoryRequirements(c->dev, a.buf, &mr);
    uint32_t bits = hp.memoryTypeBits & mr.memoryTypeBits, type = 0;
    while (type < 32 && !(bits & (1u << type))) type++;
    if (!bits || mr.size > size) {
        c->f.vkDestroyBuffer(c->dev, a.buf, NULL);
        return NULL;
    }
    VkImportMemoryHostPointerInfoEXT ii = {.sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT};
    ii.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
    ii.pHostPointer = (void *)start;
    VkMemoryAllocateFlagsInfo fi = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO, .pNext = &ii};
    fi.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
    VkMemoryAllocateInfo ai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, &fi, size, type};
    if (c->f.vkAllocateMemory(c->dev, &ai, NULL, &a.mem) != VK_SUCCESS) {
        c->f.vkDestroyBuffer(c->dev, a.buf, NULL);
        return NULL;
    }
    if (c->f.vkBindBufferMemory(c->dev, a.buf, a.mem, 0) != VK_SUCCESS) {
        c->f.vkFreeMemory(c->dev, a.mem, NULL);
        c->f.vkDestroyBuffer(c->dev, a.buf, NULL);
        return NULL;
    }
    VkBufferDeviceAddressInfo di = {VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, NULL, a.buf};
    a.addr = c->f.vkGetBufferDeviceAddress(c->dev, &di);
    a.size = size;
    a.mapped = (unsigned char *)start; /* reads of it from the host (copy) read the file's pages */
    a.imported = 1;
    return add_alloc(c, &a, (uintptr_t)p - start);
}

void *vk_host_alloc(vk_ctx *c, size_t bytes) {
    if (c->unified || !bytes) return NULL;
    if (array_reserve(&c->hosts, &c->cap_hosts, c->n_hosts + 1, sizeof *c->hosts, 4)) return NULL;
    vk_alloc a;
    if (make_buffer(c, bytes, 1, &a)) return NULL;
    a.handle = (uintptr_t)a.mapped;
    c->hosts[c->n_hosts++] = a;
    c->pinned_bytes += bytes;
    return a.mapped;
}

void vk_host_free(vk_ctx *c, void *p) {
    for (size_t i = 0; p && i < c->n_hosts; i++)
        if (c->hosts[i].mapped == p) {
            vk_flush(c);
            c->pinned_bytes -= c->hosts[i].size;
            drop_buffer(c, &c->hosts[i]);
            c->hosts[i] = c->hosts[--c->n_hosts];
            return;
        }
}

/* the pinned host buffer holding [p, p + bytes), or NULL */
static const vk_alloc *find_host(const vk_ctx *c, const void *p, size_t bytes, size_t *off) {
    const unsigned char *q = p;
    for (size_t i = 0; i < c->n_hosts; i++)
        if (q >= c->hosts[i].mapped && q + bytes <= c->hosts[i].mapped + c->hosts[i].size) {
            *off = (size_t)(q - c->hosts[i].mapped);
            return &c->hosts[i];
        }
    return NULL;
}

void *vk_weights_place(vk_ctx *c, const void *host, size_t bytes) {
    void *d = import_host(c, host, bytes);
    if (d) {
        c->weights_imported += bytes, c->n_imported++;
        return d;
    }
    if (!(d = vk_alloc_device(c, bytes))) return NULL;
    vk_copy(c, d, host, bytes, BE_HOST_TO_DEVICE);
    vk_weights_copied(c, bytes);
    return d;
}

void vk_weights_copied(vk_ctx *c, size_t bytes) { c->weights_copied += bytes, c->n_copied++; }

static void fmt_mib(char *b, size_t n, size_t bytes) { snprintf(b, n, "%.1f MiB", (double)bytes / (1024.0 * 1024.0)); }

void vk_memory_line(const vk_ctx *c, char *out, size_t n) {
    char dev[32], imp[32], cop[32], stg[32], ring[32], pin[32], qa[32], ap[32];
    fmt_mib(qa, sizeof qa, c->qact_bytes);
    fmt_mib(ap, sizeof ap, c->attn_part_bytes);
    fmt_mib(pin, sizeof pin, c->pinned_bytes);
    fmt_mib(dev, sizeof dev, c->device_bytes);
    fmt_mib(imp, sizeof imp, c->weights_imported);
    fmt_mib(cop, sizeof cop, c->weights_copied);
    fmt_mib(stg, sizeof stg, c->staging.size);
    fmt_mib(ring, sizeof ring, c->ring.size);
    snprintf(out, n,
             "weights %s imported in place (%zu matrices, the model file's mapping) + %s copied (%zu)%s | device memory "
             "%s (copied weights, workspace, KV pool) | staging pool %s%s | pinned host memory %s (the KV swap pool) | "
             "step-input ring %s | own scratch %s (quantized activations) + %s (split attention's partials)",
             imp, c->n_imported, cop, c->n_copied,
             c->import_align ? "" : !c->unified ? " [not unified: weights live in device memory]"
                                   : !import_wanted() ? " [import off: XLLM_VULKAN_IMPORT=0]"
                                                      : " [the device cannot import host memory]", dev, stg,
             c->unified ? " (unified memory: copies are plain memcpy)" : " host-visible coherent", pin, ring, qa, ap);
}

const vk_alloc *vk_find(const vk_ctx *c, const void *p, size_t *off) {
    uintptr_t x = (uintptr_t)p;
    size_t lo = 0, hi = c->n_allocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->allocs[mid].base <= x) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return NULL;
    const vk_alloc *a = &c->allocs[lo - 1];
    if (x > a->base + a->size) return NULL;
    if (off) *off = x - a->base;
    return a;
}

void vk_free_device(vk_ctx *c, void *p) {
    if (!p) return;
    size_t off;
    const vk_alloc *a = vk_find(c, p, &off);
    if (!a || (uintptr_t)p != a->handle) return;
    (void)off;
    vk_flush(c);
    size_t i = (size_t)(a - c->allocs);
    if (!a->imported) c->device_bytes -= a->size;
    drop_buffer(c, &c->allocs[i]);
    memmove(&c->allocs[i], &c->allocs[i + 1], (c->n_allocs - i - 1) * sizeof *c->allocs);
    c->n_allocs--;
}

VkDeviceAddress vk_addr(vk_ctx *c, const void *p) {
    if (!p) return 0;
    size_t off;
    const vk_alloc *a = vk_find(c, p, &off);
    if (!a) {
        fprintf(stderr, "xllm vulkan: %p is not device memory of this backend (a host buffer given to a device op)\n", p);
        abort();
    }
    return a->addr + off;
}

/* --------------------------------------------------------- recording */

static void begin(vk_ctx *c) {
    if (c->recording) return;
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    c->f.vkBeginCommandBuffer(c->cmd, &bi);
    c->recording = 1;
}

/* every earlier write visible to every later read or write */
static void barrier(vk_ctx *c, VkPipelineStageFlags dst_stage, VkAccessFlags dst) {
    VkMemoryBarrier mb = {VK_STRUCTURE_TYPE_MEMORY_BARRIER, NULL,
                          VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT, dst};
    c->f.vkCmdPipelineBarrier(c->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, dst_stage,
                              0, 1, &mb, 0, NULL, 0, NULL);
}

static void after_command(vk_ctx *c) {
    barrier(c, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                VK_ACCESS_TRANSFER_WRITE_BIT);
    c->pending = 1;
}

void vk_flush(vk_ctx *c) {
    if (!c->recording) return;
    barrier(c, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT | VK_ACCESS_HOST_WRITE_BIT);
    c->f.vkEndCommandBuffer(c->cmd);
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = 1;
    si.pCommandBuffers = &c->cmd;
    VkResult r = c->f.vkQueueSubmit(c->queue, 1, &si, c->fence);
    if (r == VK_SUCCESS) r = c->f.vkWaitForFences(c->dev, 1, &c->fence, VK_TRUE, UINT64_MAX);
    if (r != VK_SUCCESS) { /* device lost: nothing sensible can continue */
        fprintf(stderr, "xllm vulkan: submitting the step failed (VkResult %d)\n", (int)r);
        abort();
    }
    c->f.vkResetFences(c->dev, 1, &c->fence);
    c->f.vkResetCommandBuffer(c->cmd, 0);
    c->recording = c->pending = 0;
    c->ring_used = 0;
}

int vk_ring_reserve(vk_ctx *c, size_t bytes) {
    bytes = (bytes + 63) / 64 * 64;
    if (bytes <= c->ring.size) return 0;
    vk_flush(c);
    vk_alloc r;
    if (make_buffer(c, bytes, 1, &r)) return -1;
    drop_buffer(c, &c->ring);
    c->ring = r;
    return 0;
}

void *vk_ring(vk_ctx *c, size_t bytes, VkDeviceAddress *addr) {
    bytes = (bytes + 63) / 64 * 64;
    if (c->ring_used + bytes > c->ring.size) {
        vk_flush(c);
        /* grow to exactly the request (never past the bound own_bytes
         * reported: creation reserves the largest request for the model's shape) */
        if (bytes > c->ring.size && vk_ring_reserve(c, bytes)) {
            fprintf(stderr, "xllm vulkan: out of host-visible memory for a step's inputs (%zu bytes)\n", bytes);
            abort();
        }
    }
    void *h = c->ring.mapped + c->ring_used;
    *addr = c->ring.addr + c->ring_used;
    c->ring_used += bytes;
    return h;
}

void vk_dispatch(vk_ctx *c, int pipe, const void *pc, uint32_t pc_bytes, uint64_t groups, uint32_t gz) {
    if (groups == 0 || gz == 0) return;
    begin(c);
    c->f.vkCmdBindPipeline(c->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, c->pipes[pipe]);
    c->f.vkCmdPushConstants(c->cmd, c->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, pc_bytes, pc);
    uint32_t gx = groups > 65535 ? 65535 : (uint32_t)groups;
    uint32_t gy = (uint32_t)((groups + gx - 1) / gx);
    c->f.vkCmdDispatch(c->cmd, gx, gy, gz);
    after_command(c);
}

void vk_record_copy(vk_ctx *c, VkBuffer src, VkDeviceSize so, VkBuffer dst, VkDeviceSize d0, VkDeviceSize bytes) {
    if (!bytes) return;
    begin(c);
    VkBufferCopy r = {so, d0, bytes};
    c->f.vkCmdCopyBuffer(c->cmd, src, dst, 1, &r);
    after_command(c);
}

/* -------------------------------------------------------------- copy */

void vk_copy(vk_ctx *c, void *dst, const void *src, size_t bytes, be_copy_kind kind) {
    if (!bytes) return;
    size_t doff = 0, soff = 0;
    const vk_alloc *da = kind != BE_DEVICE_TO_HOST ? vk_find(c, dst, &doff) : NULL;
    const vk_alloc *sa = kind != BE_HOST_TO_DEVICE ? vk_find(c, src, &soff) : NULL;
    if ((kind != BE_DEVICE_TO_HOST && !da) || (kind != BE_HOST_TO_DEVICE && !sa)) {
        fprintf(stderr, "xllm vulkan: copy of %zu bytes names memory that is not this backend's\n", bytes);
        abort();
    }
    if (kind == BE_DEVICE_TO_DEVICE) { /* in order with the recorded work */
        vk_record_copy(c, sa->buf, soff, da->buf, doff, bytes);
        return;
    }
    vk_flush(c);
    if (kind == BE_HOST_TO_DEVICE && da->mapped) {
        memcpy(da->mapped + doff, src, bytes);
        return;
    }
    if (kind == BE_DEVICE_TO_HOST && sa->mapped) {
        memcpy(dst, sa->mapped + soff, bytes);
        return;
    }
    size_t hoff;
    const vk_alloc *h = find_host(c, kind == BE_HOST_TO_DEVICE ? src : dst, bytes, &hoff);
    if (h) { /* pinned host memory (the swap pool): one device copy, no bounce */
        if (kind == BE_HOST_TO_DEVICE) vk_record_copy(c, h->buf, hoff, da->buf, doff, bytes);
        else vk_record_copy(c, sa->buf, soff, h->buf, hoff, bytes);
        vk_flush(c);
        return;
    }
    for (size_t o = 0; o < bytes; o += c->staging.size) { /* through the staging pool */
        size_t n = bytes - o < c->staging.size ? bytes - o : c->staging.size;
        if (kind == BE_HOST_TO_DEVICE) {
            memcpy(c->staging.mapped, (const char *)src + o, n);
            vk_record_copy(c, c->staging.buf, 0, da->buf, doff + o, n);
            vk_flush(c);
        } else {
            vk_record_copy(c, sa->buf, soff + o, c->staging.buf, 0, n);
            vk_flush(c);
            memcpy((char *)dst + o, c->staging.mapped, n);
        }
    }
}
