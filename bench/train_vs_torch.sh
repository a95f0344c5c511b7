#!/usr/bin/env bash
# Training-step speed of clocklm against a PyTorch peer of the same model (bench/torch_peer.py) on
# this machine's CPU, both on random tokens with the same thread count:
#   byte-11m at 16x256 and baseline-50m at 4x256, each with the preset's Muon+AdamW and with all-AdamW
#   (optim.matrix.kind=adamw); clocklm `bench train` with model.matmul_precision auto / bf16 / fp32,
#   PyTorch in fp32 and in bf16 autocast. In the Muon runs the Newton-Schulz matmuls follow the mode
#   on both sides (clocklm: optim.matrix.ns_precision = the same value; peer: bf16 iff autocast).
#   Writes a markdown table (tokens/s), the machine (CPU model, SIMD flags, BLAS, clocklm roofline)
#   and the raw JSON lines to --out.
#
# usage: bench/train_vs_torch.sh [--out FILE (default bench/results/train_vs_torch.md)]
#                                [--shapes "CONFIG B T;..." (default "byte-11m 16 256;baseline-50m 4 256")]
#                                [--optimizers "muon adamw" (default both)] [--vocab V (sets model.vocab_size)]
#                                [--steps N (default 5)] [--warmup N (default 2)] [--quick]
#                                [--threads N (default nproc)] [--refresh-roofline] [--system-blas]
#                                [--clocklm BIN] [--python PY (default /usr/bin/python3)]
# --quick: 2 timed steps after 1 warm-up step (a smoke run; the numbers are noisy).
# The small CPU presets: --shapes "speedrun-10m 16 256;speedrun-30m 4 1024" --optimizers muon
# --vocab 8192 (the peer has no value embeddings: their lookup and mix are not in its step).
# Needs Debian's python3-torch (installed with apt if missing, as root or via sudo). Debian's torch
# takes its fp32 GEMM from the system libblas.so.3; the peer runs with the pthread OpenBLAS
# (libopenblas0-pthread, installed if missing) put first by LD_LIBRARY_PATH, since the reference BLAS
# would measure netlib (~5 GFLOP/s) and the OpenMP OpenBLAS stalls on small GEMMs inside torch's
# OpenMP pool (GOMP_SPINCOUNT=10000 keeps the two thread pools from starving each other).
# --system-blas: leave libblas.so.3, GOMP_SPINCOUNT and the allocator (glibc) as the system has them.
# If this clocklm build does not know model.matmul_precision, the clocklm runs fall back to
# `bench train --fp32` for fp32 and no flag (its default, bf16) for bf16, and "auto" is reported as
# unavailable; the ratio column then uses the default (bf16) run.
# Timings share the machine with whatever else runs: the 1-minute load average is recorded per run.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$ROOT/bench/results/train_vs_torch.md"
STEPS=5
WARMUP=2
QUICK=0
THREADS="$(nproc)"
CLOCKLM="$ROOT/build/clocklm"
PY=/usr/bin/python3
REFRESH=0
SYSTEM_BLAS=0
STEPS_SET=0
WARMUP_SET=0
SHAPES="byte-11m 16 256;baseline-50m 4 256"
OPTIMIZERS="muon adamw"
VOCAB=
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --shapes) SHAPES="$2"; shift 2 ;;
    --optimizers) OPTIMIZERS="$2"; shift 2 ;;
    --vocab) VOCAB="$2"; shift 2 ;;
    --steps) STEPS="$2"; STEPS_SET=1; shift 2 ;;
    --warmup) WARMUP="$2"; WARMUP_SET=1; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --threads) THREADS="$2"; shift 2 ;;
    --refresh-roofline) REFRESH=1; shift ;;
    --system-blas) SYSTEM_BLAS=1; shift ;;
    --clocklm) CLOCKLM="$2"; shift 2 ;;
    --python) PY="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
if [ "$QUICK" = 1 ]; then
  [ "$STEPS_SET" = 1 ] || STEPS=2
  [ "$WARMUP_SET" = 1 ] || WARMUP=1
