# Shared by the *_cli_test.sh scripts (sourced): `check DESCRIPTION COMMAND...` records a
# failure in $fail instead of stopping, and `require_default_model` skips (exit 77, which
# CTest reports as skipped) when the default model has not been fetched.
fail=0
model="models/SmolLM2-135M-Instruct.Q4_1.gguf"
check() {
  local what="$1"; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}
require_default_model() {
  if [ ! -f "$model" ]; then
    echo "SKIP: default model not present at $model (run bash scripts/setup.sh --model)"
    exit 77
  fi
}
