#!/usr/bin/env bash
# eval.sh - `xllm eval`, the quality tool:
#  - stories260k against itself over the shipped held text (>= 20k tokens):
#    KLD exactly 0, top-1 agreement 1, a finite perplexity > 1, nothing on
#    stderr when stderr is not a terminal;
#  - perplexity, KLD and top-1 agreement recomputed independently in Python
#    (stdlib, float64 log-softmax) from `xllm logits --out` over the ids from
#    `xllm tokenize`, window by window as docs/QUALITY.md describes: one window,
#    several windows (--ctx 16), a reference that differs (an F16 copy of the
#    model) and a tokenizer that adds no BOS;
#  - bad input: exit status 1 and a clean "xllm: error:" message.
# usage: eval.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
M="$SRC/models/stories260k"
HELD="$SRC/tests/data/eval/stories_heldout.txt"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fails=0
check() { if [ "$1" = 0 ]; then echo "ok   $2"; else echo "FAIL $2"; fails=$((fails+1)); fi; }

# --- the held text, model against itself
"$XLLM" eval -m "$M" --text "$HELD" --ref "$M" --json > "$T/self.json" 2> "$T/self.err"
rc=$?
python3 - "$T/self.json" "$T/self.err" "$rc" <<'PY'
import json, math, sys
assert sys.argv[3] == "0", "exit status %s: %s" % (sys.argv[3], open(sys.argv[2]).read())
out = open(sys.argv[1]).read()
assert out.count("\n") == 1 and out.endswith("}\n"), "want exactly one JSON line: %r" % out
r = json.loads(out)
assert set(r) == {"tokens", "ppl", "kld_mean", "kld_max", "top1_agree"}, r
assert isinstance(r["tokens"], int) and r["tokens"] >= 20000, r
assert math.isfinite(r["ppl"]) and r["ppl"] > 1, r
assert abs(r["kld_mean"]) <= 1e-9 and abs(r["kld_max"]) <= 1e-9, r
assert r["top1_agree"] == 1, r
assert open(sys.argv[2]).read() == "", "stderr not empty (not a terminal): %r" % open(sys.argv[2]).read()
print("  ", out.strip())
PY
check $? "eval held text vs itself: tokens >= 20000, kld 0, top-1 1, finite ppl > 1"

# --- independent recomputation in Python
cat > "$T/ref.py" <<'PY'
# ref.py XLLM MODEL REF|- TEXT CTX EVAL_JSON: recompute eval's figures from
# `xllm tokenize` ids and `xllm logits --out` rows, and compare.
import json, math, os, struct, subprocess, sys
xllm, model, ref, textfile, ctx, got_path = sys.argv[1:7]
ref = None if ref == "-" else ref
text = open(textfile, encoding="utf-8", newline="").read()
tok = subprocess.run([xllm, "tokenize", "-m", model, "--jsonl", "-"], input=json.dumps({"text": text}) + "\n",
                     capture_output=True, text=True, check=True)
d = json.loads(tok.stdout)
sp, ns = d["ids"], d["ids_no_special"]
P = len(sp) - len(ns)
assert sp[P:] == ns, "special tokens only in front expected"
prefix = sp[:P]
W = int(ctx); C = W - P; first = 1 if P == 0 else 0
tmp = os.path.dirname(os.path.abspath(got_path))

