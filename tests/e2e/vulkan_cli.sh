#!/usr/bin/env bash
# vulkan_cli.sh - choosing the Vulkan backend from the command line and the
# config file (docs/VULKAN.md):
#  - no driver (VK_ICD_FILENAMES pointed at nothing): `--backend vulkan` is a clean
#    "xllm: error:" saying what was found, `xllm info --devices` says it too, and
#    the CPU still runs;
#  - bad flags: --device without a number, an unknown backend;
#  - with a device (CI: Mesa's lavapipe): greedy text from `run --backend vulkan`
#    equals the CPU's (weights imported in place, copied, or all through the
#    staging pool as on a discrete GPU), the memory split on the startup lines,
#    logits at 100 positions within 1e-3 of the CPU's, `execution.backend: vulkan` in a config does the same,
#    --device past the last device names how many there are, and two pipeline
#    stages (mpirun -np 2 --pp 2) on Vulkan give the same text.
# Skipped under the sanitizers (lavapipe under ASan: Makefile ASAN_EXCLUDE).
# usage: vulkan_cli.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
M="$SRC/models/stories260k"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fails=0
check() { if [ "$1" = 0 ]; then echo "ok   $2"; else echo "FAIL $2"; fails=$((fails+1)); fi; }
[ -n "${XLLM_SANITIZED:-}" ] && { echo "skipped under the sanitizers"; exit 0; }

VK_ICD_FILENAMES=/nonexistent.json "$XLLM" run -m "$M" --backend vulkan -n 4 -p "Hi" > "$T/o" 2> "$T/e"
rc=$?
[ $rc = 1 ] && grep -q "xllm: error: backend 'vulkan'" "$T/e" && grep -qi "driver\|loader" "$T/e"
check $? "no driver: --backend vulkan is a clean error saying what was found (rc $rc: $(tail -1 "$T/e"))"
VK_ICD_FILENAMES=/nonexistent.json "$XLLM" info --devices > "$T/d" 2>&1
grep -q "^backends: cpu, vulkan" "$T/d" && grep -q "^vulkan: " "$T/d"
check $? "no driver: info --devices says why"
VK_ICD_FILENAMES=/nonexistent.json "$XLLM" run -m "$M" -n 4 -p "Hi" --quiet > /dev/null 2>&1
check $? "no driver: the cpu backend still runs"
"$XLLM" run -m "$M" --device > /dev/null 2> "$T/e"; [ $? = 2 ] && grep -q "needs a value" "$T/e"
check $? "--device without a value is refused"
"$XLLM" run -m "$M" --backend cuda -n 2 > /dev/null 2> "$T/e"; [ $? = 1 ] && grep -q "known: cpu, vulkan" "$T/e"
check $? "an unknown backend names the known ones"

if ! "$XLLM" info --devices | grep -q "^vulkan device 0:"; then
    echo "no Vulkan device here: the rest is skipped ($("$XLLM" info --devices | tail -1))"
