"""A plain PyTorch reference of the clocklm GPT, built from a `clocklm export --format safetensors`
folder (clocklm_config.json + model.safetensors), for every architecture option clocklm trains.

Its only dependency is PyTorch (Debian's python3-torch); model.safetensors is parsed here with
json and struct. The math follows docs/MODEL.md line by line, in fp32 (the RoPE angles in float64,
as clocklm computes its tables), so its logits are clocklm's with fp32 matmuls.

Use as a module:
    model = ClockLM.load("exported/")
    logits = model.logits(torch.tensor([[bos, 17, 42]]))     # [B, T, vocab_size], fp32

or from the command line:
    python3 clocklm_torch.py logits EXPORT --input ids.txt --out logits.bin
        ids.txt: one row of space-separated token ids per line, all rows the same length;
        logits.bin: little-endian fp32 [rows, T, vocab_size] (the layout `clocklm eval logits` writes)
    python3 clocklm_torch.py bpb EXPORT --rows rows.txt --val-tokens N
        rows.txt: rows of T+1 tokens (inputs and targets, as clocklm's loader cuts them); bits per
        byte over the first N target positions, special-token targets excluded (docs/EVAL.md)
"""

import argparse
import json
import math
import os
import struct
import sys

import torch

_DTYPES = {"F32": (torch.float32, 4), "BF16": (torch.bfloat16, 2)}


