"""make_expected.py - llama-server's outputs for the YaRN variants of two tests/data/archs fixtures.

Each variant is its fixture's model.gguf with rope-scaling metadata added by
tests/e2e/lib/gguf_set_keys.py (same weights, same tensor bytes; VARIANTS below), which
tests/e2e/yarn.sh makes again at run time, so no model file is stored here. For each variant
this starts llama.cpp's own llama-server on it, asks /completion for the log-probabilities
after the fixture's 8 prompts (the requests of ../README.md: n_probs 32000, temperature 0,
top_k 1, the lone-byte logit bias) and for 16 greedy tokens after prompts 5 and 7 (ignore_eos),
and writes <variant>.json: per prompt the TOP log-probabilities (id, logprob) of the full
32000-token row, the argmax, and the greedy tokens; plus the largest change against the
fixture's own logprobs.f32 (no YaRN), to show what the metadata does.
usage: make_expected.py LLAMA_SERVER_BINARY   (run from the repository root; needs the fixtures)"""
import json, math, os, struct, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', '..', 'scripts'))
from llama_server_logprobs import llama_server, post  # noqa: E402 (the server's start, stop and requests)

TOP = 256
VARIANTS = {
    # DeepSeek-V2/V3 style: factor 40 over 4096 positions, mscale_all_dim 0.707 (V2-Lite's value)
    # stored as llama.cpp's converter does (yarn_log_multiplier = 0.1 * mscale_all_dim)
    'deepseek2-yarn': ('deepseek2', ['deepseek2.rope.scaling.type=str:yarn', 'deepseek2.rope.scaling.factor=f32:40',
                                     'deepseek2.rope.scaling.original_context_length=u32:4096',
                                     'deepseek2.rope.scaling.yarn_log_multiplier=f32:0.0707']),
    # the same with mscale_all_dim 0.354 (added after deepseek2-yarn missed 1e-4 under arithmetic llama:
    # this one meets it, so the softmax mscale^2 path itself agrees; see test_yarn_models.c)
    'deepseek2-yarn-m354': ('deepseek2', ['deepseek2.rope.scaling.type=str:yarn',
                                          'deepseek2.rope.scaling.factor=f32:40',
                                          'deepseek2.rope.scaling.original_context_length=u32:4096',
                                          'deepseek2.rope.scaling.yarn_log_multiplier=f32:0.0354']),
    # Qwen2.5-style YaRN on a llama-architecture file: factor 4 over 2048 positions
    'llama-moe-yarn': ('llama-moe', ['llama.rope.scaling.type=str:yarn', 'llama.rope.scaling.factor=f32:4',
                                     'llama.rope.scaling.original_context_length=u32:2048']),
}


def main():
    server = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    archs = os.path.dirname(here)
    lib = os.path.join(archs, '..', '..', 'e2e', 'lib')
    tmp = tempfile.mkdtemp()
    for name, (base, keys) in VARIANTS.items():
        exp = json.load(open(os.path.join(archs, base, 'expected.json')))
        model = os.path.join(tmp, name + '.gguf')
        subprocess.check_call([sys.executable, os.path.join(lib, 'gguf_set_keys.py'),
                               os.path.join(archs, base, 'model.gguf'), model] + keys)
        port = 24260
        with llama_server(server, model, port, '512', os.path.join(tmp, name + '.log'), poll=0.5) as cmd:
            base_rows = open(os.path.join(archs, base, 'logprobs.f32'), 'rb').read()
            prompts, worst = [], 0.0
            for k, p in enumerate(exp['prompts']):
                ids = p['ids']
                r = post(port, {'prompt': ids, 'n_predict': 1, 'n_probs': 32000, 'temperature': 0, 'top_k': 1,
                                'samplers': ['top_k'], 'cache_prompt': False, 'post_sampling_probs': False,
                                'return_tokens': True, 'logit_bias': [[t, False] for t in range(131, 259)]}, 600)
                top = r['completion_probabilities'][0]['top_logprobs']
                assert len(top) == 32000, len(top)
                row = [0.0] * 32000
                for e in top:
                    row[e['id']] = e['logprob']
                order = sorted(range(32000), key=lambda i: (-row[i], i))
                old = struct.unpack_from('<32000f', base_rows, k * 32000 * 4)
                worst = max(worst, max(abs(a - b) for a, b in zip(row, old)))
                ent = {'ids': ids, 'argmax': order[0], 'argmax_base': min(range(32000), key=lambda i: (-old[i], i)),
                       'top2_margin': row[order[0]] - row[order[1]],
                       'logsumexp': math.log(math.fsum(math.exp(v) for v in row)),
                       'top': [[i, row[i]] for i in order[:TOP]]}
                if 'greedy16' in p:
                    g = post(port, {'prompt': ids, 'n_predict': 16, 'temperature': 0, 'top_k': 1,
                                    'samplers': ['top_k'], 'cache_prompt': False, 'ignore_eos': True,
                                    'return_tokens': True}, 600)
                    ent['greedy16'] = g['tokens']
                    ent['greedy16_base'] = p['greedy16']
                prompts.append(ent)
        info = [l.strip() for l in open(os.path.join(tmp, name + '.log')) if 'yarn' in l.lower() or 'rope' in l.lower()]
        out = {'variant': name, 'base_fixture': base, 'keys_added': keys,
               'how': 'python3 tests/e2e/lib/gguf_set_keys.py tests/data/archs/%s/model.gguf %s.gguf %s' %
                      (base, name, ' '.join(keys)),
               'server_command': ' '.join(['llama-server', '-m', name + '.gguf'] + cmd[3:]),
               'llama_cpp': exp['llama_cpp'], 'n_vocab': 32000, 'top_n': TOP,
               'max_abs_change_vs_base_fixture': worst,
               'server_log_rope_lines': info[:40], 'prompts': prompts}
        json.dump(out, open(os.path.join(here, name + '.json'), 'w'), indent=1)
        print(name, 'max |change| vs no YaRN: %.4f' % worst,
              'argmax changed: %d/8' % sum(p['argmax'] != p['argmax_base'] for p in prompts))


if __name__ == '__main__':
    main()