def logits(m, ids):
    out = os.path.join(tmp, "l.f32")
    subprocess.run([xllm, "logits", "-m", m, "--ids", ",".join(map(str, ids)), "--out", out],
                   stdout=subprocess.DEVNULL, check=True)
    raw = open(out, "rb").read()
    V = len(raw) // 4 // len(ids)
    x = struct.unpack("<%df" % (len(raw) // 4), raw)
    return [x[i * V:(i + 1) * V] for i in range(len(ids))]

def log_softmax(z):
    mx = max(z)
    lse = mx + math.log(sum(math.exp(v - mx) for v in z))
    return [v - lse for v in z]

nll, kl, agree, windows = [], [], 0, 0
tgt = first
while tgt < len(ns):
    s = tgt - first
    end = min(s + C, len(ns))
    win = prefix + ns[s:end]
    assert len(win) <= W
    zm = logits(model, win)
    zr = logits(ref, win) if ref else None
    windows += 1
    for j in range(tgt, end):
        row = P + (j - s) - 1
        lq = log_softmax(zm[row])
        nll.append(-lq[ns[j]])
        if ref:
            lp = log_softmax(zr[row])
            kl.append(max(0.0, sum(math.exp(a) * (a - b) for a, b in zip(lp, lq))))
            agree += zr[row].index(max(zr[row])) == zm[row].index(max(zm[row]))
    tgt = end

got = json.load(open(got_path))
exp = {"tokens": len(nll), "ppl": math.exp(sum(nll) / len(nll))}
if ref:
    exp.update(kld_mean=sum(kl) / len(kl), kld_max=max(kl), top1_agree=agree / len(kl))
print("   windows %d, expected %s" % (windows, json.dumps(exp)))
print("   got                       %s" % json.dumps(got))
assert set(got) == set(exp), (got, exp)
assert got["tokens"] == exp["tokens"], (got, exp)
assert abs(got["ppl"] - exp["ppl"]) <= 1e-4 * exp["ppl"], ("ppl", got, exp)
if ref:
    for k in ("kld_mean", "kld_max"):
        assert abs(got[k] - exp[k]) <= 1e-4 * exp[k] + 1e-9, (k, got, exp)
    assert abs(got["top1_agree"] - exp["top1_agree"]) < 1e-9, ("top1_agree", got, exp)
PY

printf 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her dog, Max. One day, Max saw a big red ball and ran after it.\n' > "$T/short.txt"

"$XLLM" eval -m "$M" --text "$T/short.txt" --json > "$T/short.json" &&
    python3 "$T/ref.py" "$XLLM" "$M" - "$T/short.txt" 512 "$T/short.json"
check $? "ppl on a short text (one window) == Python from xllm logits (1e-4 rel)"

"$XLLM" eval -m "$M" --text "$T/short.txt" --ref "$M" --json > "$T/shortref.json" &&
python3 -c "
import json, sys
a = json.load(open('$T/short.json')); b = json.load(open('$T/shortref.json'))
assert set(a) == {'tokens', 'ppl'}, a
assert a['tokens'] == b['tokens'] and a['ppl'] == b['ppl'], (a, b)
"
check $? "eval without --ref: only tokens and ppl, the same figures as with it"

"$XLLM" eval -m "$M" --text "$T/short.txt" --ctx 16 --json > "$T/short16.json" &&
    python3 "$T/ref.py" "$XLLM" "$M" - "$T/short.txt" 16 "$T/short16.json"
check $? "ppl with --ctx 16 (windows of BOS + 15 tokens) == Python"

"$XLLM" eval -m "$M" --text "$T/short.txt" --ref "$M" -t 1 > "$T/human.txt"
grep -q "^perplexity   1.8097" "$T/human.txt" && grep -q "^top-1 agree  100.0000 %" "$T/human.txt" &&
    grep -q "^KLD mean     0.000000000" "$T/human.txt" && grep -q "62 tokens predicted" "$T/human.txt"
check $? "eval readable summary"

# an F16 copy of stories260k: a reference that differs a little
python3 - "$M" "$T/m16" <<'PY'
import json, os, shutil, struct, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst)
for fn in os.listdir(src):
    if fn.endswith(".json") and fn != "expected.json":
        shutil.copy(os.path.join(src, fn), dst)
raw = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); data = raw[8 + n:]
h.pop("__metadata__", None)
out, blobs, off = {}, [], 0
for k, v in h.items():
    a, b = v["data_offsets"]
    x = struct.unpack("<%df" % ((b - a) // 4), data[a:b])
    blob = struct.pack("<%de" % len(x), *x)
    out[k] = {"dtype": "F16", "shape": v["shape"], "data_offsets": [off, off + len(blob)]}
    off += len(blob); blobs.append(blob)
hb = json.dumps(out).encode(); hb += b" " * (-len(hb) % 8)
open(os.path.join(dst, "model.safetensors"), "wb").write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))
PY
"$XLLM" eval -m "$T/m16" --ref "$M" --text "$T/short.txt" --ctx 24 --json > "$T/f16.json" &&
    python3 "$T/ref.py" "$XLLM" "$T/m16" "$M" "$T/short.txt" 24 "$T/f16.json" &&
    python3 -c "
import json; r = json.load(open('$T/f16.json'))
assert 0 < r['kld_mean'] < 1e-3 and r['kld_mean'] <= r['kld_max'], r
"
check $? "F16 copy vs f32 reference: kld_mean, kld_max, top1_agree == Python, 0 < kld < 1e-3"

# a tokenizer that adds no BOS: windows overlap by one token, the first token is not predicted
rm -rf "$T/nobos"; cp -r "$M" "$T/nobos"; chmod -R u+w "$T/nobos"
python3 - "$T/nobos/tokenizer.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1])); t["post_processor"] = None
json.dump(t, open(sys.argv[1], "w"))
PY
"$XLLM" eval -m "$T/nobos" --text "$T/short.txt" --ctx 16 --json > "$T/nobos.json" &&
    python3 "$T/ref.py" "$XLLM" "$T/nobos" - "$T/short.txt" 16 "$T/nobos.json"
check $? "no-BOS tokenizer, --ctx 16 == Python"

# a progress bar on stderr when it is a terminal (script(1) gives it one); stdout stays one JSON object
if command -v script >/dev/null 2>&1; then
    script -qec "'$XLLM' eval -m '$M' --text '$T/short.txt' --ctx 16 --json > '$T/tty.json'" /dev/null > "$T/tty.err" 2>&1
    grep -q "5/5 windows" "$T/tty.err" && cmp -s "$T/tty.json" "$T/short16.json"
    check $? "progress bar on a terminal, JSON unchanged on stdout"
