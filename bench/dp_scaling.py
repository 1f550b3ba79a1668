#!/usr/bin/env python3
"""Weak scaling of the data-parallel family on this machine, as a markdown table.

For each rep: one run on 1 rank (global batch 8), then one run per mode on 2 ranks (global
batch 16: the same 8 sequences per rank), all with 1 thread per rank, interleaved so that
the machine's drift hits every column alike.  Each run is `meshtrain train` on the
fortunes corpus with --log-json; the table quotes medians over reps of the per-step
medians (the first step, which faults its memory in, is left out).

    python3 bench/dp_scaling.py [--meshtrain build/meshtrain] [--config small]
        [--reps 3] [--steps 6] [--modes 0,1,2,3] [--bucket-mb 25]

Columns: tokens/s on 1 and 2 ranks, their ratio (the target: >= 1.8 for DDP), and the
exposed communication: the time a rank spends inside communication calls during the step
(posting, progressing and waiting; backward computes meanwhile only between those calls),
mean over ranks, as ms and as a share of the step.
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
CONFIGS = {"tiny": (4, 4, 256, 256), "small": (6, 6, 384, 256)}  # layers, heads, dim, seq
NAMES = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "FSDP (ZeRO-3)"}


def corpus_dir(mt):
    data = os.path.join(ROOT, "runs", "bench", "data")
    if os.path.exists(os.path.join(data, "train.bin")):
        return data
    src = "/usr/share/games/fortunes"
    files = sorted(f for f in os.listdir(src) if not f.endswith((".dat", ".u8")) and f != "ascii-art"
                   and os.path.isfile(os.path.join(src, f)))
    os.makedirs(os.path.dirname(data), exist_ok=True)
    text = os.path.join(ROOT, "runs", "bench", "fortunes.txt")
    with open(text, "wb") as out:
        for f in files:
            with open(os.path.join(src, f), "rb") as fh:
                out.write(fh.read())
    subprocess.run([mt, "prepare", "--input", text, "--out", data], check=True, capture_output=True)
    return data


def run(mt, data, cfg, dp, zero, steps, bucket_mb):
    L, H, C, T = cfg
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        cmd = [mt, "train", "--data", data, "--layers", str(L), "--heads", str(H), "--dim", str(C),
               "--seq-len", str(T), "--batch-size", str(8 * dp), "--micro-batch-size", "8", "--threads", "1",
               "--steps", str(steps), "--warmup", "2", "--eval-every", "0", "--log-every", "0",
               "--log-json", log, "--dp", str(dp), "--zero", str(zero), "--bucket-mb", str(bucket_mb)]
        p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        if p.returncode != 0:
            raise RuntimeError(f"exit {p.returncode}: {' '.join(cmd)}\n{p.stderr[-800:]}")
        rows = [json.loads(line) for line in open(log)][1:]
    ms = statistics.median(r["step_ms"] for r in rows)
    exposed = statistics.median(statistics.mean(c["exposed_ms"] for c in r["comm"]) for r in rows)
    return ms, 8 * dp * T / (ms / 1e3), exposed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meshtrain", default=os.path.join(ROOT, "build", "meshtrain"))
    ap.add_argument("--config", default="small", choices=sorted(CONFIGS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--modes", default="0,1,2,3")
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    a = ap.parse_args()
    cfg = CONFIGS[a.config]
    data = corpus_dir(a.meshtrain)
    modes = [int(m) for m in a.modes.split(",")]
    res = {m: [] for m in modes}
    for rep in range(a.reps):
        base_ms, base_tps, _ = run(a.meshtrain, data, cfg, 1, 0, a.steps, a.bucket_mb)
        print(f"rep {rep + 1}: dp=1 {base_ms:.0f} ms/step", file=sys.stderr)
        for m in modes:
            ms, tps, exp = run(a.meshtrain, data, cfg, 2, m, a.steps, a.bucket_mb)
            res[m].append((base_ms, base_tps, ms, tps, exp))
            print(f"rep {rep + 1}: dp=2 {NAMES[m]} {ms:.0f} ms/step, scaling {tps / base_tps:.2f}, "
                  f"exposed {exp:.1f} ms", file=sys.stderr)
    print(f"config {a.config} (layers {cfg[0]}, width {cfg[2]}, seq {cfg[3]}), 8 sequences per rank, "
          f"1 thread per rank, bucket {a.bucket_mb} MiB, {a.reps} reps x {a.steps} steps\n")
    print("| mode | dp=1 ms/step | dp=1 tok/s | dp=2 ms/step | dp=2 tok/s | scaling | exposed comm ms | exposed % |")
    print("|---|---|---|---|---|---|---|---|")
    for m in modes:
        r = res[m]
        med = lambda i: statistics.median(x[i] for x in r)
        scaling = statistics.median(x[3] / x[1] for x in r)
        share = statistics.median(x[4] / x[2] for x in r)
        print(f"| {NAMES[m]} | {med(0):,.0f} | {med(1):,.0f} | {med(2):,.0f} | {med(3):,.0f} | "
              f"{scaling:.2f} | {med(4):.1f} | {100 * share:.1f} |")


if __name__ == "__main__":
    main()
