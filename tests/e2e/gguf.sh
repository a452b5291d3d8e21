#!/usr/bin/env bash
# gguf.sh - GGUF files through the xllm command:
#  - `xllm run -m tests/data/gguf/stories260k.gguf` (llama.cpp's file) gives the greedy ids of
#    models/stories260k/expected.json (which llama.cpp also produced on that file);
#  - `xllm convert DIR --to gguf` of stories260k and the tiny llama / qwen2 / qwen3 checkpoints
#    loads back with the logits of the HF directory: qwen2/qwen3 identical; llama within 1e-4
#    (GGUF llama rows are laid out for interleaved RoPE pairs, so q.k sums in another order),
#    and stories260k's converted file exactly as llama.cpp's own stories260k.gguf;
#  - truncated, corrupt and foreign .gguf files: exit status 1 and a clear error.
# usage: gguf.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib/common.bash"
fails=0
G="$SRC/tests/data/gguf/stories260k.gguf"
S="$SRC/models/stories260k"

CONVERT=1

"$XLLM" run -m "$G" -p "Once upon a time" -n 200 --temp 0 --json > "$T/run.json" &&
python3 - "$T/run.json" "$S/expected.json" "$SRC/tests/data/gguf/stories260k.gguf.llamacpp_check.json" <<'PY'
import json, sys
got = json.load(open(sys.argv[1])); want = json.load(open(sys.argv[2])); lc = json.load(open(sys.argv[3]))
assert got["prompt_ids"] == want["prompt_ids"], got["prompt_ids"]
assert got["ids"] == want["prompt_greedy_200_ids"] == lc["greedy_200"], got["ids"][:20]
PY
check $? "stories260k.gguf: greedy 200 ids of llama.cpp and the PyTorch reference"

ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$S/expected.json'))['crosscheck_ids'])))")
"$XLLM" logits -m "$S" --ids "$ids" --out "$T/hf.f32" > /dev/null &&
"$XLLM" logits -m "$G" --ids "$ids" --out "$T/lc.f32" > /dev/null &&
compare "$T/hf.f32" "$T/lc.f32" 1e-4
check $? "stories260k.gguf: logits of the HF directory (within 1e-4)"

if [ $CONVERT = 1 ]; then
"$XLLM" convert "$S" --to gguf -o "$T/s.gguf" &&
"$XLLM" logits -m "$T/s.gguf" --ids "$ids" --out "$T/s.f32" > /dev/null &&
compare "$T/lc.f32" "$T/s.f32" 0 && compare "$T/hf.f32" "$T/s.f32" 1e-4
check $? "convert --to gguf (stories260k): the logits of llama.cpp's stories260k.gguf, exactly"

for arch in llama qwen2 qwen3; do
    d="$SRC/tests/data/tiny/$arch"
    tids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$d/expected.json'))['input_ids'])))")
    tol=0; [ "$arch" = llama ] && tol=1e-4
    "$XLLM" logits -m "$d" --ids "$tids" --out "$T/ref.f32" > /dev/null &&
    "$XLLM" convert "$d" --to gguf -o "$T/$arch.gguf" &&
    "$XLLM" logits -m "$T/$arch.gguf" --ids "$tids" --out "$T/got.f32" > /dev/null &&
    compare "$T/ref.f32" "$T/got.f32" $tol
    check $? "convert --to gguf (tiny $arch): logits of the HF directory (tolerance $tol)"
done
fi

# bad files
head -c 9000 "$G" > "$T/trunc.gguf"
expect_fail truncated_metadata "truncated" "$XLLM" run -m "$T/trunc.gguf" --ids 1 -n 1
head -c 500000 "$G" > "$T/trunc2.gguf"
expect_fail truncated_data "outside the file" "$XLLM" run -m "$T/trunc2.gguf" --ids 1 -n 1
python3 - "$G" "$T/v9.gguf" "$T/k.gguf" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
v = bytearray(b); struct.pack_into("<I", v, 4, 9); open(sys.argv[2], "wb").write(v)
# first tensor's type -> IQ2_XXS (16, unsupported): the tensor table starts after the metadata
i = b.index(b"token_embd.weight") + len(b"token_embd.weight")
n_dims = struct.unpack_from("<I", b, i)[0]
struct.pack_into("<I", b, i + 4 + 8 * n_dims, 16); open(sys.argv[3], "wb").write(b)
PY
expect_fail newer_version "version 9" "$XLLM" run -m "$T/v9.gguf" --ids 1 -n 1
expect_fail iq2_xxs "IQ2_XXS" "$XLLM" run -m "$T/k.gguf" --ids 1 -n 1
printf 'GGUF' > "$T/magic_only.gguf"
expect_fail magic_only "magic_only.gguf" "$XLLM" run -m "$T/magic_only.gguf" --ids 1 -n 1

# GGUF as a conversion source: f32 .xllm keeps the logits, q4 with calibration runs
ids=1,403,407,261,378,432,383,286
"$XLLM" logits -m "$G" --ids $ids --out "$T/g.f32" > /dev/null &&
"$XLLM" convert "$G" -o "$T/from_gguf.xllm" && "$XLLM" logits -m "$T/from_gguf.xllm" --ids $ids --out "$T/x.f32" > /dev/null &&
compare "$T/g.f32" "$T/x.f32" 0
check $? "convert stories260k.gguf -> .xllm (f32): identical logits"
"$XLLM" convert "$G" -o "$T/q4.xllm" --dtype q4 --calib "$SRC/tests/data/eval/stories_calib.txt" &&
"$XLLM" run -m "$T/q4.xllm" -p "Once upon a time" -n 20 --temp 0 --json | python3 -c "import json,sys; assert len(json.load(sys.stdin)['ids']) == 20"
check $? "convert stories260k.gguf -> q4 .xllm with calibration runs"

# a quantized GGUF (Q8_0) converts to .xllm keeping its blocks (group 32)
"$XLLM" synth --shape tiny-test --dtype q8 -o "$T/tt.xllm" --gguf "$T/tt.gguf" --gguf-type Q8_0 > /dev/null 2>&1 &&
"$XLLM" convert "$T/tt.gguf" -o "$T/tt2.xllm" && "$XLLM" logits -m "$T/tt2.xllm" --ids 1,2,3 --out "$T/q1.f32" > /dev/null &&
"$XLLM" logits -m "$T/tt.gguf" --ids 1,2,3 --out "$T/q2.f32" > /dev/null && compare "$T/q1.f32" "$T/q2.f32" 0
check $? "convert a Q8_0 GGUF -> .xllm: identical logits"

[ $fails -eq 0 ] && echo "gguf: all passed" || echo "gguf: $fails failed"
exit $((fails > 0))
