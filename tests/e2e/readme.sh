#!/usr/bin/env bash
# readme.sh - every command line and the Python snippet of README.md's "Use"
# section run, as written, on this build, from a copy of the repository layout
# (models/, tests/, python/ linked, build/ = this build), and all succeed.
#
# The README says which sizes CI shrinks: the TinyLlama synth line runs with
# --shape tiny-test and the bench line with -p 128 -n 32 (the real ones take
# minutes and GBs). `cmake --install` goes to a temporary $HOME, and the
# installed xllm and Python package are then run from another directory.
# The first block (make run / make test) is what CI itself runs; it is not
# re-run here. Under the sanitizers the Python lines are skipped (the ASan
# library cannot be loaded into python3).
# usage: readme.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$(cd "$2" && pwd); BUILD=$3
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib/common.bash"
fails=0

W=$T/work; mkdir -p "$W" "$T/home"
for d in models tests python; do ln -s "$SRC/$d" "$W/$d"; done
ln -s "$(cd "$(dirname "$XLLM")" && pwd)" "$W/build"

# the ```sh and ```python blocks of the "## Use" section
python3 - "$SRC/README.md" "$T" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
use = text.split("\n## Use\n", 1)[1].split("\n## ", 1)[0]
blocks = re.findall(r"```(sh|python)\n(.*?)```", use, re.S)
sh = [l for lang, b in blocks if lang == "sh" for l in b.splitlines() if l.strip() and not l.startswith("#")]
py = [b for lang, b in blocks if lang == "python"]
assert len(sh) >= 10 and len(py) == 1, (len(sh), len(py))
open(sys.argv[2] + "/lines.sh", "w").write("\n".join(sh) + "\n")
open(sys.argv[2] + "/snippet.py", "w").write(py[0])
PY
check $? "README: the Use section has its command lines and one Python snippet"

# the mpirun line: as root Open MPI wants to be told; a machine with fewer cores may run 2 ranks
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
n=0
while IFS= read -r line; do
    n=$((n+1))
    run=$line
    run=${run//--shape tinyllama-1.1b/--shape tiny-test}   # the sizes the README names for CI
    run=${run//-p 512 -n 128/-p 128 -n 32}
    if [ -n "${XLLM_SANITIZED:-}" ] && [[ $run == *python3* ]]; then echo "skip (sanitizers) $line"; continue; fi
    if [[ $run == mpirun* ]] && ! command -v mpirun > /dev/null; then echo "skip (no mpirun) $line"; continue; fi
    # under ASan, LeakSanitizer cannot name Open MPI's unloaded components (tests/e2e/pp.sh counts ours)
    [[ $run == mpirun* ]] && run="ASAN_OPTIONS=\${ASAN_OPTIONS:+\$ASAN_OPTIONS:}detect_leaks=0 $run"
    # (stdin from /dev/null: mpirun would read the rest of the list)
    (cd "$W" && HOME="$T/home" timeout 300 bash -c "$run" < /dev/null > "$T/out.$n" 2> "$T/err.$n")
    rc=$?
    if [ $rc -ne 0 ] || grep -q "Sanitizer\|runtime error" "$T/err.$n"; then
        echo "FAIL (status $rc) $run"; tail -5 "$T/err.$n"; fails=$((fails+1))
    else
        echo "ok   $line"
    fi
done < "$T/lines.sh"

# what the lines made is what they say
[ -s "$W/all.f32" ] && [ -s "$W/s.xllm" ] && [ -s "$W/s.gguf" ] && [ -s "$W/tl.xllm" ] && [ -s "$W/tl.gguf" ] &&
    [ -s "$W/tl-hf/model.safetensors" ]
check $? "README: the files the examples write exist"

# the installed command finds its default model from anywhere; the installed package its library
P=$T/home/.local
(cd / && "$P/bin/xllm" run -n 4 --ids 1 --quiet > /dev/null) && [ -s "$P/include/xllm.h" ] && [ -e "$P/lib/libxllm.so" ] &&
    [ -d "$P/share/xllm/models/stories260k" ]
check $? "install: xllm runs from / with the installed default model; header and library installed"
if [ -z "${XLLM_SANITIZED:-}" ]; then
    PYDIR=$(find "$P" -path '*/dist-packages/xllm/__init__.py' | head -1)
    (cd / && env -u XLLM_LIBRARY PYTHONPATH="$(dirname "$(dirname "$PYDIR")")" \
        python3 -c "import xllm; assert xllm.library_path().startswith('$P'), xllm.library_path(); print(xllm.LLM(xllm.default_model()).generate([1, 403], max_new_tokens=3)[0].token_ids)")
    check $? "install: the installed Python package loads the installed library and the default model"

    (cd "$W" && env -u XLLM_LIBRARY PYTHONPATH=python timeout 300 python3 "$T/snippet.py" > "$T/py.out" 2> "$T/py.err")
    rc=$?; [ $rc -ne 0 ] && tail -5 "$T/py.err"
    [ $rc -eq 0 ] && [ -s "$W/s.xllm" ]
    check $? "README: the Python snippet runs"
fi
[ $fails -eq 0 ]