fi
[ -x "$CLOCKLM" ] || { echo "build clocklm first ($CLOCKLM)" >&2; exit 1; }
PEER="$ROOT/bench/torch_peer.py"
say() { echo "train_vs_torch: $*" >&2; }

# --- (a) PyTorch (and a real BLAS for its fp32 GEMM) -------------------------------------------
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
apt_install() {
  say "apt-get install $*"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >&2
}
if ! "$PY" -c 'import torch' 2>/dev/null; then
  apt_install python3-torch
fi
# Debian's torch takes its fp32 GEMM from whatever libblas.so.3 resolves to: the reference BLAS
# (~5 GFLOP/s here) would make the fp32 peer a netlib benchmark, and the OpenMP OpenBLAS collapses on
# small GEMMs under torch's own OpenMP pool, so the peer runs on the pthread OpenBLAS by default.
OPENBLAS_DIR=/usr/lib/x86_64-linux-gnu/openblas-pthread
PEER_ENV=()
if [ "$SYSTEM_BLAS" = 0 ]; then
  [ -e "$OPENBLAS_DIR/libblas.so.3" ] || apt_install libopenblas0-pthread
  # OpenBLAS's pthreads and torch's OpenMP threads each spin after their work; on few cores they
  # starve each other (Muon's fp32 Newton-Schulz ran 5-10x slower here). A short OpenMP spin fixes it
  # (no effect measured on the bf16 runs, which never enter OpenBLAS).
  # glibc returns every block over 32 MB to the kernel, so each step of the peer faults its large
  # activations in again page by page (80% of a d4 step on a KVM Zen 5); a caching allocator, as
  # PyTorch's CPU tuning advice has it, keeps them mapped.
  TCMALLOC=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
  [ -e "$TCMALLOC" ] || apt_install libtcmalloc-minimal4
  PEER_ENV=(env "LD_LIBRARY_PATH=$OPENBLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            "GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-10000}" "LD_PRELOAD=$TCMALLOC${LD_PRELOAD:+:$LD_PRELOAD}")
  BLAS="OpenBLAS $(dpkg-query -W -f '${Version}' libopenblas0-pthread 2>/dev/null) (pthread, $OPENBLAS_DIR; peer runs with GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-10000} and tcmalloc)"
else
  BLAS="system libblas.so.3 -> $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo unknown)"
fi
TORCH_VERSION="$("$PY" -c 'import torch; print(torch.__version__)') (python3-torch $(dpkg-query -W -f '${Version}' python3-torch 2>/dev/null || echo '?'))"

# --- (b) machine ---------------------------------------------------------------------------------
CPU_MODEL="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
FLAGS="$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512.*|amx.*|avx_vnni.*)$' | tr '\n' ' ' | sed 's/ $//')"
[ -n "$FLAGS" ] || FLAGS="(no avx2/avx512/amx flags)"
COMMIT="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
DIRTY="$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null | head -1)"
[ -z "$DIRTY" ] || COMMIT="$COMMIT (with uncommitted changes)"
DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "CPU: $CPU_MODEL, $(nproc) cores; flags: $FLAGS"
say "torch $TORCH_VERSION, BLAS $BLAS"
ROOF_ARGS=(--threads "$THREADS")
[ "$REFRESH" = 1 ] && ROOF_ARGS+=(--refresh)
ROOFLINE="$("$CLOCKLM" roofline "${ROOF_ARGS[@]}" 2>&1)" || { echo "$ROOFLINE" >&2; exit 1; }
echo "$ROOFLINE" >&2
# bench train's ceiling (for its fraction_of_ceiling only) from the cached roofline, not re-measured per run
CEILING="$("$CLOCKLM" roofline --json --threads "$THREADS" 2>/dev/null |
  "$PY" -c 'import json,sys; print(json.load(sys.stdin)["bf16_flops"] / 1e9)' 2>/dev/null || echo 0)"

