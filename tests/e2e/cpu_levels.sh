#!/usr/bin/env bash
# cpu_levels.sh - the model tests under every CPU kernel level this machine
# has, forced with XLLM_CPU:
#  - test_models (logits within 1e-3 of the float64 references for the 7
#    architectures, stories260k greedy output, batch equivalence) per level;
#  - batch equivalence of quantized models (stories260k as q8, q4 and q4m/g64):
#    8 prompts generated in one batched call give exactly the tokens each
#    gives alone, per level (Python API; skipped in the sanitizer build);
#  - repacked weights (the level's own layout, made at load) give exactly the
#    logits of the stored layout (XLLM_REPACK=0), per level and type;
#  - an unknown or unavailable XLLM_CPU is a clean load error naming it.
# usage: cpu_levels.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2; BUILD=$3
S="$SRC/models/stories260k"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0

out=$(XLLM_CPU=bogus "$XLLM" run -m "$S" --ids 1 -n 1 2>&1); rc=$?
if [ $rc -ne 1 ] || ! grep -q "XLLM_CPU=bogus: unknown kernel level" <<<"$out"; then
    echo "FAIL XLLM_CPU=bogus: rc $rc: $out"; fail=1
fi

levels=""
for l in scalar avx2 avx512 neon; do
    out=$(XLLM_CPU=$l "$XLLM" run -m "$S" --ids 1 -n 1 2>&1); rc=$?
    if [ $rc -eq 0 ]; then
        levels="$levels $l"
    elif grep -q "does not support the $l kernels" <<<"$out" && [ $rc -eq 1 ]; then
        echo "skip $l (not on this CPU): $out"
    else
        echo "FAIL XLLM_CPU=$l: rc $rc: $out"; fail=1
    fi
done
echo "levels:$levels"

for l in $levels; do
    if XLLM_CPU=$l "$BUILD/test_models" > "$T/models_$l.log" 2>&1; then
        echo "ok   test_models at $l: $(tail -1 "$T/models_$l.log")"
    else
        echo "FAIL test_models at $l:"; cat "$T/models_$l.log"; fail=1
    fi
done

if [ -n "${XLLM_SANITIZED:-}" ] || ! command -v python3 >/dev/null; then
    echo "SKIP quantized batch equivalence (sanitizer build or no python3)"
    exit $fail
fi
LIB="$BUILD/libxllm.so"
"$XLLM" convert "$S" -o "$T/q8.xllm" --dtype q8 >/dev/null &&
"$XLLM" convert "$S" -o "$T/q4.xllm" --dtype q4 --group-size 32 >/dev/null &&
"$XLLM" convert "$S" -o "$T/q4m.xllm" --dtype q4m --group-size 64 >/dev/null || { echo "FAIL convert"; exit 1; }
IDS=1,400,23,77,5,129,311,42,8,260,99,17
for l in $levels; do
    for m in q8 q4 q4m; do
        XLLM_CPU=$l "$XLLM" logits -m "$T/$m.xllm" --ids $IDS --out "$T/packed.f32" >/dev/null 2>&1 &&
        XLLM_CPU=$l XLLM_REPACK=0 "$XLLM" logits -m "$T/$m.xllm" --ids $IDS --out "$T/stored.f32" >/dev/null 2>&1
        if [ $? -eq 0 ] && cmp -s "$T/packed.f32" "$T/stored.f32" && [ -s "$T/stored.f32" ]; then
            echo "ok   repacked == stored logits $m at $l"
        else
            echo "FAIL repacked vs stored logits $m at $l"; fail=1
        fi
    done
done
for l in $levels; do
    for m in q8 q4 q4m; do
        if XLLM_CPU=$l PYTHONPATH="$SRC/python" XLLM_LIBRARY="$LIB" python3 - "$T/$m.xllm" <<'PY'
import random, sys
from xllm import LLM, SamplingParams
llm = LLM(sys.argv[1], max_batch_seqs=8)
rng = random.Random(5)
prompts = [[1] + [rng.randrange(3, 500) for _ in range(i * 5)] for i in range(8)]
params = [SamplingParams(max_new_tokens=10 + 3 * i, temperature=0, ignore_eos=True) for i in range(8)]
batch = llm.generate(prompts, params)
bad = [i for i in range(8) if llm.generate([prompts[i]], params[i])[0].token_ids != batch[i].token_ids]
if bad:
    print("requests", bad, "differ between batched and alone")
    sys.exit(1)
PY
        then echo "ok   batch equivalence $m at $l"
        else echo "FAIL batch equivalence $m at $l"; fail=1
        fi
    done
done
exit $fail
