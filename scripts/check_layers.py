#!/usr/bin/env python3
"""check_layers.py - the include rule between the rooms of src/ and tools/, enforced.

Each room (a folder under src/, and tools/) may include its own headers, the public
include/xllm.h, and the rooms listed for it in ALLOWED below (the layers of
docs/ARCHITECTURE.md, bottom first). Any other `#include "room/..."` is an arrow that runs the
wrong way and fails the check, unless it is one of the EXCEPTIONS, each listed by file with the
reason it is still there. Usage: check_layers.py [SOURCE_DIR]; exit 1 on a forbidden include
(each printed as file:line: room -> room), 0 otherwise. Run by ctest as check_layers."""
import os
import re
import sys

# room -> the other rooms it may include (xllm.h is allowed everywhere)
ALLOWED = {
    "base": set(),
    "quant": {"base"},
    "backend": {"base", "quant"},
    "format": {"base", "quant"},
    "tokenizer": {"base"},
    "template": {"base"},
    "model": {"base", "quant", "backend", "format"},
    "pipeline": {"base", "model"},
    "engine": {"base", "model", "pipeline", "dist", "tokenizer", "template"},
    "convert": {"base", "quant", "format", "model", "tokenizer"},
    "api": {"base", "quant", "format", "model", "tokenizer", "template", "engine", "pipeline", "dist",
            "convert", "backend"},
    "server": set(),  # only xllm.h: the server is a client of the public API
    "tools": set(),   # only xllm.h and its own headers
}
ALLOWED["dist"] = ALLOWED["pipeline"]  # src/dist is to be renamed src/pipeline (issue 29)

# (file, included room) -> why it is allowed for now; each is an arrow issue 29 names
EXCEPTIONS = {
    ("src/dist/pipeline.h", "engine"): "the pipeline's KV ops (bm_op) live in engine/block_manager.h",
    ("src/pipeline/pipeline.h", "engine"): "the same, once src/dist is renamed src/pipeline",
    ("src/convert/calibrate.c", "engine"): "model_logits_once lives in src/engine/logits.c (engine.h)",
    ("tools/cmd_serve.c", "server"): "xllm serve starts the server library (server/server.h)",
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def room_of(rel):
    parts = rel.split("/")
    if parts[0] == "tools":
        return "tools"
    return parts[1] if parts[0] == "src" and len(parts) > 2 else None


def check(root):
    bad, used = [], set()
    for top in ("src", "tools"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                room = room_of(rel)
                if room is None:
                    continue
                if room not in ALLOWED:
                    bad.append(f"{rel}: room '{room}' has no layer in scripts/check_layers.py (add it)")
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or "/" not in m.group(1):
                            continue  # xllm.h, or a header of the file's own folder
                        to = m.group(1).split("/")[0]
                        if to == room or to in ALLOWED[room]:
                            continue
                        if (rel, to) in EXCEPTIONS:
                            used.add((rel, to))
                            continue
                        bad.append(f"{rel}:{n}: {room} -> {to} (\"{m.group(1)}\") is not allowed")
    return bad, used


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    bad, used = check(root)
    for b in bad:
        print(b)
    for e in sorted(set(EXCEPTIONS) - used):
        if os.path.exists(os.path.join(root, e[0])):
            print(f"note: exception {e[0]} -> {e[1]} is no longer needed: remove it from EXCEPTIONS")
    if bad:
        print(f"check_layers: {len(bad)} forbidden include(s); the layers are in docs/ARCHITECTURE.md")
        return 1
    print(f"check_layers: ok ({len(used)} listed exception(s) still in use)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
