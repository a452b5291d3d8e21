/*
 * cpu_features.c - which kernel levels this CPU runs, and XLLM_CPU.
 *
 * x86-64: cpuid leaves 1 and 7 for the instruction sets, and XGETBV for the
 * register state the OS saves (YMM for AVX2, opmask/ZMM for AVX-512): a CPU
 * with AVX-512 under an OS that does not save ZMM state must not use it.
 * aarch64: NEON is part of the base ABI; dotprod from getauxval(AT_HWCAP).
 */
#include "backend/cpu/kernels.h"
#include "base/error.h"

#include <stdio.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1 << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

size_t kernels_prefetch_bytes = 0;

void cpu_features_detect(cpu_features *f) {
    memset(f, 0, sizeof *f);
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid_count(1, 0, &a, &b, &c, &d)) return;
    int osxsave = (c >> 27) & 1;
    f->avx = (c >> 28) & 1;
    f->fma = (c >> 12) & 1;
    f->f16c = (c >> 29) & 1;
    if (osxsave) {
        unsigned xlo, xhi;
        __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
        (void)xhi;
        f->os_ymm = (xlo & 0x6) == 0x6;         /* SSE and AVX state */
        f->os_zmm = (xlo & 0xe6) == 0xe6;       /* + opmask, ZMM_Hi256, Hi16_ZMM */
    }
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf >= 7 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        unsigned sub_leaves = a;
        f->avx2 = (b >> 5) & 1;
        f->avx512f = (b >> 16) & 1;
        f->avx512bw = (b >> 30) & 1;
        f->avx512vl = (b >> 31) & 1;
        f->avx512vnni = (c >> 11) & 1;
        if (sub_leaves >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f->avx512bf16 = (a >> 5) & 1;
    }
#elif defined(__aarch64__)
    unsigned long hw = getauxval(AT_HWCAP);
    f->neon = (hw & HWCAP_ASIMD) != 0;
    f->dotprod = (hw & HWCAP_ASIMDDP) != 0;
#endif
}

static const char *const level_names[CPU_LEVEL_COUNT] = {"scalar", "avx2", "avx512", "neon"};

const char *cpu_level_name(cpu_level l) { return l >= 0 && l < CPU_LEVEL_COUNT ? level_names[l] : "?"; }

int cpu_level_supported(cpu_level l) {
    cpu_features f;
    cpu_features_detect(&f);
    switch (l) {
    case CPU_SCALAR: return 1;
#if defined(__x86_64__)
    case CPU_AVX2: return f.avx && f.avx2 && f.fma && f.f16c && f.os_ymm;
    case CPU_AVX512:
        return f.avx && f.avx2 && f.fma && f.f16c && f.os_ymm && f.avx512f && f.avx512bw && f.avx512vl &&
               f.avx512vnni && f.os_zmm;
#endif
#if defined(__aarch64__)
    case CPU_NEON: return f.neon;
#endif
    default: return 0;
    }
}

cpu_level cpu_level_best(void) {
    static const cpu_level order[] = {CPU_AVX512, CPU_AVX2, CPU_NEON};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        if (cpu_level_supported(order[i])) return order[i];
    return CPU_SCALAR;
}

static void available_list(char *buf, size_t n) {
    buf[0] = 0;
    for (int l = 0; l < CPU_LEVEL_COUNT; l++)
        if (cpu_level_supported((cpu_level)l)) {
            size_t len = strlen(buf);
            snprintf(buf + len, n - len, "%s%s", len ? ", " : "", level_names[l]);
        }
}

xllm_status cpu_level_from_env(const char *value, cpu_level *out, xllm_error *err) {
    if (!value || !*value || !strcmp(value, "auto")) {
        *out = cpu_level_best();
        return XLLM_OK;
    }
    char avail[128];
    available_list(avail, sizeof avail);
    for (int l = 0; l < CPU_LEVEL_COUNT; l++)
        if (!strcmp(value, level_names[l])) {
            if (!cpu_level_supported((cpu_level)l))
                return err_setf(err, XLLM_ERR_UNSUPPORTED,
                                   "XLLM_CPU=%s: this CPU (or this build) does not support the %s kernels; available: %s",
                                   value, value, avail);
            *out = (cpu_level)l;
            return XLLM_OK;
        }
    return err_setf(err, XLLM_ERR_INVALID_ARGUMENT,
                       "XLLM_CPU=%s: unknown kernel level (known: scalar, avx2, avx512, neon, auto); available here: %s",
                       value, avail);
}

const cpu_kernels *cpu_kernels_for(cpu_level l) {
    if (!cpu_level_supported(l)) return NULL;
    switch (l) {
    case CPU_SCALAR: return &cpu_kernels_scalar;
#if defined(__x86_64__)
    case CPU_AVX2: return &cpu_kernels_avx2;
    case CPU_AVX512: return &cpu_kernels_avx512;
#endif
#if defined(__aarch64__)
    case CPU_NEON: {
        cpu_features f;
        cpu_features_detect(&f);
        return f.dotprod ? &cpu_kernels_neon_dot : &cpu_kernels_neon;
    }
#endif
    default: return NULL;
    }
}

int cpu_kernels_all(const cpu_kernels **out, int max) {
    int n = 0;
    if (n < max) out[n++] = &cpu_kernels_scalar;
#if defined(__x86_64__)
    if (n < max && cpu_level_supported(CPU_AVX2)) out[n++] = &cpu_kernels_avx2;
    if (n < max && cpu_level_supported(CPU_AVX512)) out[n++] = &cpu_kernels_avx512;
#endif
#if defined(__aarch64__)
    cpu_features f;
    cpu_features_detect(&f);
    if (n < max && f.neon) out[n++] = &cpu_kernels_neon;
    if (n < max && f.neon && f.dotprod) out[n++] = &cpu_kernels_neon_dot;
#endif
    return n;
}
