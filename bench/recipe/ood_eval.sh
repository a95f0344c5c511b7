#!/usr/bin/env bash
# Scores checkpoints in domain (the tuning split of data/tune-v8192, 131,072 targets, as
# bench/results/auto.md does) and out of it (bench/recipe/prepare_ood.sh's sets, 262,144 targets
# each), one JSON line per checkpoint and set appended to OUT.
#
#   OUT=rows.jsonl bash bench/recipe/ood_eval.sh LABEL=CHECKPOINT_OR_RUN_DIR ...
# A run folder stands for its latest checkpoint. The peer's checkpoints (bench/recipe_peer.sh) are
# clocklm checkpoints too, so both sides are scored by the same evaluator.
set -euo pipefail
cd "$(dirname "$0")/../.."
EXE=${CLOCKLM:-build/clocklm}
OUT=${OUT:?set OUT to the rows file}
SETS=${SETS:-"tune-v8192:131072 ood-shakespeare:262144 ood-fiction:262144 ood-howto:262144"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for arg in "$@"; do
  label=${arg%%=*} ck=${arg#*=}
  [ -d "$ck" ] && ck="$ck/checkpoints/$(cat "$ck/checkpoints/latest")"
  [ -f "$ck" ] || { echo "ood_eval: no checkpoint at $ck" >&2; exit 1; }
  for s in $SETS; do
    set_name=${s%%:*} n=${s#*:}
    "$EXE" eval bpb --checkpoint "$ck" --data "data/$set_name" --val-tokens "$n" --json "$tmp/r.json" >/dev/null
    python3 - "$tmp/r.json" "$label" "$set_name" "$ck" >> "$OUT" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(json.dumps({"run": sys.argv[2], "set": sys.argv[3], "checkpoint": sys.argv[4], "val_bpb": r["bpb"],
                  "tokens": r.get("tokens"), "bytes": r.get("bytes")}))
PY
  done
done
