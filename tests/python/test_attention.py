"""LLM.attention (xllm_model_attention): the attention probabilities of a prompt per layer and head.

The numbers themselves are checked against the model's own fused attention and an explicit
softmax(QK^T * scale + mask) in tests/unit/test_attention_weights.c (for llama, Gemma 2 / 3, Phi-3,
Qwen3-MoE and OLMo 2); here: the Python shapes and options, rows summing to 1, the causal mask,
the head average, layer selection, the prompt as text or ids, and the errors. Standard library only."""
import json
import os
import unittest

from xllm import LLM, XLLMError

SRC = os.environ.get("XLLM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
STORIES = os.path.join(SRC, "models", "stories260k")


class TestAttention(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.llm = LLM(STORIES, n_threads=1)
        with open(os.path.join(STORIES, "config.json")) as f:
            c = json.load(f)
        cls.layers, cls.heads = c["num_hidden_layers"], c["num_attention_heads"]

    @classmethod
    def tearDownClass(cls):
        cls.llm.close()

    def test_shape_rows_mask(self):
        ids = self.llm.tokenize("Once upon a time there was a cat")
        n = len(ids)
        a = self.llm.attention(ids)
        self.assertEqual(len(a), self.layers)
        for layer in a:
            self.assertEqual(len(layer), self.heads)
            for head in layer:
                self.assertEqual(len(head), n)
                for i, row in enumerate(head):
                    self.assertEqual(len(row), n)
                    self.assertAlmostEqual(sum(row), 1.0, places=5)
                    self.assertTrue(all(p == 0.0 for p in row[i + 1:]), "a later key has weight")
                    self.assertTrue(all(p > 0.0 for p in row[:i + 1]))
        self.assertEqual(a[0][0][0][0], 1.0)  # the first query sees only itself
        # text prompts are tokenized as tokenize() does
        self.assertEqual(self.llm.attention("Once upon a time there was a cat"), a)

    def test_average_and_layers(self):
        ids = self.llm.tokenize("The dog ran to the park")
        n = len(ids)
        full = self.llm.attention(ids)
        avg = self.llm.attention(ids, average_heads=True)
        self.assertEqual(len(avg), self.layers)
        for l in range(self.layers):
            for i in range(n):
                for j in range(n):
                    mean = sum(full[l][h][i][j] for h in range(self.heads)) / self.heads
                    self.assertAlmostEqual(avg[l][i][j], mean, places=6)
        last = self.layers - 1
        sel = self.llm.attention(ids, layers=[last, 0])
        self.assertEqual(sel, [full[last], full[0]])
        self.assertEqual(self.llm.attention(ids, layers=last), full[last])
        self.assertEqual(self.llm.attention(ids, layers=0, average_heads=True), avg[0])

    def test_errors(self):
        with self.assertRaises(XLLMError):
            self.llm.attention([1, 2, 3], layers=[self.layers])
        with self.assertRaises(XLLMError):
            self.llm.attention([1, 2, 3], layers=[0, 0])
        with self.assertRaises(XLLMError):
            self.llm.attention([])
        with self.assertRaises(XLLMError):
            self.llm.attention([1, 10 ** 6])


if __name__ == "__main__":
    unittest.main()
