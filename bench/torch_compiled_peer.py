#!/usr/bin/env python3
# The PyTorch peer a user would write for speed: clocklm's GPT (bench/torch_peer.py's model and its
# config mapping) under torch.compile, F.scaled_dot_product_attention(is_causal=True), bf16 autocast,
# Muon on stacked same-shape matrices with one batched bf16 Newton-Schulz per shape (clocklm's
# coefficients), fused AdamW for the embeddings, head and scalars, and no host sync in a step (the
# loss is read only on logged steps). Two modes:
#   speed (default): timed steps on random tokens; tokens/s and MFU, with the model FLOPs per token
#     that `clocklm model` prints, over the bf16 matmul peak measured here (torch.matmul), over
#     clocklm's measured peak (--ceiling) and over 989 TFLOP/s (an H100 SXM's dense bf16).
#   train (--data DIR): trains on a prepared clocklm dataset for --budget seconds with clocklm's
#     schedules, batch and config, then scores val bpb on the same val targets with the same byte
#     counts as `clocklm train` (bench/peer_data.py); --budget 0 scores the initial weights.
# On a torch without torch.compile / SDPA / fused AdamW (Debian's 1.13) it runs eagerly and lists
# what was unavailable. Prints one JSON line on stdout; progress goes to stderr.
#
# usage: bench/torch_compiled_peer.py --config d12 [--set key=value ...] [--device cuda|cpu]
#          [--batch 16 --seq 2048 --steps 10 --warmup 3 --ceiling GFLOPS]      (speed)
#          [--data DIR --budget 120 --val-tokens N]                              (train)
import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_peer as tp  # noqa: E402  (sets the BLAS threads before torch loads)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from gpu_compare import H100_BF16_FLOPS  # noqa: E402
from peer_data import Bpb, Dataset  # noqa: E402

# Model options clocklm has and this peer's GPT does not: a config must leave them at their default.
UNMODELLED = dict(attn_window=0, bigram_buckets=0, mtp_weight=0.0, value_embeds=0, x0_skips=False)


def log(*a):
    print("compiled_peer:", *a, file=sys.stderr, flush=True)


def features(device, want_compile):
    """What this torch offers; each missing one is listed as unavailable."""
    import inspect
    f = dict(compile=want_compile and hasattr(torch, "compile"),
             sdpa=hasattr(F, "scaled_dot_product_attention"),
             fused_adamw=device == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters,
             foreach_clip="foreach" in inspect.signature(torch.nn.utils.clip_grad_norm_).parameters)
    return f


