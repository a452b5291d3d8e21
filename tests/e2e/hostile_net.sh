#!/usr/bin/env bash
# hostile_net.sh - `xllm serve` on a hostile network (tests/e2e/hostile_net.py:
# raw sockets on loopback addresses, one check per item of issue 27, ~40 s).
# Timing-sensitive (deadlines of 2 s, latency bounds): skipped in the ASan
# pass (XLLM_SANITIZED=1), where everything runs several times slower.
# usage: hostile_net.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
if [ "${XLLM_SANITIZED:-0}" = 1 ]; then echo "skipped under the sanitizers (timing-sensitive)"; exit 0; fi
exec python3 "$2/tests/e2e/hostile_net.py" "$1" "$2"
