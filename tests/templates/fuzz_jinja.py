#!/usr/bin/env python3
"""fuzz_jinja.py XLLM [SEED] [N_EXPR] [N_WS] [N_PROG] - random templates rendered by
`xllm template` and by Python Jinja2 as HF configures it (hf_jinja.py); any
difference (text, or one failing where the other does not) is reported.

Three generators: random expressions (literals, variables, every operator,
filters, tests, methods, subscripts, slices, conditionals) in one {{ }};
random nestings of if/for/raw/comments/set with every whitespace-control
marker and Unicode whitespace around them; and random programs of for (with
else, filters, break, continue), if, set, set blocks, with, namespace and
macros, which exercise Jinja2's scoping. Needs jinja2; exit 0 when all agree.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_jinja  # noqa: E402

ATOMS = ["1", "0", "-3", "2.5", "0.1", "1e3", "7", "True", "false", "none", "'ab'", "'A b'", "''", "'héllo'",
         "[1, 2]", "[]", "(1,)", "{'k': 1}", "{}", "x", "d", "l", "s", "n", "f", "'3'", "' x '", "[0.5, 'a']",
         "3.0", "10", "-0.0", "'%s-%d'", "(1, 'z')"]
BIN = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", "<=", ">", ">=", "and", "or", "in", "not in"]
FILT = ["length", "string", "upper", "lower", "trim", "first", "last", "list", "int", "float", "abs", "round",
        "tojson", "sort", "unique|list", "reverse|list", "join(',')", "default('z')", "capitalize", "title", "sum",
        "max", "min", "items|list", "e", "count", "wordcount", "string|length", "tojson(indent=1)", "round(1)",
        "dictsort", "select|list", "map('string')|list", "batch(2)|list" if False else "list|length", "replace('a', 'b')",
        "center(5)", "indent(2)", "truncate(5)", "format(1)", "int(base=16)", "float(7)"]
TESTS = ["defined", "none", "string", "number", "integer", "float", "mapping", "sequence", "iterable", "odd", "even",
         "true", "false", "boolean", "lower", "upper", "callable", "eq 1", "in [1, 'ab']", "divisibleby 2", "sameas none"]
METH = [".upper()", ".lower()", ".strip()", ".split()", ".title()", ".startswith('a')", ".endswith('b')",
        ".replace('a','z')", ".find('l')", ".count('l')", ".isdigit()", ".capitalize()", ".get('k')",
        ".keys()|list", ".values()|list", ".items()|list", "[0]", "[-1]", "[1:]", "[::-1]", "['k']", ".k",
        ".split('a', 1)", ".rsplit(none, 1)", ".lstrip('x ')", ".format(1, 2)", ".zfill(4)", ".partition(' ')",
        ".casefold()", ".swapcase()", ".isnumeric()", ".center(9, '*')"]
FORMATS = ["'%s'", "'%r'", "'%d'", "'%5d|'", "'%-5d|'", "'%05d'", "'%x'", "'%#X'", "'%#o'", "'%.2f'", "'%10.3e'",
           "'%g'", "'%+d'", "'% d'", "'%c'", "'%%%s'", "'%(k)s'", "'%.2s'", "'{}'", "'{!r}'", "'{:>6}'", "'{:.2f}'",
           "'{:5d}'", "'{:+d}'", "'{:.1%}'", "'{0[k]}'", "'{0.k}'"]
VARS = {"d": {"k": [1, "b"], "z": None}, "l": [3, 1, 2], "s": "Hello", "n": None, "f": 1.5}


def expr(depth):
    r = random.random()
    if depth > 2 or r < 0.3:
        return random.choice(ATOMS)
    if r < 0.55:
        return "(%s %s %s)" % (expr(depth + 1), random.choice(BIN), expr(depth + 1))
    if r < 0.7:
        return "(%s|%s)" % (expr(depth + 1), random.choice(FILT))
    if r < 0.8:
        return "(%s is %s%s)" % (expr(depth + 1), random.choice(["", "not "]), random.choice(TESTS))
    if r < 0.9:
        return "(%s)%s" % (expr(depth + 1), random.choice(METH))
    if r < 0.93:
        return "(%s if %s else %s)" % (expr(depth + 1), expr(depth + 1), expr(depth + 1))
    if r < 0.96:
        f = random.choice(FORMATS)
        return "(%s.format(%s))" % (f, expr(depth + 1)) if "{" in f else "(%s %% %s)" % (f, expr(depth + 1))
    return "(not %s)" % expr(depth + 1)


WS = ["", " ", "  ", "\t", "\n", "\n\n", " \n", "\n  ", "\t\n\t", "a", " b ", "\r\n", "x\n  ", "\n\t ", "\u3000",
      "\xa0\n"]


def ws():
    return "".join(random.choice(WS) for _ in range(random.randint(0, 3)))


def sign():
    return random.choice(["", "", "-", "+"])


def block(depth):
    out = []
    for _ in range(random.randint(1, 4)):
        r = random.random()
        out.append(ws())
        if r < 0.25 and depth < 3:
            out.append("{%" + sign() + " if true " + sign() + "%}" + block(depth + 1) + ws())
            if random.random() < 0.3:
                out.append("{%" + sign() + " else " + sign() + "%}" + block(depth + 1) + ws())
            out.append("{%" + sign() + " endif " + sign() + "%}")
        elif r < 0.4 and depth < 3:
            out.append("{%" + sign() + " for i in [1, 2] " + sign() + "%}" + block(depth + 1) + ws() +
                       "{%" + sign() + " endfor " + sign() + "%}")
        elif r < 0.6:
            out.append("{{" + random.choice(["", "-"]) + " 'v' " + random.choice(["", "-"]) + "}}")
        elif r < 0.75:
            out.append("{#" + sign() + " c " + sign() + "#}")
        elif r < 0.82:
            out.append("{%" + sign() + " raw " + random.choice(["", "-"]) + "%}" + ws() + "{{x}}" + ws() +
                       "{%" + sign() + " endraw " + sign() + "%}")
        elif r < 0.9:
            out.append("{%" + sign() + " set z = 1 " + sign() + "%}")
    return "".join(out)


STMT_EXPRS = ["a", "b", "c", "ns.v", "loop.index", "loop.first", "loop.length", "loop.previtem", "loop.revindex", "1",
              "2", "\"s\"", "a ~ b", "(a or 0) + 1", "items|length", "m(a)", "ns.v ~ a", "i", "j", "varargs"]


def stmt(depth, in_loop, in_macro):
    r = random.random() if depth <= 3 else 0.9
    e = lambda: random.choice(STMT_EXPRS)  # noqa: E731
    if r < 0.15:
        return "{%% for %s in %s %%}%s{%% else %%}E{%% endfor %%}" % (
            random.choice(["i", "j", "a"]), random.choice(["items", "[1,2,3]", "range(3)", "items if false", "\"ab\"",
                                                           "items[1:]"]), body(depth + 1, True, in_macro))
    if r < 0.22:
        return "{%% for i in items if i != %d %%}%s{%% endfor %%}" % (random.randint(1, 3), body(depth + 1, True, in_macro))
    if r < 0.35:
        return "{%% if %s %%}%s{%% else %%}%s{%% endif %%}" % (e(), body(depth + 1, in_loop, in_macro),
                                                              body(depth + 1, in_loop, in_macro))
    if r < 0.5:
        return "{%% set %s = %s %%}" % (random.choice(["a", "b", "c"]), e())
    if r < 0.58:
        return "{%% set ns.v = %s %%}" % e()
    if r < 0.62 and in_loop:
        return random.choice(["{% break %}", "{% continue %}"])
    if r < 0.66 and not in_macro and depth < 2:
        return "{%% macro m(x, y=3) %%}[%s]{%% endmacro %%}" % body(depth + 1, False, True)
    if r < 0.7:
        return "{%% with a = %s %%}%s{%% endwith %%}" % (e(), body(depth + 1, in_loop, in_macro))
    if r < 0.74:
        return "{%% set b %%}%s{%% endset %%}" % body(depth + 1, in_loop, in_macro)
    if r < 0.77:
        return "{%% filter upper %%}%s{%% endfilter %%}" % body(depth + 1, in_loop, in_macro)
    return "{{ %s }}," % e()


def body(depth, in_loop, in_macro):
    return "".join(stmt(depth, in_loop, in_macro) for _ in range(random.randint(1, 3)))


def program():
    return ("{% set ns = namespace(v=0) %}{% macro m(x) %}<{{ x }}>{% endmacro %}" + body(0, False, False) +
            "|{{ a }}{{ b }}{{ ns.v }}")


def main():
    xllm = sys.argv[1]
    random.seed(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    n_expr = int(sys.argv[3]) if len(sys.argv) > 3 else 500
    n_ws = int(sys.argv[4]) if len(sys.argv) > 4 else 500
    n_prog = int(sys.argv[5]) if len(sys.argv) > 5 else n_ws
    tmp = tempfile.mkdtemp()
    mpath, tpath = os.path.join(tmp, "m.json"), os.path.join(tmp, "t.jinja")
    with open(mpath, "w") as f:
        f.write("[]")
    bad = 0
    cases = ([("{{ %s }}" % expr(0), VARS) for _ in range(n_expr)] + [(block(0) + ws(), {}) for _ in range(n_ws)] +
             [(program(), {"items": [1, 2, 3]}) for _ in range(n_prog)])
    for tpl, vars_ in cases:
        try:
            want = hf_jinja.render(tpl, [], **vars_)
            if " at 0x" in want:
                want = None
        except Exception:
            want = None
        with open(tpath, "w", encoding="utf-8", newline="") as f:
            f.write(tpl)
        args = [xllm, "template", "--chat-template", tpath, "--messages", mpath]
        for k, v in vars_.items():
            args += ["--var", "%s=%s" % (k, json.dumps(v))]
        p = subprocess.run(args, capture_output=True)
        got = p.stdout.decode("utf-8") if p.returncode == 0 else None
        if p.returncode not in (0, 1):
            got = "<crashed with status %d>" % p.returncode
        if got != want:
            bad += 1
            if bad <= 10:
                print("MISMATCH %r\n  jinja2 %r\n  xllm   %r %s" % (tpl, want, got, p.stderr.decode()[:200]))
    os.remove(mpath)
    os.remove(tpath)
    os.rmdir(tmp)
    print("fuzz_jinja: %d templates, %d differ" % (len(cases), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
