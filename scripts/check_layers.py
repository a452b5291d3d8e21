#!/usr/bin/env python3
"""check_layers.py - the include rule between the rooms of src/ and tools/, enforced.

Each room (a folder under src/, and tools/) may include its own headers, the public
include/xllm.h, and the rooms listed for it in ALLOWED below (the layers of
docs/ARCHITECTURE.md, bottom first). Any other `#include "room/..."` is an arrow that runs the
wrong way and fails the check, unless it is one of the EXCEPTIONS, each listed by file with the
reason it is still there. A bare `#include "name.h"` found in another room (through the
build's include path) counts as an include of that room; a call of a room's functions (CALLS)
from a room that may not include it counts the same, since headers reach further than their
own room (model.h includes the format's safetensors.h). Usage: check_layers.py [SOURCE_DIR]; exit 1 on a forbidden include
(each printed as file:line: room -> room, or room calls room's f()), 0 otherwise. Run by ctest as check_layers."""
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
    "engine": {"base", "model", "pipeline", "tokenizer", "template"},
    "convert": {"base", "quant", "format", "model", "tokenizer"},
    "api": {"base", "quant", "format", "model", "tokenizer", "template", "engine", "pipeline",
            "convert", "backend"},
    "server": set(),  # only xllm.h: the server is a client of the public API
    "tools": set(),   # only xllm.h and its own headers
}

# (file, included room) -> why it is allowed
EXCEPTIONS = {
    ("tools/cmd_serve.c", "server"): "xllm serve starts the server library (server/server.h)",
}

# A room's functions that another room reaches through a header it may include (model.h
# includes format/safetensors.h, so the engine sees st_at): calling them from a room that may
# not include that room is the same wrong arrow as the include. Each room: the prefixes of
# the functions its headers declare.
CALLS = {
    "format": re.compile(r"\b((?:st|gguf|xf|arch)_[a-z0-9_]+)\s*\("),
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def room_of(rel):
    parts = rel.split("/")
    if parts[0] == "tools":
        return "tools"
    return parts[1] if parts[0] == "src" and len(parts) > 2 else None


def room_of_include(root, dirpath, inc):
    """The room an #include "inc" reaches: its first folder, or for a bare name not beside
    the file (found through the build's include path), the room under src/ that holds it."""
    if "/" in inc:
        return inc.split("/")[0]
    if inc == "xllm.h" or os.path.exists(os.path.join(dirpath, inc)):
        return None
    for r in sorted(os.listdir(os.path.join(root, "src"))):
        if os.path.exists(os.path.join(root, "src", r, inc)):
            return r
    return None


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
                        code = line.lstrip()
                        if not code.startswith(("*", "/*", "//")):
                            code = code.split("//")[0]
                            for callee, pattern in CALLS.items():
                                if callee == room or callee in ALLOWED[room]:
                                    continue
                                c = pattern.search(code)
                                if c:
                                    bad.append(f"{rel}:{n}: {room} calls {callee}'s {c.group(1)}() (not allowed)")
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        to = room_of_include(root, dirpath, m.group(1))
                        if to is None:
                            continue  # xllm.h, a header of the file's own folder, or a system one
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
        print(f"check_layers: {len(bad)} forbidden include(s) or call(s); the layers are in docs/ARCHITECTURE.md")
        return 1
    print(f"check_layers: ok ({len(used)} listed exception(s) still in use)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
