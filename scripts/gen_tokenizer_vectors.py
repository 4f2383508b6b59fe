#!/usr/bin/env python3
"""Writes tests/data/tokenizer_vectors.jsonl: token ids of several hundred strings under the
default model's vocabulary, computed by Hugging Face `tokenizers` (PyPI), an implementation
independent of ours, with the tokenizer rebuilt from the GGUF's own vocabulary and merges.

Each of hetero's byte-level pre-tokenizers (smollm, llama-bpe, qwen2, gpt-2, default) is
rebuilt with the same vocabulary, so every pre-tokenizer's expressions are checked against
Hugging Face's regex engine; the default model's own (smollm) gets every string twice, with
and without special-token parsing.

Strings that are not valid UTF-8 cannot enter `tokenizers`; hetero's documented rule for
them is: maximal valid runs are tokenized normally and each invalid byte becomes its byte
token. The script applies that rule with `tokenizers` doing the valid runs.

    python3 -m pip install tokenizers==0.23.3 gguf==0.19.0 numpy
    python3 scripts/gen_tokenizer_vectors.py models/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import json
import os
import random
import sys

from gguf import GGUFReader
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "tokenizer_vectors.jsonl")

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"""
LLAMA3 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
QWEN2 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
DEFAULT = [r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"]


def split(pattern):
    return pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)


def byte_level(use_regex):
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=use_regex)


PRE_TOKENIZERS = {
    "smollm": (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level(True)]), False),
    "gpt-2": (byte_level(True), False),
    "llama-bpe": (pre_tokenizers.Sequence([split(LLAMA3), byte_level(False)]), True),
    "qwen2": (pre_tokenizers.Sequence([split(QWEN2), byte_level(False)]), False),
    "default": (pre_tokenizers.Sequence([split(p) for p in DEFAULT] + [byte_level(False)]), False),
}


def read_gguf_vocab(path):
    r = GGUFReader(path)
    f = r.fields

    def strings(key):
        field = f[key]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    tokens = strings("tokenizer.ggml.tokens")
    merges = strings("tokenizer.ggml.merges")
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    return tokens, merges, types


def build(tokens, merges, types, pre):
    pre_tokenizer, ignore_merges = PRE_TOKENIZERS[pre]
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3]
    tok.add_special_tokens(specials)
    return tok


def byte_token_ids(tokens):
    # GPT-2 byte -> character map, to find each byte's token.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    char_of = dict(zip(bs, (chr(c) for c in cs)))
    index = {t: i for i, t in enumerate(tokens)}
    # Bytes whose character is not a token map to None: dropped, as `tokenizers` drops them.
    return {b: index.get(char_of[b]) for b in range(256)}


def split_utf8(data):
    """Maximal valid UTF-8 runs and single invalid bytes, like hetero's SplitValidUtf8."""
    out, i, start = [], 0, 0
    while i < len(data):
        for n in (1, 2, 3, 4):
            try:
                data[i:i + n].decode("utf-8")
                ok = n
                break
            except UnicodeDecodeError:
                ok = 0
        if ok and len(data[i:i + ok].decode("utf-8")) == 1:
            i += ok
            continue
        if i > start:
            out.append((data[start:i], True))
        out.append((data[i:i + 1], False))
        i += 1
        start = i
    if i > start:
        out.append((data[start:i], True))
    return out


def encode(tok, byte_ids, data, parse_special):
    tok.encode_special_tokens = not parse_special
    ids = []
    for chunk, valid in split_utf8(data):
        if valid:
            ids += tok.encode(chunk.decode("utf-8"), add_special_tokens=False).ids
        elif byte_ids[chunk[0]] is not None:
            ids.append(byte_ids[chunk[0]])
    return ids


