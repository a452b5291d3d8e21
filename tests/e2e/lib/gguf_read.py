"""gguf_read.py - a GGUF file's metadata and F32/F16 tensors, for the test scripts beside it
(gguf_compare.py, gguf_to_hf.py). read_gguf(path) -> (kv, tensors): kv maps each key to its value
(arrays as lists), tensors maps each name to (ne, type, bytes) with ne in GGUF order (fastest
dimension first) and type 0 (F32) or 1 (F16). Standard library only."""
import struct

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
FMT = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}


def read_gguf(path):
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
    tensors = {}
    for name, ne, ty, off in ti:
        assert ty in (0, 1), name  # F32 / F16 only here
        n = 1
        for x in ne:
            n *= x
        es = 4 if ty == 0 else 2
        tensors[name] = (ne, ty, d[start + off:start + off + n * es])
    return kv, tensors
