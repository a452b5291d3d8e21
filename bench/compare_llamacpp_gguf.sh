#!/usr/bin/env bash
# compare_llamacpp_gguf.sh - xLLM vs llama.cpp built from source (llama-bench) on the same
# GGUF file: K-quants (issue 12), Q4_0 / Q8_0 and context depth (issue 13).
#
# For each TYPE (default Q4_K_M, Q6_K): a random-weight model of SHAPE is synthesized once as
# an F16 GGUF (`xllm synth --gguf ... --gguf-type F16`) and quantized by llama.cpp's own
# llama-quantize into TYPE, so both engines read the very same file. ROUNDS rounds then
# alternate `xllm bench -m FILE.gguf` and `llama-bench -m FILE.gguf`, each R runs after its
# warm-up, same threads, pp = P-token prompt, tg = N generated tokens (llama-bench: after an
# empty context; xllm bench: after an 8-token prompt). The summary gives, per engine, the
# median over rounds with min-max, the per-round ratio xLLM / llama.cpp (median, min-max),
# and xLLM's decode against the memory-bandwidth bound xllm bench measures in the same run
# (weights plus the K/V a step reads at that depth; probed before and after each tg run),
# llama.cpp's against the same probe run before and after each llama-bench, how many rounds
# left room for the issue's 1.3x decode target at all (bound >= 1.3x llama.cpp's tg), and
# each engine's spread across rounds ((max - min) / median).
#
# DEPTH=D runs both after a D-token context (`xllm bench -d`, `llama-bench -d`). FA="on off"
# runs llama-bench once per flash-attention setting in each round (reported as separate
# engines; default: llama-bench's auto). RSS=1 adds, once per type, each engine's peak
# resident memory on a short run (`-p 128 -n 32`, /usr/bin/time -f %M).
#
# TYPES=all: every type llama-quantize makes (issue 28's table): Q2_K Q3_K_S Q3_K_M Q3_K_L
# Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL IQ4_XS.
# IK_BIN=DIR (ik_llama.cpp's llama-bench, built as below) adds ik_llama.cpp's prefill on
# IK_TYPES (default Q4_0 Q8_0 Q4_K_M) in the same rounds (pp only: `-n 0`). Every round also
# records the host's 1-minute load average before each engine (`/proc/loadavg`), printed
# per type next to the figures (a shared host: the load says how much to trust a round).
#
# ik_llama.cpp (the CPU-specialised fork), outside this repository, only llama-bench:
#   git clone https://github.com/ikawrakow/ik_llama.cpp /work/cache/ik_llama.cpp && cd /work/cache/ik_llama.cpp &&
#   cmake -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON -DGGML_IQK_FA_ALL_QUANTS=OFF &&
#   cmake --build build -j2 --target llama-bench
#
# llama.cpp: build it outside this repository from the source npm's node-llama-cpp bundles:
#   mkdir -p /work/cache && cd /work/cache && npm pack node-llama-cpp@3.22.1 &&
#   tar xzf node-llama-cpp-3.22.1.tgz && git clone package/llama/gitRelease.bundle llama.cpp &&
#   cd llama.cpp && cmake -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON &&
#   cmake --build build -j2 --target llama-bench llama-quantize
# (2026-12-07: also -DLLAMA_OPENSSL=OFF, targets llama-server llama-cli too; the bundle's tree
#  is llama.cpp de3ff81)
#
#   bench/compare_llamacpp_gguf.sh [BUILD_DIR]
# environment: LLAMA_BIN=/work/cache/llama.cpp/build/bin SHAPE=tinyllama-1.1b TYPES="Q4_K_M Q6_K"
#              THREADS=2 P=512 N=128 R=3 ROUNDS=5 MODELS=/work/cache/models RESULTS=FILE
#              DEPTH=0 FA="auto" RSS=0 IK_BIN= IK_TYPES="Q4_0 Q8_0 Q4_K_M"
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$SRC/build}
XLLM=$BUILD/xllm
LLAMA_BIN=${LLAMA_BIN:-/work/cache/llama.cpp/build/bin}
SHAPE=${SHAPE:-tinyllama-1.1b}
TYPES=${TYPES:-"Q4_K_M Q6_K"}
THREADS=${THREADS:-2}; P=${P:-512}; N=${N:-128}; R=${R:-3}; ROUNDS=${ROUNDS:-5}
MODELS=${MODELS:-/work/cache/models}
DEPTH=${DEPTH:-0}; FA=${FA:-auto}; RSS=${RSS:-0}
IK_BIN=${IK_BIN:-}; IK_TYPES=${IK_TYPES:-"Q4_0 Q8_0 Q4_K_M"}
[ "$TYPES" = all ] && TYPES="Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL IQ4_XS"
[ -z "$IK_BIN" ] || [ -x "$IK_BIN/llama-bench" ] || { echo "no $IK_BIN/llama-bench: build ik_llama.cpp first (see the top of this script)" >&2; exit 1; }
load1() { cut -d' ' -f1 /proc/loadavg; }
[ -x "$XLLM" ] || { echo "no $XLLM: build first (make build)" >&2; exit 1; }
for b in llama-bench llama-quantize; do
    [ -x "$LLAMA_BIN/$b" ] || { echo "no $LLAMA_BIN/$b: build llama.cpp first (see the top of this script)" >&2; exit 1; }
