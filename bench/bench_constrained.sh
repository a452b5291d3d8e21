#!/usr/bin/env bash
# bench_constrained.sh - end to end: decode with a constraint vs without, on one
# model, alternating the variants round by round (json_object, a nested JSON
# Schema, none), at batch 1 (one prompt) and batch B (B prompts at once through
# --prompts). Prints each run's generated tokens/s from `xllm run`'s summary
# line, then per variant the median (min-max) and its ratio to unconstrained.
# usage: bench_constrained.sh XLLM MODEL [ROUNDS=5] [TOKENS=32] [THREADS=2] [B=16]
set -u
XLLM=$1; MODEL=$2; ROUNDS=${3:-5}; N=${4:-32}; TH=${5:-2}; B=${6:-16}
SRC=$(cd "$(dirname "$0")/.." && pwd)
SCHEMA=$SRC/tests/data/schemas/order.json
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
for i in $(seq 1 "$B"); do echo "Order number $i was placed by"; done > "$T/prompts"
run() { # BATCH VARIANT -> tokens/s
    local args=(-m "$MODEL" -n "$N" --temp 0 -t "$TH" --ignore-eos)
    case $2 in json_object) args+=(--json-object);; schema) args+=(--json-schema "$SCHEMA");; esac
    if [ "$1" = 1 ]; then args+=(-p "Order number 1 was placed by"); else args+=(--prompts "$T/prompts"); fi
    "$XLLM" run "${args[@]}" 2>&1 >/dev/null | sed -n 's/.*generated [0-9]* tokens[^(]*(\([0-9.]*\) tokens\/s.*/\1/p' | tail -1
}
for batch in 1 "$B"; do
    declare -A v=()
    for r in $(seq 1 "$ROUNDS"); do
        for variant in none json_object schema; do
            x=$(run "$batch" "$variant"); v[$variant]="${v[$variant]:-} $x"
            echo "batch $batch round $r $variant: $x tok/s"
        done
    done
    for variant in none json_object schema; do
        python3 - "$batch" "$variant" ${v[none]} -- ${v[$variant]} <<'PY'
import sys, statistics as st
b, name = sys.argv[1], sys.argv[2]
a = sys.argv[3:]; k = a.index("--"); base = [float(x) for x in a[:k]]; x = [float(y) for y in a[k + 1:]]
ratios = [xi / bi for xi, bi in zip(x, base)]
print(f"batch {b} {name}: {st.median(x):.2f} tok/s ({min(x):.2f}-{max(x):.2f}), "
      f"vs none per round {st.median(ratios):.3f}x ({min(ratios):.3f}-{max(ratios):.3f})")
PY
    done
    unset v
done
