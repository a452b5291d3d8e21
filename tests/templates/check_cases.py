#!/usr/bin/env python3
"""check_cases.py XLLM CASES.jsonl TEMPLATE_DIR - run `xllm template` on every
case and compare with the expectation byte for byte ("expected"), by SHA-256
and length ("expected_sha256"), or expect a failure whose message holds the
template's own error ("error"). Prints one line per case; exit status 1 when
any case fails. Standard library only."""
import hashlib
import json
import os
import subprocess
import sys
import tempfile


def main():
    xllm, cases_path, tdir = sys.argv[1:4]
    fails = 0
    n = 0
    name = os.path.basename(os.path.dirname(os.path.abspath(cases_path)))
    with tempfile.TemporaryDirectory() as tmp:
        for line in open(cases_path, encoding="utf-8"):
            if not line.strip():
                continue
            case = json.loads(line)
            n += 1
            mpath = os.path.join(tmp, "messages.json")
            with open(mpath, "w", encoding="utf-8") as f:
                json.dump(case["messages"], f, ensure_ascii=False)
            args = [xllm, "template", "-m", tdir, "--messages", mpath]
            if case.get("add_generation_prompt"):
                args.append("--add-generation-prompt")
            if "tools" in case:
                tpath = os.path.join(tmp, "tools.json")
                with open(tpath, "w", encoding="utf-8") as f:
                    json.dump(case["tools"], f, ensure_ascii=False)
                args += ["--tools", tpath]
            for k, v in case.get("vars", {}).items():
                args += ["--var", "%s=%s" % (k, json.dumps(v, ensure_ascii=False))]
            p = subprocess.run(args, capture_output=True)
            label = "%s/%s" % (name, case["name"])
            if "error" in case:
                err = p.stderr.decode("utf-8", "replace")
                ok = p.returncode != 0 and p.stdout == b"" and case["error"] in err
                why = "expected an error naming %r, got rc=%d %r" % (case["error"], p.returncode, err.strip())
            elif p.returncode != 0:
                ok, why = False, p.stderr.decode("utf-8", "replace").strip()
            elif "expected" in case:
                want = case["expected"].encode("utf-8")
                ok = p.stdout == want
                why = "got %r\n      want %r" % (p.stdout.decode("utf-8", "replace"), case["expected"])
            else:
                ok = (hashlib.sha256(p.stdout).hexdigest() == case["expected_sha256"] and
                      len(p.stdout) == case["expected_len"])
                why = "sha256/length differ (got %d bytes: %r)" % (len(p.stdout),
                                                                   p.stdout.decode("utf-8", "replace")[:400])
            print("%s %s" % ("ok  " if ok else "FAIL", label))
            if not ok:
                print("      " + why)
                fails += 1
    print("%s: %d cases, %d failed" % (name, n, fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
