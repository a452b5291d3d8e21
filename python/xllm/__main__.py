"""python -m xllm: the command line's run and chat entry points for Python users.

    python -m xllm run [-m MODEL] [-p TEXT] [-n 256] [--temp 0.8] [--top-p 0.9] ...
    python -m xllm chat [-m MODEL] [-p TEXT]     (no -p: one turn per line of stdin)

Defaults are those of `xllm run`; the text streams to stdout and a summary
line (prompt and generated tokens, tokens/s, load time) goes to stderr unless
--quiet. Errors print "xllm: error: ..." and exit with status 1. Standard
library only.
"""

import argparse
import json
import sys
import time

from . import LLM, SamplingParams, XLLMError, default_model, enable_profiling, profile_report


def _number(lo, hi, lo_open=False, integer=False):
    """An argparse type: a finite number (an integer) in [lo, hi] ((lo, hi] with lo_open), as `xllm run` checks."""
    def parse(text):
        try:
            v = int(text, 10) if integer else float(text)
        except ValueError:
            v = None
        if v is None or v != v or not (lo < v if lo_open else lo <= v) or not v <= hi:
            raise argparse.ArgumentTypeError("needs %s %s %s, up to %s, got %r" % (
                "an integer" if integer else "a number", "above" if lo_open else "from", lo, hi, text))
        return v
    return parse


def _seed(text):
    """0 .. 2**64-1, or -1 (llama.cpp's spelling of a random seed): None."""
    if text == "-1":
        return None
    if not text.isdigit() or int(text) >= 1 << 64:
        raise argparse.ArgumentTypeError("needs an integer from 0 to 2**64-1 (or -1: a random seed), got %r" % text)
    return int(text)


def _parser():
    p = argparse.ArgumentParser(prog="python -m xllm", description="xLLM from Python: generate text or chat.")
    sub = p.add_subparsers(dest="command", metavar="{run,chat}")
    sub.required = True
    for name, what in (("run", "generate a continuation of the prompt"),
                       ("chat", "reply through the model's chat template")):
        s = sub.add_parser(name, help=what, description=what + " (defaults as `xllm run`)")
        s.add_argument("-m", "--model", help="HF checkpoint directory, .xllm or GGUF file "
                       "(default: $XLLM_MODEL, else the bundled stories260k)")
        s.add_argument("-p", "--prompt", help="prompt text (chat: the user message; default: "
                       + ("empty" if name == "run" else "one turn per line of stdin") + ")")
        s.add_argument("-n", "--max-new-tokens", "--n-predict", dest="max_new_tokens", type=_number(0, 1 << 30, integer=True), default=256,
                       help="tokens to generate (default: 256)")
        s.add_argument("-c", "--ctx-size", type=_number(0, 1 << 24, integer=True), default=0, help="context size (default: the model's, at most 8192)")
        s.add_argument("--temp", "--temperature", dest="temperature", type=_number(0, 100), default=0.8,
                       help="temperature from 0 (greedy) to 100 (default: 0.8)")
        s.add_argument("--top-k", type=_number(0, (1 << 31) - 1, integer=True), default=0, help="0 = off (default: 0)")
        s.add_argument("--top-p", type=_number(0, 1, lo_open=True), default=0.9, help="1 = off (default: 0.9)")
        s.add_argument("--min-p", type=_number(0, 1), default=0.0, help="0 = off (default: 0)")
        s.add_argument("--repetition-penalty", type=_number(0, 100, lo_open=True), default=1.0, help="1 = off (default: 1)")
        s.add_argument("--seed", type=_seed, default=None, help="sampling seed; -1 = random (default: random)")
        s.add_argument("--stop", action="append", default=[], help="stop string; repeatable")
        s.add_argument("-t", "--threads", type=_number(0, 1024, integer=True), default=0, help="CPU threads (default: all)")
        s.add_argument("--json", action="store_true", help="print {prompt_ids, ids, text} instead of streaming")
        s.add_argument("--quiet", action="store_true", help="no summary line on stderr")
        s.add_argument("--profile", action="store_true", help="print the kernel profile report (JSON) on stderr")
    return p


def _params(a):
    return SamplingParams(max_new_tokens=a.max_new_tokens, temperature=a.temperature, top_k=a.top_k, top_p=a.top_p,
                          min_p=a.min_p, repetition_penalty=a.repetition_penalty, seed=a.seed, stop=a.stop)


def _generate(llm, a, prompt=None, messages=None):
    """One request, streamed unless --json; returns the RequestOutput."""
    clock = {"first": None, "last": None}

    def on_token(index, token, piece):
        now = time.monotonic()
        if clock["first"] is None:
            clock["first"] = now
        clock["last"] = now
        if not a.json and piece:
            sys.stdout.write(piece)
            sys.stdout.flush()

    start = time.monotonic()
    if messages is not None:
        out = llm.chat(messages, _params(a), callback=on_token)
    else:
        out = llm.generate(prompt, _params(a), callback=on_token)[0]
    if a.json:
        print(json.dumps({"prompt_ids": out.prompt_token_ids, "ids": out.token_ids, "text": out.text},
                         ensure_ascii=False))
    else:
        print()
    sys.stdout.flush()
    if not a.quiet:
        np_, ng = len(out.prompt_token_ids), len(out.token_ids)
        first = clock["first"] or time.monotonic()
        line = "xllm: prompt %d tokens (%.1f tokens/s) | generated %d tokens" % (
            np_, np_ / max(first - start, 1e-9), ng)
        if ng > 1 and clock["last"] > first:
            line += " (%.1f tokens/s)" % ((ng - 1) / (clock["last"] - first))
        print(line + " | load %.2f s | %s" % (llm._load_s, out.finish_reason), file=sys.stderr)
    return out


def main(argv=None):
    a = _parser().parse_args(argv)
    try:
        model = a.model or default_model()
        if a.profile:
            enable_profiling()
        t0 = time.monotonic()
        llm = LLM(model, n_threads=a.threads, max_context=a.ctx_size)
        llm._load_s = time.monotonic() - t0
        if a.command == "run":
            _generate(llm, a, prompt=a.prompt or "")
        elif a.prompt is not None:
            _generate(llm, a, messages=[{"role": "user", "content": a.prompt}])
        else:
            history = []
            for line in sys.stdin:
                line = line.rstrip("\n")
                if not line:
                    continue
                history.append({"role": "user", "content": line})
                out = _generate(llm, a, messages=history)
                history.append({"role": "assistant", "content": out.text})
        if a.profile:
            print(json.dumps(profile_report()), file=sys.stderr)
        llm.close()
    except (XLLMError, OSError) as e:
        print("xllm: error: %s" % e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
