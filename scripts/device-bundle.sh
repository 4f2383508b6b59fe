#!/usr/bin/env bash
# Prepares a GPU check for a machine that cannot build hetero itself (the lent H200 has
# CUDA, CMake and Ninja but none of our Debian libraries, and no network): builds the
# `device` preset here (Release, sm_90), then lays out under .device/ (git-ignored)
#   bundle/          stripped test and benchmark programs, the CUDA module and the shared
#                    libraries they need that a CUDA image lacks (oneDNN compressed: the
#                    device tool moves at most 64 MiB a call)
#   model/part-*     the default model in pieces of at most 44 MiB (its SHA-256 in bundle/)
# scripts/device-check.sh uses the bundle when it finds one. Two calls move it all:
#   1. carry .device/bundle .device/model/part-00 .device/model/libdnnl.so.2.xz,
#      run `bash scripts/device-check.sh --quick` (tiny-model GPU tests, bandwidth);
#   2. at once (the machine stays warm 30 s), carry .device/model/part-01 .device/model/part-02,
#      run `bash scripts/device-check.sh` (everything, on the default model).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${HETERO_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$model" ] || bash scripts/setup.sh --model
cmake --preset device >/dev/null
cmake --build build-device -j2 --target hetero_cuda cuda_backend_test hetero-bench
rm -rf .device && mkdir -p .device/bundle/bin .device/bundle/lib .device/model
for p in cuda_backend_test hetero-bench; do
  strip -o ".device/bundle/bin/$p" "build-device/bin/$p"
done
cp build-device/lib/libhetero-cuda.so .device/bundle/lib/
# Every shared library the programs load, less glibc, the C++ runtime (the image's is
# newer) and CUDA's own (the image has them).
ldd build-device/bin/cuda_backend_test build-device/bin/hetero-bench \
  | awk '/=> \//{print $3}' | sort -u \
  | grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libcublas[^/]*)\.so' \
  | while read -r lib; do cp -L "$lib" .device/bundle/lib/; done
xz -T2 -6 .device/bundle/lib/libdnnl.so.*
mv .device/bundle/lib/libdnnl.so.*.xz .device/model/
sha256sum "$model" | awk '{print $1}' >.device/bundle/model.sha256
split -b 44M -d "$model" .device/model/part-
du -sh .device/bundle .device/model/*