# --- (c) runs ------------------------------------------------------------------------------------
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
RAW="$WORK/raw.tsv"   # tag (config, BxT, optimizer, engine, mode, load) TAB json-or-error
: > "$RAW"
if "$CLOCKLM" model --config byte-11m --set model.matmul_precision=auto > /dev/null 2>&1; then
  HAVE_PREC=1
  say "model.matmul_precision is known: clocklm runs auto / bf16 / fp32"
else
  HAVE_PREC=0
  say "model.matmul_precision is unknown to this build: fp32 = bench train --fp32, bf16 = default, auto unavailable"
fi
# Muon's Newton-Schulz matmuls follow the mode too (the peer does the same): optim.matrix.ns_precision
# where known, else the older boolean optim.matrix.ns_bf16 (set false for fp32), else untouched.
NS_KEY=""
if "$CLOCKLM" model --config byte-11m --set optim.matrix.ns_precision=fp32 > /dev/null 2>&1; then
  NS_KEY=optim.matrix.ns_precision
elif "$CLOCKLM" model --config byte-11m --set optim.matrix.ns_bf16=false > /dev/null 2>&1; then
  NS_KEY=optim.matrix.ns_bf16
fi
load1() { cut -d' ' -f1 /proc/loadavg; }
# record CONFIG BT OPT ENGINE MODE -- CMD...: run CMD, keep the last stdout line if it is JSON
record() {
  local tag="$1	$2	$3	$4	$5"; shift 6
  local load; load="$(load1)"
  say "$(echo "$tag" | tr '\t' ' ') (load $load): $*"
  local out rc=0
  out="$("$@" 2> "$WORK/err")" || rc=$?
  local line; line="$(printf '%s\n' "$out" | tail -1)"
  if [ "$rc" != 0 ] || [ "${line:0:1}" != "{" ]; then
    line="{\"error\": $(tail -3 "$WORK/err" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()))')}"
    say "  failed (rc $rc): $line"
  fi
  printf '%s\t%s\t%s\n' "$tag" "$load" "$line" >> "$RAW"
}
IFS=';' read -r -a SPECS <<< "$SHAPES"
for spec in "${SPECS[@]}"; do
  read -r C B T <<< "$spec"
  for OPT in $OPTIMIZERS; do
    OSET=()
    [ -n "$VOCAB" ] && OSET+=(--set "model.vocab_size=$VOCAB")
    [ "$OPT" = adamw ] && OSET+=(--set optim.matrix.kind=adamw)
    CL=("$CLOCKLM" bench train --config "$C" --batch "$B" --seq "$T" --steps "$STEPS" --warmup "$WARMUP"
        --threads "$THREADS" --ceiling "$CEILING" --json "${OSET[@]}")
    if [ "$HAVE_PREC" = 1 ]; then
      for M in auto bf16 fp32; do
        NS=()
        [ "$OPT" = muon ] && [ -n "$NS_KEY" ] && NS=(--set "$NS_KEY=$M")
        record "$C" "${B}x$T" "$OPT" clocklm "$M" -- "${CL[@]}" --set "model.matmul_precision=$M" "${NS[@]}"
      done
    else
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$C" "${B}x$T" "$OPT" clocklm auto "$(load1)" \
        '{"error": "model.matmul_precision not in this build"}' >> "$RAW"
      NS=()
      [ "$OPT" = muon ] && [ -n "$NS_KEY" ] && NS=(--set "$NS_KEY=false")
      record "$C" "${B}x$T" "$OPT" clocklm bf16 -- "${CL[@]}"
      record "$C" "${B}x$T" "$OPT" clocklm fp32 -- "${CL[@]}" --fp32 "${NS[@]}"
    fi
    for P in fp32 bf16; do
      record "$C" "${B}x$T" "$OPT" torch "$P" -- "${PEER_ENV[@]}" "$PY" "$PEER" --config "$C" --clocklm "$CLOCKLM" \
        --batch "$B" --seq "$T" --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" \
        --precision "$P" "${OSET[@]}"
    done
  done
done

