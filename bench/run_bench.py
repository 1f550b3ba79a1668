#!/usr/bin/env python3
"""Benchmark meshtrain against PyTorch on the CPU and print a markdown table.

For each configuration and thread count the two engines run interleaved
(meshtrain, pytorch, meshtrain, pytorch, ...; --reps each), because step times here drift
by 6-32% between runs; the table quotes medians over the reps.

    python3 bench/run_bench.py [--meshtrain build/meshtrain] [--python PY]
        [--configs tiny,small,long,gpt2] [--threads 1,2] [--reps 3] [--steps 10] [--warmup 3]
        [--out bench/results.md]

meshtrain: `<bin> bench --layers L --heads H --dim C --seq-len T --batch-size B --vocab V
--threads N --steps S --warmup W`; its last stdout line is a JSON object with
ms_per_step, tokens_per_s, floor_ms, threads, blas, peak_rss_mb.
PyTorch: `<python> bench/torch_step.py ...`, last stdout line likewise.

Environment: both get OMP_NUM_THREADS=N.  For the PyTorch runs only, OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE are removed: this machine sets them, and they slow OpenBLAS sgemm
by ~1.8x (docs: /work/shared/MACHINE-NOTES.md); meshtrain's environment is left alone.
Progress goes to stderr; exit status 1 if any run failed.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# name: (layers, heads, dim, seq, batch, vocab)
CONFIGS = {
    "tiny": (4, 4, 256, 256, 8, 256),
    "small": (6, 6, 384, 256, 8, 256),
    "long": (4, 4, 256, 1024, 2, 256),      # attention dominates
    "gpt2": (12, 12, 768, 1024, 1, 50257),  # GPT-2 124M, the model llm.c trains
}


def run_engine(cmd, env, timeout):
    """Run one benchmark process; return its last stdout line parsed as JSON, or raise
    RuntimeError with the tail of its output."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timed out after {timeout} s: {' '.join(cmd)}")
    except OSError as e:
        raise RuntimeError(f"cannot run {cmd[0]}: {e}")
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"exit {proc.returncode}: {' '.join(cmd)}\n    " + "\n    ".join(tail))
    try:
        result = json.loads(lines[-1])
    except json.JSONDecodeError:
        raise RuntimeError(f"last stdout line is not JSON: {lines[-1][:200]!r}")
    missing = {"ms_per_step", "tokens_per_s", "blas", "peak_rss_mb"} - set(result)
    if missing:
        raise RuntimeError(f"JSON from {cmd[0]} lacks {sorted(missing)}")
    result["wall_s"] = time.perf_counter() - t0
    return result


