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
    python3 scripts/int8_activation_error.py FILE --greedy PASSES

FILE: a file of the default model (its prompts and tokenizer, as --default-only uses).

MATRICES: comma-separated from q,k,v,o,gate,up,down,out (default: all of them). Dense
models only (llama-style layers; not the mixtures' expert products).

--greedy PASSES: each prompt through every product with one int8 pass (as hetero's
prefill), then 32 greedy steps whose products take PASSES: 1 (--precision int8), 2 (the
int8 blocks of what the first pass leaves added, as hetero's decode steps) or 0 (exact);
prints where the tokens leave the float64 reference's and the reference's top-2 margin
there (cpu_backend_test's near-tie threshold is 0.3).
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


# Passes for the wrapped products' inputs: 0 exact, 1 int8 per 32, 2 that plus the int8
# blocks of its remainder (QuantizedActivations::QuantizeWithRemainder).
PASSES = {"now": 1}


def rounded(x):
    if PASSES["now"] == 0:
        return x
    first = int8_blocks(x)
    return first + int8_blocks(np.asarray(x) - first) if PASSES["now"] == 2 else first


class QuantizedInput:
    """Stands for a weight's transpose: `x @ it` quantizes x first (numpy defers to it)."""
    __array_ufunc__ = None

    def __init__(self, transposed):
        self.transposed = transposed

    def __rmatmul__(self, x):
        return rounded(x) @ self.transposed


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


def greedy(path, decode_passes):
    tokens, merges, types = rf.read_gguf_vocab(path)
    tok = rf.build(tokens, merges, types, "smollm")
    c, w = rf.gguf_model(path)
    everything = set(LAYER_MATRICES) | {"out"}
    for text in rf.DEFAULT_PROMPTS:
        prompt = tok.encode(text, add_special_tokens=False).ids
        _, want, margins = rf.run_case(c, w, prompt, 32)
        swap(w, everything, wrap=True)
        try:
            PASSES["now"] = 1
            session = rf.Session(c, w)
            last = session.forward(prompt)[-1]
            PASSES["now"] = decode_passes
            left = None
            for step, token in enumerate(want):
                if int(np.argmax(last)) != token:
                    left = step
                    break
                last = session.forward([token])[-1]
        finally:
            swap(w, everything, wrap=False)
        if left is None:
            print(f"prompt of {len(prompt)} tokens: 32 of 32 greedy tokens equal (decode {decode_passes} passes)")
        else:
            print(f"prompt of {len(prompt)} tokens: leaves the reference at step {left}, its margin there "
                  f"{margins[left]:.3f}, smallest before {min(margins[:left] or [float('inf')]):.3f} "
                  f"(decode {decode_passes} passes)")


def main():
    if len(sys.argv) == 4 and sys.argv[2] == "--greedy":
        if sys.argv[3] not in ("0", "1", "2"):
            sys.exit("int8_activation_error: --greedy takes 0, 1 or 2")
        greedy(sys.argv[1], int(sys.argv[3]))
        return
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