def corpus():
    s = [
        "", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t \t", "   \n\n   ", "\n \n", " \t\n\r",
        "Hello", "Hello world", "Hello, world!", " Hello", "Hello ", "  Hello  world  ", "hello\n\nworld",
        "x\t\ty", "a  b", "a   b", "a    b", "a\u00a0b", "a\u3000b", "a\u2003b", "line1\nline2\r\nline3",
        "0", "1", "12", "123", "1234", "12345", "1234567890", "12345678901234567890123", "3.14159", "-42",
        "1,000,000", "1e-9", "0x1F", "v1.2.3", "2026-11-29", "+1 (555) 123-4567", "٣٤٥", "१२३", "Ⅻ", "½",
        "don't", "I'm", "they'll", "we've", "he'd", "she's", "it's", "IT'S", "DON'T", "O'Neil", "rock'n'roll",
        "'s", "'", "''", "'hello'", "\"quoted\"", "...", "?!", "!!!", "--", "—", "–", "…", "«guillemets»",
        "„German“", "¿Qué?", "¡Hola!", "(parens)", "[brackets]", "{braces}", "<angle>", "a/b\\c", "@#$%^&*",
        "https://example.com/path?q=1&r=two#frag", "http://localhost:8080", "user@example.org",
        "/usr/local/bin/hetero", "C:\\Windows\\System32", "~/.bashrc", "ftp://x.y/z.tar.gz",
        "def f(x):\n    return x * 2\n", "int main() { return 0; }", "for (int i = 0; i < n; ++i) {}",
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", "SELECT * FROM t WHERE id = 1;",
        "    indented", "\tindented", "if x:\n\tpass", "x = [1, 2, 3]", "a += b", "a->b", "a::b", "#include <vector>",
        "你好，世界", "我爱北京天安门", "日本語のテキスト", "カタカナ", "ひらがな", "한국어 텍스트", "안녕하세요",
        "مرحبا بالعالم", "العربية", "שלום עולם", "नमस्ते दुनिया", "हिन्दी", "Привет, мир!", "Ёлка", "Γειά σου Κόσμε",
        "สวัสดีชาวโลก", "Tiếng Việt có dấu", "Ünïcödé", "façade", "naïve café", "Straße", "İstanbul", "ǅ",
        "e\u0301", "a\u0308", "n\u0303", "e\u0301\u0301\u0301", "Z\u0351\u036b\u0343a\u0352l\u0300g\u0310o",
        "a\x04b", "\x04", "x\x13\x14y", "tab\x1dgroup", "\x01\x02\x03", "\x7f", "\U00040000", "a\U0005ffffb",
        "a\u180e\u180eb \u180ec", "\u180e", "x \u180e", "\u2028\u2029 \u0085x", "a\u00a0\u00a0 b",
        "\u200b", "a\u200bb", "\u200d", "\ufeffBOM", "\u2028", "a\u2029b", "\u0085", "\u000b\u000c",
        "👍", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷🇩🇪", "❤️", "😀😃😄", "🤖 robot", "a😀b", "👩🏾‍💻", "🧑‍🤝‍🧑", "✌🏿",
        "𝕳𝖊𝖑𝖑𝖔", "𝟙𝟚𝟛", "𐍈", "\U0001F600\U0001F601", "ℌ𝔢𝔩𝔩𝔬",
        "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nHi<|im_end|>\n",
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n", "text<|im_end|>more",
        "<|im_start", "im_start|>", "<<|im_start|>>", "<|im_start|><|im_end|>", " <|im_start|> ", "<repo_name>x",
        "<|endoftext|><|endoftext|>", "<file_sep>a<filename>b", "<jupyter_code>print(1)", "<|unknown|>",
    ]
    prose = (
        "The quick brown fox jumps over the lazy dog. It was the best of times, it was the worst of times, "
        "it was the age of wisdom, it was the age of foolishness. In 1865, the population was 31,443,321; "
        "by 2026 it had grown tenfold. \"Well,\" she said, \"I don't think that's right.\"\n\nNew paragraph: "
        "tokens, merges and pre-tokenizers must all agree, byte for byte, with the reference."
    )
    s += [prose, prose.upper(), prose.lower(), prose.replace(" ", "  "), prose.replace(" ", "\n")]
    s += [prose[i:i + 40] for i in range(0, len(prose), 37)]
    rng = random.Random(20261129)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " \t\n\r  ", ".,;:!?'\"()[]{}<>-_/\\|@#$%^&*+=~`",
        "éèêëàâäôöûüçñßøåæœ", "你好世界中文字符", "こんにちはカタカナ", "한국어", "مرحبا", "שלום", "नमस्ते", "Привет", "αβγδ",
        "😀👍🏽🇫🇷❤️🤖", "\u0301\u0308\u0303", "\u200b\u200d\u00a0\u3000", "٣٤٥१२३½Ⅻ", "<|im_start|><|im_end|>",
    ]
    for _ in range(160):
        n = rng.randint(1, 40)
        s.append("".join(rng.choice(rng.choice(pools)) for _ in range(n)))
    return s


INVALID = [
    b"\xff", b"\xfe\xff", b"abc\x80def", b"\xc3", b"caf\xc3", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
    b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf0\x9f\x98", b"ok \xf0\x9f\x98 ok", b"\x80\x80\x80", b"a\xffb\xfec",
    b"\xf5\x80\x80\x80", b"hello \xe2\x82 world", b"\x00", b"nul\x00byte", b"\xc2\xa0\xc2", b"12\xff34",
]


def main():
    tokens, merges, types = read_gguf_vocab(sys.argv[1])
    byte_ids = byte_token_ids(tokens)
    strings = [x.encode("utf-8") for x in corpus()] + INVALID
    records = []
    for pre in PRE_TOKENIZERS:
        tok = build(tokens, merges, types, pre)
        for data in strings:
            for parse_special in ((True, False) if pre == "smollm" else (True,)):
                ids = encode(tok, byte_ids, data, parse_special)
                records.append({"pre": pre, "text_hex": data.hex(), "parse_special": parse_special, "ids": ids})
    with open(OUT, "w") as f:
        for r in records:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")
    n_smollm = sum(1 for r in records if r["pre"] == "smollm")
    print(f"wrote {len(records)} vectors ({len(strings)} strings; {n_smollm} for smollm) to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
