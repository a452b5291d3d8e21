#!/usr/bin/env python3
"""gguf_partial_rotary.py SRC.gguf DST.gguf - a Phi-4-mini-style partial-rotary variant of
tests/data/archs/phi3/model.gguf, written by rewriting the file's header, never its weights:
phi3.rope.dimension_count 16 -> 12 (RoPE over the first 12 of each head's 16 values, llama.cpp's
n_rot; HF's partial_rotary_factor 0.75), phi3.rope.scaling.original_context_length 4096 -> 256, and
two tensors appended, rope_factors_short.weight and rope_factors_long.weight (LongRoPE, 6 = 12 / 2
f32 each, exact binary fractions: 1 + i/8 and 1 + 3i/4). Every other key, tensor info and tensor
byte is copied as it is, so the output is the same bytes on every machine (its sha256 is recorded
in tests/data/archs/phi4-partial/expected.json, whose log-probabilities llama-server computed on
it). Standard library only."""
import struct
import sys

ROT, ORIG = 12, 256
FACTORS = {'rope_factors_short.weight': [1 + i / 8 for i in range(ROT // 2)],
           'rope_factors_long.weight': [1 + 0.75 * i for i in range(ROT // 2)]}
SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def main(src, dst):
    d = open(src, 'rb').read()
    magic, version, n_t, n_kv = struct.unpack_from('<4sIQQ', d, 0)
    assert magic == b'GGUF' and version == 3, 'not a GGUF v3 file'
    p = 24

    def skip_str(p):
        return p + 8 + struct.unpack_from('<Q', d, p)[0]

    def skip_val(p, t):
        if t == 8:
            return skip_str(p)
        if t == 9:
            et, n = struct.unpack_from('<IQ', d, p)
            p += 12
            if et in SIZES:
                return p + n * SIZES[et]
            for _ in range(n):
                p = skip_val(p, et)
            return p
        return p + SIZES[t]

    kvs, seen, align = [], set(), 32
    for _ in range(n_kv):
        k0 = p
        n = struct.unpack_from('<Q', d, p)[0]
        key = d[p + 8:p + 8 + n].decode()
        p += 8 + n
        t = struct.unpack_from('<I', d, p)[0]
        v0 = p + 4
        p = skip_val(v0, t)
        raw = d[k0:p]
        if key in ('phi3.rope.dimension_count', 'phi3.rope.scaling.original_context_length'):
            assert t == 4, key  # u32 in the fixture
            raw = d[k0:v0] + struct.pack('<I', ROT if key.endswith('dimension_count') else ORIG)
            seen.add(key)
        if key == 'general.alignment':
            align = struct.unpack_from('<I', d, v0)[0]
        kvs.append(raw)
    assert len(seen) == 2, 'the fixture lacks a key this script rewrites'
    infos, end = [], 0
    for _ in range(n_t):
        i0 = p
        p = skip_str(p)
        nd = struct.unpack_from('<I', d, p)[0]
        ne = struct.unpack_from('<%dQ' % nd, d, p + 4)
        ty, off = struct.unpack_from('<IQ', d, p + 4 + 8 * nd)
        p += 4 + 8 * nd + 12
        name = d[i0 + 8:i0 + 8 + struct.unpack_from('<Q', d, i0)[0]].decode()
        assert name not in FACTORS, 'the fixture already has LongRoPE factors'
        assert ty in (0, 1), name
        n_el = 1
        for x in ne:
            n_el *= x
        end = max(end, off + n_el * (4 if ty == 0 else 2))
        infos.append(d[i0:p])
    start = (p + align - 1) // align * align
    data = d[start:start + end]
    for name, vals in FACTORS.items():  # appended after the last tensor, aligned
        off = (len(data) + align - 1) // align * align
        data += b'\0' * (off - len(data)) + struct.pack('<%df' % len(vals), *vals)
        nb = name.encode()
        infos.append(struct.pack('<Q', len(nb)) + nb + struct.pack('<IQIQ', 1, len(vals), 0, off))
    head = struct.pack('<4sIQQ', b'GGUF', 3, len(infos), len(kvs)) + b''.join(kvs) + b''.join(infos)
    head += b'\0' * ((align - len(head) % align) % align)
    open(dst, 'wb').write(head + data)


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
