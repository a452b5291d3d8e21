#!/usr/bin/env python3
"""gen_strings.py - the conformance corpus: thousands of deterministic strings
that stress a tokenizer (random Unicode across scripts, emoji ZWJ sequences,
code, whitespace runs, special tokens inside text, contractions, digits,
long inputs). Seeded, so every run and every machine gets the same strings.

usage: gen_strings.py OUT.jsonl [COUNT]      (one {"text": ...} per line)

Characters come from blocks assigned long ago (Unicode <= 6), so the Unicode
versions of the libraries compared (PCRE2, utf8proc, Oniguruma, Rust) agree.
"""
import json
import random
import sys
import unicodedata

RANGES = [  # (first, last) code points, all from old, stable blocks
    (0x20, 0x7E), (0xA0, 0xFF), (0x100, 0x17F), (0x180, 0x24F), (0x250, 0x2AF), (0x2B0, 0x2FF),
    (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x531, 0x587), (0x5D0, 0x5EA), (0x5B0, 0x5C7),
    (0x621, 0x64A), (0x660, 0x669), (0x6F0, 0x6F9), (0x905, 0x939), (0x93E, 0x94D), (0x966, 0x96F),
    (0x985, 0x9B9), (0xE01, 0xE3A), (0xE40, 0xE5B), (0x10D0, 0x10FA), (0x1100, 0x1112), (0x1161, 0x1175),
    (0x11A8, 0x11C2), (0x1E00, 0x1EFF), (0x1F00, 0x1FFE), (0x2000, 0x200F), (0x2010, 0x2027),
    (0x2030, 0x205E), (0x2070, 0x209C), (0x20A0, 0x20B5), (0x2100, 0x214F), (0x2150, 0x218B),
    (0x2190, 0x21FF), (0x2200, 0x22FF), (0x2460, 0x24FF), (0x2500, 0x257F), (0x25A0, 0x25FF),
    (0x2600, 0x26FF), (0x3000, 0x303F), (0x3041, 0x3096), (0x30A1, 0x30FA), (0x3131, 0x318E),
    (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0xF900, 0xFA2D), (0xFB00, 0xFB06), (0xFE30, 0xFE4F),
    (0xFF01, 0xFF5E), (0xFF61, 0xFF9F), (0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F680, 0x1F6C5),
    (0x1D400, 0x1D4FF),
]

WORDS = ("the of and to in is you that it he was for on are as with his they I at be this have from or one "
         "had by word but not what all were we when your can said there use an each which she do how their "
         "if will up other about out many then them these so some her would make like him into time has look "
         "two more write go see number no way could people my than first water been call who oil its now find "
         "Hello World Tokenizer HuggingFace xLLM don't I'm we'll they've she'd it's YOU'RE WE'LL THEY'VE").split()

SPECIALS = ["<s>", "</s>", "<unk>", "<pad>", "<bos>", "<eos>", "<|endoftext|>", "<|im_start|>", "<|im_end|>",
            "<think>", "</think>", "<tool_call>", "</tool_call>", "<|begin_of_text|>", "<|end_of_text|>",
            "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|reserved_special_token_3|>",
            "<start_of_turn>", "<end_of_turn>", "<unused7>", "<mask>", "<|fim_prefix|>", "<|box_start|>",
            "[multimodal]", "<start_of_image>", "<0x41>", "<|im_start", "im_end|>", "<<s>>", "</s></s>"]

CODE = [
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}\n",
    "const add = (a, b) => a + b;\nconsole.log(`${add(1, 2)}`);\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }\n",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;\n",
    "    if x != None and y == 'z':\n        pass\n\n\n",
    "<div class=\"a\">&nbsp;</div>\r\n",
    "x = [1, 2, 3]\ny = {'k': (4, 5)}\nz = x[0] + y['k'][1]\n",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }\n",
    "$ ls -la | grep '^d' && echo \"done\" > /dev/null 2>&1\n",
]

