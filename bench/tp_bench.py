#!/usr/bin/env python3
"""Tensor parallelism on this machine, as a markdown table.

The small configuration (6 layers, 6 heads, width 384, sequence 256, batch 8 as one
micro-batch): one rank with one thread, one rank with two threads, one rank with
--tp-blocks 2, 4 and 8 (what the bit-exact blocks cost a single-device step), and tp = 2 with one
thread per rank, with and without sequence parallelism, in the default mode and with
--tp-blocks 2.  Ratios are taken within each rep, then their median.  The layouts run in turn in
every rep, so the machine's drift hits every row alike.  Each run is `meshtrain train
--log-json`; the table quotes medians over reps of per-step medians (the first step, which
faults its memory in, is left out).  Exposed communication: rank 0's time inside the tp
collectives per step (none of it overlaps compute), from the JSON log.

    python3 bench/tp_bench.py [--meshtrain build/meshtrain] [--reps 3] [--steps 8]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from dp_scaling import ROOT, corpus_dir

L, H, C, T, B = 6, 6, 384, 256, 8

LAYOUTS = [  # name, threads, extra flags
    ("one rank, 1 thread", 1, []),
    ("one rank, 2 threads", 2, []),
    ("one rank, 1 thread, --tp-blocks 2", 1, ["--tp-blocks", "2"]),
    ("one rank, 1 thread, --tp-blocks 4", 1, ["--tp-blocks", "4"]),
    ("one rank, 1 thread, --tp-blocks 8", 1, ["--tp-blocks", "8"]),
    ("tp 2, 1 thread each", 1, ["--tp", "2"]),
    ("tp 2, 1 thread each, --tp-blocks 2", 1, ["--tp", "2", "--tp-blocks", "2"]),
    ("tp 2 --sequence-parallel, 1 thread each", 1, ["--tp", "2", "--sequence-parallel"]),
    ("tp 2 --sequence-parallel, 1 thread each, --tp-blocks 2", 1, ["--tp", "2", "--sequence-parallel", "--tp-blocks", "2"]),
]


def run(mt, data, threads, extra, steps):
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        cmd = [mt, "train", "--data", data, "--layers", str(L), "--heads", str(H), "--dim", str(C),
               "--seq-len", str(T), "--batch-size", str(B), "--threads", str(threads), "--steps", str(steps),
               "--warmup", "2", "--eval-every", "0", "--log-every", "0", "--log-json", log] + extra
        p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
        if p.returncode != 0:
            raise RuntimeError(f"exit {p.returncode}: {' '.join(cmd)}\n{p.stderr[-800:]}")
        rows = [json.loads(line) for line in open(log)][1:]
    ms = statistics.median(r["step_ms"] for r in rows)
    exposed = statistics.median(r["comm"][0]["exposed_ms"] for r in rows)
    bubble = statistics.median(r["bubble"] for r in rows) if "bubble" in rows[0] else None
    return ms, B * T / (ms / 1e3), exposed, bubble


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meshtrain", default=os.path.join(ROOT, "build", "meshtrain"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    data = corpus_dir(a.meshtrain)
    res = {name: [] for name, _, _ in LAYOUTS}
    for rep in range(a.reps):
        for name, threads, extra in LAYOUTS:
            res[name].append(run(a.meshtrain, data, threads, extra, a.steps))
            ms, tps, ex, _ = res[name][-1]
            print(f"rep {rep + 1}: {name}: {ms:.0f} ms/step, {tps:.0f} tokens/s, {ex:.1f} ms exposed", file=sys.stderr)
    med = lambda name, i: statistics.median(x[i] for x in res[name])
    # ratios per rep (same rep, same drift), then their median
    ratio = lambda num, den: statistics.median(x[1] / y[1] for x, y in zip(res[num], res[den]))
    one, two = LAYOUTS[0][0], LAYOUTS[1][0]
    print(f"small configuration (layers {L}, heads {H}, width {C}, seq {T}, batch {B} as one micro-batch), "
          f"{a.reps} reps x {a.steps} steps (medians)\n")
    print("| layout | ms/step | tokens/s | x one rank 1 thread | x one rank 2 threads | exposed tp comm ms/step |")
    print("|---|---|---|---|---|---|")
    for name, _, extra in LAYOUTS:
        ex = f"{med(name, 2):.1f}" if "--tp" in extra else "-"
        print(f"| {name} | {med(name, 0):,.0f} | {med(name, 1):,.0f} | {ratio(name, one):.3f} | "
              f"{ratio(name, two):.3f} | {ex} |")


if __name__ == "__main__":
    main()
