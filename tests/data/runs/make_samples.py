#!/usr/bin/env python3
# Writes the small sample run directories used by tests/test_exp_report.cpp. They follow the
# run-directory layout of docs/FORMATS.md; the numbers are synthetic (shaped like a short d4 run on
# this 2-core machine: 4096-token steps, val bpb every 30 s of budget), not the output of a real
# training run. Re-run from this folder to regenerate: python3 make_samples.py d4.json
import copy, json, math, os, random, sys

base = json.load(open(sys.argv[1]))  # `clocklm model --config d4 --json` output (the config part)
base["model"]["vocab_size"] = 32768
base["train"]["budget_seconds"] = 120.0
base["train"]["eval_every_seconds"] = 30.0

def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")

def run_json(argv, start):
    return {
        "argv": argv, "command": " ".join(argv), "version": "0.1.0",
        "git_commit": "0b052cc5d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6", "git_dirty": False,
        "machine": {"cpu_model": "AMD EPYC", "cores": 2, "logical_cpus": 2, "threads": 2,
                    "cpu_features": ["avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni"],
                    "memory_gb": 23.5, "gpus": [], "hostname": "vm", "os": "Linux 6.1.0 x86_64"},
        "start_time": start, "cwd": "/work", "data": "data/tiny", "tokenizer_hash": "5be2a0c3d41f9e77",
    }

def make(name, cfg, steps, final_loss, tok_s, seed, finished, core=None, bpt=4.3):
    rng = random.Random(seed)
    os.makedirs(name, exist_ok=True)
    argv = ["clocklm", "train", "--config", "d4", "--data", "data/tiny", "--budget", "2m", "--out", name]
    for k, v in cfg.get("_set", {}).items():
        argv += ["--set", f"{k}={v}"]
    c = copy.deepcopy(base)
    for k, v in cfg.get("_set", {}).items():
        sec, *rest = k.split(".")
        d = c[sec]
        for part in rest[:-1]:
            d = d[part]
        d[rest[-1]] = v
    write_json(f"{name}/config.json", c)
    write_json(f"{name}/run.json", run_json(argv, "2026-11-30T08:%02d:00Z" % seed))
    rows, t, tokens, next_val = [], 0.0, 0, 30.0
    params = 3145728 + 2 * 32768 * 256
    for step in range(1, steps + 1):
        frac = step / steps
        loss = final_loss + (10.4 - final_loss) * math.exp(-5.0 * frac) + rng.gauss(0, 0.06)
        ts = tok_s * (1 + rng.gauss(0, 0.03))
        dt = 4096 / ts
        t += dt
        tokens += 4096
        lr = 1.0 if frac < 0.6 else (1 - frac) / 0.4
        row = {"step": step, "tokens": tokens, "device_seconds": round(t, 3), "loss": round(loss, 4),
               "lr": round(lr, 4), "grad_norm": round(0.4 + 2.0 * math.exp(-4 * frac) + abs(rng.gauss(0, 0.05)), 4),
               "tokens_per_second": round(ts, 1), "model_flops_per_second": round(ts * 6 * params, 0),
               "mfu": round(ts * 6 * params / 430e9, 4)}
        if t >= next_val or (finished and step == steps):
            row["val_bpb"] = round((loss + 0.05) / math.log(2) / bpt, 4)
            next_val += 30.0
        rows.append(row)
    with open(f"{name}/metrics.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    if finished:
        s = {"val_bpb": rows[-1]["val_bpb"], "val_tokens": 1048576,
             "bpb_definition": "sum of target-token nats / (ln 2 * sum of target-token bytes), BOS targets excluded",
             "steps": steps, "tokens": tokens, "device_seconds": rows[-1]["device_seconds"], "params": params,
             "tokens_per_second": round(tokens / rows[-1]["device_seconds"], 1), "config": "d4"}
        if core is not None:
            s["core"] = core
        write_json(f"{name}/summary.json", s)

make("d4-muon", {}, 70, 4.9, 2400, 1, True, core=0.0412)
make("d4-adamw", {"_set": {"optim.matrix.kind": "adamw", "optim.matrix.lr": 0.003}}, 72, 5.2, 2480, 2, True)
make("d6-unfinished", {"_set": {"model.n_layer": 6}}, 40, 5.0, 1700, 3, False)
