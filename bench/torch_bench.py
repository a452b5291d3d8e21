#!/usr/bin/env python3
"""PyTorch eager f32 baseline: a plain Llama / Qwen3 forward pass with a KV cache.

Standard library and torch only (no transformers, no safetensors package): reads an HF
checkpoint directory (config.json + model.safetensors, as `xllm synth --hf` writes it),
copies the weights into torch tensors in f32 (as from_pretrained does), and measures, as
`xllm bench` does:

    pp<P>  logits of one P-token prompt (tokens/s)
    tg<N>  N greedy tokens after an 8-token prompt, one forward per token with the KV
           cache; the clock runs from the first generated token to the last

one warm-up, then R runs; mean and sample standard deviation of the per-run rates; peak
RSS of the process (weights, activations, KV cache, the torch runtime). Prints one JSON
object: {"pp_tok_s", "pp_sd", "tg_tok_s", "tg_sd", "threads", "peak_rss_mib", "torch"}.

    python3 bench/torch_bench.py -m DIR [-p 512] [-n 128] [-t 2] [-r 3]
    python3 bench/torch_bench.py -m DIR --logits-ids 1,5,9 --logits-out all.f32   # check

--logits-out writes the logits of every position (f32, row-major), the layout of
`xllm logits --out`, so the two engines can be compared on the same ids.
"""
import argparse
import ctypes
import json
import math
import os
import resource
import statistics
import struct
import sys
import time


def _threads_from_argv():
    for i, a in enumerate(sys.argv[:-1]):
        if a == "-t":
            return sys.argv[i + 1]
    return "2"


# the BLAS torch calls (OpenBLAS when Debian's libopenblas0 is installed) reads these at load
os.environ.setdefault("OPENBLAS_NUM_THREADS", _threads_from_argv())
os.environ.setdefault("OMP_NUM_THREADS", _threads_from_argv())
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

TG_PROMPT = 8
DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
SIZES = {"F32": 4, "F16": 2, "BF16": 2}


def load_safetensors(path):
    """Every tensor of one .safetensors file, read into torch-owned f32 memory."""
    out = {}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dt = info["dtype"]
            if dt not in DTYPES:
                raise SystemExit("torch_bench: %s has dtype %s" % (name, dt))
            start, end = info["data_offsets"]
            t = torch.empty(info["shape"], dtype=DTYPES[dt])
            assert t.numel() * SIZES[dt] == end - start, name
            f.seek(base + start)
            view = (ctypes.c_char * (end - start)).from_address(t.data_ptr())
            if f.readinto(memoryview(view)) != end - start:
                raise SystemExit("torch_bench: %s is truncated" % path)
            out[name] = t if dt == "F32" else t.float()
    return out


def rope_inv_freq(cfg, hd):
    theta = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "llama3":
        factor, lo, hi = rs["factor"], rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
        old = rs.get("original_max_position_embeddings", 8192)
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo)
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        mid = (1 - smooth) * inv / factor + smooth * inv
        inv = torch.where((wavelen >= old / hi) & (wavelen <= old / lo), mid, scaled)
    elif kind == "linear":
        inv = inv / rs["factor"]
    elif kind not in (None, "default"):
        raise SystemExit("torch_bench: rope_scaling %s is not implemented" % kind)
    return inv.float()


