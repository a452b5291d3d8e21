"""python -m xllm (run and chat, as the command line's) and LLM.profile() /
xllm.profile_report(): standard library only."""
import json
import os
import subprocess
import sys
import unittest

import xllm
from xllm import LLM

SRC = os.environ.get("XLLM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
STORIES = os.path.join(SRC, "models", "stories260k")
PYDIR = os.path.join(SRC, "python")


def run_module(*args, stdin=None):
    env = dict(os.environ, PYTHONPATH=PYDIR)
    return subprocess.run([sys.executable, "-m", "xllm"] + list(args), input=stdin, capture_output=True, text=True,
                          env=env, timeout=120)


class TestMain(unittest.TestCase):
    def test_run_matches_generate(self):
        r = run_module("run", "-m", STORIES, "-p", "Once upon a time", "-n", "12", "--temp", "0", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        got = json.loads(r.stdout)
        want = LLM(STORIES).generate("Once upon a time", max_new_tokens=12, do_sample=False)[0]
        self.assertEqual(got["ids"], want.token_ids)
        self.assertEqual(got["text"], want.text)
        self.assertRegex(r.stderr, r"^xllm: prompt \d+ tokens \([0-9.]+ tokens/s\) \| generated 12 tokens")

    def test_run_default_model_and_quiet(self):
        r = run_module("run", "-p", "Once upon a time", "-n", "5", "--quiet")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        self.assertTrue(r.stdout.strip())

    def test_chat_one_turn_and_stdin(self):
        r = run_module("chat", "-m", STORIES, "-p", "Once upon a time", "-n", "8", "--temp", "0", "--json", "--quiet")
        self.assertEqual(r.returncode, 0, r.stderr)
        want = LLM(STORIES).chat([{"role": "user", "content": "Once upon a time"}],
                                 xllm.SamplingParams(max_new_tokens=8, do_sample=False))
        self.assertEqual(json.loads(r.stdout)["ids"], want.token_ids)
        r = run_module("chat", "-m", STORIES, "-n", "4", "--temp", "0", "--quiet", stdin="Once upon a time\nThe dog\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(r.stdout.strip().splitlines()), 2)

    def test_errors(self):
        r = run_module("run", "-m", os.path.join(SRC, "no-such-model"), "-p", "x")
        self.assertEqual(r.returncode, 1)
        self.assertTrue(r.stderr.startswith("xllm: error: "), r.stderr)
        self.assertIn("no-such-model", r.stderr)
        with self.assertRaises(xllm.XLLMError) as cm:
            xllm.ModelConverter.info(os.path.join(SRC, "no-such-model"))
        self.assertIn("no-such-model: no such model; a model is a HuggingFace checkpoint directory "
                      "(config.json + *.safetensors), an .xllm file or a GGUF file", str(cm.exception))
        r = run_module("frobnicate")
        self.assertEqual(r.returncode, 2)  # argparse: names the bad choice
        self.assertIn("frobnicate", r.stderr)

    def test_help(self):
        r = run_module("run", "--help")
        self.assertEqual(r.returncode, 0)
        for opt in ("--max-new-tokens", "--ctx-size", "--temp", "--top-p", "default: 256", "default: 0.8"):
            self.assertIn(opt, r.stdout)


class TestProfile(unittest.TestCase):
    def test_profile_report(self):
        llm = LLM(STORIES)
        xllm.enable_profiling()
        llm.generate("Once upon a time", max_new_tokens=10, do_sample=False)
        rep = llm.profile(reset=True)
        ops = {o["op"]: o for o in rep["ops"]}
        self.assertGreater(rep["total_ms"], 0)
        self.assertIn("lm_head", ops)
        self.assertEqual(ops["lm_head"]["calls"], 10)  # one per step: the prefill, then 9 decode steps
        self.assertEqual(llm.profile()["ops"], [])   # reset
        xllm.enable_profiling(False)
        llm.close()
        with self.assertRaises(xllm.XLLMError):
            llm.profile()


if __name__ == "__main__":
    unittest.main()