def flops_per_token(args, m, T):
    """Training FLOPs per token as clocklm counts them (ModelLayout::flops_per_token), read from the
    line `clocklm model` prints for this model at row length T."""
    sets = [f"model.{k}={json.dumps(v) if isinstance(v, bool) else v}" for k, v in m.items()
            if k in tp.MODEL_DEFAULTS and k != "seq_len"] + [f"model.seq_len={T}"]
    # A batch of one row keeps the config valid at any T (the count does not depend on it).
    sets += ["train.micro_batch=1", f"train.batch_tokens={T}", "train.batch_schedule=", "train.seq_schedule="]
    cmd = [args.clocklm, "model", "--config", args.config] + [x for s in args.set + sets for x in ("--set", s)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    hit = re.search(r"training FLOPs per token \(T=(\d+)\): ([0-9.eE+-]+)", r.stdout)
    if r.returncode != 0 or not hit or int(hit.group(1)) != T:
        sys.exit(f"compiled_peer: no FLOPs line from {' '.join(cmd)}: {r.stderr.strip()}")
    return float(hit.group(2))


def batched_newton_schulz(sched, margin):
    """X <- a X + (b A + c A^2) X over a stack [N, r, c] in bf16, each matrix on its short side,
    after X0 = G / (||G||_F * margin + 1e-7) (the norm in fp32)."""
    def ns(G):
        G = G.float()
        X = (G / (G.norm(dim=(-2, -1), keepdim=True) * margin + 1e-7)).bfloat16()
        tall = X.size(-2) > X.size(-1)
        if tall:
            X = X.transpose(-2, -1)
        for a, b, c in sched:
            A = X @ X.transpose(-2, -1)
            X = a * X + (b * A + c * (A @ A)) @ X
        return (X.transpose(-2, -1) if tall else X).float()
    return ns


_NS = {}


def newton_schulz_for(coeffs, steps, compiled):
    """One function per schedule for the whole process, so that a second optimizer (after the
    compilation warmup) reuses the compiled code."""
    key = (coeffs, steps, compiled)
    if key not in _NS:
        ns = batched_newton_schulz(*tp.ns_schedule(coeffs, steps))
        _NS[key] = torch.compile(ns, dynamic=False) if compiled else ns
    return _NS[key]


class StackedMuon:
    """Muon over all matrix parameters: buf = mu buf + g; u = g + mu buf (Nesterov) or buf; the row
    blocks clocklm orthogonalises separately (wq | wk | wv, w_in | w_gate) grouped by shape and
    stacked, one batched Newton-Schulz per shape; p = p (1 - lr wd) - lr sqrt(max(1, r/c)) O."""

    def __init__(self, items, c, compile_ns):
        self.params = [p for p, _ in items]
        self.bufs = [torch.zeros_like(p) for p in self.params]
        self.nesterov = c["nesterov"]
        self.groups = {}  # (rows, cols) -> [(param index, first row)]
        for i, (p, splits) in enumerate(items):
            r0 = 0
            for r in splits or [p.shape[0]]:
                self.groups.setdefault((r, p.shape[1]), []).append((i, r0))
                r0 += r
        self.ns = newton_schulz_for(c.get("ns_coeffs", "quintic"), c["ns_steps"], compile_ns)

    @torch.no_grad()
    def step(self, lr, momentum, wd):
        grads = [p.grad for p in self.params]
        torch._foreach_mul_(self.bufs, momentum)
        torch._foreach_add_(self.bufs, grads)
        u = torch._foreach_add(grads, self.bufs, alpha=momentum) if self.nesterov else self.bufs
        if wd:
            torch._foreach_mul_(self.params, 1.0 - lr * wd)
        for (r, c), parts in self.groups.items():
            O = self.ns(torch.stack([u[i][r0:r0 + r] for i, r0 in parts]))
            views = [self.params[i][r0:r0 + r] for i, r0 in parts]
            torch._foreach_add_(views, list(O.unbind(0)), alpha=-lr * math.sqrt(max(1.0, r / c)))


class Optimizers:
    """Muon (stacked) for the matrix group when the config says muon, AdamW for every other group;
    set(frac) applies clocklm's schedules (src/train/schedule.cpp) at a budget fraction."""

    def __init__(self, model, optim, train, feats):
        self.optim, self.train, self.clip = optim, train, optim["grad_clip"]
        self.params = list(model.parameters())
        by_kind = {"matrix": [], "embed": [], "head": [], "scalar": []}
        for _, p, kind, splits in model.param_groups():
            by_kind[kind].append((p, splits))
        self.muon = None
        if optim["matrix"]["kind"] == "muon":
            self.muon = StackedMuon(by_kind.pop("matrix"), optim["matrix"], feats["compile"])
        groups = [dict(params=[p for p, _ in ps], lr=optim[k]["lr"], betas=(optim[k]["beta1"], optim[k]["beta2"]),
                       eps=optim[k]["eps"], weight_decay=optim[k]["weight_decay"], base_lr=optim[k]["lr"],
                       base_wd=optim[k]["weight_decay"]) for k, ps in by_kind.items() if ps]
        extra = dict(fused=True) if feats["fused_adamw"] else dict(foreach=True)
        self.adamw = torch.optim.AdamW(groups, **extra)
        self.foreach_clip = feats["foreach_clip"]
        self.set(0.0)

    def set(self, frac):
        t, frac = self.train, min(max(frac, 0.0), 1.0)
        lr = 1.0
        if t.get("warmup_frac", 0) > 0 and frac < t["warmup_frac"]:
            lr = frac / t["warmup_frac"]
        wdn = t.get("warmdown_frac", 0)
        if wdn > 0 and frac > 1 - wdn:
            lr = min(lr, 1.0 + (t.get("final_lr_frac", 0.0) - 1.0) * (frac - (1 - wdn)) / wdn)
        mw, m = t.get("muon_momentum_warmup_frac", 0), self.optim["matrix"]["momentum"]
        mom = t["muon_momentum_start"] + (m - t["muon_momentum_start"]) * frac / mw if mw > 0 and frac < mw else m
        wd = {"linear": 1.0 - frac, "lr": lr}.get(t.get("wd_schedule", "constant"), 1.0)
        for g in self.adamw.param_groups:
            g["lr"], g["weight_decay"] = g["base_lr"] * lr, g["base_wd"] * wd
        mc = self.optim["matrix"]
        self.now = (mc["lr"] * lr, mom, mc["weight_decay"] * wd)

    def step(self):
        if self.clip > 0:
            kw = dict(foreach=True) if self.foreach_clip else {}
            torch.nn.utils.clip_grad_norm_(self.params, self.clip, **kw)
        if self.muon:
            self.muon.step(*self.now)
        self.adamw.step()
        for p in self.params:
            p.grad = None


def measured_peak(device, bf16):
    """Best FLOP/s of torch.matmul at 8192^3 on a GPU (1024^3 on a CPU), in the matmul precision."""
    n, reps = (8192, 20) if device == "cuda" else (1024, 3)
    dt = torch.bfloat16 if bf16 else torch.float32
    a, b = torch.randn(n, n, device=device, dtype=dt), torch.randn(n, n, device=device, dtype=dt)
    best = float("inf")
    for _ in range(reps + 2):
        sync(device)
        t0 = time.perf_counter()
        a @ b
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def build(args, vocab=None):
    """The config, the model (compiled where possible) and the features used."""
    if vocab is not None:
        args.set.append(f"model.vocab_size={vocab}")
    name, m, optim, train = tp.load_config(args)
    odd = {k: m[k] for k, v in UNMODELLED.items() if k in m and m[k] != v}
    if odd:
        sys.exit(f"compiled_peer: the config uses options this peer does not model: {odd}")
    feats = features(args.device, not args.no_compile)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("compiled_peer: --device cuda but torch.cuda.is_available() is False")
    torch.manual_seed(args.seed)
    T = args.seq or m["seq_len"]
    model = tp.GPT(m, T).to(args.device)
    step_fn = torch.compile(model) if feats["compile"] else model
    missing = [k + (" (--no-compile)" if k == "compile" and args.no_compile else "") for k, v in feats.items() if not v]
    log(f"{name}: torch {torch.__version__}, {args.device}, T {T}; unavailable here: "
        f"{', '.join(missing) if missing else 'nothing'}" + (" (eager, manual causal attention)" if not feats["sdpa"] else ""))
    return name, m, optim, train, model, step_fn, feats, T


def train_step(step_fn, opt, micro, bf16, device):
    """One optimizer step over the micro-batches [(inputs, targets)]; the summed loss stays on the
    device."""
    total = None
    for x, y in micro:
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            loss = step_fn(x, y) / len(micro)
        loss.backward()
        total = loss.detach() if total is None else total + loss.detach()
    opt.step()
    return total


def report_speed(out, fpt, tps, peaks):
    out["flops_per_token"] = fpt
    for key, peak in peaks.items():
        if peak:
            out[f"mfu_{key}"] = fpt * tps / peak
            out[f"peak_{key}_gflops"] = peak / 1e9


def run_speed(args):
    name, m, optim, train, model, step_fn, feats, T = build(args)
    B, V, bf16 = args.batch, m["vocab_size"], args.precision == "bf16"
    opt = Optimizers(model, optim, train, feats)
    gen = torch.Generator().manual_seed(42)
    x = torch.randint(0, V, (B, T), generator=gen).to(args.device)
    y = torch.randint(0, V, (B, T), generator=gen).to(args.device)
    t0 = time.perf_counter()
    for _ in range(args.warmup):  # includes compilation
        train_step(step_fn, opt, [(x, y)], bf16, args.device)
    sync(args.device)
    log(f"warmup ({args.warmup} steps, compilation included): {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = train_step(step_fn, opt, [(x, y)], bf16, args.device)
    sync(args.device)
    dt = time.perf_counter() - t0
    tps = B * T * args.steps / dt
    out = dict(peer="pytorch-compiled", mode="speed", torch=torch.__version__, device=args.device, config=name,
               batch=B, seq=T, precision=args.precision, params=sum(p.numel() for p in model.parameters()),
               features=feats, steps=args.steps, warmup=args.warmup, step_seconds=dt / args.steps,
               tokens_per_second=tps, loss_last=float(loss))
    peaks = dict(measured=measured_peak(args.device, bf16), clocklm=args.ceiling * 1e9 if args.ceiling else None,
                 h100=H100_BF16_FLOPS if args.device == "cuda" else None)
    report_speed(out, flops_per_token(args, m, T), tps, peaks)
    return out


def evaluate(model, ds, T, val_tokens, B, bf16, device):
    """Val bpb over the first val_tokens target positions, B rows per forward."""
    inputs, targets = ds.val_rows(T, val_tokens)
    acc = Bpb(ds.token_bytes)
    with torch.no_grad():
        for i in range(0, inputs.shape[0], B):
            x, y = inputs[i:i + B].to(device), targets[i:i + B].to(device)
            with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
                loss = model(x, y, reduction="none")
            acc.add(y.reshape(-1), loss.float())
    return acc.result()


def run_train(args):
    ds = Dataset(args.data)
    name, m, optim, train, model, step_fn, feats, T = build(args, vocab=ds.vocab_size)
    if train.get("seq_schedule") or train.get("batch_schedule"):
        sys.exit("compiled_peer: train.seq_schedule / train.batch_schedule are not mirrored here")
    B, bf16 = train["micro_batch"], args.precision == "bf16"
    if train["batch_tokens"] % (B * T):
        sys.exit(f"compiled_peer: train.batch_tokens {train['batch_tokens']} is not a multiple of {B} x {T}")
    accum = train["batch_tokens"] // (B * T)
    rows = ds.rows("train", T).to(args.device)
    # The permutations are drawn on the device: a host-made one would cost a copy and a wait.
    gen = torch.Generator(device=args.device).manual_seed(train.get("seed", 1337))
    order, used = torch.randperm(rows.shape[0], generator=gen, device=args.device), 0

    def next_step():  # accum micro-batches of B rows, epochs reshuffled (the peer's own order)
        nonlocal order, used
        out = []
        for _ in range(accum):
            if used + B > order.shape[0]:
                order, used = torch.randperm(rows.shape[0], generator=gen, device=args.device), 0
            r = rows[order[used:used + B]]
            used += B
            out.append((r[:, :-1], r[:, 1:]))
        return out

    if args.budget > 0 and feats["compile"]:  # compile outside the budget, then start from the same weights
        init = {k: v.clone() for k, v in model.state_dict().items()}
        t0 = time.perf_counter()
        warm = Optimizers(model, optim, train, feats)
        for _ in range(2):
            train_step(step_fn, warm, next_step(), bf16, args.device)
        sync(args.device)
        model.load_state_dict(init)
        log(f"compiled in {time.perf_counter() - t0:.1f} s (outside the budget; weights restored)")
    opt = Optimizers(model, optim, train, feats)
    steps, t0, last = 0, time.perf_counter(), None
    while args.budget > 0 and time.perf_counter() - t0 < args.budget:
        opt.set((time.perf_counter() - t0) / args.budget)
        last = train_step(step_fn, opt, next_step(), bf16, args.device)
        steps += 1
        if steps % args.log_every == 0:  # the only host reads of the loop
            el = time.perf_counter() - t0
            log(f"step {steps}: loss {float(last):.4f}, {steps * accum * B * T / el:.0f} tokens/s, {el:.0f} s")
    sync(args.device)
    secs = time.perf_counter() - t0 if steps else 0.0
    tps = steps * accum * B * T / secs if secs else 0.0
    val = evaluate(model, ds, T, args.val_tokens or train["val_tokens"], B, bf16, args.device)
    log(f"val bpb {val['bpb']:.4f} over {val['positions']} positions ({val['tokens']} tokens, {val['bytes']} bytes)")
    out = dict(peer="pytorch-compiled", mode="train", torch=torch.__version__, device=args.device, config=name,
               micro_batch=B, seq=T, batch_tokens=train["batch_tokens"], precision=args.precision,
               features=feats, steps=steps, train_seconds=secs, tokens_per_second=tps,
               loss_last=float(last) if last is not None else None, val=val)
    if steps:
        report_speed(out, flops_per_token(args, m, T), tps,
                     dict(clocklm=args.ceiling * 1e9 if args.ceiling else None,
                          h100=H100_BF16_FLOPS if args.device == "cuda" else None))
    return out


def main():
    ap = argparse.ArgumentParser(description="torch.compile'd PyTorch peer of clocklm's training")
    tp.add_model_args(ap)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16", help="autocast dtype of the matmuls")
    ap.add_argument("--no-compile", action="store_true", help="run eagerly even where torch.compile exists")
    ap.add_argument("--optimizer", choices=["config", "muon", "adamw"], default="config")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0 = all cores)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--ceiling", type=float, default=0, help="clocklm's measured bf16 matmul peak, GFLOP/s")
    ap.add_argument("--batch", type=int, default=8, help="speed: rows per step")
    ap.add_argument("--seq", type=int, default=0, help="row length (default: model.seq_len)")
    ap.add_argument("--steps", type=int, default=10, help="speed: timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="speed: untimed steps first (compilation)")
    ap.add_argument("--data", help="train: a prepared clocklm dataset folder")
    ap.add_argument("--budget", type=float, default=120, help="train: seconds of training (0: score the init)")
    ap.add_argument("--val-tokens", type=int, default=0, help="train: val target positions (default: the config's)")
    ap.add_argument("--log-every", type=int, default=50)
    args = ap.parse_args()
    if args.config == "none":
        sys.exit("compiled_peer: give --config (a preset or a config file clocklm resolves)")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.data and args.seq:
        args.set.append(f"model.seq_len={args.seq}")
    out = run_train(args) if args.data else run_speed(args)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
