#!/usr/bin/env bash
# compare_torch.sh - xLLM vs PyTorch eager f32 on the same HF-format model.
#
# For each shape (small-120m and tinyllama-1.1b by default), `xllm synth --hf DIR -o M-f32.xllm`
# writes the HF checkpoint (f32 safetensors) PyTorch runs and the .xllm with the same f32
# values; `xllm convert DIR --dtype q8|q4` makes the quantized .xllm files from that same
# checkpoint. First a check that both engines compute the same model (max |logit difference|
# over 8 positions, f32). Then ROUNDS rounds alternate bench/torch_bench.py (a plain Llama
# forward with a KV cache, torch only, Debian python3-torch) and `xllm bench` on each .xllm;
# each is a separate process, so peak RSS is each engine's own. Printed: decode (tg) tokens/s
# and peak RSS for every engine, and xLLM/torch ratios of decode speed and of peak memory.
#
#   bench/compare_torch.sh [BUILD_DIR]
# environment: SHAPES="small-120m tinyllama-1.1b" DTYPES="f32 q8 q4" THREADS=2 P=32 N=128 R=3
#              ROUNDS=3 MODELS=~/.cache/xllm-bench/models PYTHON=/usr/bin/python3 (with torch)
#              RESULTS=FILE (keep every run's JSON line there)
# torch's matmuls go to the system BLAS: Debian's default is the reference BLAS; with
# libopenblas0-pthread installed (apt-get install libopenblas0-pthread) torch uses OpenBLAS,
# which is several times faster; each torch run reports the BLAS it mapped ("blas").
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$SRC/build}
XLLM=$BUILD/xllm
SHAPES=${SHAPES:-"small-120m tinyllama-1.1b"}
DTYPES=${DTYPES:-"f32 q8 q4"}
THREADS=${THREADS:-2}; P=${P:-32}; N=${N:-128}; R=${R:-3}; ROUNDS=${ROUNDS:-3}
MODELS=${MODELS:-$HOME/.cache/xllm-bench/models}
PYTHON=${PYTHON:-/usr/bin/python3}
[ -x "$XLLM" ] || { echo "no $XLLM: build first (make build)" >&2; exit 1; }
"$PYTHON" -c "import torch" 2>/dev/null || { echo "$PYTHON has no torch: apt-get install python3-torch" >&2; exit 1; }
mkdir -p "$MODELS"
OUT=$(mktemp); ERR=$(mktemp); trap 'rm -f "$OUT" "$ERR" "$OUT".*' EXIT

for shape in $SHAPES; do
    hf=$MODELS/$shape-hf
    if [ ! -f "$hf/model.safetensors" ] || [ ! -f "$MODELS/$shape-f32.xllm" ]; then
        echo "synthesizing $hf and $MODELS/$shape-f32.xllm" >&2
        "$XLLM" synth --shape "$shape" --dtype f32 -o "$MODELS/$shape-f32.xllm" --hf "$hf"
    fi
    for dt in $DTYPES; do
        [ "$dt" = f32 ] || [ -f "$MODELS/$shape-$dt.xllm" ] || "$XLLM" convert "$hf" --dtype "$dt" -o "$MODELS/$shape-$dt.xllm"
    done
    ids=1,5,300,17,42,99,511,3
    "$XLLM" logits -m "$MODELS/$shape-f32.xllm" --ids $ids --out "$OUT.x" > /dev/null
    "$PYTHON" "$SRC/bench/torch_bench.py" -m "$hf" -t "$THREADS" --logits-ids $ids --logits-out "$OUT.t"
    python3 - "$OUT.x" "$OUT.t" "$shape" <<'PY'
import struct, sys
a = open(sys.argv[1], "rb").read(); b = open(sys.argv[2], "rb").read()
x = struct.unpack("<%df" % (len(a) // 4), a); y = struct.unpack("<%df" % (len(b) // 4), b)
print("%s: same model: max |xLLM f32 - torch| = %.2e over %d logits (max |logit| %.2f)" % (
    sys.argv[3], max(abs(p - q) for p, q in zip(x, y)), len(x), max(map(abs, x))))
PY
    for round in $(seq "$ROUNDS"); do
        echo "[$shape round $round/$ROUNDS] torch" >&2
        printf '%s torch-f32 ' "$shape" >> "$OUT"
        "$PYTHON" "$SRC/bench/torch_bench.py" -m "$hf" -p "$P" -n "$N" -t "$THREADS" -r "$R" >> "$OUT"
        for dt in $DTYPES; do
            echo "[$shape round $round/$ROUNDS] xllm $dt" >&2
            "$XLLM" bench -m "$MODELS/$shape-$dt.xllm" -p "$P" -n "$N" -t "$THREADS" -r "$R" --json > "$OUT.j" 2> "$ERR"
            rss=$(sed -n 's/^peak RSS *\([0-9.]*\) MiB.*/\1/p' "$ERR")
            printf '%s xllm-%s %s\n' "$shape" "$dt" "$(sed "s/}\$/,\"peak_rss_mib\":$rss}/" "$OUT.j")" >> "$OUT"
        done
    done
done

[ -n "${RESULTS:-}" ] && cp "$OUT" "$RESULTS"
python3 - "$OUT" "$P" "$N" "$THREADS" "$ROUNDS" "$R" <<'PY'
import json, statistics, sys
path, P, N, T, rounds, reps = sys.argv[1:]
runs = {}
for line in open(path):
    shape, eng, js = line.split(" ", 2)
    runs.setdefault(shape, {}).setdefault(eng, []).append(json.loads(js))
ms = lambda x: (statistics.mean(x), statistics.stdev(x) if len(x) > 1 else 0.0)
print("%s threads, pp%s / tg%s, %s rounds x %s runs: mean ± sd of the rounds' means; best = fastest round" % (T, P, N, rounds, reps))
print("| model | engine | tg%s tok/s | best | pp%s tok/s | peak RSS MiB | decode xLLM/torch: means, bests, median per round | memory xLLM/torch |" % (N, P))
print("|---|---|---|---|---|---|---|---|")
for shape, engs in runs.items():
    base = engs.get("torch-f32")
    for eng, rs in engs.items():
        tgs = [r["tg_tok_s"] for r in rs]
        tg, pp, rss = ms(tgs), ms([r["pp_tok_s"] for r in rs]), ms([r["peak_rss_mib"] for r in rs])
        ratio = mem = "—"
        if base and eng != "torch-f32":
            bt = [r["tg_tok_s"] for r in base]
            per = [a / b for a, b in zip(tgs, bt)]
            ratio = "%.2fx, %.2fx, %.2fx" % (tg[0] / statistics.mean(bt), max(tgs) / max(bt), statistics.median(per))
            mem = "%.2fx" % (rss[0] / statistics.mean(r["peak_rss_mib"] for r in base))
        print("| %s | %s | %.2f ± %.2f | %.2f | %.1f ± %.1f | %.0f | %s | %s |" % (shape, eng, tg[0], tg[1], max(tgs), pp[0], pp[1], rss[0], ratio, mem))
blas = {r.get("blas") for engs in runs.values() for r in engs.get("torch-f32", [])}
print("torch BLAS: %s" % ", ".join(sorted(b or "?" for b in blas)))
PY
