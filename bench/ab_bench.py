#!/usr/bin/env python3
"""ab_bench.py - two xllm binaries' `xllm bench` figures, alternated round by round.

Usage: bench/ab_bench.py OLD_XLLM NEW_XLLM MODEL [-r ROUNDS] [--old-args "A..."] [--new-args "B..."]
                         [-- BENCH ARGS...]

Each round runs `OLD bench -m MODEL --json ARGS` then `NEW bench ...` (the order
swaps every round, so drift on a shared machine falls on both alike) and keeps
prefill (pp) and decode (tg) tokens/s, and decode as a fraction of the
bandwidth bound that xllm bench probes around each of its tg runs (frac; not
with --no-bandwidth): on a host whose bandwidth drifts, the steadier figure to
compare. Prints per binary the median and min-max of each, and the new/old
ratio of medians. --old-args / --new-args add bench
arguments to one side only, so one binary can be compared with itself under
two settings (e.g. --old-args "--kv-dtype f32" --new-args "--kv-dtype q8").
Timing is information, never pass/fail. Standard library only.
"""
import json
import re
import shlex
import statistics
import subprocess
import sys


def run(binary, model, extra):
    p = subprocess.run([binary, "bench", "-m", model, "--json"] + extra, check=True, capture_output=True, text=True)
    j = json.loads(p.stdout.strip().splitlines()[-1])
    m = re.search(r"tg achieves ([0-9.]+)", p.stderr)
    return j["pp_tok_s"], j["tg_tok_s"], float(m.group(1)) if m else None


def main(argv):
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    side = {"old": [], "new": []}
    for name in ("old", "new"):
        flag = "--%s-args" % name
        if flag in argv:
            i = argv.index(flag)
            side[name] = shlex.split(argv[i + 1])
            del argv[i:i + 2]
    rounds = 5
    if "-r" in argv:
        i = argv.index("-r")
        rounds = int(argv[i + 1])
        del argv[i:i + 2]
    if len(argv) != 3:
        sys.exit(__doc__)
    old, new, model = argv
    res = {"old": ([], [], []), "new": ([], [], [])}
    for r in range(rounds):
        order = [("old", old), ("new", new)] if r % 2 == 0 else [("new", new), ("old", old)]
        for name, b in order:
            pp, tg, frac = run(b, model, extra + side[name])
            res[name][0].append(pp)
            res[name][1].append(tg)
            if frac is not None:
                res[name][2].append(frac)
            print("round %d %s: pp %.2f tg %.2f frac %s" % (r + 1, name, pp, tg, frac), file=sys.stderr)
    summary = {}
    for name in ("old", "new"):
        for k, vals in zip(("pp", "tg", "frac"), res[name]):
            if vals:
                summary[name + "_" + k] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
    for k, unit in (("pp", "tok/s"), ("tg", "tok/s"), ("frac", "of the bound")):
        if "old_" + k not in summary or "new_" + k not in summary:
            continue
        o, n = summary["old_" + k], summary["new_" + k]
        print("%s %s: old %.2f (%.2f-%.2f)  new %.2f (%.2f-%.2f)  new/old %.3f" %
              (k, unit, o["median"], o["min"], o["max"], n["median"], n["min"], n["max"], n["median"] / o["median"]))
    print(json.dumps(summary))


if __name__ == "__main__":
    main(sys.argv[1:])
