#!/usr/bin/env python3
"""pp_bench.py - pipeline parallelism: one process on one core against two MPI
ranks on one core each (`mpirun -np 2 xllm run --pp 2`), at S concurrent
sequences (`xllm run --prompts`, greedy, --ignore-eos so every sequence
generates N tokens), for micro-batch counts 1, 2, 4.

Per configuration and round: aggregate generated tokens/s (the run's summary
line: generated tokens over the wall time from the first submit to the last
result, prefill included), resident memory per rank (peak: the single process's
maximum resident set from /usr/bin/time; each rank's VmHWM from --pp-stats) and, for 2 ranks, each stage's
bubble: the share of its in-step time spent waiting for the other stage
(--pp-stats: wait / (compute + wait); rank 0 waits for the logits, rank 1 for
hidden states). Configurations alternate within each round; medians with
min-max over the rounds. Standard library only.

usage: bench/pp_bench.py XLLM MODEL [--rounds R] [--seqs S] [-n N] [--mbs 1,2,4]
"""
import argparse, os, re, statistics, subprocess, sys, tempfile

ap = argparse.ArgumentParser()
ap.add_argument("xllm")
ap.add_argument("model")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--seqs", type=int, default=16)
ap.add_argument("-n", type=int, default=32)
ap.add_argument("--mbs", default="1,2,4")
a = ap.parse_args()

words = ["Once upon a time", "The dog", "Lily went to the park", "Tom and his mom", "The sun was", "A little bird",
         "In the forest", "The big red ball"]
prompts = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
for i in range(a.seqs):
    prompts.write("%s %d\n" % (words[i % len(words)], i))
prompts.close()

env = dict(os.environ, XLLM_PLAN="0", OMPI_MCA_btl_vader_single_copy_mechanism="none")
if os.getuid() == 0:
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
common = ["run", "-m", a.model, "--prompts", prompts.name, "-n", str(a.n), "--temp", "0", "--ignore-eos", "-t", "1",
          "-c", "256", "--json"]
SUMMARY = re.compile(r"generated (\d+) tokens in ([\d.]+) s \(([\d.]+) tokens/s aggregate\)")
STATS = re.compile(r"pp rank (\d+)/\d+: .*resident ([\d.]+) MiB \(peak ([\d.]+) MiB\).*compute ([\d.]+) s \| "
                   r"wait in steps ([\d.]+) s")


def run_one(mb):
    if mb == 0:  # one process, one core
        p = subprocess.run(["/usr/bin/time", "-f", "maxrss_kib %M", "taskset", "-c", "0", a.xllm] + common, env=env,
                           capture_output=True, text=True)
        m = re.search(r"maxrss_kib (\d+)", p.stderr)
        out = {"rss": [int(m.group(1)) / 1024.0 if m else float("nan")]}
    else:
        cmd = ["mpirun", "--oversubscribe", "-np", "2", "--bind-to", "core", "--map-by", "core", a.xllm] + common + \
              ["--pp", "2", "--pp-microbatches", str(mb), "--pp-stats"]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        ranks = {int(m.group(1)): m for m in STATS.finditer(p.stderr)}
        out = {"rss": [float(ranks[r].group(3)) for r in sorted(ranks)],
               "bubble": [100.0 * float(ranks[r].group(5)) / max(1e-9, float(ranks[r].group(4)) + float(ranks[r].group(5)))
                          for r in sorted(ranks)]}
    m = SUMMARY.search(p.stderr)
    if p.returncode or not m:
        sys.exit("failed (%d): %s" % (p.returncode, p.stderr[-2000:]))
    out["tps"] = float(m.group(3))
    out["ids"] = p.stdout
    return out


configs = [0] + [int(x) for x in a.mbs.split(",")]
res = {c: [] for c in configs}
for r in range(a.rounds):
    order = configs if r % 2 == 0 else configs[::-1]
    for c in order:
        res[c].append(run_one(c))
        print("round %d %s: %.2f tokens/s" % (r + 1, "1 rank" if c == 0 else "2 ranks, M=%d" % c, res[c][-1]["tps"]),
              file=sys.stderr, flush=True)


def mmm(xs):
    xs = [x for x in xs if x == x]
    if not xs:
        return "n/a"
    return "%.1f (%.1f-%.1f)" % (statistics.median(xs), min(xs), max(xs))


same = all(o["ids"] == res[0][0]["ids"] for c in configs for o in res[c])
print("model %s, %d sequences x %d tokens, greedy, %d rounds (alternating), median (min-max)" %
      (os.path.basename(a.model), a.seqs, a.n, a.rounds))
print("| configuration | tokens/s (aggregate) | peak RSS rank 0 MiB | peak RSS rank 1 MiB | bubble rank 0 % | bubble rank 1 % |")
print("|---|---|---|---|---|---|")
best = None
for c in configs:
    rows = res[c]
    tps = mmm([o["tps"] for o in rows])
    if c == 0:
        print("| 1 process, 1 core | %s | %s | - | - | - |" % (tps, mmm([o["rss"][0] for o in rows])))
        continue
    b0 = [o["bubble"][0] for o in rows]
    b1 = [o["bubble"][1] for o in rows]
    mean_b = statistics.median([(x + y) / 2 for x, y in zip(b0, b1)])
    if best is None or mean_b < best[1]:
        best = (c, mean_b)
    print("| 2 ranks x 1 core, %d micro-batch%s | %s | %s | %s | %s | %s |" %
          (c, "es" if c > 1 else "", tps, mmm([o["rss"][0] for o in rows]), mmm([o["rss"][1] for o in rows]),
           mmm(b0), mmm(b1)))
print("lowest bubble (mean of the two stages, median over rounds): %d micro-batches (%.1f%%)" % best)
print("outputs identical across all runs: %s" % ("yes" if same else "NO"))
os.unlink(prompts.name)
