#!/usr/bin/env bash
# The CUDA backend's checks for one short GPU window (about 15 minutes of device time, this script
# about 9): which cuDNN clocklm loaded (`clocklm info`), the op tests (the attention ones per CUDA
# attention implementation) and the CPU-parity tests on the GPU, the bf16 (and fp32) cuBLASLt matmul
# peak at 8192^3, training steps of baseline-50m and d12 at seq 2048 beside the compiled PyTorch peer
# (bench/torch_compiled_peer.py: torch.compile, SDPA, batched Muon) with tokens/s and MFU of both
# over both peaks, two minutes of training each of clocklm and the peer on the bundle's prepared
# dataset with val bpb side by side (bench/gpu_compare.py), the first load of clocklm's HF export by
# transformers (bench/hf_check.py), then the attention TFLOP/s of each implementation, Newton-Schulz
# (one matrix, and Muon's matrices of a baseline-50m step stacked by shape and one at a time) and a
# per-op profile. Every step is timed and its exit status recorded; a failed step is reported
# and the script goes on. Everything goes to one results file, written to paste into bench/RESULTS.md.
#
# The test step cannot pass empty: it fails unless a CUDA device was found and every CUDA instance
# of the op tests (one per op test per device, three per attention op test per device: fp32,
# gemm and cudnn, counted from the binary's own list), auto's check, the cuDNN plan check and
# every CUDA parity test ran and passed; skipped counts as not passed.
#
# usage: bench/gpu_check.sh --bundle DIR|FILE.tar.gz   (the output of scripts/gpu-bundle.sh: no build)
#        bench/gpu_check.sh --binaries DIR              (a build folder holding clocklm and clocklm_tests)
#        bench/gpu_check.sh                             (builds with CUDA into build-gpu first)
# env:   OUT (results folder, default ./gpu-results), JOBS (build jobs, default nproc), CUDA_ARCH
#        (default: the GPU's own), BUDGET (seconds after which no step starts, default 540),
#        BUILD_DIR (default build-gpu), BATCH (rows of 2048 in the speed steps, default 16),
#        DATA (prepared dataset of the side-by-side run, default the bundle's data/), SIDE_SECONDS
#        (default 120), SIDE_CONFIG (default d12), SIDE_MICRO (rows of 1024 per micro-batch, default
#        32), SIDE_BATCH_TOKENS (tokens per step, default 262144), SIDE_VAL_TOKENS (default 262144),
#        PYTHON (a python3 with torch, default the first of python3 and /usr/bin/python3 that has it)
set -u

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$PWD/gpu-results}"
mkdir -p "$OUT"
RES="$OUT/gpu_check.txt"
LOGS="$OUT/logs"
mkdir -p "$LOGS"
JOBS="${JOBS:-$(nproc)}"
BUILD="${BUILD_DIR:-$ROOT/build-gpu}"
BIN="$BUILD/clocklm"
export PATH="/usr/local/cuda/bin:$PATH"
: > "$RES"
T_START=$(date +%s)

say() { echo "$*" | tee -a "$RES"; }
# The whole script stops starting steps once BUDGET seconds (default 540) have passed, and each
# step's own limit is cut to what is left, so it ends within about BUDGET + 15 s whatever hangs.
BUDGET="${BUDGET:-540}"
DEADLINE=$(( T_START + BUDGET ))
# step NAME LIMIT_SECONDS COMMAND...: runs COMMAND under a time limit, output in logs/NAME.log;
# records the status and duration; never stops the script.
FAILED=()
step() {
  local name="$1" limit="$2"
  shift 2
  local t0=$(date +%s) rc
  local left=$(( DEADLINE - t0 ))
  if [ "$left" -lt 15 ]; then
    say "[SKIP] $name: the ${BUDGET}s budget is spent"
    FAILED+=("$name")
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit="$left"
  timeout --kill-after=10 "$limit" "$@" > "$LOGS/$name.log" 2>&1
  rc=$?
  local dt=$(( $(date +%s) - t0 ))
  if [ "$rc" -eq 0 ]; then
    say "[ok]   $name (${dt}s)"
  else
    [ "$rc" -eq 124 ] && say "[FAIL] $name: timed out after ${limit}s" || say "[FAIL] $name: exit $rc (${dt}s)"
    tail -3 "$LOGS/$name.log" | sed 's/^/         /' >> "$RES"
    FAILED+=("$name")
  fi
  return "$rc"
}

say "clocklm GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
if command -v nvidia-smi > /dev/null; then
  say "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader | head -1)"
  CAP="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')"
