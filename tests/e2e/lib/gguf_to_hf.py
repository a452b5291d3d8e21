#!/usr/bin/env python3
"""gguf_to_hf.py MODEL.gguf OUTDIR TOKENIZER_TEMPLATE_DIR - a HuggingFace checkpoint directory
(config.json, model.safetensors, tokenizer.json, tokenizer_config.json) holding the same weights as
one of tests/data/archs' GGUF files, written from HF's conventions, not from xLLM's tables: HF's
tensor names and config.json keys per model_type, Gemma's norms stored as w - 1, llama's q/k rows
back in rotate-half order, stacked experts split one tensor per expert, the shared-expert gate
[1, hidden]. The tokenizer is a byte-fallback BPE over the GGUF's (synthetic) vocabulary, built on
the template directory's tokenizer.json. Standard library only."""
import json, os, struct, sys

from gguf_read import read_gguf as read_tensors


def read_gguf(path):
    """kv and name -> (shape in HF order, 'F32' | 'F16', bytes)."""
    kv, t = read_tensors(path)
    return kv, {n: (list(reversed(ne)), 'F32' if ty == 0 else 'F16', b) for n, (ne, ty, b) in t.items()}


def main(src, dst, tpl):
    kv, t = read_gguf(src)
    arch = kv['general.architecture']
    A = lambda k, dflt=None: kv.get(arch + '.' + k, dflt)
    experts = A('expert_count', 0)
    mt = {'gemma2': 'gemma2', 'gemma3': 'gemma3_text', 'phi3': 'phi3', 'olmo2': 'olmo2', 'qwen2moe': 'qwen2_moe',
          'qwen3moe': 'qwen3_moe', 'llama': 'mixtral' if experts else 'llama',
          'deepseek2': 'deepseek_v3' if A('expert_gating_func') == 2 else 'deepseek_v2'}[arch]
    hidden, heads = A('embedding_length'), A('attention.head_count')
    kvh = A('attention.head_count_kv', heads)
    hd = A('attention.key_length', hidden // heads)
    vocab = t['token_embd.weight'][0][0]
    cfg = {'model_type': mt, 'hidden_size': hidden, 'num_hidden_layers': A('block_count'),
           'num_attention_heads': heads, 'num_key_value_heads': kvh, 'head_dim': hd,
           'intermediate_size': A('feed_forward_length'), 'rms_norm_eps': A('attention.layer_norm_rms_epsilon'),
           'rope_theta': A('rope.freq_base', 10000.0), 'max_position_embeddings': A('context_length', 2048),
           'vocab_size': vocab, 'bos_token_id': 1, 'eos_token_id': 2,
           'tie_word_embeddings': 'output.weight' not in t, 'hidden_act': 'silu'}
    rot = A('rope.dimension_count', hd)
    if mt == 'phi3' and rot != hd:  # partial rotary (Phi-4-mini): RoPE over the first rot values of each head
        cfg['partial_rotary_factor'] = rot / hd
    if 'rope_factors_long.weight' in t:  # LongRoPE (Phi-3 128k): HF's rope_scaling with the attention factor given
        fl = lambda n: list(struct.unpack('<%df' % (len(t[n][2]) // 4), t[n][2]))
        orig = A('rope.scaling.original_context_length', cfg['max_position_embeddings'])
        cfg['original_max_position_embeddings'] = orig
        cfg['rope_scaling'] = {'type': 'longrope', 'short_factor': fl('rope_factors_short.weight'),
                               'long_factor': fl('rope_factors_long.weight'),
                               'attention_factor': A('rope.scaling.attn_factor', 1.0)}
        del t['rope_factors_long.weight'], t['rope_factors_short.weight']
    gemma = mt.startswith('gemma')
    if gemma:
        cfg.update(hidden_activation='gelu_pytorch_tanh', hidden_act='gelu_pytorch_tanh', query_pre_attn_scalar=hd,
                   sliding_window=A('attention.sliding_window'))
    if mt == 'gemma2':
        cfg.update(attn_logit_softcapping=A('attn_logit_softcapping', 50.0),
                   final_logit_softcapping=A('final_logit_softcapping', 30.0))
    if mt == 'gemma3_text':
        cfg.update(rope_local_base_freq=A('rope.freq_base_swa', 10000.0), sliding_window_pattern=6,
                   attn_logit_softcapping=None, final_logit_softcapping=None)
        if A('rope.scaling.type') == 'linear':
            cfg['rope_scaling'] = {'rope_type': 'linear', 'factor': A('rope.scaling.factor')}
    if mt == 'mixtral':
        cfg.update(num_local_experts=experts, num_experts_per_tok=A('expert_used_count'))
    if mt in ('qwen2_moe', 'qwen3_moe'):
        used = A('expert_used_count')
        cfg.update(num_experts=experts, num_experts_per_tok=used, use_sliding_window=False,
                   moe_intermediate_size=A('expert_feed_forward_length', cfg['intermediate_size'] // used),
                   norm_topk_prob=mt == 'qwen3_moe', decoder_sparse_step=1, mlp_only_layers=[])
        if mt == 'qwen2_moe':
            cfg['shared_expert_intermediate_size'] = A('expert_shared_feed_forward_length', cfg['intermediate_size'])

    deepseek = mt.startswith('deepseek')
    if deepseek:  # DeepseekV2/V3 config.json (HF modeling_deepseek): MLA sizes, routing
        rope = A('rope.dimension_count')
        groups = A('expert_group_count', 1)
        cfg.update(num_key_value_heads=heads, q_lora_rank=A('attention.q_lora_rank') or None,
                   kv_lora_rank=A('attention.kv_lora_rank'), qk_rope_head_dim=rope,
                   qk_nope_head_dim=A('attention.key_length_mla') - rope, v_head_dim=A('attention.value_length_mla'),
                   n_routed_experts=experts, num_experts_per_tok=A('expert_used_count'),
                   moe_intermediate_size=A('expert_feed_forward_length'), n_shared_experts=A('expert_shared_count', 0),
                   first_k_dense_replace=A('leading_dense_block_count', 0), moe_layer_freq=1,
                   routed_scaling_factor=A('expert_weights_scale', 1.0), norm_topk_prob=A('expert_weights_norm', False),
                   scoring_func='sigmoid' if A('expert_gating_func') == 2 else 'softmax',
                   topk_method='noaux_tc' if mt == 'deepseek_v3' else 'greedy', n_group=groups,
                   topk_group=A('expert_group_used_count', groups), attention_bias=False)
        del cfg['head_dim']
    names = {'attn_q': 'self_attn.q_proj', 'attn_k': 'self_attn.k_proj', 'attn_v': 'self_attn.v_proj',
             'attn_output': 'self_attn.o_proj', 'attn_q_norm': 'self_attn.q_norm', 'attn_k_norm': 'self_attn.k_norm',
             'attn_qkv': 'self_attn.qkv_proj', 'ffn_gate': 'mlp.gate_proj', 'ffn_up': 'mlp.up_proj',
             'ffn_down': 'mlp.down_proj', 'attn_norm': 'input_layernorm', 'ffn_norm': 'post_attention_layernorm',
             'ffn_gate_inp': 'mlp.gate', 'ffn_gate_inp_shexp': 'mlp.shared_expert_gate',
             'ffn_gate_shexp': 'mlp.shared_expert.gate_proj', 'ffn_up_shexp': 'mlp.shared_expert.up_proj',
             'ffn_down_shexp': 'mlp.shared_expert.down_proj', 'post_attention_norm': 'post_attention_layernorm',
             'post_ffw_norm': 'post_feedforward_layernorm'}
    exps = {'ffn_gate_exps': 'mlp.experts.%d.gate_proj', 'ffn_up_exps': 'mlp.experts.%d.up_proj',
            'ffn_down_exps': 'mlp.experts.%d.down_proj'}
    if gemma:
        names['ffn_norm'] = 'pre_feedforward_layernorm'
    if mt == 'phi3':
        names['ffn_up'] = 'mlp.gate_up_proj'
    if deepseek:
        names.update(attn_q_a='self_attn.q_a_proj', attn_q_a_norm='self_attn.q_a_layernorm',
                     attn_q_b='self_attn.q_b_proj', attn_kv_a_mqa='self_attn.kv_a_proj_with_mqa',
                     attn_kv_a_norm='self_attn.kv_a_layernorm', ffn_gate_shexp='mlp.shared_experts.gate_proj',
                     ffn_up_shexp='mlp.shared_experts.up_proj', ffn_down_shexp='mlp.shared_experts.down_proj')
    if mt == 'mixtral':
        names['ffn_gate_inp'] = 'block_sparse_moe.gate'
        exps = {'ffn_gate_exps': 'block_sparse_moe.experts.%d.w1', 'ffn_up_exps': 'block_sparse_moe.experts.%d.w3',
                'ffn_down_exps': 'block_sparse_moe.experts.%d.w2'}

    def minus_one(dt, raw):  # Gemma's HF norms hold w - 1
        assert dt == 'F32'
        n = len(raw) // 4
        return struct.pack('<%df' % n, *[v - 1.0 for v in struct.unpack('<%df' % n, raw)])

    def unpermute(shape, dt, raw, h):  # GGUF llama row 2i + j of a head = HF row j * d/2 + i
        rows, cols = shape[0], (shape[1] if len(shape) > 1 else 1)
        rb = len(raw) // rows
        d = rows // h
        out = [None] * rows
        for g in range(rows):
            hh, r = divmod(g, d)
            i, j = divmod(r, 2)
            out[hh * d + j * d // 2 + i] = raw[g * rb:(g + 1) * rb]
        return b''.join(out)

    def kv_b(kb, vb):  # llama.cpp's attn_k_b [h][kv_lora][nope] and attn_v_b [h][v][kv_lora] -> HF's kv_b_proj
        (h, r, nope), dt, kraw = kb
        (_, vd, _), _, vraw = vb
        es = 4 if dt == 'F32' else 2
        rows = []
        for hh in range(h):
            k0 = kraw[hh * r * nope * es:(hh + 1) * r * nope * es]
            for b in range(nope):  # row b of the head's k part = column b of attn_k_b[hh]
                rows.append(b''.join(k0[(a * nope + b) * es:(a * nope + b + 1) * es] for a in range(r)))
            rows.append(vraw[hh * vd * r * es:(hh + 1) * vd * r * es])
        return [h * (nope + vd), r], dt, b''.join(rows)

    hf = {}
    glob = {'token_embd.weight': 'model.embed_tokens.weight', 'output_norm.weight': 'model.norm.weight',
            'output.weight': 'lm_head.weight'}
    for name, (shape, dt, raw) in t.items():
        if name in glob:
            if gemma and name == 'output_norm.weight':
                raw = minus_one(dt, raw)
            hf[glob[name]] = (shape, dt, raw)
            continue
        _, layer, base, sfx = name.split('.')
        pre = 'model.layers.%s.' % layer
        if base == 'attn_v_b':
            continue
        if base == 'attn_k_b':
            hf[pre + 'self_attn.kv_b_proj.weight'] = kv_b(t[name], t['blk.%s.attn_v_b.weight' % layer])
            continue
        if base == 'exp_probs_b':  # DeepSeek-V3's router bias: a whole name
            hf[pre + 'mlp.gate.e_score_correction_bias'] = (shape, dt, raw)
            continue
        if base in exps:
            E = shape[0]
            per = len(raw) // E
            for e in range(E):
                hf[pre + exps[base] % e + '.' + sfx] = (shape[1:], dt, raw[e * per:(e + 1) * per])
            continue
        if base == 'ffn_gate_inp_shexp':
            shape = [1] + shape
        if gemma and base.endswith('norm'):
            raw = minus_one(dt, raw)
        if mt in ('llama', 'mixtral') and base in ('attn_q', 'attn_k'):
            raw = unpermute(shape, dt, raw, heads if base == 'attn_q' else kvh)
        hf[pre + names[base] + '.' + sfx] = (shape, dt, raw)

    os.makedirs(dst, exist_ok=True)
    head, blobs, off = {}, [], 0
    for name in sorted(hf):
        shape, dt, raw = hf[name]
        head[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(head).encode()
    h += b' ' * (-len(h) % 8)
    with open(os.path.join(dst, 'model.safetensors'), 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h + b''.join(blobs))
    json.dump(cfg, open(os.path.join(dst, 'config.json'), 'w'), indent=1)
    tok = json.load(open(os.path.join(tpl, 'tokenizer.json')))
    pieces = kv['tokenizer.ggml.tokens']
    tok['model']['vocab'] = {p: i for i, p in enumerate(pieces)}
    tok['model']['merges'] = []
    json.dump(tok, open(os.path.join(dst, 'tokenizer.json'), 'w'), ensure_ascii=False)
    for f in ('tokenizer_config.json', 'special_tokens_map.json'):
        if os.path.exists(os.path.join(tpl, f)):
            open(os.path.join(dst, f), 'w').write(open(os.path.join(tpl, f)).read())


if __name__ == '__main__':
    main(*sys.argv[1:4])
