#!/usr/bin/env bash
# convert.sh - `xllm convert` and the .xllm format:
#  - stories260k and every tiny model converted at f32 (fused and --no-fuse)
#    give the logits of their HF directories (fused rows compute the same dot
#    products, so the results are identical);
#  - q8 / q4 / q4m files load and generate; xllm info lists each tensor's type;
#  - corrupt, truncated, newer-version and foreign files give a clear error
#    and exit status 1; a failed convert leaves nothing at the destination.
# usage: convert.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib/common.bash"
fails=0

for m in models/stories260k tests/data/tiny/llama tests/data/tiny/mistral tests/data/tiny/mixtral tests/data/tiny/qwen2 \
         tests/data/tiny/qwen2_moe tests/data/tiny/qwen3 tests/data/tiny/qwen3_moe; do
    name=$(basename "$m"); d="$SRC/$m"
    if [ "$name" = stories260k ]; then ids=$(ids_of "$d" crosscheck_ids); else ids=$(ids_of "$d"); fi
    "$XLLM" logits -m "$d" --ids "$ids" --out "$T/ref.f32" > /dev/null
    for fuse in "" "--no-fuse"; do
        "$XLLM" convert "$d" -o "$T/$name.xllm" $fuse &&
        "$XLLM" logits -m "$T/$name.xllm" --ids "$ids" --out "$T/got.f32" > /dev/null &&
        compare "$T/ref.f32" "$T/got.f32" 0
        check $? "$name f32 .xllm ${fuse:-(fused)}: logits identical to the HF directory"
    done
done

S="$SRC/models/stories260k"
"$XLLM" convert "$S" -o "$T/s_f32.xllm" && "$XLLM" run -m "$T/s_f32.xllm" -p "Once upon a time" -n 40 --temp 0 --json > "$T/a.json" &&
"$XLLM" run -m "$S" -p "Once upon a time" -n 40 --temp 0 --json > "$T/b.json" && cmp -s "$T/a.json" "$T/b.json" &&
grep -q '"text":", there was' "$T/a.json"
check $? "the tokenizer travels inside the .xllm file (text prompt, same ids and text)"
for dt in q8 q4 q4m; do
    "$XLLM" convert "$S" -o "$T/s_$dt.xllm" --dtype $dt && "$XLLM" run -m "$T/s_$dt.xllm" --ids 1,403,407,261,378 -n 20 --temp 0 --json > "$T/$dt.json" &&
    python3 -c "import json,sys; d=json.load(open('$T/$dt.json')); assert len(d['ids'])==20, d"
    check $? "$dt .xllm loads and generates"
done
"$XLLM" convert "$S" -o "$T/s_pol.xllm" --dtype q4 --group-size 64 --policy embed=q8,attn=q4,mlp=q8,lm_head=f16,norm=f32 &&
"$XLLM" info "$T/s_pol.xllm" > "$T/info.txt" &&
grep -q "self_attn.qkv_proj.weight *q4/g64" "$T/info.txt" && grep -q "mlp.gate_up_proj.weight *q8" "$T/info.txt" &&
grep -q "model.embed_tokens.weight *q8" "$T/info.txt" && grep -q "input_layernorm.weight *f32" "$T/info.txt"
check $? "policy applied per tensor class (xllm info)"
"$XLLM" info "$T/s_pol.xllm" --json | python3 -c "import json,sys; d=json.load(sys.stdin); assert d['format']=='xllm' and d['metadata']['policy']['attn']=='q4/g64'"
check $? "xllm info --json"

# the chat template travels inside .xllm and GGUF files
cp -r "$SRC/tests/data/tiny/qwen3" "$T/q3chat" && chmod -R u+w "$T/q3chat" &&
cp "$SRC/tests/data/templates/qwen3/tokenizer_config.json" "$T/q3chat/tokenizer_config.json" &&
printf '[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]' > "$T/msgs.json" &&
"$XLLM" template -m "$T/q3chat" --messages "$T/msgs.json" --add-generation-prompt > "$T/t_dir.txt" &&
"$XLLM" convert "$T/q3chat" -o "$T/q3chat.xllm" && "$XLLM" convert "$T/q3chat" -o "$T/q3chat.gguf" --to gguf &&
"$XLLM" template -m "$T/q3chat.xllm" --messages "$T/msgs.json" --add-generation-prompt > "$T/t_xllm.txt" &&
"$XLLM" template -m "$T/q3chat.gguf" --messages "$T/msgs.json" --add-generation-prompt > "$T/t_gguf.txt" &&
cmp -s "$T/t_dir.txt" "$T/t_xllm.txt" && cmp -s "$T/t_dir.txt" "$T/t_gguf.txt" && grep -q "<|im_start|>assistant" "$T/t_dir.txt"
check $? "chat template identical from the directory, the .xllm file and the GGUF file"

# bad files
good="$T/s_q8.xllm"
head -c 5000 "$good" > "$T/trunc.xllm"
expect_fail truncated_xllm "truncated" "$XLLM" run -m "$T/trunc.xllm" --ids 1 -n 1
head -c 40 "$good" > "$T/tiny.xllm"
expect_fail header_only_xllm "tiny.xllm" "$XLLM" run -m "$T/tiny.xllm" --ids 1 -n 1
python3 - "$good" "$T/flip.xllm" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
meta_off = struct.unpack_from("<Q", b, 16)[0]
b[meta_off + 10] ^= 0x20
open(sys.argv[2], "wb").write(b)
PY
expect_fail corrupt_metadata "checksum" "$XLLM" run -m "$T/flip.xllm" --ids 1 -n 1
python3 - "$good" "$T/newer.xllm" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read()); struct.pack_into("<I", b, 8, 99)
open(sys.argv[2], "wb").write(b)
PY
expect_fail newer_version "newer" "$XLLM" run -m "$T/newer.xllm" --ids 1 -n 1
head -c 100000 /dev/urandom > "$T/random.xllm"
expect_fail foreign_file "random.xllm" "$XLLM" run -m "$T/random.xllm" --ids 1 -n 1
cp "$S/model.safetensors" "$T/renamed.xllm"
expect_fail safetensors_renamed "renamed.xllm" "$XLLM" info "$T/renamed.xllm"
: > "$T/empty.xllm"
expect_fail empty_file "empty.xllm" "$XLLM" run -m "$T/empty.xllm" --ids 1 -n 1
expect_fail bad_dtype "unknown type" "$XLLM" convert "$S" -o "$T/x.xllm" --dtype q3
expect_fail bad_policy_class "tensor class" "$XLLM" convert "$S" -o "$T/x.xllm" --policy foo=q8
expect_fail bad_group "group size" "$XLLM" convert "$S" -o "$T/x.xllm" --dtype q4 --group-size 48
expect_fail missing_source "no-such" "$XLLM" convert "$T/no-such" -o "$T/x.xllm"
expect_fail missing_calib "no-such.txt" "$XLLM" convert "$S" -o "$T/x.xllm" --dtype q4 --calib "$T/no-such.txt"
expect_fail unwritable_dest "no-such-dir" "$XLLM" convert "$S" -o "$T/no-such-dir/x.xllm"
[ ! -e "$T/x.xllm" ] && [ -z "$(ls "$T" | grep tmp)" ]
check $? "failed converts left nothing behind"
[ $fails -eq 0 ]