else
  say "GPU: nvidia-smi not found"
  CAP=""
fi
say "nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo 'not found')"
say "host: $(uname -n), $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
ARCH="${CUDA_ARCH:-${CAP:-80;90}}"

# ---- (a) binaries: a bundle, a build folder, or a build here -----------------------------------
BUNDLE="" BINDIR=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE="$2"; shift 2 ;;
    --binaries) BINDIR="$2"; shift 2 ;;
    *) say "gpu_check: unknown argument '$1'"; exit 2 ;;
  esac
done
if [ -n "$BUNDLE" ]; then
  if [ -f "$BUNDLE" ]; then
    mkdir -p "$OUT/unpacked"
    tar -xzf "$BUNDLE" -C "$OUT/unpacked" || { say "bundle: cannot unpack $BUNDLE (a .tar.gz)"; exit 1; }
    BUNDLE="$OUT/unpacked/clocklm-bundle"
  fi
  BINDIR="$BUNDLE/bin"
  say "bundle: $BUNDLE"
  sed 's/^/  /' "$BUNDLE/BUNDLE.txt" >> "$RES" 2>/dev/null
elif [ -z "$BINDIR" ]; then
  step configure 60 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCLOCKLM_CUDA=ON \
    "-DCMAKE_CUDA_ARCHITECTURES=$ARCH" -DCLOCKLM_CPU_VARIANTS=generic
  step build 240 cmake --build "$BUILD" -j "$JOBS" --target clocklm clocklm_tests
  BINDIR="$BUILD"
fi
BIN="$BINDIR/clocklm"
TESTS="$BINDIR/clocklm_tests"
# The tests that run clocklm itself run this one, not the path it was built at on another machine.
export CLOCKLM_BINARY="$BIN"
if [ ! -x "$BIN" ] || [ ! -x "$TESTS" ]; then
  say "no binaries in $BINDIR: the remaining steps cannot run"
  tail -30 "$LOGS/build.log" >> "$RES" 2>/dev/null
  exit 1
fi
"$BIN" info > "$LOGS/info.log" 2>&1
say "clocklm info: exit $?"
sed 's/^/  /' "$LOGS/info.log" >> "$RES"
say "cuDNN: $(grep -i -m1 'cudnn' "$LOGS/info.log" || echo "clocklm info has no cudnn line")"
NGPU=$(grep -c '^cuda device [0-9]' "$LOGS/info.log")

# ---- (b) tests ------------------------------------------------------------------------------------
# The op tests are instantiated once per backend when the binary starts, so their CUDA instances
# exist only where a device is; the CPU instances, listed anywhere, give the count to expect.
# The attention op tests run once per CUDA attention implementation (cuda_N_fp32, cuda_N_gemm,
# cuda_N_cudnn),
# one more test checks auto's choice on each device, and one that the shapes cuDNN should serve
# ran on cuDNN (not on its gemm fallback).
OPS=$("$TESTS" --gtest_list_tests --gtest_filter='Backends/BackendOps.*' | grep -c '^  .*/cpu ')
ATTN=$("$TESTS" --gtest_list_tests --gtest_filter='Backends/BackendAttention.*' | grep -c '^  .*/cpu ')
PARITY=$("$TESTS" --gtest_list_tests --gtest_filter='CudaParity.*' | grep -c '^  ')
EXPECTED=$(( OPS * NGPU + ATTN * 3 * NGPU + PARITY + 3 ))
# CLOCKLM_CUDA_SYNC=1: each op waits for itself, so a kernel fault names the op that caused it.
step test_binary 300 env CLOCKLM_CUDA_SYNC=1 "$TESTS" \
  --gtest_filter='Backends/BackendOps.*/cuda_*:Backends/BackendAttention.*/cuda_*:BackendAttentionAuto.*:BackendAttentionCudnn.*:CudaParity.*:BackendOpsDevices.*'