def engine_commands(args, cfg, threads):
    """The (name, command, environment) of each engine for one configuration."""
    L, H, C, T, B, V = CONFIGS[cfg]
    mt_cmd = [args.meshtrain, "bench", "--layers", L, "--heads", H, "--dim", C,
              "--seq-len", T, "--batch-size", B, "--vocab", V, "--threads", threads,
              "--steps", args.steps, "--warmup", args.warmup]
    pt_cmd = [args.python, os.path.join(HERE, "torch_step.py"), "--layers", L, "--heads", H,
              "--dim", C, "--seq", T, "--batch", B, "--vocab", V, "--threads", threads,
              "--steps", args.steps, "--warmup", args.warmup]
    mt_env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    pt_env = {k: v for k, v in mt_env.items()
              if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    return [("meshtrain", [str(a) for a in mt_cmd], mt_env),
            ("pytorch", [str(a) for a in pt_cmd], pt_env)]


def fmt(x, digits=1):
    return "-" if x is None else f"{x:,.{digits}f}"


def median_of(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--meshtrain", default="build/meshtrain", help="meshtrain binary")
    ap.add_argument("--python", default=sys.executable, help="python with torch, for torch_step.py")
    ap.add_argument("--configs", default="tiny,small", help=f"comma list of {','.join(CONFIGS)}")
    ap.add_argument("--threads", default="1,2", help="comma list of thread counts")
    ap.add_argument("--reps", type=int, default=3, help="runs of each engine per row")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per run")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per run")
    ap.add_argument("--out", help="also write the table to this file")
    args = ap.parse_args()

    configs = args.configs.split(",")
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        sys.exit(f"unknown config {unknown[0]!r}; known: {', '.join(CONFIGS)}")
    try:
        thread_counts = [int(t) for t in args.threads.split(",")]
    except ValueError:
        sys.exit(f"--threads wants a comma list of integers, got {args.threads!r}")
    if args.reps < 1 or args.steps < 1 or args.warmup < 0 or min(thread_counts) < 1:
        sys.exit("--reps, --steps and --threads must be >= 1, --warmup >= 0")

    rows, blas, failures = [], {}, 0
    for cfg in configs:
        for threads in thread_counts:
            runs = {"meshtrain": [], "pytorch": []}
            for rep in range(args.reps):
                for name, cmd, env in engine_commands(args, cfg, threads):  # interleaved
                    print(f"[{cfg} threads={threads} rep {rep + 1}/{args.reps}] {name} ...",
                          end=" ", file=sys.stderr, flush=True)
                    try:
                        r = run_engine(cmd, env, args.timeout)
                    except RuntimeError as e:
                        failures += 1
                        print(f"FAILED\n  {e}", file=sys.stderr)
                        continue
                    runs[name].append(r)
                    detail = r["blas"]
                    if "version" in r:  # torch_step.py also says which torch and AdamW
                        detail += f" (torch {r['version']}, {r.get('optimizer', '?')} AdamW"
                        if "sdpa" in r:
                            detail += f", SDPA {r['sdpa']}"
                        if "import_rss_mb" in r:  # the libraries' share of the RSS column
                            detail += f"; RSS after `import torch`: {r['import_rss_mb']:.0f} MB"
                        detail += ")"
                    blas.setdefault(name, set()).add(detail)
                    print(f"{r['ms_per_step']:.1f} ms/step ({r['wall_s']:.0f} s)",
                          file=sys.stderr)
            mt_tok, pt_tok = median_of(runs["meshtrain"], "tokens_per_s"), \
                median_of(runs["pytorch"], "tokens_per_s")
            mt_ms, floor = median_of(runs["meshtrain"], "ms_per_step"), \
                median_of(runs["meshtrain"], "floor_ms")
            least = median_of(runs["meshtrain"], "least_floor_ms")
            pt_ms = median_of(runs["pytorch"], "ms_per_step")
            rows.append([cfg, str(threads), fmt(mt_ms), fmt(mt_tok, 0),
                         fmt(median_of(runs["pytorch"], "ms_per_step")), fmt(pt_tok, 0),
                         fmt(mt_tok / pt_tok if mt_tok and pt_tok else None, 2),
                         fmt(mt_ms / floor if mt_ms and floor else None, 2),
                         fmt(pt_ms / least if pt_ms and least else None, 2),
                         fmt(median_of(runs["meshtrain"], "peak_rss_mb"), 0),
                         fmt(median_of(runs["pytorch"], "peak_rss_mb"), 0)])

    header = ["config", "threads", "meshtrain ms/step", "meshtrain tok/s", "pytorch ms/step",
              "pytorch tok/s", "ratio (mt/pt tok/s)", "meshtrain / floor", "ceiling (pt / least floor)",
              "meshtrain RSS MB", "pytorch RSS MB"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines.append("")
    lines.append(f"Medians of {args.reps} interleaved runs per engine, {args.steps} timed "
                 f"steps after {args.warmup} warm-up steps each.")
    for name in ("meshtrain", "pytorch"):
        lines.append(f"- {name} BLAS: {'; '.join(sorted(blas.get(name, {'(no run succeeded)'})))}")
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")
    if failures:
        print(f"{failures} run(s) failed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
