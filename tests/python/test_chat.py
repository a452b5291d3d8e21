"""Chat templates from Python: ChatTemplate / render_chat_template on the
committed real templates (Qwen3, DeepSeek-V3) against their Jinja2-rendered
cases, and LLM.chat / LLM.apply_chat_template on stories260k given a chat
template (standard library only)."""
import json
import os
import shutil
import tempfile
import unittest

from xllm import LLM, ChatTemplate, SamplingParams, XLLMError, render_chat_template

SRC = os.environ.get("XLLM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
TEMPLATES = os.path.join(SRC, "tests", "data", "templates")
STORIES = os.path.join(SRC, "models", "stories260k")

TOY_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}{{ m.content }} "
                "{% else %}{{ m.role|capitalize }}: {{ m.content|trim }}\n{% endif %}{% endfor %}"
                "{% if add_generation_prompt %}Story:{% endif %}")


class TestChatTemplate(unittest.TestCase):
    def check_cases(self, name):
        t = ChatTemplate(os.path.join(TEMPLATES, name))
        n = 0
        with open(os.path.join(TEMPLATES, name, "cases.jsonl"), encoding="utf-8") as f:
            for line in f:
                case = json.loads(line)
                text = t.apply(case["messages"], add_generation_prompt=case["add_generation_prompt"],
                               tools=case.get("tools"), **case.get("vars", {}))
                self.assertEqual(text, case["expected"], case["name"])
                n += 1
        self.assertGreaterEqual(n, 10)
        t.close()

    def test_qwen3_cases(self):
        self.check_cases("qwen3")

    def test_deepseek_cases(self):
        self.check_cases("deepseek_v3")

    def test_special_tokens_and_source(self):
        t = ChatTemplate(os.path.join(TEMPLATES, "qwen3"))
        self.assertEqual(t.special_token("eos_token"), "<|im_end|>")
        self.assertIsNone(t.special_token("bos_token"))
        self.assertIn("<|im_start|>", t.source())
        # a template string instead of the model's own
        self.assertEqual(t.apply([{"role": "user", "content": "x"}], chat_template="{{ eos_token }}{{ messages|length }}"),
                         "<|im_end|>1")

    def test_render_string(self):
        msgs = [{"role": "user", "content": "Grüße 👋", "n": 1.0}]
        self.assertEqual(render_chat_template("{{ messages[0].content }}|{{ messages[0].n }}|{{ add_generation_prompt }}",
                                              msgs, add_generation_prompt=True), "Grüße 👋|1.0|True")
        self.assertEqual(render_chat_template("{{ messages|tojson }}", msgs),
                         json.dumps(msgs, ensure_ascii=False))

    def test_errors(self):
        with self.assertRaises(XLLMError) as cm:
            render_chat_template("{{ raise_exception('roles must alternate') }}", [])
        self.assertIn("roles must alternate", str(cm.exception))
        with self.assertRaises(XLLMError) as cm:
            render_chat_template("line1\n{{ x|nope }}", [])
        self.assertIn("chat template line 2: unknown filter 'nope'", str(cm.exception))
        with self.assertRaises(XLLMError):
            ChatTemplate(os.path.join(SRC, "tests", "data", "no_such_dir"))


class TestChat(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # stories260k with a chat template beside it (the model has none of its own)
        cls.dir = tempfile.mkdtemp()
        for f in os.listdir(STORIES):
            if f != "tokenizer_config.json":
                os.symlink(os.path.abspath(os.path.join(STORIES, f)), os.path.join(cls.dir, f))
        with open(os.path.join(STORIES, "tokenizer_config.json")) as f:
            cfg = json.load(f)
        cfg["chat_template"] = TOY_TEMPLATE
        with open(os.path.join(cls.dir, "tokenizer_config.json"), "w") as f:
            json.dump(cfg, f)
        cls.llm = LLM(cls.dir)

    @classmethod
    def tearDownClass(cls):
        cls.llm.close()
        shutil.rmtree(cls.dir)

    def test_apply_chat_template(self):
        msgs = [{"role": "system", "content": "Tell a story."}, {"role": "user", "content": "  a cat  "}]
        self.assertEqual(self.llm.apply_chat_template(msgs), "<s>Tell a story. User: a cat\n")
        self.assertEqual(self.llm.apply_chat_template(msgs, add_generation_prompt=True),
                         "<s>Tell a story. User: a cat\nStory:")

    def test_chat_tokenizes_without_adding_bos_again(self):
        msgs = [{"role": "user", "content": "Once upon a time"}]
        sp = SamplingParams(max_new_tokens=20, do_sample=False)
        out = self.llm.chat(msgs, sp)
        self.assertEqual(out.prompt, "<s>User: Once upon a time\nStory:")
        ids = self.llm.tokenize(out.prompt, add_special_tokens=False)
        self.assertEqual(out.prompt_token_ids, ids)
        self.assertEqual(ids.count(1), 1)  # the template's <s>, once
        self.assertEqual(out.token_ids, self.llm.generate([ids], sp)[0].token_ids)
        batch = self.llm.chat([msgs, msgs], sp)
        self.assertEqual([o.token_ids for o in batch], [out.token_ids, out.token_ids])

    def test_model_without_template(self):
        llm = LLM(os.path.join(SRC, "tests", "data", "tiny", "llama"))  # no chat template
        with self.assertRaises(XLLMError):
            llm.chat([{"role": "user", "content": "hi"}])
        llm.close()

    def test_stories_plain_template(self):
        # the bundled model's own chat_template.jinja: BOS, then the messages' text
        llm = LLM(STORIES)
        msgs = [{"role": "user", "content": " Once upon a time "}, {"role": "assistant", "content": "there was"}]
        self.assertEqual(llm.apply_chat_template(msgs, add_generation_prompt=True), "<s>Once upon a time there was")
        sp = SamplingParams(max_new_tokens=6, do_sample=False)
        out = llm.chat(msgs[:1], sp)
        self.assertEqual(out.token_ids, llm.generate("Once upon a time", sp)[0].token_ids)
        llm.close()


if __name__ == "__main__":
    unittest.main()
