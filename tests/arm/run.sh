#!/usr/bin/env bash
# run.sh - the NEON kernels on aarch64 (the attention loops over f32 / f16 / q8 KV rows
# included): cross-compile test_kernels and
# test_kq_kernels (llama.cpp's block types) with
# Debian's gcc-aarch64-linux-gnu (only what it needs: the CPU kernels and their orchestration
# (not the backend table, attention, the planner or its cache, which need the profiler and
# cJSON), quant,
# dtype/alloc/error/threadpool; no cJSON or PCRE2) and run it under
# qemu-user-static, once as qemu's default CPU (has dotprod: both NEON
# variants are tested, and must agree bit for bit) and once as a Cortex-A53
# (no dotprod: dispatch must fall back to the plain NEON variant).
# usage: tests/arm/run.sh [BUILD_DIR]   (default build-arm)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$SRC/build-arm}
CC=${AARCH64_CC:-aarch64-linux-gnu-gcc}
QEMU=${QEMU_AARCH64:-qemu-aarch64-static}
SYSROOT=${AARCH64_SYSROOT:-/usr/aarch64-linux-gnu}
for tool in "$CC" "$QEMU"; do
    command -v "$tool" >/dev/null || { echo "run.sh: $tool not found (scripts/install-deps.sh installs it)"; exit 1; }
done
mkdir -p "$OUT"
FLAGS=(-O2 -std=c11 -D_GNU_SOURCE -fno-strict-aliasing -Wall -Wextra -Werror -I"$SRC/include" -I"$SRC/src"
       -I"$SRC/tests" -DXLLM_SOURCE_DIR="\"$SRC\"")
C="$SRC/src/backend/cpu"
"$CC" "${FLAGS[@]}" -march=armv8.2-a+dotprod -c "$C/kernels_neon_dot.c" -o "$OUT/kernels_neon_dot.o"
"$CC" "${FLAGS[@]}" -march=armv8.2-a+dotprod -c "$C/kq_kernels_neon_dot.c" -o "$OUT/kq_kernels_neon_dot.o"
# llama.cpp's float steps, no contraction (as CMakeLists.txt compiles them)
for f in "$C/silu.c" "$C/attention_f16.c" "$SRC/src/quant/kquant_llama.c"; do
    "$CC" "${FLAGS[@]}" -ffp-contract=off -c "$f" -o "$OUT/$(basename "$f" .c).o"
done
for t in test_kernels test_kq_kernels; do
    "$CC" "${FLAGS[@]}" -o "$OUT/$t" "$SRC/tests/unit/$t.c" \
        $(ls "$C"/*.c | grep -v -e /kernels_neon_dot.c -e /kq_kernels_neon_dot.c -e /cpu_backend.c -e /attention.c \
            -e /planner.c -e /plan_cache.c -e /silu.c -e /attention_f16.c) \
        "$OUT/kernels_neon_dot.o" "$OUT/kq_kernels_neon_dot.o" \
        "$OUT/silu.o" "$OUT/attention_f16.o" "$OUT/kquant_llama.o" \
        "$SRC/src/quant/quant.c" "$SRC/src/quant/kquant.c" "$SRC/src/quant/kvq.c" "$SRC/src/base/dtype.c" "$SRC/src/base/alloc.c" "$SRC/src/base/error.c" \
        "$SRC/src/base/threadpool.c" -lm -lpthread
done
for t in test_kernels test_kq_kernels; do
    echo "== $t: aarch64 (qemu default CPU: NEON + dotprod)"
    timeout -k 10 600 "$QEMU" -L "$SYSROOT" "$OUT/$t"
    echo "== $t: aarch64 as Cortex-A53 (NEON, no dotprod)"
    timeout -k 10 600 "$QEMU" -cpu cortex-a53 -L "$SYSROOT" "$OUT/$t"
done
