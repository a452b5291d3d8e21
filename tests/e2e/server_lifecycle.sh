#!/usr/bin/env bash
# server_lifecycle.sh - `xllm serve` before it is ready and while it stops:
#  - loading: the HTTP daemon listens before the models are loaded, so GET
#    /health answers 503 {"status":"loading"} and the API answers 503
#    "not_ready" until they are; then 200 and the ready line. The load is held
#    open deterministically: the config file is a FIFO the test writes later.
#  - shutdown: after SIGTERM, a request arriving on an already open
#    (keep-alive) connection, and one whose body was still uploading, are
#    answered 503 "not_ready" (not 400, not a reset); the server waits for
#    them and exits 0.
# usage: server_lifecycle.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib/common.bash"
fails=0

python3 - "$XLLM" "$SRC/models/stories260k" "$T" <<'PY'
import http.client, json, os, signal, socket, subprocess, sys, time
xllm, model, tmp = sys.argv[1:4]
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    fails += 0 if ok else 1

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def get(port, path, body=None, conn=None):
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST" if body is not None else "GET", path, body, {"Content-Type": "application/json"} if body else {})
    r = c.getresponse()
    return r.status, r.read().decode("utf-8", "replace")

# --- loading: the config is a FIFO; the server blocks reading it while /health answers
fifo = os.path.join(tmp, "serve.yaml")
os.mkfifo(fifo)
port = free_port()
p = subprocess.Popen([xllm, "serve", "--config", fifo, "--port", str(port), "-t", "1"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
status = None
for _ in range(300):
    try:
        status, body = get(port, "/health"); break
    except OSError:
        time.sleep(0.05)
check(status == 503 and json.loads(body) == {"status": "loading"}, "while loading: GET /health is 503 loading (%s %s)" % (status, body if status else ""))
st, body = get(port, "/v1/completions", json.dumps({"prompt": "Hi", "max_tokens": 2}))
check(st == 503 and json.loads(body)["error"]["code"] == "not_ready", "while loading: POST /v1/completions is 503 not_ready (%s)" % st)
st, body = get(port, "/v1/models")
check(st == 503, "while loading: GET /v1/models is 503 (%s)" % st)
with open(fifo, "w") as f:
    f.write("models:\n  - name: s\n    path: %s\n" % model)
line = p.stdout.readline()
check(line.startswith("xllm serve: listening on http://127.0.0.1:%d" % port), "the ready line after the load: %r" % line.strip())
st, body = get(port, "/health")
check(st == 200 and json.loads(body) == {"status": "ok"}, "loaded: GET /health is 200 (%s)" % st)
p.send_signal(signal.SIGTERM)
check(p.wait(timeout=30) == 0, "exit 0 after SIGTERM")

# --- shutdown: a keep-alive connection and a half-uploaded body
p = subprocess.Popen([xllm, "serve", "-m", model, "--port", "0", "-t", "1"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
port = int(p.stdout.readline().rsplit(":", 1)[1])
req = json.dumps({"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0})
keep = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
st, _ = get(port, "/v1/completions", req, conn=keep)
check(st == 200, "a request on a keep-alive connection before the signal: 200")
slow = socket.create_connection(("127.0.0.1", port))
head = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: %d\r\n\r\n" % len(req)).encode()
slow.sendall(head + req[:10].encode())
time.sleep(0.5)   # the server has the headers: a request in progress
p.send_signal(signal.SIGTERM)
time.sleep(0.5)   # the server is stopping and waits for the slow request
st, body = get(port, "/v1/completions", req, conn=keep)
code = json.loads(body).get("error", {}).get("code") if body.startswith("{") else None
check(st == 503 and code == "not_ready", "during shutdown: a new request on an open connection is 503 not_ready (%s %s)" % (st, body[:100]))
slow.sendall(req[10:].encode())
resp = b""
slow.settimeout(30)
while b"\r\n\r\n" not in resp:
    chunk = slow.recv(4096)
    if not chunk: break
    resp += chunk
check(resp.startswith(b"HTTP/1.1 503"), "during shutdown: a body that was still uploading is answered 503 (%r)" % resp[:40])
slow.close()
rc = p.wait(timeout=30)
err = p.stderr.read()
check(rc == 0 and "AddressSanitizer" not in err and "runtime error" not in err, "exit 0 after SIGTERM, nothing reported (%d)" % rc)
sys.exit(1 if fails else 0)
PY
[ $? = 0 ] || fails=1
[ $fails -eq 0 ]
