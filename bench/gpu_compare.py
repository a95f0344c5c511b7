#!/usr/bin/env python3
# The lines bench/gpu_check.sh writes for clocklm beside the compiled PyTorch peer
# (bench/torch_compiled_peer.py), read from their JSON outputs:
#   gpu_compare.py speed CONFIG CLOCKLM_BENCH_LOG PEER_LOG   (`clocklm bench train --json` vs speed mode)
#   gpu_compare.py side CLOCKLM_RUN/summary.json PEER_LOG    (`clocklm train` vs train mode)
# side exits 1 when the two did not score the same val targets (positions, tokens, bytes).
import json
import sys

# NVIDIA's H100 SXM datasheet, dense bf16 tensor-core FLOP/s (the peer imports it from here).
H100_BF16_FLOPS = 989e12
H100 = H100_BF16_FLOPS / 1e9  # GFLOP/s


def last_json(path):
    """The last line of a log that parses as a JSON object, or None."""
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            j = json.loads(line)
            if isinstance(j, dict):
                return j
        except ValueError:
            continue
    return None


def mfu(fpt, tps, gflops):
    return f"{100 * fpt * tps / (gflops * 1e9):.1f}%" if gflops else "?"


def speed(cfg, clocklm_log, peer_log):
    c, p = last_json(clocklm_log), last_json(peer_log)
    if c:
        ceil = c["matmul_ceiling_gflops"]
        print(f"  {cfg} clocklm: batch {c.get('batch', '?')}x{c.get('seq', '?')}, {c['tokens_per_second']:.0f} tokens/s, "
              f"step {c['step_seconds'] * 1e3:.1f} ms, MFU {mfu(c['flops_per_token'], c['tokens_per_second'], ceil)} "
              f"of {ceil:.0f} GFLOP/s (clocklm's measured bf16), {mfu(c['flops_per_token'], c['tokens_per_second'], H100)} "
              f"of 989 TFLOP/s; matmul {c['matmul_precision']}, loss {c['loss']:.3f}")
    else:
        print(f"  {cfg} clocklm: no result")
    if p:
        of_clocklm = f"{100 * p['mfu_clocklm']:.1f}% of clocklm's peak, " if "mfu_clocklm" in p else ""
        print(f"  {cfg} peer:    batch {p['batch']}x{p['seq']}, {p['tokens_per_second']:.0f} tokens/s, "
              f"step {p['step_seconds'] * 1e3:.1f} ms, MFU {of_clocklm}{100 * p['mfu_measured']:.1f}% of "
              f"{p['peak_measured_gflops']:.0f} GFLOP/s (torch.matmul {p['precision']}), {100 * p.get('mfu_h100', 0):.1f}% "
              f"of 989 TFLOP/s; torch {p['torch']}, features {p['features']}")
        if c:
            print(f"  {cfg} peer / clocklm tokens/s: {p['tokens_per_second'] / c['tokens_per_second']:.2f}")
    else:
        print(f"  {cfg} peer:    no result")


def side(summary, peer_log):
    try:
        c = json.load(open(summary))
    except (OSError, ValueError):
        c = None
    p = last_json(peer_log)
    rows = []
    if c:
        v = c["val"]
        rows.append(("clocklm", c["steps"], c["tokens"], c["device_seconds"], c["tokens_per_second"],
                     c["model_flops_per_second"] / (H100 * 1e9), v))
    if p:
        rows.append(("pytorch", p["steps"], p["steps"] * p["batch_tokens"], p["train_seconds"], p["tokens_per_second"],
                     p.get("mfu_h100", 0.0), p["val"]))
    print("  | trainer | steps | train tokens | seconds | tokens/s | MFU of 989 TFLOP/s | val bpb | val positions | tokens | bytes |")
    print("  |---|---|---|---|---|---|---|---|---|---|")
    for name, steps, tokens, secs, tps, m, v in rows:
        print(f"  | {name} | {steps} | {tokens} | {secs:.1f} | {tps:.0f} | {100 * m:.1f}% | {v['bpb']:.4f} | "
              f"{v['positions']} | {v['tokens']} | {v['bytes']} |")
    if len(rows) < 2:
        print(f"  side-by-side: {'clocklm' if not c else 'the peer'} has no result")
        return 1
    same = all(rows[0][6][k] == rows[1][6][k] for k in ("positions", "tokens", "bytes"))
    print(f"  same val targets and bytes: {'yes' if same else 'NO'}")
    return 0 if same else 1


def main(argv):
    if len(argv) == 4 and argv[0] == "speed":
        speed(*argv[1:])
        return 0
    if len(argv) == 3 and argv[0] == "side":
        return side(*argv[1:])
    sys.exit("usage: gpu_compare.py speed CONFIG CLOCKLM_LOG PEER_LOG | side SUMMARY_JSON PEER_LOG")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
