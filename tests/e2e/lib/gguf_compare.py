#!/usr/bin/env python3
"""gguf_compare.py A.gguf B.gguf [KEY...] - exit 0 when B holds A's tensors (names, shapes,
types, bytes, and no others), A's general.architecture and every <arch>.* key of A with the same
value (f32 within 1e-6 relative; keys B adds are allowed: they restate defaults), the listed
KEYs excepted (optional keys A has and B need not). The tokenizer and general.* are not
compared. Prints each difference. Standard library only."""
import sys

from gguf_read import read_gguf as read


def main(a, b, *skip):
    ka, ta = read(a)
    kb, tb = read(b)
    bad = []
    arch = ka['general.architecture']
    if kb.get('general.architecture') != arch:
        bad.append('architecture %s vs %s' % (arch, kb.get('general.architecture')))
    for k in sorted(ka):
        if not k.startswith(arch + '.') or k[len(arch) + 1:] in skip:
            continue
        x, y = ka.get(k), kb.get(k)
        same = x == y or (isinstance(x, float) and isinstance(y, (int, float)) and abs(x - y) <= 1e-6 * abs(x))
        if not same:
            bad.append('%s: %r vs %r' % (k, x, y))
    for n in sorted(set(ta) | set(tb)):
        if n not in ta or n not in tb:
            bad.append('tensor %s only in %s' % (n, a if n in ta else b))
        elif ta[n] != tb[n]:
            bad.append('tensor %s differs (shape/type %s %s vs %s %s)' % (n, ta[n][0], ta[n][1], tb[n][0], tb[n][1]))
    for x in bad:
        print('   ' + x)
    sys.exit(1 if bad else 0)


if __name__ == '__main__':
    main(*sys.argv[1:])
