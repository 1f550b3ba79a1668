#!/usr/bin/env python3
"""Which layout to pick on two cores: dp 2, tp 2 and pp 2 (1f1b, zb) against one rank.

The small configuration (6 layers, 6 heads, width 384, sequence 256, batch 8): one rank
with one thread, one rank with two threads, then each two-rank layout with one thread per
rank: dp 2 (DDP, a micro-batch of 4 per rank), tp 2 (the whole batch as one micro-batch on
each rank), pp 2 with 1f1b and with zb (8 micro-batches of one sequence).  Each row prints
ms/step, tokens/s, the ratios to both one-rank rows (taken within each rep, then their
median), rank 0's exposed communication per step (the time inside its group's calls:
dp, tp or pp, the only group a two-rank layout has) and, for pipelines, the measured
bubble.  Every run is `meshtrain train --log-json`; medians over reps of per-step
medians, the first step (page faults) left out.  The layouts run in turn in every rep.

    python3 bench/hybrid_bench.py [--meshtrain build/meshtrain] [--reps 3] [--steps 8]
"""

import argparse
import os
import statistics
import sys

from dp_scaling import ROOT, corpus_dir
from tp_bench import B, C, H, L, T, run  # the same configuration and runner

LAYOUTS = [  # name, threads, group, extra flags
    ("one rank, 2 threads", 2, None, ["--micro-batch-size", "8"]),
    ("one rank, 1 thread", 1, None, ["--micro-batch-size", "8"]),
    ("dp 2 (DDP), micro-batch 4", 1, "dp", ["--dp", "2", "--micro-batch-size", "4"]),
    ("tp 2, micro-batch 8", 1, "tp", ["--tp", "2", "--micro-batch-size", "8"]),
    ("pp 2 1f1b, 8 micro-batches of 1", 1, "pp", ["--pp", "2", "--micro-batch-size", "1"]),
    ("pp 2 zb, 8 micro-batches of 1", 1, "pp", ["--pp", "2", "--micro-batch-size", "1", "--schedule", "zb"]),
    ("one rank, 1 thread, micro-batch 1", 1, None, ["--micro-batch-size", "1"]),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meshtrain", default=os.path.join(ROOT, "build", "meshtrain"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    data = corpus_dir(a.meshtrain)
    res = {name: [] for name, _, _, _ in LAYOUTS}
    for rep in range(a.reps):
        for name, threads, _, extra in LAYOUTS:
            res[name].append(run(a.meshtrain, data, threads, extra, a.steps))
            ms, tps, ex, _ = res[name][-1]
            print(f"rep {rep + 1}: {name}: {ms:.0f} ms/step, {tps:.0f} tokens/s, {ex:.1f} ms exposed", file=sys.stderr)
    med = lambda name, i: statistics.median(x[i] for x in res[name])
    ratio = lambda num, den: statistics.median(x[1] / y[1] for x, y in zip(res[num], res[den]))
    two, one = LAYOUTS[0][0], LAYOUTS[1][0]
    print(f"small configuration (layers {L}, heads {H}, width {C}, seq {T}, batch {B}), "
          f"{a.reps} reps x {a.steps} steps (medians)\n")
    print("| layout | ms/step | tokens/s | x one rank 1 thread | x one rank 2 threads | exposed comm ms/step (group) | bubble |")
    print("|---|---|---|---|---|---|---|")
    for name, _, group, _ in LAYOUTS:
        ex = f"{med(name, 2):.1f} ({group})" if group else "-"
        bub = f"{statistics.median(x[3] for x in res[name]):.3f}" if res[name][0][3] is not None else "-"
        print(f"| {name} | {med(name, 0):,.0f} | {med(name, 1):,.0f} | {ratio(name, one):.3f} | "
              f"{ratio(name, two):.3f} | {ex} | {bub} |")


if __name__ == "__main__":
    main()