done
mkdir -p "$MODELS"
OUT=$(mktemp); ERR=$(mktemp); trap 'rm -f "$OUT" "$ERR"' EXIT

f16=$MODELS/$SHAPE-F16.gguf
if [ ! -f "$f16" ]; then
    echo "synthesizing $f16" >&2
    "$XLLM" synth --shape "$SHAPE" --dtype f16 -o "$MODELS/$SHAPE-f16.xllm" --gguf "$f16" --gguf-type F16
fi
for type in $TYPES; do
    g=$MODELS/$SHAPE-$type.gguf
    [ -f "$g" ] || "$LLAMA_BIN/llama-quantize" "$f16" "$g" "$type" >&2
    for round in $(seq "$ROUNDS"); do
        echo "[$type round $round/$ROUNDS] xllm bench (load $(load1))" >&2
        echo "load $type xllm $round $(load1)" >> "$OUT"
        j=$("$XLLM" bench -m "$g" -p "$P" -n "$N" -d "$DEPTH" -t "$THREADS" -r "$R" --json 2>"$ERR")
        bw=$(grep -o 'tg achieves [0-9.]*' "$ERR" | awk '{print $3}')
        bound=$(grep -o 'tg bound [0-9.]*' "$ERR" | awk '{print $3}')
        gbs=$(grep -o 'bandwidth *[0-9.]* GB/s' "$ERR" | awk '{print $2}')
        # bytes a decode step reads, as xllm bench counts them (bound = bandwidth / bytes)
        step=$(python3 -c "import sys; b, g = float(sys.argv[1] or 0), float(sys.argv[2] or 0); print(g * 1e9 / b if b > 0 else 0)" "${bound:-}" "${gbs:-}")
        echo "$type xllm $round $j ${bound:-0} ${bw:-0}" >> "$OUT"
        for fa in $FA; do
            eng=llama.cpp; [ "$fa" = auto ] || eng="llama.cpp-fa-$fa"
            echo "[$type round $round/$ROUNDS] llama-bench -fa $fa" >&2
            # the same probe as xllm bench's, before and after: llama.cpp's decode against the
            # bound of its own minutes (the host's bandwidth drifts)
            echo "load $type $eng $round $(load1)" >> "$OUT"
            b0=$("$XLLM" bench --bandwidth-only -t "$THREADS" || echo 0)
            j=$("$LLAMA_BIN/llama-bench" -m "$g" -p "$P" -n "$N" -d "$DEPTH" -fa "$fa" -t "$THREADS" -r "$R" -o json 2>/dev/null |
                python3 -c 'import json,sys; a=json.load(sys.stdin); pp=[x for x in a if x["n_gen"]==0][0]; tg=[x for x in a if x["n_prompt"]==0][0]; print(json.dumps({"pp_tok_s":pp["avg_ts"],"tg_tok_s":tg["avg_ts"]}))')
            b1=$("$XLLM" bench --bandwidth-only -t "$THREADS" || echo 0)
            lb=$(python3 -c "import json,sys; s, b0, b1 = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]); b = (b0 + b1) / 2 * 1e9 / s if s > 0 and b0 > 0 and b1 > 0 else 0; t = json.loads(sys.argv[4])['tg_tok_s']; print('%.3f %.4f' % (b, t / b if b else 0))" "$step" "$b0" "$b1" "$j")
            echo "$type $eng $round $j $lb" >> "$OUT"
        done
        if [ -n "$IK_BIN" ] && [[ " $IK_TYPES " == *" $type "* ]]; then
            echo "[$type round $round/$ROUNDS] ik_llama.cpp llama-bench (pp only)" >&2
            echo "load $type ik_llama.cpp $round $(load1)" >> "$OUT"
            j=$("$IK_BIN/llama-bench" -m "$g" -p "$P" -n 0 -t "$THREADS" -r "$R" -o json 2>/dev/null |
                python3 -c 'import json,sys; a=json.load(sys.stdin); pp=[x for x in a if x["n_gen"]==0][0]; print(json.dumps({"pp_tok_s":pp["avg_ts"],"tg_tok_s":0}))')
            echo "$type ik_llama.cpp $round $j 0 0" >> "$OUT"
        fi
    done
    if [ "$RSS" = 1 ]; then
        /usr/bin/time -o "$ERR" -f %M "$XLLM" bench -m "$g" -p 128 -n 32 -t "$THREADS" -r 1 --no-bandwidth >/dev/null 2>&1
        kx=$(tail -1 "$ERR")
        /usr/bin/time -o "$ERR" -f %M "$LLAMA_BIN/llama-bench" -m "$g" -p 128 -n 32 -t "$THREADS" -r 1 >/dev/null 2>&1
        kl=$(tail -1 "$ERR")
        echo "rss $type xllm $kx" >> "$OUT"
        echo "rss $type llama.cpp $kl" >> "$OUT"
    fi
