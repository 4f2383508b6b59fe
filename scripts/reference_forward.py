#!/usr/bin/env python3
"""Independent reference for the CPU backend (tests only): every architecture's forward pass in
NumPy float64, with weights dequantized by the `gguf` package. Writes
tests/data/reference_forward.json (cases: model, prompt ids, greedy continuation) and
tests/data/reference_logits.f32 (the final-position logits of each case's prompt,
little-endian float32, in case order).

Cases: the default model on three prompts (8-64 tokens), and small random-weight models that
the C++ tests also write themselves (tests/support/tiny_model.cc; the same splitmix64
generator is reproduced here): a llama with grouped-query attention and odd sizes, a qwen2
with biases and NeoX RoPE, quantized (Q4_1, Q8_0, Q4_0) llamas for the native kernels, and two llamas mixing the block
formats (Q2_K..Q6_K, Q5_0, Q5_1, IQ4_NL, IQ4_XS) per matrix as Q4_K_M files do.

    python3 -m pip install gguf==0.19.0 numpy tokenizers==0.23.3
    python3 scripts/reference_forward.py models/SmolLM2-135M-Instruct.Q4_1.gguf
    python3 scripts/reference_forward.py OTHER.gguf --default-only OUT_DIR   # another file of it
    python3 scripts/reference_forward.py gemma-3-270m-q4_k_m.gguf --other-model tests/data/gemma3_reference.json

Architectures: llama (with rope_freqs, a sliding window, and experts as Mixtral), qwen2, qwen3,
gemma3, phi3, granite, and the mixtures of experts granitemoe, olmoe, qwen2moe, qwen3moe; what
each computes is in arch_layout() and moe_ffn(), written from the published model definitions.
"""
import base64
import json
import os
import struct
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType as T
from gguf.quants import dequantize

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "tests", "data")
sys.path.insert(0, HERE)
from gen_tokenizer_vectors import build, read_gguf_vocab  # noqa: E402

MASK = (1 << 64) - 1


class Stream:
    """splitmix64, as tests/support/tiny_model.cc."""

    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def uniform(self):
        return np.float32(np.float32(self.next() >> 40) * np.float32(2.0 ** -23) - np.float32(1.0))


def fnv1a64(s):
    h = 0xcbf29ce484222325
    for c in s.encode():
        h ^= c
        h = (h * 0x100000001b3) & MASK
    return h


# Per quantized type: the divisor of the scale, and its fp16 fields as (byte offset,
# multiplier), as QuantFields in tests/support/tiny_model.cc.
QUANT_FIELDS = {
    "Q4_0": (8.0, [(0, 1.0)]), "Q4_1": (8.0, [(0, 1.0), (2, -8.0)]), "Q8_0": (127.0, [(0, 1.0)]),
    "Q5_0": (16.0, [(0, 1.0)]), "Q5_1": (16.0, [(0, 1.0), (2, -16.0)]), "IQ4_NL": (100.0, [(0, 1.0)]),
    "Q2_K": (16.0, [(80, 1.0), (82, 1.5)]), "Q3_K": (128.0, [(108, 1.0)]),
    "Q4_K": (256.0, [(0, 1.0), (2, 7.5)]), "Q5_K": (512.0, [(0, 1.0), (2, 15.5)]),
    "Q6_K": (2048.0, [(208, 1.0)]), "IQ4_XS": (3200.0, [(0, 1.0)]),
}


