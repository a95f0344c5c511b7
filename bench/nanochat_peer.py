#!/usr/bin/env python3
# The PyTorch peer of the recipe: nanochat's recipe trained in plain PyTorch (Debian's python3-torch)
# on a clocklm dataset, then written into a clocklm checkpoint so that `clocklm eval bpb` scores it
# with the same code, the same text and the same byte counts as clocklm's own runs.
#
# "nanochat's recipe" here is the `d4` preset (nanochat's depth rules scaled down: d_model = 64 x depth,
# relu^2 MLP, rotary, qk-norm, untied head, logit softcap 15, Muon for matrices and AdamW for the
# embedding and head at nanochat's learning rates scaled by 1/sqrt(d_model/768), no warmup, linear
# warmdown to 0, Muon momentum warmup, gradient clipping at 1), and the model and optimizers are
# bench/torch_peer.py's (the same architecture as clocklm's GPT, written in PyTorch). Training reads
# random windows of seq_len + 1 tokens from the train split's shards.
#
# usage: /usr/bin/python3 bench/nanochat_peer.py --data DIR --template CKPT --out PEER.ckpt
#            (--steps N | --measure N) [--config d4] [--set key=value ...] [--precision bf16|fp32]
#            [--threads N] [--seed S] [--clocklm build/clocklm]
#   --template  a clocklm checkpoint of the same config and dataset (e.g. from `clocklm train --config
#               d4 --data DIR --set max_steps=1 --out RUN`): its header, metadata and parameter table
#               are reused and only the weights are replaced.
#   --measure N time N steps (after 2 warm-up steps) and print tokens/s as JSON; nothing is written.
# Prints one JSON line (steps, tokens, seconds, tokens/s, final loss) and writes PEER.ckpt atomically.
import argparse
import json
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_peer  # noqa: E402  (sets OPENBLAS_NUM_THREADS from --threads before torch loads)
import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def die(msg):
    sys.exit(f"nanochat_peer: {msg}")


def read_tokens(data_dir, split):
    """All tokens of a split's shards (docs/FORMATS.md: 32-byte header, then uint16/uint32 ids)."""
    man = json.load(open(os.path.join(data_dir, "manifest.json")))
    out = []
    for sh in man["splits"][split]["shards"]:
        path = os.path.join(data_dir, sh["file"])
        with open(path, "rb") as f:
            head = f.read(32)
            magic, version, width, n, vocab, _ = struct.unpack("<8sIIQII", head)
            if magic != b"CLMTOKS\0" or version != 1 or width not in (2, 4):
                die(f"{path} is not a clocklm token shard")
            dtype = torch.int16 if width == 2 else torch.int32
            buf = bytearray(f.read())
            if len(buf) != n * width:
                die(f"{path}: {len(buf)} bytes of tokens, the header says {n * width}")
            t = torch.frombuffer(buf, dtype=dtype).to(torch.int64)
            if width == 2:
                t = t & 0xFFFF
            out.append(t)
    return torch.cat(out)


def schedule(t, momentum, frac):
    """clocklm's schedule_at (src/train/schedule.cpp): lr scale, Muon momentum, weight-decay scale."""
    frac = min(max(frac, 0.0), 1.0)
    lr = 1.0
    if t["warmup_frac"] > 0 and frac < t["warmup_frac"]:
        lr = frac / t["warmup_frac"]
    start = 1.0 - t["warmdown_frac"]
    if t["warmdown_frac"] > 0 and frac > start:
        p = (frac - start) / t["warmdown_frac"]
        lr = min(lr, 1.0 + (t["final_lr_frac"] - 1.0) * p)
    if t["muon_momentum_warmup_frac"] > 0 and frac < t["muon_momentum_warmup_frac"]:
        mom = t["muon_momentum_start"] + (momentum - t["muon_momentum_start"]) * frac / t["muon_momentum_warmup_frac"]
    else:
        mom = momentum
    wd = {"linear": 1.0 - frac, "lr": lr}.get(t["wd_schedule"], 1.0)
    return lr, mom, wd