PASSED=$(grep -c '^\[       OK \]' "$LOGS/test_binary.log")
PASSED_CUDA=$(grep -c '^\[       OK \] Backends/BackendOps\..*/cuda_' "$LOGS/test_binary.log")
PASSED_FP32=$(grep -c '^\[       OK \] Backends/BackendAttention\..*/cuda_[0-9]*_fp32 ' "$LOGS/test_binary.log")
PASSED_GEMM=$(grep -c '^\[       OK \] Backends/BackendAttention\..*/cuda_[0-9]*_gemm ' "$LOGS/test_binary.log")
PASSED_CUDNN=$(grep -c '^\[       OK \] Backends/BackendAttention\..*/cuda_[0-9]*_cudnn ' "$LOGS/test_binary.log")
SKIPPED=$(grep -c '^\[  SKIPPED \] [A-Za-z].* (' "$LOGS/test_binary.log")
NFAILED=$(grep -c '^\[  FAILED  \] [A-Za-z].* (' "$LOGS/test_binary.log")
say "tests: $PASSED of $EXPECTED expected passed ($PASSED_CUDA CUDA op instances = $OPS op tests x $NGPU devices, attention $PASSED_FP32 fp32 + $PASSED_GEMM gemm + $PASSED_CUDNN cudnn of $ATTN x $NGPU each, $PARITY parity tests, 1 device check, 1 auto check, 1 cudnn plan check); $SKIPPED skipped, $NFAILED failed"
grep -E '^\[  (FAILED|SKIPPED) *\] [A-Za-z].* \(' "$LOGS/test_binary.log" | head -20 | sed 's/^/  /' >> "$RES"
if [ "$NGPU" -eq 0 ]; then
  say "[FAIL] tests: no CUDA device was found ($(grep -m1 '^cuda devices' "$LOGS/info.log" || echo 'clocklm info failed')), so no CUDA test ran"
  FAILED+=("tests_no_gpu")
elif [ "$PASSED" -lt "$EXPECTED" ] || [ "$SKIPPED" -gt 0 ] || [ "$NFAILED" -gt 0 ] || [ "$OPS" -eq 0 ]; then
  say "[FAIL] tests: fewer CUDA tests passed than expected"
  FAILED+=("tests_count")
fi

# ---- (c) matmul peak ----------------------------------------------------------------------------
PEAK=""
if step gemm_bf16 40 "$BIN" bench gemm --device cuda --m 8192 --n 8192 --k 8192 --precision bf16 --reps 20 --json; then
  PEAK="$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["gflops"])' \
    "$LOGS/gemm_bf16.log" 2>/dev/null)"
  say "bf16 cuBLASLt 8192^3: ${PEAK:-?} GFLOP/s"
fi
step gemm_fp32 40 "$BIN" bench gemm --device cuda --m 8192 --n 8192 --k 8192 --precision fp32 --reps 5 --json &&
  say "fp32 cuBLASLt 8192^3: $(tail -1 "$LOGS/gemm_fp32.log")"
# ---- (d) training steps: clocklm and the compiled PyTorch peer --------------------------------------
# The same config, row length and batch for both; BATCH rows of 2048 per step (16 by default: the
# batch that fills an H100 for these configs without going past its memory). MFU is model FLOP/s
# (the FLOPs per token clocklm counts) over clocklm's measured cuBLASLt bf16 peak, over the peak
# the peer measures with torch.matmul, and over 989 TFLOP/s (H100 SXM dense bf16).
BATCH="${BATCH:-16}"
CEIL=()
[ -n "$PEAK" ] && CEIL=(--ceiling "$PEAK")
# The first python that imports torch (PYTHON, python3, /usr/bin/python3), else python3.
PY=python3
for c in "${PYTHON:-}" python3 /usr/bin/python3; do
  if [ -n "$c" ] && "$c" -c "import torch" > /dev/null 2>&1; then PY="$c"; break; fi
done
# compare MODE ARGS...: gpu_compare.py's lines (bench/gpu_compare.py), or why there are none.
compare() {
  if command -v "$PY" > /dev/null; then "$PY" "$ROOT/bench/gpu_compare.py" "$@"
  else echo "  no python3 here to read the results"; return 1; fi
}
TORCH_CUDA=0
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" > /dev/null 2>&1 && TORCH_CUDA=1
# Before any GPU minute goes to the peer: the peer runs at all here (two eager steps of a one-layer
# model on the CPU; its first line lists what this torch lacks), or says why not.
if "$PY" -c "import torch" > /dev/null 2>&1; then
  step peer_smoke_cpu 120 "$PY" "$ROOT/bench/torch_compiled_peer.py" --config d4 --set model.n_layer=1 \
    --set model.d_model=64 --set model.n_head=1 --set model.n_kv_head=1 --set model.vocab_size=512 \
    --clocklm "$BIN" --device cpu --precision fp32 --no-compile --batch 2 --seq 64 --steps 2 --warmup 1 &&
    say "  peer smoke (cpu): $(grep -m1 'unavailable here' "$LOGS/peer_smoke_cpu.log" | sed 's/^compiled_peer: //')"
else
  say "PyTorch peer: python3 cannot import torch here: the peer steps are skipped"
