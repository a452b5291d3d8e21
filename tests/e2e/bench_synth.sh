#!/usr/bin/env bash
# bench_synth.sh - `xllm synth` and `xllm bench`:
#  - synth writes models (tiny-test shapes: llama with GQA and an untied lm_head; qwen3 with
#    q/k norm, decoupled head_dim, tied; llama with llama3 RoPE scaling, tied; Gemma 2 with its
#    four norms, soft-caps and GeGLU; Qwen3-MoE with 8 experts, 2 active) that load,
#    tokenize text and generate;
#  - the .xllm, GGUF and HF outputs of one synth give the same logits: f32 HF and .xllm
#    identical, GGUF identical for qwen3, gemma2 and qwen3moe and within 1e-4 for llama (llama.cpp's Q/K row
#    permutation sums q.k in another order); q8 .xllm and Q8_0 GGUF likewise;
#  - the HF directory of a q8 synth holds exactly the .xllm's values (requantizing it gives
#    the same logits); weights depend on the seed, not on the thread count;
#  - `xllm bench --json` prints exactly its seven keys, with positive numbers (timings are
#    never asserted); its bandwidth bound comes from probes around each tg run (a child
#    process, `xllm bench --bandwidth-only`, which prints one positive figure);
#  - bad arguments: exit status 1 and a message.
# usage: bench_synth.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fails=0
source "$SRC/tests/e2e/lib/common.bash"
IDS=1,5,300,17,42,99,511,3,260,261
logits() { "$XLLM" logits -m "$1" --ids "$IDS" --out "$2" > /dev/null; }

for shape in tiny-test tiny-test-qwen3 tiny-test-llama3 tiny-test-gemma2 tiny-test-qwen3moe; do
    tol=1e-4; [ "$shape" != tiny-test ] && [ "$shape" != tiny-test-llama3 ] && tol=0
    d="$T/$shape"; mkdir -p "$d"
    "$XLLM" synth --shape $shape -o "$d/f32.xllm" --gguf "$d/f32.gguf" --hf "$d/hf" &&
    logits "$d/f32.xllm" "$d/x.f32" && logits "$d/hf" "$d/h.f32" && logits "$d/f32.gguf" "$d/g.f32" &&
    compare "$d/x.f32" "$d/h.f32" 0 && compare "$d/x.f32" "$d/g.f32" $tol
    check $? "synth $shape f32: .xllm, HF and GGUF logits agree (GGUF tolerance $tol)"

    "$XLLM" synth --shape $shape --dtype q8 -o "$d/q8.xllm" --gguf "$d/q8.gguf" --hf "$d/hf8" -t 1 &&
    logits "$d/q8.xllm" "$d/x8.f32" && logits "$d/q8.gguf" "$d/g8.f32" && compare "$d/x8.f32" "$d/g8.f32" $tol
    check $? "synth $shape q8: .xllm and Q8_0 GGUF logits agree (tolerance $tol)"

    "$XLLM" convert "$d/hf8" --dtype q8 -o "$d/re8.xllm" && logits "$d/re8.xllm" "$d/r8.f32" &&
    compare "$d/x8.f32" "$d/r8.f32" 0
    check $? "synth $shape q8: the HF directory holds the .xllm's values exactly"
done

d="$T/tiny-test"
"$XLLM" synth --shape tiny-test --dtype q8 --gguf "$d/t2.gguf" -t 2 && cmp -s "$d/q8.gguf" "$d/t2.gguf" &&
"$XLLM" synth --shape tiny-test --dtype q8 --gguf "$d/s2.gguf" --seed 2 && ! cmp -s "$d/q8.gguf" "$d/s2.gguf"
check $? "synth: the same bytes with 1 or 2 threads; another seed, other weights"

"$XLLM" synth --shape tiny-test --dtype q4 -o "$d/q4.xllm" --gguf "$d/q40.gguf" --gguf-type Q4_0 &&
"$XLLM" synth --shape tiny-test --gguf "$d/q4only.gguf" --gguf-type Q4_0 && cmp -s "$d/q40.gguf" "$d/q4only.gguf" &&
[ -z "$(ls "$d" | grep -e scratch -e tmp)" ] &&
"$XLLM" synth --shape tiny-test --dtype q8 -o "$d/mix.xllm" --gguf "$d/mix.gguf" --gguf-type Q4_0 &&
cmp -s "$d/q40.gguf" "$d/mix.gguf" && "$XLLM" info "$d/mix.gguf" | grep -q "q4/g32"
check $? "synth: --gguf-type Q4_0 gives one GGUF whatever --dtype; no scratch files left"

"$XLLM" run -m "$d/q8.xllm" -p "Once upon a time" -n 8 --temp 0 --json > "$T/run.json" &&
python3 - "$T/run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["prompt_ids"][0] == 1 and len(r["prompt_ids"]) > 2, r["prompt_ids"]
assert len(r["ids"]) == 8, r
PY
check $? "synth: the model generates from a text prompt"

printf '{"text":"Hello world, 123! caf\\u00e9 \\u2603"}\n' > "$T/t.jsonl"
"$XLLM" tokenize -m "$T/tiny-test-qwen3/hf" --jsonl "$T/t.jsonl" > "$T/tok.json" &&
python3 - "$T/tok.json" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read())
assert r["decode_skip_special"] == "Hello world, 123! caf\u00e9 \u2603", r
assert r["ids"][0] == 1 and 134 in r["ids"], r  # <s>, and U+2603's last byte <0x83> (id 3 + 0x83)
PY
check $? "synth: the tokenizer round-trips text (byte fallback for non-ASCII)"

