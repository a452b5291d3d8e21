#!/usr/bin/env bash
# run.sh - runs the libFuzzer harnesses of a build made with XLLM_FUZZ=ON.
#
#   fuzz/run.sh BUILD SECONDS [HARNESS...]   fuzz each harness for SECONDS (all seven by default)
#   fuzz/run.sh BUILD replay  [HARNESS...]   run every saved input of fuzz/corpus/<h> once
#
# Runs use -seed=$FUZZ_SEED (default 1), so a CI smoke run repeats the same mutations.
# Fuzzing starts from the saved corpus (fuzz/corpus/<h>: seeds from tests/data and
# regression inputs) and keeps what it finds in BUILD/fuzz-corpus/<h>; a crash,
# leak, timeout (30 s) or out-of-memory (2 GB) input is written to
# BUILD/fuzz-artifacts/ and the script fails. Per harness it prints libFuzzer's
# final statistics (executions, coverage) on one line.
set -u
BUILD=${1:?build dir}; WHAT=${2:?seconds or replay}; shift 2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HARNESSES=${*:-gguf safetensors xllm tokenizer template config http}
mkdir -p "$BUILD/fuzz-artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fail=0
for h in $HARNESSES; do
    bin="$BUILD/fuzz_$h"
    [ -x "$bin" ] || { echo "fuzz: $bin not built (cmake -DXLLM_FUZZ=ON with CC=clang)"; exit 1; }
    saved="$ROOT/fuzz/corpus/$h"
    opts=(-timeout=30 -rss_limit_mb=2048 -malloc_limit_mb=2048 -artifact_prefix="$BUILD/fuzz-artifacts/$h-")
    # fuzz_http answers requests through the server's handlers, which log a line per refusal:
    # those go to /dev/null (libFuzzer keeps its own output and the sanitizers' reports)
    [ "$h" = http ] && opts+=(-close_fd_mask=2)
    if [ "$WHAT" = replay ]; then
        n=$(ls "$saved" | wc -l)
        if "$bin" "${opts[@]}" "$saved"/* >"$BUILD/fuzz-artifacts/$h.log" 2>&1; then
            echo "fuzz replay $h: $n inputs ok"
        else
            echo "fuzz replay $h: FAILED"; tail -40 "$BUILD/fuzz-artifacts/$h.log"; fail=1
        fi
        continue
    fi
    work="$BUILD/fuzz-corpus/$h"
    mkdir -p "$work"
    log="$BUILD/fuzz-artifacts/$h.log"
    t0=$(date +%s)
    "$bin" "${opts[@]}" -seed="${FUZZ_SEED:-1}" -max_total_time="$WHAT" -print_final_stats=1 -dict="$ROOT/fuzz/dict/$h.dict" \
        -max_len=65536 "$work" "$saved" >"$log" 2>&1
    rc=$?
    execs=$(grep -ao 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
    [ -n "$execs" ] || execs=$(grep -ao '^#[0-9]*' "$log" | tail -1 | tr -d '#')
    cov=$(grep -ao 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1)
    echo "fuzz $h: $(( $(date +%s) - t0 ))s, ${execs:-?} executions, ${cov:-cov ?}, corpus $(ls "$work" | wc -l), rc $rc"
    if [ $rc -ne 0 ]; then
        fail=1
        grep -aE "ERROR|SUMMARY|runtime error|Test unit written" "$log" | head -8
    fi
done
exit $fail
