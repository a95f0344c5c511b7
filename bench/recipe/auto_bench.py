#!/usr/bin/env python3
"""Driver for bench/auto_bench.sh: `--config auto` against the presets and d4 at equal budgets.

  auto_bench.py plan --budget S          -> RUNS/plan-S.txt, RUNS/auto-S.json (the planner's pick)
  auto_bench.py throughput --budgets 300,600 --rounds R --steps N -> RUNS/throughput.json
  auto_bench.py throughput-add --budgets 300,600 [--ref speedrun-10m] -> shapes new to throughput.json
  auto_bench.py train --budget S         -> RUNS/b<S>/<name>/ and a row in RUNS/results.jsonl
  auto_bench.py table                    -> bench/results/auto.md (between the markers), auto.json

The runs are recipe.py's: deterministic `train.max_steps = budget x tokens/s / batch_tokens`, with
tokens/s the p90 of per-step tokens/s over alternating short runs of every shape, seed 1337, scored
on the tuning split (131,072 tokens at vocab 8192). `auto` trains the config the planner wrote for
that budget; where that resolves to the same config as a preset, the preset's run is its run.
"""
import argparse, json, os, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("RECIPE_RUNS", os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "runs", "auto"))
import recipe  # noqa: E402  (reads RECIPE_RUNS at import)

RUNS = recipe.RUNS
VOCAB = 8192
PRESETS = ["d4", "speedrun-5m", "speedrun-10m", "speedrun-30m"]


def resolved(config):
    """The config as training would resolve it, without its name and budget (JSON text)."""
    txt = subprocess.run([recipe.EXE, "model", "--config", config, "--set", f"vocab_size={VOCAB}", "--json"],
                         check=True, capture_output=True, text=True).stdout
    j = json.loads(txt[txt.index("\n{") + 1:])
    j.pop("name", None)
    j.get("train", {}).pop("budget_seconds", None)
    return json.dumps(j, sort_keys=True)


