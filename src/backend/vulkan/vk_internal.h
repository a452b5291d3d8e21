/*
 * vk_internal.h - the Vulkan backend's context, shared by its files:
 * vk_device.c (loader, device, memory, command recording), vk_ops.c (the
 * backend_ops table) and vk_mla.c (multi-head latent attention's operations).
 *
 * Device pointers: the model layer does pointer arithmetic on the buffers it
 * gets from alloc() (backend.h), so every allocation gets a unique address
 * range in a reserved, inaccessible part of the process's address space
 * (PROT_NONE: a host read through one faults at once). An address maps back
 * to (allocation, offset) by binary search, and from there to a Vulkan
 * buffer device address, which the shaders take in push constants.
 *
 * Execution: operations are recorded into one command buffer, a barrier
 * between each, and submitted when the host needs a result (copy to the
 * host, free, destroy) - so one forward step is one submission. Small host
 * inputs of an operation (positions, block tables, rope tables, embedded
 * rows) go into a host-visible ring the shaders read directly.
 */
#ifndef XLLM_VK_INTERNAL_H
#define XLLM_VK_INTERNAL_H
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>
#include "backend/backend.h"
#include "backend/vulkan/vulkan_backend.h"

#define VK_FUNCS_INSTANCE(X)                    \
    X(vkDestroyInstance)                        \
    X(vkEnumeratePhysicalDevices)               \
    X(vkGetPhysicalDeviceProperties)            \
    X(vkGetPhysicalDeviceProperties2)           \
    X(vkGetPhysicalDeviceFeatures2)             \
    X(vkGetPhysicalDeviceMemoryProperties)      \
    X(vkGetPhysicalDeviceQueueFamilyProperties) \
    X(vkCreateDevice)                           \
    X(vkGetDeviceProcAddr)                      \
    X(vkEnumerateDeviceExtensionProperties)     \
    X(vkCreateDebugUtilsMessengerEXT)           \
    X(vkDestroyDebugUtilsMessengerEXT)

#define VK_FUNCS_DEVICE(X)              \
    X(vkDestroyDevice)                  \
    X(vkGetDeviceQueue)                 \
    X(vkCreateBuffer)                   \
    X(vkDestroyBuffer)                  \
    X(vkGetBufferMemoryRequirements)    \
    X(vkAllocateMemory)                 \
    X(vkFreeMemory)                     \
    X(vkBindBufferMemory)               \
    X(vkMapMemory)                      \
    X(vkUnmapMemory)                    \
    X(vkGetBufferDeviceAddress)         \
    X(vkCreateShaderModule)             \
    X(vkDestroyShaderModule)            \
    X(vkCreatePipelineLayout)           \
    X(vkDestroyPipelineLayout)          \
    X(vkCreateComputePipelines)         \
    X(vkDestroyPipeline)                \
    X(vkCreateCommandPool)              \
    X(vkDestroyCommandPool)             \
    X(vkAllocateCommandBuffers)         \
    X(vkBeginCommandBuffer)             \
    X(vkEndCommandBuffer)               \
    X(vkResetCommandBuffer)             \
    X(vkCmdBindPipeline)                \
    X(vkCmdPushConstants)               \
    X(vkCmdDispatch)                    \
    X(vkCmdPipelineBarrier)             \
    X(vkCmdCopyBuffer)                  \
    X(vkCmdFillBuffer)                  \
    X(vkQueueSubmit)                    \
    X(vkQueueWaitIdle)                  \
    X(vkCreateFence)                    \
    X(vkDestroyFence)                   \
    X(vkWaitForFences)                  \
    X(vkResetFences)

typedef struct vk_fns {
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
    PFN_vkCreateInstance vkCreateInstance;
    PFN_vkEnumerateInstanceLayerProperties vkEnumerateInstanceLayerProperties;
#define X(f) PFN_##f f;
    VK_FUNCS_INSTANCE(X) VK_FUNCS_DEVICE(X)
#undef X
} vk_fns;

/* one device allocation: [base, base + size) in the reserved address range */
typedef struct vk_alloc {
    uintptr_t base;
    size_t size;
    VkBuffer buf;
    VkDeviceMemory mem;
    VkDeviceAddress addr;
    unsigned char *mapped; /* host-visible: its mapping; else NULL */
    uintptr_t handle;      /* the pointer handed out (base, or inside an import: base + offset) */
    int imported;          /* host memory imported (VK_EXT_external_memory_host): not device_bytes */
} vk_alloc;

/* Pipelines (vk_ops.c creates them). The matmuls come in variants per weight
 * type: matrix-vector (VK_P_MM_*), tiled (+ VK_MM_TYPES), and for Q8 / Q4 /
 * Q4M the same two with int8 dot products (OpSDot; + 2 * VK_MM_TYPES, + 3 *
 * VK_MM_TYPES; only built when the device has them). */
