#!/usr/bin/env python3
"""jinja_cases.py - a battery of small templates rendered by Python Jinja2 as
HuggingFace configures it (hf_jinja.py), written to
tests/data/templates/jinja_cases.jsonl for tests/unit/test_template.c.

Each line: {"template", "messages" (a list), "vars" (an object), and either
"expected" (the exact output) or "error" (the exception, which xLLM must
report as an error rather than render anything). Outputs that embed a Python
object address (printing a generator or a method) are recorded as errors too:
xLLM refuses to print those instead of inventing text.
Run: python3 tests/templates/jinja_cases.py
"""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_jinja  # noqa: E402

OUT = os.path.join(HERE, "..", "data", "templates", "jinja_cases.jsonl")

MSGS = [{"role": "system", "content": "Be nice."}, {"role": "user", "content": " Hi there "},
        {"role": "assistant", "content": "Hello!", "tool_calls": None},
        {"role": "user", "content": "Weather in Zürich? 🌤"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]

# (template, vars)  -- vars may hold "messages"
CASES = [
    # ---- literals and printing
    ("{{ 1 }} {{ -1 }} {{ 1.0 }} {{ 1.5e3 }} {{ 1_000 }} {{ 0.1 }} {{ 1e100 }} {{ 1e-7 }} {{ 123456789.125 }}", {}),
    ("{{ true }} {{ True }} {{ false }} {{ none }} {{ None }}", {}),
    ("{{ 'single' }} {{ \"double\" }} {{ 'a' 'b' \"c\" }} {{ '' }}|", {}),
    ("{{ 'esc: \\n \\t \\\\ \\' \\\" \\x41 \\u00e9 \\U0001F600 \\101 \\q' }}", {}),
    ("{{ [] }} {{ [1, 2.5, 'x', none, true] }} {{ () }} {{ (1,) }} {{ (1, 'a') }} {{ {} }} {{ {'a': 1, 'b': [2]} }}", {}),
    ("{{ ['it\\'s', 'say \"hi\"', 'both \\' \"', 'tab\\t', 'nl\\n', 'bs\\\\', '\\x00\\x1f\\x7f', 'é\\xa0\\u200b\\u3000'] }}", {}),
    ("{{ {'k': {'n': [1, {'m': none}]}} }} {{ [[], [[]], {}] }}", {}),
    ("{{ 1, 2 }} {{ ('a', ('b', 'c')) }}", {}),
    ("{{ x }}|{{ [x] }}|{{ {'a': x} }}", {"x": "é"}),
    ("{{ 10000000000000000.0 }} {{ 9999999999999998.0 }} {{ 0.0001 }} {{ 0.00001 }} {{ -0.0 }} {{ 5e-324 }} {{ 1.7976931348623157e308 }}", {}),
    ("{{ 3.0 * 1.1 }} {{ 2 / 3 }} {{ 1 / 3 * 3 }} {{ 100.0 }} {{ 1e22 }} {{ 1.5e16 }}", {}),
    # ---- arithmetic
    ("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 10 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 2 ** -2 }}", {}),
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 // -2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 % 2 }} {{ -7.5 // 2 }}", {}),
    ("{{ 7 / 2 }} {{ 6 / 2 }} {{ 1 + 1.0 }} {{ true + true }} {{ 3 - false }} {{ 0.5 + 0.25 }}", {}),
    ("{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ 3 * 'x' }} {{ [1] + [2] }} {{ [0] * 3 }} {{ (1,) + (2,) }} {{ 'x' * 0 }}|{{ 'x' * -1 }}|", {}),
    ("{{ 'a' ~ 1 ~ 2.0 ~ none ~ true ~ [1] ~ x }}", {}),
    ("{{ 1 ~ 2 + 3 }} {{ '1' ~ 2 * 3 }}", {}),
    ("{{ 9007199254740993 }} {{ 2 ** 62 }} {{ -9223372036854775807 }}", {}),
    # ---- comparison and logic
    ("{{ 1 == 1.0 }} {{ 1 == true }} {{ 0 == false }} {{ 'a' == 'a' }} {{ [1, 2] == [1, 2] }} {{ (1, 2) == [1, 2] }} {{ {'a': 1} == {'a': 1.0} }}", {}),
    ("{{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 2.5 }} {{ 'abc' < 'abd' }} {{ 'Z' < 'a' }} {{ [1, 2] < [1, 3] }} {{ (1,) < (1, 0) }} {{ 'é' > 'z' }}", {}),
    ("{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1 == 1 }} {{ 1 != 2 != 1 }}", {}),
    ("{{ 1 and 2 }} {{ 0 and 2 }} {{ 1 or 2 }} {{ 0 or '' }}|{{ none or 'd' }} {{ not 0 }} {{ not 'x' }} {{ not not [] }}", {}),
    ("{{ 'a' in 'cat' }} {{ '' in 'x' }} {{ 1 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ x in [1] }} {{ 'x' in y }}", {}),
    ("{{ not 1 == 2 }} {{ not 1 in [1] }} {{ (not 1) == 2 }}", {}),
    ("{{ 'yes' if x else 'no' }} {{ 'yes' if 1 else 'no' }} {{ 'a' if 0 }}|{{ 1 if 0 else 2 if 0 else 3 }}", {}),
    # ---- tests
    ("{{ x is defined }} {{ x is undefined }} {{ 1 is defined }} {{ none is none }} {{ 0 is none }} {{ x is not defined }}", {}),
    ("{{ 'a' is string }} {{ 1 is string }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ 1 is float }}", {}),
    ("{{ {} is mapping }} {{ [] is mapping }} {{ [] is sequence }} {{ 'a' is sequence }} {{ {} is sequence }} {{ 1 is sequence }} {{ x is sequence }}", {}),
    ("{{ [] is iterable }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ {} is iterable }} {{ x is iterable }} {{ none is iterable }}", {}),
    ("{{ true is boolean }} {{ 1 is boolean }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }}", {}),
    ("{{ 3 is odd }} {{ 3 is even }} {{ 0 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ -3 is odd }}", {}),
    ("{{ 'abc' is lower }} {{ 'aBc' is lower }} {{ 'ABC' is upper }} {{ '1A' is upper }} {{ '' is lower }}", {}),
    ("{{ 2 is eq 2 }} {{ 2 is equalto 3 }} {{ 2 is ne 3 }} {{ 2 is lt 3 }} {{ 2 is le 2 }} {{ 2 is gt 1 }} {{ 2 is ge 3 }} {{ 2 is in [1, 2] }} {{ 2 is greaterthan 1 }} {{ 2 is lessthan 1 }}", {}),
    ("{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }} {{ 'nope' is test }}", {}),
    ("{{ range is callable }} {{ 'x' is callable }} {{ 'x'.upper is callable }} {{ x is callable }}", {}),
    ("{{ none is sameas none }} {{ true is sameas true }} {{ 1 is sameas 1 }} {{ false is sameas 0 }}", {}),
    ("{{ messages[0] is mapping }} {{ messages is sequence }} {{ messages[0].content is string }} {{ messages[2].tool_calls is none }}", {"messages": MSGS}),
    # ---- attribute and item access
    ("{{ d.a }} {{ d['a'] }} {{ d.b.c }} {{ d['b']['c'] }} {{ d.b['c'] }} {{ d.missing }}|{{ d['missing'] }}|{{ d.l.0 }} {{ d.l[-1] }}",
     {"d": {"a": 1, "b": {"c": "deep"}, "l": [10, 20]}}),
    ("{{ d.items }}|{{ d['items'] }}|{{ d.keys()|list }}", {"d": {"items": "the key", "x": 1}}),
    ("{{ l[0] }} {{ l[-1] }} {{ l[5] }}|{{ l[true] }} {{ 'abc'[1] }} {{ 'abc'[-1] }} {{ 'abc'[9] }}|", {"l": ["a", "b"]}),
    ("{{ l[1:] }} {{ l[:-1] }} {{ l[::2] }} {{ l[::-1] }} {{ l[5:] }} {{ l[-10:1] }} {{ l[3:1:-1] }}", {"l": [0, 1, 2, 3, 4]}),
    ("{{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ 'héllo wörld'[1:8] }} {{ 'héllo'[::-2] }} {{ 'abc'[:] }}", {}),
    ("{{ none.x }}|{{ 1.x }}|{{ 'abc'.nope }}|{{ [1].nope }}|", {}),
    ("{{ (1, 2)[0] }} {{ ((1, 2), 3)[0][1] }} {{ {'a': [1, {'b': 2}]}['a'][1]['b'] }}", {}),
    ("{{ messages[-1]['content'] }} {{ messages[1].content }} {{ messages|length }}", {"messages": MSGS}),
    # ---- string methods
    ("{{ 'Hello World'.upper() }} {{ 'Hello World'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'Hello'.swapcase() }}", {}),
    ("{{ \"they're bill's friends\".title() }} {{ 'x1y2 z'.title() }} {{ 'ǆemal'.title() }}", {}),
    ("{{ '  pad  '.strip() }}|{{ '  pad  '.lstrip() }}|{{ '  pad  '.rstrip() }}|{{ 'xxpadxx'.strip('x') }}|{{ '\\n\\t x \\u3000'.strip() }}|{{ 'abcba'.strip('ab') }}", {}),
    ("{{ 'a,b,,c'.split(',') }} {{ 'a b  c '.split() }} {{ 'a b c'.split(' ', 1) }} {{ ''.split() }} {{ ''.split(',') }} {{ '  '.split(' ') }}", {}),
    ("{{ 'a,b,c'.rsplit(',', 1) }} {{ ' a b c '.rsplit(none, 1) }} {{ 'a<>b<>c'.split('<>') }} {{ 'x'.split('x') }}", {}),
    ("{{ 'l1\\nl2\\r\\nl3\\rl4'.splitlines() }} {{ 'a\\n'.splitlines(true) }} {{ ''.splitlines() }}", {}),
    ("{{ 'abc'.startswith('a') }} {{ 'abc'.startswith(('x', 'ab')) }} {{ 'abc'.endswith('bc') }} {{ 'abc'.startswith('b', 1) }} {{ 'abc'.endswith('a', 0, 1) }}", {}),
    ("{{ 'hello'.replace('l', 'L') }} {{ 'hello'.replace('l', '', 1) }} {{ 'ab'.replace('', '-') }} {{ 'aaa'.replace('a', 'b', 0) }}", {}),
    ("{{ 'héllo'.find('l') }} {{ 'hello'.find('z') }} {{ 'hello'.rfind('l') }} {{ 'hello'.index('e') }} {{ 'hello'.count('l') }} {{ 'hello'.count('') }} {{ 'aaaa'.count('aa') }}", {}),
    ("{{ ', '.join(['a', 'b']) }} {{ ''.join('xyz') }} {{ '-'.join(l) }}", {"l": ["p", "q"]}),
    ("{{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'abc'.partition('x') }}", {}),
    ("{{ 'prefix-body'.removeprefix('prefix-') }} {{ 'body.txt'.removesuffix('.txt') }} {{ 'x'.removeprefix('y') }}", {}),
    ("{{ '123'.isdigit() }} {{ '12a'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'ab1'.isalnum() }} {{ ' \\t'.isspace() }} {{ ''.isspace() }} {{ 'ABC'.isupper() }} {{ 'abc'.islower() }}", {}),
    ("{{ 'x'.center(5) }}|{{ 'x'.center(4, '*') }}|{{ 'ab'.ljust(4, '.') }}|{{ 'ab'.rjust(4) }}|{{ '-42'.zfill(6) }}|{{ 'toolong'.center(3) }}|", {}),
    ("{{ '{} and {}'.format('a', 'b') }} {{ '{1}{0}'.format('a', 'b') }} {{ '{x}-{y}'.format(x=1, y=2) }} {{ '{{literal}}'.format() }} {{ '{0[k]} {0.k}'.format({'k': 'v'}) }}", {}),
    ("{{ '{:>6}|{:<6}|{:^6}|{:*^7}'.format('a', 'b', 'c', 'd') }} {{ '{:.3f} {:5d} {:+d} {:.1%}'.format(3.14159, 42, 7, 0.125) }} {{ '{!r}'.format('q') }}", {}),
    ("{{ '%#x|%#o|%#X|%#08x|%-#6o|%+5d|% d|%.3d|%5.3x' % (0, 8, 255, 255, 8, 3, 4, 7, 10) }} {{ '%d' % 1e20 }} {{ '%c%c' % (233, 'x') }} {{ '{0.k}|{0[0]}|{}'.format(1) }}", {}),
    ("{{ '%s and %s' % ('a', 'b') }} {{ '%d%%' % 50 }} {{ '%05.1f|%-5s|%5s|%x|%X|%o|%c' % (3.14159, 'ab', 'cd', 255, 255, 8, 65) }} {{ '%(a)s-%(b)d' % {'a': 'x', 'b': 3} }} {{ '%r' % 'q' }}", {}),
    ("{{ 'ß straße'.upper() }} {{ 'ÀÉÎÕÜ'.lower() }} {{ 'ΣΑΣ ΟΔΟΣ'.lower() }} {{ 'İ'.lower()|length }} {{ 'ﬁ'.upper() }}", {}),
    ("{{ 'straße ﬁne ŉ ΣΑΣ'.casefold() }} {{ 'ǅ ǆ ΣΑΣ ΟΔΟΣ σ'.swapcase() }} {{ 'ΣΑΣ ΟΔΟΣ'.title() }} {{ 'ΣΑΣ ΟΔΟΣ'|title }} {{ 'ŉ ǰ'.upper() }} {{ 'ŉx'.title() }}", {}),
    ("{{ '١٢٣'.isdigit() }} {{ '١٢٣'.isdecimal() }} {{ '١٢٣'.isalpha() }} {{ '½'.isnumeric() }} {{ '½'.isdigit() }} {{ '²'.isdigit() }} {{ '²'.isdecimal() }} {{ '一'.isalpha() }} {{ 'ǈ'.islower() }} {{ 'ǈ'.isupper() }} {{ '½ and ١٢٣'|wordcount }}", {}),
    # ---- filters
    ("{{ '  x  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 5|trim }}|{{ x|trim }}|", {}),
    ("{{ [1, 2, 3]|length }} {{ 'héllo'|length }} {{ {'a': 1}|length }} {{ x|length }} {{ []|count }} {{ range(4)|length }}", {}),
    ("{{ 'hello'|upper }} {{ 'HELLO'|lower }} {{ 'hello world'|capitalize }} {{ 'hello big-world (foo) [bar] <baz> {qux}'|title }} {{ 'mIxEd'|title }}", {}),
    ("{{ 'aXbXc'|replace('X', '-') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 123|replace('2', 'two') }}", {}),
    ("{{ ['a', 'b']|join }} {{ ['a', 'b']|join(', ') }} {{ [1, 2]|join('+') }} {{ l|join(',', attribute='n') }} {{ 'abc'|join('.') }} {{ x|join(',') }}|", {"l": [{"n": "p"}, {"n": "q"}]}),
    ("{{ x|default('dflt') }} {{ ''|default('dflt') }} {{ ''|default('dflt', true) }} {{ none|default('d') }} {{ none|d('d', true) }} {{ 0|d(5, boolean=true) }} {{ x|d }}|", {}),
    ("{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ 'abc'|last }} {{ []|first }}|{{ {'k': 1, 'j': 2}|first }} {{ {'k': 1, 'j': 2}|last }}", {}),
    ("{{ 'ab'|list }} {{ (1, 2)|list }} {{ {'a': 1, 'b': 2}|list }} {{ range(3)|list }} {{ x|list }}", {}),
    ("{{ {'a': 1, 'b': [2]}|items|list }} {{ x|items|list }} {% for k, v in {'x': 1, 'y': 2}|items %}{{ k }}={{ v }};{% endfor %}", {}),
    ("{{ 42|string }} {{ [1, 'a']|string }} {{ none|string }} {{ x|string }}|{{ 1.0|string ~ 'x' }}", {}),
    ("{{ '3'|int }} {{ '3.9'|int }} {{ ' 42 '|int }} {{ '0x1F'|int(0, 16) }} {{ '0b101'|int(base=2) }} {{ 'x'|int }} {{ 'x'|int(-1) }} {{ 3.99|int }} {{ -3.99|int }} {{ true|int }} {{ none|int }} {{ '1_000'|int }}", {}),
    ("{{ '3.5'|float }} {{ '1e3'|float }} {{ 'x'|float }} {{ 'x'|float(1.5) }} {{ 3|float }} {{ ' -2.5 '|float }} {{ 'inf'|float }} {{ '-nan'|float }}", {}),
    ("{{ -3|abs }} {{ -2.5|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ -2.5|round }} {{ 2.675|round(2) }} {{ 3|round }} {{ 1234|round(-2) }} {{ 1.55|round(1, 'floor') }} {{ 1.51|round(1, 'ceil') }} {{ 2|round(0, 'floor') }}", {}),
    ("{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ 'cba'|sort }}", {}),
    ("{{ l|sort(attribute='a') }} {{ l|sort(attribute='a,b') }} {{ l|sort(attribute='a', reverse=true) }}",
     {"l": [{"a": 2, "b": 1}, {"a": 1, "b": 2}, {"a": 2, "b": 0}]}),
    ("{{ ['a', 'B', 'b', 'A', 'c']|unique|list }} {{ ['a', 'B', 'b']|unique(case_sensitive=true)|list }} {{ l|unique(attribute='k')|list }}",
     {"l": [{"k": 1, "v": "x"}, {"k": 1, "v": "y"}, {"k": 2, "v": "z"}]}),
    ("{{ [1, 2]|reverse|list }} {{ 'abc'|reverse }} {{ 'héllo'|reverse }} {{ (1, 2)|reverse|list }}", {}),
    ("{{ [1, 2, 3]|sum }} {{ [1.5, 2]|sum }} {{ l|sum(attribute='n') }} {{ [1]|sum(start=10) }} {{ [[1], [2]]|sum(start=[]) }}", {"l": [{"n": 1}, {"n": 5}]}),
    ("{{ [3, 1, 2]|max }} {{ [3, 1, 2]|min }} {{ ['b', 'A']|max }} {{ ['b', 'A']|max(case_sensitive=true) }} {{ l|max(attribute='n') }} {{ []|max }}|",
     {"l": [{"n": 1}, {"n": 5}]}),
    ("{{ l|map(attribute='n')|list }} {{ l|map(attribute='m', default='-')|list }} {{ [1, 2]|map('string')|join }} {{ ['a', 'B']|map('upper')|list }} {{ ['1', '2']|map('int')|sum }}",
     {"l": [{"n": 1}, {"n": 5, "m": "M"}]}),
    ("{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ [1, 5, 9]|select('gt', 4)|list }} {{ ['a', 'b']|select('equalto', 'b')|list }}", {}),
    ("{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'eq', 'user')|map(attribute='role')|join(',') }} {{ messages|selectattr('tool_calls')|list }} {{ messages|selectattr('tool_calls', 'none')|list|length }}",
     {"messages": MSGS}),
    ("{{ (messages|selectattr('role', 'equalto', 'system')|list|last).content|trim if (messages|selectattr('role', 'equalto', 'system')|list) else '' }}", {"messages": MSGS}),
    ("{{ {'b': 2, 'a': 1, 'C': 0}|dictsort }} {{ {'b': 2, 'a': 1}|dictsort(by='value') }} {{ {'b': 2, 'a': 1}|dictsort(reverse=true) }}", {}),
    ("{{ '<a href=\"x\">&\\'</a>'|e }} {{ 5|escape }} {{ 'x'|safe }} {{ '<'|forceescape }}", {}),
    ("{{ 'hello world  foo_bar 42 é'|wordcount }} {{ ''|wordcount }}", {}),
    ("{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'a\\nb'|indent('> ') }}|{{ ''|indent(first=true) }}|", {}),
    ("{{ 'hello'|center(11) }}|{{ 'x'|center }}|", {}),
    ("{{ 'The quick brown fox jumps over the lazy dog'|truncate(20) }}|{{ 'short'|truncate(20) }}|{{ 'The quick brown fox'|truncate(10, true) }}|{{ 'abcdefghijklmnop'|truncate(10, end='!', leeway=0) }}|", {}),
    ("{{ '%s-%s'|format(1, 'b') }} {{ '%(x)s'|format(x=5) }} {{ '%.2f'|format(3.14159) }}", {}),
    ("{{ 'x'|attr('upper') is callable }} {{ {'k': 1}|attr('k') }}|{{ {'k': 1}|attr('keys') is callable }}", {}),
    ("{{ 'up'|upper|lower|capitalize|replace('U', 'u') }} {{ x|default('a')|upper }} {{ ['b', 'a']|sort|first|upper }}", {}),
    ("{% set g = l|select('odd') %}{{ g|list }}{{ g|list }}|{% set h = l|map('string') %}{% for x in h %}{{ x }}{% endfor %}{% for x in h %}again{% endfor %}|{% set k = l|reject('odd') %}{{ k|first }}{{ k|list }}|{% set u = l|unique %}{{ u|join }}{{ u|join }}", {"l": [1, 2, 3, 4]}),
    ("{% set g = l|select %}{{ 2 in g }}{{ g|list }}{{ 9 in g }}{{ g|list }}", {"l": [1, 2, 3, 4]}),
    ("{% set g = messages|selectattr('role', 'equalto', 'user') %}{% if g %}truthy{% endif %}{% for m in g %}{{ m.content }}{% endfor %}{{ g|list|length }}", {"messages": MSGS}),
    # ---- tojson (HF: ensure_ascii=False)
    ("{{ {'a': 'é', 'b': [1, 2.0, none, true, false], 'c': 'quote \" slash \\\\ </tag> \\n\\t\\x01'}|tojson }}", {}),
    ("{{ x|tojson }} {{ 'plain'|tojson }} {{ 1.0|tojson }} {{ 1e20|tojson }} {{ []|tojson }} {{ {}|tojson }} {{ (1, 'a')|tojson }}", {"x": [1, "日本", {"emoji": "👍"}]}),
    ("{{ d|tojson(indent=2) }}\n{{ d|tojson(indent=0) }}\n{{ d|tojson(indent='\\t') }}", {"d": {"a": [1, {"b": []}, {}], "c": {"d": None}}}),
    ("{{ {'b': 1, 'a': {'z': 1, 'y': 2}}|tojson(sort_keys=true) }} {{ {'a': [1, 2]}|tojson(separators=(',', ':')) }} {{ 'é'|tojson(ensure_ascii=true) }} {{ '😀'|tojson(ensure_ascii=true) }}", {}),
    ("{{ {1: 'int', 2.5: 'float', true: 'bool', none: 'null'}|tojson }}", {}),
    ("{{ tools|tojson }}\n{% for t in tools %}{{ t.function|tojson(indent=4) }}{% endfor %}", {"tools": TOOLS}),
    ("{{ messages|tojson }}", {"messages": MSGS}),
    # ---- loops
    ("{% for i in [10, 20, 30] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {}),
    ("{% for i in [10, 20, 30] %}{{ loop.previtem }}>{{ i }}>{{ loop.nextitem }};{% endfor %}", {}),
    ("{% for i in [] %}x{% else %}empty{% endfor %} {% for i in [1] %}x{% else %}empty{% endfor %} {% for i in x %}x{% else %}undef{% endfor %}", {}),
    ("{% for c in 'héllo' %}[{{ c }}]{% endfor %} {% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %} {% for i in range(3) %}{{ i }}{% endfor %} {% for i in range(5, 0, -2) %}{{ i }}{% endfor %}", {}),
    ("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %} {% for a, b in [(1, 2), [3, 4], 'xy'] %}{{ a }}{{ b }}{% endfor %} {% for (a, b) in [(1, 2)] %}{{ a + b }}{% endfor %}", {}),
    ("{% for i in range(10) if i is odd %}{{ i }}:{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}{% endfor %}", {}),
    ("{% for m in messages if m.role != 'system' %}{{ loop.index0 }}={{ m.role }} {% endfor %}", {"messages": MSGS}),
    ("{% for i in range(6) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("{% for row in [[1, 2], [3, 4]] %}{% for x in row %}{{ loop.index }}{{ x }}{% if x == 3 %}{% break %}{% endif %}{% endfor %}/{{ loop.index }};{% endfor %}", {}),
    ("{% for x in [1, 2] %}{% set y = x * 10 %}{{ y }}{% endfor %}|{{ y }}|", {}),
    ("{% set y = 'outer' %}{% for x in [1, 2] %}{{ y }}{% set y = x %}{{ y }}{% endfor %}|{{ y }}", {}),
    ("{% for x in [1, 2, 3] %}{% if not loop.first %}{{ prev }}{% endif %}{% set prev = x %}{% endfor %}", {}),
    ("{% for x in [1, 2] %}{{ loop.index }}{% for y in 'ab' %}{{ loop.index }}{{ y }}{% endfor %}{{ loop.index }} {% endfor %}", {}),
    ("{% for i in range(3) %}{{ loop.cycle('odd', 'even') if false else i }}{% endfor %}", {}),
    ("{% for m in messages %}{% if loop.index > 1 and loop.previtem['role'] != 'assistant' %}+{% endif %}{{ m.role[0] }}{% endfor %}", {"messages": MSGS}),
    ("{% for m in messages[::-1] %}{% set index = (messages|length - 1) - loop.index0 %}{{ index }}{{ m.role[0] }}{% endfor %}", {"messages": MSGS}),
    ("{% for item in tree recursive %}[{{ loop.depth }}{{ loop.depth0 }}{{ item.name }}{% if item.children %}{{ loop(item.children) }}{% endif %}{{ loop.index }}]{% endfor %}",
     {"tree": [{"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}, {"name": "d"}]}, {"name": "e"}]}),
    ("{% for x in [1, 2] recursive %}{{ x }}{% endfor %}{% for x in y recursive %}{{ x }}{% endfor %}", {}),
    ("{% for i in [1, 2] %}{% continue %}{% else %}else-after-continue{% endfor %} {% for i in [1, 2] %}{% if i == 1 %}{% break %}{% endif %}{% else %}else-after-break{% endfor %} {% for i in [1, 2] %}{% if i == 2 %}{% continue %}{% endif %}{% else %}no-else{% endfor %}", {}),
    ("{% for i in [1, 2] %}{% set b %}x{% break %}{% endset %}[{{ b }}]{% endfor %}|{% for i in [1, 2] %}{% filter upper %}a{% continue %}{% endfilter %}{{ i }}{% endfor %}|{% for i in [1, 2] %}{% with a = 1 %}{{ a }}{% break %}{% endwith %}{% endfor %}", {}),
    ("{% set a = 'outer' %}{% set b %}{% set a = 'inner' %}{{ a }}{% endset %}{{ a }} {{ b }} {% filter upper %}{% set a = 'f' %}{{ a }}{% endfilter %} {{ a }}", {}),
    # ---- set, namespace, with, blocks, macros
    ("{% set a = 1 %}{% set b, c = 2, 3 %}{% set d = a + b + c %}{{ a }}{{ b }}{{ c }}{{ d }} {% set t = 1, 2 %}{{ t }}", {}),
    ("{% set ns = namespace(count=0, names=[]) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}{% set ns.names = ns.names + [m.role] %}{% endfor %}{{ ns.count }} {{ ns.names }} {{ ns.missing }}|{{ ns }}", {"messages": MSGS}),
    ("{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }} {{ ns['a'] }} {% set d = dict(x=1, y='z') %}{{ d }} {{ dict([('p', 1)]) }}", {}),
    ("{% set x %}captured {{ 1 + 1 }}\n{% endset %}[{{ x }}] {% set y | upper %}shout{% endset %}{{ y }}", {}),
    ("{% filter upper %}abc {{ 'def' }}{% endfilter %} {% filter replace('a', 'b')|upper %}aaa{% endfilter %}", {}),
    ("{% with a = 1, b = 'x' %}{{ a }}{{ b }}{% endwith %}{{ a }}|", {}),
    ("{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', '?') }} {{ greet(punct='.', name='Cy') }} {{ greet() }}", {}),
    ("{% macro f() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, k=3) }}", {}),
    ("{% macro outer() %}[{% for i in range(2) %}{{ inner(i) }}{% endfor %}]{% endmacro %}{% macro inner(x) %}<{{ x }}>{% endmacro %}{{ outer() }}", {}),
    ("{% set g = 'global' %}{% macro m() %}{{ g }}{% endmacro %}{% set g = 'changed' %}{{ m() }} {{ m()|upper }} {{ m() ~ '!' }} {{ m()|length }}", {}),
    ("{% macro render_args(args) %}{% for k, v in args.items() %}{{ k }}={{ v|tojson }}{{ ', ' if not loop.last }}{% endfor %}{% endmacro %}{{ render_args({'city': 'Paris', 'n': 2, 'l': [1]}) }}", {}),
    ("{% macro typ(spec) %}{% if spec.type == 'string' %}str{% elif spec.type == 'array' %}list[{{ typ(spec['items']) }}]{% else %}{{ spec.type }}{% endif %}{% endmacro %}{{ typ({'type': 'array', 'items': {'type': 'array', 'items': {'type': 'string'}}}) }}", {}),
    ("{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
    # ---- whitespace control
    ("  {% if true %}\n  x\n  {% endif %}\n  y  {# c #}\n z {{- ' w ' -}}   q {%+ if 1 %}a{% endif +%}\nb", {}),
    ("{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n", {}),
    ("{%- for i in [1, 2] -%}\n  {{ i }}\n{%- endfor -%}\n  end", {}),
    ("a\n{# comment #}\nb\n  {# indented comment #}\nc {# inline #} d\n{#- strip -#}\n e", {}),
    ("x  {{- 1 -}}  y\n\n{{- 2 }}\n{{ 3 -}}\n\nz", {}),
    ("line\n    {% set a = 1 %}\n    {{ a }}\n    {%- set b = 2 %}\n\t{% if a %}t{% endif %}\n", {}),
    ("{% raw %}{{ not rendered }} {% if %}{% endraw %}|{%- raw %} x {% endraw -%} |{% raw -%}  y  {%- endraw %}|", {}),
    ("a\r\nb\r\n{% if true %}\r\nc\r\n{% endif %}\r\nd\r\n", {}),
    ("{{ 'x' }}\n", {}),
    ("{{ 'x' }}\n\n", {}),
    ("\n\n{%- if true %}\n\n  a\n{%- endif %}", {}),
    ("{% if true %}  {% endif %}|{% if true %}\n  {% endif %}|", {}),
    ("A {%- if true %} B {%- endif %} C {%- if false %} D {% else -%} E {%- endif %}", {}),
    ("{{ {'a': {'b': 1}} }} {{ {'x': [1, {'y': 2}]}['x'][1] }}", {}),
    ("\t{% for m in messages %}\n\t\t{{- m.role }}\n\t{% endfor %}", {"messages": MSGS}),
    ("\u3000{% if true %}x{% endif %}\n\xa0 {# c #}y\n\t{%+ if true %}z{% endif %}", {}),
    # ---- Jinja2's constant folding shows: a constant {{ }} is evaluated with the sandbox's getitem
    ("{{ (7)[1:] }}|{{ not (10)[::-1] }}|{{ ((true)[::-1]|list) }}|{{ (-3 if '3' else none) ** y }}", {"y": 2}),
    ("{{ x ~ (7)[1:] }}", {"x": "a"}),
    ("{{ 'plain' % x }} {{ '' % [1] }} {{ (1,) in {(1,): 2} }} {{ {(1, 2): 'tuple key'}[(1, 2)] }}", {}),
    ("{{ x|last }}|{{ x|reverse|list }}|{{ x|sort }}|{{ x|sum }}|{{ x|center(3) }}|{{ x|min }}|{{ x|unique|list }}|{{ x|map('upper')|list }}", {}),
    ("{{ x|int }}", {}),
    ("{{ x|float(1.0) }}", {}),
    ("{{ x|indent }}", {}),
    ("{{ 1e3 ** 1e3 }}", {}),
    ("{{ (5)[1:] ~ y }}", {"y": "q"}),
    # ---- undefined semantics
    ("[{{ x }}] [{{ x.y is defined if x is defined else 'guarded' }}] [{{ x|default('d') }}] [{{ x or 'or' }}] [{{ x ~ 'cat' }}] [{{ x == y }}] [{{ x != 1 }}]", {}),
    ("[{{ (x.y is defined) if x is defined else 'guarded' }}] [{{ x|default('d') }}] [{{ x or 'or' }}] [{{ x ~ 'cat' }}] [{{ x == y }}] [{{ x != 1 }}]", {}),
    ("{% if x %}yes{% else %}no{% endif %} {% if not x %}neg{% endif %} {% for i in x %}never{% endfor %}{{ x|length }} {{ x is none }}", {}),
    ("{{ d.missing is defined }} {{ d.missing is none }} {{ d['missing'] is undefined }} {{ d.get('missing') is none }} {{ d.get('missing', 'dflt') }}", {"d": {}}),
    ("{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{{ add_generation_prompt }} {{ tools }} {{ documents }}", {}),
    ("{{ bos_token }}|{{ eos_token is defined }}|{{ enable_thinking is defined and enable_thinking is false }}", {"enable_thinking": False}),
    # ---- dict and list methods
    ("{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 0) }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ d.items() }} {{ d.keys() }} {{ d.values() }}", {"d": {"a": 1, "b": 2}}),
    ("{{ d.copy() }} {{ [1, 2, 1].count(1) }} {{ [1, 2, 1].index(2) }} {{ (1, 2).index(2) }} {{ [1, 2].copy() }}", {"d": {"a": 1}}),
    ("{{ range(3) }} {{ range(1, 4) }} {{ range(0, 10, 3) }} {{ range(3)[1] }} {{ range(3)[-1] }} {{ range(10)[2:5]|list }} {{ range(0) }}", {}),
    ("{% set l = [1, 2] %}{{ l.append is defined }} {{ l.append }}|{% set d = {} %}{{ d.update }}|", {}),
    # ---- real-world-like fragments
    ("{{ bos_token }}{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('roles must alternate') }}{% endif %}[{{ m['role'] }}]{% endfor %}",
     {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "bos_token": "<s>"}),
    ("{%- set ns = namespace(found=false) -%}{%- for message in messages -%}{%- if message['role'] == 'system' -%}{%- set ns.found = true -%}{%- endif -%}{%- endfor -%}{{ ns.found }}", {"messages": MSGS}),
    ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
     {"messages": MSGS, "add_generation_prompt": True}),
    ("{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}{{- bos_token }}{%- for message in loop_messages %}{%- if message['role'] == 'user' %}{%- if loop.first and system_message is defined %}{{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}{%- else %}{{- ' [INST] ' + message['content'] + ' [/INST]' }}{%- endif %}{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content'] + eos_token}}{%- endif %}{%- endfor %}",
     {"messages": MSGS, "bos_token": "<s>", "eos_token": "</s>"}),
    ("{%- for tool in tools %}\n{{- tool.function.name }}({% for name, p in tool.function.parameters.properties | items %}{{ name }}: {{ p.type }}{% endfor %}){{ '\\n' }}\n{%- endfor %}", {"tools": TOOLS}),
    ("{%- set date_string = strftime_now('%Y') %}{{ date_string|length }} {{ date_string is string }}", {}),
    ("{% set content = message.content.split('</think>')[-1].lstrip('\\n') %}{% set reasoning = message.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}[{{ content }}][{{ reasoning }}]",
     {"message": {"content": "<think>\nhmm\n</think>\n\nanswer"}}),
    ("{%- for message in messages %}{%- if message.role == 'assistant' and message.tool_calls %}{%- for tc in message.tool_calls %}{{ tc.function.name }}:{{ tc.function.arguments|tojson }}{% endfor %}{% endif %}{% endfor %}",
     {"messages": [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1, "b": "é"}}}]}]}),
    ("{%- set message_roles = ['SYSTEM', 'USER'] -%}{%- set ns = namespace(messages=messages) -%}{%- if ns.messages[0]['role']|upper != 'SYSTEM' -%}{%- set ns.messages = [{'role': 'SYSTEM', 'content': 'dflt'}] + ns.messages -%}{%- endif -%}{%- for m in ns.messages -%}{{ m.role|upper }}{{ ' in' if m.role|upper in message_roles else ' out' }};{%- endfor -%}",
     {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}),
    ("{{ messages[0]['content'] if messages[0]['content'] is string else messages[0]['content'][0]['text'] }}",
     {"messages": [{"role": "system", "content": [{"type": "text", "text": "parts"}]}]}),
    # ---- errors (the exception is recorded; xLLM must fail)
    ("{{ x.y }}", {}),
    ("{{ x['y'] }}", {}),
    ("{{ x() }}", {}),
    ("{{ x + 1 }}", {}),
    ("{{ x < 1 }}", {}),
    ("{{ -x }}", {}),
    ("{{ x|tojson }}", {}),
    ("{{ x|abs }}", {}),
    ("{{ messages[5]['role'] }}", {"messages": MSGS}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ 1 + 'a' }}", {}),
    ("{{ [1] + (2,) }}", {}),
    ("{{ 'a' - 'b' }}", {}),
    ("{{ 'a' < 1 }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ 1 // 0 }}", {}),
    ("{{ 1 % 0 }}", {}),
    ("{{ 1 in 2 }}", {}),
    ("{{ 1 in 'abc' }}", {}),
    ("{{ 1|length }}", {}),
    ("{{ none|length }}", {}),
    ("{{ [1, 'a']|sort }}", {}),
    ("{{ 'abc'.split('') }}", {}),
    ("{{ 'x'.index('y') }}", {}),
    ("{{ [1].index(5) }}", {}),
    ("{{ ','.join([1, 2]) }}", {}),
    ("{{ '%d' % 'x' }}", {}),
    ("{{ '%s %s' % ('a',) }}", {}),
    ("{{ '%s' % ('a', 'b') }}", {}),
    ("{{ '{}'.format() }}", {}),
    ("{{ raise_exception('custom failure: ' ~ 42) }}", {}),
    ("{% for a, b in [1, 2] %}{% endfor %}", {}),
    ("{% for a, b in [(1, 2, 3)] %}{% endfor %}", {}),
    ("{% set x = 1 %}{% set x.attr = 2 %}", {}),
    ("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", {}),
    ("{% macro f(a) %}{% endmacro %}{{ f(b=1) }}", {}),
    ("{{ range(200000)|length }}", {}),
    ("{{ 'x'|int(base=99) }}", {}),
    ("{{ [1, 2]|map('string') }}", {}),
    ("{{ {}.items }}", {}),
    ("{{ [1]|selectattr('x')|length }}", {}),
    ("{% set l = [1] %}{{ l.append(2) }}", {}),
    ("{{ {'a': 1}|tojson(sort_keys=true, indent='x', separators=('!',)) }}", {}),
    ("{{ (1, 2)|last }}|{{ [1, 2]|map('string')|last }}", {}),
    ("{{ [1, 2]|join(',', attribute='x.y') }}", {}),
]

SYNTAX_ERRORS = [
    "{{ }}", "{{ 1 + }}", "{% if %}{% endif %}", "{% if true %}no end", "{% for x in %}{% endfor %}",
    "{% endif %}", "{% else %}", "{% for x in y %}{% endif %}", "{{ x |nope }}", "{{ x is nope }}",
    "{% nope %}", "{% include 'x.html' %}", "{% extends 'base' %}", "{% call m() %}{% endcall %}",
    "{{ 'unterminated }}", "{# unclosed comment", "{{ x", "{% set %}", "{% macro m(a=1, b) %}{% endmacro %}",
    "{% break %}", "{{ f(a=1, 2) }}", "{{ (1, 2 }}", "{{ [1, 2 }}", "{{ x.1.y.'z' }}", "{{ @ }}",
    "{% for x in y recursive %}{% endfor %}", "{{ x|batch(2) }}", "{% raw %} no end",
]


def main():
    env = hf_jinja.environment()
    lines = []
    for tpl, vars_ in CASES + [(s, {}) for s in SYNTAX_ERRORS]:
        vars_ = dict(vars_)
        messages = vars_.pop("messages", [])
        rec = {"template": tpl, "messages": messages, "vars": vars_}
        try:
            text = hf_jinja.render(tpl, messages, **vars_)
        except Exception as e:
            rec["error"] = "%s: %s" % (type(e).__name__, e)
        else:
            if " at 0x" in text:
                rec["error"] = "unstable output (a Python object address): %r" % re.sub(r"0x[0-9a-f]+", "0x...", text)
            else:
                rec["expected"] = text
        lines.append(json.dumps(rec, ensure_ascii=False))
    with open(OUT, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    n_err = sum('"error"' in l for l in lines)
    print("%d cases (%d errors) -> %s" % (len(lines), n_err, os.path.normpath(OUT)))


if __name__ == "__main__":
    main()
