#!/usr/bin/env bash
# bench_constrained.sh - end to end: decode with a constraint vs without, on one
# model, alternating the variants round by round (json_object, a nested JSON
# Schema, none), at batch 1 and batch B (1 or B prompts at once through
# --prompts). Prints each run's generated tokens / wall seconds from `xllm
# run`'s summary line ("generated N tokens in X s": prefill included, two
# decimals), then per variant the median (min-max) and its ratio to
# unconstrained. A constrained output may end early (a complete JSON value):
# tokens/s is per generated token either way.
# usage: bench_constrained.sh XLLM MODEL [ROUNDS=5] [TOKENS=32] [THREADS=2] [B=16]
set -u
XLLM=$1; MODEL=$2; ROUNDS=${3:-5}; N=${4:-32}; TH=${5:-2}; B=${6:-16}
SRC=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
# a nested schema that no TOKENS-token output completes (so that every variant
# generates the same tokens; json_object may end early: its runs show N)
SCHEMA=$T/nested.json
cat > "$SCHEMA" <<'JSON'
{"type": "object", "properties": {"customer": {"type": "object", "properties": {
  "name": {"type": "string", "minLength": 200, "maxLength": 240},
  "tags": {"type": "array", "items": {"type": "string", "minLength": 8}, "minItems": 2}},
  "required": ["name", "tags"]}, "id": {"type": "integer", "minimum": 1}}, "required": ["customer", "id"]}
JSON
for i in $(seq 1 "$B"); do echo "Order number $i was placed by"; done > "$T/prompts"
head -1 "$T/prompts" > "$T/prompt1"
run() { # BATCH VARIANT -> tokens/s
    local args=(-m "$MODEL" -n "$N" --temp 0 -t "$TH" --ignore-eos)
    case $2 in json_object) args+=(--json-object);; schema) args+=(--json-schema "$SCHEMA");; esac
    if [ "$1" = 1 ]; then args+=(--prompts "$T/prompt1"); else args+=(--prompts "$T/prompts"); fi
    "$XLLM" run "${args[@]}" 2>&1 >/dev/null | sed -n 's/.*generated \([0-9]*\) tokens in \([0-9.]*\) s.*/\1 \2/p' | tail -1 |
        awk '{ printf "%.4f %d %.2f\n", $1 / $2, $1, $2 }'
}
for batch in 1 "$B"; do
    declare -A v=()
    for r in $(seq 1 "$ROUNDS"); do
        for variant in none json_object schema; do
            out=$(run "$batch" "$variant"); x=${out%% *}; v[$variant]="${v[$variant]:-} $x"
            echo "batch $batch round $r $variant: $x tok/s (tokens, seconds: ${out#* })"
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
