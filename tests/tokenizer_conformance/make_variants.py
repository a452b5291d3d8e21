#!/usr/bin/env python3
"""make_variants.py - synthetic tokenizers for the conformance test, built
from the two the repository ships (Qwen3's byte-level BPE and the
stories260k SentencePiece-style BPE) with other normalizers, pre-tokenizers,
post-processors, decoders and added-token flags, so that every component
xLLM implements is compared with HF tokenizers, not only those the real
models use.

usage: make_variants.py QWEN3_DIR TINYSTORIES_DIR OUT_DIR
Writes OUT_DIR/<name>/tokenizer.json for each variant; prints the names.
"""
import copy
import json
import os
import sys

META = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True}
BL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}


def tpl(first, last, table):
    single = [{"SpecialToken": {"id": first, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]
    if last:
        single.append({"SpecialToken": {"id": last, "type_id": 0}})
    return {"type": "TemplateProcessing", "single": single, "pair": single,
            "special_tokens": {k: {"id": k, "ids": [v], "tokens": [k]} for k, v in table.items()}}


def qwen_variants(q):
    out = {}
    v = copy.deepcopy(q)  # GPT-2 style: ByteLevel with its own regex and a prefix space
    v["normalizer"] = None
    v["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    v["post_processor"] = tpl("<|im_start|>", "<|im_end|>", {"<|im_start|>": 151644, "<|im_end|>": 151645})
    v["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    out["q_gpt2"] = v

    v = copy.deepcopy(q)  # a pile of splitters
    v["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "NFKC"}, {"type": "Lowercase"}, {"type": "Strip", "strip_left": True, "strip_right": True}]}
    v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "MergedWithNext", "invert": False},
        {"type": "Digits", "individual_digits": True},
        {"type": "Punctuation", "behavior": "Contiguous"},
        {"type": "Split", "pattern": {"String": "e"}, "behavior": "MergedWithPrevious", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[^aeiou ]+"}, "behavior": "Isolated", "invert": True},
        BL]}
    v["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        tpl("<|endoftext|>", None, {"<|endoftext|>": 151643})]}
    out["q_splits"] = v

    v = copy.deepcopy(q)  # added-token flags, normalized matching, truncation and padding
    v["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "NFC"}, {"type": "Replace", "pattern": {"Regex": "[0-9]+"}, "content": "#"}]}
    v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
         "behavior": "Removed", "invert": True}, {"type": "WhitespaceSplit"}, BL]}
    for t in v["added_tokens"]:
        if t["content"] == "<|im_start|>":
            t["lstrip"] = True
        if t["content"] == "<|im_end|>":
            t["rstrip"] = True
        if t["content"] == "<think>":
            t["single_word"] = True
        if t["content"] == "</think>":
            t["normalized"] = True
    nid = max(t["id"] for t in v["added_tokens"]) + 1
    for i, (c, flags) in enumerate([("hello world", {"normalized": True}), ("#", {"normalized": True}),
                                    ("ab", {"single_word": True, "normalized": False}),
                                    ("<s>", {"lstrip": True, "rstrip": True, "special": True, "normalized": False}),
                                    ("caf\u00e9", {"normalized": True})]):
        t = {"id": nid + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": False}
        t.update(flags)
        v["added_tokens"].append(t)
    v["post_processor"] = tpl("<|im_start|>", "<|im_end|>", {"<|im_start|>": 151644, "<|im_end|>": 151645})
    v["truncation"] = {"direction": "Left", "max_length": 40, "strategy": "LongestFirst", "stride": 0}
    v["padding"] = {"strategy": {"Fixed": 48}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 151643,
                    "pad_type_id": 0, "pad_token": "<|endoftext|>"}
    out["q_added"] = v
    return out


def tiny_variants(t):
    out = {}
    v = copy.deepcopy(t)  # Metaspace "first" after digit/punctuation splits, decoded by Metaspace
    v["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "NFD"}, {"type": "StripAccents"}, {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
    v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": False}, {"type": "Punctuation", "behavior": "Isolated"}, META]}
    v["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}  # (HF panics on Strip "stop" with an empty token)
    out["t_meta_first"] = v

    v = copy.deepcopy(t)  # word splitters, no decoder (tokens joined by spaces), Roberta-style specials
    v["normalizer"] = {"type": "Lowercase"}
    v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}, META]}
    v["post_processor"] = {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1],
                           "trim_offsets": True, "add_prefix_space": True}
    v["decoder"] = None
    out["t_whitespace"] = v

    v = copy.deepcopy(t)
    v["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "NFKD"}, {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "BertPreTokenizer"}, {"type": "CharDelimiterSplit", "delimiter": "o"}]}
    v["post_processor"] = {"type": "BertProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1]}
    v["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"Regex": "\u2581+"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    out["t_bert"] = v
    return out


def main():
    qdir, tdir, outdir = sys.argv[1:4]
    q = json.load(open(os.path.join(qdir, "tokenizer.json"), encoding="utf-8"))
    t = json.load(open(os.path.join(tdir, "tokenizer.json"), encoding="utf-8"))
    for name, tok in list(qwen_variants(q).items()) + list(tiny_variants(t).items()):
        d = os.path.join(outdir, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False)
        print(name)


if __name__ == "__main__":
    main()
