#!/usr/bin/env python3
"""yarn_reference.py HF_DIR OUT.f32 IDS [IDS ...] - the last position's log-probabilities of a
Mixtral-layout or DeepSeek-V3-layout (forward_deepseek) HF checkpoint with YaRN RoPE scaling, computed here in double precision from HF's
formulas (transformers' modeling_mixtral.py and modeling_rope_utils.py _compute_yarn_parameters),
not from xLLM: the correction range of beta_fast / beta_slow rotations,
d ln(orig / (2 pi beta)) / (2 ln theta) rounded outward (truncate) and clamped to [0, d - 1]; the
extrapolation weight 1 - clamp((i - low) / (high - low), 0, 1) of each frequency pair i; inv_freq =
theta_i / factor * (1 - w) + theta_i * w; cos and sin x attention_factor (default 1 + 0.1 ln factor,
or mscale(factor, mscale) / mscale(factor, mscale_all_dim)); rotate-half RoPE, causal softmax
(q k^T / sqrt(d)) with grouped KV heads, softmax router, top-k renormalised, SwiGLU experts, tied
or separate LM head. Each IDS is a comma-separated prompt; OUT gets one row of vocab float32 per
prompt. Standard library only (no torch in CI)."""
import json, math, os, struct, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phi3_reference import causal_attention, head, load, matvec, rmsnorm, rope_half  # noqa: E402


def mscale(s, m=1.0):
    return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0


