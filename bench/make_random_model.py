#!/usr/bin/env python3
"""Write a random-weight Llama checkpoint (HF layout, f32 safetensors) of a real size.

Standard library only; weights are random bit patterns of magnitude 1/128..1/64
with random signs (fast to generate, fine for timing, meaningless as text).

    python3 bench/make_random_model.py --shape small-120m -o /tmp/small-120m
"""
import argparse
import json
import os
import random
import struct

SHAPES = {
    # hidden, intermediate, layers, heads, kv_heads, vocab, context
    "small-120m": (768, 2304, 12, 12, 12, 32000, 2048),
    "medium-250m": (1024, 2816, 16, 16, 8, 32000, 2048),
    "tinyllama-1.1b": (2048, 5632, 22, 32, 4, 32000, 2048),
}

_HI = bytes(((x & 0x80) | 0x3C) for x in range(256))   # sign + exponent high bits -> 2^-7
_MID = bytes((x & 0x7F) for x in range(256))           # exponent low bit 0


def random_f32(rng, n):
    b = bytearray(rng.randbytes(4 * n))
    b[3::4] = b[3::4].translate(_HI)
    b[2::4] = b[2::4].translate(_MID)
    return bytes(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="small-120m", choices=sorted(SHAPES))
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    h, inter, layers, heads, kv, vocab, ctx = SHAPES[a.shape]
    hd = h // heads
    rng = random.Random(a.seed)
    tensors = [("model.embed_tokens.weight", (vocab, h)), ("model.norm.weight", (h,))]
    for l in range(layers):
        p = "model.layers.%d." % l
        tensors += [(p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,)),
                    (p + "self_attn.q_proj.weight", (heads * hd, h)), (p + "self_attn.k_proj.weight", (kv * hd, h)),
                    (p + "self_attn.v_proj.weight", (kv * hd, h)), (p + "self_attn.o_proj.weight", (h, heads * hd)),
                    (p + "mlp.gate_proj.weight", (inter, h)), (p + "mlp.up_proj.weight", (inter, h)),
                    (p + "mlp.down_proj.weight", (h, inter))]
    header, off = {}, 0
    for name, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + 4 * n]}
        off += 4 * n
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for name, shape in tensors:
            n = 1
            for d in shape:
                n *= d
            f.write(struct.pack("<%df" % n, *([1.0] * n)) if len(shape) == 1 else random_f32(rng, n))
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
           "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
           "num_key_value_heads": kv, "vocab_size": vocab, "max_position_embeddings": ctx,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
           "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    n_params = sum(eval("*".join(map(str, s))) for _, s in tensors)
    print("wrote %s: %s, %.1fM parameters" % (a.out, a.shape, n_params / 1e6))


if __name__ == "__main__":
    main()
