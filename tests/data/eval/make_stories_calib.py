"""Regenerate stories_calib.txt: calibration text for `xllm convert --calib`,
sampled exactly like stories_heldout.txt (see make_stories_heldout.py) but with
seeds 10001, 10002, ... so that it shares no story with the held-out text.

usage (repository root, after the build):
    PYTHONPATH=python XLLM_LIBRARY=build/libxllm.so \
        python3 tests/data/eval/make_stories_calib.py > tests/data/eval/stories_calib.txt
"""
import sys

from xllm import LLM, SamplingParams

MODEL = "models/stories260k"
MIN_TOKENS = 8000
MAX_NEW_TOKENS = 400
FIRST_SEED = 10001

llm = LLM(MODEL)
stories, seed = [], FIRST_SEED - 1
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
print("%d stories, seeds %d..%d, %d tokens" % (len(stories), FIRST_SEED, seed, len(llm.tokenize(text, False))),
      file=sys.stderr)
