#!/usr/bin/env bash
# The recipe's PyTorch peer at a device-time budget: nanochat's recipe (the d4 preset) trained in
# PyTorch by bench/nanochat_peer.py on the recipe's tuning data, scored by `clocklm eval bpb` on the
# same tuning-split text as bench/recipe.sh's runs (131,072 target tokens at vocab 8192).
#
#   bash bench/recipe_peer.sh [BUDGET_SECONDS (600)] [THREADS (2)]
# THREADS is the training run's; the throughput is always measured with 2 threads, as the recipe's.
#
# As in bench/recipe.sh the run is deterministic: the peer's tokens/s is measured first (the better
# of fp32 and bf16 autocast, 8 timed steps each, best step of each), and the peer then trains
# BUDGET x tokens/s / batch_tokens steps, so the result does not depend on the machine's load while
# it trains. Writes runs/recipe/peer/peer-BUDGET.json (throughput, steps, val bpb).
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET=${1:-600}
THREADS=${2:-2}
EXE=${CLOCKLM:-build/clocklm}
PY=${PYTHON:-/usr/bin/python3}
DATA=data/tune-v8192
OUT=runs/recipe/peer
[ -f "$DATA/manifest.json" ] || { echo "recipe_peer: $DATA is missing; run bench/recipe.sh first (it prepares it)" >&2; exit 1; }
"$PY" -c "import torch" 2>/dev/null || { echo "recipe_peer: $PY has no torch (apt-get install python3-torch)" >&2; exit 1; }
mkdir -p "$OUT"

# 1. a clocklm checkpoint of the d4 config on this dataset: the peer reuses its header and layout
if [ ! -f "$OUT/template/checkpoints/latest" ]; then
  rm -rf "$OUT/template"
  "$EXE" train --config d4 --data "$DATA" --budget 0 --set max_steps=1 --set eval_every_seconds=0 \
    --set checkpoint_every_seconds=0 --set val_tokens=4096 --quiet --out "$OUT/template" >/dev/null
fi
TEMPLATE="$OUT/template/checkpoints/$(cat "$OUT/template/checkpoints/latest")"

# 2. throughput in both precisions. Debian's torch takes its fp32 GEMM from libblas.so.3: the pthread
# OpenBLAS goes first (as in bench/train_vs_torch.sh), since the reference BLAS runs at a few GFLOP/s.
OPENBLAS_DIR=/usr/lib/x86_64-linux-gnu/openblas-pthread
[ -e "$OPENBLAS_DIR/libblas.so.3" ] || { echo "recipe_peer: apt-get install libopenblas0-pthread first" >&2; exit 1; }
export LD_LIBRARY_PATH="$OPENBLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-10000}
# glibc hands every block over 32 MB straight back to the kernel, so each step of the peer faults its
# logits and attention buffers in again page by page; on a KVM guest where a fault costs ~25 us that
# was 80% of a d4 step (measured on a Zen 5: 23 s a step on one thread with glibc, 4.8 s with
# tcmalloc). PyTorch's CPU tuning advice is a caching allocator, so the peer gets tcmalloc.
TCMALLOC=${PEER_MALLOC:-/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4}
[ -e "$TCMALLOC" ] || { echo "recipe_peer: apt-get install libtcmalloc-minimal4 first (or PEER_MALLOC=path)" >&2; exit 1; }
export LD_PRELOAD="$TCMALLOC${LD_PRELOAD:+:$LD_PRELOAD}"
# PEER_REUSE_TPS=1 keeps the tps-*.json of an earlier measurement (e.g. one made on a quiet machine
# before training under load); PEER_MEASURE_ONLY=1 stops after measuring.
for prec in fp32 bf16; do
  [ "${PEER_REUSE_TPS:-0}" = 1 ] && [ -f "$OUT/tps-$prec.json" ] && continue
  "$PY" bench/nanochat_peer.py --data "$DATA" --measure 8 --precision $prec --threads 2 \
    --clocklm "$EXE" 2>/dev/null > "$OUT/tps-$prec.json"
done
[ "${PEER_MEASURE_ONLY:-0}" = 1 ] && exit 0
read -r PREC TPS < <("$PY" - "$OUT" <<'PY'
import json, sys
best = max((json.load(open(f"{sys.argv[1]}/tps-{p}.json")) for p in ("fp32", "bf16")),
           key=lambda j: j["tokens_per_second_best"])
print(best["precision"], best["tokens_per_second_best"])
PY
)
STEPS=$("$PY" -c "print(max(1, round($BUDGET * $TPS / 4096)))")
echo "recipe_peer: peer $PREC at $TPS tok/s (best step) -> $STEPS steps for $BUDGET s" >&2

# 3. train, 4. score with clocklm on the tuning split
"$PY" bench/nanochat_peer.py --data "$DATA" --template "$TEMPLATE" --out "$OUT/peer-$BUDGET.ckpt" \
  --steps "$STEPS" --precision "$PREC" --threads "$THREADS" --clocklm "$EXE" > "$OUT/train-$BUDGET.json"
"$EXE" eval bpb --checkpoint "$OUT/peer-$BUDGET.ckpt" --data "$DATA" --val-tokens 131072 \
  --json "$OUT/bpb-$BUDGET.json" >/dev/null
"$PY" - "$OUT" "$BUDGET" "$PREC" "$TPS" "$STEPS" <<'PY'
import json, sys
out, budget, prec, tps, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
res = dict(budget_s=budget, precision=prec, tokens_per_second=tps, steps=steps, tokens=steps * 4096,
           throughput={p: json.load(open(f"{out}/tps-{p}.json")) for p in ("fp32", "bf16")},
           train=json.load(open(f"{out}/train-{budget}.json")), val=json.load(open(f"{out}/bpb-{budget}.json")))
json.dump(res, open(f"{out}/peer-{budget}.json", "w"), indent=1)
print(f"peer (nanochat recipe, PyTorch {prec}) at {budget} s: {steps} steps, val bpb (tune) {res['val']['bpb']:.4f}")
PY
