#!/usr/bin/env bash
# template_fuzz.sh - random templates (expressions with every operator,
# filter, test and method; nestings of tags with every whitespace-control
# marker) rendered by `xllm template` and by Python Jinja2 as HF configures it
# must agree, text for text and error for error. Needs python3 with jinja2;
# without it, prints SKIP. The seed is fixed so the test is repeatable; set
# XLLM_FUZZ_SEED (and run tests/templates/fuzz_jinja.py with larger counts)
# to explore further.
# usage: template_fuzz.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
if ! python3 -c "import jinja2" 2>/dev/null; then
    echo "SKIP template_fuzz: python3 has no jinja2"
    exit 0
fi
seed=${XLLM_FUZZ_SEED:-1}
echo "seed $seed"
# half the cases under the sanitizers (each render is a process; CI time)
if [ -n "${XLLM_SANITIZED:-}" ]; then counts="75 50 50"; else counts="150 100 100"; fi
python3 "$SRC/tests/templates/fuzz_jinja.py" "$XLLM" "$seed" $counts
