#!/usr/bin/env python3
"""Pipeline schedules on this machine, as a markdown table.

The small configuration (6 layers, 6 heads, width 384, sequence 256) with M = 8
micro-batches of 1 sequence per step: one rank with one thread (the same micro-batches,
accumulated), then every schedule on P = 2 ranks of one thread each, interleaved per rep so
the machine's drift hits every row alike.  Each run is `meshtrain train --log-json`; the
table quotes medians over reps of per-step medians (the first step, which faults its
memory in, is left out).

    python3 bench/pp_bench.py [--meshtrain build/meshtrain] [--reps 3] [--steps 8]
        [--schedules naive,gpipe,1f1b,interleaved,zb,zb2] [--svg bench/pp_1f1b.svg]

Columns: ms/step, tokens/s, the measured bubble (idle share of the span of the step's
compute over both ranks, from the JSON log), the replayed bubble (each traced step run in the
simulator with every action's own measured time and free transfers, `meshtrain schedule
--from-trace`: what the lists allow given what the machine did; measured minus replayed is
the executor's own cost), the simulated bubble (the lists with this run's mean F, B and W
times on each stage: the run's end-of-run line), and the pipeline efficiency
T(P=1) / (P x T(pipeline)), T(P=1) the mean of the one-rank runs just before and after the
rep (one runs before the first rep and one after each).  interleaved runs V = 3
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


def replayed(mt, schedule, trace, steps):
    """Median over the steps after the first of the traced step replayed in the simulator
    with each action's own measured time and free transfers (`meshtrain schedule --from-trace`)."""
    out = []
    for k in range(1, steps):
        cmd = [mt, "schedule", "--pp", "2", "--microbatches", str(M), "--schedule", schedule,
               "--from-trace", trace, "--step", str(k)]
        if schedule == "interleaved":
            cmd += ["--virtual-stages", "3"]
        p = subprocess.run(cmd, capture_output=True, text=True, check=True)
        out.append(float(re.search(r"replayed with each action's measured time.*bubble ([0-9.]+)", p.stdout).group(1)))
    return statistics.median(out)


def run(mt, data, pp, schedule, steps, keep_trace=None):
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        trace = keep_trace or os.path.join(tmp, "trace.json")
        cmd = [mt, "train", "--data", data, "--layers", str(L), "--heads", str(H), "--dim", str(C),
               "--seq-len", str(T), "--batch-size", str(M), "--micro-batch-size", "1", "--threads", "1",
               "--steps", str(steps), "--warmup", "2", "--eval-every", "0", "--log-every", "0", "--log-json", log]
        if pp > 1:
            cmd += ["--pp", str(pp), "--schedule", schedule, "--trace", trace]
            if schedule == "interleaved":
                cmd += ["--virtual-stages", "3"]
        p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        if p.returncode != 0:
            raise RuntimeError(f"exit {p.returncode}: {' '.join(cmd)}\n{p.stderr[-800:]}")
        rows = [json.loads(line) for line in open(log)][1:]
        rep = replayed(mt, schedule, trace, steps) if pp > 1 else float("nan")
    ms = statistics.median(r["step_ms"] for r in rows)
    bubble = statistics.median(r["bubble"] for r in rows) if pp > 1 else 0.0
    sim = float("nan")
    m = re.search(r"simulated ([0-9.]+) with this run's costs", p.stdout)
    if m:
        sim = float(m.group(1))
    return ms, M * T / (ms / 1e3), bubble, sim, rep


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meshtrain", default=os.path.join(ROOT, "build", "meshtrain"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--schedules", default="naive,gpipe,1f1b,interleaved,zb,zb2")
    ap.add_argument("--svg", default=None)
    a = ap.parse_args()
    data = corpus_dir(a.meshtrain)
    scheds = a.schedules.split(",")
    base, res = [], {s: [] for s in scheds}
    one = lambda: run(a.meshtrain, data, 1, None, a.steps)[:2]
    base.append(one())
    print(f"P=1 {base[-1][0]:.0f} ms/step", file=sys.stderr)
    for rep in range(a.reps):
        pending = []
        for s in scheds:
            trace = None
            if a.svg and s == "1f1b" and rep == a.reps - 1:
                trace = os.path.join(tempfile.gettempdir(), "pp_bench_trace.json")
            pending.append((s, run(a.meshtrain, data, 2, s, a.steps, trace)))
            if trace:
                subprocess.run([a.meshtrain, "schedule", "--pp", "2", "--microbatches", str(M), "--schedule", "1f1b",
                                "--from-trace", trace, "--svg", a.svg], check=True, capture_output=True)
        base.append(one())
        print(f"P=1 {base[-1][0]:.0f} ms/step", file=sys.stderr)
        ms1 = (base[-2][0] + base[-1][0]) / 2  # the one-rank runs just before and after this rep's
        for s, (ms, tps, bub, sim, rp) in pending:
            res[s].append((ms, tps, bub, sim, rp, ms1 / (2 * ms)))
            print(f"rep {rep + 1}: P=2 {s} {ms:.0f} ms/step, bubble {bub:.3f} (replayed {rp:.3f}, simulated "
                  f"{sim:.3f}), efficiency {ms1 / (2 * ms):.3f}", file=sys.stderr)
    print(f"small configuration (layers {L}, heads {H}, width {C}, seq {T}), M = {M} micro-batches of 1 "
          f"sequence, 1 thread per rank, {a.reps} reps x {a.steps} steps (medians)\n")
    print("| layout | ms/step | tokens/s | measured bubble | replayed bubble | simulated bubble | efficiency |")
    print("|---|---|---|---|---|---|---|")
    med = lambda rows, i: statistics.median(x[i] for x in rows)
    print(f"| P=1, one thread | {med(base, 0):,.0f} | {med(base, 1):,.0f} | - | - | - | 1 |")
    for s in scheds:
        r = res[s]
        name = s + (" (V=3)" if s == "interleaved" else "")
        print(f"| P=2 {name} | {med(r, 0):,.0f} | {med(r, 1):,.0f} | {med(r, 2):.3f} | {med(r, 4):.3f} | "
              f"{med(r, 3):.3f} | {med(r, 5):.3f} |")


if __name__ == "__main__":
    main()
