#!/usr/bin/env python3
"""Driver for bench/recipe.sh: throughput rounds and deterministic (max_steps) screen runs.

  recipe.py throughput --rounds R --steps N [--only a,b]   -> RUNS/throughput.json
  recipe.py screen --budget S --seeds 1337,1 [--only a,b] [--tag T]  -> RUNS/screen.jsonl rows
Every run is `clocklm train` with train.threads=2, no periodic eval, no periodic checkpoints.
"""
import argparse, json, os, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXE = os.environ.get("CLOCKLM", os.path.join(ROOT, "build", "clocklm"))
DATA = os.environ.get("RECIPE_DATA", os.path.join(ROOT, "data"))      # holds tune-v4096 ...
RUNS = os.environ.get("RECIPE_RUNS", os.path.join(ROOT, "runs", "recipe"))
THREADS = int(os.environ.get("RECIPE_THREADS", "2"))  # screen runs only (deterministic: same result)
VAL_TOKENS_8K = 131072   # tuning-split tokens at vocab 8192; other vocabs get the same byte span


def variants():
    out = []
    for line in open(os.path.join(os.path.dirname(__file__), "variants.txt")):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        body, rest = line.split(";", 1)
        lever, _, shape = rest.partition("@")   # "@ NAME": runs at NAME's measured throughput
        name, vocab, cfg, sets = [x.strip() for x in body.split("|")]
        out.append(dict(name=name, vocab=int(vocab), config=cfg, sets=sets.split(), lever=lever.strip(),
                        shape=shape.strip() or None))
    return out


def data_dir(vocab):
    return os.path.join(DATA, f"tune-v{vocab}")


def val_tokens(vocab):
    def bpt(v):
        m = json.load(open(os.path.join(data_dir(v), "manifest.json")))["splits"]["val"]
        return m["bytes"] / m["tokens"]
    return int(round(VAL_TOKENS_8K * bpt(8192) / bpt(vocab)))


def batch_tokens(v):
    args = [EXE, "model", "--config", v["config"], "--set", f"vocab_size={v['vocab']}", "--json"]
    for s in v["sets"]:
        args += ["--set", s]
    txt = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    j = json.loads(txt[txt.index("\n{") + 1:])   # text summary first, then the resolved config
    return j["train"]["batch_tokens"]


def train_cmd(v, out, steps, seed, vt):
    cmd = [EXE, "train", "--config", v["config"], "--data", data_dir(v["vocab"]), "--budget", "0",
           "--out", out, "--quiet", "--set", f"train.threads={THREADS}", "--set", "eval_every_seconds=0",
           "--set", "checkpoint_every_seconds=0", "--set", f"val_tokens={vt}",
           "--set", f"max_steps={steps}", "--set", f"train.seed={seed}"]
    for s in v["sets"]:
        cmd += ["--set", s]
    return cmd


def run(cmd, out):
    if os.path.exists(os.path.join(out, "summary.json")):
        return json.load(open(os.path.join(out, "summary.json")))
    if os.path.exists(out):
        subprocess.run(["rm", "-rf", out], check=True)
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(f"FAILED {' '.join(cmd)}\n{r.stderr[-2000:]}\n")
        return None
    s = json.load(open(os.path.join(out, "summary.json")))
    s["wall"] = time.time() - t0
    return s


def step_tps(out):
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    t = [r["tokens_per_second"] for r in rows if "tokens_per_second" in r and r.get("step", 0) > 1]
    return statistics.median(t)


