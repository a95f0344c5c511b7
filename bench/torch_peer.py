#!/usr/bin/env python3
# Speed peer for `clocklm bench train`: the same GPT training step (forward, backward, global-norm
# clip, Muon+AdamW or all-AdamW update) written in plain PyTorch (1.13, Debian's python3-torch), run on
# random tokens. It exists only to compare tokens/s with clocklm on the same machine; it is not a
# reference implementation and nothing in clocklm depends on it. See bench/train_vs_torch.sh.
#
# usage: /usr/bin/python3 bench/torch_peer.py --config byte-11m [--set key=value ...]
#            [--precision fp32|bf16] [--optimizer config|muon|adamw] [--batch 16] [--seq 256]
#            [--steps 5] [--warmup 2] [--threads N] [--ns-precision auto|bf16|fp32] [--clocklm build/clocklm]
#            [--device cpu|cuda]
# --config takes a preset name (resolved by `clocklm model --config NAME --json`), a resolved config
# JSON file (RUN/config.json, or the saved output of `clocklm model --json`), or "none" (the
# ModelConfig defaults). Architecture flags (--n-layer, --d-model, ...) override any of them.
# Prints one JSON line on stdout; progress goes to stderr.
import argparse
import json
import math
import os
import subprocess
import sys
import time


def _threads_from_argv():
    for i, a in enumerate(sys.argv):
        if a == "--threads" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return "0"


# A pthread OpenBLAS (Debian's torch takes its fp32 GEMM from libblas.so.3) sizes its own thread pool
# when it is loaded, from OPENBLAS_NUM_THREADS; torch.set_num_threads does not reach it.
if _threads_from_argv() not in ("", "0") and "OPENBLAS_NUM_THREADS" not in os.environ:
    os.environ["OPENBLAS_NUM_THREADS"] = _threads_from_argv()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ModelConfig / OptimConfig defaults (src/model/config.h), used when no config is given.
MODEL_DEFAULTS = dict(n_layer=8, d_model=512, n_head=8, n_kv_head=8, head_dim=64, mlp_ratio=4.0,
                      activation="relu2", norm_eps=1e-6, norm_gain=False, rope_base=10000.0,
                      qk_norm=True, tie_embeddings=False, logit_softcap=15.0, vocab_size=0,
                      seq_len=1024, init_std=0.02, zero_init_out=True)
GROUP_DEFAULTS = dict(kind="adamw", lr=0.02, beta1=0.8, beta2=0.95, eps=1e-10, momentum=0.95,
                      nesterov=True, ns_steps=5, ns_bf16=True, weight_decay=0.0)
OPTIM_DEFAULTS = dict(matrix=dict(GROUP_DEFAULTS, kind="muon", beta1=0.9, eps=1e-8),
                      embed=dict(GROUP_DEFAULTS, lr=0.245), head=dict(GROUP_DEFAULTS, lr=0.0049),
                      scalar=dict(GROUP_DEFAULTS), grad_clip=1.0)
ARCH_FLAGS = [("n_layer", int), ("d_model", int), ("n_head", int), ("n_kv_head", int),
              ("head_dim", int), ("mlp_ratio", float), ("activation", str), ("norm_eps", float),
              ("rope_base", float), ("logit_softcap", float), ("vocab_size", int),
              ("init_std", float)]
BOOL_FLAGS = ["norm_gain", "qk_norm", "tie_embeddings", "zero_init_out"]


def log(*a):
    print("torch_peer:", *a, file=sys.stderr, flush=True)


def parse_bool(s):
    if s.lower() in ("1", "true", "yes"):
        return True
    if s.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {s}")