fi
for cfg in baseline-50m d12; do
  step "train_$cfg" 90 "$BIN" bench train --device cuda --config "$cfg" --seq 2048 --batch "$BATCH" --steps 5 \
    --warmup 2 "${CEIL[@]}" --json
  if [ "$TORCH_CUDA" = 1 ]; then
    step "peer_$cfg" 240 "$PY" "$ROOT/bench/torch_compiled_peer.py" --device cuda --config "$cfg" --clocklm "$BIN" \
      --seq 2048 --batch "$BATCH" --steps 10 --warmup 3 --set model.vocab_size=32768 "${CEIL[@]}"
  fi
  compare speed "$cfg" "$LOGS/train_$cfg.log" "$LOGS/peer_$cfg.log" >> "$RES" 2>&1
done
[ "$TORCH_CUDA" = 1 ] || say "compiled PyTorch peer on the GPU: skipped (python3 cannot import torch with CUDA here)"

# ---- (e) two minutes of training each on the same data, val bpb side by side ----------------------
# The bundle's prepared dataset (scripts/gpu-bundle.sh; DATA= another folder): clocklm and the peer
# read the same token files, train SIDE_SECONDS each with the same config and batch, and score the
# same val targets with the same byte counts.
SIDE_SECONDS="${SIDE_SECONDS:-120}"
SIDE_CONFIG="${SIDE_CONFIG:-d12}"
SIDE_SETS=(--set train.micro_batch="${SIDE_MICRO:-32}" --set train.batch_tokens="${SIDE_BATCH_TOKENS:-262144}"
           --set model.seq_len=1024 --set train.val_tokens="${SIDE_VAL_TOKENS:-262144}")
DATA="${DATA:-${BUNDLE:+$BUNDLE/data}}"
SIDE_RUN="$OUT/side_clocklm"
if [ -z "$DATA" ] || [ ! -f "$DATA/manifest.json" ]; then
  say "[SKIP] side-by-side training: no prepared dataset (DATA=${DATA:-unset}; the bundle carries one in data/)"
  FAILED+=("side_by_side_data")
else
  say "side-by-side: $SIDE_CONFIG, ${SIDE_SECONDS}s each, ${SIDE_SETS[*]}, data $DATA ($(
    "$PY" -c 'import json,sys; m=json.load(open(sys.argv[1])); print(", ".join(k + " " + str(v["tokens"]) + " tokens" for k, v in m["splits"].items()))' "$DATA/manifest.json" 2>/dev/null))"
  rm -rf "$SIDE_RUN"
  step side_clocklm $(( SIDE_SECONDS + 120 )) "$BIN" train --device cuda --config "$SIDE_CONFIG" --data "$DATA" \
    --budget "$SIDE_SECONDS" "${SIDE_SETS[@]}" --set train.eval_every_seconds=100000 \
    --set train.checkpoint_every_seconds=100000 --quiet --out "$SIDE_RUN"
  if [ "$TORCH_CUDA" = 1 ]; then
    step side_peer $(( SIDE_SECONDS + 180 )) "$PY" "$ROOT/bench/torch_compiled_peer.py" --device cuda \
      --config "$SIDE_CONFIG" --clocklm "$BIN" --data "$DATA" --budget "$SIDE_SECONDS" "${SIDE_SETS[@]}" \
      --log-every 25 "${CEIL[@]}"
  fi
  compare side "$SIDE_RUN/summary.json" "$LOGS/side_peer.log" >> "$RES" 2>&1 ||
    FAILED+=("side_by_side_compare")
fi

# ---- (f) the first load of clocklm's HF export by transformers itself -------------------------------
if [ -f "$SIDE_RUN/summary.json" ]; then
  # Two rows of 32 random ids of the dataset's vocabulary; clocklm's logits from its CPU fp32 path.
  "$PY" -c 'import json, random, sys; v = json.load(open(sys.argv[1]))["tokenizer"]["vocab_size"]; r = random.Random(7)
[print(" ".join(str(r.randrange(v)) for _ in range(32))) for _ in range(2)]' "$DATA/manifest.json" > "$OUT/hf_ids.txt"
  step hf_export 60 "$BIN" export --checkpoint "$SIDE_RUN" --format hf --out "$OUT/hf" --force &&
    step hf_logits 60 "$BIN" eval logits --checkpoint "$SIDE_RUN" --input "$OUT/hf_ids.txt" --out "$OUT/hf_clocklm.bin" --device cpu &&
    step hf_check 120 "$PY" "$ROOT/bench/hf_check.py" "$OUT/hf" --input "$OUT/hf_ids.txt" --logits "$OUT/hf_clocklm.bin" &&
    say "  $(tail -1 "$LOGS/hf_check.log")"
