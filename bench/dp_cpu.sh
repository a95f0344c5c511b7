#!/usr/bin/env bash
# Data-parallel scaling on one CPU host: baseline-50m trained for a few steps as 1 rank x 2 threads
# (two micro-batches of 8 x 1024 per step) and as 2 ranks x 1 thread (one micro-batch each: 8K
# tokens per rank per step), alternated REPS times so both see the same machine load. Prints
# tokens/s per step (median of steps 2..N; the first step builds primitives), communication time
# and bytes per step, and the scaling efficiency = tokens/s(2 ranks) / tokens/s(1 rank).
#   bash bench/dp_cpu.sh DATASET [REPS] [STEPS]     (DATASET: a `clocklm prepare` folder, vocab 32768)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:?usage: bench/dp_cpu.sh DATASET [REPS] [STEPS]}
REPS=${2:-2}
STEPS=${3:-4}
OUT=$(mktemp -d /tmp/clocklm_dp_bench.XXXXXX)
COMMON=(--config baseline-50m --data "$DATA" --set micro_batch=8 --set batch_tokens=16384
        --set max_steps="$STEPS" --set eval_every_seconds=0 --set val_tokens=8192 --budget 1h --quiet)
for rep in $(seq "$REPS"); do
  build/clocklm train "${COMMON[@]}" --set train.threads=2 --out "$OUT/one$rep" >/dev/null
  build/clocklm train "${COMMON[@]}" --set train.threads=1 --nproc 2 --out "$OUT/two$rep" >/dev/null
done
python3 - "$OUT" "$REPS" <<'PY'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
def rows(run):
    return [json.loads(l) for l in open(f"{out}/{run}/metrics.jsonl") if '"loss"' in l][1:]
print("| run | tokens/s (median, steps 2..N) | step s | comm s/step | comm MB/step (payload) |")
print("|---|---|---|---|---|")
ratios = []
for rep in range(1, reps + 1):
    tps = {}
    for run in (f"one{rep}", f"two{rep}"):
        r = rows(run)
        tps[run] = statistics.median(x["tokens_per_second"] for x in r)
        comm = statistics.median(x.get("comm_seconds", 0) for x in r)
        mb = statistics.median(x.get("comm_bytes", 0) for x in r) / 1e6
        step = statistics.median(x["step_seconds"] for x in r)
        print(f"| {run} | {tps[run]:.0f} | {step:.2f} | {comm:.3f} | {mb:.1f} |")
    ratios.append(tps[f"two{rep}"] / tps[f"one{rep}"])
print("scaling efficiency (2 ranks x 1 thread / 1 rank x 2 threads):", ", ".join(f"{r:.3f}" for r in ratios))
PY
echo "runs kept in $OUT"
