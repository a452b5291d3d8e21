#!/usr/bin/env bash
# bench_constrained.sh - end to end: decode with a constraint vs without, on one
# model, alternating the variants round by round (json_object, a nested JSON
# Schema, none), at batch 1 and batch B (1 or B prompts at once through
# --prompts). Prints each run's decode rate from `xllm run`'s summary line
# ("decode X tokens/s": the tokens after each sequence's first over the span
# from the first first token to the last token, taken on the engine's own clock,
# so load and prefill are left out), then per variant the median (min-max) and
# its per-round ratio to unconstrained. A constrained output may end early (a
# complete JSON value: json_object does): at batch 1 the rate is per token
# either way; at batch B a batch that thins out decodes fewer tokens per step,
# which the ratio would count against the constraint: so the prompts are chosen
# (below) among candidates so that no json_object output closes early.
# usage: bench_constrained.sh XLLM MODEL [ROUNDS=5] [TOKENS=32] [THREADS=2] [B=16]
set -u
XLLM=$1; MODEL=$2; ROUNDS=${3:-5}; N=${4:-32}; TH=${5:-2}; B=${6:-16}
SRC=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
# a nested schema that no TOKENS-token output completes (so that every variant
# generates the same number of tokens)
SCHEMA=$T/nested.json
cat > "$SCHEMA" <<'JSON'
{"type": "object", "properties": {"customer": {"type": "object", "properties": {
  "name": {"type": "string", "minLength": 200, "maxLength": 240},
  "tags": {"type": "array", "items": {"type": "string", "minLength": 8}, "minItems": 2}},
  "required": ["name", "tags"]}, "id": {"type": "integer", "minimum": 1}}, "required": ["customer", "id"]}
JSON
# Prompts whose json_object output does not complete within TOKENS tokens, so
# that every variant decodes the same number of tokens in a batch of the same
# size (a batch that thins out as objects close would flatter the constraint
# per step and penalize it per token): a selection pass over 6*B candidates.
for i in $(seq 1 $((6 * B))); do echo "Order number $i was placed by"; done > "$T/candidates"
"$XLLM" run -m "$MODEL" -n "$N" --temp 0 -t "$TH" --ignore-eos --json-object --json --prompts "$T/candidates" 2>/dev/null |
    python3 -c '
import sys, json
lines = open(sys.argv[1]).read().splitlines()
keep = [lines[i] for i, l in enumerate(sys.stdin) if len(json.loads(l)["ids"]) == int(sys.argv[2])]
print("\n".join(keep[: int(sys.argv[3])]))' "$T/candidates" "$N" "$B" > "$T/prompts"
if [ "$(wc -l < "$T/prompts")" -lt "$B" ]; then
    echo "only $(wc -l < "$T/prompts") of $((6 * B)) prompts keep json_object open for $N tokens; lower TOKENS" >&2
    exit 1
fi
echo "prompts (json_object stays open for $N tokens):" $(sed 's/Order number \([0-9]*\).*/\1/' "$T/prompts")
head -1 "$T/prompts" > "$T/prompt1"
run() { # BATCH VARIANT -> tokens/s
    local args=(-m "$MODEL" -n "$N" --temp 0 -t "$TH" --ignore-eos)
    case $2 in json_object) args+=(--json-object);; schema) args+=(--json-schema "$SCHEMA");; esac
    if [ "$1" = 1 ]; then args+=(--prompts "$T/prompt1"); else args+=(--prompts "$T/prompts"); fi
    "$XLLM" run "${args[@]}" 2>&1 >/dev/null |
        sed -n 's/.*generated \([0-9]*\) tokens in \([0-9.]*\) s.*decode \([0-9.]*\) tokens\/s, \([0-9.]*\) ms\/step.*/\3 \1 \2 \4/p' | tail -1
}
for batch in 1 "$B"; do
    declare -A v=()
    for r in $(seq 1 "$ROUNDS"); do
        for variant in none json_object schema; do
            out=$(run "$batch" "$variant"); x=${out%% *}; v[$variant]="${v[$variant]:-} $x"
            echo "batch $batch round $r $variant: decode $x tok/s (tokens, wall seconds, ms/step: ${out#* })"
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
