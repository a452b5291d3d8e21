#!/usr/bin/env bash
# pp.sh - pipeline parallelism over MPI (src/pipeline): `mpirun -np N xllm run
# --pp N` gives exactly the single-process output, greedy and seeded (two
# samples per prompt: forks and copy-on-write), with several prompts batched
# together and a KV pool small enough to preempt (swap and recompute), for 2
# and 3 ranks over llama, qwen3 and qwen3_moe from tests/data/tiny (3 ranks:
# their layers doubled to 4, a model of its own), the bundled stories260k and (2
# ranks, greedy) the GGUF families gemma3, olmo2 and qwen2moe of tests/data/archs;
# each rank binds exactly its share of the file's tensors; bad splits and
# launches are refused with a message; a rank that exits, hangs or is killed
# ends the whole job with an error, never a hang; `serve --pp 2` answers
# concurrent requests with the single-process text. Under the sanitizers
# (slower) qwen3_moe stands for the three tiny models. Skipped, saying so,
# without mpirun or in a build without MPI.
# Every launch is bounded (timeout, then SIGKILL 10 s later) and reads no stdin (mpirun
# forwards its stdin to rank 0; a runner's stdin may be a pipe that never closes).
# usage: pp.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
exec < /dev/null
XLLM=$(cd "$(dirname "$1")" && pwd)/$(basename "$1"); SRC=$2
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib/common.bash"
fails=0

if ! command -v mpirun > /dev/null 2>&1; then
    echo "skip: mpirun not found (Debian: apt-get install openmpi-bin libopenmpi-dev; scripts/install-deps.sh does)"
    exit 0
fi
timeout -k 10 60 "$XLLM" run -m "$SRC/models/stories260k" -p x -n 1 --pp 2 > /dev/null 2> "$T/nompi"
if grep -q "built without MPI" "$T/nompi"; then
    echo "skip: this xllm was built without MPI ($(cat "$T/nompi"))"
    exit 0
fi
grep -q "not started by an MPI launcher" "$T/nompi"
check $? "--pp 2 without mpirun: refused with how to run it"

MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
# the load-time planner only picks thread counts (never bits): skip its 400 ms per rank
export XLLM_PLAN=0
# shared memory without single-copy (process_vm_readv is refused in some containers)
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
# Under ASan, LeakSanitizer would report Open MPI's own allocations from components it has
# unloaded by exit (no module name to suppress); ours are counted instead: XLLM_DEBUG=1 makes
# every rank report its live allocations after freeing the model (checked below; it also
# checks the KV pool's invariants after every step on rank 0)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" XLLM_DEBUG=1

printf 'Once upon a time\nThe dog\nLily went to the park\nTom and his mom\nThe sun was\nOne day, a little bird\n' > "$T/prompts"

# a tiny model with its layers doubled (0,1 -> 0,1,2,3): 3 ranks need 3 layers
deepen() {
    python3 - "$1" "$2" <<'PY'
import json, os, re, shutil, struct, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst)
for f in os.listdir(src):
    if f.endswith((".json", ".jinja")) and f != "expected.json":
        shutil.copy(os.path.join(src, f), dst)
cfg = json.load(open(os.path.join(src, "config.json")))
n = cfg["num_hidden_layers"]
cfg["num_hidden_layers"] = 2 * n
if isinstance(cfg.get("layer_types"), list):
    cfg["layer_types"] = cfg["layer_types"] * 2
json.dump(cfg, open(os.path.join(dst, "config.json"), "w"))
raw = open(os.path.join(src, "model.safetensors"), "rb").read()
hl = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + hl]); data = raw[8 + hl:]
out, blobs, off = {}, [], 0
for name, t in sorted(head.items()):
    if name == "__metadata__":
        continue
    b = data[t["data_offsets"][0]:t["data_offsets"][1]]
    names = [name]
    m = re.match(r"model\.layers\.(\d+)\.(.*)", name)
    if m:
        names.append("model.layers.%d.%s" % (int(m.group(1)) + n, m.group(2)))
    for nm in names:
        out[nm] = {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [off, off + len(b)]}
        blobs.append(b); off += len(b)
