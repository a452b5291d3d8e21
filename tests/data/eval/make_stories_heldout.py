"""Regenerate stories_heldout.txt: stories sampled from models/stories260k by
the engine at temperature 1.0 (top_p 1, no top-k/min-p/penalties), one fixed
seed per story (1, 2, 3, ...), each starting from BOS alone and ending where
the model ends it (it predicts BOS, id 1, or EOS, id 2) or after 400 tokens.
Stories are stripped of surrounding whitespace and separated by a blank line;
seeds are added until the text holds at least MIN_TOKENS tokens.

usage (repository root, after the build):
    PYTHONPATH=python XLLM_LIBRARY=build/libxllm.so \
        python3 tests/data/eval/make_stories_heldout.py > tests/data/eval/stories_heldout.txt
"""
import sys

from xllm import LLM, SamplingParams

MODEL = "models/stories260k"
MIN_TOKENS = 22000
MAX_NEW_TOKENS = 400

llm = LLM(MODEL)
stories, seed = [], 0
while True:
    seed += 1
    out = llm.generate([[1]], SamplingParams(temperature=1.0, top_p=1.0, seed=seed, max_new_tokens=MAX_NEW_TOKENS,
                                             stop_token_ids=[1]))[0]
    story = out.text.strip()
    if story:
        stories.append(story)
    text = "\n\n".join(stories) + "\n"
    if len(llm.tokenize(text, add_special_tokens=False)) >= MIN_TOKENS:
        break
sys.stdout.write(text)
print("%d stories, seeds 1..%d, %d tokens, %d bytes" % (len(stories), seed, len(llm.tokenize(text, False)),
                                                          len(text.encode("utf-8"))), file=sys.stderr)
