#!/usr/bin/env python3
"""Random-weight GGUF files in the shapes of real mixture-of-experts models (and one dense
shape small enough to stay in cache), for benchmarks
(hetero-bench against llama.cpp's llama-bench: scripts/moe-bench.sh writes them, quantizes them and runs both). The weights
are random Q8_0 blocks written directly (no float copy is ever made, so even OLMoE's 7B
parameters take a minute); routers and norms are F32, as converters write them. Each file
has the architecture's metadata and a vocabulary-less tokenizer ("none"), which both
programs accept for benchmarks on token ids.

    python3 -m pip install gguf==0.19.0 numpy
    python3 scripts/moe_bench_files.py OUT_DIR [granite-3.0-1b-a400m|olmoe-1b-7b|llama-cache-resident|gemma3-270m ...]

Shapes (the first two from the models' published configurations):
  granite-3.0-1b-a400m  granitemoe, 24 layers, hidden 1024, 16 heads / 8 KV heads,
                        32 experts of FFN 512, 8 per token, vocabulary 49155, tied output
  olmoe-1b-7b           olmoe, 16 layers, hidden 2048, 16 heads, 64 experts of FFN 1024,
                        8 per token, vocabulary 50304, q/k norms over the whole vectors
  llama-cache-resident  llama (dense), 6 layers, hidden 512, 8 heads / 4 KV heads, FFN 1536,
                        vocabulary 8192: 24 MB in Q8_0, 13 MB in Q4_0, so decode reads its
                        weights from a 32 MB L3 rather than from memory: the situation of the
                        default model on a Xeon whose L3 holds it, on any CPU
  gemma3-270m           gemma3 (dense, Gemma 3 270M's published configuration), 18 layers,
                        hidden 640, 4 heads / 1 KV head of 256, FFN 2048, vocabulary 262144,
                        tied output, q/k norms per head, norms after attention and FFN,
                        512-position sliding window on 5 of every 6 layers
"""
import os
import sys

import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType as T

SHAPES = {
    "granite-3.0-1b-a400m": dict(arch="granitemoe", layers=24, embd=1024, heads=16, kv_heads=8, experts=32, used=8,
                                 ff=512, vocab=49155, tied=True, eps=1e-6, base=10000.0,
                                 scales=dict(embedding_scale=12.0, residual_scale=0.22, logit_scale=6.0,
                                             attention_scale=0.015625)),
    "olmoe-1b-7b": dict(arch="olmoe", layers=16, embd=2048, heads=16, kv_heads=16, experts=64, used=8, ff=1024,
                        vocab=50304, tied=False, eps=1e-5, base=10000.0, scales={}),
    "llama-cache-resident": dict(arch="llama", layers=6, embd=512, heads=8, kv_heads=4, experts=0, used=0,
                                 ff=1536, vocab=8192, tied=False, eps=1e-5, base=10000.0, scales={}),
    "gemma3-270m": dict(arch="gemma3", layers=18, embd=640, heads=4, kv_heads=1, head_dim=256, experts=0, used=0,
                        ff=2048, vocab=262144, tied=True, eps=1e-6, base=1000000.0, base_swa=10000.0, window=512,
                        scales={}),
}

rng = np.random.default_rng(1)


