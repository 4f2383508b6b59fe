#!/usr/bin/env python3
"""Writes tests/data/dequant_vectors.hdqv: random blocks of every weight type hetero
dequantizes, with the float32 values an independent implementation produces for them.

The reference is the `gguf` package from PyPI (gguf.quants.dequantize), which mirrors
ggml's definitions in numpy. It has no Q8_K dequantizer, so Q8_K's reference is the
one-line definition (y = d * q) written below in numpy.

Blocks are random bytes, except the floating-point scale fields, which are replaced by
random finite values of varied sign and magnitude (random bytes there would be NaN or
infinity too often to test anything). F16/BF16/F32 tensors are random bit patterns
without NaNs (infinities, zeros and subnormals included).

    python3 -m pip install gguf==0.19.0 numpy
    python3 scripts/gen_dequant_vectors.py

File format (little-endian): b"HDQV", u32 version (1), u32 record count; per record:
u32 type id, u32 element count, u32 byte count, the bytes, then float32 x element count.
"""
import importlib.metadata
import os
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

SEED = 20261129
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                   "dequant_vectors.hdqv")

# Byte offsets of the fp16 scale fields inside one block (ggml's block structs).
FP16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ4_NL: [0], T.IQ4_XS: [0],
}


def random_finite_f16(rng, n):
    mag = rng.uniform(0.5, 2.0, n) * 2.0 ** rng.integers(-16, 4, n)
    return (mag * rng.choice([-1.0, 1.0], n)).astype(np.float16)


def random_bits_without_nan(rng, n, dtype, bits, exp_mask, mant_mask):
    raw = rng.integers(0, 1 << bits, n, dtype=np.uint64).astype(dtype)
    nan = ((raw & exp_mask) == exp_mask) & ((raw & mant_mask) != 0)
    raw[nan] &= ~dtype(exp_mask)  # clear the exponent: a finite value instead
    return raw


def make_record(rng, qtype):
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    if qtype == T.F32:
        n = 1001
        data = random_bits_without_nan(rng, n, np.uint32, 32, 0x7F800000, 0x007FFFFF)
        data[:4] = np.array([0x00000000, 0x80000000, 0x7F800000, 0x00000001], dtype=np.uint32)
        raw = data.view(np.uint8)
    elif qtype in (T.F16, T.BF16):
        n = 1001
        if qtype == T.F16:
            data = random_bits_without_nan(rng, n, np.uint16, 16, 0x7C00, 0x03FF)
            data[:4] = np.array([0x0000, 0x8000, 0x7C00, 0x0001], dtype=np.uint16)
        else:
            data = random_bits_without_nan(rng, n, np.uint16, 16, 0x7F80, 0x007F)
            data[:4] = np.array([0x0000, 0x8000, 0xFF80, 0x0001], dtype=np.uint16)
        raw = data.view(np.uint8)
    else:
        n_blocks = 37 if block_size == 32 else 5  # awkward counts
        n = n_blocks * block_size
        blocks = rng.integers(0, 256, (n_blocks, type_size), dtype=np.uint64).astype(np.uint8)
        if qtype == T.Q8_K:
            d = (rng.uniform(0.5, 2.0, n_blocks) * 2.0 ** rng.integers(-20, 4, n_blocks)
                 * rng.choice([-1.0, 1.0], n_blocks)).astype(np.float32)
            blocks[:, 0:4] = d.view(np.uint8).reshape(n_blocks, 4)
        else:
            for off in FP16_FIELDS[qtype]:
                blocks[:, off:off + 2] = random_finite_f16(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
        raw = blocks.reshape(-1)

    if qtype == T.Q8_K:
        b = raw.reshape(-1, type_size)
        d = b[:, 0:4].copy().view(np.float32)                       # (n_blocks, 1)
        q = b[:, 4:4 + 256].copy().view(np.int8).astype(np.float32)  # (n_blocks, 256)
        expected = (d * q).astype(np.float32).reshape(-1)
    else:
        expected = np.asarray(dequantize(raw, qtype), dtype=np.float32).reshape(-1)
    assert expected.size == n, (qtype.name, expected.size, n)
    assert raw.size == n // block_size * type_size
    return int(qtype), n, raw.tobytes(), expected.astype("<f4").tobytes()


def main():
    rng = np.random.default_rng(SEED)
    types = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
             T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.Q8_K,
             # Appended later: the records before them stay as they were.
             T.IQ4_NL, T.IQ4_XS]
    records = [make_record(rng, t) for t in types]
    with open(OUT, "wb") as f:
        f.write(b"HDQV" + struct.pack("<II", 1, len(records)))
        for type_id, n, raw, expected in records:
            f.write(struct.pack("<III", type_id, n, len(raw)))
            f.write(raw)
            f.write(expected)
    print(f"wrote {len(records)} records to {os.path.normpath(OUT)} (gguf {importlib.metadata.version('gguf')})")


if __name__ == "__main__":
    sys.exit(main())