def tiny_tensor(opts, name, shape, is_matrix, mean, scale):
    """Returns (float64 weights with numpy shape = reversed ggml dims)."""
    n = int(np.prod(shape))
    stream = Stream(opts["seed"] ^ fnv1a64(name))
    wtype = opts["weight_type"] if is_matrix else "F32"
    if is_matrix:
        key = name.split(".", 2)[2] if name.startswith("blk.") else name
        wtype = opts.get("tensor_types", {}).get(key, wtype)
    if wtype in QUANT_FIELDS:
        q = T[wtype]
        from gguf.constants import GGML_QUANT_SIZES
        block_size, type_size = GGML_QUANT_SIZES[q]
        divisor, fields = QUANT_FIELDS[wtype]
        block_scale = np.float32(scale) / np.float32(divisor)
        blocks = np.zeros((n // block_size, type_size), dtype=np.uint8)
        for b in range(blocks.shape[0]):
            for i in range(type_size):
                blocks[b, i] = stream.next() & 0xFF
            for offset, multiplier in fields:
                v = np.float16(np.float32(multiplier) * block_scale * (np.float32(1.25) + stream.uniform() / np.float32(4.0)))
                blocks[b, offset:offset + 2] = np.frombuffer(v.tobytes(), dtype=np.uint8)
        values = dequantize(blocks.reshape(-1), q).astype(np.float64)
    else:
        values = np.array([np.float32(mean) + np.float32(scale) * stream.uniform() for _ in range(n)], dtype=np.float32)
        if wtype == "F16":
            values = values.astype(np.float16)
        values = values.astype(np.float64)
    return values.reshape(tuple(reversed(shape)))


class Weights:
    pass


# What each architecture computes, written here from the models' published definitions
# (Hugging Face transformers' modeling files), not from hetero's C++: per layer, which
# steps exist, the RoPE base and window, and the model-level scales.
def arch_layout(arch, c, n_layers, key, has_tensor):
    """Returns per-layer dicts and model-level settings for `arch`. key(name, default)
    reads "<arch>.<name>" metadata; has_tensor(name) tells whether the file has it."""
    c["neox"] = arch in ("qwen2", "qwen3", "gemma3", "phi3", "qwen2moe", "qwen3moe", "olmoe")
    c["emb_scale"], c["res_scale"], c["logit_scale"] = 1.0, 1.0, 1.0
    c["attn_scale"] = 1.0 / np.sqrt(c["head_dim"])
    c["gelu"] = arch == "gemma3"
    c["rope_attn_factor"] = 1.0
    window = int(key("attention.sliding_window", 0) or 0)
    # Mixtures of experts (transformers' Mixtral, GraniteMoe, OLMoE, Qwen2-MoE, Qwen3-MoE):
    # softmax router, top-k; Mixtral and GraniteMoe take the softmax of the top-k logits,
    # which equals renormalising; Qwen3-MoE's released configs set norm_topk_prob, OLMoE's
    # and Qwen2-MoE's do not; Qwen2-MoE adds a shared expert behind a sigmoid gate.
    n_experts = int(key("expert_count", 0) or 0)
    moe = None
    if n_experts > 0:
        moe = dict(count=n_experts, used=int(key("expert_used_count", 0)),
                   n_ff=int(key("expert_feed_forward_length", c["n_ff"])),
                   normalize=arch in ("llama", "granitemoe", "qwen3moe"),
                   shared_n_ff=int(key("expert_shared_feed_forward_length", c["n_ff"])) if arch == "qwen2moe" else 0)
    layers = []
    for i in range(n_layers):
        L = dict(base=c["base"], window=window if arch in ("llama", "phi3") else 0,
                 qk_norm=arch in ("qwen3", "gemma3", "qwen3moe"), whole_qk_norm=arch == "olmoe",
                 post_norms=arch == "gemma3", bias=has_tensor(f"blk.{i}.attn_q.bias"), fused=arch == "phi3", moe=moe)
        if arch == "gemma3":
            # Gemma 3: layers 5, 11, ... global with the file's base; the others local, base 10000.
            if i % 6 != 5:
                L["window"], L["base"] = window, 10000.0
        layers.append(L)
    if arch == "gemma3":
        c["emb_scale"] = np.sqrt(c["n_embd"])
        c["attn_scale"] = 1.0 / np.sqrt(c["n_embd"] // c["n_heads"] if n_layers == 62 else c["head_dim"])
    if arch in ("granite", "granitemoe"):
        c["emb_scale"] = float(key("embedding_scale", 1.0))
        c["res_scale"] = float(key("residual_scale", 1.0))
        c["attn_scale"] = float(key("attention.scale", c["attn_scale"]))
        c["logit_scale"] = 1.0 / float(key("logit_scale", 1.0))
    return layers


def load_layers(c, layers, get, has_tensor):
    """Weights of every layer through get(name) (float64, numpy shape = reversed ggml dims)."""
    e, qd, kd, f = c["n_embd"], c["n_heads"] * c["head_dim"], c["n_kv"] * c["head_dim"], c["n_ff"]
    out = []
    for i, spec in enumerate(layers):
        p = f"blk.{i}."
        L = Weights()
        L.spec = spec
        L.attn_norm, L.ffn_norm = get(p + "attn_norm.weight", [e]), get(p + "ffn_norm.weight", [e])
        if spec["fused"]:
            qkv = get(p + "attn_qkv.weight", [e, qd + 2 * kd])
            L.q, L.k, L.v = qkv[:qd], qkv[qd:qd + kd], qkv[qd + kd:]
            gu = get(p + "ffn_up.weight", [e, 2 * f])
            L.gate, L.up = gu[:f], gu[f:]
        else:
            L.q, L.k, L.v = get(p + "attn_q.weight", [e, qd]), get(p + "attn_k.weight", [e, kd]), get(p + "attn_v.weight", [e, kd])
            if spec["moe"] is None:
                L.gate, L.up = get(p + "ffn_gate.weight", [e, f]), get(p + "ffn_up.weight", [e, f])
        L.o = get(p + "attn_output.weight", [qd, e])
        L.moe = None
        if spec["moe"] is None:
            L.down = get(p + "ffn_down.weight", [f, e])
        else:
            m, n, fe = Weights(), spec["moe"]["count"], spec["moe"]["n_ff"]
            m.spec = spec["moe"]
            m.router = get(p + "ffn_gate_inp.weight", [e, n])  # (n, e)
            m.gate = get(p + "ffn_gate_exps.weight", [e, fe, n])  # (n, fe, e)
            m.up = get(p + "ffn_up_exps.weight", [e, fe, n])
            m.down = get(p + "ffn_down_exps.weight", [fe, e, n])  # (n, e, fe)
            m.shared = None
            if m.spec["shared_n_ff"]:
                fs = m.spec["shared_n_ff"]
                m.shared = (get(p + "ffn_gate_inp_shexp.weight", [e]).reshape(-1), get(p + "ffn_gate_shexp.weight", [e, fs]),
                            get(p + "ffn_up_shexp.weight", [e, fs]), get(p + "ffn_down_shexp.weight", [fs, e]))
            L.moe = m
        L.qb = L.kb = L.vb = None
        if spec["bias"]:
            L.qb, L.kb, L.vb = get(p + "attn_q.bias", [qd]), get(p + "attn_k.bias", [kd]), get(p + "attn_v.bias", [kd])
        L.q_norm = L.k_norm = L.post_attn = L.post_ffn = None
        if spec["qk_norm"]:
            L.q_norm, L.k_norm = get(p + "attn_q_norm.weight", [c["head_dim"]]), get(p + "attn_k_norm.weight", [c["head_dim"]])
        if spec["whole_qk_norm"]:
            L.q_norm, L.k_norm = get(p + "attn_q_norm.weight", [qd]), get(p + "attn_k_norm.weight", [kd])
        if spec["post_norms"]:
            L.post_attn, L.post_ffn = get(p + "post_attention_norm.weight", [e]), get(p + "post_ffw_norm.weight", [e])
        out.append(L)
    return out


def lora_delta(adapter, name, shape):
    """A LoRA adapter's term merged into W (llama.cpp's adapter format, written by
    WriteTinyAdapter in tests/support/tiny_model.cc): apply_scale * (alpha / rank) * B @ A,
    apply_scale alone where alpha is 0; A = name.lora_a [inputs, rank], B = name.lora_b
    [rank, outputs] in ggml order, values scale * u from the tiny model's generator."""
    r = adapter["rank"]
    aopts = {"seed": adapter["seed"], "weight_type": adapter["type"]}
    a = tiny_tensor(aopts, name + ".lora_a", [shape[0], r], True, 0.0, adapter["scale"])  # (r, in)
    b = tiny_tensor(aopts, name + ".lora_b", [r, shape[1]], True, 0.0, adapter["scale"])  # (out, r)
    factor = adapter["apply_scale"] * (adapter["alpha"] / r if adapter["alpha"] > 0 else 1.0)
    return factor * (b @ a)


def tiny_model(opts):
    w = Weights()
    arch = opts["architecture"]
    hd = opts.get("head_dim", 0) or opts["n_embd"] // opts["n_heads"]
    c = dict(arch=arch, n_layers=opts["n_layers"], n_embd=opts["n_embd"], n_heads=opts["n_heads"],
             n_kv=opts["n_kv_heads"], n_ff=opts["n_ff"], n_vocab=opts["n_vocab"], base=opts["rope_freq_base"],
             eps=np.float32(opts["rms_norm_eps"]), head_dim=hd, rope_dim=hd)
    meta = tiny_metadata(opts)
    names = tiny_tensor_names(opts)
    layers = arch_layout(arch, c, c["n_layers"], lambda k, d: meta.get(k, d), lambda n: n in names)
    e, s = c["n_embd"], 0.02

    adapter = opts.get("adapter")

    def get(name, shape):
        is_norm = name.endswith("norm.weight")
        is_bias = name.endswith(".bias")
        if ".ffn_gate_inp" in name:  # routers: F32, scale 0.5 (tests/support/tiny_model.cc)
            return tiny_tensor(opts, name, shape, False, 0.0, 0.5)
        w = tiny_tensor(opts, name, shape, not (is_norm or is_bias), 1.0 if is_norm else 0.0, 0.1 if is_norm else s)
        if adapter and name in adapter["targets"]:
            w = w + lora_delta(adapter, name, shape)
        return w

    w.embd = get("token_embd.weight", [e, c["n_vocab"]])
    w.out_norm = get("output_norm.weight", [e])
    w.out = w.embd if opts["tied_embeddings"] else get("output.weight", [e, c["n_vocab"]])
    w.rope_freqs = None
    if opts.get("rope_freq_factors"):
        w.rope_freqs = tiny_tensor(opts, "rope_freqs.weight", [hd // 2], False, 4.5, 3.5)
    w.layers = load_layers(c, layers, get, lambda n: n in names)
    return c, w


def tiny_metadata(opts):
    """The architecture keys tests/support/tiny_model.cc writes beyond the common ones."""
    meta = {}
    if opts.get("sliding_window"):
        meta["attention.sliding_window"] = opts["sliding_window"]
    meta.update(opts.get("float_keys", {}))
    if opts.get("n_experts"):
        meta["expert_count"] = opts["n_experts"]
        meta["expert_used_count"] = opts["n_experts_used"]
        if opts.get("n_ff_expert"):
            meta["expert_feed_forward_length"] = opts["n_ff_expert"]
        if opts.get("n_ff_shared"):
            meta["expert_shared_feed_forward_length"] = opts["n_ff_shared"]
    return meta


def tiny_tensor_names(opts):
    names = set()
    if opts["architecture"] in ("qwen2", "qwen2moe"):
        names.update(f"blk.{i}.attn_q.bias" for i in range(opts["n_layers"]))
    return names


def gguf_model(path):
    r = GGUFReader(path)
    f = r.fields
    arch = bytes(f["general.architecture"].parts[-1]).decode()

    def val(key, default=None):
        if key not in f:
            return default
        return f[key].parts[-1][0]

    c = dict(arch=arch, n_layers=int(val(f"{arch}.block_count")), n_embd=int(val(f"{arch}.embedding_length")),
             n_heads=int(val(f"{arch}.attention.head_count")), n_ff=int(val(f"{arch}.feed_forward_length")),
             base=float(val(f"{arch}.rope.freq_base", 10000.0)),
             eps=np.float32(val(f"{arch}.attention.layer_norm_rms_epsilon")))
    c["n_kv"] = int(val(f"{arch}.attention.head_count_kv", c["n_heads"]))
    c["head_dim"] = int(val(f"{arch}.attention.key_length", c["n_embd"] // c["n_heads"]))
    c["rope_dim"] = int(val(f"{arch}.rope.dimension_count", c["head_dim"]))
    tensors = {t.name: t for t in r.tensors}

    def get(name, shape=None):
        t = tensors[name]
        if t.tensor_type in (T.F32,):
            a = np.array(t.data, dtype=np.float64)
        elif t.tensor_type == T.F16:
            a = np.array(t.data, dtype=np.float16).astype(np.float64)
        else:
            a = dequantize(np.array(t.data), t.tensor_type).astype(np.float64)
        return a.reshape(tuple(int(x) for x in reversed(t.shape)))

    layers = arch_layout(arch, c, c["n_layers"], lambda k, d: val(f"{arch}.{k}", d), lambda n: n in tensors)
    w = Weights()
    w.embd = get("token_embd.weight")
    c["n_vocab"] = w.embd.shape[0]
    w.out_norm = get("output_norm.weight")
    w.out = get("output.weight") if "output.weight" in tensors else w.embd
    w.rope_freqs = get("rope_freqs.weight") if "rope_freqs.weight" in tensors else None
    w.layers = load_layers(c, layers, get, lambda n: n in tensors)
    return c, w


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + float(eps)) * w


def swiglu_or_geglu(c, g_, u):
    if c["gelu"]:
        return 0.5 * g_ * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (g_ + 0.044715 * g_ ** 3))) * u
    return g_ / (1.0 + np.exp(-g_)) * u


def moe_ffn(c, m, h):
    """A mixture of experts on h (T, e): each token's top-k experts by softmax probability,
    weighted (renormalised over the chosen where the model does), plus the shared expert."""
    logits = h @ m.router.T
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        chosen = np.argsort(-p[t], kind="stable")[:m.spec["used"]]
        w = p[t, chosen]
        if m.spec["normalize"]:
            w = w / w.sum()
        for e, we in zip(chosen, w):
            out[t] += we * (swiglu_or_geglu(c, m.gate[e] @ h[t], m.up[e] @ h[t]) @ m.down[e].T)
    if m.shared is not None:
        gate_inp, g, u, d = m.shared
        share = 1.0 / (1.0 + np.exp(-(h @ gate_inp)))
        out += share[:, None] * (swiglu_or_geglu(c, h @ g.T, h @ u.T) @ d.T)
    return out


def rope(x, positions, c, base, factors):
    """x: (T, heads, head_dim). Normal: pairs (2i, 2i+1); NeoX: pairs (i, i + d/2).
    `factors` (Llama 3.1's rope_freqs) divide each pair's frequency."""
    d = c["rope_dim"]
    half = d // 2
    inv = base ** (-np.arange(half, dtype=np.float64) * 2.0 / d)
    if factors is not None:
        inv = inv / factors
    ang = positions[:, None].astype(np.float64) * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :] * c["rope_attn_factor"], np.sin(ang)[:, None, :] * c["rope_attn_factor"]
    out = x.copy()
    if c["neox"]:
        a, b = x[..., :half], x[..., half:d]
    else:
        a, b = x[..., 0:d:2], x[..., 1:d:2]
    ra, rb = a * cos - b * sin, a * sin + b * cos
    if c["neox"]:
        out[..., :half], out[..., half:d] = ra, rb
    else:
        out[..., 0:d:2], out[..., 1:d:2] = ra, rb
    return out


class Session:
    """Forward with a KV cache: each call appends tokens and returns their logits."""

    def __init__(self, c, w):
        self.c, self.w = c, w
        self.k = [np.zeros((0, c["n_kv"], c["head_dim"])) for _ in w.layers]
        self.v = [np.zeros((0, c["n_kv"], c["head_dim"])) for _ in w.layers]

    def forward(self, tokens):
        c, w = self.c, self.w
        T_, hd, H, KV = len(tokens), c["head_dim"], c["n_heads"], c["n_kv"]
        start = self.k[0].shape[0]
        pos = np.arange(start, start + T_)
        x = w.embd[np.array(tokens)] * c["emb_scale"]
        for li, L in enumerate(w.layers):
            h = rmsnorm(x, L.attn_norm, c["eps"])
            q, k, v = h @ L.q.T, h @ L.k.T, h @ L.v.T
            if L.qb is not None:
                q, k, v = q + L.qb, k + L.kb, v + L.vb
            if L.spec["whole_qk_norm"]:
                q, k = rmsnorm(q, L.q_norm, c["eps"]), rmsnorm(k, L.k_norm, c["eps"])
            q, k, v = q.reshape(T_, H, hd), k.reshape(T_, KV, hd), v.reshape(T_, KV, hd)
            if L.q_norm is not None and not L.spec["whole_qk_norm"]:
                q, k = rmsnorm(q, L.q_norm, c["eps"]), rmsnorm(k, L.k_norm, c["eps"])
            q = rope(q, pos, c, L.spec["base"], w.rope_freqs)
            k = rope(k, pos, c, L.spec["base"], w.rope_freqs)
            self.k[li] = np.concatenate([self.k[li], k])
            self.v[li] = np.concatenate([self.v[li], v])
            K, V = self.k[li], self.v[li]
            out = np.zeros((T_, H, hd))
            group = H // KV
            key_pos = np.arange(K.shape[0])[None, :]
            mask = pos[:, None] < key_pos
            if L.spec["window"] > 0:
                mask = mask | (pos[:, None] - key_pos >= L.spec["window"])
            for head in range(H):
                g = head // group
                scores = q[:, head, :] @ K[:, g, :].T * c["attn_scale"]  # (T, S)
                scores = np.where(mask, -np.inf, scores)
                scores = scores - scores.max(axis=-1, keepdims=True)
                p = np.exp(scores)
                p /= p.sum(axis=-1, keepdims=True)
                out[:, head, :] = p @ V[:, g, :]
            a = out.reshape(T_, H * hd) @ L.o.T
            if L.post_attn is not None:
                a = rmsnorm(a, L.post_attn, c["eps"])
            x = x + c["res_scale"] * a
            h = rmsnorm(x, L.ffn_norm, c["eps"])
            if L.moe is not None:
                f_ = moe_ffn(c, L.moe, h)
            else:
                f_ = swiglu_or_geglu(c, h @ L.gate.T, h @ L.up.T) @ L.down.T
            if L.post_ffn is not None:
                f_ = rmsnorm(f_, L.post_ffn, c["eps"])
            x = x + c["res_scale"] * f_
        x = rmsnorm(x, w.out_norm, c["eps"])
        return (x @ w.out.T) * c["logit_scale"]


def run_case(c, w, prompt, n_greedy):
    """Final-position logits, the greedy continuation, and at each greedy step the margin
    between the best and second-best logit (where a lower-precision mode may rightly
    choose differently)."""
    s = Session(c, w)
    logits = s.forward(prompt)[-1]
    greedy, margins, last = [], [], logits
    for _ in range(n_greedy):
        top2 = np.sort(last)[-2:]
        margins.append(float(top2[1] - top2[0]))
        t = int(np.argmax(last))
        greedy.append(t)
        last = s.forward([t])[-1]
    return logits.astype(np.float32), greedy, margins


TINY = [
    dict(name="tiny-llama-gqa-odd", architecture="llama", n_layers=3, n_embd=40, n_heads=5, n_kv_heads=1, n_ff=72,
         n_vocab=83, context_length=128, rope_freq_base=10000.0, rms_norm_eps=1e-5, tied_embeddings=False,
         weight_type="F32", seed=11),
    dict(name="tiny-qwen2", architecture="qwen2", n_layers=2, n_embd=64, n_heads=4, n_kv_heads=2, n_ff=96,
         n_vocab=100, context_length=128, rope_freq_base=1000000.0, rms_norm_eps=1e-6, tied_embeddings=True,
         weight_type="F16", seed=12),
    dict(name="tiny-llama-q4_1", architecture="llama", n_layers=2, n_embd=64, n_heads=4, n_kv_heads=2, n_ff=128,
         n_vocab=96, context_length=128, rope_freq_base=10000.0, rms_norm_eps=1e-5, tied_embeddings=True,
         weight_type="Q4_1", seed=13),
    dict(name="tiny-llama-q8_0", architecture="llama", n_layers=2, n_embd=64, n_heads=4, n_kv_heads=4, n_ff=96,
         n_vocab=96, context_length=128, rope_freq_base=10000.0, rms_norm_eps=1e-5, tied_embeddings=False,
         weight_type="Q8_0", seed=14),
    dict(name="tiny-llama-q4_0", architecture="llama", n_layers=2, n_embd=96, n_heads=3, n_kv_heads=1, n_ff=160,
         n_vocab=64, context_length=128, rope_freq_base=10000.0, rms_norm_eps=1e-5, tied_embeddings=True,
         weight_type="Q4_0", seed=15),
    # Appended later (the cases above keep their data). Mixed files, as llama-quantize's
    # Q4_K_M and Q5_K_M write them, and every other block format once.
    dict(name="tiny-llama-q4_k_m", architecture="llama", n_layers=2, n_embd=256, n_heads=4, n_kv_heads=2, n_ff=512,
         n_vocab=80, context_length=128, rope_freq_base=10000.0, rms_norm_eps=1e-5, tied_embeddings=False,
         weight_type="Q4_K", seed=16,
         tensor_types={"attn_v.weight": "Q6_K", "ffn_down.weight": "Q6_K", "attn_output.weight": "Q5_0",
                       "output.weight": "Q6_K"}),
    dict(name="tiny-llama-mixed-blocks", architecture="llama", n_layers=2, n_embd=256, n_heads=4, n_kv_heads=1, n_ff=768,
         n_vocab=72, context_length=128, rope_freq_base=10000.0, rms_norm_eps=1e-5, tied_embeddings=True,
         weight_type="Q5_K", seed=17,
         tensor_types={"attn_k.weight": "Q5_1", "attn_v.weight": "Q3_K", "attn_output.weight": "IQ4_XS",
                       "ffn_gate.weight": "Q2_K", "ffn_up.weight": "IQ4_NL"}),
    # Appended with the model definitions (src/runtime/models/): one per architecture.
    dict(name="tiny-qwen3", architecture="qwen3", n_layers=2, n_embd=64, n_heads=4, n_kv_heads=2, head_dim=32, n_ff=96,
         n_vocab=90, context_length=128, rope_freq_base=1000000.0, rms_norm_eps=1e-6, tied_embeddings=True,
         weight_type="F32", seed=18),
    dict(name="tiny-gemma3", architecture="gemma3", n_layers=6, n_embd=48, n_heads=2, n_kv_heads=1, head_dim=32,
         n_ff=80, n_vocab=70, context_length=128, rope_freq_base=1000000.0, rms_norm_eps=1e-6, tied_embeddings=True,
         sliding_window=8, weight_type="F32", seed=19),
    dict(name="tiny-phi3", architecture="phi3", n_layers=2, n_embd=64, n_heads=4, n_kv_heads=2, n_ff=96, n_vocab=77,
         context_length=128, rope_freq_base=10000.0, rms_norm_eps=1e-5, tied_embeddings=False, sliding_window=16,
         weight_type="F16", seed=20),
    dict(name="tiny-llama3-window", architecture="llama", n_layers=2, n_embd=64, n_heads=4, n_kv_heads=2, n_ff=96,
         n_vocab=81, context_length=128, rope_freq_base=500000.0, rms_norm_eps=1e-5, tied_embeddings=True,
         rope_freq_factors=True, sliding_window=12, weight_type="F32", seed=21),
    dict(name="tiny-granite", architecture="granite", n_layers=2, n_embd=64, n_heads=4, n_kv_heads=1, n_ff=96,
         n_vocab=75, context_length=128, rope_freq_base=10000.0, rms_norm_eps=1e-5, tied_embeddings=True,
         float_keys={"embedding_scale": 12.0, "attention.scale": 0.0078125, "residual_scale": 0.22,
                     "logit_scale": 8.0}, weight_type="Q8_0", seed=22),
    # Appended with the mixtures of experts: one per architecture, experts of awkward sizes.
    dict(name="tiny-granitemoe", architecture="granitemoe", n_layers=2, n_embd=64, n_heads=4, n_kv_heads=2, n_ff=40,
         n_vocab=79, context_length=128, rope_freq_base=10000.0, rms_norm_eps=1e-6, tied_embeddings=True,
         n_experts=6, n_experts_used=2,
         float_keys={"embedding_scale": 12.0, "attention.scale": 0.015625, "residual_scale": 0.22,
                     "logit_scale": 6.0}, weight_type="F32", seed=23),
    dict(name="tiny-olmoe", architecture="olmoe", n_layers=2, n_embd=48, n_heads=3, n_kv_heads=3, n_ff=36, n_vocab=71,
         context_length=128, rope_freq_base=10000.0, rms_norm_eps=1e-5, tied_embeddings=False,
         n_experts=8, n_experts_used=3, weight_type="F32", seed=24),
    dict(name="tiny-qwen2moe", architecture="qwen2moe", n_layers=2, n_embd=64, n_heads=4, n_kv_heads=2, n_ff=88,
         n_vocab=73, context_length=128, rope_freq_base=1000000.0, rms_norm_eps=1e-6, tied_embeddings=False,
         n_experts=5, n_experts_used=2, n_ff_expert=24, n_ff_shared=56, weight_type="F16", seed=25),
    dict(name="tiny-qwen3moe", architecture="qwen3moe", n_layers=2, n_embd=64, n_heads=4, n_kv_heads=2, head_dim=32,
         n_ff=96, n_vocab=69, context_length=128, rope_freq_base=1000000.0, rms_norm_eps=1e-6, tied_embeddings=True,
         n_experts=8, n_experts_used=4, n_ff_expert=32, weight_type="Q8_0", seed=26),
    # Appended with LoRA adapters: the base model with an adapter's term merged into its
    # weights in float64; the C++ tests load the base and apply the adapter at run time.
    dict(name="tiny-llama-lora", architecture="llama", n_layers=2, n_embd=64, n_heads=4, n_kv_heads=2, n_ff=96,
         n_vocab=85, context_length=128, rope_freq_base=10000.0, rms_norm_eps=1e-5, tied_embeddings=False,
         weight_type="Q8_0", seed=27,
         adapter=dict(rank=4, alpha=8.0, scale=0.05, apply_scale=0.75, type="F32", seed=28,
                      targets=[f"blk.{i}.{m}.weight" for i in range(2) for m in
                               ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")]
                      + ["output.weight"])),
    dict(name="tiny-phi3-lora", architecture="phi3", n_layers=2, n_embd=64, n_heads=4, n_kv_heads=2, n_ff=96,
         n_vocab=78, context_length=128, rope_freq_base=10000.0, rms_norm_eps=1e-5, tied_embeddings=True,
         sliding_window=16, weight_type="F16", seed=29,
         adapter=dict(rank=3, alpha=0.0, scale=0.06, apply_scale=1.5, type="F16", seed=30,
                      targets=["blk.0.attn_qkv.weight", "blk.0.ffn_up.weight", "blk.1.attn_qkv.weight",
                               "blk.1.attn_output.weight", "blk.1.ffn_down.weight"])),
]

DEFAULT_PROMPTS = [
    "Here is a short list of the capital cities of Europe: Paris is the capital of France,",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "In the beginning of the twentieth century, physicists discovered that light behaves both as a wave and as a "
    "particle. This duality, first proposed to explain the photoelectric effect, changed how scientists think about",
]


def build_spm(path):
    """A SentencePiece-style BPE tokenizer for a GGUF vocabulary without merges
    (tokenizer.ggml.model "llama", e.g. Gemma 3), built with the `tokenizers` package: a pair
    merges when its concatenation is a piece, higher-scored (earlier) pieces first, as
    transformers' SpmConverter derives them; user-defined pieces (type 4, Gemma's runs of
    spaces and tabs) match the raw text first; unknown bytes fall back to <0xNN>."""
    from tokenizers import Tokenizer, models, normalizers, AddedToken
    r = GGUFReader(path)
    f = r.fields
    tokens = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode("utf-8") for i in f["tokenizer.ggml.tokens"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for piece, pid in vocab.items():
        if types[pid] != 1:
            continue
        for k in range(1, len(piece)):
            a, b = piece[:k], piece[k:]
            if a in vocab and b in vocab and types[vocab[a]] == 1 and types[vocab[b]] == 1:
                merges.append((pid, a, b))
    merges.sort()
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(a, b) for _, a, b in merges], byte_fallback=True, fuse_unk=True,
                               unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t, ty in zip(tokens, types) if ty == 4])
    bos = int(f["tokenizer.ggml.bos_token_id"].parts[-1][0])
    return tok, bos


# Gemma 3 270M (base model): prompts and how many greedy steps (hetero-generate -n 24).
GEMMA3_PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Photosynthesis is the process by which plants",
    "Les trois couleurs du drapeau français sont",
    "The three laws of motion, first stated by Isaac Newton in 1687, describe",
]
TOP_LOGITS = 256  # logits kept per case (the whole 262144 would be 1 MiB each)


def other_model(path, out_path):
    """Cases for another architecture's real file: BOS + the prompt's tokens, 24 greedy
    steps with margins, and the TOP_LOGITS largest final-prompt logits as [id, value]."""
    tok, bos = build_spm(path)
    c, w = gguf_model(path)
    cases = []
    for text in GEMMA3_PROMPTS:
        prompt = [bos] + tok.encode(text, add_special_tokens=False).ids
        logits, greedy, margins = run_case(c, w, prompt, 24)
        top = np.argsort(-logits)[:TOP_LOGITS]
        cases.append({"model": c["arch"], "text": text, "prompt": prompt, "greedy": greedy, "margins": margins,
                      "top_logits": [[int(i), float(logits[i])] for i in top]})
        print(repr(text[:40]), len(prompt), "tokens ->", repr(tok.decode(greedy)), "min margin", min(margins))
    with open(out_path, "w") as f:
        json.dump({"file": os.path.basename(path), "cases": cases}, f, ensure_ascii=False, indent=1)
    print(f"wrote {len(cases)} cases to {out_path}")


def main():
    # --other-model OUT.json: a real file of another architecture (Gemma 3 270M):
    #   python3 scripts/reference_forward.py gemma-3-270m-q4_k_m.gguf --other-model tests/data/gemma3_reference.json
    if len(sys.argv) == 4 and sys.argv[2] == "--other-model":
        other_model(sys.argv[1], sys.argv[3])
        return
    # --default-only OUT_DIR: only the given file's cases (e.g. the default model requantized
    # to Q4_K_M), written to OUT_DIR for HETERO_REFERENCE_DIR (tests/cpu_backend_test.cc).
    out_dir = DATA
    tiny = TINY
    if len(sys.argv) == 4 and sys.argv[2] == "--default-only":
        out_dir, tiny = sys.argv[3], []
    cases, logits_out = [], []
    for opts in tiny:
        c, w = tiny_model(opts)
        rng = Stream(opts["seed"] * 7919)
        for length in (1, 9, 37):
            prompt = [int(rng.next() % opts["n_vocab"]) for _ in range(length)]
            logits, greedy, margins = run_case(c, w, prompt, 12)
            cases.append({"model": opts["name"], "options": opts, "prompt": prompt, "greedy": greedy,
                          "margins": margins})
            logits_out.append(logits)
    tokens, merges, types = read_gguf_vocab(sys.argv[1])
    tok = build(tokens, merges, types, "smollm")
    c, w = gguf_model(sys.argv[1])
    for text in DEFAULT_PROMPTS:
        prompt = tok.encode(text, add_special_tokens=False).ids
        assert 8 <= len(prompt) <= 64, len(prompt)
        logits, greedy, margins = run_case(c, w, prompt, 32)
        cases.append({"model": "default", "text": text, "prompt": prompt, "greedy": greedy, "margins": margins})
        logits_out.append(logits)
        print(repr(text[:40]), len(prompt), "tokens ->", repr(tok.decode(greedy)))
    with open(os.path.join(out_dir, "reference_forward.json"), "w") as f:
        json.dump({"cases": cases}, f, ensure_ascii=False, indent=1)
    with open(os.path.join(out_dir, "reference_logits.f32"), "wb") as f:
        for l in logits_out:
            f.write(l.astype("<f4").tobytes())
    print(f"wrote {len(cases)} cases")


if __name__ == "__main__":
    main()
