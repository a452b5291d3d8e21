#!/usr/bin/env python3
"""compare.py - where the K-quant fixtures' log-probability deviation comes from
(issue 12): the same prompts through several computations, each pair compared
as test_kquant_models.c does (worst |difference| on the second one's top 10,
worst mean |difference| over the vocabulary, over the 8 prompts).

Sources: fix (the fixture: llama-server's numbers), ours (xLLM at its best
level), ours@LEVEL (XLLM_CPU=LEVEL), lc:KTYPE:VTYPE:FA (llama.cpp through
llamacpp_logprobs.c: KV cache type, flash attention on/off).

    # llama.cpp built as bench/compare_llamacpp_gguf.sh's header says, then:
    L=/work/cache/llama.cpp; gcc -O2 -o /tmp/llamacpp_logprobs bench/kq_accuracy/llamacpp_logprobs.c \\
      -I$L/include -I$L/ggml/include -L$L/build/bin -lllama -lggml -lggml-base -lm -Wl,-rpath,$L/build/bin
    make build
    python3 bench/kq_accuracy/compare.py all 'ours~fix' 'lc:f16:f16:0~fix' 'ours@scalar~ours@avx512'
FILES: comma-separated names from tests/data/kquants, or all; or paths of other GGUF files of
the same model (e.g. `xllm convert tests/data/kquants/kq-F16.gguf -o /tmp/m.gguf --dtype q4_k_m
--to gguf`), which take the F16 file's prompts (only sources ours and lc, no fix).
"""
import json, math, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
D = os.path.join(ROOT, "tests/data/kquants")
TOOL = os.environ.get("LLAMACPP_LOGPROBS", "/tmp/llamacpp_logprobs")
exp = json.load(open(os.path.join(D, "expected.json")))
cache = {}


def log_softmax(x):
    m = max(x)
    l = m + math.log(sum(math.exp(v - m) for v in x))
    return [v - l for v in x]


def path_of(file):
    return file if os.sep in file else os.path.join(D, file)


def get(file, src):
    if (file, src) in cache:
        return cache[file, src]
    cases = exp[file] if file in exp else exp["kq-F16.gguf"]
    if src == "fix":
        r = [c["logprobs_last"] for c in cases]
    elif src.startswith("ours"):
        code = ("import sys, json; sys.path.insert(0, %r); import xllm\nm = xllm.LLM(%r)\n"
                "print(json.dumps([m.logits(i) for i in %r]))") % (
            os.path.join(ROOT, "python"), path_of(file), [c["ids"] for c in cases])
        env = dict(os.environ, XLLM_PLAN="0")
        if "@" in src:
            env["XLLM_CPU"] = src.split("@")[1]
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        r = [log_softmax(x) for x in json.loads(out.stdout)]
    elif src.startswith("lc:"):
        _, kt, vt, fa = src.split(":")
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write("".join(" ".join(map(str, c["ids"])) + "\n" for c in cases))
        out = subprocess.run([TOOL, path_of(file), f.name, kt, vt, fa], capture_output=True, text=True,
                             check=True)
        os.unlink(f.name)
        r = [list(map(float, l.split())) for l in out.stdout.strip().split("\n")]
    else:
        sys.exit("unknown source " + src)
    cache[file, src] = r
    return r


def deviation(a, b):
    top10 = mean = 0.0
    for x, y in zip(a, b):
        if x is None or y is None:  # llama-server withheld them (partial UTF-8)
            continue
        top = sorted(range(len(y)), key=lambda i: -y[i])[:10]
        top10 = max(top10, max(abs(x[i] - y[i]) for i in top))
        mean = max(mean, sum(abs(p - q) for p, q in zip(x, y)) / len(y))
    return top10, mean


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    files = list(exp) if sys.argv[1] == "all" else sys.argv[1].split(",")
    for f in files:
        cols = []
        for pair in sys.argv[2:]:
            a, b = pair.split("~")
            cols.append("%s~%s %.4f/%.4f" % ((a, b) + deviation(get(f, a), get(f, b))))
        print("%-22s %s" % (f, "  ".join(cols)), flush=True)


if __name__ == "__main__":
    main()
