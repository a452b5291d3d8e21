#!/usr/bin/env python3
"""embed_load.py - /v1/embeddings throughput under concurrent clients.

usage: embed_load.py URL [URL2 ...] [--clients 8] [--requests 20] [--rounds 5] [--inputs 1]

Each round, for each server URL in turn (alternating), C client threads send
R requests each (every request --inputs short texts) and the requests/s of the
whole round is printed; at the end the median (min-max) per URL. Give two
servers (e.g. before and after a change, same model and threads) to compare.
"""
import json, statistics, sys, threading, time, urllib.request

args = sys.argv[1:]
opt = {"--clients": 8, "--requests": 20, "--rounds": 5, "--inputs": 1}
urls = []
i = 0
while i < len(args):
    if args[i] in opt:
        opt[args[i]] = int(args[i + 1]); i += 2
    else:
        urls.append(args[i].rstrip("/")); i += 1
TEXTS = ["Once upon a time", "The cat sat on the mat", "Lily and Ben went to the park", "Tom had a big red ball",
         "The sun was hot", "A little bird sang", "Mom made a cake", "The dog ran fast"]

def client(url, k, out):
    for r in range(opt["--requests"]):
        body = json.dumps({"input": [TEXTS[(k + r + j) % len(TEXTS)] for j in range(opt["--inputs"])],
                           "encoding_format": "base64"}).encode()
        req = urllib.request.Request(url + "/v1/embeddings", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req) as f:
            f.read()
    out.append(1)

res = {u: [] for u in urls}
for rnd in range(opt["--rounds"]):
    for u in urls:
        out = []
        ts = [threading.Thread(target=client, args=(u, k, out)) for k in range(opt["--clients"])]
        t0 = time.time()
        for t in ts: t.start()
        for t in ts: t.join()
        rps = opt["--clients"] * opt["--requests"] / (time.time() - t0)
        res[u].append(rps)
        print(f"round {rnd + 1} {u}: {rps:.1f} requests/s", flush=True)
for u in urls:
    v = res[u]
    print(f"{u}: median {statistics.median(v):.1f} requests/s ({min(v):.1f}-{max(v):.1f}) over {len(v)} rounds")
