"""Python ModelConverter: converts, loads back with LLM, rejects bad arguments."""
import json
import os
import tempfile
import unittest

from xllm import LLM, ModelConverter, SamplingParams, XLLMError

SRC = os.environ.get("XLLM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
STORIES = os.path.join(SRC, "models", "stories260k")


class TestModelConverter(unittest.TestCase):
    def test_convert_f32_same_logits(self):
        with tempfile.TemporaryDirectory() as d:
            out = ModelConverter(model_name=STORIES, quant_config="none", op_fusion=True).convert(os.path.join(d, "s.xllm"))
            ids = [1, 403, 407, 261, 378]
            with LLM(STORIES) as ref, LLM(out) as got:
                self.assertEqual(ref.logits(ids, all_positions=True), got.logits(ids, all_positions=True))
                sp = SamplingParams(max_new_tokens=30, do_sample=False)
                self.assertEqual(ref.generate([ids], sp)[0].token_ids, got.generate([ids], sp)[0].token_ids)

    def test_int8_and_int4(self):
        with tempfile.TemporaryDirectory() as d:
            for qc, want in (("int8_weight_only", "q8"), ("int4_weight_only", "q4/g32")):
                seen = []
                out = ModelConverter(STORIES, quant_config=qc, progress=lambda s, f: seen.append(f)).convert(
                    os.path.join(d, qc + ".xllm"))
                info = ModelConverter.info(out)
                self.assertEqual(info["metadata"]["policy"]["attn"], want)
                self.assertTrue(seen and seen[-1] == 1.0)
                with LLM(out) as llm:
                    self.assertEqual(len(llm.generate([[1, 403]], SamplingParams(max_new_tokens=5))[0].token_ids), 5)

    def test_errors(self):
        with self.assertRaises(ValueError):
            ModelConverter(STORIES, quant_config="int3")
        with self.assertRaises(ValueError):
            ModelConverter(STORIES, device="npu")
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(XLLMError):
                ModelConverter(os.path.join(d, "nothing")).convert(os.path.join(d, "x.xllm"))
            self.assertFalse(os.path.exists(os.path.join(d, "x.xllm")))


if __name__ == "__main__":
    unittest.main()