h = json.dumps(out).encode(); h += b" " * (-len(h) % 8)
with open(os.path.join(dst, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
}

# the bytes of the file's tensors a rank with layers [l0, l1) of L binds
share() {
    "$XLLM" info "$1" --json > "$T/info.json" || return 1
    python3 - "$T/info.json" "$2" "$3" "$4" <<'PY'
import json, re, sys
info = json.load(open(sys.argv[1])); l0, l1, L = map(int, sys.argv[2:5])
by = {t["name"]: t["bytes"] for t in info["tensors"]}
s = 0
for name, b in by.items():
    m = re.match(r"model\.layers\.(\d+)\.", name)
    if m and l0 <= int(m.group(1)) < l1:
        s += b
if l0 == 0:
    s += by["model.embed_tokens.weight"]
if l1 == L:
    s += by["model.norm.weight"] + by.get("lm_head.weight", by["model.embed_tokens.weight"])
print(s)
PY
}

# run_pp NAME MODEL NRANKS [extra xllm options]: compare with the single-process run
run_pp() {
    local name=$1 model=$2 n=$3; shift 3
    local common=(-m "$model" --prompts "$T/prompts" -n 20 -c 64 --kv-tokens 64 --json -t 1 "$@")
    timeout -k 10 120 "$XLLM" run "${common[@]}" > "$T/ref" 2> "$T/ref.err"
    local rc=$?
    timeout -k 10 120 "${MPIRUN[@]}" -np "$n" "$XLLM" run "${common[@]}" --pp "$n" --pp-stats > "$T/got" 2> "$T/got.err"
    local prc=$?
    [ $rc = 0 ] && [ $prc = 0 ] && [ -s "$T/ref" ] && cmp -s "$T/ref" "$T/got"
    check $? "$name: $n ranks, $* == one process ($(wc -l < "$T/ref") sequences)"
    [ "$(grep -c "XLLM_DEBUG: 0 live allocations (0 bytes) after xllm_model_free" "$T/got.err")" = "$n" ]
    check $? "$name: $n ranks: no rank holds memory after freeing its model"
    if [ $prc != 0 ] || ! cmp -s "$T/ref" "$T/got"; then tail -5 "$T/got.err"; diff "$T/ref" "$T/got" | head -4; fi
    # preemption happened (the pool holds 4 blocks of 16 tokens)
    grep -q "preemptions [1-9]" "$T/got.err"
    check $? "$name: $n ranks: sequences were preempted ($(grep -o 'preemptions [0-9]*' "$T/got.err"))"
    # each rank bound exactly the file's tensors of its layers (+ embedding first, norm and head last)
    local bad="" lines=0
    while read -r rank l0 l1 L bytes; do
        lines=$((lines + 1))
        want=$(share "$model" "$l0" "$l1" "$L")
        [ "$bytes" = "$want" ] || bad="$bad rank $rank: $bytes bytes, want $want;"
    done < <(sed -n 's/^xllm: pp rank \([0-9]*\)\/[0-9]*: layers \[\([0-9]*\), \([0-9]*\)) of \([0-9]*\) | weights bound \([0-9]*\) bytes.*/\1 \2 \3 \4 \5/p' "$T/got.err")
    [ $lines = "$n" ] && [ -z "$bad" ]
    check $? "$name: $n ranks: each rank bound its share of the weights ($(grep -o 'rank [0-9]/[0-9]: layers [^|]*| weights bound [0-9]* bytes' "$T/got.err" | tr '\n' ';'))$bad"
}

# under the sanitizers (a slower build) one tiny model stands for the three
MODELS="llama qwen3 qwen3_moe"
[ -n "${XLLM_SANITIZED:-}" ] && MODELS="qwen3_moe"
for m in $MODELS; do
    deepen "$SRC/tests/data/tiny/$m" "$T/$m-4"
    run_pp "$m" "$SRC/tests/data/tiny/$m" 2 --temp 0
    run_pp "$m" "$SRC/tests/data/tiny/$m" 2 --temp 0.9 --seed 5 --top-k 40 --samples 2
    run_pp "$m x2 layers" "$T/$m-4" 3 --temp 0
    run_pp "$m x2 layers" "$T/$m-4" 3 --temp 0.9 --seed 5 --samples 2 --pp-layers 1,1,2 --pp-microbatches 3
done
# GGUF families of src/format/arch.c (tests/data/archs): post-norms, per-layer RoPE bases and
# windows, whole-projection q/k norms, a shared expert, MLA with its latent KV pool and grouped
# routing; output equal to one process
run_pp_gguf() {
    local name=$1 model=$2; shift 2
    local common=(-m "$model" --prompts "$T/prompts" -n 20 -c 64 --kv-tokens 64 --json -t 1 "$@")
    timeout -k 10 120 "$XLLM" run "${common[@]}" > "$T/ref" 2> "$T/ref.err"
    local rc=$?
    timeout -k 10 120 "${MPIRUN[@]}" -np 2 "$XLLM" run "${common[@]}" --pp 2 --pp-stats > "$T/got" 2> "$T/got.err"
    local prc=$?
    [ $rc = 0 ] && [ $prc = 0 ] && [ -s "$T/ref" ] && cmp -s "$T/ref" "$T/got" && grep -q "preemptions [1-9]" "$T/got.err"
    check $? "$name (GGUF): 2 ranks, $* == one process, with preemption ($(grep -o 'preemptions [0-9]*' "$T/got.err" | head -1))"
    if [ $prc != 0 ] || ! cmp -s "$T/ref" "$T/got"; then tail -5 "$T/got.err"; diff "$T/ref" "$T/got" | head -4; fi
}
if [ -z "${XLLM_SANITIZED:-}" ]; then
    for f in gemma3 olmo2 qwen2moe deepseek2; do run_pp_gguf "$f" "$SRC/tests/data/archs/$f/model.gguf" --temp 0; done
fi

S=$SRC/models/stories260k
run_pp stories260k "$S" 2 --temp 0 --pp-microbatches 1
run_pp stories260k "$S" 2 --temp 0.8 --seed 9 --top-p 0.9 --samples 2 --pp-microbatches 4
run_pp stories260k "$S" 3 --temp 0
run_pp stories260k "$S" 3 --temp 0.8 --seed 9 --samples 2 --pp-layers 2,2,1

# rank_pid PID R: the pid of rank R of the mpirun under `timeout` PID (timeout -> mpirun -> ranks)
rank_pid() {
    for c in $(pgrep -P "$1" 2> /dev/null); do
        for r in $(pgrep -P "$c" 2> /dev/null); do
            tr '\0' '\n' < "/proc/$r/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && echo "$r"
        done
    done
}

# serve over 2 ranks: concurrent requests get the single-process tokens; SIGTERM stops every rank
timeout -k 10 120 "${MPIRUN[@]}" -np 2 "$XLLM" serve -m "$S" --port 0 -t 1 --pp 2 --pp-stats > "$T/serve.out" 2> "$T/serve.err" &
sp=$!
for _ in $(seq 300); do grep -q "listening on" "$T/serve.out" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on http:.*:\([0-9]*\)$/\1/p' "$T/serve.out")
ok=1
if [ -n "$port" ]; then
    i=0
    pids=()
    while read -r p; do
        i=$((i + 1))
        python3 - "$port" "$p" "$T/s$i.json" <<'PY' &
import json, sys, urllib.request
port, prompt, out = sys.argv[1], sys.argv[2], sys.argv[3]
body = {"model": "stories260k", "prompt": prompt, "max_tokens": 20, "temperature": 0}
if prompt.startswith("Lily"):
    body.update({"temperature": 0.8, "top_p": 1, "seed": 11, "n": 2})
req = urllib.request.Request("http://127.0.0.1:%s/v1/completions" % port, json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
json.dump([c["text"] for c in json.load(urllib.request.urlopen(req, timeout=60))["choices"]], open(out, "w"))
PY
        pids+=($!)
    done < "$T/prompts"
    wait "${pids[@]}"
    i=0
    while read -r p; do
        i=$((i + 1))
        if [ "${p#Lily}" != "$p" ]; then
            "$XLLM" run -m "$S" --prompts <(echo "$p") -n 20 --temp 0.8 --top-p 1 --seed 11 --samples 2 --json -t 1 2> /dev/null
        else
            "$XLLM" run -m "$S" -p "$p" -n 20 --temp 0 --json -t 1 2> /dev/null
        fi | python3 -c "import json,sys; print(json.dumps([json.loads(l)['text'] for l in sys.stdin]))" > "$T/r$i.json"
        python3 -c "import json,sys; sys.exit(json.load(open(sys.argv[1])) != json.load(open(sys.argv[2])))" \
            "$T/s$i.json" "$T/r$i.json" 2> /dev/null || { ok=0; echo "   '$p': $(cat "$T/s$i.json" 2>&1) vs $(cat "$T/r$i.json")"; }
    done < "$T/prompts"
else
    ok=0
    tail -5 "$T/serve.err"
fi
[ $ok = 1 ]
check $? "serve, 2 ranks: $(wc -l < "$T/prompts") concurrent requests (one with n=2, seeded) get the single-process text"
# SIGTERM to rank 0 (the server): it shuts down and ends the pipeline, rank 1 returns from its
# stage, both print their stats and exit 0, and so does mpirun
r0=$(rank_pid $sp 0)
[ -n "$r0" ] && kill -TERM "$r0"
wait $sp; rc=$?
[ -n "$r0" ] && [ $rc = 0 ] && grep -q "shutting down" "$T/serve.err" && [ "$(grep -c "^xllm: pp rank" "$T/serve.err")" = 2 ]
st=$?
[ $st != 0 ] && tail -5 "$T/serve.err"
check $st "serve, 2 ranks: SIGTERM to rank 0 stops every rank cleanly (mpirun exit $rc)"

# refusals: a clear message, every rank ends
RUN=("$XLLM" run -m "$S" -p "Once" -n 4 -t 1 --quiet)
# (every wrong split is in test_model_parts; here: that all ranks stop)
for bad in "2 --pp-layers 3,3:sums to 6 layers" "3 --pp-layers 1,x,3:whole numbers"; do
    args=${bad%%:*}; key=${bad#*:}; n=${args%% *}
    timeout -k 10 60 "${MPIRUN[@]}" -np "$n" "${RUN[@]}" --pp $args > "$T/out" 2> "$T/err"; rc=$?
    [ $rc != 0 ] && [ $rc != 124 ] && grep -q "$key" "$T/err"
    check $? "--pp $args: refused ($(grep -m1 -o "error: .*" "$T/err" | head -c 150))"
done
timeout -k 10 60 "${MPIRUN[@]}" -np 2 "${RUN[@]}" --pp 3 > "$T/out" 2> "$T/err"; rc=$?
[ $rc != 0 ] && [ $rc != 124 ] && grep -q "the MPI job has 2 processes" "$T/err"
check $? "--pp 3 in a job of 2: refused"

# failures end the job, with a message, in bounded time
fail_case() {
    local name=$1 key=$2; shift 2
    local t0=$SECONDS
    timeout -k 10 60 "${MPIRUN[@]}" -np 2 "$XLLM" run -m "$S" --prompts "$T/prompts" -n 200 -t 1 --pp 2 "$@" > "$T/out" 2> "$T/err"
    local rc=$? dt=$((SECONDS - t0))
    [ $rc != 0 ] && [ $rc != 124 ] && grep -q "$key" "$T/err"
    check $? "$name: the job ends with an error in ${dt} s (exit $rc; $(grep -m1 -o "xllm: error: .*" "$T/err" | head -c 160))"
    [ $rc = 124 ] && tail -5 "$T/err"
}
fail_case "rank 1 exits after 3 steps" "error: pipeline" --pp-test-fail-after 3
fail_case "rank 1 hangs after 3 steps (timeout 2 s)" "rank 1 did not answer within 2000 ms" \
    --pp-test-fail-after 3 --pp-test-hang --pp-timeout 2

# kill -9 of rank 1 while it runs
for _ in 1 2 3 4 5 6; do cat "$T/prompts"; done > "$T/many"
t0=$SECONDS
timeout -k 10 60 "${MPIRUN[@]}" -np 2 "$XLLM" run -m "$S" --prompts "$T/many" -n 480 -c 512 --ignore-eos -t 1 --pp 2 \
    > "$T/out" 2> "$T/err" &
mp=$!
victim=""
for _ in $(seq 100); do
    victim=$(rank_pid $mp 1)
    [ -n "$victim" ] && break
    sleep 0.1
done
sleep 1
[ -n "$victim" ] && kill -9 "$victim"
wait $mp; rc=$?; dt=$((SECONDS - t0))
[ -n "$victim" ] && [ $rc != 0 ] && [ $rc != 124 ] && grep -q "error: pipeline\|exited on signal 9" "$T/err"
check $? "kill -9 of rank 1: the job ends with an error in ${dt} s (exit $rc)"

[ $fails -eq 0 ]
