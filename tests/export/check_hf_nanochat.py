"""Checks a `clocklm export --format hf` folder against Hugging Face transformers' `nanochat` model
type without needing transformers: the schema (config keys, tensor names and shapes) as
configuration_nanochat.py and modeling_nanochat.py define it, and, given clocklm's logits of some
token rows, the logits of an independent forward written from modeling_nanochat.py's math
(NanoChatModel / NanoChatForCausalLM: embedding, RMSNorm before the layers, pre-norm blocks, RoPE
with nanochat's rotate_half = cat(x2, -x1) then QK RMSNorm, relu2 MLP, final norm, lm_head, tanh
softcap), which must match within --tol.

    python3 check_hf_nanochat.py DIR [--input ids.txt --logits clocklm.bin --tol 1e-4]

Exit status 0 when every check passes, 1 with one line per failure otherwise.
"""

import argparse
import json
import math
import os
import struct
import sys

import torch

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from clocklm_torch import load_safetensors, read_rows  # noqa: E402  (the safetensors parser only)

# The fields of NanoChatConfig (configuration_nanochat.py), every one written by the export.
CONFIG_FIELDS = {
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "max_position_embeddings", "hidden_act", "attention_dropout", "rms_norm_eps",
    "initializer_range", "rope_parameters", "use_cache", "final_logit_softcapping", "attention_bias",
    "bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings",
}
# Keys PreTrainedConfig itself reads (and the legacy rope_theta older NanoChatConfig versions take).
COMMON_KEYS = {"architectures", "model_type", "torch_dtype", "dtype", "rope_theta", "transformers_version"}


def expected_tensors(c):
    """Parameter names and shapes of NanoChatForCausalLM (modeling_nanochat.py); RMSNorm has no weight."""
    d, H, Hkv, I, V = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["intermediate_size"], c["vocab_size"]
    hd = d // H
    t = {"model.embed_tokens.weight": [V, d], "lm_head.weight": [V, d]}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "self_attn.q_proj.weight"] = [H * hd, d]
        t[p + "self_attn.k_proj.weight"] = [Hkv * hd, d]
        t[p + "self_attn.v_proj.weight"] = [Hkv * hd, d]
        t[p + "self_attn.o_proj.weight"] = [d, H * hd]
        t[p + "mlp.fc1.weight"] = [I, d]
        t[p + "mlp.fc2.weight"] = [d, I]
    return t


