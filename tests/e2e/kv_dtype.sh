#!/usr/bin/env bash
# kv_dtype.sh - the compressed KV cache end to end on the bundled model:
#  - quality: `xllm eval --kv-dtype q8|f16 --ref-kv-dtype f32` over the shipped
#    held-out text (>= 20k tokens): KL(f32 KV || q8 KV) mean below 0.002, f16's
#    far smaller (below a tenth of q8's), top-1 agreement near 1;
#  - run --kv-dtype: greedy text on q8 KV runs, and f32 is the default;
#  - bad input: an unknown kv_dtype is a clean "xllm: error:" and status 1;
#  - --arith llama (llama.cpp's arithmetic, with f16 KV) runs; an unknown --arith is refused.
# The quality bounds run in the release build only (as quality.sh's): the sanitizer build
# runs the rest. usage: kv_dtype.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
M="$SRC/models/stories260k"
HELD="$SRC/tests/data/eval/stories_heldout.txt"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fails=0
check() { if [ "$1" = 0 ]; then echo "ok   $2"; else echo "FAIL $2"; fails=$((fails+1)); fi; }

if [ -z "${XLLM_SANITIZED:-}" ]; then
for dt in q8 f16; do
    "$XLLM" eval -m "$M" --text "$HELD" --kv-dtype $dt --ref-kv-dtype f32 --json > "$T/$dt.json" 2> "$T/$dt.err"
    check $? "eval --kv-dtype $dt --ref-kv-dtype f32 runs"
done
python3 - "$T/q8.json" "$T/f16.json" <<'PY'
import json, math, sys
q8, f16 = (json.load(open(p)) for p in sys.argv[1:3])
for name, r in (("q8", q8), ("f16", f16)):
    print("   %-4s %s" % (name, json.dumps(r)))
    assert r["kv_dtype"] == name and r["ref_kv_dtype"] == "f32", r
    assert r["tokens"] >= 20000 and math.isfinite(r["kld_mean"]), r
assert 0 < q8["kld_mean"] < 0.002, "q8 KV: KL divergence %g, want < 0.002" % q8["kld_mean"]
assert f16["kld_mean"] < q8["kld_mean"] / 10, "f16 KV: KL %g not far below q8's %g" % (f16["kld_mean"], q8["kld_mean"])
assert q8["top1_agree"] > 0.97 and f16["top1_agree"] > 0.995, (q8, f16)
PY
check $? "KL vs f32 KV: q8 < 0.002, f16 < q8 / 10"
else
    echo "SKIP quality bounds in the sanitizer build"
fi

out=$("$XLLM" run -m "$M" -p "Once upon a time" -n 24 --temp 0 --kv-dtype q8 --quiet 2>&1)
rc=$?
[ $rc = 0 ] && [ -n "$out" ]
check $? "run --kv-dtype q8 generates text"

"$XLLM" run -m "$M" -p "Once upon a time" -n 4 --kv-dtype int3 > "$T/bad.out" 2> "$T/bad.err"
rc=$?
[ $rc = 1 ] && grep -q "^xllm: error: kv_dtype 'int3' is not f32, f16, q8 or auto" "$T/bad.err"
check $? "an unknown --kv-dtype: status 1, a clean error ($(head -c 120 "$T/bad.err"))"

# llama.cpp's arithmetic (--arith llama, with its f16 KV): runs; another name is refused
out=$("$XLLM" run -m "$M" -p "Once upon a time" -n 24 --temp 0 --kv-dtype f16 --arith llama --quiet 2>&1)
rc=$?
[ $rc = 0 ] && [ -n "$out" ]
check $? "run --arith llama --kv-dtype f16 generates text"
"$XLLM" run -m "$M" -p "Once upon a time" -n 4 --arith ggml > "$T/bad.out" 2> "$T/bad.err"
rc=$?
[ $rc = 1 ] && grep -q "^xllm: error: arithmetic 'ggml' is not xllm or llama" "$T/bad.err"
check $? "an unknown --arith: status 1, a clean error ($(head -c 120 "$T/bad.err"))"

exit $fails
