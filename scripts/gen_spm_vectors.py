#!/usr/bin/env python3
"""Writes tests/data/spm_vectors.json: a small SentencePiece BPE vocabulary (trained here,
byte fallback on, Llama-style normalization: none, dummy prefix on, whitespace kept) and the
token ids the `sentencepiece` package (PyPI), an implementation independent of ours, gives
for a few hundred strings. The tests build a GGUF file from this vocabulary themselves and
require identical ids and exact round trips.

    python3 -m pip install sentencepiece==0.2.3
    python3 scripts/gen_spm_vectors.py
"""
import json
import os
import random
import tempfile

import sentencepiece as spm

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "spm_vectors.json")

TRAIN = """The quick brown fox jumps over the lazy dog. A tokenizer splits text into pieces.
Byte pair encoding merges the most frequent pairs of symbols, one merge at a time.
SentencePiece treats the input as a raw stream, with spaces escaped as a meta symbol.
Numbers like 12, 345 and 6789 appear in text; so do dates such as 2026-11-29.
Ceci est une phrase en français, avec des accents: é, è, à, ç.
Dies ist ein deutscher Satz mit Umlauten: ä, ö, ü und ß.
Это предложение на русском языке.
def tokenize(text):\n    return text.split()\n
"""


def main():
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as d:
        corpus = os.path.join(d, "corpus.txt")
        with open(corpus, "w") as f:
            for _ in range(30):
                lines = TRAIN.splitlines()
                rng.shuffle(lines)
                f.write("\n".join(lines) + "\n")
        prefix = os.path.join(d, "m")
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=prefix, vocab_size=400, model_type="bpe", byte_fallback=True,
            normalization_rule_name="identity", add_dummy_prefix=True, remove_extra_whitespaces=False,
            character_coverage=1.0, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
        sp = spm.SentencePieceProcessor(model_file=prefix + ".model")

    pieces = []
    for i in range(sp.get_piece_size()):
        kind = 1
        if sp.is_unknown(i):
            kind = 2
        elif sp.is_control(i):
            kind = 3
        elif sp.is_byte(i):
            kind = 6
        elif sp.is_unused(i):
            kind = 5
        pieces.append([sp.id_to_piece(i), sp.get_score(i), kind])

    strings = [
        "", " ", "  ", "a", "The quick brown fox", " leading space", "trailing space ", "double  space",
        "tabs\tand\nnewlines\n", "12345 and 6789", "2026-11-29", "français é è à ç", "ß and ü",
        "Это тест", "中文字符不在词表里", "emoji 😀 and 👍🏽", "mixed: def f(x): return x", "\u0301",
        "quick quick quick", "lazy dog.", "A tokenizer splits text", "byte pair encoding", "unseen words xyzzy",
        "<s>", "</s>", "<unk>", "▁", "▁▁x", "   x   ", "\n", "a\u00a0b",
    ]
    alphabet = "abcdefghijklmnopqrstuvwxyz ABCDEFG.,!?0123456789éàüß中文😀\n\t  "
    for _ in range(300):
        strings.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))))
    vectors = [{"text": s, "ids": sp.encode(s)} for s in strings]
    with open(OUT, "w") as f:
        json.dump({"pieces": pieces, "vectors": vectors}, f, ensure_ascii=False, separators=(",", ":"))
    print(f"wrote {len(pieces)} pieces and {len(vectors)} vectors to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