class Model:
    def __init__(self, path, max_ctx):
        self.cfg = cfg = json.load(open(os.path.join(path, "config.json")))
        if cfg["model_type"] not in ("llama", "qwen3"):
            raise SystemExit("torch_bench: model_type %s is not implemented" % cfg["model_type"])
        self.w = load_safetensors(os.path.join(path, "model.safetensors"))
        self.H = cfg["hidden_size"]
        self.nh, self.nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
        self.hd = cfg.get("head_dim") or self.H // self.nh
        self.L = cfg["num_hidden_layers"]
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.lm_head = self.w.get("lm_head.weight", self.w["model.embed_tokens.weight"])
        self.qk_norm = cfg["model_type"] == "qwen3"
        pos = torch.arange(max_ctx, dtype=torch.float32)
        ang = torch.outer(pos, rope_inv_freq(cfg, self.hd))
        self.cos = torch.cat([ang.cos(), ang.cos()], dim=-1)  # [ctx, hd]
        self.sin = torch.cat([ang.sin(), ang.sin()], dim=-1)
        self.k = torch.zeros(self.L, self.nkv, max_ctx, self.hd)
        self.v = torch.zeros(self.L, self.nkv, max_ctx, self.hd)
        self.layers = []
        for l in range(self.L):
            p = "model.layers.%d." % l
            g = lambda s: self.w.get(p + s)
            self.layers.append(dict(
                ln1=g("input_layernorm.weight"), ln2=g("post_attention_layernorm.weight"),
                q=g("self_attn.q_proj.weight"), k=g("self_attn.k_proj.weight"), v=g("self_attn.v_proj.weight"),
                o=g("self_attn.o_proj.weight"), qn=g("self_attn.q_norm.weight"), kn=g("self_attn.k_norm.weight"),
                gate=g("mlp.gate_proj.weight"), up=g("mlp.up_proj.weight"), down=g("mlp.down_proj.weight")))

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    @staticmethod
    def rot(x, cos, sin):  # HF rotate-half RoPE; x [heads, T, hd]
        h = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., h:], x[..., :h]], dim=-1) * sin

    def forward(self, ids, pos0, all_logits=False):
        T = len(ids)
        x = self.w["model.embed_tokens.weight"][torch.tensor(ids)]
        cos, sin = self.cos[pos0:pos0 + T], self.sin[pos0:pos0 + T]
        end = pos0 + T
        mask = None
        if T > 1:
            mask = torch.full((T, end), float("-inf")).triu(pos0 + 1)
        rep = self.nh // self.nkv
        for l, ly in enumerate(self.layers):
            h = self.rms(x, ly["ln1"])
            q = F.linear(h, ly["q"]).view(T, self.nh, self.hd).transpose(0, 1)
            k = F.linear(h, ly["k"]).view(T, self.nkv, self.hd).transpose(0, 1)
            v = F.linear(h, ly["v"]).view(T, self.nkv, self.hd).transpose(0, 1)
            if self.qk_norm:
                q, k = self.rms(q, ly["qn"]), self.rms(k, ly["kn"])
            q, k = self.rot(q, cos, sin), self.rot(k, cos, sin)
            self.k[l, :, pos0:end] = k
            self.v[l, :, pos0:end] = v
            K, V = self.k[l, :, :end], self.v[l, :, :end]
            if rep > 1:
                K, V = K.repeat_interleave(rep, 0), V.repeat_interleave(rep, 0)
            s = torch.matmul(q, K.transpose(1, 2)) / math.sqrt(self.hd)
            if mask is not None:
                s = s + mask
            a = torch.matmul(torch.softmax(s, dim=-1), V).transpose(0, 1).reshape(T, self.nh * self.hd)
            x = x + F.linear(a, ly["o"])
            h = self.rms(x, ly["ln2"])
            x = x + F.linear(F.silu(F.linear(h, ly["gate"])) * F.linear(h, ly["up"]), ly["down"])
        x = self.rms(x if all_logits else x[-1:], self.w["model.norm.weight"])
        return F.linear(x, self.lm_head)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--logits-ids")
    ap.add_argument("--logits-out")
    a = ap.parse_args()
    if min(a.p, a.n, a.t, a.r) < 1:
        ap.error("-p, -n, -t and -r must be positive")
    torch.set_num_threads(a.t)
    torch.set_grad_enabled(False)
    need = max(a.p, TG_PROMPT + a.n + 1) + 16
    if a.logits_ids:
        ids = [int(x) for x in a.logits_ids.split(",")]
        m = Model(a.model, len(ids) + 1)
        logits = m.forward(ids, 0, all_logits=True).contiguous()
        with open(a.logits_out, "wb") as f:
            f.write(bytes((ctypes.c_char * (logits.numel() * 4)).from_address(logits.data_ptr())))
        return
    m = Model(a.model, need)
    V = m.w["model.embed_tokens.weight"].shape[0]
    ids = [3 + (i * 7919 + 13) % (V - 3) for i in range(a.p)]  # the ids xllm bench uses
    prompt = [ids[i % a.p] for i in range(TG_PROMPT)]

    def pp():
        t0 = time.perf_counter()
        m.forward(ids, 0)
        return a.p / (time.perf_counter() - t0)

    def tg(n):
        tok = int(m.forward(prompt, 0).argmax())
        first = time.perf_counter()
        pos = TG_PROMPT
        for _ in range(n):
            tok = int(m.forward([tok], pos).argmax())
            pos += 1
        return n / (time.perf_counter() - first)

    pp()
    tg(min(a.n, 4))
    pps, tgs = [], []
    for _ in range(a.r):
        pps.append(pp())
        tgs.append(tg(a.n))
    sd = lambda x: statistics.stdev(x) if len(x) > 1 else 0.0
    print(json.dumps({
        "pp_tok_s": round(statistics.mean(pps), 3), "pp_sd": round(sd(pps), 3),
        "tg_tok_s": round(statistics.mean(tgs), 3), "tg_sd": round(sd(tgs), 3),
        "threads": a.t, "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "torch": torch.__version__, "blas": blas_in_use()}))


def blas_in_use():
    """Which BLAS library the process mapped (Debian picks it by update-alternatives)."""
    try:
        maps = open("/proc/self/maps").read()
    except OSError:
        return "?"
    for name in ("openblas", "mkl", "blis", "atlas"):
        if name in maps:
            return name
    return "reference" if "libblas.so" in maps else "?"


if __name__ == "__main__":
    main()
