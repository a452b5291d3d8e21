"""gguf_set_keys.py - a copy of a GGUF file with metadata keys added, replaced or removed; the
tensor infos and tensor bytes stay as they are (only the data section moves to its new aligned
start). Used to make variants of the fixtures in tests/data/archs (e.g. YaRN rope scaling on the
same weights). Standard library only.
usage: gguf_set_keys.py IN OUT KEY=TYPE:VALUE ... (TYPE: f32, u32, bool, str) or -KEY (remove)"""
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def skip_val(d, p, t):
    if t == 8:
        return p + 8 + struct.unpack_from('<Q', d, p)[0]
    if t == 9:
        et, n = struct.unpack_from('<IQ', d, p)
        p += 12
        if et in SIZES:
            return p + n * SIZES[et]
        for _ in range(n):
            p = skip_val(d, p, et)
        return p
    return p + SIZES[t]


def gstr(s):
    b = s.encode('utf-8')
    return struct.pack('<Q', len(b)) + b


def encode(key, spec):
    ty, _, v = spec.partition(':')
    if ty == 'f32':
        return gstr(key) + struct.pack('<If', 6, float(v))
    if ty == 'u32':
        return gstr(key) + struct.pack('<II', 4, int(v))
    if ty == 'bool':
        return gstr(key) + struct.pack('<I?', 7, v == 'true')
    if ty == 'str':
        return gstr(key) + struct.pack('<I', 8) + gstr(v)
    raise SystemExit('unknown type %r' % ty)


def main():
    src, dst, edits = sys.argv[1], sys.argv[2], sys.argv[3:]
    d = open(src, 'rb').read()
    assert d[:4] == b'GGUF', 'not a GGUF file'
    version, n_t, n_kv = struct.unpack_from('<IQQ', d, 4)
    p = 24
    kvs, align = [], 32
    for _ in range(n_kv):
        q = p
        n = struct.unpack_from('<Q', d, p)[0]
        key = d[p + 8:p + 8 + n].decode('utf-8')
        t = struct.unpack_from('<I', d, p + 8 + n)[0]
        p = skip_val(d, p + 8 + n + 4, t)
        if key == 'general.alignment':
            align = struct.unpack_from('<I', d, p - 4)[0]
        kvs.append((key, d[q:p]))
    ti0 = p
    for _ in range(n_t):
        n = struct.unpack_from('<Q', d, p)[0]
        p += 8 + n
        nd = struct.unpack_from('<I', d, p)[0]
        p += 4 + 8 * nd + 12
    tinfo = d[ti0:p]
    data = d[(p + align - 1) // align * align:]
    for e in edits:
        if e.startswith('-'):
            kvs = [kv for kv in kvs if kv[0] != e[1:]]
            continue
        key, _, spec = e.partition('=')
        b = encode(key, spec)
        kvs = [kv for kv in kvs if kv[0] != key] + [(key, b)]
    head = d[:4] + struct.pack('<IQQ', version, n_t, len(kvs)) + b''.join(b for _, b in kvs) + tinfo
    head += b'\0' * (-len(head) % align)
    open(dst, 'wb').write(head + data)


if __name__ == '__main__':
    main()
