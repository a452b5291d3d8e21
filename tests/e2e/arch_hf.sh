#!/usr/bin/env bash
# arch_hf.sh - the HF form of each GGUF family of tests/data/archs (src/format/arch.c):
# tests/e2e/lib/gguf_to_hf.py writes a HuggingFace checkpoint directory from the same weights
# with HF's tensor names and config.json keys (Gemma's norms as w - 1, llama's q/k rows in
# rotate-half order, one tensor per expert, DeepSeek's per-head k_b / v_b joined into HF's
# kv_b_proj); its logits at every position equal the GGUF file's within 1e-5 (f32, our
# arithmetic), `xllm convert` of it to .xllm gives the same logits again, and `--to gguf` gives
# back llama.cpp's tensors and keys (gguf_compare.py) and the GGUF file's logits exactly.
# usage: arch_hf.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib/common.bash"
fails=0
IDS=1,4501,13375,22249,31123,8256,17130,26004,3137,12011,20885,29759,6892,15766
FAMILIES="llama-moe qwen2moe qwen3moe gemma2 gemma3 phi3 olmo2 deepseek2"
[ -n "${XLLM_SANITIZED:-}" ] && FAMILIES="qwen2moe gemma2 deepseek2" # (slower build: three stand for the eight)
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
# DeepSeek-V2-Lite's layout from the deepseek2 weights: a plain q_proj (q_lora_rank null; random
# f16 rows), softmax routing without groups or bias; HF == its GGUF form (attn_q, no
# q_lora_rank key, gating softmax) exactly
if [ -d "$T/deepseek2" ]; then
    python3 - "$T/deepseek2" "$T/lite" <<'PY'
import json, os, random, shutil, struct, sys
src, dst = sys.argv[1], sys.argv[2]
shutil.copytree(src, dst)
raw = open(os.path.join(src, 'model.safetensors'), 'rb').read()
n = struct.unpack_from('<Q', raw)[0]
head = json.loads(raw[8:8 + n])
blob = raw[8 + n:]
t = {k: (v['dtype'], v['shape'], blob[v['data_offsets'][0]:v['data_offsets'][1]]) for k, v in head.items()}
c = json.load(open(os.path.join(src, 'config.json')))
rng = random.Random(7)
q_rows = c['num_attention_heads'] * (c['qk_nope_head_dim'] + c['qk_rope_head_dim'])
for l in range(c['num_hidden_layers']):
    p = 'model.layers.%d.' % l
    for k in ('self_attn.q_a_proj.weight', 'self_attn.q_a_layernorm.weight', 'self_attn.q_b_proj.weight',
              'mlp.gate.e_score_correction_bias'):
        t.pop(p + k, None)
    vals = [rng.gauss(0, 0.1) for _ in range(q_rows * c['hidden_size'])]
    t[p + 'self_attn.q_proj.weight'] = ('F16', [q_rows, c['hidden_size']], struct.pack('<%de' % len(vals), *vals))
c.update(model_type='deepseek_v2', q_lora_rank=None, scoring_func='softmax', topk_method='greedy', n_group=1,
         topk_group=1)
json.dump(c, open(os.path.join(dst, 'config.json'), 'w'), indent=1)
hd, blobs, off = {}, [], 0
for k in sorted(t):
    dt, shape, b = t[k]
    hd[k] = {'dtype': dt, 'shape': shape, 'data_offsets': [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(hd).encode()
h += b' ' * (-len(h) % 8)
open(os.path.join(dst, 'model.safetensors'), 'wb').write(struct.pack('<Q', len(h)) + h + b''.join(blobs))
PY
    "$XLLM" logits -m "$T/lite" --ids $IDS --out "$T/l.f32" -t 2 > /dev/null 2> "$T/err" &&
        "$XLLM" convert "$T/lite" --to gguf --dtype f16 -o "$T/lite.gguf" > /dev/null 2>> "$T/err" &&
        "$XLLM" logits -m "$T/lite.gguf" --ids $IDS --out "$T/lg.f32" -t 2 > /dev/null 2>> "$T/err" &&
        compare "$T/l.f32" "$T/lg.f32" 0 &&
        python3 - "$SRC/tests/e2e/lib" "$T/lite.gguf" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from gguf_read import read_gguf
kv, t = read_gguf(sys.argv[2])
ok = ('deepseek2.attention.q_lora_rank' not in kv and 'blk.0.attn_q.weight' in t and 'blk.0.attn_q_a.weight' not in t
      and kv.get('deepseek2.expert_gating_func') == 1 and 'deepseek2.expert_group_count' not in kv)
sys.exit(0 if ok else 1)
PY
    check $? "deepseek2 as V2-Lite (plain q_proj, softmax routing): HF == its GGUF form (attn_q, no q_lora_rank)"
    [ $fails = 0 ] || cat "$T/err"
fi
python3 - "$T/gemma2/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["query_pre_attn_scalar"] = 100; json.dump(c, open(sys.argv[1], "w"))
PY
expect_fail "gemma2 with query_pre_attn_scalar 100: --to gguf refused" "query_pre_attn_scalar" \
    "$XLLM" convert "$T/gemma2" --to gguf -o "$T/g2.gguf"
[ $fails -eq 0 ]