def load_safetensors(path):
    """The tensors of a safetensors file (F32 or BF16) as fp32 tensors, by name."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} past the end of the file")
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    body = memoryview(data)[8 + n :]
    out, end = {}, 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0] if kv[0] != "__metadata__" else -1):
        if name == "__metadata__":
            continue
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor {name} has dtype {info['dtype']} (F32 or BF16 expected)")
        dtype, size = _DTYPES[info["dtype"]]
        a, b = info["data_offsets"]
        shape = [int(s) for s in info["shape"]]
        count = math.prod(shape)
        if a != end or b - a != count * size or b > len(body):
            raise ValueError(f"{path}: tensor {name} has byte range [{a}, {b}), expected [{end}, {end + count * size})")
        end = b
        if count == 0:
            out[name] = torch.zeros(shape, dtype=torch.float32)
            continue
        t = torch.frombuffer(bytearray(body[a:b]), dtype=dtype)
        out[name] = t.to(torch.float32).reshape(shape)
    if end != len(body):
        raise ValueError(f"{path}: {len(body) - end} bytes after the last tensor")
    return out


def f32(x):
    """x rounded to the nearest fp32 value (clocklm keeps its config's floats in fp32)."""
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def bigram_row(prev, cur, buckets):
    """The bigram table row of the pair (prev, cur) (docs/MODEL.md); buckets - 1 without a previous token."""
    if prev < 0:
        return buckets - 1
    mask = (1 << 64) - 1
    x = (prev << 32) | cur
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & mask
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & mask
    x ^= x >> 33
    return x % (buckets - 1)


def rms_norm(x, eps, gain=None):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * gain if gain is not None else y


def mlp_hidden(cfg):
    def up64(h):
        return max(64, int(math.ceil(h / 64.0 - 1e-9)) * 64)

    h = up64(f32(cfg["mlp_ratio"]) * cfg["d_model"])
    return up64(h * 2.0 / 3.0) if cfg["activation"] == "swiglu" else h


class ClockLM:
    """The clocklm GPT from an export folder; logits() is its forward (no training)."""

    def __init__(self, cfg, weights):
        self.cfg = cfg
        self.w = weights
        c = cfg
        self.L, self.d, self.H, self.Hkv, self.hd = c["n_layer"], c["d_model"], c["n_head"], c["n_kv_head"], c["head_dim"]
        self.V = c["vocab_size"]
        self.eps = f32(c["norm_eps"])
        self.cap = f32(c["logit_softcap"])
        self.hidden = mlp_hidden(c)
        if self.hidden != c.get("mlp_hidden", self.hidden):
            raise ValueError(f"MLP width {self.hidden} differs from the export's {c['mlp_hidden']}")

    @staticmethod
    def load(folder):
        with open(os.path.join(folder, "clocklm_config.json")) as f:
            meta = json.load(f)
        if meta.get("format") != "clocklm-export" or meta.get("format_version") != 1:
            raise ValueError(f"{folder}: clocklm_config.json is not a clocklm export (format_version 1)")
        return ClockLM(meta["model"], load_safetensors(os.path.join(folder, "model.safetensors")))

    def _gain(self, name):
        return self.w.get(name) if self.cfg["norm_gain"] else None

    def _rope(self, T):
        h2 = self.hd // 2
        base = f32(self.cfg["rope_base"])
        t = torch.arange(T, dtype=torch.float64)[:, None]
        inv = torch.tensor([base ** (-2.0 * i / self.hd) for i in range(h2)], dtype=torch.float64)[None, :]
        ang = t * inv
        return torch.cos(ang).to(torch.float32), torch.sin(ang).to(torch.float32)

    @staticmethod
    def _rotate(x, cos, sin):  # x [B, heads, T, hd]: (x_i, x_{i+hd/2}) rotated by +angle
        h2 = x.shape[-1] // 2
        a, b = x[..., :h2], x[..., h2:]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)

    def _attention(self, q, k, v):  # [B, H|Hkv, T, hd] -> [B, H, T, hd]
        T = q.shape[2]
        group = self.H // self.Hkv
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(self.hd))
        i = torch.arange(T)[:, None]
        j = torch.arange(T)[None, :]
        visible = j <= i
        if self.cfg["attn_window"] > 0:
            visible &= j > i - self.cfg["attn_window"]
        s = s.masked_fill(~visible, float("-inf"))
        return torch.matmul(torch.softmax(s, dim=-1), v)

    def _block(self, l, x, ids, cos, sin):
        B, T, _ = x.shape
        p = f"blocks.{l}."
        w = self.w
        h = rms_norm(x, self.eps, self._gain(p + "attn_norm.gain"))
        q = (h @ w[p + "attn.wq"].T).view(B, T, self.H, self.hd).transpose(1, 2)
        k = (h @ w[p + "attn.wk"].T).view(B, T, self.Hkv, self.hd).transpose(1, 2)
        v = (h @ w[p + "attn.wv"].T).view(B, T, self.Hkv, self.hd).transpose(1, 2)
        if self.cfg["qk_norm"]:
            q = rms_norm(q, self.eps, self._gain(p + "attn.q_norm.gain"))
            k = rms_norm(k, self.eps, self._gain(p + "attn.k_norm.gain"))
        q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
        if p + "attn.value_embed" in w:
            v = v + w[p + "attn.value_embed"][ids].view(B, T, self.Hkv, self.hd).transpose(1, 2)
        o = self._attention(q, k, v).transpose(1, 2).reshape(B, T, self.H * self.hd)
        mid = x + o @ w[p + "attn.wo"].T
        hn = rms_norm(mid, self.eps, self._gain(p + "mlp_norm.gain"))
        u = hn @ w[p + "mlp.w_in"].T
        act = self.cfg["activation"]
        if act == "relu2":
            a = torch.relu(u).square()
        elif act == "gelu":
            a = 0.5 * u * (1.0 + torch.tanh(0.7978845608028654 * (u + 0.044715 * u * u * u)))
        elif act == "swiglu":
            g = hn @ w[p + "mlp.w_gate"].T
            a = u * g * torch.sigmoid(g)
        else:
            raise ValueError(f"unknown activation {act}")
        return mid + a @ w[p + "mlp.w_out"].T

    def _embed(self, ids):
        x = self.w["wte"][ids]
        if self.cfg.get("smear", False):  # token smearing (docs/MODEL.md)
            lam, g = self.w["smear"][0], self.w["smear"][1:]
            gate = torch.sigmoid(x[..., : g.numel()] @ g)  # [B, T]
            prev = torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1)
            x = x + (lam * gate).unsqueeze(-1) * prev
        K = self.cfg["bigram_buckets"]
        if K > 0:
            rows = [[bigram_row(r[t - 1] if t > 0 else -1, r[t], K) for t in range(len(r))] for r in ids.tolist()]
            x = x + self.w["bigram_embed"][torch.tensor(rows, dtype=torch.long)]
        return x

    @torch.no_grad()
    def logits(self, ids):
        """Softcapped logits [B, T, vocab_size] (fp32) of token rows ids [B, T], each row from position 0."""
        ids = torch.as_tensor(ids, dtype=torch.long)
        if ids.dim() != 2 or ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= self.V:
            raise ValueError(f"token rows must be [B, T] ids in [0, {self.V})")
        cos, sin = self._rope(ids.shape[1])
        x = x0 = self._embed(ids)
        for l in range(self.L):
            mix = self.w.get(f"blocks.{l}.x0_mix")
            if mix is not None:
                x = mix[0] * x + mix[1] * x0
            x = self._block(l, x, ids, cos, sin)
        head = self.w["wte"] if self.cfg["tie_embeddings"] else self.w["lm_head"]
        z = rms_norm(x, self.eps, self._gain("final_norm.gain")) @ head[: self.V].T
        return self.cap * torch.tanh(z / self.cap) if self.cap > 0 else z


