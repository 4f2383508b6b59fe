#!/usr/bin/env bash
# hetero-inspect end to end: the default model's facts in text and JSON, and one
# "error: ..." line with exit status 1 for bad input.
#   inspect_cli_test.sh HETERO_INSPECT TEMP_DIR
set -uo pipefail
inspect="$1"
tmp="$2"
mkdir -p "$tmp"
source "$(dirname "$0")/cli_test_lib.sh"

# Bad input: exit 1, exactly one line on stderr, starting with "error: ", nothing on stdout.
expect_error() {  # expect_error NAME EXPECTED_SUBSTRING ARGS...
  local name="$1" substring="$2"; shift 2
  "$inspect" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local rc=$?
  check "$name: exit status 1 (got $rc)" test "$rc" -eq 1
  check "$name: one stderr line" test "$(wc -l <"$tmp/$name.err")" -eq 1
  check "$name: stderr starts with 'error: '" grep -q '^error: ' "$tmp/$name.err"
  check "$name: stderr names the problem ($substring)" grep -qF -- "$substring" "$tmp/$name.err"
  check "$name: nothing on stdout" test ! -s "$tmp/$name.out"
}

printf 'GGUF\003\000\000\000' >"$tmp/truncated.gguf"
printf 'not a model at all' >"$tmp/text.gguf"
expect_error truncated "file truncated" "$tmp/truncated.gguf"
expect_error bad_magic 'bad magic "not "' "$tmp/text.gguf"
expect_error missing "not found" "$tmp/does-not-exist.gguf"
expect_error unknown_option "unknown option '--frobnicate'" --frobnicate
expect_error two_paths "more than one model path" a.gguf b.gguf

model="models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -f "$model" ]; then
  "$inspect" "$model" >"$tmp/default.txt" 2>"$tmp/default.err"
  check "default model: exit 0" test $? -eq 0
  for pattern in '^architecture: +llama$' '^layers: +30$' '^hidden: +576$' '^heads: +9$' \
                 '^kv heads: +3$' '^vocab: +49152$' '^embeddings: +tied' '^tensors: +272$' \
                 '^parameters: +134515008 ' '^file size: +98362432 bytes' 'Q4_1 +210 tensors' \
                 'Q8_0 +1 tensors' 'F32 +61 tensors' '^cpu: ' '^cuda'; do
    check "default model text has /$pattern/" grep -Eq "$pattern" "$tmp/default.txt"
  done
  "$inspect" --json "$model" >"$tmp/default.json"
  check "--json exit 0" test $? -eq 0
  check "--json parses and matches" python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
c = j["config"]
assert j["architecture"] == "llama", j["architecture"]
assert (c["n_layers"], c["n_embd"], c["n_heads"], c["n_kv_heads"], c["n_vocab"]) == (30, 576, 9, 3, 49152), c
assert c["tied_embeddings"] is True
assert j["tensor_count"] == 272 and j["types"]["Q4_1"]["tensors"] == 210
assert isinstance(j["devices"]["cuda"]["available"], bool)
' "$tmp/default.json"
  HETERO_MODEL="$model" "$inspect" >"$tmp/env.txt" 2>&1
  check "HETERO_MODEL is used when no path is given" grep -q "^model: *$model" "$tmp/env.txt"
else
  echo "SKIP: default model not present at $model (run bash scripts/setup.sh --model)"
  [ $fail -eq 0 ] && exit 77
fi
exit $fail