def fnv_words(data):
    """clocklm's checkpoint checksum (src/checkpoint/checkpoint_format.cpp)."""
    h, M = 0xCBF29CE484222325, (1 << 64) - 1
    words = len(data) // 8
    for (w,) in struct.iter_unpack("<Q", memoryview(data)[:words * 8]):
        h = ((h ^ w) * 0x100000001B3) & M
        h ^= h >> 29
    for b in data[words * 8:]:
        h = ((h ^ b) * 0x100000001B3) & M
    return h


def clocklm_weights(model, names_shapes):
    """The peer's parameters as clocklm's flat fp32 weights, in the template's parameter order."""
    m, H, Hkv, hd, Hd = model.m, model.m["n_head"], model.m["n_kv_head"], model.m["head_dim"], model.Hd
    parts = {"wte": model.wte}
    if model.lm_head is not None:
        parts["lm_head"] = model.lm_head
    if model.final_gain is not None:
        parts["final_norm.gain"] = model.final_gain
    for i, b in enumerate(model.blocks):
        p = f"blocks.{i}."
        q, k, v = b.wqkv.split([H * hd, Hkv * hd, Hkv * hd], dim=0)
        parts.update({p + "attn.wq": q, p + "attn.wk": k, p + "attn.wv": v, p + "attn.wo": b.wo,
                      p + "mlp.w_out": b.w_out})
        if m["activation"] == "swiglu":
            parts[p + "mlp.w_in"], parts[p + "mlp.w_gate"] = b.w_in.split([Hd, Hd], dim=0)
        else:
            parts[p + "mlp.w_in"] = b.w_in
        for ours, theirs in (("attn_norm.gain", "attn_gain"), ("mlp_norm.gain", "mlp_gain"),
                             ("attn.q_norm.gain", "q_gain"), ("attn.k_norm.gain", "k_gain")):
            if hasattr(b, theirs):
                parts[p + ours] = getattr(b, theirs)
    flat = []
    for name, shape in names_shapes:
        if name not in parts:
            die(f"the template has a parameter {name} that the peer does not")
        t = parts.pop(name).detach().float().contiguous()
        if list(t.shape) != list(shape):
            die(f"{name}: the peer's shape {list(t.shape)} differs from the template's {shape}")
        flat.append(t.reshape(-1))
    if parts:
        die(f"the peer has parameters the template lacks: {sorted(parts)}")
    return torch.cat(flat).numpy().tobytes()


def write_checkpoint(template, out, weights):
    blob = open(template, "rb").read()
    magic, version, _, _, meta_bytes, weight_bytes, optim_bytes = struct.unpack("<8sIIQQQQ", blob[:48])
    if magic != b"CLMCKPT\0" or version != 1 or len(blob) != 48 + meta_bytes + weight_bytes + optim_bytes + 8:
        die(f"{template} is not a version-1 clocklm checkpoint")
    if len(weights) != weight_bytes:
        die(f"the peer has {len(weights) // 4} weights, the template {weight_bytes // 4}")
    w0 = 48 + meta_bytes
    body = blob[:w0] + weights + blob[w0 + weight_bytes:-8]
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(body + struct.pack("<Q", fnv_words(body)))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, out)


def template_meta(template):
    with open(template, "rb") as f:
        head = f.read(48)
        meta_bytes = struct.unpack("<Q", head[24:32])[0]
        return json.loads(f.read(meta_bytes))