def resolved_train(config):
    txt = subprocess.run([recipe.EXE, "model", "--config", config, "--set", f"vocab_size={VOCAB}", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(txt[txt.index("\n{") + 1:])["train"]


def budget_steps(config, budget, tps):
    """max_steps and the extra overrides that make a max_steps run read what a budget run would.
    A batch schedule's stages are budget fractions (time); at equal tokens/s a stage of `dt` seconds
    reads tps x dt tokens, so it gets that many tokens' worth of its own step size, and the schedule
    is rewritten in step fractions (as the schedule runs over steps in max_steps mode)."""
    t = resolved_train(config)
    full = t["batch_tokens"]
    stages = []
    for part in filter(None, (t.get("batch_schedule") or "").split(",")):
        tok, until = part.split("@")
        stages.append((int(tok), float(until)))
    stages.append((full, 1.0))
    steps, prev = [], 0.0
    for tok, until in stages:
        steps.append(max(1, round(budget * (until - prev) * tps / tok)))
        prev = until
    total = sum(steps)
    if len(stages) == 1:
        return total, []
    acc, sched = 0, []
    for (tok, _), n in zip(stages[:-1], steps[:-1]):
        acc += n
        sched.append(f"{tok}@{acc / total:.6f}")
    return total, [f"train.batch_schedule={','.join(sched)}"]


def variant(name, config):
    return dict(name=name, vocab=VOCAB, config=config, sets=[], lever="", shape=None)


def auto_config(budget):
    return os.path.join(RUNS, f"auto-{budget}.json")


def contenders(budget):
    """(name, config) of every run at this budget; `auto` maps to a preset with the same config.
    Config files in RUNS/extra/ (e.g. a planner candidate it did not choose) join every budget."""
    out = [(p, p) for p in PRESETS
           if (p != "speedrun-30m" or budget >= 1200) and (p != "speedrun-5m" or budget <= 450)]
    extra = os.path.join(RUNS, "extra")
    if os.path.isdir(extra):
        out += [(f[:-5], os.path.join(extra, f)) for f in sorted(os.listdir(extra)) if f.endswith(".json")]
    auto = auto_config(budget)
    same = [p for p, c in out if resolved(c) == resolved(auto)]
    return out, (same[0] if same else None)


def plan(a):
    os.makedirs(RUNS, exist_ok=True)
    t0 = time.time()
    r = subprocess.run([recipe.EXE, "plan", "--budget", str(a.budget), "--data", recipe.data_dir(VOCAB),
                        "--out", auto_config(a.budget)], capture_output=True, text=True)
    open(os.path.join(RUNS, f"plan-{a.budget}.txt"), "w").write(r.stderr + r.stdout)
    if r.returncode != 0:
        sys.exit(f"auto_bench: plan failed:\n{r.stderr[-2000:]}")
    json.dump(dict(budget_s=a.budget, plan_wall_s=time.time() - t0),
              open(os.path.join(RUNS, f"plan-{a.budget}.json"), "w"))
    print(f"plan {a.budget} s -> {json.load(open(auto_config(a.budget)))['name']} ({time.time() - t0:.0f} s)")


def shapes(budgets):
    seen, out = set(), []
    for b in budgets:
        runs, same = contenders(b)
        if same is None:
            runs.append((f"auto-{b}", auto_config(b)))
        for n, c in runs:
            if n not in seen:
                seen.add(n)
                out.append(variant(n, c))
    return out


def alternate_tps(vs, rounds, steps, tag=""):
    """Per-step tokens/s of each shape over `rounds` rounds of short runs, the shapes alternating."""
    tps = {v["name"]: [] for v in vs}
    for r in range(rounds):
        for v in vs:
            out = os.path.join(RUNS, "tps", f"{v['name']}{tag}-r{r}")
            subprocess.run(["rm", "-rf", out])
            if recipe.run(recipe.train_cmd(v, out, steps, 1337, 4096), out) is None:
                sys.exit(f"auto_bench: throughput run of {v['name']} failed")
            rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
            tps[v["name"]] += [x["tokens_per_second"] for x in rows if "tokens_per_second" in x and x.get("step", 0) > 1]
            print(f"round {r} {v['name']:14s} load {os.getloadavg()[0]:.2f}", flush=True)
    return tps


def p90(t):
    t = sorted(t)
    return t[int(0.9 * (len(t) - 1))]


def throughput(a):
    vs = shapes([int(x) for x in a.budgets.split(",")])
    tps = alternate_tps(vs, a.rounds, a.steps)
    res = {}
    for v in vs:
        res[v["name"]] = dict(p90=p90(tps[v["name"]]), steps_measured=len(tps[v["name"]]), config=v["config"],
                              batch_tokens=recipe.batch_tokens(v))
        print(f"{v['name']:14s} p90 {res[v['name']]['p90']:7.0f} tok/s over {len(tps[v['name']])} steps")
    json.dump(res, open(os.path.join(RUNS, "throughput.json"), "w"), indent=1)


def throughput_add(a):
    """Shapes missing from throughput.json (a new plan's pick), measured alternately with a shape
    already there, `--ref`, whose recorded p90 scales them: the ratio of the two in one run is what
    holds when the machine's load differs from the first measurement's."""
    path = os.path.join(RUNS, "throughput.json")
    res = json.load(open(path))
    vs = [v for v in shapes([int(x) for x in a.budgets.split(",")]) if v["name"] not in res]
    if not vs:
        return
    tps = alternate_tps([variant(a.ref, res[a.ref]["config"])] + vs, a.rounds, a.steps, "-add")
    for v in vs:
        ratio = p90(tps[v["name"]]) / p90(tps[a.ref])
        res[v["name"]] = dict(p90=res[a.ref]["p90"] * ratio, steps_measured=len(tps[v["name"]]), config=v["config"],
                              batch_tokens=recipe.batch_tokens(v), scaled_from=a.ref, ratio=ratio)
        print(f"{v['name']:14s} {ratio:.3f} x {a.ref}'s p90 = {res[v['name']]['p90']:7.0f} tok/s")
    json.dump(res, open(path, "w"), indent=1)


def train(a):
    tp = json.load(open(os.path.join(RUNS, "throughput.json")))
    runs, same = contenders(a.budget)
    if same is None:
        runs.append((f"auto-{a.budget}", auto_config(a.budget)))
    for n, c in runs:
        if a.only and n not in a.only.split(","):
            continue
        v = variant(n, c)
        steps, v["sets"] = budget_steps(c, a.budget, tp[n]["p90"])
        out = os.path.join(RUNS, f"b{a.budget}", n)
        s = recipe.run(recipe.train_cmd(v, out, steps, 1337, recipe.val_tokens(VOCAB)), out)
        if s is None:
            sys.exit(f"auto_bench: run {n} at {a.budget} s failed")
        row = dict(budget_s=a.budget, name=n, auto=(n == same or n.startswith("auto-")), steps=steps,
                   tps_p90=tp[n]["p90"], tokens=s["tokens"], val_bpb=s["val_bpb"], params=s["params"],
                   wall=s.get("wall"), command=" ".join(["build/clocklm"] + recipe.train_cmd(v, out, steps, 1337,
                   recipe.val_tokens(VOCAB))[1:]).replace(recipe.ROOT + "/", ""))
        with open(os.path.join(RUNS, "results.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"b{a.budget} {n:14s} steps {steps:5d} bpb {s['val_bpb']:.4f} wall {s.get('wall', 0):.0f}s", flush=True)


def table(a):
    rows = {}
    for l in open(os.path.join(RUNS, "results.jsonl")):
        r = json.loads(l)
        rows[(r["budget_s"], r["name"])] = r
    lines = ["| budget | run | auto's pick | steps | tok/s (p90) | tokens | val bpb (tune) | vs d4 | vs peer |",
             "|---|---|---|---|---|---|---|---|---|"]
    out = []
    for b in sorted({b for b, _ in rows}):
        d4 = rows.get((b, "d4"))
        pf = os.path.join(recipe.ROOT, "runs", "recipe", "peer", f"peer-{b}.json")
        peer = json.load(open(pf)) if os.path.exists(pf) else None
        for (bb, n), r in sorted(rows.items(), key=lambda kv: kv[1]["val_bpb"]):
            if bb != b:
                continue
            vs_d4 = f"{100 * (r['val_bpb'] / d4['val_bpb'] - 1):+.1f}%" if d4 else "n/a"
            vs_peer = f"{100 * (r['val_bpb'] / peer['val']['bpb'] - 1):+.1f}%" if peer else "not run"
            lines.append(f"| {b} s | {n} | {'yes' if r['auto'] else ''} | {r['steps']} | {r['tps_p90']:.0f} | "
                         f"{r['tokens']:,} | {r['val_bpb']:.4f} | {vs_d4} | {vs_peer} |")
            out.append(r)
        if peer:
            vs_d4 = f"{100 * (peer['val']['bpb'] / d4['val_bpb'] - 1):+.1f}%" if d4 else "n/a"
            lines.append(f"| {b} s | PyTorch peer (nanochat recipe, d4, {peer['precision']}) | | {peer['steps']} | "
                         f"{peer['tokens_per_second']:.0f} | {peer['tokens']:,} | {peer['val']['bpb']:.4f} | "
                         f"{vs_d4} | — |")
    res = os.path.join(recipe.ROOT, "bench", "results")
    json.dump(dict(method="bench/auto_bench.sh; see bench/results/auto.md", rows=out),
              open(os.path.join(res, "auto.json"), "w"), indent=1)
    recipe.write_table(os.path.join(res, "auto.md"), lines)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    x = sub.add_parser("plan"); x.add_argument("--budget", type=int, required=True)
    x = sub.add_parser("throughput"); x.add_argument("--budgets", required=True)
    x.add_argument("--rounds", type=int, default=3); x.add_argument("--steps", type=int, default=8)
    x = sub.add_parser("throughput-add"); x.add_argument("--budgets", required=True)
    x.add_argument("--ref", default="speedrun-10m")
    x.add_argument("--rounds", type=int, default=3); x.add_argument("--steps", type=int, default=8)
    x = sub.add_parser("train"); x.add_argument("--budget", type=int, required=True)
    x.add_argument("--only", default="", help="these contenders only (names, comma-separated)")
    sub.add_parser("table")
    a = p.parse_args()
    os.makedirs(RUNS, exist_ok=True)
    {"plan": plan, "throughput": throughput, "throughput-add": throughput_add, "train": train,
     "table": table}[a.cmd](a)