enum {
    VK_P_MM_F32, VK_P_MM_F16, VK_P_MM_BF16, VK_P_MM_Q8, VK_P_MM_Q4, VK_P_MM_Q4M, VK_P_MM_KQ,
    VK_MM_TYPES,
    VK_P_MM_END = 4 * VK_MM_TYPES,
    VK_P_QUANT_ACT = VK_P_MM_END, VK_P_RMSNORM, VK_P_ROPE_KV, VK_P_ATTENTION, VK_P_ATTN_COMBINE, VK_P_ELTWISE,
    VK_P_MLA_ROPE_KV, VK_P_ATTN_LATENT, /* vk_mla.c */
    VK_P_COUNT
};

typedef struct vk_ctx {
    void *lib;
    vk_fns f;
    VkInstance inst;
    VkDebugUtilsMessengerEXT messenger;
    VkPhysicalDevice phys;
    VkPhysicalDeviceProperties props;
    VkDevice dev;
    VkQueue queue;
    uint32_t queue_family;
    uint32_t mem_type_device, mem_type_host; /* device-local; host-visible coherent */
    int unified;                             /* device memory is host-visible (lavapipe, integrated) */
    VkCommandPool pool;
    VkCommandBuffer cmd;
    VkFence fence;
    int recording, pending; /* a command buffer is open; it holds work */
    VkPipelineLayout layout;
    VkPipeline pipes[VK_P_COUNT];
    /* the address range handed out as device pointers */
    unsigned char *va;
    size_t va_size, va_used;
    vk_alloc *allocs;
    size_t n_allocs, cap_allocs;
    /* the host-visible ring for an operation's small inputs (reset at each submit) */
    vk_alloc ring;
    size_t ring_used;
    /* the staging buffer for copies to / from memory the host cannot map */
    vk_alloc staging;
    /* scratch: quantized activations for quantized matmuls */
    void *qact;
    size_t qact_bytes;
    const float *qact_src; /* what qact holds now (BE_ACT_READY reuse); NULL: nothing */
    int qact_T, qact_cols;
    size_t max_tokens, max_cols;
    /* kernels (vk_ops.c): the device has int8 dot products (VK_KHR_shader_integer_dot_product,
     * enabled at device creation by vk_open; XLLM_VULKAN_INT_DOT=0 turns their use off) */
    int int_dot;
    int mm_force;                 /* XLLM_VULKAN_MATMUL: 0 the planner's rule, 1 matrix-vector, 2 tiled */
    int attn_no_group;            /* XLLM_VULKAN_ATTN_GROUP=0: decode attention one head per workgroup */
    void *attn_part;              /* split attention's partial results (grown on demand) */
    size_t attn_part_bytes;
    int n_heads, head_dim;        /* the model's (backend_options): bound the partials (backend_ops.own_bytes);
                                   * MLA: head_dim is the latent row, the width of its partials */
    size_t device_bytes; /* allocated device memory now */
    /* importing host memory (VK_EXT_external_memory_host, unified devices only) */
    PFN_vkGetMemoryHostPointerPropertiesEXT get_host_pointer_props; /* NULL: no import */
    size_t import_align;                                           /* minImportedHostPointerAlignment */
    /* the memory split (vk_memory_line): weight matrices imported in place /
     * copied into device memory, and the host-visible pools */
    size_t weights_imported, weights_copied, n_imported, n_copied;
    /* pinned host memory (backend_ops.host_alloc: the KV swap pool), host-visible buffers */
    vk_alloc *hosts;
    size_t n_hosts, cap_hosts, pinned_bytes;
    char describe[256];
    char describe_mem[1024]; /* describe + the memory split, rebuilt by vb_describe */
} vk_ctx;

/* vk_device.c */
xllm_status vk_open(vk_ctx *c, int device, xllm_error *err);
void vk_close(vk_ctx *c);
void *vk_alloc_device(vk_ctx *c, size_t bytes);
void vk_free_device(vk_ctx *c, void *p);
/* the device address of a device pointer (0 for NULL); aborts on a pointer not from alloc */
VkDeviceAddress vk_addr(vk_ctx *c, const void *p);
const vk_alloc *vk_find(const vk_ctx *c, const void *p, size_t *off);
/* host bytes in the ring: returns the host pointer, *addr its device address (may submit first;
 * a request larger than the ring grows it to that size) */
