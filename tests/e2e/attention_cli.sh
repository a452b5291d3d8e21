#!/usr/bin/env bash
# attention_cli.sh - `xllm logits --attention FILE` (tools/attention_out.c): the JSON layout
# {"ids", "layers", "heads", "average_heads", "probs"[layer][head][query][key]} on stories260k and
# on gemma2 (sliding window of 8 on even layers), rows summing to 1, masked entries 0, the same
# numbers as the Python package's LLM.attention and (where there is a Vulkan device, e.g. lavapipe)
# the Vulkan backend, --layers / --average-heads, and bad values refused.
# usage: attention_cli.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2; BUILD=$3
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib/common.bash"
fails=0
M=$SRC/models/stories260k
G=$SRC/tests/data/archs/gemma2/model.gguf
IDS=1,403,407,261,378,141,431,300,259,2,40,50
GIDS=1,4501,13375,22249,31123,8256,17130,26004,3137,12011,20885,29759,6892,15766
"$XLLM" logits -m "$M" --ids $IDS --attention "$T/a.json" -t 1 > "$T/logits.json" 2> "$T/err"
check $? "logits --attention writes the file (and still prints the logits)"
"$XLLM" logits -m "$G" --ids $GIDS --attention "$T/g.json" --layers 0,1 -t 1 > /dev/null 2>> "$T/err"
check $? "gemma2: --layers 0,1"
"$XLLM" logits -m "$M" --ids $IDS --attention "$T/avg.json" --average-heads --layers 4,0 -t 1 > /dev/null 2>> "$T/err"
check $? "--average-heads --layers 4,0"
python3 - "$T" "$IDS" <<'PY'
import json, sys
T, ids = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
def rows_ok(d, n, window_of=lambda l: 0):
    for li, l in enumerate(d["layers"]):
        w = window_of(l)
        for h in d["probs"][li]:
            assert len(h) == n
            for i, row in enumerate(h):
                assert len(row) == n and abs(sum(row) - 1) < 1e-5, (l, i, sum(row))
                for j, p in enumerate(row):
                    masked = j > i or (w and i - j >= w)
                    assert (p == 0) if masked else (p > 0), (l, i, j, p)
a = json.load(open(T + "/a.json"))
assert a["ids"] == ids and a["layers"] == [0, 1, 2, 3, 4] and a["heads"] == 8 and a["average_heads"] is False
assert len(a["probs"]) == 5 and all(len(l) == 8 for l in a["probs"])
rows_ok(a, len(ids))
g = json.load(open(T + "/g.json"))
assert g["layers"] == [0, 1] and g["heads"] == 4
rows_ok(g, 14, lambda l: 8 if l % 2 == 0 else 0)  # gemma2: even layers slide over 8 positions
v = json.load(open(T + "/avg.json"))
assert v["heads"] == 1 and v["layers"] == [4, 0] and v["average_heads"] is True
for li, l in enumerate(v["layers"]):
    for i in range(len(ids)):
        for j in range(len(ids)):
            m = sum(a["probs"][l][h][i][j] for h in range(8)) / 8
            assert abs(v["probs"][li][0][i][j] - m) < 1e-6
print("   layout, rows, masks, window and average ok")
PY
check $? "the JSON: layout, rows sum to 1, causal mask, gemma2's window of 8, the head average"
if [ -z "${XLLM_SANITIZED:-}" ]; then
    PYTHONPATH="$SRC/python" XLLM_LIBRARY="$BUILD/libxllm.so" python3 - "$T/a.json" "$M" "$IDS" <<'PY'
import json, sys
from xllm import LLM
a = json.load(open(sys.argv[1]))
with LLM(sys.argv[2], n_threads=1) as llm:
    p = llm.attention([int(x) for x in sys.argv[3].split(",")])
d = max(abs(x - y) for L, M in zip(p, a["probs"]) for H, K in zip(L, M) for r, s in zip(H, K) for x, y in zip(r, s))
print("   |python - cli| = %g" % d)
assert d < 1e-8
PY
    check $? "Python's LLM.attention == the CLI's file"
fi
if [ -z "${XLLM_SANITIZED:-}" ] && "$XLLM" info --devices 2> /dev/null | grep -q "^vulkan device 0:"; then
    # a backend whose memory is not the host's: q/k are read back before the host computes
    XLLM_BACKEND=vulkan "$XLLM" logits -m "$M" --ids $IDS --attention "$T/vk.json" -t 1 > /dev/null 2>> "$T/err" &&
        python3 - "$T/a.json" "$T/vk.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["probs"] for p in sys.argv[1:3])
fl = lambda x: [v for l in x for h in l for r in h for v in r]
d = max(abs(p - q) for p, q in zip(fl(a), fl(b)))
print("   |vulkan - cpu| = %g" % d)
assert d < 1e-5
PY
    check $? "the Vulkan backend gives the CPU's attention weights (within 1e-5)"
fi
expect_fail "a layer past the last refused" "layer 9" "$XLLM" logits -m "$M" --ids 1,2 --attention "$T/x.json" --layers 9
expect_fail "a malformed --layers refused" "--layers" "$XLLM" logits -m "$M" --ids 1,2 --attention "$T/x.json" --layers 1,x
expect_fail "an unwritable --attention path refused" "cannot write" "$XLLM" logits -m "$M" --ids 1,2 --attention "$T/no/such/dir/x.json"
[ $fails -eq 0 ] || cat "$T/err"
[ $fails -eq 0 ]
