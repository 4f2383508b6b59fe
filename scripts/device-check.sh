#!/usr/bin/env bash
# The GPU check, run on a machine with an NVIDIA GPU (under 8 minutes on an H200):
#   1. binaries: built here in Release for sm_90 (preset `device`), or, where this machine
#      cannot build hetero (no Debian libraries), the bundle scripts/device-bundle.sh made;
#   2. every GPU test (cuda_backend_test: against the CPU f32 path, KV handoff, batching);
#   3. hetero-bench --device gpu: pp512, tg128, batched decode at 1, 8 and 32 sequences,
#      and the same on this machine's CPU for the ratio;
#   4. hetero-bench --transfer: pinned and pageable host<->device bandwidth;
#   5. a summary table, summary.md, with the logs, under $OUT (or ./device-out).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-./device-out}
mkdir -p "$out"
start=$(date +%s)
log() { echo "device-check: $* ($(( $(date +%s) - start )) s)" | tee -a "$out/run.log"; }
model=${HETERO_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}

quick=0
[ "${1:-}" = "--quick" ] && quick=1   # tiny-model GPU tests and bandwidth only: no default model needed
# Pieces carried by earlier calls are gathered in one place that outlives a call.
stage=/tmp/hetero-device
if [ -d .device ]; then
  mkdir -p "$stage" && cp -r .device/. "$stage/"
fi
if [ -d "$stage/bundle" ]; then
  bin=$stage/bundle/bin
  lib=$stage/bundle/lib
  for z in "$stage"/model/libdnnl.so.*.xz; do
    [ -f "$z" ] && [ ! -f "$lib/$(basename "${z%.xz}")" ] &&
      python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$z" "$lib/$(basename "${z%.xz}")"
  done
  if [ ! -f "$model" ] && [ "$quick" = 0 ]; then
    mkdir -p "$(dirname "$model")"
    cat "$stage"/model/part-* >"$model"
    if ! echo "$(cat "$stage/bundle/model.sha256")  $model" | sha256sum -c --quiet; then
      log "the model's pieces do not make the model (checksum); pieces: $(ls "$stage/model" | tr '\n' ' ')"
      rm -f "$model"; exit 1
    fi
  fi
  cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null || true)
  export LD_LIBRARY_PATH="$lib:/usr/local/cuda/lib64:${cublas_dir}:${LD_LIBRARY_PATH:-}"
  export HETERO_CUDA_MODULE="$lib/libhetero-cuda.so"
  log "using the prebuilt bundle"
else
  cmake --preset device >"$out/build.log" 2>&1 &&
    cmake --build build-device --target hetero_cuda cuda_backend_test hetero-bench >>"$out/build.log" 2>&1 ||
    { log "build failed"; exit 1; }
  bin=build-device/bin
  log "built"
fi
if [ "$quick" = 1 ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >>"$out/run.log" 2>&1
  "$bin/cuda_backend_test" --gtest_filter='*Tiny*:*Unavailable*' >"$out/gpu-tests-quick.log" 2>&1
  log "quick GPU tests exit $?"
  timeout 60 "$bin/hetero-bench" --transfer >>"$out/run.log" 2>&1
  log "transfer exit $?"
  exit 0
fi
[ -f "$model" ] || { log "no model at $model"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >"$out/run.log.gpu" 2>&1
cat "$out/run.log.gpu" >>"$out/run.log"; rm -f "$out/run.log.gpu"

"$bin/cuda_backend_test" --gtest_output="json:$out/gpu-tests.json" >"$out/gpu-tests.log" 2>&1
tests_rc=$?
log "GPU tests exit $tests_rc"
timeout 240 "$bin/hetero-bench" -m "$model" --device gpu -p 512 -n 128 -r 3 --batch 1,8,32 --json \
  >"$out/bench-gpu.json" 2>>"$out/run.log"
log "GPU bench exit $?"
timeout 90 "$bin/hetero-bench" -m "$model" --transfer --json >"$out/transfer.json" 2>>"$out/run.log"
log "transfer exit $?"
timeout 120 "$bin/hetero-bench" -m "$model" --device cpu -p 512 -n 128 -r 1 --batch 1,8,32 --json \
  >"$out/bench-cpu.json" 2>>"$out/run.log"
log "CPU bench exit $?"

python3 - "$out" <<'PY' >"$out/summary.md"
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception as e:
        return {"error": str(e)}
print("# device-check summary\n")
t = load("gpu-tests.json")
if "testsuites" in t:
    print(f"GPU tests: {t['tests']} run, {t['failures']} failed, {t.get('disabled', 0)} disabled\n")
    for suite in t["testsuites"]:
        for case in suite["testsuite"]:
            status = "FAILED" if case.get("failures") else ("skipped" if case.get("result") == "SKIPPED" else "ok")
            print(f"- {suite['name']}.{case['name']}: {status}")
    print()
g, c = load("bench-gpu.json"), load("bench-cpu.json")
print("| test | GPU tok/s (median) | CPU tok/s |\n| --- | --- | --- |")
for k, v in g.items():
    if isinstance(v, dict) and "tok_s_median" in v:
        cv = c.get(k, {}).get("tok_s_median") if isinstance(c.get(k), dict) else None
        print(f"| {k} | {v['tok_s_median']:.1f} | {'' if cv is None else f'{cv:.1f}'} |")
print(f"\nGPU backend: {g.get('backend')}; weights: {g.get('weights')}; CPU: {c.get('backend')}\n")
tr = load("transfer.json")
rows = tr if isinstance(tr, list) else tr.get("plain_loop", [])
print("| bytes | host memory | H2D GB/s | D2H GB/s |\n| --- | --- | --- | --- |")
for r in rows:
    print(f"| {r['bytes']} | {'pinned' if r['pinned'] else 'pageable'} plain loop | {r['h2d_gb_s']:.1f} | {r['d2h_gb_s']:.1f} |")
kv = tr.get("kv_swap") if isinstance(tr, dict) else None
if kv:
    print(f"| {kv['bytes']} | KV swap of {kv['tokens']} tokens ({'pinned' if kv['pinned'] else 'pageable'} pool) | "
          f"{kv['swap_in_gb_s']:.1f} | {kv['swap_out_gb_s']:.1f} |")
PY
log "done"
cat "$out/summary.md"
exit $tests_rc