def check_schema(folder, errors):
    c = json.load(open(os.path.join(folder, "config.json")))
    if c.get("model_type") != "nanochat":
        errors.append(f"config.json: model_type {c.get('model_type')!r}, expected 'nanochat'")
    if c.get("architectures") != ["NanoChatForCausalLM"]:
        errors.append(f"config.json: architectures {c.get('architectures')!r}")
    missing = CONFIG_FIELDS - set(c)
    extra = set(c) - CONFIG_FIELDS - COMMON_KEYS
    if missing:
        errors.append(f"config.json: missing {sorted(missing)}")
    if extra:
        errors.append(f"config.json: keys NanoChatConfig does not have {sorted(extra)}")
    if errors:
        return c
    if c["hidden_act"] != "relu2" or c["attention_bias"] or c["tie_word_embeddings"]:
        errors.append("config.json: hidden_act must be relu2, attention_bias and tie_word_embeddings false")
    if c["hidden_size"] % c["num_attention_heads"] or c["num_attention_heads"] % c["num_key_value_heads"]:
        errors.append("config.json: heads do not divide hidden_size / num_attention_heads")
    rp = c["rope_parameters"]
    if rp.get("rope_type") != "default" or not rp.get("rope_theta", 0) > 0:
        errors.append(f"config.json: rope_parameters {rp}")
    for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if not 0 <= c[k] < c["vocab_size"]:
            errors.append(f"config.json: {k} {c[k]} outside the vocabulary")
    g = json.load(open(os.path.join(folder, "generation_config.json")))
    if g.get("eos_token_id") != c["eos_token_id"] or g.get("bos_token_id") != c["bos_token_id"]:
        errors.append("generation_config.json: bos/eos differ from config.json")
    check_tokenizer(folder, c, errors)
    with open(os.path.join(folder, "model.safetensors"), "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    if n % 8:
        errors.append(f"model.safetensors: header length {n} is not a multiple of 8")
    if header.get("__metadata__", {}).get("format") != "pt":
        errors.append("model.safetensors: __metadata__.format must be 'pt' for transformers")
    want = expected_tensors(c)
    have = {k: v["shape"] for k, v in header.items() if k != "__metadata__"}
    for k in sorted(set(want) | set(have)):
        if want.get(k) != have.get(k):
            errors.append(f"model.safetensors: {k} has shape {have.get(k)}, nanochat expects {want.get(k)}")
    return c


def check_tokenizer(folder, c, errors):
    """Where the folder has Hugging Face tokenizer files: both present, the BOS an added special token."""
    tj, tc = os.path.join(folder, "tokenizer.json"), os.path.join(folder, "tokenizer_config.json")
    if not os.path.exists(tj) and not os.path.exists(tc):
        print(f"{folder}: no tokenizer.json (the tokenizer is in clocklm_tokenizer.json only)")
        return
    if not (os.path.exists(tj) and os.path.exists(tc)):
        errors.append("tokenizer.json and tokenizer_config.json must come together")
        return
    added = {t["id"]: t for t in json.load(open(tj)).get("added_tokens", [])}
    bos = added.get(c["bos_token_id"])
    if bos is None or not bos.get("special"):
        errors.append(f"tokenizer.json: bos_token_id {c['bos_token_id']} is not an added special token")
    elif json.load(open(tc)).get("bos_token") != bos["content"]:
        errors.append("tokenizer_config.json: bos_token differs from the BOS in tokenizer.json")


def rms_norm(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rotate_half(x):  # nanochat's: cat(x2, -x1)
    h = x.shape[-1] // 2
    return torch.cat((x[..., h:], -x[..., :h]), dim=-1)


@torch.no_grad()
def nanochat_logits(c, w, ids):
    """NanoChatForCausalLM's forward, eager attention, fp32."""
    B, T = ids.shape
    d, H, Hkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hd, eps = d // H, c["rms_norm_eps"]
    inv_freq = 1.0 / (c["rope_parameters"]["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    freqs = torch.arange(T).float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((T, T), float("-inf")).triu(1)
    h = rms_norm(w["model.embed_tokens.weight"][ids], eps)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms_norm(h, eps)
        q = (x @ w[p + "self_attn.q_proj.weight"].T).view(B, T, -1, hd).transpose(1, 2)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).view(B, T, -1, hd).transpose(1, 2)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).view(B, T, -1, hd).transpose(1, 2)
        q = rms_norm(q * cos + rotate_half(q) * sin, eps)
        k = rms_norm(k * cos + rotate_half(k) * sin, eps)
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
        att = torch.softmax(q @ k.transpose(2, 3) * hd ** -0.5 + mask, dim=-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, -1)
        h = h + o @ w[p + "self_attn.o_proj.weight"].T
        x = rms_norm(h, eps)
        h = h + torch.relu(x @ w[p + "mlp.fc1.weight"].T).square() @ w[p + "mlp.fc2.weight"].T
    z = rms_norm(h, eps) @ w["lm_head.weight"].T
    cap = c["final_logit_softcapping"]
    return cap * torch.tanh(z / cap) if cap is not None else z


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--input", help="token rows (one row of ids per line)")
    ap.add_argument("--logits", help="clocklm's logits of those rows, fp32 [rows, T, vocab_size]")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args(argv)
    errors = []
    c = check_schema(a.folder, errors)
    if not errors and a.input and a.logits:
        w = load_safetensors(os.path.join(a.folder, "model.safetensors"))
        ids = torch.tensor(read_rows(a.input), dtype=torch.long)
        z = nanochat_logits(c, w, ids)
        raw = open(a.logits, "rb").read()
        ref = torch.tensor(struct.unpack(f"<{len(raw) // 4}f", raw)).view(z.shape)
        diff = float((z - ref).abs().max())
        print(f"nanochat forward vs clocklm: max |diff| {diff:.3g} over {list(z.shape)} (tolerance {a.tol:g})")
        if not diff <= a.tol:
            errors.append(f"logits differ from clocklm's by {diff:.3g} > {a.tol:g}")
    for e in errors:
        print(e)
    if not errors:
        print(f"{a.folder}: matches transformers' nanochat schema")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
