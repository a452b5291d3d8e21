#!/usr/bin/env bash
# longrope.sh - Phi-3 LongRoPE (rope_scaling "longrope" / "su"; GGUF rope_factors_short /
# rope_factors_long + rope.scaling.attn_factor): a Phi-3 128k-style checkpoint made from
# tests/data/archs/phi3 (gguf_to_hf.py, then longrope_hf.py: original context 256, 8 short and 8
# long factors, attention factor sqrt(1.5)) against tests/e2e/lib/phi3_reference.py, which computes
# the log-probabilities from HF's modeling formula in double precision (standard-library Python; no
# torch in CI). xLLM picks the factor set by the context it runs, as llama.cpp does: short when the
# context (max_context) is <= original_max_position_embeddings, long above (docs/ARCHITECTURE.md).
# Checks: the HF form, its `--to gguf` form (llama.cpp's tensors and keys) and its .xllm form each
# within 1e-4 of the reference (measured: 3e-6) with the long set (default context 4096) and, through
# the Python package, with the short one (max_context 256) and the long one at 257; the two sets
# differ by far more (so the choice is seen); GGUF == HF logits within 1e-5.
# usage: longrope.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2; BUILD=$3
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib/common.bash"
fails=0
LIB=$SRC/tests/e2e/lib
A=1,4501,13375,22249,31123,8256,17130,26004,3137,12011,20885,29759,6892,15766
B=1,4501,13375,22249,31123,8256,17130,26004,3137,12011,20885,29759,6892,15766,24640,1773,10647,19521,28395,5528,14402,23276,409,9283,18157,27031,4164,13038,21912,30786,7919,16793,25667,2800,11674,20548,29422,6555,15429,24303
python3 "$LIB/gguf_to_hf.py" "$SRC/tests/data/archs/phi3/model.gguf" "$T/hf" "$SRC/tests/data/tiny/llama" &&
    python3 "$LIB/longrope_hf.py" "$T/hf"
check $? "a Phi-3 LongRoPE HF checkpoint written"
"$XLLM" convert "$T/hf" --to gguf --dtype f16 -o "$T/longrope.gguf" > /dev/null 2> "$T/err"
check $? "convert --to gguf"
PYTHONPATH=$LIB python3 - "$T/longrope.gguf" <<'PY'
import math, struct, sys
from gguf_read import read_gguf
kv, t = read_gguf(sys.argv[1])
assert abs(kv["phi3.rope.scaling.attn_factor"] - math.sqrt(1.5)) < 1e-6, kv["phi3.rope.scaling.attn_factor"]
assert kv["phi3.rope.scaling.original_context_length"] == 256 and kv["phi3.context_length"] == 4096
for name, want in (("rope_factors_short.weight", [1 + i / 32 for i in range(8)]),
                   ("rope_factors_long.weight", [1 + 0.75 * i for i in range(8)])):
    ne, ty, raw = t[name]
    assert list(ne) == [8] and ty == 0 and list(struct.unpack("<8f", raw)) == want, (name, ne, ty)
print("   llama.cpp's keys and factor tensors")
PY
check $? "the GGUF holds llama.cpp's LongRoPE form (attn_factor, original_context_length, two factor tensors)"
"$XLLM" convert "$T/hf" -o "$T/lr.xllm" > /dev/null 2>> "$T/err"
check $? "convert to .xllm"
python3 "$LIB/phi3_reference.py" "$T/hf" long "$T/ref_long.f32" "$A" "$B" &&
    python3 "$LIB/phi3_reference.py" "$T/hf" short "$T/ref_short.f32" "$A" "$B"
check $? "the reference (HF's formula, double precision), short and long factor sets"
# log-probabilities of the last position of each prompt (CLI: the default context 4096 > 256: long)
for form in hf longrope.gguf lr.xllm; do
    rm -f "$T/$form.lp"
    for ids in $A $B; do
        "$XLLM" logits -m "$T/$form" --ids $ids --out "$T/o.f32" -t 2 > /dev/null 2>> "$T/err" && last_logprobs "$T/o.f32" "$T/$form.lp"
    done
    compare "$T/ref_long.f32" "$T/$form.lp" 1e-4
    check $? "$form (context 4096: long factors) == the reference within 1e-4"
done
python3 - "$T/ref_short.f32" "$T/ref_long.f32" <<'PY'
import struct, sys
a = open(sys.argv[1], "rb").read(); b = open(sys.argv[2], "rb").read()
d = max(abs(x - y) for x, y in zip(struct.unpack("<%df" % (len(a) // 4), a), struct.unpack("<%df" % (len(b) // 4), b)))
print("   short vs long: max |diff| = %.3g" % d)
assert d > 0.1
PY
check $? "the two factor sets give clearly different log-probabilities"
"$XLLM" logits -m "$T/hf" --ids $A --out "$T/h.f32" -t 2 > /dev/null 2>> "$T/err" &&
    "$XLLM" logits -m "$T/longrope.gguf" --ids $A --out "$T/g.f32" -t 2 > /dev/null 2>> "$T/err" &&
    compare "$T/h.f32" "$T/g.f32" 1e-5
check $? "GGUF form == HF form (every position) within 1e-5"
if [ -z "${XLLM_SANITIZED:-}" ]; then # the Python package (max_context) does not load an ASan library
    PYTHONPATH="$SRC/python" XLLM_LIBRARY="$BUILD/libxllm.so" python3 - "$T" "$A" "$B" <<'PY'
import math, struct, sys
from xllm import LLM
T, prompts = sys.argv[1], [[int(x) for x in p.split(",")] for p in sys.argv[2:]]
V = 32000
def rows(p):
    b = open(p, "rb").read()
    return [struct.unpack_from("<%df" % V, b, k * V * 4) for k in range(len(b) // (4 * V))]
ref = {"short": rows(T + "/ref_short.f32"), "long": rows(T + "/ref_long.f32")}
def lsm(z):
    m = max(z); l = m + math.log(math.fsum(math.exp(v - m) for v in z)); return [v - l for v in z]
worst = 0
for form in ("hf", "longrope.gguf", "lr.xllm"):
    for ctx, want in ((256, "short"), (257, "long"), (512, "long")):
        with LLM(T + "/" + form, max_context=ctx, n_threads=2) as llm:
            for k, ids in enumerate(prompts):
                d = max(abs(a - b) for a, b in zip(lsm(llm.logits(ids)), ref[want][k]))
                worst = max(worst, d)
                assert d <= 1e-4, (form, ctx, want, k, d)
print("   max |logprob - reference| = %.3g over 3 forms x contexts 256 (short), 257, 512 (long)" % worst)
PY
    check $? "max_context 256 takes the short factors, 257 and 512 the long ones (llama.cpp's rule), within 1e-4"
fi
[ $fails -eq 0 ] || cat "$T/err"
[ $fails -eq 0 ]
