#!/usr/bin/env bash
# server.sh - `xllm serve` against real clients on 127.0.0.1: curl here, then
# the official OpenAI npm client under node's test runner (tests/server/*.test.mjs:
# API, concurrency and disconnects, the malformed-request corpus, PII and
# cascades). Each test file starts its own server on a free port.
# usage: server.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
T=$(mktemp -d); PID=""
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; [ -f "$T/err" ] && tail -20 "$T/err"; exit 1; }

# --- curl
"$XLLM" serve -m "$SRC/models/stories260k" --port 0 --api-key k1 -t 1 > "$T/out" 2> "$T/err" &
PID=$!
for _ in $(seq 1 300); do grep -q "listening on" "$T/out" 2>/dev/null && break; sleep 0.1; done
URL=$(sed -n 's/^xllm serve: listening on \(http:[^ ]*\)$/\1/p' "$T/out")
[ -n "$URL" ] || fail "no ready line"
case "$URL" in http://127.0.0.1:*) ;; *) fail "not on 127.0.0.1 by default: $URL";; esac
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ] || fail "/health"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/models")" = 401 ] || fail "no key must be 401"
[ "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer k2' "$URL/v1/models")" = 401 ] || fail "wrong key must be 401"
curl -s -H 'Authorization: Bearer k1' "$URL/v1/models" | grep -q '"id":"stories260k"' || fail "/v1/models"
curl -sN -H 'Authorization: Bearer k1' "$URL/v1/completions" \
    -d '{"model":"stories260k","prompt":"Once upon a time","max_tokens":5,"temperature":0,"stream":true}' > "$T/sse" || fail "stream"
head -c 6 "$T/sse" | grep -q '^data: ' || fail "SSE framing"
tail -n 2 "$T/sse" | grep -q '^data: \[DONE\]$' || fail "no [DONE]"
text=$(grep '^data: {' "$T/sse" | sed 's/^data: //' | python3 -c 'import json,sys; print("".join(json.loads(l)["choices"][0]["text"] for l in sys.stdin if json.loads(l)["choices"]), end="")')
[ "$text" = ", there was a little" ] || fail "streamed text: '$text'"
code=$(curl -s -o "$T/e" -w '%{http_code}' -H 'Authorization: Bearer k1' "$URL/v1/chat/completions" -d '{"model":"stories260k","messages":[{"role":"user","content":"x"}]}')
[ "$code" = 400 ] && grep -q 'no chat template' "$T/e" || fail "chat without a template: $code $(cat "$T/e")"
kill -TERM "$PID"; wait "$PID"; rc=$?; PID=""
[ "$rc" = 0 ] || fail "exit status $rc after SIGTERM"
echo "curl: ok"

# --- the OpenAI client
cd "$SRC/tests/server" || exit 1
if [ ! -d node_modules/openai ]; then
    npm ci --no-audit --no-fund > "$T/npm" 2>&1 || { cat "$T/npm"; fail "npm ci (the openai package) failed"; }
fi
XLLM_BIN="$XLLM" node --test --test-concurrency=1 ./*.test.mjs || exit 1
echo "server: ok"
