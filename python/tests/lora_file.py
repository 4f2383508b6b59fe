"""A LoRA adapter file for the tests, written without the gguf package."""


def write_lora_adapter(path, amplitude=1.0):
    """A LoRA adapter as llama.cpp writes them (GGUF v3) for the default model: one adapted
    matrix, blk.0.attn_v.weight [576, 192], rank 2, f32 values of `amplitude`."""
    import random
    import struct

    def string(s):
        return struct.pack("<Q", len(s.encode())) + s.encode()

    rng = random.Random(5)
    inputs, outputs, rank = 576, 192, 2
    out = b"GGUF" + struct.pack("<IQQ", 3, 2, 4)
    for key, value in (("general.architecture", "llama"), ("general.type", "adapter"), ("adapter.type", "lora")):
        out += string(key) + struct.pack("<I", 8) + string(value)
    out += string("adapter.lora.alpha") + struct.pack("<If", 6, 2.0)
    size_a = inputs * rank * 4
    out += string("blk.0.attn_v.weight.lora_a") + struct.pack("<IQQIQ", 2, inputs, rank, 0, 0)
    out += string("blk.0.attn_v.weight.lora_b") + struct.pack("<IQQIQ", 2, rank, outputs, 0, size_a)
    out += b"\0" * (-len(out) % 32)
    values = [amplitude * rng.uniform(-1, 1) for _ in range(inputs * rank + rank * outputs)]
    out += struct.pack(f"<{len(values)}f", *values)
    path.write_bytes(out)
    return path
