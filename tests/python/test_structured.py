"""Constrained decoding through the Python API: SamplingParams(json_schema=...,
json_object=..., grammar=..., regex=...) on the bundled model; each output is
checked with the standard library (json, re), not with the engine's grammar."""
import json
import os
import re
import unittest

from xllm import LLM, SamplingParams, XLLMError

SRC = os.environ.get("XLLM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
STORIES = os.path.join(SRC, "models", "stories260k")

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
          "required": ["name", "age", "tags"]}


class TestStructured(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.llm = LLM(STORIES)

    @classmethod
    def tearDownClass(cls):
        cls.llm.close()

    def check_schema_output(self, text):
        v = json.loads(text)
        self.assertEqual(list(v), ["name", "age", "tags"])
        self.assertLessEqual(len(v["name"]), 12)
        self.assertTrue(isinstance(v["age"], int) and 0 <= v["age"] <= 120)
        self.assertTrue(len(v["tags"]) <= 3 and all(t in ("a", "b") for t in v["tags"]))

    def test_json_schema_greedy_and_sampled(self):
        out = self.llm.generate("Once upon a time", SamplingParams(max_new_tokens=120, do_sample=False,
                                                                   json_schema=SCHEMA))[0]
        self.assertEqual(out.finish_reason, "stop")
        self.check_schema_output(out.text)
        outs = self.llm.generate("Lily", SamplingParams(max_new_tokens=120, temperature=1.0, seed=7, n=4,
                                                        json_schema=json.dumps(SCHEMA)))
        self.assertEqual(len(outs[0].outputs), 4)
        for o in outs[0].outputs:
            self.check_schema_output(o.text)
        self.assertGreater(len({o.text for o in outs[0].outputs}), 1)  # each sample its own state

    def test_json_object_regex_grammar(self):
        o = self.llm.generate("The cat", SamplingParams(max_new_tokens=200, temperature=0.7, seed=1,
                                                        json_object=True))[0]
        if o.finish_reason == "stop":
            self.assertIsInstance(json.loads(o.text), dict)
        else:
            self.assertTrue(o.text.startswith("{"))
        o = self.llm.generate("The cat", SamplingParams(max_new_tokens=40, seed=3, regex=r"[A-Z][a-z]{1,8} \d{2}"))[0]
        self.assertRegex(o.text, r"^[A-Z][a-z]{1,8} \d{2}$")
        g = 'root ::= "yes" | "no" | "maybe"'
        o = self.llm.generate("The cat", SamplingParams(max_new_tokens=40, seed=5, grammar=g))[0]
        self.assertIn(o.text, ("yes", "no", "maybe"))
        self.assertEqual(o.finish_reason, "stop")

    def test_refusals(self):
        with self.assertRaisesRegex(XLLMError, "not"):
            self.llm.generate("x", SamplingParams(json_schema={"not": {"type": "string"}}))
        with self.assertRaisesRegex(XLLMError, "left recursive"):
            self.llm.generate("x", SamplingParams(grammar="root ::= root \"a\" | \"a\""))
        with self.assertRaises(ValueError):
            SamplingParams(regex="a", grammar="root ::= \"a\"")._to_c([])


if __name__ == "__main__":
    unittest.main()
