#!/usr/bin/env bash
# server_load.sh - `xllm serve` against llama-server on the same GGUF, same
# threads: 1 / 4 / 16 / 64 concurrent streaming clients, P-token prompts, N
# generated tokens (bench/server_load.mjs), ROUNDS rounds alternating the two
# servers (each started once per round, one warm-up request, then every
# concurrency level). Prints per engine and level the median (min-max) over
# rounds of aggregate generated tokens/s, TTFT p50 and p99, and the ratios,
# with the requests that failed (any status but 200, a broken stream) or came back
# short, and the load average around each run (the host may be shared).
#
# llama-server is built from the llama.cpp source that npm's node-llama-cpp
# bundles (package/llama/gitRelease.bundle), in LLAMA_DIR outside the
# repository (reused when it is already built; its code is never committed);
# LLAMA_SERVER=PATH uses a given binary instead.
# The model: TinyLlama-1.1B shapes, Q4_0, random weights from `xllm synth`.
#
#   bench/server_load.sh [BUILD_DIR]
# environment: THREADS=2 ROUNDS=5 CONC="1 4 16 64" K=2 P=128 N=128
#              WORKSPACE=1200MiB (xllm's scratch + KV pool)
#              CACHE=~/.cache/xllm-bench  LLAMA_DIR=$CACHE/llama.cpp  MODEL=$CACHE/models/tinyllama-1.1b-Q4_0.gguf
#              RESULTS=FILE (every run's JSON line)
#   A KV pool smaller than the clients (issue 28): KV_SEQS=S gives xllm a pool of S full
#   sequences (memory.kv_tokens = S x (P+N+16), kv_dtype KV_DTYPE=f16, llama-server's KV
#   type; preempt recompute, no swap pool, prefix cache off) instead of WORKSPACE;
#   LLAMA_NP=M gives llama-server M slots (-np M -c M x (P+N+16); default: the largest level).
#   VERIFY=V: after the levels, V of the prompts (spread over the largest level's) are sent
#   again one at a time, and each level's greedy text for them is compared with these solo
#   runs ("differ from solo"; llama-server's requests say cache_prompt false).
#   ENGINES="xllm llama-server" (the order in each round; one of them alone is fine),
#   VOCAB=32000 (prompt ids are drawn below it), PORT=18080. FIRST_ROUND=1 (a round's number
#   seeds its prompts) and APPEND=1 (add to RESULTS and RESULTS.verify instead of starting
#   them afresh) let a series be run in parts; ROUNDS=0 APPEND=1 only prints the tables.
#   Issue 28's 128 / 256 clients on TinyLlama shapes, a pool of 32 sequences (25% / 12%):
#     MODEL=/work/cache/models/tinyllama-1.1b-Q4_0-serve28.gguf CONC="128 256" K=1 P=32 N=32 \
#       KV_SEQS=32 VERIFY=8 ROUNDS=3 bench/server_load.sh
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
case " ${ENGINES:-llama-server} " in *" llama-server "*) ;; *) LLAMA_SERVER=none ;; esac
LLAMA_SERVER=${LLAMA_SERVER:-$(ls "$LLAMA_DIR"/build*/bin/llama-server 2>/dev/null | head -1 || true)}
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
LLAMA_NP=${LLAMA_NP:-$MAXC}
if [ -n "${KV_SEQS:-}" ]; then
    MEMORY="  kv_tokens: $((KV_SEQS * CTX))   # KV_SEQS full sequences
  kv_dtype: ${KV_DTYPE:-f16}
  cache_policy: none
  swap_size: none"
else
    MEMORY="  workspace_size: ${WORKSPACE:-1200MiB}   # scratch + a KV pool for MAXC full sequences
  swap_size: none"
fi
cat > "$T/engine.yaml" <<YAML
model: $MODEL
threads: $THREADS
context: $CTX
execution:
  max_batch_size: $MAXC
  max_step_tokens: 512
  preempt_mode: recompute
memory:
$MEMORY
verbose: true
YAML
OUT=${RESULTS:-$T/results}
VER=${RESULTS:+$RESULTS.verify}; VER=${VER:-$T/verify}
[ -n "${APPEND:-}" ] || { : > "$OUT"; : > "$VER"; }

wait_ready() { # URL
    for _ in $(seq 1 600); do curl -sf "$1/health" >/dev/null 2>&1 && return 0; sleep 0.2; done
    echo "server did not come up" >&2; return 1
}

metric() { # URL NAME: the sum of a metric's values (0 when absent)
    { curl -sf "$1/metrics" || true; } | awk -v n="$2" 'index($1, n) == 1 {s += $2} END {print s + 0}'
}

