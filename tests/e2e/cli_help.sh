#!/usr/bin/env bash
# cli_help.sh - the command line as documented: every subcommand answers
# --help (synopsis, options with defaults, an example); every option its help
# names is one the parser accepts, and every option the overview (`xllm
# --help`) shows for it is in its help; unknown commands and options, and
# missing or unrecognized models, get the one wording each; run's notices and
# summary line, the llama.cpp spellings, and the default model from anywhere.
# usage: cli_help.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$(cd "$(dirname "$1")" && pwd)/$(basename "$1"); SRC=$2
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib/common.bash"
fails=0
S=$SRC/models/stories260k
CMDS="run logits tokenize template eval convert info synth bench"

"$XLLM" --help > "$T/usage" 2> "$T/usage.err"
[ $? = 0 ] && [ ! -s "$T/usage.err" ] && grep -q "^usage: xllm COMMAND" "$T/usage"
check $? "xllm --help: the overview on stdout"
# the defaults a user asks about first are in the overview
grep -q -- "-n 256" "$T/usage" && grep -q -- "--temp 0.8" "$T/usage" && grep -q -- "--top-p 0.9" "$T/usage"
check $? "xllm --help shows run's defaults (256 tokens, temperature 0.8, top-p 0.9)"

for c in $CMDS; do
    "$XLLM" $c --help > "$T/h.$c" 2> "$T/h.$c.err"; rc=$?
    [ $rc = 0 ] && [ ! -s "$T/h.$c.err" ] && grep -q "^usage: xllm $c" "$T/h.$c" && grep -q "^example:" "$T/h.$c" &&
        grep -q "^  xllm $c " "$T/h.$c"
    check $? "xllm $c --help: synopsis, options and an example"
    "$XLLM" $c -h | cmp -s - "$T/h.$c" && "$XLLM" help $c | cmp -s - "$T/h.$c"
    check $? "xllm $c -h and xllm help $c are the same"

    # the options the overview shows for this command: all in its help
    awk -v c="$c" '$1 == c {on = 1; print; next} on && /^  [a-z]/ {on = 0} on && /^ +\[|^ +-/ {print} on && /^$/ {on = 0}' \
        "$T/usage" | grep -oE -- '(^|[[ ])--?[a-z][a-z0-9-]*' | tr -d '[ ' | sort -u > "$T/o.$c"
    missing=""
    while read -r o; do grep -qE -- "(^|[ ,\[])$o([ ,=]|\$)" "$T/h.$c" || missing="$missing $o"; done < "$T/o.$c"
    [ -s "$T/o.$c" ] && [ -z "$missing" ]
    check $? "xllm $c: the overview's options are in its help ($(wc -l < "$T/o.$c") checked)${missing:+; missing:$missing}"

    # every option the help lists is accepted by the parser
    grep -oE -- '^  (-[a-z], )?--?[a-z][a-z0-9-]*|also --?[a-z][a-z0-9-]*' "$T/h.$c" | grep -oE -- '--?[a-z][a-z0-9-]*' |
        sort -u > "$T/l.$c"
    bad=""
    while read -r o; do
        (cd "$T" && timeout 60 "$XLLM" $c "$o" 4 > /dev/null 2> "$T/e") < /dev/null
        grep -q "unknown option for $c: $o " "$T/e" && bad="$bad $o"
    done < "$T/l.$c"
    [ "$(wc -l < "$T/l.$c")" -ge 2 ] && [ -z "$bad" ]
    check $? "xllm $c: each of the $(wc -l < "$T/l.$c") options its help lists is accepted${bad:+; rejected:$bad}"

    expect_fail "xllm $c: unknown option" "unknown option for $c: --frobnicate (see 'xllm $c --help')" "$XLLM" $c --frobnicate
done

# run's help gives every default
for d in "default: 256" "default: 0.8" "default: 0.9" "default: 0)" "default: random" "default: all online CPUs"; do
    grep -qF "$d" "$T/h.run" || { echo "   run --help lacks '$d'"; false; }
done
check $? "xllm run --help states the defaults"

# an unknown command: says which, points to --help, and does not dump the usage
"$XLLM" frobnicate > "$T/out" 2> "$T/err"; rc=$?
[ $rc = 1 ] && [ ! -s "$T/out" ] && [ "$(wc -l < "$T/err")" = 1 ] &&
    grep -q "^xllm: error: unknown command \"frobnicate\" (.*see 'xllm --help')" "$T/err"
check $? "unknown command: one line naming it and pointing to --help"

