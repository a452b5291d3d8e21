#!/usr/bin/env bash
# bad_input.sh - every kind of broken input gets a clear message naming the
# problem and exit status 1: never a crash, a hang or a sanitizer report.
# usage: bad_input.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib/common.bash"
fails=0

# expect_fail NAME KEYWORD CMD...: status 1, KEYWORD in stderr, no sanitizer output

fresh() { rm -rf "$T/m"; cp -r "$SRC/tests/data/tiny/llama" "$T/m"; chmod -R u+w "$T/m"; }

# rewrite the safetensors header with a Python expression over `h` (dict)
edit_header() {
    python3 - "$T/m/model.safetensors" "$1" <<'PY'
import json, struct, sys
path, expr = sys.argv[1], sys.argv[2]
raw = open(path, 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
h = json.loads(raw[8:8+n]); data = raw[8+n:]
exec(expr)
hb = json.dumps(h).encode(); hb += b' ' * (-len(hb) % 8)
open(path, 'wb').write(struct.pack('<Q', len(hb)) + hb + data)
PY
}

fresh; sed -i 's/"model_type": "llama"/"model_type": "gpt_neo_x"/' "$T/m/config.json"
expect_fail unknown_model_type "model_type" "$XLLM" run -m "$T/m" --ids 1,2 -n 2

fresh; sed -i 's/"rope_type": "llama3"/"rope_type": "yarnish"/' "$T/m/config.json"
expect_fail unknown_rope_type "rope" "$XLLM" run -m "$T/m" --ids 1,2 -n 2

fresh; edit_header "del h['model.layers.1.mlp.down_proj.weight']"
expect_fail missing_tensor "model.layers.1.mlp.down_proj.weight" "$XLLM" run -m "$T/m" --ids 1,2 -n 2

fresh; edit_header "h['model.layers.0.self_attn.o_proj.weight']['shape'] = list(reversed(h['model.layers.0.self_attn.o_proj.weight']['shape'])) if h['model.layers.0.self_attn.o_proj.weight']['shape'][0] != h['model.layers.0.self_attn.o_proj.weight']['shape'][1] else [h['model.layers.0.self_attn.o_proj.weight']['shape'][0]//2, h['model.layers.0.self_attn.o_proj.weight']['shape'][1]*2]"
expect_fail wrong_shape "shape" "$XLLM" run -m "$T/m" --ids 1,2 -n 2

fresh; head -c 100 "$SRC/tests/data/tiny/llama/model.safetensors" > "$T/m/model.safetensors"
expect_fail truncated_header "model.safetensors" "$XLLM" run -m "$T/m" --ids 1,2 -n 2

fresh; printf 'garbage' > "$T/m/model.safetensors"
expect_fail tiny_file "model.safetensors" "$XLLM" run -m "$T/m" --ids 1,2 -n 2

fresh; python3 - "$T/m/model.safetensors" <<'PY'
import struct, sys
p = sys.argv[1]; raw = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', raw[:8])[0]
raw[8:16] = b'{"a":[1,'  # corrupt the start of the JSON header
open(p, 'wb').write(raw)
PY
expect_fail corrupt_header_json "model.safetensors" "$XLLM" run -m "$T/m" --ids 1,2 -n 2

fresh; edit_header "k='model.norm.weight'; h[k]['data_offsets'] = [h[k]['data_offsets'][0] + 10**9, h[k]['data_offsets'][1] + 10**9]"
expect_fail offsets_out_of_range "data_offsets" "$XLLM" run -m "$T/m" --ids 1,2 -n 2

fresh; printf '{"model_type": "llama", "hidden_size": 64,' > "$T/m/config.json"
expect_fail unreadable_config "config.json" "$XLLM" run -m "$T/m" --ids 1,2 -n 2

fresh; rm "$T/m/config.json"
expect_fail missing_config "config.json" "$XLLM" run -m "$T/m" --ids 1,2 -n 2

fresh; printf '{"version": "1.0", "model": ' > "$T/m/tokenizer.json"
expect_fail corrupt_tokenizer "tokenizer.json" "$XLLM" run -m "$T/m" -p hello -n 2

fresh; sed -i 's/"eos_token_id": 2/"eos_token_id": "two"/' "$T/m/generation_config.json"
expect_fail bad_generation_config "eos_token_id" "$XLLM" run -m "$T/m" --ids 1,2 -n 2

expect_fail missing_model_dir "no-such-model" "$XLLM" run -m "$T/no-such-model" -p hi

long=$(python3 -c "print(','.join(['5']*600))")
expect_fail prompt_longer_than_context "context" "$XLLM" run -m "$SRC/models/stories260k" --ids "$long" -n 5

longtext=$(python3 -c "print('Once upon a time ' * 200)")
expect_fail text_prompt_longer_than_context "context" "$XLLM" run -m "$SRC/models/stories260k" -p "$longtext" -n 5

expect_fail ids_out_of_vocab "vocabulary" "$XLLM" run -m "$SRC/models/stories260k" --ids 1,99999 -n 5
expect_fail ids_malformed "--ids" "$XLLM" run -m "$SRC/models/stories260k" --ids 1,x,3
expect_fail logits_empty_ids "--ids" "$XLLM" logits -m "$SRC/models/stories260k" --ids ""   # leaked 64 bytes
expect_fail run_empty_ids "--ids" "$XLLM" run -m "$SRC/models/stories260k" --ids "" -n 2
fresh; sed -i 's/"eos_token_id": 2/"eos_token_id": 1e20/' "$T/m/config.json"   # an out-of-range float -> int
expect_fail config_eos_1e20 "eos_token_id" "$XLLM" run -m "$T/m" --ids 1,2 -n 2
fresh; sed -i 's/"rope_theta": 500000.0/"rope_theta": 0/' "$T/m/config.json"    # NaN logits before
expect_fail config_rope_theta_0 "rope_theta" "$XLLM" run -m "$T/m" --ids 1,2 -n 2
fresh; sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 1/' "$T/m/config.json"  # dropped a layer
expect_fail config_fewer_layers "num_hidden_layers" "$XLLM" run -m "$T/m" --ids 1,2 -n 2
expect_fail logits_out_of_vocab "vocabulary" "$XLLM" logits -m "$SRC/models/stories260k" --ids 1,512
expect_fail bad_top_p "--top-p needs a number above 0, up to 1" "$XLLM" run -m "$SRC/models/stories260k" --top-p 1.5 -n 3
expect_fail unknown_option "unknown option" "$XLLM" run --frobnicate
expect_fail tokenize_bad_jsonl "text" bash -c "printf 'not json\n' > '$T/bad.jsonl'; '$XLLM' tokenize -m '$SRC/models/stories260k' --jsonl '$T/bad.jsonl'"

echo "bad-input cases: $fails failed"
[ $fails -eq 0 ]