def q8_0(rows, cols, extra=()):
    """Random Q8_0 blocks for a ggml tensor [cols, rows, *extra]: per 32 values an fp16
    scale (about 0.02 / 127, so values spread like N(0, 0.02)) and 32 random int8."""
    n_blocks = int(np.prod(extra, dtype=np.int64)) * rows * (cols // 32)
    blocks = np.empty((n_blocks, 34), dtype=np.uint8)
    scales = (0.02 / 64 * (0.75 + 0.5 * rng.random(n_blocks))).astype(np.float16)
    blocks[:, 0:2] = scales.view(np.uint8).reshape(-1, 2)
    blocks[:, 2:] = rng.integers(-127, 128, size=(n_blocks, 32), dtype=np.int8).view(np.uint8)
    numpy_shape = tuple(reversed(extra)) + (rows, cols // 32 * 34)
    return blocks.reshape(numpy_shape)


def f32(*numpy_shape, mean=0.0, scale=0.02):
    return (mean + scale * rng.standard_normal(numpy_shape)).astype(np.float32)


def write(name, s, out_dir):
    path = os.path.join(out_dir, f"{name}.Q8_0.gguf")
    w = GGUFWriter(path, s["arch"])
    e, hd = s["embd"], s.get("head_dim", s["embd"] // s["heads"])
    qd, kd = s["heads"] * hd, s["kv_heads"] * hd
    gemma = s["arch"] == "gemma3"
    w.add_name(f"random-{name}")
    w.add_block_count(s["layers"])
    w.add_context_length(4096)
    w.add_embedding_length(e)
    w.add_feed_forward_length(s["ff"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_rope_freq_base(s["base"])
    w.add_layer_norm_rms_eps(s["eps"])
    w.add_vocab_size(s["vocab"])
    if "head_dim" in s:
        w.add_key_length(hd)
        w.add_value_length(hd)
    if gemma:
        w.add_sliding_window(s["window"])
        w.add_rope_freq_base_swa(s["base_swa"])
    if s["experts"]:
        w.add_expert_count(s["experts"])
        w.add_expert_used_count(s["used"])
    sc = s["scales"]
    if sc:
        w.add_embedding_scale(sc["embedding_scale"])
        w.add_residual_scale(sc["residual_scale"])
        w.add_logit_scale(sc["logit_scale"])
        w.add_attention_scale(sc["attention_scale"])
    w.add_tokenizer_model("none")
    q = T.Q8_0
    w.add_tensor("token_embd.weight", q8_0(s["vocab"], e), raw_dtype=q)
    w.add_tensor("output_norm.weight", f32(e, mean=1.0, scale=0.05))
    if not s["tied"]:
        w.add_tensor("output.weight", q8_0(s["vocab"], e), raw_dtype=q)
    for i in range(s["layers"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", f32(e, mean=1.0, scale=0.05))
        w.add_tensor(p + "attn_q.weight", q8_0(qd, e), raw_dtype=q)
        w.add_tensor(p + "attn_k.weight", q8_0(kd, e), raw_dtype=q)
        w.add_tensor(p + "attn_v.weight", q8_0(kd, e), raw_dtype=q)
        w.add_tensor(p + "attn_output.weight", q8_0(e, qd), raw_dtype=q)
        if s["arch"] == "olmoe":
            w.add_tensor(p + "attn_q_norm.weight", f32(e, mean=1.0, scale=0.05))
            w.add_tensor(p + "attn_k_norm.weight", f32(kd, mean=1.0, scale=0.05))
        if gemma:  # per-head q/k norms, and the norms after each block
            w.add_tensor(p + "attn_q_norm.weight", f32(hd, mean=1.0, scale=0.05))
            w.add_tensor(p + "attn_k_norm.weight", f32(hd, mean=1.0, scale=0.05))
            w.add_tensor(p + "post_attention_norm.weight", f32(e, mean=1.0, scale=0.05))
            w.add_tensor(p + "post_ffw_norm.weight", f32(e, mean=1.0, scale=0.05))
        w.add_tensor(p + "ffn_norm.weight", f32(e, mean=1.0, scale=0.05))
        if not s["experts"]:
            w.add_tensor(p + "ffn_gate.weight", q8_0(s["ff"], e), raw_dtype=q)
            w.add_tensor(p + "ffn_up.weight", q8_0(s["ff"], e), raw_dtype=q)
            w.add_tensor(p + "ffn_down.weight", q8_0(e, s["ff"]), raw_dtype=q)
            continue
        w.add_tensor(p + "ffn_gate_inp.weight", f32(s["experts"], e, scale=0.5))
        w.add_tensor(p + "ffn_gate_exps.weight", q8_0(s["ff"], e, (s["experts"],)), raw_dtype=q)
        w.add_tensor(p + "ffn_up_exps.weight", q8_0(s["ff"], e, (s["experts"],)), raw_dtype=q)
        w.add_tensor(p + "ffn_down_exps.weight", q8_0(e, s["ff"], (s["experts"],)), raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(path, f"{os.path.getsize(path) / 2**30:.2f} GiB")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for name in sys.argv[2:] or list(SHAPES):
        if name not in SHAPES:
            sys.exit(f"unknown shape {name!r} (known: {', '.join(SHAPES)})")
        write(name, SHAPES[name], out_dir)


if __name__ == "__main__":
    main()
