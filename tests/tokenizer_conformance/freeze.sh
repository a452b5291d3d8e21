#!/usr/bin/env bash
# freeze.sh - (re)make the committed expectations of the conformance test:
# strings.jsonl.gz from gen_strings.py, and frozen/NAME.jsonl.gz from HF
# tokenizers for every tokenizer the repository ships and every variant
# make_variants.py builds from them. Needs node + npm (the registry once).
# usage: tests/tokenizer_conformance/freeze.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"
MODS=$(hf_modules) || { echo "freeze.sh: cannot install $HF_PKG" >&2; exit 1; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
python3 "$HERE/gen_strings.py" "$T/strings.jsonl" 3000
gzip -9n -c "$T/strings.jsonl" > "$HERE/strings.jsonl.gz"
mkdir -p "$HERE/frozen"
TD="$SRC/tests/data/tokenizers"
mkdir -p "$T/tok/tinystories-tok512-metaspace"
cp "$TD/tinystories-tok512/tokenizer_metaspace.json" "$T/tok/tinystories-tok512-metaspace/tokenizer.json"
python3 "$HERE/make_variants.py" "$TD/qwen3" "$TD/tinystories-tok512" "$T/tok" >/dev/null
for d in "$TD/qwen3" "$TD/tinystories-tok512" "$T"/tok/*; do
    name=$(basename "$d")
    node "$HERE/hf_expect.js" "$MODS" "$d/tokenizer.json" "$T/strings.jsonl" "$T/$name.jsonl"
    gzip -9n -c "$T/$name.jsonl" > "$HERE/frozen/$name.jsonl.gz"
    echo "froze $name"
done