def main():
    ap = argparse.ArgumentParser(description="nanochat's recipe in PyTorch, scored by clocklm eval bpb")
    ap.add_argument("--config", default="d4")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--data", required=True)
    ap.add_argument("--template", help="a clocklm checkpoint of the same config and dataset")
    ap.add_argument("--out", help="the peer's checkpoint (written atomically)")
    ap.add_argument("--steps", type=int, default=0, help="optimizer steps (the schedule runs over them)")
    ap.add_argument("--measure", type=int, default=0, help="time this many steps and print tokens/s")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--clocklm", default=os.path.join(ROOT, "build", "clocklm"))
    a = ap.parse_args()
    if (a.steps > 0) == (a.measure > 0):
        die("give exactly one of --steps N and --measure N")
    if a.steps > 0 and not (a.template and a.out):
        die("--steps needs --template and --out")
    threads = a.threads if a.threads > 0 else (os.cpu_count() or 1)
    torch.set_num_threads(threads)
    torch.manual_seed(a.seed)

    vocab = json.load(open(os.path.join(a.data, "tokenizer.json")))["vocab_size"]
    cfg_args = argparse.Namespace(config=a.config, set=[f"vocab_size={vocab}"] + a.set, clocklm=a.clocklm,
                                  optimizer="config", **{k: None for k, _ in torch_peer.ARCH_FLAGS},
                                  **{k: None for k in torch_peer.BOOL_FLAGS})
    # the train section (batch, schedule) comes from the same `clocklm model --json`
    name, m, optim, train = torch_peer.load_config(cfg_args)
    T, mb, bt = m["seq_len"], train["micro_batch"], train["batch_tokens"]
    if bt % (mb * T) != 0:
        die(f"batch_tokens {bt} is not a multiple of micro_batch x seq_len = {mb * T}")
    accum = bt // (mb * T)

    data = read_tokens(a.data, "train")
    if data.numel() <= T + 1:
        die("the train split is shorter than one row")
    model = torch_peer.GPT(m, T)
    bf16 = a.precision == "bf16"
    opts = torch_peer.make_optimizers(model, optim, bf16)
    for o in opts:
        for g in o.param_groups:
            g["base_lr"], g["base_wd"] = g["lr"], g["weight_decay"]
    params = list(model.parameters())
    momentum = optim["matrix"]["momentum"]
    gen = torch.Generator().manual_seed(a.seed)

    def batch():
        starts = torch.randint(0, data.numel() - T - 1, (mb,), generator=gen)
        rows = torch.stack([data[s:s + T + 1] for s in starts.tolist()])
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()

    steps = a.steps if a.steps > 0 else a.measure + 2
    n_params = sum(p.numel() for p in params)
    print(f"nanochat_peer: {name}: {n_params:,} params, {steps} steps of {bt} tokens ({accum} x {mb} x {T}), "
          f"{a.precision}, {threads} threads, torch {torch.__version__}", file=sys.stderr, flush=True)
    times, loss_v = [], float("nan")
    t_start = time.perf_counter()
    for step in range(steps):
        t0 = time.perf_counter()
        lr_s, mom, wd_s = schedule(train, momentum, step / a.steps if a.steps > 0 else 0.0)
        for o in opts:
            for g in o.param_groups:
                g["lr"], g["weight_decay"] = g["base_lr"] * lr_s, g["base_wd"] * wd_s
                if "momentum" in g:
                    g["momentum"] = mom
        for p in params:
            p.grad = None
        total = 0.0
        for _ in range(accum):
            x, y = batch()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = model(x, y)
            (loss / accum).backward()
            total += loss.item() / accum
        if optim["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, optim["grad_clip"])
        for o in opts:
            o.step()
        times.append(time.perf_counter() - t0)
        loss_v = total
        if step % 100 == 0 or step == steps - 1:
            print(f"nanochat_peer: step {step + 1}/{steps} loss {total:.4f} {times[-1]:.3f} s",
                  file=sys.stderr, flush=True)
    wall = time.perf_counter() - t_start
    if a.measure > 0:
        t = sorted(times[2:])
        print(json.dumps({"peer": "nanochat-pytorch", "config": name, "precision": a.precision,
                          "threads": threads, "batch_tokens": bt, "steps_timed": len(t),
                          "tokens_per_second_median": bt / t[len(t) // 2],
                          "tokens_per_second_best": bt / t[0], "torch": torch.__version__}), flush=True)
        return
    meta = template_meta(a.template)
    write_checkpoint(a.template, a.out, clocklm_weights(model, meta["params"]))
    print(json.dumps({"peer": "nanochat-pytorch", "config": name, "precision": a.precision, "threads": threads,
                      "steps": steps, "tokens": steps * bt, "wall_seconds": wall,
                      "tokens_per_second": steps * bt / wall, "final_loss": loss_v, "checkpoint": a.out,
                      "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
