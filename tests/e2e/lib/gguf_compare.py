#!/usr/bin/env python3
"""gguf_compare.py A.gguf B.gguf [KEY...] - exit 0 when B holds A's tensors (names, shapes,
types, bytes, and no others), A's general.architecture and every <arch>.* key of A with the same
value (f32 within 1e-6 relative; keys B adds are allowed: they restate defaults), the listed
KEYs excepted (optional keys A has and B need not). The tokenizer and general.* are not
compared. Prints each difference. Standard library only."""
import struct, sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
FMT = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}


def read(path):
    d = open(path, 'rb').read()
    n_t, n_kv = struct.unpack_from('<QQ', d, 8)
    p = 24

    def rstr(p):
        n = struct.unpack_from('<Q', d, p)[0]
        return d[p + 8:p + 8 + n].decode('utf-8', 'replace'), p + 8 + n

    def val(p, t):
        if t == 8:
            return rstr(p)
        if t == 9:
            et, n = struct.unpack_from('<IQ', d, p)
            p += 12
            out = []
            for _ in range(n):
                v, p = val(p, et)
                out.append(v)
            return out, p
        return struct.unpack_from('<' + FMT[t], d, p)[0], p + SIZES[t]

    kv = {}
    for _ in range(n_kv):
        k, p = rstr(p)
        t = struct.unpack_from('<I', d, p)[0]
        kv[k], p = val(p + 4, t)
    ti = []
    for _ in range(n_t):
        name, p = rstr(p)
        nd = struct.unpack_from('<I', d, p)[0]
        ne = struct.unpack_from('<%dQ' % nd, d, p + 4)
        ty, off = struct.unpack_from('<IQ', d, p + 4 + 8 * nd)
        p += 4 + 8 * nd + 12
        ti.append((name, ne, ty, off))
    align = kv.get('general.alignment', 32)
    start = (p + align - 1) // align * align
    offs = sorted(o for _, _, _, o in ti) + [len(d) - start]
    tensors = {}
    for name, ne, ty, off in ti:
        n = 1
        for x in ne:
            n *= x
        es = {0: 4, 1: 2}[ty]
        tensors[name] = (ne, ty, d[start + off:start + off + n * es])
    return kv, tensors


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
