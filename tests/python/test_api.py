"""Python API tests: LLM / SamplingParams over libxllm.so (standard library only)."""
import json
import os
import unittest

import xllm
from xllm import LLM, SamplingParams, XLLMError

SRC = os.environ.get("XLLM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
STORIES = os.path.join(SRC, "models", "stories260k")
with open(os.path.join(STORIES, "expected.json")) as _f:
    EXPECTED = json.load(_f)


class TestLLM(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.llm = LLM(STORIES)

    @classmethod
    def tearDownClass(cls):
        cls.llm.close()

    def test_greedy_matches_reference(self):
        out = self.llm.generate("Once upon a time", SamplingParams(max_new_tokens=200, do_sample=False))
        self.assertEqual(len(out), 1)
        self.assertEqual(out[0].prompt_token_ids, EXPECTED["prompt_ids"])
        self.assertEqual(out[0].token_ids, EXPECTED["prompt_greedy_200_ids"])
        self.assertEqual(out[0].text, self.llm.detokenize(out[0].token_ids))
        self.assertEqual(out[0].finish_reason, "length")

    def test_batch_equals_single(self):
        prompts = ["Once upon a time", "The cat", "Lily wanted", "One day, Tom", "The sun was", "A big dog",
                   "She said", "They played"]
        sp = SamplingParams(max_new_tokens=30, do_sample=False)
        batch = self.llm.generate(prompts, sp)
        for p, b in zip(prompts, batch):
            self.assertEqual(self.llm.generate(p, sp)[0].token_ids, b.token_ids)

    def test_set_inference_params(self):
        llm = LLM(STORIES)
        llm.set_inference_params(max_new_tokens=300, repetition_penalty=1.2, do_sample=False, top_k=10)
        a = llm.generate(["Once upon a time"])[0]
        self.assertLessEqual(len(a.token_ids), 300)
        # the penalty changes greedy output relative to the plain greedy reference
        self.assertNotEqual(a.token_ids[:200], EXPECTED["prompt_greedy_200_ids"])
        # and it is deterministic
        self.assertEqual(llm.generate(["Once upon a time"])[0].token_ids, a.token_ids)
        llm.close()

    def test_seed_reproducible(self):
        sp = SamplingParams(max_new_tokens=40, temperature=1.0, top_p=0.9, seed=42)
        a = self.llm.generate("Once upon a time", sp)[0].token_ids
        b = self.llm.generate("Once upon a time", sp)[0].token_ids
        c = self.llm.generate("Once upon a time", sp.replace(seed=43))[0].token_ids
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)

    def test_stop_string(self):
        base = self.llm.generate("Once upon a time", SamplingParams(max_new_tokens=60, do_sample=False))[0]
        cut = base.text.find(".")
        self.assertGreater(cut, 0)
        out = self.llm.generate("Once upon a time", SamplingParams(max_new_tokens=60, do_sample=False, stop=["."]))[0]
        self.assertEqual(out.text, base.text[:cut])
        self.assertEqual(out.finish_reason, "stop")

    def test_stream_callback(self):
        pieces = []
        out = self.llm.generate("Once upon a time", SamplingParams(max_new_tokens=25, do_sample=False),
                                callback=lambda i, tok, text: pieces.append(text))[0]
        self.assertEqual("".join(pieces), out.text)
        self.assertEqual(len(pieces), 25)

    def test_token_ids_prompt(self):
        out = self.llm.generate([EXPECTED["prompt_ids"]], SamplingParams(max_new_tokens=10, do_sample=False))[0]
        self.assertEqual(out.token_ids, EXPECTED["prompt_greedy_200_ids"][:10])

    def test_tokenize_roundtrip(self):
        ids = self.llm.tokenize("Once upon a time")
        self.assertEqual(ids, EXPECTED["prompt_ids"])
        self.assertEqual(self.llm.tokenize("Once upon a time", add_special_tokens=False), ids[1:])
        self.assertEqual(self.llm.detokenize(ids), "Once upon a time")
        # special-token text: a token by default (as HF), plain text with parse_special=False
        self.assertEqual(self.llm.tokenize("<s>hi", add_special_tokens=False).count(1), 1)
        self.assertNotIn(1, self.llm.tokenize("<s>hi", add_special_tokens=False, parse_special=False))

    def test_logits(self):
        last = self.llm.logits(EXPECTED["prompt_ids"])
        self.assertEqual(len(last), self.llm.vocab_size)
        self.assertEqual(max(range(len(last)), key=last.__getitem__), EXPECTED["prompt_greedy_200_ids"][0])

    def test_embed(self):
        ids = EXPECTED["prompt_ids"]
        mean, other = self.llm.embed([ids, "The cat sat"])
        self.assertAlmostEqual(sum(x * x for x in mean), 1.0, places=5)
        # batched = alone; a causal model's first-token state ignores what follows
        alone = self.llm.embed([ids])[0]
        self.assertTrue(all(abs(a - b) < 1e-5 for a, b in zip(mean, alone)))
        cls = self.llm.embed([ids], pooling="cls")[0]
        first = self.llm.embed([ids[:1]])[0]
        self.assertTrue(all(abs(a - b) < 1e-5 for a, b in zip(cls, first)))
        raw = self.llm.embed([ids], pooling="last", normalize=False)[0]
        self.assertGreater(sum(x * x for x in raw), 0)
        with self.assertRaises(ValueError):
            self.llm.embed([ids], pooling="max")
        with self.assertRaises(XLLMError):
            self.llm.embed([[10 ** 6]])

    def test_params_table(self):
        rows = {r["name"]: r for r in xllm.sampling_params_table()}
        self.assertEqual(rows["temperature"]["http"], "temperature")
        self.assertEqual(rows["max_new_tokens"]["http"], "max_tokens")
        self.assertEqual((rows["temperature"]["http_min"], rows["temperature"]["http_max"]), (0.0, 2.0))
        self.assertTrue(rows["top_p"]["min_open"])
        # every float row is a SamplingParams field, and the C struct has it at the table's offset
        for r in rows.values():
            self.assertTrue(hasattr(SamplingParams(), r["name"]) or r["name"] == "do_sample", r["name"])
            self.assertEqual(getattr(xllm._SamplingParams, r["name"]).offset, r["offset"], r["name"])
        p = SamplingParams(temperature=0.25, top_p=0.5)._to_c([])
        self.assertAlmostEqual(p.temperature, 0.25)
        self.assertAlmostEqual(p.top_p, 0.5)

    def test_errors(self):
        with self.assertRaises(XLLMError) as cm:
            LLM(os.path.join(SRC, "no-such-model"))
        self.assertIn("no-such-model", str(cm.exception))
        with self.assertRaises(XLLMError):
            self.llm.generate([[1] * 600], SamplingParams(max_new_tokens=4))
        with self.assertRaises(XLLMError):
            self.llm.generate("hi", SamplingParams(top_p=2.0))
        with self.assertRaises(TypeError):
            self.llm.set_inference_params(no_such_param=1)

    def test_callback_exception_propagates(self):
        def boom(i, tok, text):
            raise ValueError("boom")
        with self.assertRaises(ValueError):
            self.llm.generate("Once", SamplingParams(max_new_tokens=5), callback=boom)


class TestTinyModels(unittest.TestCase):
    def test_every_architecture_greedy(self):
        for arch in ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
            d = os.path.join(SRC, "tests", "data", "tiny", arch)
            with open(os.path.join(d, "expected.json")) as f:
                exp = json.load(f)
            with LLM(d) as llm:
                out = llm.generate([exp["input_ids"]], SamplingParams(max_new_tokens=24, do_sample=False,
                                                                      ignore_eos=True))[0]
                self.assertEqual(out.token_ids, exp["greedy_24"], arch)


if __name__ == "__main__":
    unittest.main()


class TestBackend(unittest.TestCase):
    """backend= / device= and xllm.devices() (docs/VULKAN.md)."""

    def test_devices_lists_backends(self):
        text = xllm.devices()
        self.assertTrue(text.startswith("backends: cpu, vulkan"), text)

    def test_bad_backend_and_device(self):
        with self.assertRaises(ValueError):
            LLM(STORIES, backend="nope")
        with self.assertRaises(ValueError):
            LLM(STORIES, device=-1)

    def test_vulkan_greedy_equals_cpu(self):
        if "vulkan device 0:" not in xllm.devices():
            self.skipTest("no Vulkan device here")
        sp = SamplingParams(max_new_tokens=24, do_sample=False)
        with LLM(STORIES, backend="vulkan", device=0) as vk:
            got = vk.generate("Once upon a time", sp)[0].token_ids
        self.assertEqual(got, EXPECTED["prompt_greedy_200_ids"][:24])
