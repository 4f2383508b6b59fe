#!/usr/bin/env bash
# hetero-tokenize end to end on the default model: ids as JSON, --no-special, --no-bos,
# stdin, --decode, and one "error: ..." line with exit status 1 for bad input.
#   tokenize_cli_test.sh HETERO_TOKENIZE TEMP_DIR
set -uo pipefail
tool="$1"
tmp="$2"
mkdir -p "$tmp"
source "$(dirname "$0")/cli_test_lib.sh"
require_default_model

out=$("$tool" "Hello world! 12345 <|im_start|>user")
check "ids of a text (specials parsed)" test "$out" = "[19556, 905, 17, 216, 33, 34, 35, 36, 37, 216, 1, 4093]"
out=$("$tool" --no-special "<|im_start|>")
check "--no-special keeps special text as text" test "$(echo "$out" | tr -cd ',' | wc -c)" -gt 0
out=$("$tool" -m "$model" --no-bos "Hello")
check "-m and --no-bos" test "$out" = "[19556]"
out=$(printf 'Hello' | "$tool" -)
check "stdin with -" test "$out" = "[19556]"
out=$("$tool" --decode 19556 905 17)
check "--decode" test "$out" = "Hello world!"
out=$("$tool" "")
check "empty text gives []" test "$out" = "[]"
check "output parses as JSON" python3 -c 'import json,sys; assert json.loads(sys.argv[1]) == []' "$out"

expect_error() {
  local name="$1" substring="$2"; shift 2
  "$tool" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local rc=$?
  check "$name: exit status 1 (got $rc)" test "$rc" -eq 1
  check "$name: one 'error: ' line naming '$substring'" \
    bash -c "[ \$(wc -l <'$tmp/$name.err') -eq 1 ] && grep -q '^error: ' '$tmp/$name.err' && grep -qF -- \"$substring\" '$tmp/$name.err'"
}
expect_error bad_id "token id 99999999 is outside the vocabulary" --decode 99999999
expect_error not_a_number "'abc' is not a token id" --decode abc
expect_error no_text "no text given" 
expect_error bad_option "unknown option '--bogus'" --bogus x
expect_error missing_model "not found" -m /no/such/model.gguf x
printf 'not gguf' >"$tmp/bad.gguf"
expect_error bad_model "bad magic" -m "$tmp/bad.gguf" x
exit $fail
