#!/usr/bin/env bash
# Builds the GPU peer, llama.cpp's CUDA backend for sm_90 only (the H200), from a source tree
# that is not ours and is never committed: `bash scripts/build-llama-cuda.sh LLAMA_SRC`
# writes LLAMA_SRC/build-cuda/bin/{llama-bench,llama-batched-bench} and their libraries,
# which scripts/device-bundle.sh carries to the device (LLAMA_CUDA_BUILD points it elsewhere).
# About 8 minutes on the 2-vCPU development VM. The linker is told to leave libcuda's
# symbols for the loader: the VM has only the toolkit's stub, the device has the driver.
set -euo pipefail
src=${1:?usage: $0 LLAMA_CPP_SOURCE_DIR}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
[ -x "$nvcc" ] || { echo "no nvcc at $nvcc (set NVCC)" >&2; exit 1; }
[ -f "$src/CMakeLists.txt" ] || { echo "$src has no CMakeLists.txt" >&2; exit 1; }
# An exported snapshot may lack tests/; llama.cpp's CMake adds it unconditionally in places.
[ -f "$src/tests/CMakeLists.txt" ] || { mkdir -p "$src/tests" && : >"$src/tests/CMakeLists.txt"; }
cmake -S "$src" -B "$src/build-cuda" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF \
  -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined
cmake --build "$src/build-cuda" -j"$(nproc)" --target llama-bench llama-batched-bench
ls -l "$src/build-cuda/bin"
