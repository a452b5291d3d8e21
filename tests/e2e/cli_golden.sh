#!/usr/bin/env bash
# cli_golden.sh - the `xllm` command against independent references:
#  - run --json on stories260k reproduces the PyTorch greedy 200 ids;
#  - run with no arguments tells a readable story;
#  - logits --out on every tiny model matches the float64 reference within 1e-3;
#  - tokenize reproduces HF tokenizers' expected.jsonl (both tokenizer forms).
# usage: cli_golden.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib/common.bash"
fails=0

"$XLLM" run -m "$SRC/models/stories260k" -p "Once upon a time" -n 200 --temp 0 --json > "$T/run.json"
python3 - "$T/run.json" "$SRC/models/stories260k/expected.json" <<'PY'
import json, sys
got = json.load(open(sys.argv[1])); exp = json.load(open(sys.argv[2]))
assert got["prompt_ids"] == exp["prompt_ids"], (got["prompt_ids"], exp["prompt_ids"])
assert got["ids"] == exp["prompt_greedy_200_ids"], "greedy ids differ"
assert isinstance(got["text"], str) and len(got["text"]) > 100
PY
check $? "run --json greedy 200 == PyTorch reference"

"$XLLM" run > "$T/story.txt" 2> "$T/story.err"
python3 - "$T/story.txt" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
words = re.findall(r"[A-Za-z]+", text)
assert len(words) >= 30, "story too short: %r" % text[:200]
# a readable story: mostly common English words
common = {"the", "a", "and", "was", "to", "he", "she", "it", "they", "of", "her", "his", "in", "said", "with", "day", "time", "once", "upon"}
hits = sum(w.lower() in common for w in words)
assert hits >= len(words) // 8, "does not read like English: %r" % text[:300]
print(text[:160].replace("\n", " "))
PY
check $? "run with no arguments tells a story"

for arch in llama mistral mixtral qwen2 qwen2_moe qwen3 qwen3_moe; do
    d="$SRC/tests/data/tiny/$arch"
    ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$d/expected.json'))['input_ids'])))")
    "$XLLM" logits -m "$d" --ids "$ids" --out "$T/$arch.f32" > "$T/$arch.json"
    python3 - "$T/$arch.f32" "$d/logits_48x512.f32" "$T/$arch.json" <<'PY'
import json, struct, sys
a = open(sys.argv[1], "rb").read(); b = open(sys.argv[2], "rb").read()
assert len(a) == len(b), (len(a), len(b))
x = struct.unpack("<%df" % (len(a) // 4), a); y = struct.unpack("<%df" % (len(b) // 4), b)
d = max(abs(p - q) for p, q in zip(x, y))
last = json.load(open(sys.argv[3]))["logits"]
assert len(last) == 512 and max(abs(p - q) for p, q in zip(last, y[-512:])) < 1e-3
assert d < 1e-3, d
PY
    check $? "logits $arch within 1e-3 of reference"
done

cmp_tok() {  # cmp_tok TOKENIZER_DIR EXPECTED_JSONL
    python3 -c "
import json, sys
for l in open('$2'):
    print(json.dumps({'text': json.loads(l)['text']}))" > "$T/in.jsonl"
    "$XLLM" tokenize -m "$1" --jsonl "$T/in.jsonl" > "$T/out.jsonl" || return 1
    python3 - "$T/out.jsonl" "$2" <<'PY'
import json, sys
got = [json.loads(l) for l in open(sys.argv[1])]
exp = [json.loads(l) for l in open(sys.argv[2])]
assert len(got) == len(exp), (len(got), len(exp))
bad = 0
for g, e in zip(got, exp):
    for k in ("ids", "ids_no_special", "decode", "decode_skip_special"):
        if g[k] != e[k]:
            bad += 1
            print("mismatch", k, repr(e["text"])[:60], g[k], e[k])
assert bad == 0
print(len(got), "lines identical")
PY
}
TD="$SRC/tests/data/tokenizers/tinystories-tok512"
cmp_tok "$TD" "$TD/expected.jsonl"
check $? "tokenize == HF tokenizers (legacy normalizer form)"
mkdir -p "$T/meta"; cp "$TD/tokenizer_metaspace.json" "$T/meta/tokenizer.json"; cp "$TD/tokenizer_config.json" "$T/meta/"
cmp_tok "$T/meta" "$TD/expected_metaspace.jsonl"
check $? "tokenize == HF tokenizers (Metaspace form)"

"$XLLM" run -m "$SRC/models/stories260k" -p "Once upon a time" -n 20 --temp 0 --profile "$T/prof.json" > /dev/null 2> "$T/prof.err" &&
grep -q "kernel profile" "$T/prof.err" && python3 - "$T/prof.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
ops = {o["op"]: o for o in p["ops"]}
for need in ("attention", "matmul.gate_up", "matmul.down", "lm_head", "sample", "rmsnorm"):
    assert need in ops, need
assert abs(sum(o["share"] for o in p["ops"]) - 1) < 1e-6
assert ops["lm_head"]["calls"] == 20 and ops["sample"]["calls"] == 20   # one per generated token
assert ops["attention"]["calls"] == 5 * 20 and all(o["ms"] >= 0 for o in p["ops"])
PY
check $? "run --profile writes the per-operator report"

"$XLLM" info --plan "$SRC/models/stories260k" > "$T/plan.txt" && grep -q "kernel level" "$T/plan.txt" &&
grep -q "^512x64 " "$T/plan.txt" && "$XLLM" info --plan --json "$SRC/models/stories260k" | python3 -c "
import json, sys
p = json.load(sys.stdin)
assert p['threads'] >= 1 and p['matmul'], p
for s in p['matmul']:
    assert len(s['buckets']) == 4
    for b in s['buckets']:
        assert 'threads' not in b or 0 <= b['threads'] <= p['threads']"
check $? "info --plan prints the planner's choices"
ids=1,403,407,261,378,432,383
"$XLLM" logits -m "$SRC/models/stories260k" --ids $ids --out "$T/planned.f32" > /dev/null &&
XLLM_PLAN=0 "$XLLM" logits -m "$SRC/models/stories260k" --ids $ids --out "$T/unplanned.f32" > /dev/null &&
compare "$T/planned.f32" "$T/unplanned.f32" 0
check $? "the plan does not change results"

[ $fails -eq 0 ]
