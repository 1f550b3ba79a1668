#!/usr/bin/env python3
"""Two builds of meshtrain side by side, as a markdown table: a change against its base.

Every case runs on build A (the base) and build B (the change) in turn, rep after rep, so
the machine's drift hits both alike.  The cases are those of the other benchmarks:
run_bench.py's configurations (tiny and small, 1 and 2 threads, `meshtrain bench`: one
micro-batch), dp_scaling.py's layouts (small, dp 2, every ZeRO stage: 2 micro-batches per
step), pp_bench.py's (small, pp 2, every schedule, and one rank on the same 8
micro-batches), tp_bench.py's (small, tp 2 with and without sequence parallelism, one rank
at --tp-blocks 2), and accumulation at M > 2 (small, one rank and dp 2 with 8 micro-batches
per rank).  Each side runs with its own defaults: what a user of that build gets.

    python3 bench/ab_bench.py --a /tmp/base/build/meshtrain --b build/meshtrain
        [--reps 5] [--steps 6] [--only SUBSTRING] [--out FILE]

Columns: the median over reps of each run's median step time (the first step, which faults
its memory in, is left out) on A and B, B / A (the median of the per-rep ratios: the target
is <= 1.02), and the gradient bytes and peak tracked bytes (the JSON log's mem, the largest
rank's; `bench` reports its peak resident MB instead) on A and B.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from dp_scaling import ROOT, corpus_dir

SMALL = ["--layers", "6", "--heads", "6", "--dim", "384", "--seq-len", "256"]


def cases():
    """(name, kind, flags, threads): kind 'bench' runs `meshtrain bench`, 'train' a
    training run on the fortunes corpus."""
    out = []
    for cfg, shape in (("tiny", ["--layers", "4", "--heads", "4", "--dim", "256", "--seq-len", "256"]),
                       ("small", SMALL)):
        for th in (1, 2):
            out.append((f"bench {cfg}, {th} thread{'s' if th > 1 else ''}", "bench",
                        shape + ["--batch-size", "8", "--vocab", "256"], th))
    for z in (0, 1, 2, 3):
        out.append((f"dp 2 --zero {z}, batch 16 of 8 (M 2)", "train",
                    SMALL + ["--batch-size", "16", "--micro-batch-size", "8", "--dp", "2", "--zero", str(z)], 1))
    out.append(("one rank, batch 8 of 1 (M 8)", "train", SMALL + ["--batch-size", "8", "--micro-batch-size", "1"], 1))
    for s in ("naive", "gpipe", "1f1b", "interleaved", "zb"):
        extra = ["--virtual-stages", "3"] if s == "interleaved" else []
        out.append((f"pp 2 {s}, batch 8 of 1 (M 8)", "train",
                    SMALL + ["--batch-size", "8", "--micro-batch-size", "1", "--pp", "2", "--schedule", s] + extra, 1))
    for name, extra in (("tp 2", ["--tp", "2"]), ("tp 2 --sequence-parallel", ["--tp", "2", "--sequence-parallel"]),
                        ("one rank --tp-blocks 2", ["--tp-blocks", "2"])):
        out.append((f"{name}, batch 8 (M 1)", "train", SMALL + ["--batch-size", "8"] + extra, 1))
    out.append(("dp 2, batch 32 of 2 (M 16)", "train",
                SMALL + ["--batch-size", "32", "--micro-batch-size", "2", "--dp", "2"], 1))
    out.append(("dp 2 --zero 1, batch 32 of 2 (M 16)", "train",
                SMALL + ["--batch-size", "32", "--micro-batch-size", "2", "--dp", "2", "--zero", "1"], 1))
    return out


def run(mt, data, kind, flags, threads, steps):
    """(ms per step, gradient bytes or None, peak bytes) of one run."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if kind == "bench":
        cmd = [mt, "bench"] + flags + ["--threads", str(threads), "--steps", str(steps), "--warmup", "2"]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if p.returncode != 0:
            raise RuntimeError(f"exit {p.returncode}: {' '.join(cmd)}\n{p.stderr[-800:]}")
        r = json.loads(p.stdout.strip().splitlines()[-1])
        return r["ms_per_step"], None, r["peak_rss_mb"] * 1048576
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        cmd = [mt, "train", "--data", data] + flags + [
            "--threads", str(threads), "--steps", str(steps + 1), "--warmup", "2", "--eval-every", "0",
            "--eval-batches", "0", "--log-every", "0", "--log-json", log]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if p.returncode != 0:
            raise RuntimeError(f"exit {p.returncode}: {' '.join(cmd)}\n{p.stderr[-800:]}")
        rows = [json.loads(line) for line in open(log)]
    ms = statistics.median(r["step_ms"] for r in rows[1:])
    last = rows[-1]["mem"]
    return ms, max(m["grads"] for m in last), max(m["peak"] for m in last)


def mib(x):
    return "-" if x is None else f"{x / 1048576:,.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="the base build's meshtrain")
    ap.add_argument("--b", default=os.path.join(ROOT, "build", "meshtrain"), help="the change's meshtrain")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--only", default="", help="run only the cases whose name contains this")
    ap.add_argument("--out", help="also write the table to this file")
    args = ap.parse_args()
    data = corpus_dir(args.b)
    todo = [c for c in cases() if args.only in c[0]]
    res = {c[0]: {"a": [], "b": [], "ratio": []} for c in todo}
    for rep in range(args.reps):
        for name, kind, flags, threads in todo:
            got = {}
            for side in ("a", "b") if rep % 2 == 0 else ("b", "a"):
                got[side] = run(getattr(args, side), data, kind, flags, threads, args.steps)
                res[name][side].append(got[side])
            res[name]["ratio"].append(got["b"][0] / got["a"][0])
            print(f"rep {rep + 1}/{args.reps} {name}: A {got['a'][0]:.1f} ms, B {got['b'][0]:.1f} ms",
                  file=sys.stderr)
    lines = ["| case | A ms/step | B ms/step | B / A | A grads MiB | B grads MiB | A peak MiB | B peak MiB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, _, _, _ in todo:
        r = res[name]
        a_ms = statistics.median(x[0] for x in r["a"])
        b_ms = statistics.median(x[0] for x in r["b"])
        lines.append(f"| {name} | {a_ms:.1f} | {b_ms:.1f} | {statistics.median(r['ratio']):.3f} | "
                     f"{mib(r['a'][0][1])} | {mib(r['b'][0][1])} | {mib(max(x[2] for x in r['a']))} | "
                     f"{mib(max(x[2] for x in r['b']))} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