def load_config(args):
    """Returns (name, model dict, optim dict, train dict): the train dict is the config's own (empty
    for "none")."""
    name, cfg = "custom", None
    if args.config and args.config != "none":
        if os.path.isfile(args.config) and not args.set:
            text = open(args.config).read()
            name = os.path.splitext(os.path.basename(args.config))[0]
        else:
            cmd = [args.clocklm, "model", "--config", args.config, "--json"]
            for s in args.set:
                cmd += ["--set", s]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"torch_peer: {' '.join(cmd)} failed: {r.stderr.strip()}")
            text = r.stdout
            name = args.config
        # `clocklm model --json` prints a human summary first; the JSON object starts at a line "{".
        lines = text.splitlines()
        start = next((i for i, l in enumerate(lines) if l.strip() == "{"), None)
        if start is None:
            sys.exit("torch_peer: no JSON object in the config text")
        cfg = json.loads("\n".join(lines[start:]))
        name = cfg.get("name", name)
    model = dict(MODEL_DEFAULTS)
    optim = json.loads(json.dumps(OPTIM_DEFAULTS))
    if cfg:
        model.update(cfg.get("model", {}))
        for k, v in cfg.get("optim", {}).items():
            if isinstance(v, dict):
                optim[k].update(v)
            else:
                optim[k] = v
    for key, _ in ARCH_FLAGS:
        v = getattr(args, key)
        if v is not None:
            model[key] = v
    for key in BOOL_FLAGS:
        v = getattr(args, key)
        if v is not None:
            model[key] = v
    if model["vocab_size"] == 0:  # as `clocklm bench train`: synthetic tokens use a 32K vocabulary
        model["vocab_size"] = 32768
    if args.optimizer != "config":
        optim["matrix"]["kind"] = args.optimizer
    return name, model, optim, (cfg or {}).get("train", {})


def up64(h):
    return max(64, int(math.ceil(h / 64.0 - 1e-9)) * 64)


def rmsnorm(x, eps, gain=None):
    # Norms in fp32 whatever the autocast dtype (clocklm keeps everything but matmuls in fp32).
    x = x.float()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * gain if gain is not None else y


