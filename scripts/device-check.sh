#!/usr/bin/env bash
# The GPU check, run on a machine with an NVIDIA GPU (under 8 minutes on an H200):
#   1. binaries: built here in Release for sm_90 (preset `device`), or, where this machine
#      cannot build hetero (no Debian libraries), the bundle scripts/device-bundle.sh made;
#   2. every GPU test (cuda_backend_test: against the CPU f32 path, KV handoff, batching);
#   3. hetero-bench --device gpu: pp512, tg128, batched decode at 1, 8 and 32 sequences,
#      and the same on this machine's CPU for the ratio;
#   4. hetero-bench --transfer: pinned and pageable host<->device bandwidth;
#   5. the peer, where the bundle carries it (scripts/device-bundle.sh, from a llama.cpp CUDA
#      build for sm_90): llama-bench pp512/tg128 and llama-batched-bench's decode at 1, 8
#      and 32 sequences on the same file, flash attention off and on (its best counts);
#   6. hetero-bench --agentic on the suite, every policy: joules per task from NVML, with
#      the reports' GPU share checked against NVML read over the whole run (`--agentic`
#      runs this step alone);
#   7. a summary table, summary.md, with the logs, under $OUT (or ./device-out).
# `--moe` runs, alone, the mixture-of-experts row under a GPU memory budget (issue 21): a
# random-weight granite-3.0-1b-a400m Q8_0 file written here (scripts/moe_bench_files.py,
# with the gguf package the bundle carries and this machine's numpy), hetero-bench on the
# GPU without a budget and with MOE_BUDGET_MIB (default 700), and the peer's llama-bench
# with the experts of at least as many layers kept on the CPU (--override-tensor); the
# table is moe-summary.md.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-./device-out}
mkdir -p "$out"
start=$(date +%s)
log() { echo "device-check: $* ($(( $(date +%s) - start )) s)" | tee -a "$out/run.log"; }
model=${HETERO_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}

quick=0
# --quick: what needs no default model: tiny-model GPU tests, Gemma 3 where its pieces were
# carried (its GPU test and bench), bandwidth.
[ "${1:-}" = "--quick" ] && quick=1
agentic_only=0
[ "${1:-}" = "--agentic" ] && agentic_only=1   # the agentic benchmark (step 6) alone, with the summary
moe_only=0
[ "${1:-}" = "--moe" ] && moe_only=1   # the mixture-of-experts row under a budget, alone (see above)
# Pieces carried by earlier calls are gathered in one place that outlives a call.
stage=/tmp/hetero-device
if [ -d .device ]; then
  mkdir -p "$stage" && cp -r .device/. "$stage/"
fi
if [ -d "$stage/bundle" ]; then
  bin=$stage/bundle/bin
  lib=$stage/bundle/lib
  for z in "$stage"/libs/libdnnl.so.*.xz; do
    [ -f "$z" ] && [ ! -f "$lib/$(basename "${z%.xz}")" ] &&
      python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$z" "$lib/$(basename "${z%.xz}")"
  done
  # A model from its pieces, checked against the bundle's checksum.
  assemble() {  # pieces-folder checksum-file destination
    [ -f "$3" ] || [ ! -d "$1" ] && return 0
    mkdir -p "$(dirname "$3")"
    cat "$1"/part-* >"$3"
    if ! echo "$(cat "$2")  $3" | sha256sum -c --quiet; then
      log "the pieces in $1 do not make $3 (checksum); pieces: $(ls "$1" | tr '\n' ' ')"
      rm -f "$3"; return 1
    fi
  }
  if [ "$quick" = 0 ] && [ "$moe_only" = 0 ]; then
    assemble "$stage/model" "$stage/bundle/model.sha256" "$model" || exit 1
  fi
  assemble "$stage/gemma3" "$stage/bundle/gemma3.sha256" models/gemma-3-270m-q4_k_m.gguf
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
  timeout 300 "$bin/cuda_backend_test" --gtest_filter='*Tiny*:*Unavailable*:*Gemma3*:*ExpertPlacement*' \
    >"$out/gpu-tests-quick.log" 2>&1
  log "quick GPU tests exit $?"
  if [ -f models/gemma-3-270m-q4_k_m.gguf ]; then
    timeout 180 "$bin/hetero-bench" -m models/gemma-3-270m-q4_k_m.gguf --device gpu -p 512 -n 128 -r 3 --batch 1,8 \
      >>"$out/run.log" 2>&1
    log "Gemma 3 GPU bench exit $?"
  fi
  timeout 60 "$bin/hetero-bench" --transfer >>"$out/run.log" 2>&1
  log "transfer exit $?"
  exit 0
