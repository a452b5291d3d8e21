#!/usr/bin/env bash
# structured_output.sh - constrained decoding through `xllm serve` with real
# clients: tests/server/structured.e2e.mjs (the OpenAI client, ajv, zod) under
# node's test runner, then the CLI's --json-schema / --grammar / --regex.
# usage: structured_output.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$(cd "$(dirname "$1")" && pwd)/$(basename "$1"); SRC=$2
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# --- the CLI
S=$SRC/tests/data/schemas
"$XLLM" run -m "$SRC/models/stories260k" -p "Once upon a time" --json-schema "$S/order.json" -n 480 --temp 0 --quiet > "$T/o" 2> "$T/e" || fail "run --json-schema: $(cat "$T/e")"
python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); assert v["status"] in ("pending","paid","shipped","cancelled") and 1 <= len(v["items"]) <= 3' "$T/o" || fail "run --json-schema output: $(cat "$T/o")"
printf 'root ::= "Tom " ("ran" | "sat") " " [0-9]{2}\n' > "$T/g.gbnf"
out=$("$XLLM" run -m "$SRC/models/stories260k" -p "Once" --grammar "$T/g.gbnf" -n 40 --seed 2 --quiet) || fail "run --grammar"
[[ "$out" =~ ^Tom\ (ran|sat)\ [0-9]{2}$ ]] || fail "run --grammar output: '$out'"
out=$("$XLLM" run -m "$SRC/models/stories260k" -p "Once" --regex '[a-z]{3,5}-[0-9]{3}' -n 40 --seed 2 --quiet) || fail "run --regex"
[[ "$out" =~ ^[a-z]{3,5}-[0-9]{3}$ ]] || fail "run --regex output: '$out'"
# the matcher's tables emptied at every step (each sample then rebuilds its state from its ids): the same output
XLLM_GRAMMAR_MAX_BYTES=1 "$XLLM" run -m "$SRC/models/stories260k" -p "Once upon a time" --json-schema "$S/order.json" -n 480 --temp 0 --quiet > "$T/o2" 2> "$T/e" || fail "run with resets: $(cat "$T/e")"
cmp -s "$T/o" "$T/o2" || fail "resetting the matcher changed the output: $(cat "$T/o2")"
XLLM_GRAMMAR_MAX_BYTES=1 "$XLLM" run -m "$SRC/models/stories260k" -p "Lily" --json-schema "$S/recipe.json" -n 480 --seed 4 --quiet > "$T/o3" 2> "$T/e" || fail "run with resets (sampled)"
"$XLLM" run -m "$SRC/models/stories260k" -p "Lily" --json-schema "$S/recipe.json" -n 480 --seed 4 --quiet > "$T/o4" 2> "$T/e" || fail "run (sampled)"
cmp -s "$T/o3" "$T/o4" || fail "resetting the matcher changed the sampled output"
printf 'Lily\nOnce upon a time\n' > "$T/prompts" # 2 prompts x 3 samples: the samples share a matcher
XLLM_GRAMMAR_MAX_BYTES=1 "$XLLM" run -m "$SRC/models/stories260k" --prompts "$T/prompts" --samples 3 --json-schema "$S/review.json" -n 300 --seed 5 --quiet > "$T/o5" 2> "$T/e" || fail "samples with resets: $(cat "$T/e")"
"$XLLM" run -m "$SRC/models/stories260k" --prompts "$T/prompts" --samples 3 --json-schema "$S/review.json" -n 300 --seed 5 --quiet > "$T/o6" 2> "$T/e" || fail "samples"
cmp -s "$T/o5" "$T/o6" || fail "resetting the shared matcher changed the samples"
[ "$(sort -u "$T/o6" | wc -l)" -ge 4 ] || fail "the samples should differ: $(cat "$T/o6")"
printf '{"not": {}}' > "$T/bad.json"
"$XLLM" run -m "$SRC/models/stories260k" -p "x" --json-schema "$T/bad.json" -n 4 > "$T/o" 2> "$T/e" && fail "an unsupported schema must fail"
grep -q '"not"' "$T/e" || fail "the error names the keyword: $(cat "$T/e")"
"$XLLM" run -m "$SRC/models/stories260k" -p "x" --regex a --json-object -n 4 > "$T/o" 2> "$T/e" && fail "two constraints must fail"
echo "cli: ok"

# --- the OpenAI client, ajv, zod
cd "$SRC/tests/server" || exit 1
if [ ! -d node_modules/ajv-formats ] || [ ! -d node_modules/zod ]; then
    npm ci --no-audit --no-fund > "$T/npm" 2>&1 || { cat "$T/npm"; fail "npm ci failed"; }
fi
XLLM_BIN="$XLLM" node --test --test-concurrency=1 ./structured.e2e.mjs || exit 1
echo "structured output: ok"