run_engine() { # ENGINE ROUND
    local port=${PORT:-18080} url extra=""
    url=http://127.0.0.1:$port
    if [ "$1" = xllm ]; then
        "$XLLM" serve --config "$T/engine.yaml" --port $port --max-queue 4096 --max-connections-per-ip 4096 \
            -t "$THREADS" > "$T/log" 2>&1 &
    else
        "$LLAMA_SERVER" -m "$MODEL" --port $port -t "$THREADS" -tb "$THREADS" -c $((CTX * LLAMA_NP)) -np "$LLAMA_NP" \
            -cb --no-webui > "$T/log" 2>&1 &
        extra=--no-cache-prompt
    fi
    PID=$!
    wait_ready "$url"
    grep -m1 "^xllm engine:" "$T/log" >&2 || true
    node "$SRC/bench/server_load.mjs" --url "$url" --model "$NAME" --vocab "${VOCAB:-32000}" -c 1 -k 1 -p "$P" -n 8 --seed 99 > /dev/null
    for c in $CONC; do
        local k=$K; [ "$c" -ge 64 ] && k=1
        echo "[round $2] $1, $c clients x $k requests, load $(cut -d' ' -f1 /proc/loadavg)" >&2
        local pre0 load0 line
        pre0=$(metric "$url" xllm_preemptions)
        load0=$(cut -d' ' -f1 /proc/loadavg)
        if ! line=$(node "$SRC/bench/server_load.mjs" --url "$url" --model "$NAME" --vocab "${VOCAB:-32000}" -c "$c" -k "$k" -p "$P" -n "$N" \
                --seed "$2" --texts "$T/texts.$1.$2.$c.json" $extra); then
            echo "the load client failed against $1; the server's log ends:" >&2
            tail -n 30 "$T/log" >&2
            exit 1
        fi
        printf '%s %s %s\n' "$1" "$2" "${line%\}},\"preemptions\":$(( $(metric "$url" xllm_preemptions) - pre0 )),\"load\":[$load0,$(cut -d' ' -f1 /proc/loadavg)]}" >> "$OUT"
        if grep -q '"failures":[1-9]' <<< "$line"; then
            echo "failed requests against $1: $line; the server's log ends:" >&2
            tail -n 30 "$T/log" >&2
        fi
    done
    if [ "${VERIFY:-0}" -gt 0 ]; then # solo runs of V prompts spread over the largest level's
        local picks
        picks=$(python3 -c "import sys; m, v = int(sys.argv[1]), int(sys.argv[2]); print(','.join(str(i * m // v) for i in range(v)))" "$MAXC" "$VERIFY")
        echo "[round $2] $1, $VERIFY solo requests" >&2
        node "$SRC/bench/server_load.mjs" --url "$url" --model "$NAME" --vocab "${VOCAB:-32000}" -c 1 -p "$P" -n "$N" --seed "$2" \
            --pick "$picks" --of "$MAXC" --texts "$T/solo.$1.$2.json" $extra > /dev/null
        for c in $CONC; do
            python3 - "$T/solo.$1.$2.json" "$T/texts.$1.$2.$c.json" "$1" "$2" "$c" >> "$VER" <<'PY'
import json, sys
solo, conc = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
n = [i for i in solo if i in conc]
print(json.dumps({"engine": sys.argv[3], "round": int(sys.argv[4]), "clients": int(sys.argv[5]), "compared": len(n),
                  "differ": sum(solo[i] != conc[i] for i in n)}))
PY
        done
    fi
    kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
}

FIRST_ROUND=${FIRST_ROUND:-1}
for r in $(seq "$FIRST_ROUND" $((FIRST_ROUND + ROUNDS - 1))); do
    for e in ${ENGINES:-xllm llama-server}; do run_engine "$e" "$r"; done
done

touch "$VER"
python3 - "$OUT" "$THREADS" "$ROUNDS" "$P" "$N" "$(nproc)" "$VER" "$NAME" "${KV_SEQS:-}" "$LLAMA_NP" "$CTX" <<'PY'
import json, statistics, sys
path, threads, rounds, P, N, cpus, vpath, name, kv_seqs, np_, ctx = sys.argv[1:]
runs, rset = {}, set()
for line in open(path):
    eng, rnd, js = line.split(" ", 2)
    j = json.loads(js)
    runs.setdefault((eng, j["clients"]), []).append(j)
    rset.add(rnd)
rounds = len(rset)
def med(xs):
    return "%.1f (%.1f-%.1f)" % (statistics.median(xs), min(xs), max(xs))
ver = {}
for line in open(vpath):
    v = json.loads(line)
    a = ver.setdefault((v["engine"], v["clients"]), [0, 0])
    a[0] += v["differ"]; a[1] += v["compared"]
print("%s, %s threads (%s CPUs), %s-token prompts, %s generated tokens; median (min-max) over %s rounds" % (name, threads, cpus, P, N, rounds))
print("xllm: %s; llama-server: -np %s -c %d (%s tokens a slot)" % (
    "a KV pool of %s full sequences (kv_tokens %d, f16), preempt recompute" % (kv_seqs, int(kv_seqs) * int(ctx)) if kv_seqs else "the WORKSPACE pool",
    np_, int(np_) * int(ctx), ctx))
print("| clients | engine | tokens/s | TTFT p50 ms | TTFT p99 ms | failed / short (all rounds) | preemptions | differ from solo | load avg |")
print("|---|---|---|---|---|---|---|---|---|")
for c in sorted({c for _, c in runs}):
    for eng in ("xllm", "llama-server"):
        rs = runs.get((eng, c))
        if rs:
            v = ver.get((eng, c))
            print("| %d | %s | %s | %s | %s | %d / %d | %s | %s | %s |" % (c, eng, med([r["tok_s"] for r in rs]), med([r["ttft_p50_ms"] for r in rs]),
                  med([r["ttft_p99_ms"] for r in rs]), sum(r.get("failures", 0) for r in rs), sum(r.get("short", 0) for r in rs),
                  med([r["preemptions"] for r in rs]) if eng == "xllm" else "-", "%d/%d" % tuple(v) if v else "-",
                  "%.0f-%.0f" % (min(min(r["load"]) for r in rs), max(max(r["load"]) for r in rs))))
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
