#!/usr/bin/env bash
# server_soak.sh - D seconds (default 600) of C (32) concurrent clients with random
# aborts against `xllm serve` (bench/server_soak.mjs): zero 5xx, resident
# memory flat after warm-up, the KV pool back to empty at the end, and a clean
# exit at SIGTERM. Not in CI; its result is recorded in bench/README.md.
#   bench/server_soak.sh [BUILD_DIR]     environment: C=32 D=600 MODEL=models/stories260k THREADS=2
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
XLLM=${1:-$SRC/build}/xllm
C=${C:-32}; D=${D:-600}; MODEL=${MODEL:-$SRC/models/stories260k}; THREADS=${THREADS:-2}
T=$(mktemp -d); PID=""
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$T"' EXIT
cat > "$T/server.yaml" <<YAML
models:
  - name: soak
    path: $MODEL
    chat_template: $SRC/tests/server/chat.jinja
YAML
"$XLLM" serve --config "$T/server.yaml" --port 0 -t "$THREADS" > "$T/out" 2> "$T/err" &
PID=$!
for _ in $(seq 1 300); do grep -q "listening on" "$T/out" 2>/dev/null && break; sleep 0.1; done
URL=$(sed -n 's/^xllm serve: listening on \(http:[^ ]*\)$/\1/p' "$T/out")
node "$SRC/bench/server_soak.mjs" --url "$URL" --pid "$PID" --model soak -c "$C" -d "$D"
kill -TERM "$PID"; rc=0; wait "$PID" || rc=$?; PID=""
echo "exit status at SIGTERM: $rc"
