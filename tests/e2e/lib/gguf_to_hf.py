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
          'qwen3moe': 'qwen3_moe', 'llama': 'mixtral' if experts else 'llama'}[arch]
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
