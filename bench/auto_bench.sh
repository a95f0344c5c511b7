#!/usr/bin/env bash
# `--config auto` against the built-in presets, d4 and the PyTorch peer at equal device-time budgets
# (bench/results/auto.md).
#
#   bash bench/auto_bench.sh [BUDGETS (300,600)]    e.g. 300,600,1800 adds the 30-minute comparison
#   AUTO_TPS_ROUNDS=N   throughput rounds (default 3; 0 = reuse runs/auto/throughput.json)
#   AUTO_PEER=0         leave out the PyTorch peer (bench/recipe_peer.sh)
#   CLOCKLM=path        the binary (default build/clocklm)
#
# For each budget the planner picks a config for the recipe data on this machine (as
# `train --config auto` does; its planning time is reported, not charged to the budget), and then
# every contender trains deterministically: max_steps = budget x tokens/s / batch_tokens, with tokens/s
# the p90 of per-step tokens/s over alternating short runs of all shapes measured first, so the bpb
# reached does not depend on the load while training. Plan and throughput are measured under
# whatever load the machine has: run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGETS=${1:-300,600}
export CLOCKLM=${CLOCKLM:-build/clocklm}
bash bench/recipe/prepare_data.sh 8192
IFS=, read -r -a BS <<< "$BUDGETS"
for b in "${BS[@]}"; do
  [ -f runs/auto/auto-$b.json ] || python3 bench/recipe/auto_bench.py plan --budget "$b"
done
if [ "${AUTO_TPS_ROUNDS:-3}" -gt 0 ] || [ ! -f runs/auto/throughput.json ]; then
  python3 bench/recipe/auto_bench.py throughput --budgets "$BUDGETS" --rounds "${AUTO_TPS_ROUNDS:-3}"
fi
# The peer's throughput is measured here too, before any training, under the same conditions.
[ "${AUTO_PEER:-1}" = 0 ] || [ "${AUTO_TPS_ROUNDS:-3}" = 0 ] || PEER_MEASURE_ONLY=1 bash bench/recipe_peer.sh
for b in "${BS[@]}"; do
  python3 bench/recipe/auto_bench.py train --budget "$b"
  [ "${AUTO_PEER:-1}" = 0 ] || [ -f runs/recipe/peer/peer-$b.json ] || PEER_REUSE_TPS=1 bash bench/recipe_peer.sh "$b"
done
python3 bench/recipe/auto_bench.py table