def throughput(a):
    vs = [v for v in variants() if not a.only or v["name"] in a.only.split(",")]
    if "base" not in [v["name"] for v in vs]:
        vs = [v for v in variants() if v["name"] == "base"] + vs
    res = {v["name"]: [] for v in vs}
    for r in range(a.rounds):
        for v in vs:
            out = os.path.join(RUNS, "tps", f"{v['name']}-r{a.tag}{r}")
            subprocess.run(["rm", "-rf", out])
            s = run(train_cmd(v, out, a.steps, 1337, 4096), out)
            if s is None:
                continue
            res[v["name"]].append(step_tps(out))
            print(f"round {r} {v['name']:10s} {res[v['name']][-1]:9.0f} tok/s  load {os.getloadavg()[0]:.2f}", flush=True)
    path = os.path.join(RUNS, f"throughput-rounds{a.tag}.json")
    old = json.load(open(path)) if os.path.exists(path) else {}
    base = res["base"]
    for v in vs:
        t = res[v["name"]]
        ratios = [x / b for x, b in zip(t, base)]
        old[v["name"]] = dict(tps=t, median=statistics.median(t), ratio_per_round=ratios,
                              ratio=statistics.median(ratios), batch_tokens=batch_tokens(v),
                              rounds=a.rounds, steps=a.steps, when=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    json.dump(old, open(path, "w"), indent=1)


def summarize(a):
    """throughput.json from every measurement run under RUNS/tps: per variant the p90 and median
    of per-step tokens/s (step 1 excluded) over all its runs; p90 = the least-disturbed steps."""
    import glob
    per = {}
    for d in sorted(glob.glob(os.path.join(RUNS, "tps", "*-r*"))):
        n = os.path.basename(d).rsplit("-r", 1)[0]
        try:
            rows = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
        except (OSError, ValueError):
            continue
        per.setdefault(n, []).extend(r["tokens_per_second"] for r in rows
                                     if "tokens_per_second" in r and r.get("step", 0) > 1)
    byname = {v["name"]: v for v in variants()}
    out = {}
    for n, t in per.items():
        t = sorted(t)
        out[n] = dict(steps_measured=len(t), p90=t[int(0.9 * (len(t) - 1))], median=statistics.median(t),
                      max=t[-1], batch_tokens=batch_tokens(byname[n]))
    for n in out:
        out[n]["ratio"] = out[n]["p90"] / out["base"]["p90"]
    json.dump(out, open(os.path.join(RUNS, "throughput.json"), "w"), indent=1)
    for n, r in out.items():
        print(f"{n:10s} steps {r['steps_measured']:3d} p90 {r['p90']:7.0f} median {r['median']:7.0f} ratio {r['ratio']:.3f}")


def screen(a):
    tp = json.load(open(os.path.join(RUNS, "throughput.json")))
    ref = a.ref_tps or tp["base"]["p90"]
    byname = {v["name"]: v for v in variants()}
    vs = [byname[n] for n in a.only.split(",")] if a.only else variants()
    for v in vs:
        # A variant with the shape of another (only lr or schedule changed) has its throughput.
        key = v["name"] if v["name"] in tp else (v["shape"] or "base")
        tps = ref * tp[key]["ratio"]
        bt = tp[key]["batch_tokens"] if key == v["name"] else batch_tokens(v)
        steps = max(1, round(a.budget * tps / bt))
        for seed in [int(x) for x in a.seeds.split(",")]:
            out = os.path.join(RUNS, f"b{a.budget}", f"{v['name']}-s{seed}")
            cmd = train_cmd(v, out, steps, seed, val_tokens(v["vocab"]))
            s = run(cmd, out)
            if s is None:
                continue
            row = dict(name=v["name"], lever=v["lever"], config=v["config"], vocab=v["vocab"], sets=v["sets"],
                       budget_s=a.budget, seed=seed, steps=steps, batch_tokens=bt, tokens=s["tokens"],
                       tps_assumed=tps, tps_ratio=tp[key]["ratio"], tps_in_run=s["tokens_per_second"],
                       val_bpb=s["val_bpb"], final_loss=s["final_loss"], params=s["params"],
                       device_seconds=s["device_seconds"], wall=s.get("wall"),
                       command=" ".join(["build/clocklm"] + cmd[1:]).replace(ROOT + "/", ""))
            with open(os.path.join(RUNS, "screen.jsonl"), "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"b{a.budget} {v['name']:10s} seed {seed:5d} steps {steps:4d} bpb {s['val_bpb']:.4f} "
                  f"tps {s['tokens_per_second']:.0f} wall {s.get('wall', 0):.0f}s load {os.getloadavg()[0]:.2f}", flush=True)


def relate(a):
    """Adds variants measured in throughput rounds (--tag) to throughput.json at their within-round
    ratio to a reference shape already there (--to): p90 = p90(to) x median ratio over the rounds."""
    tp_path = os.path.join(RUNS, "throughput.json")
    tp = json.load(open(tp_path))
    rounds = json.load(open(os.path.join(RUNS, f"throughput-rounds{a.tag}.json")))
    ref = rounds[a.to]["tps"]
    for n in a.only.split(","):
        ratios = [x / r for x, r in zip(rounds[n]["tps"], ref)]
        rel = statistics.median(ratios)
        p90 = tp[a.to]["p90"] * rel
        tp[n] = dict(p90=p90, ratio=p90 / tp["base"]["p90"], median=statistics.median(rounds[n]["tps"]),
                     batch_tokens=rounds[n]["batch_tokens"], steps_measured=len(rounds[n]["tps"]) * rounds[n]["steps"],
                     note=f"{a.to}'s p90 x the median within-round ratio to {a.to} ({', '.join(f'{x:.3f}' for x in ratios)}; "
                          f"rounds tag '{a.tag}', {rounds[n]['when']})")
        print(f"{n:12s} x{rel:.3f} of {a.to} -> p90 {p90:.0f} tok/s, x{tp[n]['ratio']:.3f} of d4")
    json.dump(tp, open(tp_path, "w"), indent=1)


def write_table(md, lines):
    """Replaces the lines between the table markers of the Markdown file `md` and prints them."""
    text = open(md).read()
    a_, b_ = "<!-- table:start -->", "<!-- table:end -->"
    text = text[:text.index(a_) + len(a_)] + "\n" + "\n".join(lines) + "\n" + text[text.index(b_):]
    open(md, "w").write(text)
    print("\n".join(lines))


def table(a):
    """bench/results/recipe.json and the table in bench/results/recipe.md (between the markers)."""
    rows = [json.loads(l) for l in open(os.path.join(RUNS, "screen.jsonl"))]
    tp = json.load(open(os.path.join(RUNS, "throughput.json")))
    runs = {}
    for r in rows:                      # last row wins for a (budget, name, seed)
        runs[(r["budget_s"], r["name"], r["seed"])] = r
    groups = {}
    for (b, n, sd), r in runs.items():
        groups.setdefault((b, n), {})[sd] = r
    out = []
    order = [v["name"] for v in variants()] + sorted({n for _, n in groups} - {v["name"] for v in variants()})
    for b in sorted({b for b, _ in groups}):
        base = groups.get((b, "base"), {})
        for n in order:
            g = groups.get((b, n))
            if not g:
                continue
            seeds = sorted(g)
            bpb = [g[sd]["val_bpb"] for sd in seeds]
            deltas = [g[sd]["val_bpb"] - base[sd]["val_bpb"] for sd in seeds if sd in base]
            r0 = g[seeds[0]]
            shape = next((v["shape"] for v in variants() if v["name"] == n), None)
            key = n if n in tp else (shape or "base")
            out.append(dict(budget_s=b, name=n, lever=r0["lever"], config=r0["config"], vocab=r0["vocab"],
                            sets=r0["sets"], seeds=seeds, val_bpb=bpb, val_bpb_mean=statistics.mean(bpb),
                            delta_vs_base=deltas, delta_mean=statistics.mean(deltas) if deltas else None,
                            delta_spread=(max(deltas) - min(deltas)) if len(deltas) > 1 else None,
                            steps=r0["steps"], batch_tokens=r0["batch_tokens"], tokens=r0["tokens"],
                            tps_p90=tp[key]["p90"], tps_ratio=tp[key]["ratio"],
                            tps_in_run=[g[sd]["tps_in_run"] for sd in seeds], params=r0["params"],
                            command=r0["command"]))
    res = os.path.join(ROOT, "bench", "results")
    val = {}
    for f in sorted(os.listdir(os.path.join(RUNS, "val"))) if os.path.isdir(os.path.join(RUNS, "val")) else []:
        if f.endswith(".json"):
            val[f[:-5]] = json.load(open(os.path.join(RUNS, "val", f)))
    json.dump(dict(method="see bench/results/recipe.md", throughput=tp, rows=out, shared_val=val),
              open(os.path.join(res, "recipe.json"), "w"), indent=1)
    lines = ["| budget | lever | setting | seeds | val bpb (tune) | Δbpb vs d4 | spread | tok/s (p90) | ×d4 | steps | tokens | params | command |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for o in out:
        short = " ".join(x.split("=")[0].split(".", 1)[-1] + "=" + x.split("=", 1)[1] for x in o["sets"])
        setting = "d4 (baseline)" if o["name"] == "base" else \
            " ".join(x for x in [f"{o['name']}: {o['config']}", short, f"vocab {o['vocab']}" if o["vocab"] != 8192 else ""] if x)
        d = "—" if o["name"] == "base" else (f"{o['delta_mean']:+.4f}" if o["delta_mean"] is not None else "n/a")
        sp = f"{o['delta_spread']:.4f}" if o["delta_spread"] is not None else ("" if len(o["seeds"]) < 2 else "")
        if o["name"] == "base" and len(o["seeds"]) > 1:
            sp = f"{max(o['val_bpb']) - min(o['val_bpb']):.4f} (seeds)"
        cmd = o["command"].replace("--out runs/recipe/", "--out runs/recipe/")
        lines.append(f"| {o['budget_s']} s | {o['lever']} | {setting} | {','.join(map(str, o['seeds']))} | "
                     f"{' / '.join(f'{x:.4f}' for x in o['val_bpb'])} | {d} | {sp} | {o['tps_p90']:.0f} | "
                     f"{o['tps_ratio']:.2f} | {o['steps']} | {o['tokens']:,} | {o['params']/1e6:.2f}M | `{cmd}` |")
    write_table(os.path.join(res, "recipe.md"), lines)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("throughput"); t.add_argument("--rounds", type=int, default=3)
    t.add_argument("--steps", type=int, default=8); t.add_argument("--only", default="")
    t.add_argument("--tag", default="")
    s = sub.add_parser("screen"); s.add_argument("--budget", type=int, default=180)
    s.add_argument("--seeds", default="1337"); s.add_argument("--only", default="")
    s.add_argument("--ref-tps", type=float, default=0)
    r = sub.add_parser("relate"); r.add_argument("--tag", required=True); r.add_argument("--to", required=True)
    r.add_argument("--only", required=True)
    sub.add_parser("summarize"); sub.add_parser("table")
    a = p.parse_args()
    os.makedirs(RUNS, exist_ok=True)
    {"throughput": throughput, "screen": screen, "summarize": summarize, "relate": relate, "table": table}[a.cmd](a)
