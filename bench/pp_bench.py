#!/usr/bin/env python3
"""Pipeline schedules on this machine, as a markdown table.

The small configuration (6 layers, 6 heads, width 384, sequence 256) with M = 8
micro-batches of 1 sequence per step: one rank with one thread (the same micro-batches,
accumulated), then every schedule on P = 2 ranks of one thread each, interleaved per rep so
the machine's drift hits every row alike.  Each run is `meshtrain train --log-json`; the
table quotes medians over reps of per-step medians (the first step, which faults its
memory in, is left out).

    python3 bench/pp_bench.py [--meshtrain build/meshtrain] [--reps 3] [--steps 8]
        [--schedules naive,gpipe,1f1b,interleaved,zb] [--svg bench/pp_1f1b.svg]

Columns: ms/step, tokens/s, the measured bubble (idle share of the span of the step's
compute over both ranks, from the JSON log), the simulated bubble (the schedule's lists run
in the simulator with this run's mean F, B and W times on each stage: the run's end-of-run
line), and the pipeline efficiency T(P=1) / (P x T(pipeline)).  interleaved runs V = 3
chunks per rank (6 layers over 6 virtual stages).  With --svg the last rep's 1F1B run is
traced and its measured step drawn under the plan (`meshtrain schedule --from-trace`).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

from dp_scaling import ROOT, corpus_dir

L, H, C, T, M = 6, 6, 384, 256, 8


def run(mt, data, pp, schedule, steps, trace=None):
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        cmd = [mt, "train", "--data", data, "--layers", str(L), "--heads", str(H), "--dim", str(C),
               "--seq-len", str(T), "--batch-size", str(M), "--micro-batch-size", "1", "--threads", "1",
               "--steps", str(steps), "--warmup", "2", "--eval-every", "0", "--log-every", "0", "--log-json", log]
        if pp > 1:
            cmd += ["--pp", str(pp), "--schedule", schedule]
            if schedule == "interleaved":
                cmd += ["--virtual-stages", "3"]
        if trace:
            cmd += ["--trace", trace]
        p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        if p.returncode != 0:
            raise RuntimeError(f"exit {p.returncode}: {' '.join(cmd)}\n{p.stderr[-800:]}")
        rows = [json.loads(line) for line in open(log)][1:]
    ms = statistics.median(r["step_ms"] for r in rows)
    bubble = statistics.median(r["bubble"] for r in rows) if pp > 1 else 0.0
    sim = float("nan")
    m = re.search(r"simulated ([0-9.]+) with this run's costs", p.stdout)
    if m:
        sim = float(m.group(1))
    return ms, M * T / (ms / 1e3), bubble, sim


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meshtrain", default=os.path.join(ROOT, "build", "meshtrain"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--schedules", default="naive,gpipe,1f1b,interleaved,zb")
    ap.add_argument("--svg", default=None)
    a = ap.parse_args()
    data = corpus_dir(a.meshtrain)
    scheds = a.schedules.split(",")
    base, res = [], {s: [] for s in scheds}
    for rep in range(a.reps):
        ms1, tps1, _, _ = run(a.meshtrain, data, 1, None, a.steps)
        base.append((ms1, tps1))
        print(f"rep {rep + 1}: P=1 {ms1:.0f} ms/step", file=sys.stderr)
        for s in scheds:
            trace = None
            if a.svg and s == "1f1b" and rep == a.reps - 1:
                trace = os.path.join(tempfile.gettempdir(), "pp_bench_trace.json")
            ms, tps, bub, sim = run(a.meshtrain, data, 2, s, a.steps, trace)
            res[s].append((ms, tps, bub, sim, ms1 / (2 * ms)))
            print(f"rep {rep + 1}: P=2 {s} {ms:.0f} ms/step, bubble {bub:.3f} (simulated {sim:.3f}), "
                  f"efficiency {ms1 / (2 * ms):.3f}", file=sys.stderr)
            if trace:
                subprocess.run([a.meshtrain, "schedule", "--pp", "2", "--microbatches", str(M), "--schedule", "1f1b",
                                "--from-trace", trace, "--svg", a.svg], check=True, capture_output=True)
    print(f"small configuration (layers {L}, heads {H}, width {C}, seq {T}), M = {M} micro-batches of 1 "
          f"sequence, 1 thread per rank, {a.reps} reps x {a.steps} steps (medians)\n")
    print("| layout | ms/step | tokens/s | measured bubble | simulated bubble | efficiency |")
    print("|---|---|---|---|---|---|")
    med = lambda rows, i: statistics.median(x[i] for x in rows)
    print(f"| P=1, one thread | {med(base, 0):,.0f} | {med(base, 1):,.0f} | - | - | 1 |")
    for s in scheds:
        r = res[s]
        name = s + (" (V=3)" if s == "interleaved" else "")
        print(f"| P=2 {name} | {med(r, 0):,.0f} | {med(r, 1):,.0f} | {med(r, 2):.3f} | {med(r, 3):.3f} | "
              f"{med(r, 4):.3f} |")


if __name__ == "__main__":
    main()