else
  say "[SKIP] hf_check: no trained clocklm run to export"
fi

# ---- (g) kernels and the per-op profile: last, so that a short budget drops these first -----------
# Attention per implementation (CLOCKLM_CUDA_ATTENTION), causal, B8 H12 T2048: TFLOP/s of the
# attended pairs (forward 4 hd, backward 10 hd FLOPs per pair), and which one auto picked.
for impl in fp32 gemm cudnn auto; do
  for hd in 64 128; do
    step "attention_${impl}_hd$hd" 40 env CLOCKLM_CUDA_ATTENTION=$impl "$BIN" bench attention --device cuda \
      --batch 8 --heads 12 --seq 2048 --head-dim $hd --reps 5 --json &&
      python3 - "$LOGS/attention_${impl}_hd$hd.log" "$impl" "$hd" >> "$RES" 2>&1 << 'EOF'
import json, sys
j = json.loads(open(sys.argv[1]).read().splitlines()[-1])
attn = j["device"].split("attention ", 1)[-1].rstrip(")")
print(f"attention {sys.argv[2]:4} B8 H12 T2048 hd{sys.argv[3]:3}: fwd {j['forward_gflops']/1e3:.1f} TFLOP/s "
      f"({j['forward_ms_best']:.2f} ms), bwd {j['backward_gflops']/1e3:.1f} TFLOP/s ({j['backward_ms_best']:.2f} ms); "
      f"ran: {attn}")
EOF
  done
done
step ns 30 "$BIN" bench ns --device cuda --rows 768 --cols 3072 --precision bf16 --json &&
  say "newton-schulz 768x3072 bf16: $(tail -1 "$LOGS/ns.log")"
# Muon's Newton-Schulz of one baseline-50m step (every Muon matrix, the optimizer's batches), the
# matrices stacked by shape (CLOCKLM_CUDA_NS=batched, the default) and one at a time (loop); the
# target is <= 2 ms per step batched.
for mode in batched loop; do
  step "ns_baseline_$mode" 60 env CLOCKLM_CUDA_NS=$mode "$BIN" bench ns --device cuda --config baseline-50m \
    --reps 10 --json &&
    python3 - "$LOGS/ns_baseline_$mode.log" "$mode" >> "$RES" 2>&1 << 'EOF'
import json, sys
j = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print(f"newton-schulz baseline-50m {sys.argv[2]:7}: {j['ms_best']:.2f} ms per step (mean {j['ms_mean']:.2f}), "
      f"{j['matrices']} matrices, {j['shapes']} shapes, {j['calls']} calls, {j['matrix_ns_precision']}, "
      f"{j['gflops']/1e3:.1f} TFLOP/s")
EOF
done

# The step recorded as a CUDA graph (train.graph=auto, as train_baseline-50m above ran it) against
# every op queued one by one: what the recording gains, at the same shape.
step train_baseline-50m_graph_off 90 "$BIN" bench train --device cuda --config baseline-50m --seq 2048 \
  --batch "$BATCH" --steps 5 --warmup 2 "${CEIL[@]}" --set train.graph=off --json &&
  python3 - "$LOGS/train_baseline-50m.log" "$LOGS/train_baseline-50m_graph_off.log" >> "$RES" 2>&1 << 'EOF'
import json, sys
on, off = (json.loads(open(f).read().splitlines()[-1]) for f in sys.argv[1:3])
print(f"recorded step (baseline-50m): graph {on['graph']}: {on['step_seconds']*1e3:.1f} ms, "
      f"{on['tokens_per_second']:.0f} tok/s; op by op: {off['step_seconds']*1e3:.1f} ms, "
      f"{off['tokens_per_second']:.0f} tok/s; x{off['step_seconds']/on['step_seconds']:.3f}")
EOF

# Where the time goes, per op, for the smaller config (last: the first thing the budget drops).
step profile_baseline 60 "$BIN" bench train --device cuda --config baseline-50m --seq 2048 --batch "$BATCH" --steps 3 \
  --warmup 1 "${CEIL[@]}" --profile && { echo "  per-op profile (baseline-50m):" >> "$RES"; head -25 "$LOGS/profile_baseline.log" >> "$RES"; }

say "failed steps: ${FAILED[*]:-none}; total $(( $(date +%s) - T_START ))s; logs in $LOGS"
[ "${#FAILED[@]}" -eq 0 ]