fi

# a model without a tokenizer borrows the reference's (same vocabulary)
rm -rf "$T/notok"; cp -r "$M" "$T/notok"; chmod -R u+w "$T/notok"; rm "$T/notok/tokenizer.json"
"$XLLM" eval -m "$T/notok" --ref "$M" --text "$T/short.txt" --json > "$T/notok.json" &&
    python3 -c "
import json; a = json.load(open('$T/notok.json')); b = json.load(open('$T/shortref.json'))
assert a == b, (a, b)
"
check $? "a model without tokenizer.json uses the reference's tokenizer"

# --- bad input
n=0; bad=0
expect_fail() {  # expect_fail NAME KEYWORD CMD...
    local name=$1 key=$2; shift 2
    n=$((n+1))
    timeout 120 "$@" >"$T/out" 2>"$T/err"; local rc=$?
    if [ $rc -ne 1 ]; then echo "FAIL $name: exit status $rc (want 1)"; cat "$T/err"; bad=$((bad+1)); return; fi
    if ! grep -q "^xllm: error: " "$T/err" || ! grep -qi -- "$key" "$T/err"; then
        echo "FAIL $name: message lacks 'xllm: error:' or '$key':"; cat "$T/err"; bad=$((bad+1)); return; fi
    if grep -q "Sanitizer\|runtime error" "$T/err"; then echo "FAIL $name: sanitizer report"; cat "$T/err"; bad=$((bad+1)); return; fi
    if [ -s "$T/out" ]; then echo "FAIL $name: wrote to stdout"; bad=$((bad+1)); return; fi
    echo "ok   $name: $(head -1 "$T/err")"
}
: > "$T/empty.txt"
printf 'a' > "$T/one.txt"
# a model whose vocabulary is 500, not 512 (embedding rows cut)
rm -rf "$T/v500"; cp -r "$M" "$T/v500"; chmod -R u+w "$T/v500"
python3 - "$T/v500" <<'PY'
import json, os, struct, sys
d = sys.argv[1]
c = json.load(open(os.path.join(d, "config.json"))); c["vocab_size"] = 500
json.dump(c, open(os.path.join(d, "config.json"), "w"))
p = os.path.join(d, "model.safetensors")
raw = open(p, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); data = raw[8 + n:]
h.pop("__metadata__", None)
out, blobs, off = {}, [], 0
for k, v in h.items():
    a, b = v["data_offsets"]
    blob, shape = data[a:b], v["shape"]
    if k == "model.embed_tokens.weight":
        shape = [500, shape[1]]; blob = blob[:500 * shape[1] * 4]
    out[k] = {"dtype": v["dtype"], "shape": shape, "data_offsets": [off, off + len(blob)]}
    off += len(blob); blobs.append(blob)
hb = json.dumps(out).encode(); hb += b" " * (-len(hb) % 8)
open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))
PY

expect_fail missing_text "no-such.txt" "$XLLM" eval -m "$M" --text "$T/no-such.txt"
expect_fail text_is_dir "cannot read" "$XLLM" eval -m "$M" --text "$T"
expect_fail empty_text "empty" "$XLLM" eval -m "$M" --text "$T/empty.txt"
expect_fail too_short_text "too short" "$XLLM" eval -m "$T/nobos" --text "$T/one.txt"
expect_fail vocab_mismatch "vocabularies differ" "$XLLM" eval -m "$M" --ref "$T/v500" --text "$T/short.txt"
expect_fail no_tokenizer "no tokenizer" "$XLLM" eval -m "$T/notok" --text "$T/short.txt"
expect_fail missing_model "no-such-model" "$XLLM" eval -m "$T/no-such-model" --text "$T/short.txt"
expect_fail missing_ref "no-such-ref" "$XLLM" eval -m "$M" --ref "$T/no-such-ref" --text "$T/short.txt"
expect_fail no_model "-m" "$XLLM" eval --text "$T/short.txt"
expect_fail no_text "--text" "$XLLM" eval -m "$M"
expect_fail ctx_too_big "context" "$XLLM" eval -m "$M" --text "$T/short.txt" --ctx 100000
expect_fail ctx_too_small "too small" "$XLLM" eval -m "$M" --text "$T/short.txt" --ctx 1
expect_fail ctx_not_a_number "--ctx" "$XLLM" eval -m "$M" --text "$T/short.txt" --ctx many
expect_fail value_missing "needs a value" "$XLLM" eval -m "$M" --text
expect_fail unknown_option "unknown option" "$XLLM" eval -m "$M" --text "$T/short.txt" --frobnicate
echo "$((n-bad))/$n bad-input cases handled"
fails=$((fails+bad))

[ $fails -eq 0 ]
