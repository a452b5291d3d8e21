"""The serving engine from Python: streaming, n samples, priorities, stats, YAML
configs, concurrent callers, and closing an LLM from inside its own callback."""
import os
import tempfile
import threading
import unittest

from xllm import LLM, SamplingParams, XLLMError

SRC = os.environ.get("XLLM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
STORIES = os.path.join(SRC, "models", "stories260k")
PROMPTS = ["Once upon a time", "The cat", "Lily wanted", "One day, Tom", "The sun was", "A big dog",
           "She said", "They played"]


class TestEngine(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.llm = LLM(STORIES)

    @classmethod
    def tearDownClass(cls):
        cls.llm.close()

    def test_stream_equals_generate(self):
        sp = SamplingParams(max_new_tokens=60, do_sample=False)
        pieces = list(self.llm.stream("Once upon a time", sp))
        self.assertGreater(len(pieces), 1)
        self.assertEqual("".join(pieces), self.llm.generate("Once upon a time", sp)[0].text)

    def test_stream_closed_early_frees_its_blocks(self):
        gen = self.llm.stream("Once upon a time", SamplingParams(max_new_tokens=400, do_sample=False,
                                                                 ignore_eos=True))
        next(gen)
        gen.close()
        s = self.llm.generate("The cat", SamplingParams(max_new_tokens=5, do_sample=False)) and self.llm.stats()
        self.assertEqual(s["kv"]["blocks_used"], 0)
        self.assertEqual(s["requests_running"], 0)

    def test_n_samples_equal_derived_seeds(self):
        sp = SamplingParams(max_new_tokens=30, temperature=1.0, seed=11, n=3)
        out = self.llm.generate("The dog", sp)[0]
        self.assertEqual(len(out.outputs), 3)
        for j, o in enumerate(out.outputs):
            single = self.llm.generate("The dog", sp.replace(n=1, seed=11 + j))[0]
            self.assertEqual(o.token_ids, single.token_ids)
            self.assertEqual(o.text, single.text)
            # the engine's timings of each sample (the struct layout matches the C one)
            self.assertGreater(o.first_token_s, 0.0)
            self.assertGreaterEqual(o.decode_s, 0.0)

    def test_priority_does_not_change_tokens(self):
        sp = SamplingParams(max_new_tokens=30, do_sample=False)
        a = self.llm.generate(PROMPTS, sp)
        b = self.llm.generate(PROMPTS, sp.replace(priority="offline"))
        self.assertEqual([x.token_ids for x in a], [x.token_ids for x in b])
        with self.assertRaises(ValueError):
            self.llm.generate("x", sp.replace(priority="urgent"))

    def test_logprobs(self):
        out = self.llm.generate("Once upon a time", SamplingParams(max_new_tokens=8, do_sample=False, logprobs=3))[0]
        self.assertEqual(len(out.logprobs), 8)
        for tok, lp, top in zip(out.token_ids, out.logprobs, out.top_logprobs):
            self.assertEqual(top[0][0], tok)  # greedy takes the most likely id
            self.assertAlmostEqual(top[0][1], lp, places=6)
            self.assertLessEqual(lp, 0.0)
            self.assertEqual(len(top), 3)

    def test_stats_keys(self):
        s = self.llm.stats()
        for k in ("requests_finished", "prefill_tokens", "preemptions", "prefix_cache", "response_cache", "kv"):
            self.assertIn(k, s)
        for k in ("lookups", "hit_tokens", "evictions"):
            self.assertIn(k, s["prefix_cache"])
        for k in ("blocks_total", "blocks_free", "blocks_cached", "blocks_used"):
            self.assertIn(k, s["kv"])

    def test_integer_ranges(self):
        with self.assertRaises(ValueError):
            self.llm.generate("x", SamplingParams(max_new_tokens=1 << 40))
        with self.assertRaises(ValueError):
            self.llm.generate("x", SamplingParams(seed=-1))
        with self.assertRaises(ValueError):
            self.llm.generate([1, 1 << 33], SamplingParams(max_new_tokens=3))

    def test_threads_share_the_engine(self):
        """Four threads calling generate on one LLM get what one thread gets."""
        sp = SamplingParams(max_new_tokens=40, do_sample=False)
        want = [o.token_ids for o in self.llm.generate(PROMPTS, sp)]
        got, errors = {}, []

        def work(t):
            try:
                for r in range(3):
                    outs = self.llm.generate(PROMPTS, sp)
                    got[(t, r)] = [o.token_ids for o in outs]
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(got), 12)
        for v in got.values():
            self.assertEqual(v, want)


class TestLifetimeAndConfig(unittest.TestCase):
    def test_close_inside_callback(self):
        llm = LLM(STORIES)
        seen = []

        def cb(i, tok, piece):
            seen.append(tok)
            if len(seen) == 3:
                llm.close()  # deferred by the library until generate returns
            return False
        out = llm.generate("Once upon a time", SamplingParams(max_new_tokens=10, do_sample=False), callback=cb)
        self.assertEqual(len(out[0].token_ids), 10)
        with self.assertRaises(XLLMError):
            llm.generate("x")

    def test_config(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "engine.yaml")
            with open(path, "w") as f:
                f.write("model: %s\nthreads: 2\ncontext: 256\nexecution:\n  max_batch_size: 4\n"
                        "  timeout_ms: 5\n  preempt_mode: recompute\nmemory:\n  workspace_size: 64MiB\n"
                        "  cache_policy: lru\nresponse_cache:\n  enabled: true\n" % STORIES)
            llm = LLM(config=path)
            sp = SamplingParams(max_new_tokens=20, do_sample=False)
            a = llm.generate("Once upon a time", sp)[0]
            b = llm.generate("Once upon a time", sp)[0]
            self.assertEqual(a.token_ids, b.token_ids)
            self.assertEqual(llm.stats()["response_cache"]["hits"], 1)
            self.assertEqual(llm.context_size, 256)
            llm.close()
            with open(path, "w") as f:
                f.write("model: %s\nexecution:\n  preempt_mode: fast\n" % STORIES)
            with self.assertRaises(XLLMError) as cm:
                LLM(config=path)
            self.assertIn("preempt_mode", str(cm.exception))
            self.assertIn(":3", str(cm.exception))
            # an engine that cannot be created: its own error, not an AttributeError from the cleanup
            with open(path, "w") as f:
                f.write("model: %s\nmemory:\n  workspace_size: 2MiB\n" % STORIES)
            with self.assertRaises(XLLMError) as cm:
                LLM(config=path)
            self.assertNotIn("attribute", str(cm.exception))

    def test_kv_dtype(self):
        sp = SamplingParams(max_new_tokens=20, do_sample=False, ignore_eos=True)
        for dt in ("q8", "f16"):
            llm = LLM(STORIES, kv_dtype=dt)
            self.assertEqual(len(llm.generate("Once upon a time", sp)[0].token_ids), 20)
            s = llm.stats()
            self.assertEqual(s["kv_dtype"], dt)
            self.assertFalse(s["kv_dtype_auto"])
            llm.close()
        with self.assertRaises(ValueError):
            LLM(STORIES, kv_dtype="int4")
        # llama.cpp's arithmetic: generates; an unknown arithmetic is refused
        llm = LLM(STORIES, kv_dtype="f16", arithmetic="llama")
        self.assertEqual(len(llm.generate("Once upon a time", sp)[0].token_ids), 20)
        llm.close()
        with self.assertRaises(ValueError):
            LLM(STORIES, arithmetic="ggml")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "engine.yaml")
            with open(path, "w") as f:
                f.write("model: %s\nmemory:\n  kv_dtype: q8\n" % STORIES)
            llm = LLM(config=path)
            self.assertEqual(llm.stats()["kv_dtype"], "q8")
            llm.close()

    def test_knowledge_file_in_a_new_process(self):
        import subprocess
        import sys
        text = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. "
                "One day, she saw a big, red ball in the park. She ran to it and picked it up.")
        with tempfile.TemporaryDirectory() as d:
            kv = os.path.join(d, "story.kv")
            llm = LLM(STORIES, cache_policy="lru")
            llm.add_knowledge("story", text)
            llm.save_knowledge("story", kv)
            sp = SamplingParams(max_new_tokens=20, do_sample=False)
            want = llm.generate(text + " Then", sp)[0].token_ids
            llm.close()
            code = ("import json, sys\nfrom xllm import LLM, SamplingParams\n"
                    "llm = LLM(sys.argv[1], cache_policy='lru')\n"
                    "llm.load_knowledge('story', sys.argv[2], text=sys.argv[3])\n"
                    "out = llm.generate(sys.argv[3] + ' Then', SamplingParams(max_new_tokens=20, do_sample=False))\n"
                    "s = llm.stats()\n"
                    "print(json.dumps({'ids': out[0].token_ids, 'hits': s['knowledge'][0]['hits'],"
                    " 'prefill': s['prefill_tokens']}))\n")
            res = subprocess.run([sys.executable, "-c", code, STORIES, kv, text], capture_output=True, text=True,
                                 env=dict(os.environ), timeout=300)
            self.assertEqual(res.returncode, 0, res.stderr)
            import json
            got = json.loads(res.stdout.strip().splitlines()[-1])
            self.assertEqual(got["ids"], want)
            self.assertEqual(got["hits"], 1)
            self.assertLess(got["prefill"], 20)


if __name__ == "__main__":
    unittest.main()