"$XLLM" bench -m "$d/q8.xllm" -p 16 -n 8 -r 2 -t 2 --json > "$T/bench.json" 2> "$T/bench.err" &&
python3 - "$T/bench.json" "$T/bench.err" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
r = json.loads(lines[0])
assert sorted(r) == sorted(["pp_tok_s", "pp_sd", "tg_tok_s", "tg_sd", "threads", "kv_dtype", "kv_bytes_per_token"]), r
assert r["kv_dtype"] == "f32" and r["kv_bytes_per_token"] > 0, r
assert r["threads"] == 2 and r["pp_tok_s"] > 0 and r["tg_tok_s"] > 0 and r["pp_sd"] >= 0 and r["tg_sd"] >= 0, r
err = open(sys.argv[2]).read()
assert "peak RSS" in err and "pp16" in err and "tg8" in err and "KV cache   f32" in err, err
PY
check $? "bench --json: exactly its seven keys, positive figures"

"$XLLM" bench -m "$T/tiny-test-qwen3/f32.gguf" -p 8 -n 4 -r 1 -t 1 > "$T/bench.txt" &&
grep -q "pp8" "$T/bench.txt" && grep -q "tg4" "$T/bench.txt" && grep -q "tg bound" "$T/bench.txt" &&
grep -q "around each tg run" "$T/bench.txt"
check $? "bench on a GGUF file: table, memory and bandwidth bound (probed by a child around each tg run)"

bw=$("$XLLM" bench --bandwidth-only -t 1) &&
python3 -c "import sys; v = float(sys.argv[1]); sys.exit(0 if v > 0 else 1)" "$bw"
check $? "bench --bandwidth-only: one positive figure (GB/s), no model needed"

# --depth: the context comes from the prefix cache (bench itself fails if it
# was prefilled again), beyond the model's trained context too
"$XLLM" bench -m "$d/q8.xllm" -d 48 -p 16 -n 8 -r 2 -t 1 > "$T/bench_d.txt" &&
grep -q "pp16 @ d48" "$T/bench_d.txt" && grep -q "tg8 @ d48" "$T/bench_d.txt" &&
grep -q "after a context of 48 tokens" "$T/bench_d.txt" && grep -q "KV pool" "$T/bench_d.txt"
check $? "bench --depth: pp and tg after a cached context"

expect_fail "synth: unknown shape" "unknown shape" "$XLLM" synth --shape nope -o "$T/x.xllm"
expect_fail "synth: no shape" "needs --shape" "$XLLM" synth -o "$T/x.xllm"
expect_fail "synth: no output" "needs an output" "$XLLM" synth --shape tiny-test
expect_fail "synth: unknown dtype" "unknown dtype" "$XLLM" synth --shape tiny-test --dtype q3 -o "$T/x.xllm"
expect_fail "synth: unknown GGUF type" "unknown GGUF type" "$XLLM" synth --shape tiny-test --gguf "$T/x.gguf" --gguf-type IQ2_XXS
expect_fail "synth: GGUF type without GGUF" "without a GGUF output" "$XLLM" synth --shape tiny-test -o "$T/x.xllm" --gguf-type Q8_0
expect_fail "synth: negative seed" "seed needs an integer from 0 to" "$XLLM" synth --shape tiny-test -o "$T/x.xllm" --seed -3
expect_fail "synth: unknown option" "unknown option" "$XLLM" synth --shape tiny-test --frobnicate
expect_fail "synth: missing value" "needs a value" "$XLLM" synth --shape
expect_fail "synth: unwritable output" "no such file" "$XLLM" synth --shape tiny-test -o "$T/no/such/dir/x.xllm"
[ ! -e "$T/x.xllm" ] && [ ! -e "$T/x.gguf" ]
check $? "synth: failed runs leave no output"
expect_fail "bench: no model" "needs -m MODEL" "$XLLM" bench
expect_fail "bench: negative depth" "integer from 0" "$XLLM" bench -m "$d/q8.xllm" -d -1
expect_fail "bench: -p 0" "integer from 1" "$XLLM" bench -m "$d/q8.xllm" -p 0
expect_fail "bench: -r x" "integer from 1" "$XLLM" bench -m "$d/q8.xllm" -r x
expect_fail "bench: unknown option" "unknown option" "$XLLM" bench -m "$d/q8.xllm" --nope
expect_fail "bench: missing value" "needs a value" "$XLLM" bench -m "$d/q8.xllm" -n
"$XLLM" bench -m "$d/q8.xllm" -p 600 -n 4 -r 1 -t 1 > "$T/bench_long.txt" 2> "$T/bench_long.err" &&
grep -q "beyond the model's [0-9]*: the figures measure speed only" "$T/bench_long.err" && grep -q "pp600" "$T/bench_long.txt"
check $? "bench: a prompt beyond the trained context runs, with a note"
expect_fail "bench: missing model" "missing.xllm" "$XLLM" bench -m "$T/missing.xllm"

echo "$fails failed"
[ $fails = 0 ]
