"""Loads a `clocklm export --format hf` folder with Hugging Face transformers itself
(AutoModelForCausalLM, model type nanochat) and compares its logits of some token rows with
clocklm's (`clocklm eval logits`). Where transformers cannot be imported (it is not a Debian package;
the GPU machine's image has it) the check is skipped: exit status 77 and a line saying why.

    clocklm export --checkpoint RUN --format hf --out hf/
    clocklm eval logits --checkpoint RUN --input ids.txt --out clocklm.bin
    python3 bench/hf_check.py hf/ --input ids.txt --logits clocklm.bin [--tol 1e-4]
"""

import argparse
import struct
import sys


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--input", required=True, help="token rows (one row of ids per line, equal lengths)")
    ap.add_argument("--logits", required=True, help="clocklm's logits, fp32 [rows, T, vocab_size]")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args(argv)
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        print(f"SKIP: transformers is not importable here ({e})")
        return 77
    rows = [[int(x) for x in line.split()] for line in open(a.input) if line.strip()]
    model = AutoModelForCausalLM.from_pretrained(a.folder, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    if type(model).__name__ != "NanoChatForCausalLM":
        print(f"FAIL: loaded {type(model).__name__}, expected NanoChatForCausalLM")
        return 1
    with torch.no_grad():
        z = model(input_ids=torch.tensor(rows, dtype=torch.long)).logits.float()
    raw = open(a.logits, "rb").read()
    ref = torch.tensor(struct.unpack(f"<{len(raw) // 4}f", raw)).view(z.shape)
    diff = float((z - ref).abs().max())
    ok = diff <= a.tol
    print(f"{'OK' if ok else 'FAIL'}: transformers {transformers.__version__} NanoChatForCausalLM vs clocklm: "
          f"max |diff| {diff:.3g} over {list(z.shape)} (tolerance {a.tol:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