void *vk_ring(vk_ctx *c, size_t bytes, VkDeviceAddress *addr);
/* the ring at least `bytes` (at creation: the largest request one operation makes); 0 or -1 when out of memory */
int vk_ring_reserve(vk_ctx *c, size_t bytes);
/* record a dispatch of pipeline `pipe` with push constants pc, groups counted over a 2-D grid */
void vk_dispatch(vk_ctx *c, int pipe, const void *pc, uint32_t pc_bytes, uint64_t groups, uint32_t gz);
void vk_record_copy(vk_ctx *c, VkBuffer src, VkDeviceSize so, VkBuffer dst, VkDeviceSize d0, VkDeviceSize bytes);
/* submit what is recorded and wait */
void vk_flush(vk_ctx *c);
void vk_copy(vk_ctx *c, void *dst, const void *src, size_t bytes, be_copy_kind kind);
/* A weight matrix's bytes (host, as the model file stores them) for the
 * shaders: imported in place on a unified-memory device that can import host
 * memory (the model file's mapping, no copy; XLLM_VULKAN_IMPORT=0 turns it
 * off), else copied into new device memory (through the staging pool on a
 * discrete GPU). Returns the device pointer (release it with
 * vk_free_device), NULL when out of device memory. */
void *vk_weights_place(vk_ctx *c, const void *host, size_t bytes);
/* Host memory the device copies to and from directly (backend_ops.host_alloc):
 * a host-visible buffer on a discrete GPU; NULL on a unified device (plain
 * memory is as good there) or when out of memory. */
void *vk_host_alloc(vk_ctx *c, size_t bytes);
void vk_host_free(vk_ctx *c, void *p);
/* Count a weight matrix of `bytes` that was copied to the device by other means (unpacked layouts). */
void vk_weights_copied(vk_ctx *c, size_t bytes);
/* The memory split for the startup line: device memory in use, weights
 * imported / copied, the host-visible staging pool and ring. */
void vk_memory_line(const vk_ctx *c, char *out, size_t n);
/* vk_mla.c: multi-head latent attention (DeepSeek): backend_ops.mla_rope_kv,
 * and backend_ops.attention when be_attn.latent is set */
/* Split attention, shared by the per-head (vk_ops.c) and latent (vk_mla.c)
 * kernels: keys per segment (a query whose keys span more than one segment is
 * computed as per-segment partials folded by attn_combine.comp; the cut is at
 * absolute key positions, so whether a query splits depends on its own
 * context only: batch-invariant), partial results per pass (bytes), the
 * segments of keys [first, end), and the partials' buffer grown to at least
 * `bytes` (the old one freed after the recorded work ran; 0 when out of
 * device memory). Called on the backend's thread. */
#define ATTN_SEG 512
#define ATTN_PART_CAP ((size_t)64 << 20)
int vk_attn_nseg(int first, int end);
int vk_attn_part_reserve(vk_ctx *c, size_t bytes);
/* A batch's layout for split attention (both kernels; the host's part, no
 * device work). vk_attn_groups: each sequence of the batch once (useq; umax:
 * its last position; uoff: where its block table starts among the tables,
 * *total ints in all; *nu sequences) and the token groups a workgroup takes:
 * runs of up to max_group neighbouring tokens of one sequence (groups[2g]:
 * the first token, groups[2g + 1]: how many). Arrays of d->T (groups: 2 d->T);
 * returns the number of groups.
 * vk_attn_plan: per token t, info[4t..4t+3] = its sequence's uoff, its first
 * key (d->window), one past its last key, and where its partials start within
 * its pass (-1: one segment, no partials); and the passes over the groups,
 * pass_start[0..np] (pass_start[np] = ng), each holding at most cap_slots
 * slots (a slot: one token's segment) or one group, whatever it needs;
 * *most: the most slots a pass holds. Returns np.
 * vk_attn_pass_segments: for the pass over groups [g0, g1) with vk_attn_plan's
 * info, the most segments a group's keys span (from its tokens' lowest first
 * key to their last key; at least 1: the dispatch's second dimension) and in
 * *split whether any of its tokens has partials (the pass then needs
 * attn_combine). */
int vk_attn_groups(const be_attn *d, int max_group, int32_t *useq, int32_t *umax, int32_t *uoff, int *nu,
                   size_t *total, int32_t *groups);
int vk_attn_plan(const be_attn *d, const int32_t *groups, int ng, const int32_t *useq, const int32_t *uoff,
                 size_t cap_slots, int32_t *info, int32_t *pass_start, size_t *most);
int vk_attn_pass_segments(const int32_t *groups, int g0, int g1, const int32_t *info, int *split);
void vk_mla_rope_kv(vk_ctx *c, const be_mla *d);
void vk_attention_latent(vk_ctx *c, const be_attn *d);
/* the widest latent row attention_latent.comp takes (its MAXW: DeepSeek-V2/V3's 512 + 64) */
#define VK_MLA_MAX_ROW 576
/* host pointers the shaders need at most this alignment for (buffer_reference_align
 * in shaders/common.glsl is 4 today; 16 leaves room for vector loads) */
#define VK_IMPORT_MIN_ALIGN 16
#endif
