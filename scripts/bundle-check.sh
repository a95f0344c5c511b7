#!/usr/bin/env bash
# Proves that the GPU bundle (scripts/gpu-bundle.sh) runs where none of clocklm's packages are
# installed: unpacks it into a bare Debian 12 root (debootstrap minbase) and there runs
# `clocklm info`, the bundle's CPU-side tests, a short CPU training run with evaluation, and the
# GPU check, which must refuse to pass (the root has no GPU) and say why. The CUDA toolkit's
# libraries are bind-mounted read-only from this machine at /usr/local/cuda, as the GPU machine
# has them; nothing else enters the root. Needs root (debootstrap, mount, chroot).
#
#   scripts/bundle-check.sh [BUNDLE.tar.gz] [--cache DIR] [--keep]
#
# Default bundle: build-bundle/clocklm-bundle.tar.gz. --cache DIR keeps the bootstrapped root as
# a tarball there and reuses it.
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE="build-bundle/clocklm-bundle.tar.gz" CACHE="" KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --cache) CACHE="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -*) echo "bundle-check: unknown argument '$1'" >&2; exit 2 ;;
    *) BUNDLE="$1"; shift ;;
  esac
done
if [ "$(id -u)" != 0 ]; then echo "bundle-check: needs root (debootstrap, mount, chroot)" >&2; exit 2; fi
[ -f "$BUNDLE" ] || { echo "bundle-check: no bundle at $BUNDLE (run scripts/gpu-bundle.sh)" >&2; exit 2; }
CUDA_DIR=$(readlink -f /usr/local/cuda)
[ -d "$CUDA_DIR/lib64" ] || { echo "bundle-check: no CUDA toolkit at /usr/local/cuda" >&2; exit 2; }
. scripts/lib/debian-root.sh

T0=$(date +%s)
trap 'debian_root_cleanup "$KEEP"' EXIT
stage() { echo "bundle-check: [$(( $(date +%s) - T0 ))s] $*"; }
fail() { echo "bundle-check: FAILED: $*" >&2; exit 1; }

stage "Debian $DEBIAN_SUITE (minbase) from ${CACHE:-$DEBIAN_MIRROR}"
debian_root_make "$CACHE"
debian_root_mount
mkdir -p "$ROOT/opt" "$ROOT$CUDA_DIR"
tar -xzf "$BUNDLE" -C "$ROOT/opt"
mount --bind -o ro "$CUDA_DIR" "$ROOT$CUDA_DIR"
ln -s "$CUDA_DIR" "$ROOT/usr/local/cuda"
B=/opt/clocklm-bundle
stage "bundle: $(head -2 "$ROOT$B/BUNDLE.txt" | tail -1)"

stage "clocklm info"
in_root "$B/bin/clocklm info" | tee "$ROOT/root/info.log" || fail "clocklm info"
grep -q '^cuda backend compiled: yes' "$ROOT/root/info.log" || fail "the bundle's binary has no CUDA backend"

# The CPU side of the tests that need neither the source tree nor the build folder (the CLI tests
# start the build's binary by its build path; the tokenizer-format tests read fixtures from the
# source tree).
CPU_TESTS='Backends/BackendOps.*/cpu:Backends/BackendAttention.*/cpu:AttentionBlocks.*:AttentionSelect.ModesAndTheAutoRule:BackendOpsDevices.*:CudaParity.*:GPT.*:Optim*:TrainStep*:Config.*:Tok*:Checkpoint*-Config.Cli*:TokFormats.*'
stage "CPU-side tests: $CPU_TESTS"
in_root "$B/bin/clocklm_tests --gtest_filter='$CPU_TESTS'" > "$ROOT/root/tests.log" 2>&1 || true
grep -E '^\[(==========|  PASSED  |  SKIPPED |  FAILED  )\] [0-9]' "$ROOT/root/tests.log"
if grep -E '^\[  FAILED  \] [A-Za-z]' "$ROOT/root/tests.log"; then fail "the CPU-side tests above"; fi
grep -q '^\[  PASSED  \] [1-9][0-9]* tests' "$ROOT/root/tests.log" || fail "no CPU-side test passed"

stage "a short CPU training run"
head -c 400000 /work/shared/data/tiny/tinyshakespeare.txt > "$ROOT/root/corpus.txt" 2>/dev/null ||
  for i in $(seq 3000); do echo "Line $i: the quick brown fox jumps over the lazy dog, again and again."; done > "$ROOT/root/corpus.txt"
in_root "$B/bin/clocklm prepare --input corpus.txt --txt-doc-bytes 2000 --vocab-size 512 --out data -q" || fail "prepare"
in_root "$B/bin/clocklm train --config d4 --data data --set train.max_steps=10 --set model.seq_len=256 --set train.batch_tokens=2048 --set train.val_tokens=16384 --quiet --out run" |
  tee "$ROOT/root/train.log" || fail "train"
grep -q '^val_bpb ' "$ROOT/root/train.log" || fail "train printed no val_bpb line"
in_root "$B/bin/clocklm eval bpb --checkpoint run --device cpu" | tee "$ROOT/root/eval.log" || fail "eval bpb"

stage "the GPU check must refuse to pass here"
if in_root "OUT=/root/gpu-results BUDGET=60 bash $B/bench/gpu_check.sh --bundle $B" > "$ROOT/root/gpu_check.out" 2>&1; then
  cat "$ROOT/root/gpu_check.out"; fail "gpu_check.sh passed without a GPU"
fi
grep -E '^(tests|\[FAIL\] tests)' "$ROOT/root/gpu-results/gpu_check.txt" || fail "gpu_check.sh did not say why"
grep -q '^\[FAIL\] tests: no CUDA device was found' "$ROOT/root/gpu-results/gpu_check.txt" ||
  fail "gpu_check.sh failed for another reason than the missing GPU"
stage "PASSED: the bundle ran in a bare Debian $DEBIAN_SUITE root"
