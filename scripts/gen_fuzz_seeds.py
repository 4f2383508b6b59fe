#!/usr/bin/env python3
"""Writes the seed corpus of the GGUF reader fuzzer (tests/fuzz/corpus/gguf_reader/) with
the gguf package's own writer, an implementation independent of ours: a tiny llama model
with several weight types, a qwen2-style one with biases, nested/typed metadata, and a
vocabulary-only file. Files are a few KiB so the fuzzer mutates them quickly.

    python3 -m pip install gguf==0.19.0 numpy && python3 scripts/gen_fuzz_seeds.py
"""
import os

import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType as T
from gguf.quants import quantize

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fuzz", "corpus",
                   "gguf_reader")
rng = np.random.default_rng(7)


def weights(rows, cols, qtype):
    x = rng.normal(0, 0.05, (rows, cols)).astype(np.float32)
    if qtype == T.F32:
        return x, None
    if qtype == T.F16:
        return x.astype(np.float16), None
    return quantize(x, qtype), qtype


def tiny_model(path, arch, qtype, n_vocab=48, n_embd=32, n_ff=64, n_layers=1, heads=4, kv=2, bias=False):
    w = GGUFWriter(path, arch)
    w.add_block_count(n_layers)
    w.add_context_length(128)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(n_vocab)])
    hd = n_embd // heads

    def add(name, rows, cols, q=qtype):
        data, raw = weights(rows, cols, q)
        w.add_tensor(name, data, raw_dtype=raw)

    add("token_embd.weight", n_vocab, n_embd)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    for i in range(n_layers):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        add(b + "attn_q.weight", heads * hd, n_embd)
        add(b + "attn_k.weight", kv * hd, n_embd)
        add(b + "attn_v.weight", kv * hd, n_embd)
        if bias:
            for n, d in (("attn_q.bias", heads * hd), ("attn_k.bias", kv * hd), ("attn_v.bias", kv * hd)):
                w.add_tensor(b + n, rng.normal(0, 0.1, d).astype(np.float32))
        add(b + "attn_output.weight", n_embd, heads * hd)
        w.add_tensor(b + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        add(b + "ffn_gate.weight", n_ff, n_embd)
        add(b + "ffn_up.weight", n_ff, n_embd)
        add(b + "ffn_down.weight", n_embd, n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def metadata_only(path):
    w = GGUFWriter(path, "llama")
    w.add_uint8("t.u8", 7)
    w.add_int8("t.i8", -7)
    w.add_uint16("t.u16", 700)
    w.add_int16("t.i16", -700)
    w.add_uint32("t.u32", 70000)
    w.add_int32("t.i32", -70000)
    w.add_uint64("t.u64", 1 << 40)
    w.add_int64("t.i64", -(1 << 40))
    w.add_float32("t.f32", 0.25)
    w.add_float64("t.f64", -0.125)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "h\u00e9llo")
    w.add_array("t.nested", [[1, 2], [3]])
    w.add_array("t.floats", [0.5, 1.5])
    w.add_array("t.bools", [True, False])
    w.add_custom_alignment(64)
    w.add_tensor("x", np.arange(16, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    os.makedirs(OUT, exist_ok=True)
    tiny_model(os.path.join(OUT, "tiny-llama-f32"), "llama", T.F32)
    tiny_model(os.path.join(OUT, "tiny-llama-q8_0"), "llama", T.Q8_0)
    tiny_model(os.path.join(OUT, "tiny-llama-q4_0"), "llama", T.Q4_0)
    tiny_model(os.path.join(OUT, "tiny-qwen2-f16"), "qwen2", T.F16, bias=True)
    metadata_only(os.path.join(OUT, "metadata-all-types"))
    for name in sorted(os.listdir(OUT)):
        print(name, os.path.getsize(os.path.join(OUT, name)))


if __name__ == "__main__":
    main()
