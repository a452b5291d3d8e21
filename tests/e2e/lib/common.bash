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

# ids_of DIR [KEY]: a JSON id list from DIR/expected.json as "1,2,3".
ids_of() { python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1] + '/expected.json'))[sys.argv[2]])))" "$1" "${2:-input_ids}"; }
