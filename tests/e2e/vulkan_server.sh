#!/usr/bin/env bash
# vulkan_server.sh - `xllm serve` on the Vulkan backend (docs/VULKAN.md) against
# the server e2e's own clients (tests/server, the official OpenAI npm client):
#   - curl: `serve --backend vulkan` streams the CPU's greedy text;
#   - api.test.mjs whole (completions, chat, streaming, logprobs, n, stop
#     strings, errors, several models);
#   - concurrency.test.mjs's streams case (XLLM_TEST_STREAMS=16 simultaneous
#     streams, each equal to its solo run, 8 batch slots, load.yaml's 4 MiB
#     workspace) and its disconnect case (aborted, KV freed). The full-queue
#     case (64 x 400 tokens admitted) is left to the CPU run: minutes on lavapipe.
# Every server of the node tests runs on Vulkan through XLLM_BACKEND=vulkan
# (checked first: with no driver that environment makes serve fail).
# Budget: about 90 s on lavapipe on a loaded 2-core host. Skipped without a
# Vulkan device and under the sanitizers (lavapipe under ASan: Makefile ASAN_EXCLUDE).
# usage: vulkan_server.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$(realpath "$1"); SRC=$(realpath "$2")
M="$SRC/models/stories260k"
T=$(mktemp -d); PID=""
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; [ -f "$T/err" ] && tail -20 "$T/err"; exit 1; }
[ -n "${XLLM_SANITIZED:-}" ] && { echo "skipped under the sanitizers"; exit 0; }
if ! "$XLLM" info --devices | grep -q "^vulkan device 0:"; then
    echo "no Vulkan device here: skipped ($("$XLLM" info --devices | tail -1))"
    exit 0
fi
start=$(date +%s)

# --- the environment reaches every server the node tests start
XLLM_BACKEND=vulkan VK_ICD_FILENAMES=/nonexistent.json "$XLLM" serve --port 0 --config "$SRC/tests/server/load.yaml" \
    > /dev/null 2> "$T/err" < /dev/null
[ $? = 1 ] && grep -q "backend 'vulkan'" "$T/err" || fail "XLLM_BACKEND=vulkan did not reach serve --config"

# --- curl: --backend vulkan, the CPU's greedy text (tests/e2e/server.sh has it too)
XLLM_VULKAN_VALIDATE=1 "$XLLM" serve -m "$M" --backend vulkan --port 0 -t 1 > "$T/out" 2> "$T/err" &
PID=$!
for _ in $(seq 1 300); do grep -q "listening on" "$T/out" 2>/dev/null && break; sleep 0.1; done
URL=$(sed -n 's/^xllm serve: listening on \(http:[^ ]*\)$/\1/p' "$T/out")
[ -n "$URL" ] || fail "no ready line"
curl -sN "$URL/v1/completions" \
    -d '{"model":"stories260k","prompt":"Once upon a time","max_tokens":5,"temperature":0,"stream":true}' > "$T/sse" || fail "stream"
text=$(grep '^data: {' "$T/sse" | sed 's/^data: //' | python3 -c 'import json,sys; print("".join(json.loads(l)["choices"][0]["text"] for l in sys.stdin if json.loads(l)["choices"]), end="")')
[ "$text" = ", there was a little" ] || fail "streamed text on vulkan: '$text'"
kill -TERM "$PID"; wait "$PID"; rc=$?; PID=""
[ "$rc" = 0 ] || fail "exit status $rc after SIGTERM"
grep -q "validation" "$T/err" && fail "Vulkan validation messages: $(grep -m3 validation "$T/err")"
echo "curl on vulkan: ok"

# --- the OpenAI client
cd "$SRC/tests/server" || exit 1
if [ ! -d node_modules/openai ] || [ ! -d node_modules/ai ] || [ ! -d node_modules/@langchain/openai ]; then
    npm ci --no-audit --no-fund > "$T/npm" 2>&1 || { cat "$T/npm"; fail "npm ci (tests/server/package.json) failed"; }
fi
export XLLM_BACKEND=vulkan XLLM_BIN="$XLLM" XLLM_TEST_STREAMS=16
node --test --test-concurrency=1 ./api.test.mjs || fail "api.test.mjs on vulkan"
node --test --test-concurrency=1 --test-name-pattern='simultaneous streams|disconnects' ./concurrency.test.mjs \
    || fail "concurrency.test.mjs on vulkan"
echo "vulkan_server: ok in $(( $(date +%s) - start )) s"
