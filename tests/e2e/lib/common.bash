# common.bash - helpers shared by the end-to-end scripts (sourced, not run:
# ctest runs tests/e2e/*.sh only). The caller sets T (a temporary directory)
# and fails=0, and ends with `[ $fails -eq 0 ]`.

# check STATUS NAME: record one pass/fail line.
check() { if [ "$1" = 0 ]; then echo "ok   $2"; else echo "FAIL $2"; fails=$((fails+1)); fi; }

# compare A.f32 B.f32 TOL: two little-endian float32 files of equal size, max |a-b| <= TOL.
compare() {
    python3 - "$1" "$2" "$3" <<'PY'
import struct, sys
a = open(sys.argv[1], "rb").read(); b = open(sys.argv[2], "rb").read()
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
x = struct.unpack("<%df" % (len(a) // 4), a); y = struct.unpack("<%df" % (len(b) // 4), b)
d = max(abs(p - q) for p, q in zip(x, y))
print("   max |diff| = %.3g (tolerance %s)" % (d, sys.argv[3]))
assert d <= float(sys.argv[3]), d
PY
}

# expect_fail NAME KEYWORD CMD...: exit status 1, KEYWORD in stderr (any case),
# no sanitizer report, within 60 s.
expect_fail() {
    local name=$1 key=$2; shift 2
    timeout 60 "$@" > "$T/out" 2> "$T/err"; local rc=$?
    if [ $rc -ne 1 ]; then echo "FAIL $name: exit status $rc (want 1)"; cat "$T/err"; fails=$((fails+1)); return; fi
    if ! grep -qi -- "$key" "$T/err"; then echo "FAIL $name: message lacks '$key':"; cat "$T/err"; fails=$((fails+1)); return; fi
    if grep -q "Sanitizer\|runtime error" "$T/err"; then echo "FAIL $name: sanitizer report"; cat "$T/err"; fails=$((fails+1)); return; fi
    echo "ok   $name: $(head -c 200 "$T/err" | head -1)"
}

# last_logprobs LOGITS.f32 OUT.f32: the log-softmax (summed in double) of the last row of LOGITS (an
# `xllm logits` output, 32000 float32 values a row), appended to OUT as 32000 float32 values.
last_logprobs() { python3 - "$1" "$2" <<'PY'
import math, struct, sys
b = open(sys.argv[1], "rb").read(); V = 32000; n = len(b) // 4 // V
z = struct.unpack_from("<%df" % V, b, (n - 1) * V * 4)
m = max(z); l = m + math.log(math.fsum(math.exp(v - m) for v in z))
open(sys.argv[2], "ab").write(struct.pack("<%df" % V, *[v - l for v in z]))
PY
}

# ids_of DIR [KEY]: a JSON id list from DIR/expected.json as "1,2,3".
ids_of() { python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1] + '/expected.json'))[sys.argv[2]])))" "$1" "${2:-input_ids}"; }

# The converted forms of an HF checkpoint, as the scripts that test one check them. The caller
# sets XLLM and LIB as well; $T/h.f32 holds the HF form's logits over the ids, $T/g.f32 the GGUF's.
# xllm_form_keeps HF OUT.xllm IDS: `xllm convert` HF to OUT.xllm, whose logits over IDS ($T/x.f32)
# are the HF form's within 1e-5.
xllm_form_keeps() {
    "$XLLM" convert "$1" -o "$2" > /dev/null 2>> "$T/err" &&
        "$XLLM" logits -m "$2" --ids "$3" --out "$T/x.f32" -t 2 > /dev/null 2>> "$T/err" &&
        compare "$T/h.f32" "$T/x.f32" 1e-5
}
# gguf_form_back HF OUT.gguf GGUF IDS TOL [KEY...]: `xllm convert --to gguf --dtype f16` HF to
# OUT.gguf, which holds GGUF's keys and tensors (gguf_compare.py; the KEYs not compared) and whose
# logits over IDS ($T/r.f32) are GGUF's within TOL.
gguf_form_back() {
    local hf=$1 out=$2 gguf=$3 ids=$4 tol=$5; shift 5
    "$XLLM" convert "$hf" --to gguf --dtype f16 -o "$out" > /dev/null 2>> "$T/err" &&
        python3 "$LIB/gguf_compare.py" "$gguf" "$out" "$@" &&
        "$XLLM" logits -m "$out" --ids "$ids" --out "$T/r.f32" -t 2 > /dev/null 2>> "$T/err" &&
        compare "$T/g.f32" "$T/r.f32" "$tol"
}
