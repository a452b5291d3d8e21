#!/usr/bin/env bash
# template_cli.sh - the `xllm template` command and `xllm run --chat`:
#  - prints exactly the rendered text (no newline added), with --var,
#    --tools, --add-generation-prompt, --template NAME, --chat-template FILE;
#  - a bad template or bad input is "xllm: error: ..." and status 1;
#  - run --chat renders -p as one user message with the generation prompt and
#    tokenizes it WITHOUT adding special tokens (HF's apply_chat_template with
#    tokenize=True): its prompt ids are those of the rendered text, BOS once.
# usage: template_cli.sh XLLM_BINARY SOURCE_DIR BUILD_DIR
set -u
XLLM=$1; SRC=$2
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fails=0
check() { if [ "$1" = 0 ]; then echo "ok   $2"; else echo "FAIL $2"; fails=$((fails+1)); fi; }

# a model directory: stories260k with a chat template
M="$T/model"; mkdir "$M"
for f in "$SRC"/models/stories260k/*; do
    [ "$(basename "$f")" = tokenizer_config.json ] || ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$M/"
done
python3 - "$SRC/models/stories260k/tokenizer_config.json" "$M/tokenizer_config.json" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["chat_template"] = [
    {"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.role|upper }}: {{ m.content }}\n{% endfor %}"
                                    "{% if add_generation_prompt %}STORY:{% endif %}{% if style is defined %}[{{ style }}]{% endif %}"},
    {"name": "tool_use", "template": "TOOLS {{ tools|map(attribute='name')|join(',') }} {{ messages|length }}"},
]
json.dump(cfg, open(sys.argv[2], "w"))
PY
printf '[{"role": "user", "content": "Once upon a time"}]' > "$T/msgs.json"
printf '[{"name": "draw"}, {"name": "sing"}]' > "$T/tools.json"

"$XLLM" template -m "$M" --messages "$T/msgs.json" > "$T/out1"
printf '<s>USER: Once upon a time\n' | cmp -s - "$T/out1"
check $? "template prints exactly the rendered text"

"$XLLM" template -m "$M" --messages "$T/msgs.json" --add-generation-prompt --var 'style="funny"' > "$T/out2"
printf '<s>USER: Once upon a time\nSTORY:[funny]' | cmp -s - "$T/out2"
check $? "template --add-generation-prompt --var, no newline appended"

"$XLLM" template -m "$M" --messages "$T/msgs.json" --tools "$T/tools.json" > "$T/out3"
printf 'TOOLS draw,sing 1' | cmp -s - "$T/out3"
check $? "template --tools picks the tool_use template"

"$XLLM" template -m "$M" --messages - --template tool_use --var 'tools=[]' < "$T/msgs.json" > "$T/out4"
printf 'TOOLS  1' | cmp -s - "$T/out4"
check $? "template --template NAME, messages from stdin"

printf '{%% for m in messages %%}{{ m.content|upper }}{%% endfor %%}\n' > "$T/t.jinja"
"$XLLM" template --chat-template "$T/t.jinja" --messages "$T/msgs.json" > "$T/out5"
printf 'ONCE UPON A TIME' | cmp -s - "$T/out5"
check $? "template --chat-template FILE (one trailing newline of the file dropped, as Jinja2 does)"

printf 'line one\n{{ messages|nope }}' > "$T/bad.jinja"
"$XLLM" template --chat-template "$T/bad.jinja" --messages "$T/msgs.json" > "$T/bad.out" 2> "$T/bad.err"
rc=$?
[ $rc = 1 ] && [ ! -s "$T/bad.out" ] && grep -q "xllm: error: chat template line 2: unknown filter 'nope'" "$T/bad.err"
check $? "a bad template is an error naming the line"

printf '[{"role": "user"' > "$T/badmsgs.json"
"$XLLM" template -m "$M" --messages "$T/badmsgs.json" > /dev/null 2> "$T/err2"
[ $? = 1 ] && grep -q "messages: invalid JSON" "$T/err2"
check $? "malformed messages JSON is an error"

"$XLLM" template -m "$M" --messages "$T/msgs.json" --var 'x=not json' > /dev/null 2> "$T/err3"
[ $? = 1 ] && grep -q "must be one JSON value" "$T/err3"
check $? "a --var that is not JSON is an error"

"$XLLM" template -m "$SRC/tests/data/tiny/llama" --messages "$T/msgs.json" > /dev/null 2> "$T/err4"
[ $? = 1 ] && grep -q "no chat template" "$T/err4"
check $? "a model without a chat template is an error"

"$XLLM" template -m "$M" > /dev/null 2>&1
[ $? = 1 ]
check $? "template without --messages is an error"

# run --chat: prompt ids = tokenize(rendered text) without special tokens
"$XLLM" run -m "$M" --chat -p "Once upon a time" -n 8 --temp 0 --json > "$T/run.json"
"$XLLM" template -m "$M" --messages "$T/msgs.json" --add-generation-prompt > "$T/prompt.txt"
python3 -c "import json,sys; print(json.dumps({'text': open(sys.argv[1], encoding='utf-8').read()}))" "$T/prompt.txt" > "$T/prompt.jsonl"
"$XLLM" tokenize -m "$M" --jsonl "$T/prompt.jsonl" > "$T/tok.jsonl"
python3 - "$T/run.json" "$T/tok.jsonl" <<'PY'
import json, sys
run = json.load(open(sys.argv[1])); tok = json.loads(open(sys.argv[2]).readline())
assert run["prompt_ids"] == tok["ids_no_special"], (run["prompt_ids"], tok["ids_no_special"])
assert run["prompt_ids"].count(1) == 1 and run["prompt_ids"][0] == 1, run["prompt_ids"]  # BOS once, from the template
assert len(run["ids"]) == 8
PY
check $? "run --chat tokenizes the rendered prompt without adding BOS again"

"$XLLM" run -m "$M" --chat --messages "$T/msgs.json" -n 8 --temp 0 --json > "$T/run2.json"
cmp -s "$T/run.json" "$T/run2.json"
check $? "run --chat --messages FILE gives the same"

"$XLLM" run -m "$M" --var 'a=1' -p x -n 1 > /dev/null 2>&1
[ $? = 1 ]
check $? "template options without --chat are an error"

echo "template_cli: $fails failed"
[ "$fails" = 0 ]
