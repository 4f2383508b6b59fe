#!/usr/bin/env bash
# hetero-agent end to end on the default model: the default question runs through the
# stages with the example tools, --suite --json reports well-formed scores in which every
# constrained call is valid, and bad input gives one "error: ..." line and exit status 1.
#   agent_cli_test.sh HETERO_AGENT TEMP_DIR
set -uo pipefail
agent="$1"
tmp="$2"
mkdir -p "$tmp"
source "$(dirname "$0")/cli_test_lib.sh"
require_default_model

watched 240 "$agent" -t 2 -n 96 >"$tmp/default.out" 2>"$tmp/default.err"
check "default question exits 0" test $? -eq 0
check "prints the question" grep -q "^question: What is 12.5 times 8, minus 3?" "$tmp/default.out"
check "prints an answer line" grep -q "^answer: " "$tmp/default.out"
check "timeline has understand on the cpu" grep -q "^understand cpu" "$tmp/default.out"
check "timeline has generate on the cpu" grep -q "^generate   cpu" "$tmp/default.out"
check "summary line" grep -q "^format generic, .* prompt tokens" "$tmp/default.out"

head -n 3 tests/data/tool_suite.jsonl >"$tmp/suite.jsonl"
watched 240 "$agent" -t 2 -n 64 --suite "$tmp/suite.jsonl" --compare --json >"$tmp/suite.json" 2>"$tmp/suite.err"
check "--suite exits 0" test $? -eq 0
check "--suite --json scores" python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
for mode in ("constrained", "unconstrained"):
    s = j[mode]
    for k in ("questions", "solved", "success_rate", "tool_calls", "valid_calls", "valid_call_rate",
              "generated_tokens", "tokens_per_solved_task", "constraint_share_of_generate"):
        assert k in s, (mode, k)
    assert s["questions"] == 3, s
c = j["constrained"]
assert c["valid_calls"] == c["tool_calls"], c  # constrained calls are valid by construction
assert len(j["questions"]) == 6
for q in j["questions"]:
    assert "error" not in q, q
    for call in q["calls"]:
        assert call["outcome"] in ("ok", "parse_error", "unknown_tool", "invalid_arguments", "handler_error", "timeout"), call
' "$tmp/suite.json"

"$agent" --suite "$tmp/missing.jsonl" >"$tmp/bad1.out" 2>"$tmp/bad1.err"
check "missing suite exits 1" test $? -eq 1
check "missing suite is named" grep -q "^error: .*missing.jsonl" "$tmp/bad1.err"
"$agent" --format yaml >"$tmp/bad2.out" 2>"$tmp/bad2.err"
check "unknown format exits 1" test $? -eq 1
check "unknown format is named" grep -q "^error: unknown format 'yaml'" "$tmp/bad2.err"
echo '{"question": "truncated"' >"$tmp/broken.jsonl"
"$agent" --suite "$tmp/broken.jsonl" >"$tmp/bad3.out" 2>"$tmp/bad3.err"
check "broken suite line exits 1" test $? -eq 1
check "broken suite line is shown" grep -q "^error: bad suite line" "$tmp/bad3.err"
echo '{"id": 7, "question": "no answer field", "check": "text"}' >"$tmp/incomplete.jsonl"
"$agent" --suite "$tmp/incomplete.jsonl" >"$tmp/bad4.out" 2>"$tmp/bad4.err"
check "incomplete suite line exits 1" test $? -eq 1
check "incomplete suite line is shown" grep -q "^error: bad suite line" "$tmp/bad4.err"
exit $fail
