"""The ctypes mirrors of C structs (python/xllm/__init__.py) against C's own layout.

The build compiles tests/python/struct_layout.c (xllm_struct_layout), which prints sizeof each
mirrored struct of include/xllm.h and offsetof / sizeof each mirrored field. Every struct and
field it names must exist in the mirror with the same size and offset: a field added to a C
struct without its Python mirror changes the struct's size and fails here."""
import ctypes
import os
import re
import subprocess
import unittest

import xllm

MIRRORS = {
    "xllm_error": xllm._Error,
    "xllm_model_options": xllm._ModelOptions,
    "xllm_sampling_params": xllm._SamplingParams,
    "xllm_request": xllm._Request,
    "xllm_engine_options": xllm._EngineOptions,
    "xllm_chunk": xllm._Chunk,
    "xllm_result": xllm._Result,
    "xllm_convert_options": xllm._ConvertOptions,
    "xllm_param_info": xllm._ParamInfo,
}


def probe_path():
    """$XLLM_STRUCT_LAYOUT (set by CMake for ctest), else beside the library."""
    p = os.environ.get("XLLM_STRUCT_LAYOUT")
    if p:
        return p
    return os.path.join(os.path.dirname(os.path.abspath(xllm.library_path())), "xllm_struct_layout")


def c_layout(text):
    """{struct: (size, {field: (offset, size)})} from the probe's lines."""
    out = {}
    for line in text.splitlines():
        w = line.split()
        if w[0] == "struct":
            out[w[1]] = (int(w[2]), {})
        elif w[0] == "field":
            out[w[1]][1][w[2]] = (int(w[3]), int(w[4]))
    return out


def header_fields(header, struct):
    """The member names of `typedef struct STRUCT {...} STRUCT;` in the header text, in order."""
    m = re.search(r"typedef struct %s \{(.*?)\} %s;" % (struct, struct), header, re.S)
    if not m:
        return None
    body = re.sub(r"/\*.*?\*/", " ", m.group(1), flags=re.S)
    names = []
    for decl in body.split(";"):
        decl = re.sub(r"\[[^\]]*\]", "", decl).strip()
        if not decl:
            continue
        fp = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)\s*\)", decl)  # a function pointer
        if fp:
            names.append(fp.group(1))
            continue
        for part in decl.split(","):  # int a, b;
            names.append(re.findall(r"[A-Za-z_]\w*", part)[-1])
    return names


def order_mismatches(header, mirrors):
    """Members of the C structs (read from include/xllm.h) against the mirrors' field names: a
    field added in C fails here even where it fits in the struct's tail padding."""
    bad = []
    for name, cls in mirrors.items():
        c = header_fields(header, name)
        py = [f[0] for f in cls._fields_]
        if c is None:
            bad.append(f"{name}: not found in include/xllm.h")
        elif c != py:
            bad.append(f"{name}: C members {c} != ctypes {cls.__name__} fields {py}")
    return bad


def mismatches(layout, mirrors):
    """Human-readable differences between C's layout and the ctypes classes."""
    bad = []
    for name, cls in mirrors.items():
        if name not in layout:
            bad.append(f"{name}: mirrored in Python but not printed by struct_layout.c")
    for name, (size, fields) in layout.items():
        cls = mirrors.get(name)
        if cls is None:
            bad.append(f"{name}: printed by struct_layout.c but has no ctypes mirror here")
            continue
        if ctypes.sizeof(cls) != size:
            bad.append(f"{name}: C size {size}, ctypes {cls.__name__} size {ctypes.sizeof(cls)}"
                       " (a field added or removed on one side)")
        for f, (off, fsize) in fields.items():
            if f not in {fd[0] for fd in cls._fields_}:
                bad.append(f"{name}.{f}: in C, not in {cls.__name__}")
                continue
            d = getattr(cls, f)
            if (d.offset, d.size) != (off, fsize):
                bad.append(f"{name}.{f}: C offset {off} size {fsize}, ctypes offset {d.offset} size {d.size}")
    return bad


class TestLayout(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        path = probe_path()
        if not os.path.exists(path):
            raise unittest.SkipTest(f"{path} not built (run under ctest, or build xllm_struct_layout)")
        cls.layout = c_layout(subprocess.run([path], check=True, capture_output=True, text=True).stdout)

    def test_mirrors_match_c(self):
        self.assertEqual(mismatches(self.layout, MIRRORS), [])

    def test_members_match_header(self):
        src = os.environ.get("XLLM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
        with open(os.path.join(src, "include", "xllm.h")) as f:
            header = f.read()
        self.assertEqual(order_mismatches(header, MIRRORS), [])
        # the check itself: a member added in C's tail padding is reported
        grown = header.replace("    int n_top;\n} xllm_chunk;", "    int n_top;\n    int added;\n} xllm_chunk;")
        self.assertNotEqual(grown, header)
        self.assertTrue(order_mismatches(grown, {"xllm_chunk": xllm._Chunk}))

    def test_a_missing_field_is_caught(self):
        # the check itself: a mirror that lacks C's last field of xllm_error must be reported
        class Short(ctypes.Structure):
            _fields_ = [("code", ctypes.c_int)]
        bad = mismatches({"xllm_error": self.layout["xllm_error"]}, {"xllm_error": Short})
        self.assertTrue(any("size" in b for b in bad) and any("message" in b for b in bad), bad)


if __name__ == "__main__":
    unittest.main()
