#!/usr/bin/env bash
# Out-of-domain validation sets for the recipe benchmarks: English text of kinds the tuning corpus
# (Wikipedia and Wikinews) holds little of, tokenized with data/tune-v8192's tokenizer so that the
# checkpoints of bench/recipe/auto_bench.py and bench/recipe_peer.sh score them with `clocklm eval bpb
# --data data/ood-NAME`:
#   shakespeare  the plays (tiny/tinyshakespeare.txt, cut at blank lines into ~2 KB documents)
#   fiction      LAMBADA's novel passages, context and final word (CORE's lambada_openai.jsonl)
#   howto        HellaSwag's wikiHow and ActivityNet contexts with their gold endings
# Each dataset's train split is a small in-domain file (prepare needs one); only the val split is read.
#
#   bash bench/recipe/prepare_ood.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
EXE=${CLOCKLM:-build/clocklm}
SHARED=${SHARED_DATA:-../shared/data}
TOK=data/tune-v8192
PY=${PYTHON:-python3}
[ -f "$TOK/manifest.json" ] || { echo "prepare_ood: $TOK is missing; run bench/recipe/prepare_data.sh 8192" >&2; exit 1; }
mkdir -p data/ood-src
cp "$SHARED/tiny/tinyshakespeare.txt" data/ood-src/shakespeare.txt
"$PY" - "$SHARED/core/eval_data/language_understanding" data/ood-src <<'PY'
import json, os, sys
src, out = sys.argv[1], sys.argv[2]
def write(name, texts):
    tmp = os.path.join(out, name + ".jsonl.tmp")
    with open(tmp, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"{name}-{i}", "text": t}) + "\n")
    os.replace(tmp, os.path.join(out, name + ".jsonl"))
rows = [json.loads(l) for l in open(os.path.join(src, "lambada_openai.jsonl"))]
write("fiction", [r["context"] + " " + r["continuation"] for r in rows])
rows = [json.loads(l) for l in open(os.path.join(src, "hellaswag.jsonl"))]
write("howto", [r["query"] + " " + r["choices"][r["gold"]] for r in rows])
PY
for name in shakespeare fiction howto; do
  f=$(ls data/ood-src/$name.*)
  [ -f data/ood-$name/manifest.json ] || \
    "$EXE" prepare --input data/src/tune/tune-wiki004.jsonl --val "$f" --txt-doc-bytes 2000 --tokenizer "$TOK" --out data/ood-$name --quiet
done