else
    "$XLLM" run -m "$M" -p "Once upon a time" -n 32 --temp 0 --quiet > "$T/cpu.txt" 2>/dev/null
    "$XLLM" run -m "$M" -p "Once upon a time" -n 32 --temp 0 --quiet --backend vulkan > "$T/vk.txt" 2> "$T/e"
    check $? "run --backend vulkan ($(tail -1 "$T/e"))"
    cmp -s "$T/cpu.txt" "$T/vk.txt"
    check $? "greedy text on vulkan equals the cpu's"
    # memory (docs/VULKAN.md): weights imported in place from the file's mapping, or
    # copied (XLLM_VULKAN_IMPORT=0), or everything through the staging pool as on a
    # discrete GPU (XLLM_VULKAN_UNIFIED=0): the same text each way, and the split
    # on the engine's startup line
    for sw in XLLM_VULKAN_IMPORT=0 XLLM_VULKAN_UNIFIED=0; do
        env "$sw" XLLM_VULKAN_VALIDATE=1 "$XLLM" run -m "$M" -p "Once upon a time" -n 32 --temp 0 --quiet --backend vulkan \
            > "$T/vk2.txt" 2> "$T/e"
        [ $? = 0 ] && cmp -s "$T/cpu.txt" "$T/vk2.txt" && ! grep -q validation "$T/e"
        check $? "$sw: the same text ($(tail -1 "$T/e"))"
    done
    printf 'model: %s\nverbose: true\nexecution:\n  backend: vulkan\nmemory:\n  workspace_size: 16MiB\n  swap_size: 1MiB\n' "$M" > "$T/v.yaml"
    "$XLLM" run --config "$T/v.yaml" -p "Hi" -n 2 > /dev/null 2> "$T/e"
    grep -q "^xllm engine: scratch .* | KV pool .* | swap pool" "$T/e" && grep -q "^xllm backend: vulkan .*weights .* imported in place .* copied .*device memory .*staging pool" "$T/e"
    check $? "the startup lines give the memory split ($(grep '^xllm backend' "$T/e"))"
    if "$XLLM" info --devices | grep -q "^vulkan device 0: llvmpipe"; then # lavapipe imports host memory
        grep -q "weights 1.0 MiB imported in place (36 matrices" "$T/e"
        check $? "lavapipe: every stories260k matrix imported in place, none copied"
        XLLM_VULKAN_IMPORT=0 "$XLLM" run --config "$T/v.yaml" -p "Hi" -n 2 > /dev/null 2> "$T/e"
        grep -q "weights 0.0 MiB imported in place (0 matrices.* + 1.0 MiB copied (36)" "$T/e"
        check $? "XLLM_VULKAN_IMPORT=0: every matrix copied"
    fi
    # the logits at 100 positions (more than the head's 64 rows per read-back) against the cpu's
    IDS=$(seq -s, 1 100)
    "$XLLM" logits -m "$M" --ids "$IDS" --out "$T/l_cpu.f32" > /dev/null 2>&1
    for sw in XLLM_VULKAN_UNIFIED=1 XLLM_VULKAN_UNIFIED=0; do
        env "$sw" "$XLLM" logits -m "$M" --ids "$IDS" --backend vulkan --out "$T/l_vk.f32" > /dev/null 2> "$T/e"
        d=$(python3 -c "
import array, sys
a = array.array('f', open(sys.argv[1], 'rb').read()); b = array.array('f', open(sys.argv[2], 'rb').read())
print(max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) == 100 * 512 else 'size %d %d' % (len(a), len(b)))" "$T/l_cpu.f32" "$T/l_vk.f32")
        python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-3 else 1)" "$d" 2> /dev/null
        check $? "$sw: logits at 100 positions within 1e-3 of the cpu's (max |difference| $d)"
    done
    printf 'model: %s\nexecution:\n  backend: vulkan\n  device: 0\n' "$M" > "$T/c.yaml"
    "$XLLM" run --config "$T/c.yaml" -p "Once upon a time" -n 32 --temp 0 --quiet > "$T/vky.txt" 2> "$T/e"
    check $? "execution.backend: vulkan in a config ($(tail -1 "$T/e"))"
    cmp -s "$T/cpu.txt" "$T/vky.txt"
    check $? "the config's vulkan gives the same text"
    printf 'model: %s\nexecution:\n  backend: metal\n' "$M" > "$T/bad.yaml"
    "$XLLM" run --config "$T/bad.yaml" -n 2 > /dev/null 2> "$T/e"; [ $? != 0 ] && grep -q "backend" "$T/e"
    check $? "an unknown execution.backend is refused ($(tail -1 "$T/e"))"
    "$XLLM" run -m "$M" --backend vulkan --device 15 -n 2 > /dev/null 2> "$T/e"; [ $? = 1 ] && grep -q "does not exist" "$T/e"
    check $? "--device past the last device ($(tail -1 "$T/e"))"
    # two pipeline stages over MPI, each on Vulkan: the same text as one process
    if command -v mpirun > /dev/null; then
        MPIRUN=(mpirun --oversubscribe)
        [ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
        export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
        timeout -k 10 120 "${MPIRUN[@]}" -np 2 "$XLLM" run -m "$M" --pp 2 --backend vulkan -p "Once upon a time" -n 32 \
            --temp 0 --quiet < /dev/null > "$T/pp.txt" 2> "$T/e"
        rc=$?
        if [ $rc != 0 ] && grep -q "without MPI" "$T/e"; then
            echo "this build has no MPI: the --pp check is skipped"
        else
            [ $rc = 0 ] && cmp -s "$T/cpu.txt" "$T/pp.txt"
            check $? "mpirun -np 2 --pp 2 --backend vulkan gives one process's text (rc $rc)"
        fi
    fi
fi
echo "vulkan_cli: $fails failures"
[ $fails = 0 ]