def token_bytes(tokenizer_path):
    """Byte length of each id of a clocklm tokenizer file (0 for special tokens), as bits per byte counts."""
    with open(tokenizer_path) as f:
        t = json.load(f)
    lens = [None] * t["vocab_size"]
    for i in t["byte_ids"]:
        lens[i] = 1
    for left, right, new in t["merges"]:
        lens[new] = lens[left] + lens[right]
    for _, i in t["special_tokens"]:
        lens[i] = 0
    if any(n is None for n in lens):
        raise ValueError(f"{tokenizer_path}: not every id is defined")
    return lens


def read_rows(path):
    rows = [[int(x) for x in line.split()] for line in open(path) if line.strip()]
    if not rows or any(len(r) != len(rows[0]) for r in rows):
        raise ValueError(f"{path}: expected rows of token ids, all the same length")
    return rows


def bits_per_byte(model, rows, lens, val_tokens, batch=8):
    """bpb over the first val_tokens target positions of rows of T+1 tokens (docs/EVAL.md)."""
    nats, tokens, nbytes, positions = 0.0, 0, 0, 0
    for r0 in range(0, len(rows), batch):
        if positions >= val_tokens:
            break
        chunk = torch.tensor(rows[r0 : r0 + batch], dtype=torch.long)
        s = model.logits(chunk[:, :-1])
        loss = torch.logsumexp(s, dim=-1) - s.gather(-1, chunk[:, 1:, None])[..., 0]
        for b in range(chunk.shape[0]):
            for t in range(chunk.shape[1] - 1):
                if positions >= val_tokens:
                    break
                positions += 1
                n = lens[int(chunk[b, t + 1])]
                if n > 0:
                    nats += float(loss[b, t])
                    tokens += 1
                    nbytes += n
    return {"bpb": nats / (math.log(2.0) * nbytes), "nats": nats, "tokens": tokens, "bytes": nbytes,
            "positions": positions}


def main(argv):
    ap = argparse.ArgumentParser(description="clocklm's GPT in plain PyTorch, from an export folder")
    sub = ap.add_subparsers(dest="cmd", required=True)
    lg = sub.add_parser("logits", help="logits of token rows, as little-endian fp32 [rows, T, vocab_size]")
    lg.add_argument("export")
    lg.add_argument("--input", required=True)
    lg.add_argument("--out", required=True)
    bp = sub.add_parser("bpb", help="bits per byte over rows of T+1 tokens")
    bp.add_argument("export")
    bp.add_argument("--rows", required=True)
    bp.add_argument("--val-tokens", type=int, required=True)
    bp.add_argument("--tokenizer", help="clocklm tokenizer file (default: EXPORT/clocklm_tokenizer.json)")
    a = ap.parse_args(argv)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    model = ClockLM.load(a.export)
    if a.cmd == "logits":
        rows = read_rows(a.input)
        z = torch.cat([model.logits(torch.tensor(rows[i : i + 8])) for i in range(0, len(rows), 8)])
        with open(a.out, "wb") as f:
            f.write(_f32_bytes(z))
        print(f"logits {list(z.shape)} -> {a.out}")
    else:
        lens = token_bytes(a.tokenizer or os.path.join(a.export, "clocklm_tokenizer.json"))
        print(json.dumps(bits_per_byte(model, read_rows(a.rows), lens, a.val_tokens)))
    return 0


def _f32_bytes(z):
    flat = z.contiguous().view(-1).tolist()
    return struct.pack(f"<{len(flat)}f", *flat)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
