# A prepared clocklm dataset folder (`clocklm prepare`) read from Python for the PyTorch peers: the
# manifest, the token shards (docs/FORMATS.md), each token's byte length from the clocklm tokenizer
# file, the loader's BOS-aligned rows (docs/DATA.md, src/data/loader.cpp) and bits per byte counted
# as src/eval/bpb.cpp counts it. The peers read the very token files clocklm trains on; nothing is
# tokenized again.
import json
import math
import os
import struct

import torch

SHARD_MAGIC = b"CLMTOKS\0"
SHARD_HEADER = 32


def read_shard(path):
    """The tokens of one shard as an int64 tensor; the header is checked as clocklm checks it."""
    raw = open(path, "rb").read()
    if len(raw) < SHARD_HEADER or raw[:8] != SHARD_MAGIC:
        raise ValueError(f"{path}: not a clocklm token shard")
    version, width, n, vocab = struct.unpack_from("<IIQI", raw, 8)
    if version != 1 or width not in (2, 4) or len(raw) != SHARD_HEADER + n * width:
        raise ValueError(f"{path}: version {version}, width {width}, {n} tokens do not match its size")
    if n == 0:
        return torch.zeros(0, dtype=torch.int64)
    # Little-endian unsigned ids read as signed of the same width, then masked back.
    signed = torch.frombuffer(bytearray(raw[SHARD_HEADER:]), dtype=torch.int16 if width == 2 else torch.int32)
    return signed.to(torch.int64) & (0xFFFF if width == 2 else 0xFFFFFFFF)


def token_bytes(tokenizer_path):
    """Byte length of every id of a clocklm tokenizer file: 1 for a byte id, the sum of its two
    parts for a merge, its listed bytes for a version-2 token, 0 for a special token (BOS), as
    build_tokenizer in src/tok/tokenizer.cpp fills token_bytes."""
    j = json.load(open(tokenizer_path))
    if j.get("format") != "clocklm-bpe":
        raise ValueError(f"{tokenizer_path}: not a clocklm tokenizer file")
    n = j["vocab_size"]
    length = [None] * n
    for i in j["byte_ids"]:
        length[i] = 1
    for i, hexbytes in j.get("tokens", []):
        length[i] = len(hexbytes) // 2
    pending = list(j["merges"])
    while pending:  # merges may name ids defined by later merges in a version-2 file
        left = [m for m in pending if length[m[0]] is None or length[m[1]] is None]
        if len(left) == len(pending):
            raise ValueError(f"{tokenizer_path}: merges refer to undefined ids")
        for a, b, c in pending:
            if length[a] is not None and length[b] is not None:
                length[c] = length[a] + length[b]
        pending = left
    for _, i in j["special_tokens"]:
        length[i] = 0
    if any(x is None for x in length):
        raise ValueError(f"{tokenizer_path}: some ids are not defined")
    return torch.tensor(length, dtype=torch.int64)


class Dataset:
    def __init__(self, folder):
        self.dir = folder
        self.manifest = json.load(open(os.path.join(folder, "manifest.json")))
        tok = self.manifest["tokenizer"]
        self.bos, self.vocab_size = int(tok["bos_id"]), int(tok["vocab_size"])
        self.token_bytes = token_bytes(os.path.join(folder, tok.get("file", "tokenizer.json")))

    def stream(self, split):
        """The split's shards in order, as one token stream."""
        shards = [read_shard(os.path.join(self.dir, s["file"])) for s in self.manifest["splits"][split]["shards"]]
        return torch.cat(shards) if shards else torch.zeros(0, dtype=torch.int64)

    def rows(self, split, T):
        """[R, T+1] rows cut as the loader cuts them: at a BOS the next T+1 tokens, elsewhere an
        inserted BOS and the next T tokens; the last incomplete row dropped."""
        s = self.stream(split)
        n, p, out = len(s), 0, []
        is_bos = (s == self.bos).tolist()
        while p < n:
            need = T + 1 if is_bos[p] else T
            if p + need > n:
                break
            out.append(s[p:p + need] if is_bos[p] else torch.cat((torch.tensor([self.bos]), s[p:p + T])))
            p += need
        return torch.stack(out) if out else torch.zeros(0, T + 1, dtype=torch.int64)

    def val_rows(self, T, val_tokens):
        """The rows holding the first val_tokens target positions, in stream order, and their
        targets with positions past val_tokens set to -1 (not counted)."""
        rows = self.rows("val", T)
        need = min(int(val_tokens), rows.shape[0] * T)
        rows = rows[:(need + T - 1) // T]
        targets = rows[:, 1:].clone().reshape(-1)
        targets[need:] = -1
        return rows[:, :-1], targets.view(rows.shape[0], T)


class Bpb:
    """Sums of src/eval/bpb.cpp: targets < 0 are no positions; special tokens (0 bytes) are
    positions that add neither nats nor bytes."""

    def __init__(self, token_bytes):
        self.tb = token_bytes
        self.nats, self.tokens, self.bytes, self.positions = 0.0, 0, 0, 0

    def add(self, targets, token_loss):  # both flat, on any device; loss in nats per position
        targets, token_loss = targets.cpu(), token_loss.double().cpu()
        valid = targets >= 0
        nb = torch.zeros_like(targets)
        nb[valid] = self.tb[targets[valid]]
        counted = nb > 0
        self.positions += int(valid.sum())
        self.tokens += int(counted.sum())
        self.bytes += int(nb.sum())
        self.nats += float(token_loss[counted].sum())

    def result(self):
        bpb = self.nats / (math.log(2.0) * self.bytes) if self.bytes else float("nan")
        return dict(bpb=bpb, nats=self.nats, tokens=self.tokens, bytes=self.bytes, positions=self.positions)
