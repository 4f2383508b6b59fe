#!/usr/bin/env bash
# Prepares a GPU check for a machine that cannot build hetero itself (the lent H200 has
# CUDA, CMake and Ninja but none of our Debian libraries, and no network): builds the
# `device` preset here (Release, sm_90), then lays out under .device/ (git-ignored)
#   bundle/          stripped test and benchmark programs, the CUDA module and the shared
#                    libraries they need that a CUDA image lacks
#   libs/            oneDNN, compressed
#   peer/            the peer, where $LLAMA_CUDA_BUILD (default /work/peer/llama.cpp/build-cuda)
#                    holds a llama.cpp CUDA build for sm_90: llama-bench, llama-batched-bench
#                    and their libraries (the large ones compressed), as
#                    scripts/build-llama-cuda.sh builds them
#   model/part-*     the default model in pieces (its SHA-256 in bundle/model.sha256)
#   gemma3/part-*    Gemma 3 270M, where models/ has it (`scripts/setup.sh --model gemma3`)
#   plan.txt         the device tool moves at most 64 MiB a call, the working tree included:
#                    one line per call, the paths to carry. The first call's paths make the
#                    bundle (run `bash scripts/device-check.sh --quick` with them); each later
#                    call but the last runs `mkdir -p /tmp/hetero-device && cp -r .device/.
#                    /tmp/hetero-device/`, and the last runs `bash scripts/device-check.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${HETERO_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
gemma3=${HETERO_GEMMA3_MODEL:-models/gemma-3-270m-q4_k_m.gguf}
[ -f "$model" ] || bash scripts/setup.sh --model
cmake --preset device >/dev/null
cmake --build build-device -j2 --target hetero_cuda cuda_backend_test hetero-bench
rm -rf .device && mkdir -p .device/bundle/bin .device/bundle/lib .device/libs .device/model
for p in cuda_backend_test hetero-bench; do
  strip -o ".device/bundle/bin/$p" "build-device/bin/$p"
done
cp build-device/lib/libhetero-cuda.so .device/bundle/lib/
# The gguf package (pure Python) for `device-check.sh --moe`, which writes its file there.
gguf_dir=$(python3 -c 'import gguf, os; print(os.path.dirname(gguf.__file__))' 2>/dev/null || true)
if [ -n "$gguf_dir" ]; then
  mkdir -p .device/bundle/python && cp -r "$gguf_dir" .device/bundle/python/ && rm -rf .device/bundle/python/gguf/__pycache__
fi
# Every shared library the programs load, less glibc, the C++ runtime (the image's is
# newer) and CUDA's own (the image has them).
ldd build-device/bin/cuda_backend_test build-device/bin/hetero-bench \
  | awk '/=> \//{print $3}' | sort -u \
  | grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libcublas[^/]*)\.so' \
  | while read -r lib; do cp -L "$lib" .device/bundle/lib/; done
xz -T2 -6 .device/bundle/lib/libdnnl.so.*
mv .device/bundle/lib/libdnnl.so.*.xz .device/libs/
sha256sum "$model" | awk '{print $1}' >.device/bundle/model.sha256
# Pieces of 28 MiB: two fit a call beside the working tree (about 4 MiB).
split -b 28M -d "$model" .device/model/part-
if [ -f "$gemma3" ]; then
  mkdir -p .device/gemma3
  sha256sum "$gemma3" | awk '{print $1}' >.device/bundle/gemma3.sha256
  split -b 28M -d "$gemma3" .device/gemma3/part-
else
  echo "no Gemma 3 270M at $gemma3: the device check will skip it" >&2
fi
peer_build=${LLAMA_CUDA_BUILD:-/work/peer/llama.cpp/build-cuda}
if [ -x "$peer_build/bin/llama-bench" ] && [ -x "$peer_build/bin/llama-batched-bench" ]; then
  mkdir -p .device/peer/bin .device/peer/lib
  for p in llama-bench llama-batched-bench; do strip -o ".device/peer/bin/$p" "$peer_build/bin/$p"; done
  # Its own libraries only (CUDA's and the C++ runtime are the image's).
  ldd "$peer_build/bin/llama-bench" "$peer_build/bin/llama-batched-bench" | awk '/=> \//{print $3}' | sort -u |
    { grep -F "$peer_build/" || true; } | while read -r lib; do strip -o ".device/peer/lib/$(basename "$lib")" "$lib"; done
  find .device/peer/lib -size +4M -exec xz -T2 -6 {} \;
else
  echo "no llama.cpp CUDA build at $peer_build: the device check will skip the peer" >&2
fi
# The calls: the bundle and oneDNN first, then first-fit of the rest by size.
python3 - <<'PY'
import os
limit = 62 * 2**20 - sum(os.path.getsize(p) for p in os.popen("git ls-files").read().split() if os.path.isfile(p))
def size(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
first = [".device/bundle", ".device/libs"]
rest = [".device/peer"] if os.path.isdir(".device/peer") else []
for d in (".device/model", ".device/gemma3"):
    if os.path.isdir(d):
        rest += [os.path.join(d, f) for f in sorted(os.listdir(d))]
calls = [first]
for path in sorted(rest, key=size, reverse=True):
    for call in calls:
        if len(call) < 8 and sum(map(size, call)) + size(path) <= limit:
            call.append(path)
            break
    else:
        calls.append([path])
with open(".device/plan.txt", "w") as f:
    for call in calls:
        f.write(" ".join(call) + "\n")
for i, call in enumerate(calls):
    print(f"call {i + 1}: {sum(map(size, call)) / 2**20:.1f} MiB: {' '.join(call)}")
PY
