#!/usr/bin/env python3
"""`meshtrain plan` against measured runs on this machine (issue 28), as a table:

    python3 bench/plan_check.py [--meshtrain build/meshtrain] [--steps 8] [--passes 2] [--quick]

`meshtrain calibrate` measures this machine for each model and device (one thread, two),
at the model's own products, then for every layout below `meshtrain plan --precision fp32 --cluster <calibration>` predicts the
step time and the fullest rank's memory and `meshtrain train` runs the planner's own command
(--threads as the device has) on a prepared byte-level text: the step time measured is the
fastest of the steps after the first two (which fault their memory in) of every pass (each
pass runs every layout once, one pass after the other: about 7 minutes each), the step that nothing
else on the machine slowed, which is what the planner predicts and what its calibration
measures (on a shared machine the median moves by 5-10% from minute to minute, the fastest
step by under 1%; the median's error is printed beside it); the memory is the log's `mem` of
the rank the planner names.  Two model sizes; one rank with one thread and with two,
two ranks with one thread each: DP with ZeRO 0-3, TP with and without sequence parallelism,
PP with each schedule and recomputation, micro-batch sizes 1 to 8.

Printed: predicted, measured and error per layout; the median and worst step-time error
(targets: median <= 5%, every layout within 15%), whether memory equals the measured bytes,
and per group of layouts on the same ranks and threads, the measured time of the planner's
first choice against the fastest measured (target: within 3%).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MODELS = {
    "S": ["--layers", "4", "--heads", "4", "--dim", "256", "--seq-len", "256", "--vocab", "256", "--batch-size", "8"],
    "W": ["--layers", "4", "--heads", "8", "--dim", "512", "--seq-len", "128", "--vocab", "2048", "--batch-size", "16"],
}

# (model, ranks, threads, layout flags)
LAYOUTS = [
    ("S", 1, 1, "--micro-batch-size 8 --recompute none"),
    ("S", 1, 1, "--micro-batch-size 2 --recompute none"),
    ("S", 1, 1, "--micro-batch-size 4 --recompute full"),
    ("S", 1, 1, "--micro-batch-size 8 --recompute attn"),
    ("S", 1, 2, "--micro-batch-size 8 --recompute none"),
    ("S", 1, 2, "--micro-batch-size 1 --recompute none"),
    ("S", 2, 1, "--dp 2 --zero 0 --micro-batch-size 4 --recompute none"),
    ("S", 2, 1, "--dp 2 --zero 1 --micro-batch-size 2 --recompute none"),
    ("S", 2, 1, "--dp 2 --zero 3 --micro-batch-size 4 --recompute none"),
    ("S", 2, 1, "--tp 2 --micro-batch-size 8 --recompute none --no-sequence-parallel"),
    ("S", 2, 1, "--tp 2 --micro-batch-size 4 --recompute none --sequence-parallel"),
    ("S", 2, 1, "--pp 2 --schedule 1f1b --micro-batch-size 1 --recompute none"),
    ("S", 2, 1, "--pp 2 --schedule gpipe --micro-batch-size 2 --recompute full"),
    ("S", 2, 1, "--pp 2 --schedule zb --micro-batch-size 1 --recompute none"),
    ("W", 1, 1, "--micro-batch-size 8 --recompute none"),
    ("W", 1, 1, "--micro-batch-size 4 --recompute attn"),
    ("W", 1, 2, "--micro-batch-size 16 --recompute none"),
    ("W", 1, 2, "--micro-batch-size 4 --recompute full"),
    ("W", 2, 1, "--dp 2 --zero 0 --micro-batch-size 8 --recompute none"),
    ("W", 2, 1, "--dp 2 --zero 2 --micro-batch-size 4 --recompute none"),
    ("W", 2, 1, "--tp 2 --micro-batch-size 8 --recompute none --no-sequence-parallel"),
    ("W", 2, 1, "--tp 2 --micro-batch-size 8 --recompute attn --sequence-parallel"),
    ("W", 2, 1, "--pp 2 --schedule 1f1b --micro-batch-size 2 --recompute none"),
    ("W", 2, 1, "--pp 2 --schedule interleaved --virtual-stages 2 --micro-batch-size 2 --recompute none"),
    ("W", 2, 1, "--pp 2 --schedule naive --micro-batch-size 4 --recompute none"),
]


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-400:]}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--meshtrain", default=os.path.join(ROOT, "build", "meshtrain"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--passes", type=int, default=2, help="runs of each layout, one pass over all of them after another")
    ap.add_argument("--quick", action="store_true", help="every third layout")
    a = ap.parse_args()
    mt = a.meshtrain
    tmp = tempfile.mkdtemp()
    run([sys.executable, os.path.join(ROOT, "tests", "textgen.py"), "english", "2000000", f"{tmp}/text.txt"])
    run([mt, "prepare", "--input", f"{tmp}/text.txt", "--out", f"{tmp}/data"])
    cal = {}
    layouts = LAYOUTS[::3] if a.quick else LAYOUTS
    for model, _, threads, _ in layouts:  # one calibration per model and device (threads), at the model
        if (model, threads) not in cal:
            cal[(model, threads)] = f"{tmp}/this-machine-{model}-{threads}.json"
            print(f"{model}, {threads} thread(s): " + run([mt, "calibrate", "--out", cal[(model, threads)], "--threads",
                                                           str(threads)] + MODELS[model]).strip())
    rows = []
    plans, steps_of = [], [[] for _ in layouts]
    for model, ranks, threads, lay in layouts:
        base = MODELS[model] + lay.split()
        plans.append(json.loads(run([mt, "plan"] + base + ["--devices", str(ranks), "--precision", "fp32", "--cluster",
                                                           "this-machine", "--calibration", cal[(model, threads)],
                                                           "--json", "--top", "1", "--data", f"{tmp}/data"]).splitlines()[0]))
    for p in range(a.passes):  # every layout once per pass: a slow minute of the machine costs one run, not the row
        for i, (model, ranks, threads, lay) in enumerate(layouts):
            log = f"{tmp}/run.jsonl"
            run([mt, "train"] + plans[i]["train_flags"].split()[2:] + ["--threads", str(threads), "--steps", str(a.steps),
                                                                       "--eval-every", "0", "--log-every", "0",
                                                                       "--log-json", log])
            steps = [json.loads(l) for l in open(log)]
            steps_of[i] += [s["step_ms"] / 1e3 for s in steps[2:]]
            if p == a.passes - 1:
                mem = steps[-1]["mem"][plans[i]["mem_rank"]]
                want = plans[i]["breakdown"]["memory_bytes"]
                mem_ok = all(mem[k] == want[k] for k in ("params", "grads", "optimizer", "activations"))
                ms, med = min(steps_of[i]), statistics.median(steps_of[i])
                rows.append((model, ranks, threads, lay, plans[i], ms, mem_ok, med))
                err = (plans[i]["step_s"] - ms) / ms
                print(f"  {model} {ranks}x{threads} {lay}: predicted {plans[i]['step_s'] * 1e3:.1f} ms, measured "
                      f"{ms * 1e3:.1f} ms ({100 * err:+.1f}%; median step {med * 1e3:.1f}), memory "
                      f"{'equal' if mem_ok else 'DIFFERS'}", file=sys.stderr)
    print("\n| model | ranks x threads | layout | predicted ms | measured ms (fastest) | error | median step ms | "
          "its error | memory |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    errs, merrs = [], []
    for model, ranks, threads, lay, plan, ms, mem_ok, med in rows:
        e, me = (plan["step_s"] - ms) / ms, (plan["step_s"] - med) / med
        errs.append(abs(e))
        merrs.append(abs(me))
        print(f"| {model} | {ranks} x {threads} | {lay} | {plan['step_s'] * 1e3:.1f} | {ms * 1e3:.1f} | {100 * e:+.1f}% | "
              f"{med * 1e3:.1f} | {100 * me:+.1f}% | {'= measured' if mem_ok else 'DIFFERS'} |")
    print(f"\n{len(rows)} layouts: median |error| {100 * statistics.median(errs):.1f}% (target <= 5%), worst "
          f"{100 * max(errs):.1f}% (target <= 15%); against the median step: median {100 * statistics.median(merrs):.1f}%, "
          f"worst {100 * max(merrs):.1f}%; memory equal to the measured bytes on {sum(r[6] for r in rows)} of {len(rows)}")
    groups = {}
    for r in rows:
        groups.setdefault((r[0], r[1], r[2]), []).append(r)
    for (model, ranks, threads), g in sorted(groups.items()):
        if len(g) < 2:
            continue
        first = min(g, key=lambda r: r[4]["step_s"])
        fastest = min(g, key=lambda r: r[5])
        gap = (first[5] - fastest[5]) / fastest[5]
        print(f"model {model}, {ranks} rank(s) x {threads} thread(s), {len(g)} layouts: the planner's first "
              f"({first[3]}) measured {first[5] * 1e3:.1f} ms, the fastest ({fastest[3]}) {fastest[5] * 1e3:.1f} ms: "
              f"{100 * gap:+.1f}% (target <= 3%)")


if __name__ == "__main__":
    main()
