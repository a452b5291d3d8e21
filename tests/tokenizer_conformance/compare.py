#!/usr/bin/env python3
"""compare.py - `xllm tokenize` output against expectations, line by line.

usage: compare.py NAME STRINGS.jsonl GOT.jsonl EXPECTED.jsonl[.gz]
Prints the first mismatches and a summary line; exits 1 on any mismatch.
"""
import gzip
import json
import sys

KEYS = ("ids", "ids_no_special", "decode", "decode_skip_special")


def lines(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


def main():
    name, strings, got, exp = sys.argv[1], lines(sys.argv[2]), lines(sys.argv[3]), lines(sys.argv[4])
    if not (len(strings) == len(got) == len(exp)):
        print("FAIL %s: %d strings, %d results, %d expectations" % (name, len(strings), len(got), len(exp)))
        return 1
    bad = 0
    for s, g, e in zip(strings, got, exp):
        diff = [k for k in KEYS if g.get(k) != e.get(k)]
        if diff:
            bad += 1
            if bad <= 5:
                print("  mismatch %s in %r" % (",".join(diff), s["text"][:80]))
                for k in diff[:2]:
                    print("    got  %s: %s" % (k, str(g.get(k))[:160]))
                    print("    want %s: %s" % (k, str(e.get(k))[:160]))
    print("%s %s: %d/%d strings identical to HF tokenizers" % ("ok  " if not bad else "FAIL", name, len(exp) - bad,
                                                              len(exp)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
