#!/usr/bin/env python3
"""make_seeds.py - writes the seed corpora of the fuzz harnesses (fuzz/corpus/<harness>/).

Seeds come from tests/data: the chat templates and Jinja cases, the tokenizers (the Qwen3
one cut down to its first pieces so a seed stays small), and a tiny llama checkpoint
(hidden 8, one layer) written here as safetensors; the .xllm and GGUF seeds are that
checkpoint converted by `xllm convert` (pass the binary as argv[1]; skipped without it).
Standard library only. Run: python3 fuzz/make_seeds.py build/xllm
"""
import json, os, random, shutil, struct, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
SEP = "\n=====\n"   # FUZZ_SEP in fuzz_util.h


def out(harness, name, data):
    d = os.path.join(CORPUS, harness)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed_" + name), "wb") as f:
        f.write(data)


def templates():
    n = 0
    with open(os.path.join(ROOT, "tests/data/templates/jinja_cases.jsonl")) as f:
        for line in f:
            c = json.loads(line)
            out("template", "case%03d" % n, c["template"] + SEP + json.dumps(c.get("messages", [])))
            n += 1
    tdir = os.path.join(ROOT, "tests/data/templates")
    for model in sorted(os.listdir(tdir)):
        cfg = os.path.join(tdir, model, "tokenizer_config.json")
        if not os.path.exists(cfg):
            continue
        tpl = json.load(open(cfg)).get("chat_template")
        if isinstance(tpl, list):
            tpl = tpl[0]["template"]
        cases = [json.loads(l) for l in open(os.path.join(tdir, model, "cases.jsonl"))]
        for i, c in enumerate(cases[:4]):
            out("template", "%s_%d" % (model, i), tpl + SEP + json.dumps(c["messages"]))


def small_qwen3():
    t = json.load(open(os.path.join(ROOT, "tests/data/tokenizers/qwen3/tokenizer.json")))
    vocab = {k: v for k, v in t["model"]["vocab"].items() if v < 400}
    merges = [m for m in t["model"]["merges"] if m[0] + m[1] in vocab and m[0] in vocab and m[1] in vocab]
    t["model"]["vocab"] = vocab
    t["model"]["merges"] = merges
    for i, a in enumerate(t["added_tokens"]):
        a["id"] = 400 + i
    return json.dumps(t, ensure_ascii=False)


def tokenizers():
    texts = [json.loads(l)["text"] for l in open(os.path.join(ROOT, "tests/data/tokenizers/corpus.jsonl"))][:12]
    tdir = os.path.join(ROOT, "tests/data/tokenizers/tinystories-tok512")
    toks = {"tinystories": open(os.path.join(tdir, "tokenizer.json")).read(),
            "metaspace": open(os.path.join(tdir, "tokenizer_metaspace.json")).read(),
            "qwen3small": small_qwen3()}
    for name, tok in toks.items():
        for i, text in enumerate(texts[:4]):
            out("tokenizer", "%s_%d" % (name, i), tok + SEP + text)


def tiny_checkpoint(d):
    """A llama checkpoint: hidden 8, 2 heads of 4, 1 KV head, 1 layer, vocab 512, random f32."""
    rnd = random.Random(1)
    H, I, V, hd, nh, nkv = 8, 16, 512, 4, 2, 1
    shapes = {"model.embed_tokens.weight": [V, H], "model.norm.weight": [H],
              "model.layers.0.input_layernorm.weight": [H],
              "model.layers.0.post_attention_layernorm.weight": [H],
              "model.layers.0.self_attn.q_proj.weight": [nh * hd, H],
              "model.layers.0.self_attn.k_proj.weight": [nkv * hd, H],
              "model.layers.0.self_attn.v_proj.weight": [nkv * hd, H],
              "model.layers.0.self_attn.o_proj.weight": [H, nh * hd],
              "model.layers.0.mlp.gate_proj.weight": [I, H],
              "model.layers.0.mlp.up_proj.weight": [I, H],
              "model.layers.0.mlp.down_proj.weight": [H, I]}
    header, blobs, off = {}, [], 0
    for name, shape in shapes.items():
        n = 1
        for s in shape:
            n *= s
        b = struct.pack("<%df" % n, *[rnd.uniform(-0.5, 0.5) for _ in range(n)])
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    st = struct.pack("<Q", len(h)) + h + b"".join(blobs)
    cfg = {"model_type": "llama", "hidden_size": H, "intermediate_size": I, "num_hidden_layers": 1,
           "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": hd, "vocab_size": V,
           "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": True}
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "model.safetensors"), "wb").write(st)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    tdir = os.path.join(ROOT, "tests/data/tokenizers/tinystories-tok512")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tdir, f), d)
    return cfg, st


def models(xllm):
    tmp = tempfile.mkdtemp()
    try:
        d = os.path.join(tmp, "tiny")
        cfg, st = tiny_checkpoint(d)
        out("safetensors", "tiny_llama", json.dumps(cfg) + SEP + st.decode("latin-1"))
        # the tiny fixtures of the other families: their config with the tiny weights
        # (shape errors) and with their own weights (the real thing, when small enough)
        for fam in ("qwen2", "qwen3", "mixtral"):
            c = open(os.path.join(ROOT, "tests/data/tiny", fam, "config.json")).read()
            out("safetensors", "cfg_" + fam, c + SEP + st.decode("latin-1"))
        if not xllm:
            return
        for args, name, harness in ((["--dtype", "f32"], "f32.xllm", "xllm"), (["--dtype", "q8"], "q8.xllm", "xllm"),
                                    (["--dtype", "q4"], "q4.xllm", "xllm"), (["--to", "gguf"], "f32.gguf", "gguf"),
                                    (["--to", "gguf", "--dtype", "q8"], "q8.gguf", "gguf")):
            p = os.path.join(tmp, name)
            r = subprocess.run([xllm, "convert", d, "-o", p] + args, capture_output=True, text=True)
            if r.returncode:
                print("convert %s failed: %s" % (name, r.stderr.strip()), file=sys.stderr)
                continue
            out(harness, name.replace(".", "_"), open(p, "rb").read())
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    templates()
    tokenizers()
    models(sys.argv[1] if len(sys.argv) > 1 else None)
