#!/usr/bin/env python3
"""How far int8 activations alone move a model's logits (a diagnostic, not a test).

The native kernels quantize each matrix product's input to int8 per block of 32 (scale =
the block's largest magnitude / 127, rounded to nearest), and are exact from there
(tests/quant_blocks_test.cc). This runs scripts/reference_forward.py's float64 forward
pass of FILE on its three default prompts twice: as is, and with the inputs of the chosen
matrices quantized that way; it prints the relative L2 distance of the prompt's
final-position logits. So a figure from cpu_backend_test's OtherFile check (hetero's int8
path against float64) can be told apart from what the method itself costs on that file.

    python3 scripts/int8_activation_error.py FILE [MATRICES]

FILE: a file of the default model (its prompts and tokenizer, as --default-only uses).

MATRICES: comma-separated from q,k,v,o,gate,up,down,out (default: all of them). Dense
models only (llama-style layers; not the mixtures' expert products).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_forward as rf  # noqa: E402

LAYER_MATRICES = ("q", "k", "v", "o", "gate", "up", "down")


def int8_blocks(x):
    """x rounded as QuantizeRowsPortable (src/cpu/quant_matmul.cc) rounds it: per 32, d =
    max|x| / 127, q = x * (1 / d) to the nearest integer, ties to even; in float64 here,
    float32 there."""
    x = np.asarray(x)
    blocks = x.reshape(-1, 32)
    d = np.abs(blocks).max(axis=1, keepdims=True) / 127.0
    inverse = np.divide(1.0, d, out=np.zeros_like(d), where=d > 0)
    return (np.rint(blocks * inverse) * d).reshape(x.shape)


class QuantizedInput:
    """Stands for a weight's transpose: `x @ it` quantizes x first (numpy defers to it)."""
    __array_ufunc__ = None

    def __init__(self, transposed):
        self.transposed = transposed

    def __rmatmul__(self, x):
        return int8_blocks(x) @ self.transposed


class Weight:
    def __init__(self, w):
        self.w = w

    @property
    def T(self):  # noqa: N802 (numpy's name, which reference_forward uses)
        return QuantizedInput(self.w.T)


def swap(w, chosen, wrap):
    for layer in w.layers:
        for name in LAYER_MATRICES:
            if name in chosen:
                setattr(layer, name, Weight(getattr(layer, name)) if wrap else getattr(layer, name).w)
    if "out" in chosen:
        w.out = Weight(w.out) if wrap else w.out.w


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().split("\n\n")[2], file=sys.stderr)
        sys.exit(2)
    path = sys.argv[1]
    chosen = set(sys.argv[2].split(",")) if len(sys.argv) == 3 else set(LAYER_MATRICES) | {"out"}
    unknown = chosen - set(LAYER_MATRICES) - {"out"}
    if unknown:
        sys.exit(f"int8_activation_error: unknown matrices {sorted(unknown)}")
    tokens, merges, types = rf.read_gguf_vocab(path)
    tok = rf.build(tokens, merges, types, "smollm")
    c, w = rf.gguf_model(path)
    if any(layer.moe is not None for layer in w.layers):
        sys.exit("int8_activation_error: dense models only")
    for text in rf.DEFAULT_PROMPTS:
        prompt = tok.encode(text, add_special_tokens=False).ids
        exact = rf.Session(c, w).forward(prompt)[-1]
        swap(w, chosen, wrap=True)
        try:
            rounded = rf.Session(c, w).forward(prompt)[-1]
        finally:
            swap(w, chosen, wrap=False)
        distance = np.linalg.norm(rounded - exact) / np.linalg.norm(exact)
        print(f"prompt of {len(prompt)} tokens: relative L2 {distance:.4f} ({','.join(sorted(chosen))} int8)")


if __name__ == "__main__":
    main()
