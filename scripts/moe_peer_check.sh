#!/bin/bash
# Reads tiny mixture-of-experts files (granitemoe, olmoe, qwen2moe, qwen3moe; F16, random
# weights) with hetero and with llama.cpp and compares the greedy tokens and the prompt's
# logits: an independent check that hetero reads each architecture's file layout as the
# ecosystem does. Needs hetero built (build/bin/moe_peer_greedy) and a llama.cpp source tree
# built with CMake into LLAMA_DIR/build.
#   bash scripts/moe_peer_check.sh LLAMA_DIR [HETERO_BUILD_DIR]   (from the repository root;
#   HETERO_BUILD_DIR defaults to build)
# Exit 0 when every prompt's tokens are equal up to the first step whose top-2 margin is
# below 1e-3 (a near-tie, where f16 KV rounding may pick either).
set -euo pipefail
llama=${1:?usage: moe_peer_check.sh LLAMA_DIR [HETERO_BUILD_DIR]}
build=${2:-build}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
libs="$llama/build/bin"
[ -e "$libs/libllama.so" ] || libs="$llama/build/src"
g++ -std=c++17 -O2 -I"$llama/include" -I"$llama/ggml/include" "$here/moe_peer_check/llama_greedy.cc" \
  -o "$work/llama_greedy" -L"$libs" -lllama -Wl,-rpath,"$libs"
prompts=(1,17,42,99 200,3,3,128,77,5 9)  # token ids; the files' vocabulary is 256
for arch in granitemoe olmoe qwen2moe qwen3moe; do
  "$build/bin/moe_peer_greedy" "$arch" "$work/$arch.gguf" "${prompts[@]}" > "$work/hetero_$arch.txt"
  "$work/llama_greedy" "$work/$arch.gguf" "${prompts[@]}" > "$work/llama_$arch.txt" 2> "$work/llama_$arch.log" || {
    echo "$arch: llama.cpp failed:"; grep -i error "$work/llama_$arch.log" || tail -5 "$work/llama_$arch.log"; exit 1; }
done
python3 - "$work" <<'PY'
import math, re, sys
work, failed = sys.argv[1], False
for arch in ["granitemoe", "olmoe", "qwen2moe", "qwen3moe"]:
    def read(side):
        lines = open(f"{work}/{side}_{arch}.txt").read().splitlines()
        logits = [[float(v) for v in l.split()[1:]] for l in lines if l.startswith("all")]
        tokens = [re.findall(r"(\d+)\(([-\d.]+)\)", l) for l in lines if l.startswith("tokens")]
        return logits, tokens
    (hl, ht), (ll, lt) = read("hetero"), read("llama")
    for p, (x, y, a, b) in enumerate(zip(hl, ll, ht, lt)):
        rel = math.sqrt(sum((i - j) ** 2 for i, j in zip(x, y)) / sum(j * j for j in y))
        same = 0
        while same < len(a) and a[same][0] == b[same][0]:
            same += 1
        smallest = min((float(m) for _, m in a[:same]), default=float("nan"))
        verdict = "equal" if same == len(a) else (
            "near-tie" if float(a[same][1]) < 1e-3 else "DIFFERENT")
        failed |= verdict == "DIFFERENT"
        print(f"{arch} prompt {p}: greedy tokens equal {same}/{len(a)} ({verdict}); smallest top-2 margin "
              f"among the equal ones {smallest:.4f}; prompt logits {rel:.1e} relative L2")
sys.exit(1 if failed else 0)
PY