EMOJI_SEQS = ["\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466", "\U0001F3F3\uFE0F\u200D\U0001F308",
              "\U0001F44D\U0001F3FD", "\U0001F1EB\U0001F1F7", "1\uFE0F\u20E3", "\u2764\uFE0F",
              "\U0001F469\u200D\U0001F4BB", "\U0001F9D1\U0001F3FF\u200D\U0001F91D\u200D\U0001F9D1\U0001F3FB",
              "\U0001F600", "\U0001F62D\U0001F62D\U0001F62D", "\u263A\uFE0E"]

WHITESPACE = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", " \n ", "\u00A0", "\u3000",
              "\u2003", "\u200B", " \t \n", "        ", "\n    ", "\u2028", "\u0085", "\x0b", "\x0c"]

NUMBERS = ["0", "7", "42", "123", "1234", "12345", "3.14159", "1,000,000", "2024-01-15", "0x1F", "1e-9",
           "\u0663\u0664\u0665", "\uFF11\uFF12\uFF13", "\u0967\u0968", "\u00BD", "\u2167", "99.9%", "-17",
           "123456789012345678901234567890"]

CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D",
                "\u2019s", "'\u017F", "n't", "''", "'"]

COMBINING = ["e\u0301", "a\u0308", "n\u0303", "A\u030A", "\u212B", "\u212A", "o\u0302\u0323", "\u1E9B\u0323",
             "\uFB01", "\u2460", "\u00B2", "\u3300", "\uFF21", "\u2126", "\u0130", "\u03A3", "\u1100\u1161\u11A8"]


def rand_char(rng):
    while True:
        a, b = rng.choice(RANGES)
        c = chr(rng.randint(a, b))
        if unicodedata.category(c) not in ("Cn", "Cs", "Co"):
            return c


def piece(rng):
    k = rng.random()
    if k < 0.30:
        return rng.choice(WORDS)
    if k < 0.45:
        return "".join(rand_char(rng) for _ in range(rng.randint(1, 6)))
    if k < 0.55:
        return rng.choice(WHITESPACE)
    if k < 0.63:
        return rng.choice(NUMBERS)
    if k < 0.70:
        return rng.choice(SPECIALS)
    if k < 0.76:
        return rng.choice(EMOJI_SEQS)
    if k < 0.82:
        return rng.choice(CONTRACTIONS)
    if k < 0.88:
        return rng.choice(COMBINING)
    if k < 0.93:
        return rng.choice(CODE)
    return rng.choice(".,;:!?()[]{}\"'-_/\\@#$%^&*+=<>|~`")


def make(rng, n_pieces):
    out = []
    for _ in range(n_pieces):
        out.append(piece(rng))
        if rng.random() < 0.5:
            out.append(" ")
    return "".join(out)


def main():
    path = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    rng = random.Random(20240611)
    texts = ["", " ", "  ", "\n", "a", "\u0000", "Hello world", " Hello", "Hello ", "<s>", " <s> ", "<s><s>"]
    texts += [rng.choice(SPECIALS) + make(rng, 3) for _ in range(20)]
    texts += [s + w for s in SPECIALS for w in (" hi", "hi", "\n", "")]
    texts += [w + s for s in SPECIALS for w in (" ", "x", "\n")]
    texts += ["".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 12))) for _ in range(60)]
    texts += ["".join(rand_char(rng) for _ in range(rng.randint(1, 40))) for _ in range(300)]
    texts += [" ".join(rng.choice(NUMBERS) for _ in range(rng.randint(1, 8))) for _ in range(60)]
    texts += ["".join(rng.choice(CODE) for _ in range(rng.randint(1, 4))) for _ in range(80)]
    while len(texts) < count - 12:
        texts.append(make(rng, rng.randint(1, 30)))
    for i in range(12):  # long inputs
        texts.append(make(rng, rng.randint(800, 2500)) if i % 3 else " ".join(rng.choice(WORDS) for _ in range(3000)))
    with open(path, "w", encoding="utf-8") as f:
        for t in texts[:count]:
            f.write(json.dumps({"text": t}, ensure_ascii=True) + "\n")


if __name__ == "__main__":
    main()
