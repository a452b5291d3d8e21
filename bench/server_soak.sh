#!/usr/bin/env bash
# server_soak.sh - D seconds (default 600) of C (32) concurrent clients with random
# aborts against `xllm serve` (bench/server_soak.mjs): zero 5xx, resident
# memory flat after warm-up, the KV pool back to empty at the end, and a clean
# exit at SIGTERM. Not in CI; its result is recorded in bench/README.md.
#   bench/server_soak.sh [BUILD_DIR]     environment: C=32 D=600 MODEL=models/stories260k THREADS=2
#        MAX_TOKENS=200 (each request's max_tokens is 1..MAX_TOKENS)  MAX_QUEUE=256 (--max-queue)
#        MAX_PER_IP=256 (--max-connections-per-ip: every client is 127.0.0.1, so above C)
#        BATCH, KV_TOKENS, CONTEXT, KV_DTYPE, PREEMPT: when BATCH is set, an engine config with
#        max_batch_size BATCH, context CONTEXT (default 256), a KV pool of KV_TOKENS positions
#        (memory.kv_tokens; default BATCH full contexts) in KV_DTYPE (f32), preempt_mode PREEMPT
#        (recompute), no swap pool. E.g. issue 28's 256 clients on a pool of 32 full sequences:
#        C=256 BATCH=256 CONTEXT=256 KV_TOKENS=8192 MAX_TOKENS=160 MAX_QUEUE=4096 MAX_PER_IP=4096 \
#          bench/server_soak.sh
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
XLLM=${1:-$SRC/build}/xllm
C=${C:-32}; D=${D:-600}; MODEL=${MODEL:-$SRC/models/stories260k}; THREADS=${THREADS:-2}
T=$(mktemp -d); PID=""
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; [ -n "${KEEP_LOG:-}" ] && cp "$T/err" "$KEEP_LOG"; rm -rf "$T"' EXIT
cat > "$T/server.yaml" <<YAML
models:
  - name: soak
    path: $MODEL
    chat_template: $SRC/tests/server/chat.jinja
YAML
if [ -n "${BATCH:-}" ]; then
    CONTEXT=${CONTEXT:-256}; KV_TOKENS=${KV_TOKENS:-$((BATCH * CONTEXT))}
    cat > "$T/engine.yaml" <<YAML
context: $CONTEXT
execution:
  max_batch_size: $BATCH
  preempt_mode: ${PREEMPT:-recompute}
memory:
  kv_tokens: $KV_TOKENS
  kv_dtype: ${KV_DTYPE:-f32}
  swap_size: none
verbose: true
YAML
    echo "    config: $T/engine.yaml" >> "$T/server.yaml"
fi
"$XLLM" serve --config "$T/server.yaml" --port 0 -t "$THREADS" --max-queue "${MAX_QUEUE:-256}" \
    --max-connections-per-ip "${MAX_PER_IP:-256}" > "$T/out" 2> "$T/err" &
PID=$!
for _ in $(seq 1 3000); do grep -q "listening on" "$T/out" 2>/dev/null && break; sleep 0.1; done
grep "^xllm engine:" "$T/err" || true
URL=$(sed -n 's/^xllm serve: listening on \(http:[^ ]*\)$/\1/p' "$T/out")
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
node "$SRC/bench/server_soak.mjs" --url "$URL" --pid "$PID" --model soak -c "$C" -d "$D" --max-tokens "${MAX_TOKENS:-200}"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
kill -TERM "$PID"; rc=0; wait "$PID" || rc=$?; PID=""
echo "exit status at SIGTERM: $rc"
