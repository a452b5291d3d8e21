#!/usr/bin/env bash
# neighbour_load.sh - decode under a deliberate neighbour: xLLM against llama.cpp (llama-bench)
# on the same GGUF file while a memory-bandwidth hog runs on one core (issue 28).
#
# The hog is one process copying a 256 MiB buffer into another without pause (Python's
# bytearray slice assignment: a memcpy), pinned to core HOG_CPU with taskset, so it takes that
# core's time and a share of the memory bandwidth for the whole run. Both engines run with
# THREADS threads, unpinned, ROUNDS rounds alternating (xLLM first, then llama.cpp, then the
# optional A/B variant of xLLM: XLLM_B="ENV=VALUE ..." runs xllm again under that environment),
# tg N after a short prompt (xllm bench -p 16; llama-bench -p 0), R runs each. Prints every
# round's tokens/s and the per-round ratio xLLM / llama.cpp, median (min-max). HOG=0: no hog
# (the same rounds on a quiet host, to compare).
#
#   MODEL=/work/cache/models/tinyllama-1.1b-Q4_0.gguf bench/neighbour_load.sh [BUILD_DIR]
# environment: LLAMA_BIN=/work/cache/llama.cpp/build/bin THREADS=2 N=128 R=1 ROUNDS=10 HOG=1
#              HOG_CPU=1 XLLM_B=
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$SRC/build}
XLLM=$BUILD/xllm
LLAMA_BIN=${LLAMA_BIN:-/work/cache/llama.cpp/build/bin}
MODEL=${MODEL:?set MODEL to a GGUF file}
THREADS=${THREADS:-2}; N=${N:-128}; R=${R:-1}; ROUNDS=${ROUNDS:-10}
HOG=${HOG:-1}; HOG_CPU=${HOG_CPU:-1}; XLLM_B=${XLLM_B:-}
[ -x "$XLLM" ] || { echo "no $XLLM: build first" >&2; exit 1; }
[ -x "$LLAMA_BIN/llama-bench" ] || { echo "no $LLAMA_BIN/llama-bench (see bench/compare_llamacpp_gguf.sh)" >&2; exit 1; }
OUT=$(mktemp)
hog_pid=
cleanup() { [ -n "$hog_pid" ] && kill "$hog_pid" 2>/dev/null; rm -f "$OUT"; }
trap cleanup EXIT
if [ "$HOG" = 1 ]; then
    taskset -c "$HOG_CPU" python3 -c '
a = bytearray(1 << 28); b = bytearray(b"x" * (1 << 28))
while True:
    a[:] = b' &
    hog_pid=$!
    sleep 1
fi
xtg() { # the tg tokens/s of one xllm bench run, under the environment given
    env "$@" "$XLLM" bench -m "$MODEL" -p 16 -n "$N" -t "$THREADS" -r "$R" --json --no-bandwidth 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["tg_tok_s"])'
}
for round in $(seq "$ROUNDS"); do
    x=$(xtg)
    l=$("$LLAMA_BIN/llama-bench" -m "$MODEL" -p 0 -n "$N" -t "$THREADS" -r "$R" -o json 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])')
    b=0; [ -z "$XLLM_B" ] || b=$(xtg $XLLM_B)
    echo "round $round: xllm $x llama.cpp $l${XLLM_B:+ xllm[$XLLM_B] $b} (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    echo "$x $l $b" >> "$OUT"
done
python3 - "$OUT" "$MODEL" "$THREADS" "$N" "$ROUNDS" "$HOG" "$XLLM_B" <<'PY'
import statistics, sys
path, model, T, N, rounds, hog, b = sys.argv[1:]
rows = [list(map(float, l.split())) for l in open(path)]
mm = lambda v: "%.2f (%.2f-%.2f)" % (statistics.median(v), min(v), max(v))
print("%s, %s threads, tg%s, %s rounds alternating, %s" % (model.split("/")[-1], T, N, rounds,
      "a memory-bandwidth hog on one core" if hog == "1" else "no hog"))
print("| engine | tg tok/s median (min-max) | ratio to llama.cpp per round, median (min-max) |")
print("|---|---|---|")
print("| xLLM | %s | %s |" % (mm([r[0] for r in rows]), mm([r[0] / r[1] for r in rows])))
print("| llama.cpp | %s | 1 |" % mm([r[1] for r in rows]))
if b:
    print("| xLLM with %s | %s | %s |" % (b, mm([r[2] for r in rows]), mm([r[2] / r[1] for r in rows])))
PY
