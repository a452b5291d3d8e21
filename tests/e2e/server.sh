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
# stories260k ships a plain chat template (models/stories260k/chat_template.jinja)
code=$(curl -s -o "$T/e" -w '%{http_code}' -H 'Authorization: Bearer k1' "$URL/v1/chat/completions" -d '{"model":"stories260k","max_tokens":8,"messages":[{"role":"user","content":"x"}]}')
[ "$code" = 200 ] && grep -q '"object":"chat.completion"' "$T/e" || fail "chat with the bundled template: $code $(cat "$T/e")"
kill -TERM "$PID"; wait "$PID"; rc=$?; PID=""
[ "$rc" = 0 ] || fail "exit status $rc after SIGTERM"
echo "curl: ok"

# --- an engine config (no models: list): the model it names, served under its base name
"$XLLM" serve --config "$SRC/docs/engine.example.yaml" --port 0 -t 1 > "$T/out" 2> "$T/err" &
PID=$!
for _ in $(seq 1 300); do grep -q "listening on" "$T/out" 2>/dev/null && break; sleep 0.1; done
URL=$(sed -n 's/^xllm serve: listening on \(http:[^ ]*\)$/\1/p' "$T/out")
curl -s "$URL/v1/models" | grep -q '"id":"stories260k"' || fail "engine config: $(curl -s "$URL/v1/models")"
kill -TERM "$PID"; wait "$PID"; rc=$?; PID=""
[ "$rc" = 0 ] || fail "exit status $rc after SIGTERM (engine config)"

# --- bad configs and options: a clear error, exit 1
bad() { # EXPECTED_MESSAGE ARGS...
    local want=$1; shift
    "$XLLM" serve --port 0 "$@" > "$T/o" 2> "$T/e" < /dev/null; local rc=$?
    [ "$rc" = 1 ] && grep -q "$want" "$T/e" || fail "serve $*: rc $rc, $(cat "$T/e")"
}
printf 'models:\n  - name: a\n    path: %s/models/stories260k\n    bogus: 1\n' "$SRC" > "$T/c1.yaml"
bad "models\[0\]: unknown key 'bogus'" --config "$T/c1.yaml"
printf 'models: [{name: a, path: %s/models/stories260k}]\ncascades: [{name: c, stages: [{model: zz}]}]\n' "$SRC" > "$T/c2.yaml"
bad "cascades\[0\].stages\[0\]: 'model' must name a model" --config "$T/c2.yaml"
printf 'models: [{name: a, path: %s/models/stories260k, pii: p}]\npii: {p: {detectors: [ssn]}}\n' "$SRC" > "$T/c3.yaml"
bad "unknown detector 'ssn'" --config "$T/c3.yaml"
printf 'models: [{name: a, path: %s/models/stories260k}, {name: a, path: x}]\n' "$SRC" > "$T/c4.yaml"
bad "used twice" --config "$T/c4.yaml"
bad "no such model" -m "$T/nothing"
bad "give a model" --api-key x
bad "bad --host" -m "$SRC/models/stories260k" --host 1.2.3.4.5
echo "bad configs: ok"

# --- the OpenAI client
cd "$SRC/tests/server" || exit 1
if [ ! -d node_modules/openai ] || [ ! -d node_modules/ai ] || [ ! -d node_modules/@langchain/openai ]; then
    npm ci --no-audit --no-fund > "$T/npm" 2>&1 || { cat "$T/npm"; fail "npm ci (tests/server/package.json) failed"; }
fi
XLLM_BIN="$XLLM" node --test --test-concurrency=1 ./*.test.mjs || exit 1
echo "server: ok"
