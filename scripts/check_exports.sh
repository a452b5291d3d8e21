#!/usr/bin/env bash
# check_exports.sh - libxllm.so's public face: the symbols it exports must be
# exactly the functions include/xllm.h declares, each declaration marked
# XLLM_API (the library is built with hidden visibility). Every difference is
# named, with what to do about it.
# usage: check_exports.sh LIBXLLM.so INCLUDE/xllm.h
set -u
LIB=$1; HDR=$2
command -v nm > /dev/null || { echo "FAIL: nm (binutils) is needed"; exit 1; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
# the header's functions: NAME LINE MARKED(0/1), comments removed
python3 - "$HDR" > "$T/decl" <<'PY' || exit 1
import re, sys
src = open(sys.argv[1]).read()
# blank out comments, keeping line numbers
src = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), src, flags=re.S)
src = re.sub(r"//[^\n]*", "", src)
for m in re.finditer(r"^(?!typedef|#|\s)([^;{}()#]*?)\b(xllm_[A-Za-z0-9_]+)\s*\(", src, re.M):
    line = src.count("\n", 0, m.start()) + 1
    print(m.group(2), line, 1 if re.search(r"\bXLLM_API\b", m.group(1)) else 0)
PY
nm -D --defined-only "$LIB" | awk '$2 ~ /^[TWiV]$/ {print $3}' | sed 's/@.*//' | sort -u > "$T/exported"
sort -u -k1,1 "$T/decl" | awk '{print $1}' > "$T/declared"
fail=0
while read -r name line marked; do
    if [ "$marked" != 1 ]; then
        echo "FAIL: $HDR:$line: $name is declared without XLLM_API (write 'XLLM_API' before its return type)"; fail=1
    fi
done < "$T/decl"
for name in $(comm -23 "$T/declared" "$T/exported"); do
    line=$(awk -v n="$name" '$1 == n {print $2; exit}' "$T/decl")
    echo "FAIL: $HDR:$line: $name is declared but $(basename "$LIB") does not export it (not defined, or defined without the header's XLLM_API declaration in scope)"; fail=1
done
for name in $(comm -13 "$T/declared" "$T/exported"); do
    echo "FAIL: $(basename "$LIB") exports $name, which include/xllm.h does not declare (make it static, or internal under hidden visibility; public functions go in xllm.h with XLLM_API)"; fail=1
done
n=$(wc -l < "$T/declared")
[ "$fail" = 0 ] && echo "check_exports: ok ($n functions declared with XLLM_API, exactly these exported)"
exit $fail