fi
if [ "$moe_only" = 1 ]; then
  moe_dir=$stage/moe
  moe_file=$moe_dir/granite-3.0-1b-a400m.Q8_0.gguf
  mkdir -p "$moe_dir"
  if [ ! -s "$moe_file" ]; then
    PYTHONPATH="$stage/bundle/python:${PYTHONPATH:-}" timeout 300 python3 scripts/moe_bench_files.py "$moe_dir" \
      granite-3.0-1b-a400m >"$out/moe-files.log" 2>&1
    log "MoE file exit $? ($(du -h "$moe_file" 2>/dev/null | cut -f1))"
  fi
  budget=${MOE_BUDGET_MIB:-700}
  for b in 0 "$budget"; do
    extra=(); [ "$b" != 0 ] && extra=(--gpu-budget-mib "$b")
    timeout 240 "$bin/hetero-bench" -m "$moe_file" --device gpu -p 512 -n 128 -r 3 "${extra[@]}" --json \
      >"$out/moe-bench-$b.json" 2>>"$out/run.log"
    log "MoE GPU bench (budget $b MiB) exit $?"
  done
  # The layers whose experts hetero left (wholly or partly) on the CPU: it keeps whole layers
  # from the first; the peer keeps the partly held layer on the GPU (to its advantage).
  cpu_layers=$(python3 - "$out/moe-bench-$budget.json" <<'PY'
import json, math, re, sys
try:
    w = json.load(open(sys.argv[1]))["weights"]
except Exception:
    sys.exit(0)
m = re.search(r"(\d+) of (\d+) routed experts", w)
held, total = (int(m.group(1)), int(m.group(2))) if m else (0, 768) if "routed experts on the cpu" in w else (None, None)
if held is None:
    sys.exit(0)
per_layer = total // 24
print("|".join(str(l) for l in range(math.ceil(held / per_layer), 24)))
PY
)
  peer=${LLAMA_CUDA_DIR:-$stage/peer}
  if [ -n "$cpu_layers" ] && [ -x "$peer/bin/llama-bench" ]; then
    for z in "$peer"/lib/*.xz; do [ -f "$z" ] && xz -dkf "$z" 2>/dev/null; done
    LD_LIBRARY_PATH="$peer/lib:${LD_LIBRARY_PATH:-}" timeout 300 "$peer/bin/llama-bench" -m "$moe_file" -ngl 99 \
      -ot "blk\.($cpu_layers)\.ffn_(gate|up|down)_exps=CPU" -p 512 -n 128 -r 3 -o json \
      >"$out/moe-peer.json" 2>"$out/moe-peer.log"
    log "MoE peer (experts of layers $cpu_layers on the CPU) exit $?"
  else
    log "MoE peer skipped (layers '$cpu_layers', peer at $peer)"
  fi
  python3 - "$out" <<'PY' >"$out/moe-summary.md"
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception as e:
        return {"error": str(e)}
print("| run | pp512 tok/s | tg128 tok/s | device bytes | weights |\n|---|---|---|---|---|")
for name in sorted(f for f in os.listdir(out) if f.startswith("moe-bench-")):
    r = load(name)
    print(f"| hetero {name[10:-5]} MiB | {r.get('pp512', {}).get('tok_s_median')} | {r.get('tg128', {}).get('tok_s_median')} "
          f"| {r.get('weight_bytes')} | {r.get('weights', r.get('error'))} |")
peer = load("moe-peer.json")
for row in peer if isinstance(peer, list) else []:
    print(f"| llama.cpp -ot (n_prompt {row.get('n_prompt')}, n_gen {row.get('n_gen')}) | | {row.get('avg_ts')} | | |")
PY
  cat "$out/moe-summary.md" | tee -a "$out/run.log"
  exit 0
fi
[ -f "$model" ] || { log "no model at $model"; exit 1; }
tests_rc=0
if [ "$agentic_only" = 0 ]; then
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >"$out/run.log.gpu" 2>&1
cat "$out/run.log.gpu" >>"$out/run.log"; rm -f "$out/run.log.gpu"

timeout 400 "$bin/cuda_backend_test" --gtest_output="json:$out/gpu-tests.json" >"$out/gpu-tests.log" 2>&1
tests_rc=$?
log "GPU tests exit $tests_rc"
timeout 240 "$bin/hetero-bench" -m "$model" --device gpu -p 512 -n 128 -r 3 --batch 1,8,32 --json \
  >"$out/bench-gpu.json" 2>>"$out/run.log"
log "GPU bench exit $?"
gemma3=models/gemma-3-270m-q4_k_m.gguf
if [ -f "$gemma3" ]; then
  timeout 180 "$bin/hetero-bench" -m "$gemma3" --device gpu -p 512 -n 128 -r 3 --batch 1,8 --json \
    >"$out/bench-gemma3-gpu.json" 2>>"$out/run.log"
  log "Gemma 3 GPU bench exit $?"
fi
timeout 90 "$bin/hetero-bench" -m "$model" --transfer --json >"$out/transfer.json" 2>>"$out/run.log"
log "transfer exit $?"
timeout 120 "$bin/hetero-bench" -m "$model" --device cpu -p 512 -n 128 -r 1 --batch 1,8,32 --json \
  >"$out/bench-cpu.json" 2>>"$out/run.log"
log "CPU bench exit $?"
peer=${LLAMA_CUDA_DIR:-$stage/peer}
if [ -d "$peer/lib" ]; then
  for z in "$peer"/lib/*.xz; do
    [ -f "$z" ] && python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      "$z" "${z%.xz}" && rm -f "$z"
  done
  chmod +x "$peer"/bin/* 2>/dev/null
  # Same settings as hetero-bench: 512-token prompt, 128 decode steps, 3 repetitions; the
  # batched rows prefill 8 tokens per sequence and decode 128 steps, as hetero-bench's do.
  LD_LIBRARY_PATH="$peer/lib:${LD_LIBRARY_PATH:-}" timeout 240 "$peer/bin/llama-bench" -m "$model" -ngl 99 \
    -p 512 -n 128 -r 3 -fa 0,1 -o json >"$out/peer-bench.json" 2>"$out/peer-bench.log"
  log "peer llama-bench exit $?"
  for fa in 0 1; do
    LD_LIBRARY_PATH="$peer/lib:${LD_LIBRARY_PATH:-}" timeout 180 "$peer/bin/llama-batched-bench" -m "$model" -ngl 99 \
      -c 8192 -b 2048 -ub 512 -npp 8 -ntg 128 -npl 1,8,32 $([ $fa = 1 ] && echo -fa) --output-format jsonl \
      >"$out/peer-batched-fa$fa.log" 2>&1  # its JSON lines go to the log stream
    log "peer llama-batched-bench (flash attention $fa) exit $?"
  done
else
  log "no llama.cpp CUDA build at $peer: peer rows skipped"
fi
fi  # agentic_only
# The agentic suite under each policy; NVML answers here, so the GPU's joules are measured.
# (HETERO_SKIP_AGENTIC=1 leaves it out: for a run that benchmarks another file.)
if [ "${HETERO_SKIP_AGENTIC:-0}" != 1 ]; then
  timeout 300 "$bin/hetero-bench" -m "$model" --agentic tests/data/tool_suite.jsonl --policy all --limit 20 --json \
    >"$out/agentic.json" 2>"$out/agentic.log"
  log "agentic exit $?"
fi

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
gg = load("bench-gemma3-gpu.json")
if "backend" in gg:
    print("Gemma 3 270M Q4_K_M on the GPU: " + ", ".join(
        f"{k} {v['tok_s_median']:.1f} tok/s" for k, v in gg.items() if isinstance(v, dict) and "tok_s_median" in v))
    print(f"(weights: {gg.get('weights')})\n")
tr = load("transfer.json")
rows = tr if isinstance(tr, list) else tr.get("plain_loop", [])
print("| bytes | host memory | H2D GB/s | D2H GB/s |\n| --- | --- | --- | --- |")
for r in rows:
    print(f"| {r['bytes']} | {'pinned' if r['pinned'] else 'pageable'} plain loop | {r['h2d_gb_s']:.1f} | {r['d2h_gb_s']:.1f} |")
kv = tr.get("kv_swap") if isinstance(tr, dict) else None
if kv:
    print(f"| {kv['bytes']} | KV swap of {kv['tokens']} tokens ({'pinned' if kv['pinned'] else 'pageable'} pool) | "
          f"{kv['swap_in_gb_s']:.1f} | {kv['swap_out_gb_s']:.1f} |")
print()
peer_rows = {}
try:
    for r in json.load(open(os.path.join(out, "peer-bench.json"))):
        key = f"pp{r['n_prompt']}" if r["n_prompt"] > 0 else f"tg{r['n_gen']}"
        if r["avg_ts"] > peer_rows.get(key, (0, 0))[0]:
            peer_rows[key] = (r["avg_ts"], r.get("flash_attn"))
except Exception as e:
    print(f"(no llama-bench results: {e})\n")
for fa in (0, 1):
    try:
        for line in open(os.path.join(out, f"peer-batched-fa{fa}.log")):
            if line.startswith("{"):
                r = json.loads(line)
                key = f"tg{r['tg']}_b{r['pl']}"
                if r["speed_tg"] > peer_rows.get(key, (0, 0))[0]:
                    peer_rows[key] = (r["speed_tg"], fa)
    except Exception:
        pass
if peer_rows:
    print("| test | hetero GPU tok/s | llama.cpp CUDA tok/s (flash attn) | hetero / llama.cpp |\n| --- | --- | --- | --- |")
    for k, (v, fa) in sorted(peer_rows.items()):
        h = g.get(k, {}).get("tok_s_median") if isinstance(g.get(k), dict) else None
        print(f"| {k} | {'' if h is None else f'{h:.1f}'} | {v:.1f} ({fa}) | {'' if h is None else f'{h / v:.2f}x'} |")
    print()
ag = load("agentic.json")
if isinstance(ag, list):
    print("| policy | solved/tasks | PPT | p50 ms | p99 ms | J/task | tok/J | J/task by stage | GPU J: NVML / reports | energy |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in ag:
        st = ", ".join(f"{k} {v / max(r['tasks'], 1):.2f}" for k, v in sorted(r.get("stage_joules", {}).items()))
        gm = (f"{r['gpu_meter_joules']:.2f} / {r['gpu_attributed_joules']:.2f} "
              f"({100 * (r['gpu_attributed_joules'] / r['gpu_meter_joules'] - 1):+.2f}%; counter every "
              f"{r.get('gpu_meter_update_ms', 0):.0f} ms)" if r.get("gpu_meter_joules", 0) > 0 else "")
        print(f"| {r['policy']} | {r['solved']}/{r['tasks']} | {r['ppt']:.2f} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | "
              f"{r['joules_per_task']:.2f} | {r['tokens_per_joule']:.3f} | {st} | {gm} | "
              f"{'estimated' if r['estimated'] else 'measured'} |")
    print(f"\nenergy sources: {ag[-1]['energy_sources'] if ag else ''}\n")
else:
    print(f"(no agentic results: {ag.get('error')})\n")
PY
log "done"
cat "$out/summary.md"
exit $tests_rc
