#!/usr/bin/env bash
# check_prefix.sh - the `xllm_` prefix belongs to the public API (issue 27 item 9):
# every identifier in the C code of src/ and tools/ that starts with xllm_
# must be a name include/xllm.h declares. Internal code takes a prefix naming
# its module instead (mem_ for allocation, buf_ for buffers, dtype_, err_, u8_, ...).
# Strings and comments are not code here, so Prometheus metric names
# ("xllm_http_requests_total") and temp-file templates are fine.
# usage: check_prefix.sh SOURCE_DIR     exit 1 naming each offender (file:line: name)
set -u
SRC=${1:-$(cd "$(dirname "$0")/.." && pwd)}
command -v python3 > /dev/null || { echo "FAIL: python3 is needed"; exit 1; }
exec python3 - "$SRC" <<'PY'
import os, re, sys
src = sys.argv[1]
hdr = open(os.path.join(src, "include", "xllm.h")).read()
public = set(re.findall(r"\bxllm_[A-Za-z0-9_]+\b", hdr))
# strings, character constants and comments, blanked out keeping the line breaks
lit = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|/\*.*?\*/|//[^\n]*', re.S)
bad, files = [], 0
for room in ("src", "tools"):
    for dp, dn, fn in os.walk(os.path.join(src, room)):
        dn.sort()
        for f in sorted(fn):
            if not f.endswith((".c", ".h")):
                continue
            p = os.path.join(dp, f)
            files += 1
            code = lit.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), open(p, errors="replace").read())
            for m in re.finditer(r"\bxllm_[A-Za-z0-9_]+\b", code):
                if m.group(0) not in public:
                    line = code.count("\n", 0, m.start()) + 1
                    bad.append("%s:%d: %s" % (os.path.relpath(p, src), line, m.group(0)))
names = sorted({b.rsplit(": ", 1)[1] for b in bad})
for b in bad[:200]:
    print("FAIL: " + b)
if bad:
    print("check_prefix: %d uses of %d internal names starting with xllm_ (reserved for include/xllm.h): "
          "give them their module's prefix (the one-off rename: rename_internal.sh)" % (len(bad), len(names)))
    sys.exit(1)
print("check_prefix: ok (%d files; every xllm_ name in code is one of include/xllm.h's %d)" % (files, len(public)))
PY
