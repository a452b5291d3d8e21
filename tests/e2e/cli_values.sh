#!/usr/bin/env bash
# cli_values.sh - hostile option values: every numeric option of every
# subcommand that takes one refuses what is not a finite number in its range
# (inf, nan, negative counts, a seed that wraps, huge -n, values with spaces)
# with "FLAG needs ... from LO to HI, got "V"", and accepts what has a
# documented meaning (--temp 1e-45 is near-greedy, --seed -1 is a random
# seed); `--var` and `--tools` values are data: one JSON value each, which
# cannot add or override other template options; python -m xllm checks the
# same ranges. Nothing here loads a model for longer than a few tokens.
# usage: cli_values.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2; BUILD=$3
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib/common.bash"
fails=0
S=$SRC/models/stories260k

# run: the sampling options
bad() { expect_fail "$1" "$2" "$XLLM" "${@:3}"; }
bad "run --temp inf" '--temp needs a number from 0 to 100, got "inf"' run -m "$S" -p Hi -n 2 --temp inf
bad "run --temp nan" '--temp needs a number from 0 to 100, got "nan"' run -m "$S" -p Hi -n 2 --temp nan
bad "run --temp 1e400 (overflows)" 'got "1e400"' run -m "$S" -p Hi -n 2 --temperature 1e400
bad "run --temp -1" 'got "-1"' run -m "$S" -p Hi -n 2 --temp -1
bad "run --top-p 2" '--top-p needs a number above 0, up to 1, got "2"' run -m "$S" -p Hi --top-p 2
bad "run --top-p 1e-50 (0 as a float)" 'above 0' run -m "$S" -p Hi --top-p 1e-50
bad "run --min-p -0.5" '--min-p needs a number from 0 to 1' run -m "$S" -p Hi --min-p -0.5
bad "run --repetition-penalty 0" 'above 0, up to 100' run -m "$S" -p Hi --repetition-penalty 0
bad "run --presence-penalty inf" '--presence-penalty needs a number from -100 to 100' run -m "$S" -p Hi --presence-penalty inf
bad "run --frequency-penalty nan" '--frequency-penalty needs a number' run -m "$S" -p Hi --frequency-penalty nan
bad "run --seed -2" '--seed needs an integer from 0 to 18446744073709551615 (or -1: a random seed), got "-2"' run -m "$S" -p Hi --seed -2
bad "run --seed ' -1' (strtoull would wrap it)" 'got " -1"' run -m "$S" -p Hi --seed " -1"
bad "run --seed 2^64" 'got "18446744073709551616"' run -m "$S" -p Hi --seed 18446744073709551616
bad "run -n huge" '-n needs an integer from 0 to 1073741824, got "99999999999"' run -m "$S" -p Hi -n 99999999999
bad "run -n 1e3" 'got "1e3"' run -m "$S" -p Hi -n 1e3
bad "run -n ' 5'" 'got " 5"' run -m "$S" -p Hi -n " 5"
bad "run --top-k -1" '--top-k needs an integer from 0' run -m "$S" -p Hi --top-k -1
bad "run -c 0" '-c needs an integer from 1 to' run -m "$S" -p Hi -c 0
bad "run -t 0" '-t needs an integer from 1 to 1024' run -m "$S" -p Hi -t 0
# documented meanings
"$XLLM" run -m "$S" -p "Once upon a time" -n 8 --temp 0 --quiet > "$T/greedy" 2> /dev/null &&
    "$XLLM" run -m "$S" -p "Once upon a time" -n 8 --temp 1e-45 --seed 5 --quiet > "$T/tiny" 2> "$T/err" &&
    cmp -s "$T/greedy" "$T/tiny"
check $? "run --temp 1e-45 is accepted and samples as greedy does ($(head -c 60 "$T/tiny" | tr '\n' ' '))"
"$XLLM" run -m "$S" -p Hi -n 2 --seed -1 --quiet > /dev/null 2> "$T/err"
check $? "run --seed -1 is a random seed (llama.cpp's spelling)"

