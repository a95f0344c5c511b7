#!/bin/sh
# bench/torch_compiled_peer.py reads the dataset clocklm trains on and counts bits per byte as
# clocklm does: on a small prepared dataset (several val shards, documents longer than a row) its
# val target positions, counted tokens and byte total equal `clocklm eval bpb`'s exactly, and its
# bpb at init matches within 1e-6 relative (both models start with a zero LM head, model.zero_init_out,
# so every target costs ln V whatever the other weights). Then a two-step speed run on the same tiny
# config must print tokens/s and list the features this torch lacks. Skipped (77) without a
# python3 that imports torch.
#   tests/peer_data_check.sh BUILD_DIR
set -u
build="$1"
root="$(cd "$(dirname "$0")/.." && pwd)"
py=""
for c in "${CLOCKLM_PYTHON:-}" python3 /usr/bin/python3; do
  if [ -n "$c" ] && "$c" -c 'import torch' > /dev/null 2>&1; then py="$c"; break; fi
done
[ -n "$py" ] || { echo "SKIP: no python3 with torch (apt-get install python3-torch)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
C="$build/clocklm"
cat "$root/docs/ARCHITECTURE.md" "$root/docs/DATA.md" > "$work/corpus.txt"
"$C" prepare --input "$work/corpus.txt" --txt-doc-bytes 1500 --vocab-size 400 --val-fraction 0.3 \
  --shard-tokens 4000 --out "$work/data" -q > "$work/prepare.log" 2>&1 || { cat "$work/prepare.log"; fail "prepare"; }
tiny="--set model.n_layer=1 --set model.d_model=64 --set model.n_head=1 --set model.n_kv_head=1 --set model.seq_len=64"
# lr 0: the one step leaves the initial weights, so the checkpoint is the model at init.
# shellcheck disable=SC2086
"$C" train --config d4 --data "$work/data" $tiny --set train.max_steps=1 --set train.micro_batch=2 \
  --set train.batch_tokens=128 --set train.val_tokens=512 --set optim.matrix.lr=0 --set optim.embed.lr=0 \
  --set optim.head.lr=0 --set optim.scalar.lr=0 --device cpu --quiet --out "$work/run" > "$work/train.log" 2>&1 ||
  { cat "$work/train.log"; fail "clocklm train"; }
"$C" eval bpb --checkpoint "$work/run" --device cpu --val-tokens 3000 --json "$work/clocklm.json" > /dev/null 2>&1 ||
  fail "clocklm eval bpb"
"$py" "$root/bench/torch_compiled_peer.py" --config "$work/run/config.json" --clocklm "$C" --device cpu \
  --precision fp32 --threads 2 --data "$work/data" --budget 0 --val-tokens 3000 > "$work/peer.json" 2> "$work/peer.log" ||
  { cat "$work/peer.log"; fail "the peer's evaluation"; }
"$py" - "$work/clocklm.json" "$work/peer.json" << 'EOF' || exit 1
import json, sys
c = json.load(open(sys.argv[1]))
p = json.loads(open(sys.argv[2]).read().splitlines()[-1])["val"]
print(f"clocklm: {c['positions']} positions, {c['tokens']} tokens, {c['bytes']} bytes, bpb {c['bpb']:.8f}")
print(f"peer:    {p['positions']} positions, {p['tokens']} tokens, {p['bytes']} bytes, bpb {p['bpb']:.8f}")
if c["positions"] != 3000 or c["tokens"] >= c["positions"]:
    sys.exit("FAIL: the val split is too short or has no BOS target: the check would prove little")
for k in ("positions", "tokens", "bytes"):
    if c[k] != p[k]:
        sys.exit(f"FAIL: {k} differ")
if abs(c["bpb"] - p["bpb"]) > 1e-6 * c["bpb"]:
    sys.exit("FAIL: bpb at init differs by more than 1e-6 relative")
EOF
# shellcheck disable=SC2086
"$py" "$root/bench/torch_compiled_peer.py" --config d4 $tiny --set model.vocab_size=400 --clocklm "$C" \
  --device cpu --precision fp32 --threads 2 --batch 2 --seq 64 --steps 2 --warmup 1 > "$work/speed.json" 2> "$work/speed.log" ||
  { cat "$work/speed.log"; fail "the peer's speed run"; }
cat "$work/speed.log"
"$py" - "$work/speed.json" << 'EOF' || exit 1
import json, sys
j = json.loads(open(sys.argv[1]).read().splitlines()[-1])
assert j["tokens_per_second"] > 0 and j["flops_per_token"] > 0 and j["mfu_measured"] > 0, j
print(f"speed: {j['tokens_per_second']:.0f} tokens/s, features {j['features']}")
EOF
grep -q 'unavailable here: ' "$work/speed.log" || fail "the peer did not list the features it lacks"
echo "PASS: the peer reads clocklm's val targets and byte counts exactly"
