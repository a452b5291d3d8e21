#!/usr/bin/env bash
# compare_llamacpp.sh - xLLM vs llama.cpp on identical weights, same threads, one session.
#
# For each GGUF type (Q4_0, Q8_0) of a synthesized model (TinyLlama-1.1B shapes by default),
# `xllm synth --dtype q4|q8 -o M.xllm --gguf M.gguf` writes the .xllm and, from the very same
# tensor bytes, the GGUF (llama Q/K rows permuted as llama.cpp wants them). Then ROUNDS
# rounds alternate `xllm bench` on M.xllm and bench/llamacpp_bench.mjs (node-llama-cpp 3.21.1,
# prebuilt CPU binaries, GPU off) on M.gguf, each R runs after a warm-up, and the script
# prints pp and tg tokens/s for both (mean ± sd over the rounds' means) and xLLM/llama.cpp.
# With XLLM_ON_GGUF=1 xLLM also runs the GGUF file itself (the same file llama.cpp reads).
#
#   bench/compare_llamacpp.sh [BUILD_DIR]        # default build
# environment: SHAPE=tinyllama-1.1b TYPES="Q4_0 Q8_0" THREADS=2 P=512 N=128 R=3 ROUNDS=3
#              MODELS=~/.cache/xllm-bench/models (synthesized once, reused)
#              XLLM_BENCH_NODE_MODULES=~/.cache/xllm-bench/node_modules (installed once)
#              RESULTS=FILE (keep every run's JSON line there)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$SRC/build}
XLLM=$BUILD/xllm
SHAPE=${SHAPE:-tinyllama-1.1b}
TYPES=${TYPES:-"Q4_0 Q8_0"}
THREADS=${THREADS:-2}; P=${P:-512}; N=${N:-128}; R=${R:-3}; ROUNDS=${ROUNDS:-3}
CACHE=$HOME/.cache/xllm-bench
MODELS=${MODELS:-$CACHE/models}
export XLLM_BENCH_NODE_MODULES=${XLLM_BENCH_NODE_MODULES:-$CACHE/node_modules}
[ -x "$XLLM" ] || { echo "no $XLLM: build first (make build)" >&2; exit 1; }
if [ ! -f "$XLLM_BENCH_NODE_MODULES/node-llama-cpp/package.json" ]; then
    echo "installing node-llama-cpp 3.21.1 into $CACHE" >&2
    mkdir -p "$CACHE"
    npm install --prefix "$CACHE" --no-audit --no-fund --no-save node-llama-cpp@3.21.1 >&2
fi
mkdir -p "$MODELS"
OUT=$(mktemp); trap 'rm -f "$OUT"' EXIT
[ -n "${RESULTS:-}" ] && : > "$RESULTS"

for type in $TYPES; do
    case $type in Q4_0) dt=q4 ;; Q8_0) dt=q8 ;; F16) dt=f16 ;; F32) dt=f32 ;; *) echo "unknown type $type" >&2; exit 1 ;; esac
    base=$MODELS/$SHAPE-$type
    if [ ! -f "$base.gguf" ] || [ ! -f "$base.xllm" ]; then
        echo "synthesizing $base.{xllm,gguf}" >&2
        "$XLLM" synth --shape "$SHAPE" --dtype $dt -o "$base.xllm" --gguf "$base.gguf" --gguf-type $type
    fi
    for round in $(seq "$ROUNDS"); do
        echo "[$type round $round/$ROUNDS] xllm bench" >&2
        printf '%s xllm ' "$type" >> "$OUT"
        "$XLLM" bench -m "$base.xllm" -p "$P" -n "$N" -t "$THREADS" -r "$R" --json 2>/dev/null >> "$OUT"
        echo "[$type round $round/$ROUNDS] llama.cpp" >&2
        printf '%s llama.cpp ' "$type" >> "$OUT"
        node "$SRC/bench/llamacpp_bench.mjs" -m "$base.gguf" -p "$P" -n "$N" -t "$THREADS" -r "$R" >> "$OUT"
        if [ "${XLLM_ON_GGUF:-0}" = 1 ]; then
            echo "[$type round $round/$ROUNDS] xllm bench on the GGUF" >&2
            printf '%s xllm-gguf ' "$type" >> "$OUT"
            "$XLLM" bench -m "$base.gguf" -p "$P" -n "$N" -t "$THREADS" -r "$R" --json 2>/dev/null >> "$OUT"
        fi
    done
done

[ -n "${RESULTS:-}" ] && cp "$OUT" "$RESULTS"
python3 - "$OUT" "$SHAPE" "$P" "$N" "$THREADS" "$ROUNDS" "$R" <<'PY'
import json, statistics, sys
path, shape, P, N, T, rounds, reps = sys.argv[1:]
runs = {}
for line in open(path):
    typ, eng, js = line.split(" ", 2)
    runs.setdefault((typ, eng), []).append(json.loads(js))
def ms(x):
    return statistics.mean(x), (statistics.stdev(x) if len(x) > 1 else 0.0)
print("%s, %s threads, %s rounds x %s runs: mean ± sd of the rounds' means; best = fastest round" % (shape, T, rounds, reps))
print("| type | engine | pp%s tok/s | best | tg%s tok/s | best |" % (P, N))
print("|---|---|---|---|---|---|")
for (typ, eng), rs in runs.items():
    pp, tg = [r["pp_tok_s"] for r in rs], [r["tg_tok_s"] for r in rs]
    print("| %s | %s | %.2f ± %.2f | %.2f | %.2f ± %.2f | %.2f |" % (typ, eng, *ms(pp), max(pp), *ms(tg), max(tg)))
for typ in dict.fromkeys(t for t, _ in runs):
    x, l = runs.get((typ, "xllm")), runs.get((typ, "llama.cpp"))
    if not x or not l:
        continue
    for key, name in (("pp_tok_s", "pp" + P), ("tg_tok_s", "tg" + N)):
        a, b = [r[key] for r in x], [r[key] for r in l]
        per = [p / q for p, q in zip(a, b)]  # runs alternate: a round's pair saw the same machine
        print("%s %s xLLM/llama.cpp: %.2fx of the means, %.2fx of the bests, per round %s (median %.2fx)" % (
            typ, name, statistics.mean(a) / statistics.mean(b), max(a) / max(b),
            " ".join("%.2f" % v for v in per), statistics.median(per)))
PY
