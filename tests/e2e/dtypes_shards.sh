#!/usr/bin/env bash
# dtypes_shards.sh - weights stored as F16 or BF16, and checkpoints sharded with
# model.safetensors.index.json, load and compute the same logits as F32:
#  - a 3-shard copy of tiny/qwen2 gives bit-identical logits;
#  - an F16 (and a BF16) copy of tiny/llama gives the logits of an F32 copy
#    holding the same rounded values (within 1e-5), i.e. the conversion path
#    is exact, and stays within 0.05 of the original logits;
#  - Q/K rows in llama.cpp's permuted layout with interleaved RoPE give the
#    reference logits (the path GGUF llama files take).
# usage: dtypes_shards.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib/common.bash"
fails=0

python3 - "$SRC/tests/data/tiny" "$T" <<'PY'
import json, os, shutil, struct, sys
src, out = sys.argv[1], sys.argv[2]

def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n]); data = raw[8 + n:]
    h.pop("__metadata__", None)
    return {k: (v, data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in h.items()}

def write(path, tensors):  # tensors: name -> (dtype, shape, bytes)
    h, off, blobs = {}, 0, []
    for k, (dt, shape, b) in tensors.items():
        h[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b); blobs.append(b)
    hb = json.dumps(h).encode(); hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))

def copy_meta(name, dst):
    os.makedirs(dst)
    for fn in os.listdir(os.path.join(src, name)):
        if fn.endswith(".json"):
            shutil.copy(os.path.join(src, name, fn), dst)

def f32(b): return struct.unpack("<%df" % (len(b) // 4), b)

def to_bf16_bits(x):  # round to nearest even, as torch does
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF

# 1) shards
t = read(os.path.join(src, "qwen2", "model.safetensors"))
names = sorted(t)
dst = os.path.join(out, "qwen2_shards"); copy_meta("qwen2", dst)
weight_map = {}
for i in range(3):
    part = {k: (t[k][0]["dtype"], t[k][0]["shape"], t[k][1]) for k in names[i::3]}
    fn = "model-%05d-of-00003.safetensors" % (i + 1)
    write(os.path.join(dst, fn), part)
    weight_map.update({k: fn for k in part})
json.dump({"metadata": {}, "weight_map": weight_map}, open(os.path.join(dst, "model.safetensors.index.json"), "w"))

# 2) f16 / bf16 and their f32 twins
t = read(os.path.join(src, "llama", "model.safetensors"))
for kind in ("f16", "bf16"):
    low, twin = {}, {}
    for k, (h, b) in t.items():
        vals = f32(b)
        if kind == "f16":
            lb = struct.pack("<%de" % len(vals), *vals)
            rounded = struct.unpack("<%de" % len(vals), lb)
        else:
            bits = [to_bf16_bits(v) for v in vals]
            lb = struct.pack("<%dH" % len(bits), *bits)
            rounded = [struct.unpack("<f", struct.pack("<I", x << 16))[0] for x in bits]
        low[k] = (kind.upper(), h["shape"], lb)
        twin[k] = ("F32", h["shape"], struct.pack("<%df" % len(rounded), *rounded))
    d = os.path.join(out, "llama_" + kind); copy_meta("llama", d); write(os.path.join(d, "model.safetensors"), low)
    d = os.path.join(out, "llama_" + kind + "_twin"); copy_meta("llama", d); write(os.path.join(d, "model.safetensors"), twin)

# 3) q/k rows permuted the way llama.cpp stores llama models, with the config flag
#    that tells the engine to rotate interleaved pairs
cfg = json.load(open(os.path.join(src, "llama", "config.json")))
hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
perm = {}
for k, (h, b) in t.items():
    rows, cols = (h["shape"] + [1])[:2]
    if k.endswith("q_proj.weight") or k.endswith("k_proj.weight"):
        src_rows = [b[r * cols * 4:(r + 1) * cols * 4] for r in range(rows)]
        new = []
        for head in range(rows // hd):
            for j in range(hd // 2):
                for pair in range(2):
                    new.append(src_rows[head * hd + pair * (hd // 2) + j])
        b = b"".join(new)
    perm[k] = ("F32", h["shape"], b)
d = os.path.join(out, "llama_interleaved"); copy_meta("llama", d); write(os.path.join(d, "model.safetensors"), perm)
cfg["xllm_rope_interleaved"] = True
json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
PY
check $? "fixtures written"


ids=$(ids_of "$SRC/tests/data/tiny/qwen2")
"$XLLM" logits -m "$SRC/tests/data/tiny/qwen2" --ids "$ids" --out "$T/a.f32" >/dev/null &&
"$XLLM" logits -m "$T/qwen2_shards" --ids "$ids" --out "$T/b.f32" >/dev/null && compare "$T/a.f32" "$T/b.f32" 0
check $? "3-shard checkpoint: identical logits"

ids=$(ids_of "$SRC/tests/data/tiny/llama")
for kind in f16 bf16; do
    "$XLLM" logits -m "$T/llama_$kind" --ids "$ids" --out "$T/$kind.f32" >/dev/null &&
    "$XLLM" logits -m "$T/llama_${kind}_twin" --ids "$ids" --out "$T/${kind}_twin.f32" >/dev/null &&
    compare "$T/$kind.f32" "$T/${kind}_twin.f32" 1e-5
    check $? "$kind weights compute exactly the f32 logits of the rounded weights"
    compare "$T/$kind.f32" "$SRC/tests/data/tiny/llama/logits_48x512.f32" 0.05
    check $? "$kind weights stay close to the f32 reference"
done
"$XLLM" logits -m "$T/llama_interleaved" --ids "$ids" --out "$T/inter.f32" >/dev/null &&
compare "$T/inter.f32" "$SRC/tests/data/tiny/llama/logits_48x512.f32" 1e-3
check $? "llama.cpp Q/K row layout + interleaved RoPE gives the reference logits"
[ $fails -eq 0 ]
