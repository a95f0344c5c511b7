#!/usr/bin/env python3
"""Writes the tiktoken fixtures of tests/test_tok_formats.cpp (run from this folder):

nanochat_tokenizer.pkl -- a pickled tiktoken.core.Encoding shaped like nanochat's tokenizer.pkl
  (nanochat builds tiktoken.Encoding(name="rustbpe", pat_str=SPLIT_PATTERN, mergeable_ranks=...,
  special_tokens=...) and saves it with pickle.dump). tiktoken is not installed here, so a
  stand-in class with the same module and name (tiktoken.core.Encoding) and the same
  __getstate__ as tiktoken's (a dict of name, pat_str, mergeable_ranks, special_tokens) is
  pickled by the standard library's pickle at its default protocol: the opcodes are those
  tiktoken's own Encoding produces.
nanochat_tokenizer_p3.pkl -- the same pickled at protocol 3.
nanochat_tokenizer.tiktoken -- the same ranks as a .tiktoken rank file (base64 token, space, rank).

  make_nanochat_pkl.py GPT2_DIR [MERGES PREFIX] writes PREFIX.* with MERGES merges instead (the
  fuzzers' seeds in fuzz/corpus/ are made so, with 40 merges).

The vocabulary: bytes 0..255 at ranks 0..255 (as nanochat's rustbpe numbers them), then GPT-2's
first 1744 merges (from GPT-2's encoder.json and vocab.bpe, path given as the first argument),
then nanochat's nine special tokens."""
import base64, json, os, pickle, sys, tempfile

gpt2 = sys.argv[1] if len(sys.argv) > 1 else "../../../../shared/data/tokenizers/gpt2"
N_MERGES = int(sys.argv[2]) if len(sys.argv) > 2 else 1744  # fewer for the fuzzers' seeds
PREFIX = sys.argv[3] if len(sys.argv) > 3 else "nanochat_tokenizer"
SPLIT_PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
SPECIAL_TOKENS = ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
                  "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>"]

# GPT-2's byte-level alphabet, to read vocab.bpe's token strings as bytes.
printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
cp = {}
n = 0
for b in range(256):
    if b in printable:
        cp[b] = b
    else:
        cp[b] = 256 + n
        n += 1
byte_of = {chr(c): b for b, c in cp.items()}

ranks = {bytes([b]): b for b in range(256)}
with open(os.path.join(gpt2, "vocab.bpe"), encoding="utf-8") as f:
    lines = [l for l in f.read().split("\n")[1:] if l]
for line in lines[:N_MERGES]:
    a, b = line.split(" ")
    tok = bytes(byte_of[c] for c in a + b)
    ranks[tok] = len(ranks)
special = {name: len(ranks) + i for i, name in enumerate(SPECIAL_TOKENS)}

# The stand-in tiktoken.core.Encoding.
stub = tempfile.mkdtemp()
os.makedirs(os.path.join(stub, "tiktoken"))
open(os.path.join(stub, "tiktoken", "__init__.py"), "w").close()
with open(os.path.join(stub, "tiktoken", "core.py"), "w") as f:
    f.write('''
class Encoding:
    def __init__(self, name, *, pat_str, mergeable_ranks, special_tokens, explicit_n_vocab=None):
        self.name = name
        self._pat_str = pat_str
        self._mergeable_ranks = mergeable_ranks
        self._special_tokens = special_tokens

    def __getstate__(self):
        return {"name": self.name, "pat_str": self._pat_str,
                "mergeable_ranks": self._mergeable_ranks, "special_tokens": self._special_tokens}
''')
sys.path.insert(0, stub)
from tiktoken.core import Encoding  # noqa: E402

enc = Encoding("rustbpe", pat_str=SPLIT_PATTERN, mergeable_ranks=ranks, special_tokens=special)
with open(PREFIX + ".pkl", "wb") as f:
    pickle.dump(enc, f)
# The same at protocol 3 (GLOBAL and BINPUT instead of STACK_GLOBAL and MEMOIZE, no FRAME).
with open(PREFIX + "_p3.pkl", "wb") as f:
    pickle.dump(enc, f, protocol=3)
with open(PREFIX + ".tiktoken", "w") as f:
    for tok, r in ranks.items():
        f.write(base64.b64encode(tok).decode() + " " + str(r) + "\n")
print(f"wrote {PREFIX}.pkl, {PREFIX}_p3.pkl and {PREFIX}.tiktoken: {len(ranks)} tokens, {len(special)} special")
