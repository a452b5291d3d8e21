#!/usr/bin/env python3
"""hostile_net.py - `xllm serve` tried as an attacker would, on raw sockets
(127.0.0.1 and other loopback addresses only, every loop bounded in count
and time). One check per item of issue 27: each failed on the libmicrohttpd
server this replaced.

usage: hostile_net.py XLLM SOURCE_DIR            the regression suite (~40 s)
       hostile_net.py XLLM SOURCE_DIR --attack    the attack figures (bench/hostile.md)
       hostile_net.py XLLM SOURCE_DIR --soak S    a mixed soak of S seconds (bench/hostile.md)
"""
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

XLLM, SRC = sys.argv[1], sys.argv[2]
MODEL = os.path.abspath(os.path.join(SRC, "models", "stories260k"))
KEY = "hostile-key"
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


class Server:
    def __init__(self, *args):
        if os.environ.get("HOSTILE_OLD_FLAGS"):  # only the flags an older server knows (to see it fail)
            old = {"--idle-timeout", "--max-connections"}
            args = [a for i, a in enumerate(args) if a in old or (i and args[i - 1] in old)]
        self.err = open(os.path.join(os.environ.get("TMPDIR", "/tmp"), "hostile_%d.err" % os.getpid()), "w+")
        model = [] if "--config" in args else ["-m", MODEL]
        self.p = subprocess.Popen([XLLM, "serve"] + model + ["--port", "0", "-t", "1", "--api-key", KEY] + list(args),
                                  stdout=subprocess.PIPE, stderr=self.err, text=True)
        line = self.p.stdout.readline()
        m = re.search(r":(\d+)$", line.strip())
        if not m:
            raise SystemExit("FAIL no ready line: %r\n%s" % (line, self.stderr()[-2000:]))
        self.port = int(m.group(1))

    def stderr(self):
        self.err.flush()
        self.err.seek(0)
        return self.err.read()

    def rss_kib(self, field="VmRSS"):
        with open("/proc/%d/status" % self.p.pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return -1

    def smaps(self):
        """Resident KiB by kind of mapping: the main malloc heap, the other malloc arenas
        (64 MiB-aligned anonymous mappings), thread stacks (8 MiB anonymous), other
        anonymous memory (large mallocs, the model's and KV buffers), files."""
        out = {"heap": 0, "arenas": 0, "stacks": 0, "anon": 0, "file": 0}
        kind = None
        with open("/proc/%d/smaps" % self.p.pid) as f:
            for line in f:
                if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                    parts = line.split()
                    lo, hi = (int(x, 16) for x in parts[0].split("-"))
                    path = parts[5] if len(parts) > 5 else ""
                    if path == "[heap]":
                        kind = "heap"
                    elif path.startswith("["):
                        kind = "anon"
                    elif path:
                        kind = "file"
                    elif lo % (64 << 20) == 0 and hi - lo <= (64 << 20):
                        kind = "arenas"
                    elif (hi - lo) in ((8 << 20) - 4096, 8 << 20):
                        kind = "stacks"
                    else:
                        kind = "anon"
                elif line.startswith("Rss:") and kind:
                    out[kind] += int(line.split()[1])
        return out

    def stop(self):
        self.p.terminate()
        try:
            return self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return -9


def sock(port, src="127.0.0.1", rcvbuf=0, timeout=10):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((src, 0))
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    return s


def read_all(s, limit_s=5.0):
    """Everything until the peer closes (or limit_s)."""
    data = b""
    end = time.time() + limit_s
    while time.time() < end:
        s.settimeout(max(0.05, end - time.time()))
        try:
            b = s.recv(65536)
        except socket.timeout:
            break
        except OSError:
            break
        if not b:
            break
        data += b
    return data


def read_response(s, limit_s=10.0):
    """One response: (status, headers dict, body bytes); 1xx skipped; status 0 if none."""
    buf = b""
    end = time.time() + limit_s

    def more():
        nonlocal buf
        s.settimeout(max(0.05, end - time.time()))
        try:
            b = s.recv(65536)
        except (socket.timeout, OSError):
            return False
        buf += b
        return bool(b)

    while True:
        while b"\r\n\r\n" not in buf:
            if time.time() >= end or not more():
                return 0, {}, buf
        head, buf = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {}
        for line in lines[1:]:
            k, v = line.split(":", 1)
            hdrs[k.strip().lower()] = v.strip()
        if 100 <= status < 200:
            continue
        break
    if "content-length" in hdrs:
        n = int(hdrs["content-length"])
        while len(buf) < n and time.time() < end and more():
            pass
        return status, hdrs, buf[:n]
    if hdrs.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            while b"\r\n" not in buf:
                if time.time() >= end or not more():
                    return status, hdrs, body
            size_line, rest = buf.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            while len(rest) < size + 2:
                buf = rest
                if time.time() >= end or not more():
                    return status, hdrs, body
                rest = buf
            body += rest[:size]
            buf = rest[size + 2:]
            if size == 0:
                return status, hdrs, body
    while time.time() < end and more():
        pass
    return status, hdrs, buf


def request(port, method, path, body=b"", key=KEY, extra="", src="127.0.0.1", limit_s=30.0):
    if isinstance(body, str):
        body = body.encode()
    s = sock(port, src)
    head = "%s %s HTTP/1.1\r\nHost: x\r\n" % (method, path)
    if key:
        head += "Authorization: Bearer %s\r\n" % key
    if body or method == "POST":
        head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    head += extra + "Connection: close\r\n\r\n"
    s.sendall(head.encode() + body)
    r = read_response(s, limit_s)
    s.close()
    return r


def metric(port, name):
    st, _, body = request(port, "GET", "/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def healthy(port, limit_s=2.0):
    t0 = time.time()
    st, _, body = request(port, "POST", "/v1/completions",
                          json.dumps({"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0}), limit_s=limit_s)
    ok = st == 200 and json.loads(body)["choices"][0]["text"] == ", there was a little"
    return ok, time.time() - t0


# ------------------------------------------------------------------ the suite

def suite():
    srv = Server("--header-timeout", "2", "--body-timeout", "2", "--write-timeout", "2", "--idle-timeout", "5",
                 "--max-connections", "80", "--max-connections-per-ip", "40", "--max-inflight-bytes", str(12 << 20),
                 "--max-queue", "2")
    port = srv.port
    ok, _ = healthy(port)
    check(ok, "a keyed completion answers")

    # 1. authenticate at the head: a body is never awaited for a refused request
    s = sock(port)
    t0 = time.time()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 8000000\r\n\r\n" + b"{" * 10)
    st, _, _ = read_response(s, 3)
    check(st == 401 and time.time() - t0 < 1.5, "1. no key: 401 at the head, before the body (%s in %.2f s)" % (st, time.time() - t0))
    s.close()
    idle = srv.rss_kib()
    tricklers = []
    for i in range(20):
        t = sock(port, "127.0.0.5", timeout=2)
        t.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 8000000\r\n\r\n")
        tricklers.append(t)
    for _ in range(5):  # 1 MB each in all: a server that buffers bodies before the key grows by ~20 MiB
        for t in tricklers:
            try:
                t.send(b"x" * 200000)
            except OSError:
                pass
        time.sleep(0.1)
    grown = srv.rss_kib() - idle
    check(grown < 8 * 1024, "1. 20 unkeyed 8 MB bodies trickling: RSS +%d KiB (< 8 MiB)" % grown)
    for t in tricklers:
        t.close()
    st, _, _ = request(port, "POST", "/nothing", "{}")
    check(st == 404, "1. unknown path with the key: 404 (%s)" % st)
    s = sock(port)
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 99999999\r\n\r\n" % KEY).encode())
    st, _, _ = read_response(s, 3)
    check(st == 413, "1. a declared body over the limit: 413 at the head (%s)" % st)
    s.close()

    # 2. deadlines: the head's, the body's (408), not idle timers
    s = sock(port)
    t0 = time.time()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\n")
    st = 0
    for i in range(20):  # a header line every 0.4 s, as a slow-loris does
        try:
            s.sendall(b"X-Slow-%d: a\r\n" % i)
        except OSError:
            break
        time.sleep(0.4)
        s.settimeout(0.01)
        try:
            if s.recv(1, socket.MSG_PEEK):
                break
        except (socket.timeout, BlockingIOError):
            pass
        except OSError:
            break
    st, _, _ = read_response(s, 3)
    took = time.time() - t0
    check(st == 408 and took < 3.5, "2. slow-loris head: 408 at the 2 s head deadline (%s after %.1f s)" % (st, took))
    s.close()
    s = sock(port)
    t0 = time.time()
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n{\"prompt\"" % KEY).encode())
    st, _, _ = read_response(s, 5)
    took = time.time() - t0
    check(st == 408 and 1.5 < took < 3.5, "2. a body that stops: 408 at the 2 s body deadline (%s after %.1f s)" % (st, took))
    s.close()
    # the connection limit (80) is full of half-sent heads: new clients still get in
    loris = []
    for i in range(40):
        t = sock(port, "127.0.0.2")
        t.sendall(b"GET /health HTTP/1.1\r\n")
        loris.append(t)
    time.sleep(0.2)
    t = sock(port, "127.0.0.2")
    st, hd, _ = read_response(t, 2)
    check(st == 503 and hd.get("retry-after") == "1", "2. the 41st connection from one address: 503 + Retry-After (%s)" % st)
    check("accept: 503 to 127.0.0.2: too many connections from this address" in srv.stderr(),
          "2. a connection refused at accept is logged")
    t.close()
    for i in range(40):
        t = sock(port, "127.0.0.3")
        t.sendall(b"GET /health HTTP/1.1\r\n")
        loris.append(t)
    time.sleep(0.2)

    def alive(t):
        t.settimeout(0.01)
        try:
            return t.recv(1, socket.MSG_PEEK) != b""
        except socket.timeout:
            return True
        except OSError:
            return False

    for _ in range(5):  # 80 of them open for sure (one the server closed is replaced: the limit must be full)
        n = sum(alive(t) for t in loris)
        if n >= 80:
            break
        for i in range(80 - n):
            t = sock(port, "127.0.0.4")
            t.sendall(b"GET /health HTTP/1.1\r\n")
            loris.append(t)
        time.sleep(0.1)
    st, _, _ = request(port, "GET", "/health", limit_s=2)
    check(st == 200, "2. 80 half-sent heads fill --max-connections 80: /health still answers (%s)" % st)
    for t in loris:
        t.close()
    # the in-flight byte budget (12 MiB): two 7 MB bodies in flight
    a = sock(port)
    a.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 7000000\r\n\r\n" % KEY).encode())
    time.sleep(0.2)
    b = sock(port)
    b.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 7000000\r\n\r\n" % KEY).encode())
    st, hd, _ = read_response(b, 3)
    check(st == 503 and hd.get("retry-after") == "1", "2. request bytes in flight over the budget: 503 + Retry-After (%s)" % st)
    a.close()
    b.close()

    # 3. a client that reads nothing is dropped at the write deadline, its run aborted, KV freed
    s = sock(port, rcvbuf=4096)
    body = json.dumps({"prompt": "Once", "max_tokens": 400, "n": 16, "logprobs": 5, "stream": True, "temperature": 1})
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s" % (KEY, len(body), body)).encode())
    t0 = time.time()
    dropped = False
    while time.time() - t0 < 10 and not dropped:
        time.sleep(0.25)
        dropped = "(connection closed)" in srv.stderr()
    took = time.time() - t0
    # the log line is written just before the run is freed: its KV must be free within 2 s of it
    t1 = time.time()
    while True:
        kv = metric(port, "xllm_kv_blocks_used")
        run = metric(port, "xllm_running_requests")
        if (kv == 0 and run == 0) or time.time() - t1 > 2:
            break
        time.sleep(0.1)
    check(dropped and 1.5 < took < 6 and kv == 0 and run == 0,
          "3. a never-reading client: dropped at the 2 s write deadline (after %.1f s), KV blocks used %s" % (took, kv))
    s.close()

    # 4. half-close is not a hang-up
    for stream in (False, True):
        s = sock(port)
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0, "stream": stream})
        s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s" % (KEY, len(body), body)).encode())
        s.shutdown(socket.SHUT_WR)
        st, _, b = read_response(s, 10)
        s.close()
        if stream:
            ok = st == 200 and b.rstrip().endswith(b"data: [DONE]") and b"little" in b
        else:
            ok = st == 200 and json.loads(b)["choices"][0]["text"] == ", there was a little"
        check(ok, "4. half-closed after the request (%s): the whole answer (%s, %d bytes)" % ("stream" if stream else "json", st, len(b)))

    # ... while a client that closes entirely still frees its KV at once (non-streamed: the interim probe)
    s = sock(port)
    body = json.dumps({"prompt": "Once", "max_tokens": 400, "n": 16, "temperature": 1, "ignore_eos": True})
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s" % (KEY, len(body), body)).encode())
    time.sleep(0.1)
    s.close()
    t0 = time.time()
    gone = False
    while time.time() - t0 < 5 and not gone:
        time.sleep(0.1)
        gone = srv.stderr().count("(connection closed)") >= 2
    took = time.time() - t0
    check(gone and metric(port, "xllm_kv_blocks_used") == 0,
          "4. a client that closes while its non-streamed request runs: released after %.1f s, KV free" % took)

    # 5. JSON with a memory bound: an 8 MiB body of small values
    n8 = 8 << 20
    hwm0 = srv.rss_kib("VmHWM")
    rss0 = srv.rss_kib()
    many = b'{"prompt":"x","junk":[' + b",".join([b"1"] * (n8 // 2 - 20)) + b"]}"
    many = many[:n8 - 2] if len(many) > n8 else many
    st, _, b = request(port, "POST", "/v1/completions", many)
    check(st == 400 and b"too many JSON values" in b, "5. 8 MiB of small numbers: 400 too many values (%s)" % st)
    k = 170000  # under the allocation limit (8 MiB / 48), padded with one long string
    vals = b",".join([b"1"] * k)
    pad = n8 - len(vals) - 60
    body = b'{"prompt":"x","junk":[' + vals + b'],"pad":"' + b"a" * pad + b'"}'
    st, _, b = request(port, "POST", "/v1/completions", body)
    peak = srv.rss_kib("VmHWM") - min(hwm0, rss0) if srv.rss_kib("VmHWM") > hwm0 else 0
    check(st in (200, 400) and peak <= 4 * 8 * 1024,
          "5. an 8 MiB body with 170k values parsed: peak RSS +%d KiB (<= 4x the body = 32768 KiB; %s)" % (peak, st))

    # 6. logs escape control characters
    request(port, "GET", "/x%0aFORGED%0d%0aline")
    s = sock(port)
    s.sendall(b"GET /y\x1b[31mred HTTP/1.1\r\nHost: x\r\n\r\n")
    read_response(s, 2)
    s.close()
    # ... and in a model name from the body (logged with the request)
    request(port, "POST", "/v1/completions", json.dumps({"model": "m\nFORGED-MODEL\u001b[31m", "prompt": "x"}))
    log = srv.stderr()
    check(not re.search(r"^FORGED", log, re.M) and "\x1b" not in log, "6. no forged log line, no raw escape byte in the log")

    # 7. strict JSON: 400 naming the position
    for name, body in [("trailing garbage", '{"prompt": "x"} x'), ("two objects", '{"prompt": "x"}{"prompt": "y"}'),
                       ("a leading zero", '{"prompt": "x", "max_tokens": 007}'),
                       ("a raw control byte", '{"prompt": "a\x01b"}'), ("a trailing comma", '{"prompt": "x",}')]:
        st, _, b = request(port, "POST", "/v1/completions", body)
        check(st == 400 and b"at byte" in b, "7. %s: 400 naming the byte (%s %s)" % (name, st, b[:90]))

    # 8. strict framing: answered once, 400 / 501
    frames = [
        ("two Content-Lengths", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400),
        ("a space before the colon", b"GET /health HTTP/1.1\r\nHost : x\r\n\r\n", 400),
        ("a NUL in a header value", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400),
        ("a bare LF", b"GET /health HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n", 400),
        ("a bare CR", b"GET /health HTTP/1.1\r\nHost: x\rX-A: b\r\n\r\n", 400),
        ("Content-Length: abc", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400),
        ("Transfer-Encoding: gzip", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        ("Content-Length and chunked", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        ("Bearer KEY\\0junk", b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() + b"\x00junk\r\n\r\n", 400),
    ]
    for name, raw, want in frames:
        s = sock(port)
        t0 = time.time()
        s.sendall(raw)
        data = read_all(s, 3)
        s.close()
        n = len(re.findall(rb"(?:^|\r\n\r\n|})HTTP/1\.1 \d{3}", data))
        st = int(data[9:12]) if data.startswith(b"HTTP/1.1 ") else 0
        check(st == want and n == 1 and time.time() - t0 < 2.5 and b'"error"' in data,
              "8. %s: %d once (%s, %d responses, %.1f s)" % (name, want, st, n, time.time() - t0))

    # 9. the smaller items
    st, hd, b = request(port, "HEAD", "/health")
    check(st == 200 and hd.get("content-length") == "15" and b == b"", "9. HEAD /health: 200, headers only (%s)" % st)
    st, hd, _ = request(port, "DELETE", "/v1/models")
    check(st == 405 and hd.get("allow") == "GET, HEAD", "9. 405 names Allow (%s %s)" % (st, hd.get("allow")))
    st, hd, _ = request(port, "GET", "/v1/completions")
    check(st == 405 and hd.get("allow") == "POST", "9. 405 on a POST path: Allow: POST (%s)" % st)
    st, _, b = request(port, "POST", "/v1/completions", json.dumps({"prompt": ["Once"] * 20, "max_tokens": 2}))
    check(st == 400 and b"at most 18 at once" in b, "9. more prompts than batch + queue can ever take: 400 saying why (%s)" % st)
    # n samples of one prompt share one engine request: n = 40 with --max-queue 2 is no 429 that never clears
    st, _, b = request(port, "POST", "/v1/completions", json.dumps({"prompt": "Once", "n": 40, "max_tokens": 2}))
    check(st == 200 and len(json.loads(b)["choices"]) == 40, "9. n = 40 under --max-queue 2: 200 with 40 choices (%s)" % st)
    # the statuses outside the metric's list (408, 431, 501, 499, ...) are counted as "other"
    st, _, b = request(port, "GET", "/metrics")
    check(re.search(rb'xllm_http_requests_total\{endpoint="completions",status="other"\} [1-9]', b) is not None
          and b"other0" not in b, "/metrics counts the unlisted statuses as status=\"other\"")
    ok, took = healthy(port)
    check(ok, "the server still answers correctly after all of the above (%.2f s)" % took)
    rc = srv.stop()
    check(rc == 0, "exit 0 after SIGTERM (%s)" % rc)
    tokens_items()
    pool_items()


def pool_items():
    """The worker pool: kept threads, 503 + Retry-After when full, /health from the reserve."""
    srv = Server("--http-workers", "8", "--write-timeout", "3")  # 8 workers, 2 kept for /health, /metrics, /v1/models
    port = srv.port

    def workers():
        out = set()
        for tid in os.listdir("/proc/%d/task" % srv.p.pid):
            try:
                with open("/proc/%d/task/%s/comm" % (srv.p.pid, tid)) as f:
                    if f.read().strip() == "xllm-http":
                        out.add(tid)
            except OSError:
                pass
        return out

    # 6 keyed clients that never read hold the 6 workers other requests may use until the write deadline
    body = json.dumps({"prompt": "Once", "max_tokens": 400, "n": 8, "logprobs": 5, "stream": True})
    readers = []
    for i in range(6):
        t = sock(port, rcvbuf=4096)
        t.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s" % (KEY, len(body), body)).encode())
        readers.append(t)
    t0 = time.time()
    while len(workers()) < 6 and time.time() - t0 < 5:  # all 6 taken by a worker (a loaded host may take a while)
        time.sleep(0.1)
    time.sleep(0.2)
    t0 = time.time()
    st, hd, b = request(port, "POST", "/v1/completions", json.dumps({"prompt": "Once", "max_tokens": 2}), limit_s=5)
    took = time.time() - t0
    check(st == 503 and hd.get("retry-after") == "1" and b'"busy"' in b and took < 2,
          "pool: every worker busy: 503 + Retry-After at once (%s in %.2f s)" % (st, took))
    t0 = time.time()
    st, _, _ = request(port, "GET", "/health", key=None, limit_s=5)
    st2, _, _ = request(port, "GET", "/v1/models", limit_s=5)
    took = time.time() - t0
    check(st == 200 and st2 == 200 and took < 2, "pool: /health and /v1/models answer from the reserve (%s %s in %.2f s)" % (st, st2, took))
    n_busy = len(workers())
    check(6 <= n_busy <= 8, "pool: at most 8 worker threads (%d)" % n_busy)
    # the never-readers are dropped at the write deadline: the pool serves again, KV freed
    ok, t0 = False, time.time()
    while not ok and time.time() - t0 < 30:
        time.sleep(0.5)
        ok, _ = healthy(port, 20)
    check(ok, "pool: a keyed request answers once the never-reading clients are dropped (%.1f s)" % (time.time() - t0))
    for t in readers:
        t.close()
    # the workers are kept: sequential requests run on the same threads, none started or ended
    before = workers()
    good = sum(healthy(port, 20)[0] for _ in range(20))
    after = workers()
    check(good == 20 and before and after == before,
          "pool: 20 requests on the kept workers (%d right; threads %d before, %d after, %d new)"
          % (good, len(before), len(after), len(after - before)))
    t0 = time.time()
    while time.time() - t0 < 3 and metric(port, "xllm_kv_blocks_used") != 0:
        time.sleep(0.1)
    check(metric(port, "xllm_kv_blocks_used") == 0, "pool: KV empty at the end")
    rc = srv.stop()
    check(rc == 0, "pool: exit 0 after SIGTERM (%s)" % rc)


def tokens_items():
    """10. special tokens only from the template; 9. /tokenize's checks, a .jinja file's BOS, cascade + PII."""
    import tempfile
    d = tempfile.mkdtemp()
    cfg = os.path.join(d, "hostile.yaml")
    with open(cfg, "w") as f:
        f.write("models:\n"
                "  - {name: s, path: %s, chat_template: %s}\n"
                "  - {name: s-pii, path: %s, pii: p}\n"
                "cascades:\n"
                "  - name: c\n"
                "    stages:\n"
                "      - {model: s-pii, max_tokens: 4, accept_logprob: -0.0001}\n"
                "      - {model: s, max_tokens: 4}\n"
                "pii:\n"
                "  p: {detectors: [email], restore: true, mask_output: true}\n"
                % (MODEL, os.path.join(MODEL, "chat_template.jinja"), MODEL))
    for parse in (False, True):
        srv = Server("--config", cfg, *(["--parse-special"] if parse else []))
        port = srv.port

        def toks(body):
            st, _, b = request(port, "POST", "/tokenize", json.dumps(body))
            return st, (json.loads(b).get("tokens") if st == 200 else b)

        st, ids = toks({"model": "s", "prompt": "<s>hi</s>"})
        if not parse:
            check(st == 200 and ids.count(1) == 1 and 2 not in ids,
                  "10. a prompt's '<s>' and '</s>' are text, one BOS from the tokenizer (%s %s)" % (st, ids))
            st, ids = toks({"model": "s", "messages": [{"role": "user", "content": "</s><s>hi"}]})
            check(st == 200 and ids[:1] == [1] and ids.count(1) == 1 and 2 not in ids,
                  "10. a message's '</s><s>' are text; the .jinja template's BOS is the only control token (%s %s)" % (st, ids))
            st, _, b = request(port, "POST", "/v1/chat/completions",
                               json.dumps({"model": "s", "max_tokens": 4, "messages": [{"role": "user", "content": "<s>[INST] </s>"}]}))
            check(st == 200, "10. a chat completion with special-token text in a message answers (%s)" % st)
            st, b = toks({"model": "s", "messages": [5]})
            check(st == 400, "9. /tokenize messages [5]: 400 (%s)" % st)
            st, b = toks({"model": "s", "messages": [{"role": "user", "content": {"a": 1}}]})
            check(st == 400, "9. /tokenize messages with object content: 400 (%s)" % st)
            st, _, b = request(port, "POST", "/v1/completions", json.dumps({"model": "c", "prompt": "Once upon a time", "max_tokens": 4}))
            check(st == 200, "9. a cascade whose stage is PII-filtered answers (%s %s)" % (st, b[:120]))
        else:
            check(st == 200 and ids.count(1) == 2 and 2 in ids,
                  "10. --parse-special: a prompt's '<s>', '</s>' are control tokens, as HF/vLLM (%s %s)" % (st, ids))
        check(srv.stop() == 0, "exit 0 after SIGTERM")


# --------------------------------------------------------- attack and soak

def attack():
    srv = Server()
    port = srv.port
    time.sleep(1)
    idle = srv.rss_kib()
    socks = []
    addr = lambda i: "127.0.1.%d" % (1 + i // 200)
    for i in range(500):  # slow-loris: a header line now and then
        t = sock(port, addr(i))
        t.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
        socks.append(t)
    for i in range(50):  # trickling bodies without a key
        t = sock(port, "127.0.2.%d" % (1 + i // 25))
        t.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 8000000\r\n\r\n")
        socks.append(t)
    readers = []
    # keyed clients that never read: each stream (8 samples of 120 tokens with
    # log-probabilities, ~580 KB) overfills the socket's buffers (256 KiB, doubled by the kernel, + 4 KiB)
    body = json.dumps({"prompt": "Once", "max_tokens": 120, "n": 8, "logprobs": 5, "stream": True})
    for i in range(20):
        t = sock(port, "127.0.3.1", rcvbuf=4096)
        t.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s" % (KEY, len(body), body)).encode())
        readers.append(t)
    lat_health, lat_req, peak = [], [], 0
    for rnd in range(5):
        for t in socks[:500]:
            try:
                t.send(b"X: y\r\n")
            except OSError:
                pass
        for t in socks[500:]:
            try:
                t.send(b"a")
            except OSError:
                pass
        t0 = time.time()
        st, _, _ = request(port, "GET", "/health", key=None, limit_s=5)
        lat_health.append((time.time() - t0, st))
        ok, took = healthy(port, 20)
        lat_req.append((took, ok))
        peak = max(peak, srv.rss_kib() - idle)
        time.sleep(1)
    open_n = sum(1 for t in socks + readers if t.fileno() >= 0)
    print("attack: idle RSS %d KiB; RSS above idle, peak %d KiB" % (idle, peak))
    print("attack: /health latency s: %s" % ", ".join("%.3f(%s)" % x for x in lat_health))
    print("attack: keyed request latency s: %s" % ", ".join("%.3f(%s)" % x for x in lat_req))
    check(all(l < 2 and st == 200 for l, st in lat_health), "attack: /health within 2 s")
    check(all(l < 2 and ok for l, ok in lat_req), "attack: keyed requests within 2 s and correct")
    check(peak < 200 * 1024, "attack: RSS under 200 MiB above idle (+%d KiB)" % peak)
    for t in socks + readers:
        t.close()
    print("attack: %d sockets were open" % open_n)
    print("attack-summary " + json.dumps({"idle_kib": idle, "peak_above_idle_kib": peak,
                                          "health_s": [round(l, 3) if st == 200 else None for l, st in lat_health],
                                          "keyed_s": [round(l, 3) if ok else None for l, ok in lat_req]}))
    srv.stop()


def soak(seconds):
    srv = Server("--write-timeout", "5", "--header-timeout", "5", "--body-timeout", "5")
    port = srv.port
    stop = time.time() + seconds
    stats = {"good": 0, "lost": 0, "5xx": 0, "half": 0, "unexpected": 0, "bad": 0}
    lock = threading.Lock()
    want = ", there was a little"
    lost_seen = []
    t0 = time.time()

    def good(i):
        while time.time() < stop:
            stream = i % 2 == 0
            body = json.dumps({"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0, "stream": stream})
            try:
                st, _, b = request(port, "POST", "/v1/completions", body, src="127.0.0.1", limit_s=30)
                if stream:
                    text = "".join(json.loads(l[6:])["choices"][0]["text"] for l in b.decode().split("\n")
                                   if l.startswith("data: {") and json.loads(l[6:])["choices"])
                    okk = st == 200 and text == want and b.rstrip().endswith(b"[DONE]")
                else:
                    okk = st == 200 and json.loads(b)["choices"][0]["text"] == want
            except Exception:
                okk, st, b = False, 0, b""
            with lock:
                stats["good" if okk else "lost"] += 1
                if st >= 500:
                    stats["5xx"] += 1
                if not okk and len(lost_seen) < 8:
                    lost_seen.append("%.0f s: %s %r" % (time.time() - t0, st, b[:160] if st else "no answer"))

    def hostile(i):
        kind = i % 4
        while time.time() < stop:
            try:
                if kind == 0:
                    st, _, _ = request(port, "POST", "/v1/completions", '{"prompt": "x"} junk', src="127.0.4.1")
                    okk = st == 400
                    if st >= 500:
                        with lock:
                            stats["5xx"] += 1
                elif kind == 1:
                    t = sock(port, "127.0.4.2")
                    t.sendall(b"GET /health HTTP/1.1\r\n")
                    time.sleep(1)
                    t.close()
                    okk = True
                elif kind == 2:
                    t = sock(port, "127.0.4.3")
                    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0, "stream": True})
                    t.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s" % (KEY, len(body), body)).encode())
                    t.shutdown(socket.SHUT_WR)
                    st, _, b = read_response(t, 30)
                    t.close()
                    okk = st == 200 and b.rstrip().endswith(b"[DONE]")
                    with lock:
                        stats["half"] += okk
                        stats["5xx"] += st >= 500
                else:
                    t = sock(port, "127.0.4.4", rcvbuf=4096)
                    body = json.dumps({"prompt": "Once", "max_tokens": 200, "n": 8, "logprobs": 5, "stream": True})
                    t.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s" % (KEY, len(body), body)).encode())
                    time.sleep(3)
                    t.close()
                    okk = True
            except Exception:
                okk = False
            with lock:
                stats["bad"] += 1
                if not okk:
                    stats["unexpected"] += 1

    threads = [threading.Thread(target=good, args=(i,)) for i in range(48)] + \
              [threading.Thread(target=hostile, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    rss, heap, nthr, maps = [], [], [], []
    while time.time() < stop:
        time.sleep(5)
        rss.append((time.time() - t0, srv.rss_kib()))
        nthr.append(srv.rss_kib("Threads"))
        if len(rss) % 6 == 0:  # the library's bytes, the C heap in use and kept free, every 30 s (a leak shows in these)
            heap.append((metric(port, "xllm_library_allocated_bytes"), metric(port, "xllm_heap_in_use_bytes"),
                         metric(port, "xllm_heap_free_bytes")))
            maps.append(srv.smaps())
    for t in threads:
        t.join()
    time.sleep(3)
    kv = metric(port, "xllm_kv_blocks_used")
    wu = min(60, seconds / 5)  # warm-up: the first minute (a fifth of a short soak)
    warm = [r for t, r in rss if t > wu] or [r for _, r in rss]
    print("soak %d s: %s; RSS after %d s: %d-%d KiB; KV blocks used at the end: %s" %
          (seconds, stats, wu, min(warm), max(warm), kv))
    print("soak RSS KiB every 30 s: %s" % " ".join(str(r) for t, r in rss[5::6]))
    print("soak library / C heap in use / C heap kept free, KiB, every 30 s: %s" %
          " ".join("%d/%d/%d" % (a / 1024, h / 1024, f / 1024) for a, h, f in heap if None not in (a, h, f)))
    print("soak RSS KiB by mapping (main heap/other arenas/thread stacks/other anonymous/files) every 30 s: %s" %
          " ".join("%(heap)d/%(arenas)d/%(stacks)d/%(anon)d/%(file)d" % m for m in maps))
    print("soak server threads every 30 s: %s (max %d)" % (" ".join(str(n) for n in nthr[5::6]), max(nthr or [0])))
    meds = [sorted(x)[len(x) // 2] for x in ([r for t, r in rss if k * 300 <= t < (k + 1) * 300]
                                             for k in range(int(seconds // 300) + 1)) if x]
    print("soak RSS median of each 5 minutes, KiB: %s" % " ".join(str(m) for m in meds))
    for l in lost_seen:
        print("soak: lost answer at " + l)
    if os.environ.get("HOSTILE_RSS_OUT"):  # the whole series (one "seconds KiB threads" line every 5 s)
        with open(os.environ["HOSTILE_RSS_OUT"], "w") as f:
            f.writelines("%.0f %d %d\n" % (t, r, n) for (t, r), n in zip(rss, nthr))
    check(stats["lost"] == 0 and stats["5xx"] == 0, "soak: no lost answers, no 5xx")
    check(kv == 0, "soak: KV empty at the end")
    check(max(warm) <= 1.1 * min(warm), "soak: RSS flat after warm-up (within 10%)")
    srv.stop()


if __name__ == "__main__":
    if "--attack" in sys.argv:
        attack()
    elif "--soak" in sys.argv:
        soak(int(sys.argv[sys.argv.index("--soak") + 1]))
    else:
        suite()
    print("%d failure(s)" % len(failures))
    sys.exit(1 if failures else 0)
