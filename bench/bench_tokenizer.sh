#!/usr/bin/env bash
# bench_tokenizer.sh - xLLM's tokenizer beside HuggingFace `tokenizers` (Rust,
# through the npm package @anush008/tokenizers) on the same text in the same
# run: load time and encode throughput, with ratios.
#
# usage: bench/bench_tokenizer.sh [BUILD_DIR] [TEXT_FILE]
#   BUILD_DIR  holds bench_tokenizer (default: build)
#   TEXT_FILE  default: ~1.2 MB built here from English prose (the licence
#              texts in /usr/share/common-licenses), Python source (the
#              standard library) and the multilingual tokenizer corpus
# Tokenizers: those of ../shared/data/tokenizers (or /work/shared/...) that
# exist, else the ones shipped in tests/data/tokenizers.
# The npm package is installed once into $XLLM_NPM_CACHE (~/.cache/xllm-npm).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
TEXT=${2:-}
NPM_DIR=${XLLM_NPM_CACHE:-$HOME/.cache/xllm-npm}
BIN=$BUILD/bench_tokenizer
[ -x "$BIN" ] || { echo "build first: $BIN missing" >&2; exit 1; }

if [ ! -d "$NPM_DIR/node_modules/@anush008/tokenizers" ]; then
    mkdir -p "$NPM_DIR"
    (cd "$NPM_DIR" && npm install --no-audit --no-fund --silent @anush008/tokenizers@0.6.0 >/dev/null)
fi

SHARED=""
for d in "$ROOT/../shared/data/tokenizers" /work/shared/data/tokenizers; do
    [ -d "$d" ] && { SHARED=$d; break; }
done

if [ -z "$TEXT" ]; then
    TEXT=$BUILD/bench_tokenizer_text.txt
    python3 - "$TEXT" "${SHARED:-$ROOT/tests/data/tokenizers}" <<'PY'
import glob, json, os, sys
out, tokdir = sys.argv[1], sys.argv[2]
parts = []
for p in sorted(glob.glob("/usr/share/common-licenses/*")):
    if os.path.isfile(p):
        parts.append(open(p, encoding="utf-8", errors="replace").read())
code, size = [], 0
for p in sorted(glob.glob("/usr/lib/python3*/*.py")):
    s = open(p, encoding="utf-8", errors="replace").read()
    code.append(s); size += len(s)
    if size > 600000: break
parts += code
corpus = [c for c in glob.glob(os.path.join(tokdir, "**", "corpus.jsonl"), recursive=True)] + \
         glob.glob(os.path.join(tokdir, "corpus.jsonl"))
lines = []
for c in corpus[:1]:
    lines = [json.loads(l)["text"] for l in open(c, encoding="utf-8")]
parts += ["\n".join(lines)] * 60
open(out, "w", encoding="utf-8").write("\n".join(parts))
PY
fi

printf "text: %s (%s bytes)\n\n" "$TEXT" "$(wc -c < "$TEXT")"
printf "%-20s %10s %10s %8s   %10s %10s %8s   %8s\n" tokenizer "load xLLM" "load HF" "ratio" "enc xLLM" "enc HF" "ratio" "tokens"
printf "%-20s %10s %10s %8s   %10s %10s %8s   %8s\n" "" "(s)" "(s)" "HF/xLLM" "(MB/s)" "(MB/s)" "xLLM/HF" "equal"
run() { # NAME DIR
    local x h
    x=$("$BIN" "$2" "$TEXT") || return 0
    h=$(node "$ROOT/bench/bench_tokenizer.js" "$NPM_DIR/node_modules" "$2/tokenizer.json" "$TEXT") || return 0
    python3 - "$1" "$x" "$h" <<'PY'
import json, sys
n, x, h = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
print("%-20s %10.3f %10.3f %8.1f   %10.2f %10.2f %8.2f   %8s" % (n, x["load_s"], h["load_s"], h["load_s"] / x["load_s"],
      x["mb_per_s"], h["mb_per_s"], x["mb_per_s"] / h["mb_per_s"], "yes" if x["tokens"] == h["tokens"] else "NO"))
PY
}
for name in llama3 qwen3 gemma3 llama2 tinystories-tok512; do
    if [ -n "$SHARED" ] && [ -f "$SHARED/$name/tokenizer.json" ]; then run "$name" "$SHARED/$name"
    elif [ -f "$ROOT/tests/data/tokenizers/$name/tokenizer.json" ]; then run "$name" "$ROOT/tests/data/tokenizers/$name"
    fi
done
