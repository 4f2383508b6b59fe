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
# `watched SECONDS COMMAND...` runs COMMAND (its redirections are the caller's) and, when it
# runs past SECONDS, shows on the test's output what it was doing, then kills it and returns
# 124: each thread's state and CPU time (spinning or blocked) and, where gdb is installed,
# every thread's stack. A hang then explains itself in CI's log instead of a bare timeout.
exec 3>&1
# SECONDS is for a plain build; a sanitizer build's tests set HETERO_TEST_SLOWDOWN to scale it.
watched() {
  local limit=$(( $1 * ${HETERO_TEST_SLOWDOWN:-1} )); shift
  "$@" &
  local pid=$! waited=0
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$waited" -ge "$limit" ]; then
      {
        echo "HANG: still running after ${limit} s: $*"
        echo "load: $(cat /proc/loadavg)"
        local task
        for task in /proc/"$pid"/task/*; do
          # comm may hold spaces: the fields after its closing parenthesis.
          local fields
          fields=$(sed 's/^.*) //' "$task/stat" 2>/dev/null) || continue
          set -- $fields
          echo "thread ${task##*/}: state $1, user ${12} ticks, system ${13} ticks ($(cat "$task/comm" 2>/dev/null))"
        done
        sleep 2
        echo "two seconds later:"
        for task in /proc/"$pid"/task/*; do
          local fields
          fields=$(sed 's/^.*) //' "$task/stat" 2>/dev/null) || continue
          set -- $fields
          echo "thread ${task##*/}: state $1, user ${12} ticks, system ${13} ticks"
        done
        if command -v gdb >/dev/null; then
          timeout 60 gdb -p "$pid" -batch -nx -ex "set pagination off" -ex "thread apply all bt 25" 2>&1 |
            grep -E "^(Thread|#)" | head -n 300
        fi
      } >&3
      kill -9 "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      return 124
    fi
    sleep 1
    waited=$((waited + 1))
  done
  wait "$pid"
}
