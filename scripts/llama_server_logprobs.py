#!/usr/bin/env python3
"""llama_server_logprobs.py LLAMA_SERVER MODEL.gguf PROMPTS.json OUT.json [CTX]

llama.cpp's llama-server as the reference for a GGUF file: for each prompt of PROMPTS.json (the
"prompts"[k]["ids"] of a tests/data/archs expected.json), the top-64 log-probabilities of the next
token (POST /completion, n_probs 64, pre-sampling: post_sampling_probs false, one greedy token with
lone bytes 131..258 banned from being sampled, as ../shared/data/archs/README.md describes) and, for
prompts 5 and 7, 16 greedy tokens (ignore_eos). Writes OUT.json: {"server_command", "llama_cpp",
"model_sha256", "prompts": [{"ids", "top64": [[id, logprob], ...], "greedy16"?}]}. Used once to make
tests/data/archs/phi4-partial/expected.json (README there); standard library only.
Also a module: tests/data/archs/yarn/make_expected.py starts its server with llama_server() and asks
it with post()."""
import contextlib, hashlib, json, os, subprocess, sys, time, urllib.request


def post(port, body, timeout=120):
    """POST body (JSON) to the server's /completion; the decoded answer."""
    req = urllib.request.Request('http://127.0.0.1:%d/completion' % port, json.dumps(body).encode(),
                                 {'Content-Type': 'application/json'})
    return json.load(urllib.request.urlopen(req, timeout=timeout))


@contextlib.contextmanager
def llama_server(server, model, port, ctx, log_path, poll=0.2):
    """llama-server on model at 127.0.0.1:port (-t 2, -c ctx, one slot), its output into log_path;
    yields its command line once /health answers (or after 600 polls poll seconds apart), and stops
    it on leaving."""
    cmd = [server, '-m', model, '--host', '127.0.0.1', '--port', str(port), '-t', '2', '-c', ctx, '-np', '1']
    log = open(log_path, 'w')
    srv = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen('http://127.0.0.1:%d/health' % port, timeout=2)
                break
            except Exception:
                time.sleep(poll)
        yield cmd
    finally:
        srv.terminate()
        srv.wait()
        log.close()


def main(server, model, prompts_json, out, ctx='512'):
    port = 24100 + os.getpid() % 500
    with llama_server(server, model, port, ctx, out + '.server.log') as cmd:
        prompts = [p['ids'] for p in json.load(open(prompts_json))['prompts']]
        res = []
        for k, ids in enumerate(prompts):
            r = post(port, {'prompt': ids, 'n_predict': 1, 'temperature': 0, 'top_k': 1, 'samplers': ['top_k'],
                            'cache_prompt': False, 'post_sampling_probs': False, 'return_tokens': True,
                            'n_probs': 64, 'logit_bias': [[t, False] for t in range(131, 259)]})
            top = r['completion_probabilities'][0]['top_logprobs']
            e = {'ids': ids, 'top64': [[t['id'], t['logprob']] for t in top]}
            if k in (5, 7):
                g = post(port, {'prompt': ids, 'n_predict': 16, 'temperature': 0, 'top_k': 1, 'samplers': ['top_k'],
                                'cache_prompt': False, 'ignore_eos': True, 'return_tokens': True})
                e['greedy16'] = g['tokens']
            res.append(e)
        ver = subprocess.run([server, '--version'], capture_output=True, text=True)
        doc = {'server_command': ' '.join(['llama-server'] + cmd[1:2] + [os.path.basename(model)] + cmd[3:]),
               'llama_cpp': ' | '.join(l for l in (ver.stdout + ver.stderr).splitlines()
                                       if l.startswith('version:') or l.startswith('built with')),
               'model_sha256': hashlib.sha256(open(model, 'rb').read()).hexdigest(), 'prompts': res}
        json.dump(doc, open(out, 'w'), indent=1)


if __name__ == '__main__':
    main(*sys.argv[1:])
