#!/usr/bin/env python3
"""gguf_strip_vocab.py IN OUT - a GGUF file with its SentencePiece vocabulary replaced by a
synthetic one of the same size: <unk>, <s>, </s>, the 256 byte pieces <0x00>..<0xFF>, then
"w<id>" pieces (scores -id). Everything else (other metadata, tensor infos, tensor bytes) is kept
byte for byte, so the model's outputs by token id do not change. Used to keep vendor-licensed
tokenizer data (Llama 2's vocabulary) out of the repository's test fixtures (tests/data/archs).
Standard library only."""
import struct, sys

def main(src, dst):
    d = open(src, 'rb').read()
    assert d[:4] == b'GGUF' and struct.unpack_from('<I', d, 4)[0] == 3
    n_t, n_kv = struct.unpack_from('<QQ', d, 8)
    p = 24
    SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def rstr(p):
        n = struct.unpack_from('<Q', d, p)[0]
        return d[p + 8:p + 8 + n], p + 8 + n

    def skip(p, t):
        if t == 8:
            return rstr(p)[1]
        if t == 9:
            et, n = struct.unpack_from('<IQ', d, p)
            p += 12
            for _ in range(n):
                p = skip(p, et)
            return p
        return p + SIZES[t]

    kvs, align = [], 32
    for _ in range(n_kv):
        k, p = rstr(p)
        t = struct.unpack_from('<I', d, p)[0]
        q = skip(p + 4, t)
        kvs.append((k, d[p:q]))
        if k == b'general.alignment':
            align = struct.unpack_from('<I', d, p + 4)[0]
        p = q
    tinfo_start = p
    for _ in range(n_t):
        _, p = rstr(p)
        nd = struct.unpack_from('<I', d, p)[0]
        p += 4 + 8 * nd + 4 + 8
    tinfos = d[tinfo_start:p]
    data_start = (p + align - 1) // align * align
    n_vocab = None
    for k, v in kvs:
        if k == b'tokenizer.ggml.tokens':
            n_vocab = struct.unpack_from('<Q', v, 8)[0]
    assert n_vocab and n_vocab > 259

    def piece(i):
        if i < 3:
            return [b'<unk>', b'<s>', b'</s>'][i]
        if i < 259:
            return b'<0x%02X>' % (i - 3)
        return b'\xe2\x96\x81w%d' % i  # "▁w<id>"

    def arr(et, items):
        return struct.pack('<IIQ', 9, et, len(items)) + b''.join(items)
    new = {
        b'tokenizer.ggml.tokens': arr(8, [struct.pack('<Q', len(piece(i))) + piece(i) for i in range(n_vocab)]),
        b'tokenizer.ggml.scores': arr(6, [struct.pack('<f', -float(i)) for i in range(n_vocab)]),
        b'tokenizer.ggml.token_type': arr(5, [struct.pack('<i', 2 if i == 0 else 3 if i < 3 else 6 if i < 259 else 1)
                                             for i in range(n_vocab)]),
    }
    out = bytearray(d[:24])
    for k, v in kvs:
        out += struct.pack('<Q', len(k)) + k + new.get(k, v)
    out += tinfos
    out += b'\0' * ((align - len(out) % align) % align)
    out += d[data_start:]
    open(dst, 'wb').write(out)

if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