# one wording for a missing model and for a path that is not a model, in every command that takes one
FORMATS="a model is a HuggingFace checkpoint directory (config.json + \*.safetensors), an .xllm file or a GGUF file"
mkdir "$T/empty"; echo "not a model" > "$T/text.txt"
for form in "run -m @" "logits -m @ --ids 1" "eval -m @ --text $T/text.txt" "convert @ -o $T/x.xllm" "info @" \
            "info @ --plan" "bench -m @" "tokenize -m @ --jsonl $T/text.txt"; do
    args=${form//@/$T/no-such-model}
    expect_fail "missing model: xllm $args" "^xllm: error: $T/no-such-model: no such model; $FORMATS\$" "$XLLM" $args
    [ "${form%% *}" = tokenize ] && continue
    args=${form//@/$T/empty}
    expect_fail "not a model (empty dir): xllm $args" "^xllm: error: $T/empty: not a model; $FORMATS\$" "$XLLM" $args
    args=${form//@/$T/text.txt}
    expect_fail "not a model (text file): xllm $args" "^xllm: error: $T/text.txt: not a model; $FORMATS\$" "$XLLM" $args
done
expect_fail "a bad flag value" "^xllm: error: -n needs an integer from 0 to 1073741824, got \"many\"\$" "$XLLM" run -m "$S" -n many
expect_fail "a flag without its value" "^xllm: error: -o needs a value\$" "$XLLM" convert "$S" -o

# tokenize reads the tokenizer inside a GGUF (or .xllm) model: the same ids as the directory's tokenizer.json
"$XLLM" tokenize -m "$SRC/tests/data/gguf/stories260k.gguf" --jsonl "$SRC/tests/data/tokenizers/corpus.jsonl" > "$T/tg" &&
    "$XLLM" tokenize -m "$S" --jsonl "$SRC/tests/data/tokenizers/corpus.jsonl" > "$T/td" && [ -s "$T/tg" ] &&
    python3 -c "
import json, sys
a = [json.loads(l)['ids'] for l in open(sys.argv[1])]; b = [json.loads(l)['ids'] for l in open(sys.argv[2])]
assert a == b and len(a) > 10" "$T/tg" "$T/td"
check $? "tokenize -m MODEL.gguf: the model's own tokenizer"

# run: the summary line on stderr (llama.cpp-like), dropped by --quiet; stdout stays the text
"$XLLM" run -m "$S" -p "Once upon a time" -n 8 --temp 0 > "$T/out" 2> "$T/err"
[ $? = 0 ] && grep -qE "^xllm: prompt [0-9]+ tokens \([0-9.]+ tokens/s\) \| generated 8 tokens \([0-9.]+ tokens/s\) \| load [0-9.]+ s" "$T/err" &&
    ! grep -q "xllm:" "$T/out"
check $? "run: a summary line on stderr ($(head -1 "$T/err"))"
# the generation rate comes from the engine's own timestamps: never an impossible figure
# (the callbacks can arrive in a burst: 20,270,270 tokens/s was once printed for 40 tokens)
ok=0
for _ in 1 2 3 4; do
    "$XLLM" run -m "$S" -p "Once upon a time" -n 40 --temp 0 --json > /dev/null 2> "$T/err3" || ok=1
    r=$(sed -n 's/.*generated 40 tokens (\([0-9.]*\) tokens\/s).*/\1/p' "$T/err3")
    python3 -c "import sys; sys.exit(0 if 0 < float('${r:-0}') < 1e6 else 1)" || ok=1
done
check $ok "run: the generation rate is a possible one, 4 runs ($(head -1 "$T/err3"))"
"$XLLM" run -m "$S" -p "Once upon a time" -n 8 --temp 0 --quiet > "$T/out2" 2> "$T/err2"
[ $? = 0 ] && [ ! -s "$T/err2" ] && cmp -s "$T/out" "$T/out2"
check $? "run --quiet: nothing on stderr, the same text"

# a silent cap made visible: -n beyond what the context leaves
"$XLLM" run -m "$S" --ids 1,403 -n 600 --temp 0 --ignore-eos --json > "$T/cap.json" 2> "$T/err"
[ $? = 0 ] && grep -q "^xllm: note: -n 600 is more than the context leaves: at most 510 tokens will be generated (context 512" "$T/err" &&
    python3 -c "import json,sys; assert len(json.load(open(sys.argv[1]))['ids']) == 510" "$T/cap.json"
check $? "run: -n beyond the context is a one-line notice, and the cap is what it says"

# llama.cpp spellings: -c/--ctx-size, --n-predict, --threads; --enable-kernel-profiling = --profile
"$XLLM" run -m "$S" --ids 1 --n-predict 100 --ctx-size 32 --threads 1 --temp 0 --ignore-eos --json > "$T/c.json" 2> "$T/err" &&
    python3 -c "import json,sys; assert len(json.load(open(sys.argv[1]))['ids']) == 31" "$T/c.json" &&
    grep -q "note: -n 100 is more than the context leaves: at most 31 tokens will be generated (context 32" "$T/err"
check $? "run: --ctx-size 32 --n-predict 100 generates 31 tokens, with the notice"
"$XLLM" run -m "$S" --ids 1 -c 16 -n 4 --temp 0 --quiet > /dev/null
check $? "run: -c"
"$XLLM" run -m "$S" --ids 1 -c 1024 -n 2 --temp 0 2> "$T/err" > /dev/null &&
    grep -q "^xllm: note: -c 1024 is beyond the 512 positions the model was trained on" "$T/err"
check $? "run: -c beyond the trained context is a notice"
(cd "$T" && "$XLLM" run -m "$S" --ids 1 -n 4 --quiet --enable-kernel-profiling > /dev/null 2> "$T/err") &&
    python3 -c "import json,sys; assert json.load(open(sys.argv[1]))['ops']" "$T/xllm-profile.json" && grep -q "kernel profile" "$T/err"
check $? "run --enable-kernel-profiling writes the profile (default file xllm-profile.json)"

# the default model wherever the command runs, and options without a command are run's
(cd / && "$XLLM" run -n 4 --ids 1 --quiet > /dev/null) && (cd "$T" && "$XLLM" -p "Once" -n 4 --quiet > /dev/null)
check $? "run without -m from / and from a temporary directory; xllm -p ... is xllm run -p ..."
expect_fail "XLLM_MODEL that does not exist" "no such model" env XLLM_MODEL="$T/nope" "$XLLM" run -n 1

[ $fails -eq 0 ]