# --- (d) report ----------------------------------------------------------------------------------
mkdir -p "$(dirname "$OUT")"
export RAW DATE COMMIT CPU_MODEL FLAGS BLAS TORCH_VERSION ROOFLINE THREADS STEPS WARMUP HAVE_PREC
NPROC="$(nproc)"
export NPROC
"$PY" - "$OUT" <<'EOF'
import json, os, sys
E = os.environ
rows, order = {}, []
raw_lines = []
for line in open(E["RAW"]):
    c, bt, opt, eng, mode, load, js = line.rstrip("\n").split("\t", 6)
    j = json.loads(js)
    key = (c, bt, opt)
    if key not in rows:
        rows[key] = {}
        order.append(key)
    rows[key][(eng, mode)] = j
    raw_lines.append(f"{c} {bt} {opt} {eng} {mode} (load {load}): {js}")

def tps(j):
    return j.get("tokens_per_second") if j else None

def fmt(v):
    return "n/a" if v is None else f"{v:,.0f}"

auto_avail = E["HAVE_PREC"] == "1"
opt_name = {"muon": "Muon+AdamW", "adamw": "AdamW"}
out = []
out.append("# clocklm training step vs PyTorch (CPU)\n")
out.append(f"- date: {E['DATE']}")
out.append(f"- commit: {E['COMMIT']}")
out.append(f"- CPU: {E['CPU_MODEL']}, {E['NPROC']} cores; threads used: {E['THREADS']}")
out.append(f"- flags: {E['FLAGS']}")
out.append(f"- PyTorch {E['TORCH_VERSION']}, fp32 GEMM BLAS: {E['BLAS']}; "
           "attention: masked softmax (torch 1.13 has no scaled_dot_product_attention)")
out.append(f"- {E['STEPS']} timed steps after {E['WARMUP']} warm-up steps, random tokens; "
           "tokens/s = batch x seq / mean step time (forward, backward, clip, optimizer update)")
if not auto_avail:
    out.append("- `model.matmul_precision` is not in this clocklm build: clocklm bf16 = `bench train` "
               "default, fp32 = `bench train --fp32`, auto unavailable; the ratio uses the default (bf16) run")
out.append("")
out.append("| config | B×T | optimizer | clocklm auto | clocklm bf16 | clocklm fp32 | torch fp32 | torch bf16 "
           "| clocklm auto / best torch | clocklm auto, % of the bf16 roof |")
out.append("|---|---|---|--:|--:|--:|--:|--:|--:|--:|")
for key in order:
    r = rows[key]
    c, bt, opt = key
    a, b16, f32 = (tps(r.get(("clocklm", m))) for m in ("auto", "bf16", "fp32"))
    t32, t16 = tps(r.get(("torch", "fp32"))), tps(r.get(("torch", "bf16")))
    ours = a if auto_avail else b16
    best = max([v for v in (t32, t16) if v is not None], default=None)
    ratio = "n/a" if ours is None or not best else f"{ours / best:.2f}x" + ("" if auto_avail else " (bf16)")
    ja = r.get(("clocklm", "auto")) or {}
    a_cell = fmt(a) + (f" ({ja['matmul_precision']})" if a is not None and "matmul_precision" in ja else "")
    mfu = ja.get("fraction_of_ceiling")
    mfu_cell = "n/a" if mfu is None else f"{100 * mfu:.1f}%"
    out.append(f"| {c} | {bt.replace('x', '×')} | {opt_name.get(opt, opt)} | {a_cell} | {fmt(b16)} | "
               f"{fmt(f32)} | {fmt(t32)} | {fmt(t16)} | {ratio} | {mfu_cell} |")
out.append("")
out.append("tokens/s (mean over the timed steps); n/a = not available or failed (see the raw lines); "
           "clocklm auto shows what auto resolved to where its JSON says.")
out.append("")
out.append("## clocklm roofline\n")
out.append("```")
out.append(E["ROOFLINE"])
out.append("```\n")
out.append("## Raw JSON lines\n")
out.append("```")
out.extend(raw_lines)
out.append("```")
text = "\n".join(out) + "\n"
open(sys.argv[1], "w").write(text)
# the table on stdout
print("\n".join(l for l in out if l.startswith("|") or l.startswith("- ")))
EOF
say "wrote $OUT"
