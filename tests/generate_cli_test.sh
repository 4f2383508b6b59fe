#!/usr/bin/env bash
# hetero-generate and hetero-bench end to end on the default model: the chat answer, --json
# fields, seeded reproducibility, and one "error: ..." line with exit status 1 for bad input.
#   generate_cli_test.sh HETERO_GENERATE HETERO_BENCH TEMP_DIR
set -uo pipefail
gen="$1"
bench="$2"
tmp="$3"
mkdir -p "$tmp"
source "$(dirname "$0")/cli_test_lib.sh"
require_default_model

# f32: the exact mode (the int8 default, like llama.cpp, answers differently at a near-tie).
"$gen" -t 1 --chat --precision f32 -p "What is the capital of France?" -n 24 >"$tmp/chat.out" 2>"$tmp/chat.err"
check "--chat exits 0" test $? -eq 0
check "--chat answers Paris" grep -q "Paris" "$tmp/chat.out"
check "stats line on stderr" grep -q "tok/s decode" "$tmp/chat.err"

"$gen" -t 1 -p "Once upon a time" -n 12 --temp 0.8 --seed 3 --json >"$tmp/a.json"
"$gen" -t 1 -p "Once upon a time" -n 12 --temp 0.8 --seed 3 --json >"$tmp/b.json"
check "--json fields" python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
for k in ("tokens", "text", "prefill_tok_s", "decode_tok_s", "ttft_ms", "stop_reason", "prompt_tokens"):
    assert k in j, k
assert len(j["tokens"]) == 12 and j["stop_reason"] == "max_tokens", j
assert j["decode_tok_s"] > 0 and j["ttft_ms"] > 0
' "$tmp/a.json"
check "same seed, same tokens" python3 -c '
import json, sys
assert json.load(open(sys.argv[1]))["tokens"] == json.load(open(sys.argv[2]))["tokens"]
' "$tmp/a.json" "$tmp/b.json"

"$bench" -t 1 -p 16 -n 4 -r 1 --json >"$tmp/bench.json"
check "hetero-bench --json" python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["pp16"]["tok_s_median"] > 0 and j["tg4"]["tok_s_median"] > 0, j
' "$tmp/bench.json"

# At a depth (llama-bench's -d): the tests start from a sequence already holding 600
# tokens, deep enough for decode's whole-part attention items; their names say the depth.
"$bench" -t 2 -p 8 -n 4 -d 600 -r 1 --json >"$tmp/bench_depth.json"
check "hetero-bench -d" python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["depth"] == 600 and "pp8" not in j and "tg4" not in j, j
assert j["pp8_d600"]["tok_s_median"] > 0 and j["tg4_d600"]["tok_s_median"] > 0, j
assert j["tg4_d600"]["weight_gb_s_median"] > 0, j
' "$tmp/bench_depth.json"

expect_error() {
  local name="$1" substring="$2" tool="$3"; shift 3
  "$tool" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local rc=$?
  check "$name: exit status 1 (got $rc)" test "$rc" -eq 1
  check "$name: one 'error: ' line naming '$substring'" \
    bash -c "[ \$(wc -l <'$tmp/$name.err') -eq 1 ] && grep -q '^error: ' '$tmp/$name.err' && grep -qF -- \"$substring\" '$tmp/$name.err'"
}
expect_error no_prompt "no prompt given" "$gen"
expect_error bad_temp "temperature is -1" "$gen" -p x --temp -1
expect_error bad_number "'abc' is not a number" "$gen" -p x -n abc
expect_error system_without_chat "--system needs --chat" "$gen" -p x --system hi
expect_error bad_precision "unknown cpu_precision 'int3' (accepted: auto, int8, f32, bf16)" "$gen" -p x --precision int3
expect_error missing_model "not found" "$gen" -m /no/such.gguf -p x
expect_error bench_gpu "device 'gpu' is not available" "$bench" --device gpu
expect_error bench_option "unknown option '--bogus'" "$bench" --bogus
expect_error bench_depth "option -d needs a non-negative integer" "$bench" -d -5
expect_error bench_depth_mode "-d goes with the throughput benchmark alone" "$bench" --sessions 2 -d 8
expect_error bench_depth_context "passes the model's context of 8192 (lower -d)" "$bench" -t 1 -p 8 -n 4 -d 8190
expect_error bench_soak "--soak needs a duration of at least 1 second" "$bench" --soak 0

# The agentic benchmark: every policy on two suite questions, JSON rows, an SVG plot.
watched 240 "$bench" -t 2 -n 48 --agentic tests/data/tool_suite.jsonl --limit 2 --policy all --json --plot "$tmp/agentic.svg" \
  >"$tmp/agentic.json" 2>"$tmp/agentic.err"
check "--agentic exits 0" test $? -eq 0
check "--agentic rows for every policy" python3 -c '
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["policy"] for r in rows] == ["seed", "all-cpu", "all-gpu", "cost"], rows
for r in rows:
    for k in ("tasks", "solved", "ppt", "tokens", "p50_ms", "p99_ms", "joules_per_task", "tokens_per_joule", "estimated"):
        assert k in r, k
    assert r["tasks"] == 2 and r["errors"] == 0 and r["tokens"] > 0
    assert r["joules_per_task"] > 0 and r["p50_ms"] > 0 and r["p99_ms"] >= r["p50_ms"]
    assert abs(r["ppt"] - 1000.0 * r["solved"] / r["tokens"]) < 1e-9
    assert r["estimated"]  # no energy counters on the test machines
' "$tmp/agentic.json"
check "--plot writes an SVG with a point per policy" python3 -c '
import sys, xml.dom.minidom
doc = xml.dom.minidom.parse(sys.argv[1])
assert len(doc.getElementsByTagName("circle")) == 4
' "$tmp/agentic.svg"
# Routing on against off: one suite question and one request to refuse, seed policy.
watched 240 "$bench" -t 2 -n 32 --agentic tests/data/tool_suite.jsonl --limit 1 --policy seed --router tests/data/intents.jsonl \
  --json >"$tmp/routed.json" 2>"$tmp/routed.err"
check "--agentic --router exits 0" test $? -eq 0
check "--router adds a routed row, refusals without Generate" python3 -c '
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["policy"] for r in rows] == ["seed", "seed+router"], rows
off, on = rows
assert off["tasks"] == on["tasks"] == 2 and off["errors"] == on["errors"] == 0
assert off["without_generate"] == 0, off
assert on["without_generate"] == 1, on  # the unsafe request, refused before Generate
' "$tmp/routed.json"
expect_error agentic_router "cannot read the labelled set" "$bench" --agentic tests/data/tool_suite.jsonl --limit 1 --router /no/such.jsonl
expect_error route_missing "cannot read the labelled set" "$bench" --route /no/such.jsonl --layers auto
expect_error agentic_missing "cannot read the suite" "$bench" --agentic /no/such/suite.jsonl
expect_error agentic_policy "unknown scheduler" "$bench" --agentic tests/data/tool_suite.jsonl --limit 1 --policy bogus
exit $fail
