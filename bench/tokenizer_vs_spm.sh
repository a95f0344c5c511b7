#!/usr/bin/env bash
# Speed of clocklm's byte-level BPE against SentencePiece's BPE on the same text and vocabulary size,
# both using all cores: training time (wall clock, peak memory) and encode throughput (MB/s of input
# text, ids written as text to /dev/null). Prints a table and writes JSON.
#
# usage: bench/tokenizer_vs_spm.sh [--bytes 100000000] [--vocab 32768] [--threads N] [--work DIR]
#                                  [--json FILE (default WORK/tokenizer_vs_spm.json)] [--data DIR]
#                                  [--clocklm BIN]
# The text is the "text" field of the first documents of DATA/train/wiki2015-*.jsonl.zst, one
# document after another, each followed by '\n', cut at a document boundary before --bytes bytes;
# it is written once to WORK/text.txt (default /tmp/clocklm_tokbench) and reused.
# SentencePiece: spm_train --model_type=bpe with its defaults (character_coverage 0.9995,
# max_sentence_length 4192: longer lines are skipped), --input_sentence_size=0 (every line),
# --num_threads=N. spm_encode has no thread option, so the text is cut into N line-aligned parts
# encoded by N spm_encode processes at once. clocklm: CLOCKLM_THREADS=N for both commands.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BYTES=100000000
VOCAB=32768
THREADS="$(nproc)"
WORK=/tmp/clocklm_tokbench
JSON=""
DATA="$ROOT/../shared/data"
CLOCKLM="$ROOT/build/clocklm"
while [ $# -gt 0 ]; do
  case "$1" in
    --bytes) BYTES="$2"; shift 2 ;;
    --vocab) VOCAB="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --json) JSON="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --clocklm) CLOCKLM="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
for tool in spm_train spm_encode zstd python3 /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "missing $tool" >&2; exit 1; }
done
[ -x "$CLOCKLM" ] || { echo "build clocklm first ($CLOCKLM)" >&2; exit 1; }
[ -n "$JSON" ] || JSON="$WORK/tokenizer_vs_spm.json"
mkdir -p "$WORK" "$(dirname "$JSON")"
COMMIT="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
TEXT="$WORK/text.txt"
if [ ! -s "$TEXT" ] || [ "$(cat "$WORK/text.bytes" 2>/dev/null)" != "$BYTES" ]; then
  echo "extracting ~$BYTES bytes of text to $TEXT" >&2
  zstd -dc "$DATA"/train/wiki2015-*.jsonl.zst 2>/dev/null | python3 -c '
import sys, json
limit = int(sys.argv[1]); n = 0
with open(sys.argv[2], "w", encoding="utf-8", newline="") as out:
    for line in sys.stdin:
        t = json.loads(line)["text"]
        b = len(t.encode("utf-8")) + 1
        if n + b > limit: break
        out.write(t + "\n"); n += b
' "$BYTES" "$TEXT" || true
  echo "$BYTES" > "$WORK/text.bytes"
fi
SIZE=$(stat -c %s "$TEXT")

# run NAME CMD...: wall seconds and peak RSS (MiB) of CMD into $WORK/NAME.time
run() {
  local name="$1"; shift
  /usr/bin/time -f "%e %M" -o "$WORK/$name.time" "$@"
}

echo "clocklm tokenizer train ($THREADS threads)" >&2
CLOCKLM_THREADS=$THREADS run clocklm_train "$CLOCKLM" tokenizer train --input "$TEXT" --vocab-size "$VOCAB" \
  --threads "$THREADS" --out "$WORK/clocklm_tok.json" > /dev/null 2> "$WORK/clocklm_train.log"
echo "spm_train --model_type=bpe ($THREADS threads)" >&2
run spm_train spm_train --input="$TEXT" --model_prefix="$WORK/spm" --vocab_size="$VOCAB" --model_type=bpe \
  --num_threads="$THREADS" --input_sentence_size=0 --minloglevel=1 > "$WORK/spm_train.log" 2>&1

echo "clocklm tokenizer encode" >&2
CLOCKLM_THREADS=$THREADS run clocklm_encode sh -c \
  "'$CLOCKLM' tokenizer encode --tokenizer '$WORK/clocklm_tok.json' < '$TEXT' > '$WORK/clocklm_ids.txt'"
echo "spm_encode x $THREADS processes" >&2
rm -f "$WORK"/part.*
split -n "l/$THREADS" -d "$TEXT" "$WORK/part."
run spm_encode sh -c "for p in '$WORK'/part.*; do spm_encode --model='$WORK/spm.model' --output_format=id \
  < \"\$p\" > \"\$p.ids\" & done; wait"

python3 - "$WORK" "$SIZE" "$VOCAB" "$THREADS" "$JSON" "$COMMIT" <<'EOF'
import json, sys, os, platform, subprocess, datetime
work, size, vocab, threads, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
def t(name):
    s, m = open(os.path.join(work, name + ".time")).read().split()[-2:]
    return float(s), int(m) / 1024
def count_ids(paths):
    n = 0
    for p in paths:
        with open(p) as f:
            for line in f: n += len(line.split())
    return n
ct, cm = t("clocklm_train"); st, sm = t("spm_train")
ce, cem = t("clocklm_encode"); se, sem = t("spm_encode")
c_tokens = count_ids([os.path.join(work, "clocklm_ids.txt")])
s_tokens = count_ids(sorted(os.path.join(work, f) for f in os.listdir(work) if f.startswith("part.") and f.endswith(".ids")))
commit = sys.argv[6]
res = {
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "commit": commit, "machine": platform.node(), "cpu": platform.processor(), "cpu_threads": threads, "text_bytes": size, "vocab_size": vocab,
    "clocklm": {"train_s": ct, "train_peak_mib": round(cm), "encode_s": ce, "encode_mb_s": size / 1e6 / ce,
                "tokens": c_tokens, "bytes_per_token": size / c_tokens},
    "sentencepiece": {"train_s": st, "train_peak_mib": round(sm), "encode_s": se, "encode_mb_s": size / 1e6 / se,
                      "tokens": s_tokens, "bytes_per_token": size / s_tokens},
}
res["speedup_train"] = st / ct
res["speedup_encode"] = se / ce
with open(out, "w") as f: json.dump(res, f, indent=2)
print(f"text {size/1e6:.1f} MB, vocab {vocab}, {threads} threads")
print(f"{'':14} {'train s':>9} {'peak MiB':>9} {'encode s':>9} {'MB/s':>8} {'tokens':>11} {'bytes/tok':>9}")
for name, k in (("clocklm", "clocklm"), ("sentencepiece", "sentencepiece")):
    r = res[k]
    print(f"{name:14} {r['train_s']:9.1f} {r['train_peak_mib']:9d} {r['encode_s']:9.2f} {r['encode_mb_s']:8.1f} {r['tokens']:11d} {r['bytes_per_token']:9.2f}")
print(f"speedup: train {res['speedup_train']:.2f}x, encode {res['speedup_encode']:.2f}x  (json: {out})")
EOF
