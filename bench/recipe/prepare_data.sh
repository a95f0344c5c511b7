#!/usr/bin/env bash
# The recipe benchmarks' data: wikinews + wiki2015-004 from the shared corpus, the last 1000 / 100
# documents of each held out as the tuning split (data/src/tune), tokenized at the given vocab sizes
# into data/tune-v<V>. Shared by bench/recipe.sh and bench/auto_bench.sh.
#
#   bash bench/recipe/prepare_data.sh [VOCAB ...]   (default 4096 8192 16384)
set -euo pipefail
cd "$(dirname "$0")/../.."
EXE=${CLOCKLM:-build/clocklm}
SHARED=${SHARED_DATA:-../shared/data}
VOCABS=("$@")
[ ${#VOCABS[@]} -gt 0 ] || VOCABS=(4096 8192 16384)
if [ ! -f data/src/tune/tune-wiki004.jsonl ]; then
  mkdir -p data/src/train data/src/tune
  zstd -dc "$SHARED/train/wikinews-000.jsonl.zst" > data/src/wikinews.jsonl
  zstd -dc "$SHARED/train/wiki2015-004.jsonl.zst" > data/src/wiki004.jsonl
  head -n -1000 data/src/wikinews.jsonl > data/src/train/train-wikinews.jsonl
  tail -n 1000  data/src/wikinews.jsonl > data/src/tune/tune-wikinews.jsonl
  head -n -100  data/src/wiki004.jsonl  > data/src/train/train-wiki004.jsonl
  tail -n 100   data/src/wiki004.jsonl  > data/src/tune/tune-wiki004.jsonl
  rm data/src/wikinews.jsonl data/src/wiki004.jsonl
fi
for v in "${VOCABS[@]}"; do
  [ -f data/tune-v$v/manifest.json ] || \
    "$EXE" prepare --input data/src/train --val data/src/tune --vocab-size $v --out data/tune-v$v --quiet
done
