#!/usr/bin/env bash
# Mixture-of-experts benchmark files and the side-by-side run against llama.cpp:
#  1. random-weight GGUFs in the real shapes (scripts/moe_bench_files.py: Q8_0, with the
#     gguf package from PyPI), skipped where the file exists;
#  2. a Q4_K_M file of each, made by llama.cpp's llama-quantize --allow-requantize;
#  3. hetero-bench and llama-bench on every file, interleaved (scripts/peer_bench.py).
#
#   bash scripts/moe-bench.sh LLAMA_CPP_BIN_DIR [OUT_DIR] [shape ...]
#
# LLAMA_CPP_BIN_DIR holds llama-bench and llama-quantize, built from llama.cpp's own source
# (not part of this project). OUT_DIR defaults to models/moe-bench (git ignores models/).
# Shapes: granite-3.0-1b-a400m (1.4 GB in Q8_0), olmoe-1b-7b (7.4 GB); default both.
# Environment: ROUNDS (3), THREADS (2).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,13p' "$0"; exit 2; }
bin="$1"; out="${2:-models/moe-bench}"; shift $(( $# >= 2 ? 2 : 1 ))
shapes=("$@"); [ ${#shapes[@]} -gt 0 ] || shapes=(granite-3.0-1b-a400m olmoe-1b-7b)
for tool in llama-bench llama-quantize; do
  [ -x "$bin/$tool" ] || { echo "moe-bench: no $bin/$tool (build llama.cpp first)" >&2; exit 2; }
done
[ -x build/bin/hetero-bench ] || { echo "moe-bench: no build/bin/hetero-bench (make build first)" >&2; exit 2; }
python3 -c 'import gguf, numpy' 2>/dev/null || { echo "moe-bench: needs the gguf and numpy packages (python3 -m pip install gguf==0.19.0 numpy)" >&2; exit 2; }
mkdir -p "$out"
files=()
for shape in "${shapes[@]}"; do
  q8="$out/$shape.Q8_0.gguf"; q4="$out/$shape.Q4_K_M.gguf"
  [ -s "$q8" ] || python3 scripts/moe_bench_files.py "$out" "$shape"
  [ -s "$q4" ] || "$bin/llama-quantize" --allow-requantize "$q8" "$q4" Q4_K_M > "$out/$shape.quantize.log" 2>&1
  files+=("$q8" "$q4")
done
python3 scripts/peer_bench.py --llama-bench "$bin/llama-bench" --rounds "${ROUNDS:-3}" -t "${THREADS:-2}" "${files[@]}"
