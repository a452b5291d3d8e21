#!/usr/bin/env python3
"""longrope_hf.py HF_DIR - turn the HF form of tests/data/archs/phi3 (written by gguf_to_hf.py) into
a Phi-3 LongRoPE checkpoint, in place: config.json gets Phi-3-128k's keys (transformers' Phi3Config):
max_position_embeddings 4096, original_max_position_embeddings 256 (top level, as Phi-3 has it) and
rope_scaling {"type": "longrope", "short_factor": [...], "long_factor": [...]} with head_dim / 2
factors each. The factors are exact binary fractions (1 + i/32 short, 1 + 3i/4 long), so the GGUF
form (f32) holds the same values. With max_position_embeddings / original = 16, HF's attention
factor is sqrt(1 + ln 16 / ln 256) = sqrt(1.5). Standard library only; deterministic."""
import json, os, sys


def main(d):
    p = os.path.join(d, 'config.json')
    c = json.load(open(p))
    half = c['head_dim'] // 2
    c['max_position_embeddings'] = 4096
    c['original_max_position_embeddings'] = 256
    c['rope_scaling'] = {'type': 'longrope', 'short_factor': [1 + i / 32 for i in range(half)],
                         'long_factor': [1 + 0.75 * i for i in range(half)]}
    json.dump(c, open(p, 'w'), indent=1)


if __name__ == '__main__':
    main(sys.argv[1])