def yarn(c, hd):
    rs, base = c['rope_scaling'], c['rope_theta']
    f = rs['factor']
    orig = rs.get('original_max_position_embeddings') or c['max_position_embeddings']
    bf, bs = rs.get('beta_fast') or 32, rs.get('beta_slow') or 1

    af = rs.get('attention_factor')
    if af is None:
        af = mscale(f, rs['mscale']) / mscale(f, rs['mscale_all_dim']) if rs.get('mscale') and rs.get(
            'mscale_all_dim') else mscale(f)
    corr = lambda rot: hd * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
    low, high = corr(bf), corr(bs)
    if rs.get('truncate', True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, hd - 1)
    if low == high:
        high += 0.001
    inv = []
    for i in range(hd // 2):
        e = 1.0 / base ** (2 * i / hd)
        w = 1 - min(1.0, max(0.0, (i - low) / (high - low)))
        inv.append(e / f * (1 - w) + e * w)
    return inv, af


def forward(c, t, ids):
    H, KV, hd = c['num_attention_heads'], c['num_key_value_heads'], c['head_dim']
    eps, E, K = c['rms_norm_eps'], c['num_local_experts'], c['num_experts_per_tok']
    inv, af = yarn(c, hd)
    xs = [list(t['model.embed_tokens.weight'][i]) for i in ids]
    n = len(ids)
    for l in range(c['num_hidden_layers']):
        p = 'model.layers.%d.' % l
        qs, ks, vs = [], [], []
        for pos, x in enumerate(xs):
            h = rmsnorm(x, t[p + 'input_layernorm.weight'], eps)
            q, k, v = (matvec(t[p + 'self_attn.%s_proj.weight' % s], h) for s in 'qkv')
            rope_half(q, k, pos, inv, af, H, KV, hd)
            qs.append(q), ks.append(k), vs.append(v)
        for i in range(n):
            o = matvec(t[p + 'self_attn.o_proj.weight'], causal_attention(qs, ks, vs, i, H, KV, hd))
            xs[i] = [a + b for a, b in zip(xs[i], o)]
        for i in range(n):
            h = rmsnorm(xs[i], t[p + 'post_attention_layernorm.weight'], eps)
            r = matvec(t[p + 'block_sparse_moe.gate.weight'], h)
            m = max(r)
            pr = [math.exp(v - m) for v in r]
            z = math.fsum(pr)
            pr = [v / z for v in pr]
            top = sorted(range(E), key=lambda e: -pr[e])[:K]
            wsum = math.fsum(pr[e] for e in top)
            y = [0.0] * len(h)
            for e in top:
                q = p + 'block_sparse_moe.experts.%d.' % e
                g, u = matvec(t[q + 'w1.weight'], h), matvec(t[q + 'w3.weight'], h)
                mid = [uu * gg / (1 + math.exp(-gg)) for gg, uu in zip(g, u)]
                d = matvec(t[q + 'w2.weight'], mid)
                y = [a + pr[e] / wsum * b for a, b in zip(y, d)]
            xs[i] = [a + b for a, b in zip(xs[i], y)]
    return head(c, t, xs[-1])


def swiglu(t, q, h, g='gate_proj', u='up_proj', d='down_proj'):
    gv, uv = matvec(t[q + g + '.weight'], h), matvec(t[q + u + '.weight'], h)
    return matvec(t[q + d + '.weight'], [b * a / (1 + math.exp(-a)) for a, b in zip(gv, uv)])


def forward_deepseek(c, t, ids):
    """DeepSeek-V2/V3 (HF modeling_deepseek / transformers' deepseek_v3): multi-head latent attention
    written out per head (k_nope, v from kv_b_proj of the normed latent), RoPE on adjacent pairs of the
    last qk_rope_head_dim values of q and of the shared k_pe, softmax scale (qk_nope + qk_rope)^-0.5 x
    mscale(factor, mscale_all_dim)^2; layers from first_k_dense_replace on: sigmoid router, selection
    score + e_score_correction_bias, n_group groups scored by their two best, the best topk_group
    groups, top-k experts there, weights = sigmoid scores normalised x routed_scaling_factor, plus the
    shared experts."""
    H, nope, rope, vd = c['num_attention_heads'], c['qk_nope_head_dim'], c['qk_rope_head_dim'], c['v_head_dim']
    eps, r, E, K = c['rms_norm_eps'], c['kv_lora_rank'], c['n_routed_experts'], c['num_experts_per_tok']
    G, TG = c['n_group'], c['topk_group']
    inv, af = yarn(c, rope)
    rs = c['rope_scaling']
    scale = (nope + rope) ** -0.5
    if rs.get('mscale_all_dim'):
        scale *= mscale(rs['factor'], rs['mscale_all_dim']) ** 2
    xs = [list(t['model.embed_tokens.weight'][i]) for i in ids]
    n = len(ids)

    def rot(vec, pos):  # adjacent pairs (2i, 2i + 1), frequency i
        out = list(vec)
        for i in range(rope // 2):
            cs, sn = math.cos(pos * inv[i]) * af, math.sin(pos * inv[i]) * af
            a, b = vec[2 * i], vec[2 * i + 1]
            out[2 * i], out[2 * i + 1] = a * cs - b * sn, b * cs + a * sn
        return out

    for l in range(c['num_hidden_layers']):
        p = 'model.layers.%d.' % l
        qs, ks, vs = [], [], []
        for pos, x in enumerate(xs):
            h = rmsnorm(x, t[p + 'input_layernorm.weight'], eps)
            qa = rmsnorm(matvec(t[p + 'self_attn.q_a_proj.weight'], h), t[p + 'self_attn.q_a_layernorm.weight'], eps)
            q = matvec(t[p + 'self_attn.q_b_proj.weight'], qa)
            kva = matvec(t[p + 'self_attn.kv_a_proj_with_mqa.weight'], h)
            lat = rmsnorm(kva[:r], t[p + 'self_attn.kv_a_layernorm.weight'], eps)
            kpe = rot(kva[r:], pos)
            kv = matvec(t[p + 'self_attn.kv_b_proj.weight'], lat)
            w = nope + rope
            qs.append([q[hh * w:hh * w + nope] + rot(q[hh * w + nope:(hh + 1) * w], pos) for hh in range(H)])
            ks.append([kv[hh * (nope + vd):hh * (nope + vd) + nope] + kpe for hh in range(H)])
            vs.append([kv[hh * (nope + vd) + nope:(hh + 1) * (nope + vd)] for hh in range(H)])
        for i in range(n):
            att = []
            for hh in range(H):
                sc = [math.fsum(a * b for a, b in zip(qs[i][hh], ks[j][hh])) * scale for j in range(i + 1)]
                m = max(sc)
                e = [math.exp(s - m) for s in sc]
                z = math.fsum(e)
                att += [math.fsum(e[j] / z * vs[j][hh][d] for j in range(i + 1)) for d in range(vd)]
            o = matvec(t[p + 'self_attn.o_proj.weight'], att)
            xs[i] = [a + b for a, b in zip(xs[i], o)]
        for i in range(n):
            h = rmsnorm(xs[i], t[p + 'post_attention_layernorm.weight'], eps)
            if l < c['first_k_dense_replace']:
                y = swiglu(t, p + 'mlp.', h)
            else:
                sg = [1 / (1 + math.exp(-v)) for v in matvec(t[p + 'mlp.gate.weight'], h)]
                sel = [a + b for a, b in zip(sg, t[p + 'mlp.gate.e_score_correction_bias'])]
                per = E // G
                gs = [sum(sorted(sel[g * per:(g + 1) * per], reverse=True)[:2]) for g in range(G)]
                keep = sorted(range(G), key=lambda g: -gs[g])[:TG]
                cand = [e for e in range(E) if e // per in keep]
                top = sorted(cand, key=lambda e: -sel[e])[:K]
                ws = math.fsum(sg[e] for e in top)
                y = [0.0] * len(h)
                for e in top:
                    d = swiglu(t, p + 'mlp.experts.%d.' % e, h)
                    y = [a + sg[e] / ws * c['routed_scaling_factor'] * b for a, b in zip(y, d)]
                y = [a + b for a, b in zip(y, swiglu(t, p + 'mlp.shared_experts.', h))]
            xs[i] = [a + b for a, b in zip(xs[i], y)]
    return head(c, t, xs[-1])


def main(d, out, *prompts):
    c = json.load(open(os.path.join(d, 'config.json')))
    t = load(d)
    with open(out, 'wb') as f:
        for p in prompts:
            ids = [int(x) for x in p.split(',')]
            row = forward_deepseek(c, t, ids) if c['model_type'].startswith('deepseek') else forward(c, t, ids)
            f.write(struct.pack('<%df' % len(row), *row))


if __name__ == '__main__':
    main(*sys.argv[1:])
