#!/usr/bin/env bash
# Runs every libFuzzer target for SECONDS each (default 60), starting from the committed
# seed corpus and keeping new inputs in a scratch corpus (git-ignored). Build first:
#   cmake --preset fuzz && cmake --build --preset fuzz
# Exits non-zero if a target finds a crash, leak, timeout or sanitizer error; the
# reproducer is left in build-fuzz/findings/.
set -euo pipefail
seconds="${1:-60}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$repo_root/build-fuzz/bin"
findings="$repo_root/build-fuzz/findings"
mkdir -p "$findings"
# Every target in tests/fuzz must have been built (the fuzz build preset lists them).
for source in "$repo_root"/tests/fuzz/*_fuzzer.cc; do
  name="$(basename "$source" .cc)"
  if [ ! -x "$bin/$name" ]; then
    echo "fuzz: $bin/$name is missing: add $name to the fuzz build preset's targets (CMakePresets.json)" >&2
    exit 1
  fi
done
status=0
for fuzzer in "$bin"/*_fuzzer; do
  name="$(basename "$fuzzer" _fuzzer)"
  seeds="$repo_root/tests/fuzz/corpus/$name"
  work="$repo_root/build-fuzz/corpus/$name"
  mkdir -p "$work"
  echo "fuzz: $name for ${seconds}s"
  if ! "$fuzzer" "$work" "$seeds" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
       -max_len=65536 -print_final_stats=1 -artifact_prefix="$findings/$name-" 2>"$findings/$name.log"; then
    echo "fuzz: $name FAILED; see $findings/$name.log"; tail -30 "$findings/$name.log"
    status=1
  else
    grep -E 'stat::number_of_executed_units|stat::peak_rss_mb' "$findings/$name.log" | sed "s/^/fuzz: $name: /"
  fi
done
exit $status
