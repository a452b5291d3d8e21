#!/usr/bin/env bash
# arch_hf.sh - the HF form of each GGUF family of tests/data/archs (src/format/arch.c):
# tests/e2e/lib/gguf_to_hf.py writes a HuggingFace checkpoint directory from the same weights
# with HF's tensor names and config.json keys (Gemma's norms as w - 1, llama's q/k rows in
# rotate-half order, one tensor per expert); its logits at every position equal the GGUF
# file's within 1e-5 (f32, our arithmetic), and `xllm convert` of it to .xllm gives the same
# logits again. `--to gguf` of these families is refused with a message (not written yet).
# usage: arch_hf.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib/common.bash"
fails=0
IDS=1,4501,13375,22249,31123,8256,17130,26004,3137,12011,20885,29759,6892,15766
FAMILIES="llama-moe qwen2moe qwen3moe gemma2 gemma3 phi3 olmo2"
[ -n "${XLLM_SANITIZED:-}" ] && FAMILIES="qwen2moe gemma2" # (slower build: two stand for the seven)
for f in $FAMILIES; do
    G=$SRC/tests/data/archs/$f/model.gguf
    python3 "$SRC/tests/e2e/lib/gguf_to_hf.py" "$G" "$T/$f" "$SRC/tests/data/tiny/llama"
    check $? "$f: HF checkpoint written ($(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['model_type'])" "$T/$f/config.json"))"
    "$XLLM" logits -m "$G" --ids $IDS --out "$T/g.f32" -t 2 > /dev/null 2> "$T/err" &&
        "$XLLM" logits -m "$T/$f" --ids $IDS --out "$T/h.f32" -t 2 > /dev/null 2>> "$T/err" &&
        compare "$T/g.f32" "$T/h.f32" 1e-5
    check $? "$f: HF form's logits (14 positions) == GGUF's within 1e-5"
    "$XLLM" convert "$T/$f" -o "$T/$f.xllm" > /dev/null 2>> "$T/err" &&
        "$XLLM" logits -m "$T/$f.xllm" --ids $IDS --out "$T/x.f32" -t 2 > /dev/null 2>> "$T/err" &&
        compare "$T/h.f32" "$T/x.f32" 1e-5
    check $? "$f: xllm convert to .xllm keeps the logits within 1e-5"
    skip=""
    [ $f = phi3 ] && skip="attention.sliding_window rope.scaling.original_context_length"
    "$XLLM" convert "$T/$f" --to gguf --dtype f16 -o "$T/$f.gguf" > /dev/null 2>> "$T/err" &&
        python3 "$SRC/tests/e2e/lib/gguf_compare.py" "$G" "$T/$f.gguf" $skip &&
        "$XLLM" logits -m "$T/$f.gguf" --ids $IDS --out "$T/r.f32" -t 2 > /dev/null 2>> "$T/err" &&
        compare "$T/g.f32" "$T/r.f32" 0
    check $? "$f: convert --to gguf gives back llama.cpp's tensors, keys and logits"
    [ $fails = 0 ] || cat "$T/err"
done
python3 - "$T/gemma2/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["query_pre_attn_scalar"] = 100; json.dump(c, open(sys.argv[1], "w"))
PY
expect_fail "gemma2 with query_pre_attn_scalar 100: --to gguf refused" "query_pre_attn_scalar" \
    "$XLLM" convert "$T/gemma2" --to gguf -o "$T/g2.gguf"
[ $fails -eq 0 ]
