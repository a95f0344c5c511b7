#!/usr/bin/env bash
# Parquet against JSON Lines + zstd as corpus input, the same documents in both. DuckDB (through
# tests/clients/parquet_bench.mjs) writes a nanochat-style shard (zstd, ROW_GROUP_SIZE 1024, which
# DuckDB rounds up to 2048 rows) and a .jsonl.zst of the same text, taken in order from the Wikipedia files of the
# shared training data; then, each once, side by side:
#   clocklm data count   reading alone (decompress + decode; checksums must agree)
#   DuckDB               reading the text column of the shard
#   clocklm prepare      with the GPT-2 tokenizer (reading + encoding + writing shards)
#   bash bench/parquet_vs_jsonl.sh [TEXT_MB]     (default 300: a ~108 MB shard)
# Needs node with tests/clients' packages. Work files go to ${WORK:-/tmp/clocklm_parquet_bench}.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${CLOCKLM:-build/clocklm}
SHARED=$(cd "${CLOCKLM_SHARED_DATA:-../shared/data}" && pwd)
WORK=${WORK:-/tmp/clocklm_parquet_bench}
TEXT_MB=${1:-300}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

if [ ! -f "$WORK/shard.parquet" ] || [ ! -f "$WORK/shard.jsonl.zst" ] || [ "$(cat "$WORK/text_mb" 2>/dev/null)" != "$TEXT_MB" ]; then
  (cd tests/clients && node parquet_bench.mjs make "$SHARED/train" "$TEXT_MB" "$WORK")
  echo "$TEXT_MB" > "$WORK/text_mb"
fi
ls -l "$WORK/shard.parquet" "$WORK/shard.jsonl.zst" | awk '{printf "%s: %.1f MB\n", $9, $5 / 1e6}'

timed() {  # label, command...: one run, wall/user/sys seconds and peak memory
  local label=$1
  shift
  /usr/bin/time -f "$label: %e s wall, %U s user, %S s sys, %M KB peak" "$@" 2>&1 >"$WORK/out.txt" | grep -v '^prepare:' | tail -1
  grep -h -v '^$' "$WORK/out.txt" | sed 's/^/    /' || true
}

echo "== reading only (clocklm data count)"
timed "parquet   " "$BIN" data count --input "$WORK/shard.parquet"
timed "jsonl.zst " "$BIN" data count --input "$WORK/shard.jsonl.zst"
echo "== DuckDB reading the text column"
timed "duckdb    " sh -c "cd tests/clients && exec node parquet_bench.mjs read '$WORK/shard.parquet'"
echo "== clocklm prepare with the GPT-2 tokenizer"
rm -rf "$WORK/ds_parquet" "$WORK/ds_jsonl"
timed "parquet   " "$BIN" prepare --quiet --input "$WORK/shard.parquet" --tokenizer "$SHARED/tokenizers/gpt2" --out "$WORK/ds_parquet"
timed "jsonl.zst " "$BIN" prepare --quiet --input "$WORK/shard.jsonl.zst" --tokenizer "$SHARED/tokenizers/gpt2" --out "$WORK/ds_jsonl"
for d in ds_parquet ds_jsonl; do
  python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(sys.argv[2], 'tokens', m['splits']['train']['tokens'] + m['splits']['val']['tokens'], 'tokenize_seconds %.2f' % m['tokenize_seconds'])" "$WORK/$d/manifest.json" "$d"
done
cmp <(cat "$WORK"/ds_parquet/*.bin) <(cat "$WORK"/ds_jsonl/*.bin) && echo "token shards identical"
