#!/usr/bin/env python3
"""phi3_reference.py HF_DIR SET OUT.f32 IDS [IDS ...] - the last position's log-probabilities of a Phi-3
HF checkpoint, computed here in double precision from HF's modeling formula (transformers'
modeling_phi3.py / modeling_rope_utils.py), not from xLLM: RMSNorm, fused qkv_proj split q | k | v,
rotate-half RoPE over the first d = int(head_dim * partial_rotary_factor) values of each head (the rest
pass through; Phi-4-mini) with LongRoPE's inv_freq = 1 / (ext_factor[i] * theta^(2i/d)) and cos, sin
multiplied by the attention factor, causal softmax(q k^T / sqrt(d)) with grouped KV heads, o_proj,
gate_up_proj split gate | up, up * silu(gate), down_proj, final norm, the (tied) LM head.
SET picks the factors: "short" or "long" (HF picks by the sequence length against
original_max_position_embeddings; xLLM and llama.cpp by the context, docs/ARCHITECTURE.md), or
"none" (plain RoPE). Each IDS is a comma-separated prompt; OUT gets one row of vocab float32 per
prompt. Standard library only (no torch in CI); a few seconds for the tiny test model. yarn_reference.py
imports the pieces both forwards share from here (load, matvec, rmsnorm, rope_half, causal_attention,
head)."""
import json, math, os, struct, sys


def load(d):
    with open(os.path.join(d, 'model.safetensors'), 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    t = {}
    for name, h in head.items():
        if name == '__metadata__':
            continue
        a, b = h['data_offsets']
        fmt = {'F16': 'e', 'F32': 'f'}[h['dtype']]
        vals = struct.unpack('<%d%s' % ((b - a) // struct.calcsize(fmt), fmt), data[a:b])
        shape = h['shape']
        if len(shape) == 2:
            cols = shape[1]
            t[name] = [vals[r * cols:(r + 1) * cols] for r in range(shape[0])]
        else:
            t[name] = list(vals)
    return t


def matvec(W, x):
    return [math.fsum(w * v for w, v in zip(row, x)) for row in W]


def rmsnorm(x, w, eps):
    s = 1.0 / math.sqrt(math.fsum(v * v for v in x) / len(x) + eps)
    return [v * s * g for v, g in zip(x, w)]


def rope_half(q, k, pos, inv, af, H, KV, hd):
    """Rotate-half RoPE in place at position pos over the first 2 len(inv) values of each head (hd
    values) of q (H heads) and k (KV heads); cos and sin x the attention factor af. Shared with
    yarn_reference.py."""
    half = len(inv)
    cos = [math.cos(pos * f) * af for f in inv]
    sin = [math.sin(pos * f) * af for f in inv]
    for vec, nh in ((q, H), (k, KV)):
        for h in range(nh):
            b = h * hd
            for i in range(half):
                x0, x1 = vec[b + i], vec[b + half + i]
                vec[b + i] = x0 * cos[i] - x1 * sin[i]
                vec[b + half + i] = x1 * cos[i] + x0 * sin[i]


def causal_attention(qs, ks, vs, i, H, KV, hd):
    """Position i's attention output (H heads x hd, before o_proj): softmax(q k^T / sqrt(hd)) over
    positions 0..i, grouped KV heads (head h reads KV head h // (H / KV))."""
    att = []
    for h in range(H):
        g = h // (H // KV)
        sc = [math.fsum(a * b for a, b in zip(qs[i][h * hd:(h + 1) * hd], ks[j][g * hd:(g + 1) * hd])) /
              math.sqrt(hd) for j in range(i + 1)]
        m = max(sc)
        e = [math.exp(s - m) for s in sc]
        z = math.fsum(e)
        att += [math.fsum(e[j] / z * vs[j][g * hd + d] for j in range(i + 1)) for d in range(hd)]
    return att


def head(c, t, x):
    """The final norm, the (tied or separate) LM head and the log-softmax of the last position."""
    h = rmsnorm(x, t['model.norm.weight'], c['rms_norm_eps'])
    z = matvec(t.get('lm_head.weight') or t['model.embed_tokens.weight'], h)
    m = max(z)
    lse = m + math.log(math.fsum(math.exp(v - m) for v in z))
    return [v - lse for v in z]


def forward(c, t, ids, factor_set):
    H, KV, hd = c['num_attention_heads'], c['num_key_value_heads'], c['head_dim']
    rot = int(hd * c.get('partial_rotary_factor', 1.0))  # transformers: the first rot values of a head rotate
    eps, L, half = c['rms_norm_eps'], c['num_hidden_layers'], rot // 2
    rs = c.get('rope_scaling') or {}
    ext = [1.0] * half
    af = 1.0
    if factor_set != 'none':
        ext = rs['short_factor' if factor_set == 'short' else 'long_factor']
        orig = c['original_max_position_embeddings']
        s = c['max_position_embeddings'] / orig
        af = rs.get('attention_factor') or (1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(orig)))
    inv = [1.0 / (ext[i] * c['rope_theta'] ** (2 * i / rot)) for i in range(half)]
    xs = [list(t['model.embed_tokens.weight'][i]) for i in ids]
    n = len(ids)
    for l in range(L):
        p = 'model.layers.%d.' % l
        qs, ks, vs = [], [], []
        for pos, x in enumerate(xs):
            qkv = matvec(t[p + 'self_attn.qkv_proj.weight'], rmsnorm(x, t[p + 'input_layernorm.weight'], eps))
            q, k, v = qkv[:H * hd], qkv[H * hd:(H + KV) * hd], qkv[(H + KV) * hd:]
            rope_half(q, k, pos, inv, af, H, KV, hd)
            qs.append(q), ks.append(k), vs.append(v)
        for i in range(n):
            o = matvec(t[p + 'self_attn.o_proj.weight'], causal_attention(qs, ks, vs, i, H, KV, hd))
            xs[i] = [a + b for a, b in zip(xs[i], o)]
        for i in range(n):
            gu = matvec(t[p + 'mlp.gate_up_proj.weight'], rmsnorm(xs[i], t[p + 'post_attention_layernorm.weight'], eps))
            I = len(gu) // 2
            hmid = [gu[I + j] * gu[j] / (1 + math.exp(-gu[j])) for j in range(I)]
            y = matvec(t[p + 'mlp.down_proj.weight'], hmid)
            xs[i] = [a + b for a, b in zip(xs[i], y)]
    return head(c, t, xs[-1])


def main(d, factor_set, out, *prompts):
    c = json.load(open(os.path.join(d, 'config.json')))
    t = load(d)
    with open(out, 'wb') as f:
        for p in prompts:
            row = forward(c, t, [int(x) for x in p.split(',')], factor_set)
            f.write(struct.pack('<%df' % len(row), *row))


if __name__ == '__main__':
    main(*sys.argv[1:])
