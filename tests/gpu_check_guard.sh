#!/bin/sh
# bench/gpu_check.sh must not report success where no CUDA test could run: on a machine without a
# usable GPU it exits non-zero and its results file says that no CUDA device was found.
#   tests/gpu_check_guard.sh BUILD_DIR
set -u
build="$1"
root="$(cd "$(dirname "$0")/.." && pwd)"
if "$build/clocklm" info | grep -q '^cuda device [0-9]'; then
  echo "SKIP: this machine has a CUDA device (the guard is checked where there is none)"; exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
OUT="$out" BUDGET=60 bash "$root/bench/gpu_check.sh" --binaries "$build" > "$out/stdout" 2>&1
rc=$?
cat "$out/gpu_check.txt"
[ "$rc" -ne 0 ] || { echo "FAIL: gpu_check.sh exited 0 without a GPU"; exit 1; }
grep -q '^\[FAIL\] tests: no CUDA device was found' "$out/gpu_check.txt" ||
  { echo "FAIL: the results do not say that no CUDA device was found"; exit 1; }
grep -q '^tests: 0 of [1-9][0-9]* expected passed' "$out/gpu_check.txt" ||
  { echo "FAIL: the results do not give the expected CUDA test count"; exit 1; }
echo "PASS: gpu_check.sh refused to pass with no CUDA test run"
