#!/usr/bin/env python3
"""Equal-steps lever screen: variants of bench/recipe/variants.txt trained for the same number of
steps and seeds as a reference variant, scored on the tuning split; Δbpb per seed against the
reference. Levers that leave the step time unchanged (optimizer coefficients) are compared at equal
device time this way; for levers that change it (value embeddings), time both with `clocklm bench
train` side by side (each run's median step time is kept in its row, but runs made at different
times saw different load).

  steps_screen.py --ref SR --variants SR-polar,SR-ve3 --steps 547 --seeds 1337,1 [--threads 1]
      -> RUNS/steps/<variant>-s<seed>/, rows in RUNS/steps_screen.jsonl, a table on stdout
  steps_screen.py --table   -> the rows so far as a Markdown table and bench/results/recipe_steps.json
Environment as recipe.py: CLOCKLM (binary), RECIPE_DATA (holds tune-v8192), RECIPE_RUNS.
"""
import argparse, json, os, statistics, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import recipe  # noqa: E402  (variants(), data_dir(), val_tokens(), the binary and folders)


def train(v, steps, seed, threads, out):
    cmd = [recipe.EXE, "train", "--config", v["config"], "--data", recipe.data_dir(v["vocab"]), "--budget", "0",
           "--out", out, "--quiet", "--set", f"train.threads={threads}", "--set", "eval_every_seconds=0",
           "--set", "checkpoint_every_seconds=0", "--set", f"val_tokens={recipe.val_tokens(v['vocab'])}",
           "--set", f"max_steps={steps}", "--set", f"train.seed={seed}"]
    for s in v["sets"]:
        cmd += ["--set", s]
    s = recipe.run(cmd, out)
    return cmd, s


def median_step_seconds(out):
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    return statistics.median(r["step_seconds"] for r in rows if "step_seconds" in r and r.get("step", 0) > 1)


def screen(a):
    byname = {v["name"]: v for v in recipe.variants()}
    names = [a.ref] + [n for n in a.variants.split(",") if n and n != a.ref]
    for n in names:
        if n not in byname:
            sys.exit(f"steps_screen: no variant '{n}' in variants.txt")
    for seed in [int(x) for x in a.seeds.split(",")]:
        for n in names:
            out = os.path.join(recipe.RUNS, "steps", f"{n}-s{seed}")
            cmd, s = train(byname[n], a.steps, seed, a.threads, out)
            if s is None:
                continue
            row = dict(name=n, ref=a.ref, lever=byname[n]["lever"], sets=byname[n]["sets"], config=byname[n]["config"],
                       steps=a.steps, seed=seed, threads=a.threads, tokens=s["tokens"], val_bpb=s["val_bpb"],
                       params=s["params"], step_seconds_median=median_step_seconds(out),
                       command=" ".join(["build/clocklm"] + cmd[1:]).replace(recipe.ROOT + "/", ""))
            with open(os.path.join(recipe.RUNS, "steps_screen.jsonl"), "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{n:14s} seed {seed:5d} steps {a.steps} bpb {s['val_bpb']:.4f} "
                  f"step {row['step_seconds_median']:.3f}s", flush=True)


def table(a):
    rows = {}
    for l in open(os.path.join(recipe.RUNS, "steps_screen.jsonl")):
        r = json.loads(l)
        rows[(r["ref"], r["steps"], r["name"], r["seed"])] = r      # the last row of a run wins
    out = []
    for (ref, steps, name, _) in sorted({(k[0], k[1], k[2], 0) for k in rows}):
        if name == ref:
            continue
        seeds = sorted(sd for (rf, st, n, sd) in rows if (rf, st, n) == (ref, steps, name))
        seeds = [sd for sd in seeds if (ref, steps, ref, sd) in rows]
        if not seeds:
            continue
        me = [rows[(ref, steps, name, sd)] for sd in seeds]
        base = [rows[(ref, steps, ref, sd)] for sd in seeds]
        d = [m["val_bpb"] - b["val_bpb"] for m, b in zip(me, base)]
        out.append(dict(ref=ref, name=name, lever=me[0]["lever"], sets=me[0]["sets"], steps=steps, seeds=seeds,
                        val_bpb=[m["val_bpb"] for m in me], ref_val_bpb=[b["val_bpb"] for b in base],
                        delta=d, delta_mean=statistics.mean(d),
                        params=me[0]["params"], command=me[0]["command"]))
    json.dump(dict(method="bench/recipe/steps_screen.py: equal steps and seeds against the reference variant; "
                          "Δ = variant - reference per seed",
                   rows=out), open(os.path.join(recipe.ROOT, "bench", "results", "recipe_steps.json"), "w"), indent=1)
    print("| reference | variant | change | steps | seeds | val bpb (tune) | reference | Δbpb |")
    print("|---|---|---|---|---|---|---|---|")
    for o in out:
        print(f"| {o['ref']} | {o['name']} | {' '.join(o['sets'])} | {o['steps']} | {','.join(map(str, o['seeds']))} | "
              f"{' / '.join(f'{x:.4f}' for x in o['val_bpb'])} | {' / '.join(f'{x:.4f}' for x in o['ref_val_bpb'])} | "
              f"{' / '.join(f'{x:+.4f}' for x in o['delta'])} (mean {o['delta_mean']:+.4f}) |")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--ref", default="SR")
    p.add_argument("--variants", default="")
    p.add_argument("--steps", type=int, default=547)
    p.add_argument("--seeds", default="1337,1")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--table", action="store_true")
    a = p.parse_args()
    os.makedirs(os.path.join(recipe.RUNS, "steps"), exist_ok=True)
    table(a) if a.table else screen(a)
