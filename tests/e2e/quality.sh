#!/usr/bin/env bash
# quality.sh - quantization quality bounds on stories260k, measured by
# `xllm eval` on the held-out text (22k tokens) against the f32 model:
#  - q8: perplexity within 0.5% of f32 and top-1 agreement >= 98%;
#  - q4 group 32: calibration (on separate text) lowers the mean KL divergence,
#    and the calibrated perplexity is within 5% of f32.
# These are quality bounds, not timings. Skipped in sanitizer builds (slow).
# usage: quality.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
if [ -n "${XLLM_SANITIZED:-}" ]; then echo "SKIP quality bounds in the sanitizer build"; exit 0; fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
S="$SRC/models/stories260k"; H="$SRC/tests/data/eval/stories_heldout.txt"; C="$SRC/tests/data/eval/stories_calib.txt"
"$XLLM" convert "$S" -o "$T/f32.xllm" && "$XLLM" convert "$S" -o "$T/q8.xllm" --dtype q8 &&
"$XLLM" convert "$S" -o "$T/q4.xllm" --dtype q4 --group-size 32 &&
"$XLLM" convert "$S" -o "$T/q4c.xllm" --dtype q4 --group-size 32 --calib "$C" || exit 1
for m in f32 q8 q4 q4c; do "$XLLM" eval -m "$T/$m.xllm" --text "$H" --ref "$S" --json > "$T/$m.json" || exit 1; done
python3 - "$T" <<'PY'
import json, os, sys
r = {m: json.load(open(os.path.join(sys.argv[1], m + ".json"))) for m in ("f32", "q8", "q4", "q4c")}
f = r["f32"]["ppl"]
for m in ("f32", "q8", "q4", "q4c"):
    x = r[m]
    print("%-4s tokens %d  ppl %.4f (%+.2f%%)  kld_mean %.5f  kld_max %.3f  top1 %.4f" %
          (m, x["tokens"], x["ppl"], 100 * (x["ppl"] / f - 1), x["kld_mean"], x["kld_max"], x["top1_agree"]))
ok = True
def need(cond, what):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok = ok and cond
need(r["f32"]["kld_mean"] < 1e-6, "f32 .xllm equals the HF model")
need(r["q8"]["ppl"] <= f * 1.005, "q8 perplexity within 0.5% of f32")
need(r["q8"]["top1_agree"] >= 0.98, "q8 top-1 agreement >= 98%")
need(r["q4c"]["kld_mean"] < r["q4"]["kld_mean"], "q4 calibrated has lower mean KLD than uncalibrated")
need(r["q4c"]["ppl"] <= f * 1.05, "q4 calibrated perplexity within 5% of f32")
sys.exit(0 if ok else 1)
PY