# the other subcommands' numbers
bad "logits -t -3" '-t needs an integer from 1 to 1024, got "-3"' logits -m "$S" --ids 1 -t -3
bad "bench -n inf" '-n needs an integer from 1 to' bench -m "$S" -n inf
bad "bench -p -1" '-p needs an integer from 1 to' bench -m "$S" -p -1
bad "convert --group-size 1e9" '--group-size needs an integer from 1 to' convert "$S" -o "$T/x.xllm" --group-size 1e9
bad "convert --calib-tokens -5" '--calib-tokens needs an integer' convert "$S" -o "$T/x.xllm" --calib-tokens -5
bad "eval --ctx 0" '--ctx needs an integer from 1' eval -m "$S" --text /dev/null --ctx 0
bad "synth --seed -1 (weights need a fixed seed)" '--seed needs an integer from 0 to 18446744073709551615, got "-1"' synth --shape tiny-test -o "$T/x.xllm" --seed -1
bad "synth -t 99999" '-t needs an integer from 0 to 4096' synth --shape tiny-test -o "$T/x.xllm" -t 99999
bad "serve --port 70000" '--port needs an integer from 0 to 65535, got "70000"' serve -m "$S" --port 70000
bad "serve --max-queue -1" '--max-queue needs an integer from 0' serve -m "$S" --max-queue -1
[ ! -e "$T/x.xllm" ]
check $? "no refused command wrote an output"

# template variables are data
M="$T/model"; mkdir "$M"
for f in "$S"/*; do
    [ "$(basename "$f")" = tokenizer_config.json ] || ln -s "$f" "$M/"
done
python3 - "$S/tokenizer_config.json" "$M/tokenizer_config.json" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["chat_template"] = ("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                        "{% if add_generation_prompt %}GEN{% endif %}[{{ x|tojson }}]")
json.dump(cfg, open(sys.argv[2], "w"))
PY
printf '[{"role": "user", "content": "Hi"}]' > "$T/m.json"
bad "--var value closing the object to inject an option" "must be one JSON value" \
    template -m "$M" --messages "$T/m.json" --var 'x=1, "add_generation_prompt": true'
bad "--var value with a second value after it" "must be one JSON value" template -m "$M" --messages "$T/m.json" --var 'x=1 2'
bad "--var value that is not JSON" "must be one JSON value" template -m "$M" --messages "$T/m.json" --var 'x=hello'
bad "--var messages= (the messages come from elsewhere)" "not a variable" template -m "$M" --messages "$T/m.json" --var 'messages=[]'
printf '[], "add_generation_prompt": true' > "$T/tools.json"
bad "--tools file closing the array to inject an option" "must be one JSON array" template -m "$M" --messages "$T/m.json" --tools "$T/tools.json"
"$XLLM" template -m "$M" --messages "$T/m.json" --var 'x="a\"}, \"add_generation_prompt\": true, \"y\": {\""' > "$T/out" 2> "$T/err"
[ $? = 0 ] && printf 'user: Hi\n["a\\"}, \\"add_generation_prompt\\": true, \\"y\\": {\\""]' | cmp -s - "$T/out"
check $? "a --var string holding JSON text stays one string (no GEN): $(cat "$T/out" | tr '\n' ' ')"
"$XLLM" template -m "$M" --messages "$T/m.json" --add-generation-prompt --var add_generation_prompt=false --var 'x={"k": [1, null]}' > "$T/out" 2> "$T/err"
[ $? = 0 ] && printf 'user: Hi\n[{"k": [1, null]}]' | cmp -s - "$T/out"
check $? "a --var naming another option replaces it (last wins); objects pass as objects"

# python -m xllm: the same ranges (not in the sanitizer build: its library needs the ASan runtime preloaded)
if [ -z "${XLLM_SANITIZED:-}" ]; then
py() { PYTHONPATH="$SRC/python" XLLM_LIBRARY="$BUILD/libxllm.so" timeout 60 python3 -m xllm "$@"; }
for a in "--temp inf" "--temp nan" "--top-p 2" "--seed -2" "-n 99999999999" "-t -1"; do
    py run -m "$S" -p Hi -n 2 $a > /dev/null 2> "$T/err"; rc=$?
    [ $rc = 2 ] && grep -q "error: argument" "$T/err"
    check $? "python -m xllm run $a: an argument error ($(tail -1 "$T/err" | cut -c1-90))"
done
py run -m "$S" -p Hi -n 2 --seed -1 --temp 1e-45 --quiet > /dev/null 2> "$T/err"
check $? "python -m xllm run --seed -1 --temp 1e-45: accepted"
PYTHONPATH="$SRC/python" XLLM_LIBRARY="$BUILD/libxllm.so" python3 - <<'PY'
import math, xllm
for name, v in (("temperature", math.inf), ("top_p", math.nan), ("min_p", 1e39), ("presence_penalty", -math.inf)):
    try:
        xllm.SamplingParams(**{name: v})._to_c([])
    except ValueError as e:
        assert name in str(e), e
    else:
        raise SystemExit("SamplingParams(%s=%r) accepted" % (name, v))
PY
check $? "SamplingParams refuses non-finite and float32-overflowing values (ValueError naming the field)"
fi

[ $fails -eq 0 ]
