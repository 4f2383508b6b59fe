#!/usr/bin/env python3
"""Peer measurement for docs/PERFORMANCE.md: Hugging Face `tokenizers` (Rust core, one
thread) encoding the same ~1 MiB of English prose as benchmarks/tokenizer_benchmark.cc,
with the tokenizer rebuilt from the default model's GGUF vocabulary. Prints MB/s (median of
repeats) and checks that the ids equal hetero's (run build/bin/hetero-tokenize on the same
text).

    RAYON_NUM_THREADS=1 python3 scripts/bench_tokenizer_peer.py models/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_tokenizer_vectors import build, read_gguf_vocab  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def prose():
    src = open(os.path.join(HERE, "..", "benchmarks", "tokenizer_benchmark.cc")).read()
    body = src[src.index("kProse[] =") + len("kProse[] ="):src.index(";", src.index("kProse[] ="))]
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', body)
    text = "".join(p.encode().decode("unicode_escape") for p in parts)
    out = ""
    while len(out) < (1 << 20):
        out += text
    return out[:1 << 20]


def main():
    tokens, merges, types = read_gguf_vocab(sys.argv[1])
    tok = build(tokens, merges, types, "smollm")
    text = prose()
    times = []
    for _ in range(7):
        start = time.perf_counter()
        ids = tok.encode(text, add_special_tokens=False).ids
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    print(f"HF tokenizers encode: {len(text) / median / 1e6:.2f} MB/s (median of 7, {len(ids)} tokens)")
    tool = os.path.join(HERE, "..", "build", "bin", "hetero-tokenize")
    if os.path.exists(tool):
        ours = subprocess.run([tool, "--no-bos", "-"], input=text.encode(), capture_output=True, check=True).stdout
        same = [int(x) for x in ours.decode().strip()[1:-1].split(",")] == ids
        print(f"hetero ids identical on this text: {same}")


if __name__ == "__main__":
    main()
