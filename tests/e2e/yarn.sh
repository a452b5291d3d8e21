#!/usr/bin/env bash
# yarn.sh - YaRN RoPE scaling in its HF form, against the GGUF form that test_yarn_models checks
# against llama-server (tests/data/archs/yarn). For deepseek2 and llama-moe: the YaRN variant of
# the fixture (tests/e2e/lib/gguf_set_keys.py: the keys in yarn/<variant>.json) and an HF
# checkpoint of the same weights (gguf_to_hf.py) whose config.json carries rope_scaling as the
# real models write it: DeepSeek-V2's {"type": "yarn", factor, original_max_position_embeddings,
# beta_fast, beta_slow, mscale, mscale_all_dim} and Qwen2.5's {"rope_type": "yarn", factor,
# original_max_position_embeddings}. Checks: HF logits (every position) == GGUF's within 1e-5;
# `xllm convert` to .xllm keeps them; `--to gguf` writes llama.cpp's keys back (gguf_compare.py:
# rope.scaling.type, factor, original_context_length, yarn_log_multiplier) and the same logits;
# the HF forms also against tests/e2e/lib/yarn_reference.py (HF's formulas in double
# precision, standard-library Python); HF settings without a GGUF form and bad YaRN values are
# refused with a message.
# usage: yarn.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib/common.bash"
fails=0
LIB=$SRC/tests/e2e/lib
IDS=1,4501,13375,22249,31123,8256,17130,26004,3137,12011,20885,29759,6892,15766,24640,1773,10647,19521,28395,5528
for v in deepseek2 llama-moe; do
    J=$SRC/tests/data/archs/yarn/$v-yarn.json
    G=$T/$v-yarn.gguf
    python3 - "$J" "$SRC/tests/data/archs/$v/model.gguf" "$G" "$LIB/gguf_set_keys.py" <<'PY' &&
import json, subprocess, sys
j = json.load(open(sys.argv[1]))
subprocess.check_call([sys.executable, sys.argv[4], sys.argv[2], sys.argv[3]] + j['keys_added'])
PY
        python3 "$LIB/gguf_to_hf.py" "$SRC/tests/data/archs/$v/model.gguf" "$T/$v" "$SRC/tests/data/tiny/llama" &&
        python3 - "$T/$v/config.json" $v <<'PY'
import json, sys
p, v = sys.argv[1], sys.argv[2]
c = json.load(open(p))
assert 'rope_scaling' not in c or c['rope_scaling'] is None
if v == 'deepseek2':  # DeepSeek-V2-Lite's keys (its config.json), V3's context
    c['rope_scaling'] = {'type': 'yarn', 'factor': 40, 'original_max_position_embeddings': 4096, 'beta_fast': 32,
                         'beta_slow': 1, 'mscale': 0.707, 'mscale_all_dim': 0.707}
    c['max_position_embeddings'] = 163840
else:  # Qwen2.5's long-context recipe
    c['rope_scaling'] = {'rope_type': 'yarn', 'factor': 4.0, 'original_max_position_embeddings': 2048}
    c['max_position_embeddings'] = 8192
json.dump(c, open(p, 'w'), indent=1)
PY
    check $? "$v: the YaRN GGUF variant and an HF checkpoint with rope_scaling yarn written"
    "$XLLM" logits -m "$G" --ids $IDS --out "$T/g.f32" -t 2 > /dev/null 2> "$T/err" &&
        "$XLLM" logits -m "$T/$v" --ids $IDS --out "$T/h.f32" -t 2 > /dev/null 2>> "$T/err" &&
        compare "$T/g.f32" "$T/h.f32" 1e-5
    check $? "$v: HF form's logits (20 positions) == the YaRN GGUF's within 1e-5"
    "$XLLM" logits -m "$SRC/tests/data/archs/$v/model.gguf" --ids $IDS --out "$T/b.f32" -t 2 > /dev/null 2>> "$T/err" &&
        python3 - "$T/g.f32" "$T/b.f32" <<'PY'
import struct, sys
a = open(sys.argv[1], "rb").read(); b = open(sys.argv[2], "rb").read()
assert len(a) == len(b) > 0
d = max(abs(x - y) for x, y in zip(struct.unpack("<%df" % (len(a) // 4), a), struct.unpack("<%df" % (len(b) // 4), b)))
print("   YaRN vs none: max |diff| = %.3g" % d)
assert d > 1e-2
PY
    check $? "$v: ... and differ from the fixture without YaRN (by more than 1e-2)"
    xllm_form_keeps "$T/$v" "$T/$v.xllm" $IDS
    check $? "$v: xllm convert to .xllm keeps the logits within 1e-5"
    gguf_form_back "$T/$v" "$T/$v.gguf" "$G" $IDS 1e-5 context_length
    check $? "$v: convert --to gguf gives back llama.cpp's YaRN keys, the tensors and the logits"
    { # an independent reference: HF's formulas in double precision
        python3 "$LIB/yarn_reference.py" "$T/$v" "$T/ref.f32" $IDS &&
            python3 - "$T/ref.f32" "$T/h.f32" <<'PY'
import math, struct, sys
V = 32000
r = struct.unpack('<%df' % V, open(sys.argv[1], 'rb').read())
b = open(sys.argv[2], 'rb').read()
z = struct.unpack_from('<%df' % V, b, (len(b) // 4 // V - 1) * V * 4)
m = max(z); l = m + math.log(math.fsum(math.exp(v - m) for v in z))
d = max(abs(x - (y - l)) for x, y in zip(r, z))
print("   max |logprob - reference| = %.3g" % d)
assert d <= 1e-4
PY
    }
    check $? "$v: the HF form's last log-probabilities == yarn_reference.py (HF's formulas, f64) within 1e-4"
    [ $fails = 0 ] || cat "$T/err"
done
# refused: DeepSeek's mscale != mscale_all_dim has no GGUF form (llama.cpp takes them equal);
# YaRN without a factor, or with a negative beta
python3 - "$T/deepseek2" "$T" <<'PY'
import json, os, shutil, sys
src, T = sys.argv[1], sys.argv[2]
for name, rs in (('bad1', {'type': 'yarn', 'factor': 40, 'original_max_position_embeddings': 4096,
                                'mscale': 1.0, 'mscale_all_dim': 0.707}),
                 ('bad2', {'type': 'yarn', 'original_max_position_embeddings': 4096}),
                 ('bad3', {'type': 'yarn', 'factor': 4, 'beta_fast': -1})):
    d = os.path.join(T, name)
    os.mkdir(d)
    for f in os.listdir(src):
        os.symlink(os.path.join(src, f), os.path.join(d, f)) if f != 'config.json' else None
    c = json.load(open(os.path.join(src, 'config.json')))
    c['rope_scaling'] = rs
    json.dump(c, open(os.path.join(d, 'config.json'), 'w'))
PY
expect_fail "deepseek2: mscale != mscale_all_dim has no GGUF form" "mscale_all_dim" \
    "$XLLM" convert "$T/bad1" --to gguf --dtype f16 -o "$T/bad.gguf"
expect_fail "yarn without a factor is refused" "factor" "$XLLM" logits -m "$T/bad2" --ids 1,2 --out "$T/o.f32"
expect_fail "yarn with a negative beta_fast is refused" "beta_fast" "$XLLM" logits -m "$T/bad3" --ids 1,2 --out "$T/o.f32"
[ $fails -eq 0 ]