done
[ -n "${RESULTS:-}" ] && cp "$OUT" "$RESULTS"

python3 - "$OUT" "$SHAPE" "$P" "$N" "$THREADS" "$ROUNDS" "$R" "$DEPTH" <<'PY'
import json, statistics, sys
path, shape, P, N, T, rounds, reps, depth = sys.argv[1:]
runs, rss, loads = {}, {}, {}
for line in open(path):
    if line.startswith("load "):
        _, typ, eng, rnd, l1 = line.split()
        loads.setdefault(typ, []).append(float(l1))
        continue
    if line.startswith("rss "):
        _, typ, eng, kb = line.split()
        rss[(typ, eng)] = int(kb) / 1048576.0
        continue
    typ, eng, rnd, rest = line.split(" ", 3)
    js, bound, frac = rest.rsplit(" ", 2)
    r = json.loads(js); r["bound"] = float(bound); r["frac"] = float(frac)
    runs.setdefault((typ, eng), []).append(r)
def mm(x):
    return "%.2f (%.2f-%.2f)" % (statistics.median(x), min(x), max(x))
def spread(x):
    return (max(x) - min(x)) / statistics.median(x)
at = " @ d%s" % depth if depth != "0" else ""
print("%s, %s threads, %s rounds x %s runs alternating; median over rounds (min-max)%s" % (shape, T, rounds, reps, at))
print("| type | engine | pp%s%s tok/s | tg%s%s tok/s | spread pp / tg | host load (1-min avg) |" % (P, at, N, at))
print("|---|---|---|---|---|---|")
for (typ, eng), rs in runs.items():
    pp, tg = [r["pp_tok_s"] for r in rs], [r["tg_tok_s"] for r in rs]
    ld = loads.get(typ)
    print("| %s | %s | %s | %s | %.2f / %s | %s |" % (typ, eng, mm(pp), mm(tg) if max(tg) > 0 else "-", spread(pp),
          "%.2f" % spread(tg) if max(tg) > 0 else "-", "%.1f-%.1f" % (min(ld), max(ld)) if ld else "-"))
if rss:
    print()
    print("| type | engine | peak RSS GiB (-p 128 -n 32) |")
    print("|---|---|---|")
    for (typ, eng), g in rss.items():
        print("| %s | %s | %.2f |" % (typ, eng, g))
print()
print("| type | xLLM / llama.cpp pp%s, per round: median (min-max) | tg%s | xLLM tg / bandwidth bound (median, min-max) | llama.cpp tg / bound | rounds with bound >= 1.3x llama.cpp tg |" % (P, N))
print("|---|---|---|---|---|---|")
for typ, peer in dict.fromkeys((t, e) for t, e in runs if e != "xllm"):
    x, l = runs.get((typ, "xllm")), runs.get((typ, peer))
    if not x or not l:
        continue
    rp = [a["pp_tok_s"] / b["pp_tok_s"] for a, b in zip(x, l)]
    if not any(b["tg_tok_s"] for b in l):  # a prefill-only peer (ik_llama.cpp)
        print("| %s vs %s | %s | - | - | - | - |" % (typ, peer, mm(rp)))
        continue
    rt = [a["tg_tok_s"] / b["tg_tok_s"] for a, b in zip(x, l)]
    lf = [b["frac"] for b in l if b["bound"] > 0]
    room = sum(1 for b in l if b["bound"] >= 1.3 * b["tg_tok_s"])
    print("| %s vs %s | %s | %s | %s (bound %s tok/s) | %s | %s |" % (typ, peer, mm(rp), mm(rt), mm([a["frac"] for a in x]),
          mm([a["bound"] for a in x]), mm(lf) + " (bound %s)" % mm([b["bound"] for b in l if b["bound"] > 0]) if lf else "-",
          "%d of %d" % (room, len(l)) if lf else "-"))
PY