class GPT(torch.nn.Module):
    def __init__(self, m, T):
        super().__init__()
        self.m = m
        d, H, Hkv, hd, L = m["d_model"], m["n_head"], m["n_kv_head"], m["head_dim"], m["n_layer"]
        if Hkv <= 0 or H % Hkv != 0 or hd % 2 != 0 or m["activation"] not in ("relu2", "gelu", "swiglu"):
            sys.exit(f"torch_peer: invalid shape: n_head {H}, n_kv_head {Hkv}, head_dim {hd}, "
                     f"activation {m['activation']}")
        self.V = m["vocab_size"]
        self.Vp = (self.V + 63) // 64 * 64
        Hd = up64(m["mlp_ratio"] * d)
        if m["activation"] == "swiglu":
            Hd = up64(Hd * 2.0 / 3.0)
        self.Hd = Hd
        P = torch.nn.Parameter
        std, out_std = m["init_std"], m["init_std"] / math.sqrt(2 * L)
        zero_out = m["zero_init_out"]

        def normal(*shape, s=std):
            return P(torch.randn(*shape) * s)

        def out(*shape):
            return P(torch.zeros(*shape)) if zero_out else normal(*shape, s=out_std)

        wte = torch.randn(self.Vp, d) * std
        wte[self.V:] = 0
        self.wte = P(wte)
        self.blocks = torch.nn.ModuleList()
        n_in = 2 if m["activation"] == "swiglu" else 1
        for _ in range(L):
            b = torch.nn.Module()
            b.wqkv = normal(H * hd + 2 * Hkv * hd, d)   # rows: wq | wk | wv (one matmul)
            b.wo = out(d, H * hd)
            b.w_in = normal(n_in * Hd, d)                # rows: w_in | w_gate (swiglu)
            b.w_out = out(d, Hd)
            if m["norm_gain"]:
                b.attn_gain = P(torch.ones(d))
                b.mlp_gain = P(torch.ones(d))
                if m["qk_norm"]:
                    b.q_gain = P(torch.ones(hd))
                    b.k_gain = P(torch.ones(hd))
            self.blocks.append(b)
        self.final_gain = P(torch.ones(d)) if m["norm_gain"] else None
        if m["tie_embeddings"]:
            self.lm_head = None
        else:
            head = torch.zeros(self.Vp, d) if zero_out else torch.randn(self.Vp, d) * std
            head[self.V:] = 0
            self.lm_head = P(head)
        # RoPE tables for positions 0..T-1, angle t * base^(-2i/hd), i < hd/2.
        inv = m["rope_base"] ** (-torch.arange(0, hd // 2, dtype=torch.float64) * 2.0 / hd)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)
        self.has_sdpa = hasattr(F, "scaled_dot_product_attention")

    def param_groups(self):
        """(name, param, kind, row splits for Muon) in clocklm's ParamKind routing."""
        m, H, Hkv, hd = self.m, self.m["n_head"], self.m["n_kv_head"], self.m["head_dim"]
        out = [("wte", self.wte, "embed", None)]
        for i, b in enumerate(self.blocks):
            # wq, wk, wv (and w_in, w_gate) are separate clocklm Params: Muon orthogonalises each.
            out.append((f"blocks.{i}.wqkv", b.wqkv, "matrix", [H * hd, Hkv * hd, Hkv * hd]))
            out.append((f"blocks.{i}.wo", b.wo, "matrix", None))
            splits = [self.Hd, self.Hd] if m["activation"] == "swiglu" else None
            out.append((f"blocks.{i}.w_in", b.w_in, "matrix", splits))
            out.append((f"blocks.{i}.w_out", b.w_out, "matrix", None))
            for g in ("attn_gain", "mlp_gain", "q_gain", "k_gain"):
                if hasattr(b, g):
                    out.append((f"blocks.{i}.{g}", getattr(b, g), "scalar", None))
        if self.final_gain is not None:
            out.append(("final_gain", self.final_gain, "scalar", None))
        if self.lm_head is not None:
            out.append(("lm_head", self.lm_head, "head", None))
        return out

    def rope(self, x):  # x [B, h, T, hd] fp32
        T, half = x.shape[2], x.shape[3] // 2
        c, s = self.cos[:T], self.sin[:T]
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1)

    def attention(self, q, k, v):  # [B, H, T, hd]
        if self.has_sdpa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        T, hd = q.shape[2], q.shape[3]
        att = torch.matmul(q, k.transpose(-1, -2)).float() * (1.0 / math.sqrt(hd))
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        return torch.matmul(att, v)

    def forward(self, idx, targets, reduction="mean"):
        """Mean cross-entropy over the targets, or with reduction "none" the loss of every position
        (targets < 0 ignored: 0 there)."""
        m = self.m
        B, T = idx.shape
        H, Hkv, hd, eps = m["n_head"], m["n_kv_head"], m["head_dim"], m["norm_eps"]
        x = F.embedding(idx, self.wte)
        for b in self.blocks:
            h = rmsnorm(x, eps, getattr(b, "attn_gain", None))
            qkv = F.linear(h, b.wqkv)
            q, k, v = qkv.split([H * hd, Hkv * hd, Hkv * hd], dim=-1)
            q = q.view(B, T, H, hd).transpose(1, 2)
            k = k.view(B, T, Hkv, hd).transpose(1, 2)
            v = v.view(B, T, Hkv, hd).transpose(1, 2)
            if m["qk_norm"]:
                q = rmsnorm(q, eps, getattr(b, "q_gain", None))
                k = rmsnorm(k, eps, getattr(b, "k_gain", None))
            q, k = self.rope(q.float()), self.rope(k.float())
            if Hkv != H:  # query head h uses kv head h // (H / Hkv)
                k = k.repeat_interleave(H // Hkv, dim=1)
                v = v.repeat_interleave(H // Hkv, dim=1)
            o = self.attention(q, k, v)
            x = x + F.linear(o.transpose(1, 2).reshape(B, T, H * hd), b.wo)
            u = F.linear(rmsnorm(x, eps, getattr(b, "mlp_gain", None)), b.w_in)
            if m["activation"] == "relu2":
                a = torch.relu(u).square()
            elif m["activation"] == "gelu":
                a = F.gelu(u, approximate="tanh")
            else:  # swiglu: [up | gate]
                up, gate = u.chunk(2, dim=-1)
                a = up * F.silu(gate)
            x = x + F.linear(a, b.w_out)
        head = self.lm_head if self.lm_head is not None else self.wte
        z = F.linear(rmsnorm(x, eps, self.final_gain), head).float()
        if self.Vp != self.V:  # padded columns never count
            z = z[..., :self.V]
        cap = m["logit_softcap"]
        if cap > 0:
            z = cap * torch.tanh(z / cap)
        return F.cross_entropy(z.reshape(-1, self.V), targets.reshape(-1), ignore_index=-1, reduction=reduction)


# optim.*.ns_coeffs, as NsSchedule in src/backend/backend.cpp: (a, b, c) per step and the margin on
# the normalisation; Polar Express steps past the fifth repeat the fifth.
NS_QUINTIC = (3.4445, -4.7750, 2.0315)
NS_POLAR = ((8.156554524902461, -22.48329292557795, 15.878769915207462),
            (4.042929935166739, -2.808917465908714, 0.5000178451051316),
            (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
            (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
            (2.3465413258596377, -1.7097828382687081, 0.42323551169305323))


def ns_schedule(name, steps):
    """([(a, b, c)] per step, norm margin) of X <- a X + (b A + c A^2) X, A = X X^T."""
    if name == "quintic":
        return [NS_QUINTIC] * steps, 1.0
    if name == "polar":
        return [NS_POLAR[min(i, 4)] for i in range(steps)], 1.02
    sys.exit(f"torch_peer: Newton-Schulz coefficients '{name}' are unknown (quintic, polar)")


def newton_schulz5(G, steps, bf16, coeffs="quintic"):
    """Newton-Schulz orthogonalisation of G (2-D), on its short side."""
    sched, margin = ns_schedule(coeffs, steps)
    X = G.bfloat16() if bf16 else G.float()
    tall = X.shape[0] > X.shape[1]
    if tall:
        X = X.t()
    X = X / (X.norm() * margin + 1e-7)
    for a, b, c in sched:
        A = X @ X.t()
        Bm = b * A + c * (A @ A)
        X = a * X + Bm @ X
    if tall:
        X = X.t()
    return X.float()


class Muon(torch.optim.Optimizer):
    """buf = mu*buf + g; u = g + mu*buf (Nesterov) or buf; O = NS5(u) per row split;
    p = p*(1 - lr*wd) - lr*sqrt(max(1, rows/cols))*O."""

    def __init__(self, params, splits, lr, momentum, nesterov, ns_steps, ns_bf16, weight_decay, ns_coeffs="quintic"):
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps,
                                      ns_bf16=ns_bf16, weight_decay=weight_decay, ns_coeffs=ns_coeffs))
        self.splits = splits  # id(param) -> list of row counts or None

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            lr, mu, wd = g["lr"], g["momentum"], g["weight_decay"]
            for p in g["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if "buf" not in st:
                    st["buf"] = torch.zeros_like(p)
                buf = st["buf"]
                buf.mul_(mu).add_(p.grad)
                u = p.grad.add(buf, alpha=mu) if g["nesterov"] else buf
                if wd:
                    p.mul_(1 - lr * wd)
                rows = self.splits.get(id(p)) or [p.shape[0]]
                for pp, uu in zip(p.split(rows, dim=0), u.split(rows, dim=0)):
                    O = newton_schulz5(uu, g["ns_steps"], g["ns_bf16"], g["ns_coeffs"])
                    pp.add_(O, alpha=-lr * math.sqrt(max(1.0, pp.shape[0] / pp.shape[1])))


def make_optimizers(model, optim, ns_bf16):
    groups = {"matrix": [], "embed": [], "head": [], "scalar": []}
    splits = {}
    for _, p, kind, sp in model.param_groups():
        groups[kind].append(p)
        if sp:
            splits[id(p)] = sp
    adam_groups, opts = [], []
    for kind, ps in groups.items():
        if not ps:
            continue
        c = optim[kind]
        if c["kind"] == "muon":
            opts.append(Muon(ps, splits, c["lr"], c["momentum"], c["nesterov"], c["ns_steps"],
                             ns_bf16, c["weight_decay"], c.get("ns_coeffs", "quintic")))
        else:
            adam_groups.append(dict(params=ps, lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"],
                                    weight_decay=c["weight_decay"]))
    if adam_groups:
        opts.append(torch.optim.AdamW(adam_groups))
    return opts


def add_model_args(ap):
    """The options load_config reads: the config, its overrides and the binary that resolves it."""
    ap.add_argument("--config", default="none", help="preset name, resolved config JSON file, or none")
    ap.add_argument("--set", action="append", default=[], help="key=value passed to `clocklm model`")
    ap.add_argument("--clocklm", default=os.path.join(ROOT, "build", "clocklm"))
    for key, typ in ARCH_FLAGS:
        ap.add_argument("--" + key.replace("_", "-"), dest=key, type=typ, default=None)
    for key in BOOL_FLAGS:
        ap.add_argument("--" + key.replace("_", "-"), dest=key, type=parse_bool, default=None)


def main():
    ap = argparse.ArgumentParser(description="PyTorch speed peer of clocklm's training step")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16 = torch.autocast(device, dtype=torch.bfloat16)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: the model and tokens on the GPU, each step timed to its completion")
    ap.add_argument("--optimizer", choices=["config", "muon", "adamw"], default="config",
                    help="matrix group: muon (Muon + AdamW rest), adamw (all AdamW), config (as the config says)")
    ap.add_argument("--ns-precision", choices=["auto", "bf16", "fp32"], default="auto",
                    help="Muon Newton-Schulz matmuls (auto: bf16 iff --precision bf16)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0 = os.cpu_count())")
    ap.add_argument("--seed", type=int, default=1234)
    add_model_args(ap)
    args = ap.parse_args()
    if args.batch <= 0 or args.seq <= 0 or args.steps <= 0 or args.warmup < 0:
        sys.exit("torch_peer: batch, seq and steps must be positive")

    threads = args.threads if args.threads > 0 else (os.cpu_count() or 1)
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    name, m, optim, _ = load_config(args)
    bf16 = args.precision == "bf16"
    ns_bf16 = bf16 if args.ns_precision == "auto" else args.ns_precision == "bf16"

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_peer: --device cuda but torch.cuda.is_available() is False")
    dev = torch.device(args.device)
    model = GPT(m, args.seq).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    opts = make_optimizers(model, optim, ns_bf16)
    params = list(model.parameters())
    B, T, V = args.batch, args.seq, m["vocab_size"]
    gen = torch.Generator().manual_seed(42)
    idx = torch.randint(0, V, (B, T), generator=gen).to(dev)
    tgt = torch.randint(0, V, (B, T), generator=gen).to(dev)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    log(f"{name}: {n_params:,} params, batch {B}x{T}, {args.precision}, matrix={optim['matrix']['kind']}, "
        f"threads {threads}, torch {torch.__version__}, attention "
        f"{'sdpa' if model.has_sdpa else 'masked softmax'}")

    losses, times = [], []
    for s in range(args.warmup + args.steps):
        sync()
        t0 = time.perf_counter()
        for p in params:
            p.grad = None
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=bf16):
            loss = model(idx, tgt)
        loss.backward()
        if optim["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, optim["grad_clip"])
        for o in opts:
            o.step()
        sync()
        t1 = time.perf_counter()
        losses.append(loss.item())
        if s >= args.warmup:
            times.append(t1 - t0)
        log(f"step {s}{' (warmup)' if s < args.warmup else ''}: loss {losses[-1]:.4f}  {t1 - t0:.3f} s")

    step = sum(times) / len(times)
    print(json.dumps({
        "peer": "pytorch", "torch": torch.__version__, "precision": args.precision, "device": args.device,
        "optimizer": optim["matrix"]["kind"], "config": name, "batch": B, "seq": T,
        "params": n_params, "step_seconds": step, "tokens_per_second": B * T / step,
        "best_step_seconds": min(times), "threads": threads, "steps": args.steps,
        "warmup": args.warmup, "loss_first": losses[0], "loss_last": losses[-1],
        "ln_vocab": math.log(V), "ns_precision": (("bf16" if ns_bf16 else "fp32") if optim["matrix"]["kind"] == "muon" else None),
        "attention": "sdpa" if model.has_sdpa else "masked_softmax",
    }), flush=True)


if __name__ == "__main__":
    main()
