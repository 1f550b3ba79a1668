#!/usr/bin/env python3
"""GPT-2 byte-level BPE encoding: meshtrain against tiktoken and Hugging Face `tokenizers`,
side by side in one run, one thread, as a markdown table (issue 27).

    .venv-tok/bin/python bench/tokenizer_bench.py [--meshtrain build/meshtrain]
        [--tiktoken-file runs/tokenizers/gpt2/gpt2.tiktoken] [--mb 8] [--reps 3]

Needs scripts/setup-tokenizer-check.sh (tiktoken and the vocabulary); `tokenizers` is used
when importable (`.venv-tok/bin/pip install tokenizers`).  Texts, each about --mb MB:
English prose (the fortunes Debian ships), a mixed-script text (nine scripts, emoji and
white space, shuffled lines), source code (this repository's C files).

meshtrain: `meshtrain tokenizer encode --format u32` on the file; its time is the wall
time less that of the same command on an empty file (reading the vocabulary), best of
--reps.  tiktoken: `Encoding.encode(text, allowed_special="all")` with r50k_base's pattern
and these ranks; `tokenizers`: the tokenizer.json that `meshtrain tokenizer import` writes
from the same ranks, `encode(text).ids`, with
RAYON_NUM_THREADS=1; both timed in this process, best of --reps, on the decoded text.
Every tokenizer's ids are checked against tiktoken's first.  Also: meshtrain at 1 MB and
10x that (prose, and one piece with no split point): the time ratio, which should be at
most 11.  MB is 10^6 bytes of UTF-8 input.
"""

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def prose(n):
    out, total = [], 0
    d = "/usr/share/games/fortunes"
    names = sorted(f for f in os.listdir(d) if not f.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(d, f)))
    while total < n:
        for f in names:
            t = open(os.path.join(d, f), "rb").read().decode("utf-8", errors="ignore")
            out.append(t)
            total += len(t.encode())
            if total >= n:
                break
    return "".join(out)


def mixed(n):
    lines = [
        "Ünïcödé façade, Straße, crème brûlée, Ångström, Dvořák, Łódź.",
        "Съешь же ещё этих мягких французских булок, да выпей чаю.",
        "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
        "我能吞下玻璃而不伤身体。日本語のテキスト、カタカナ。",
        "한국어 문장입니다. أنا قادر على أكل الزجاج و هذا لا يؤلمني.",
        "मैं काँच खा सकता हूँ और मुझे उससे कोई चोट नहीं पहुंचती.",
        "אני יכול לאכול זכוכית. ฉันกินกระจกได้",
        "Emoji 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇫🇷 and 1,234.56 numbers\tand\u00a0spaces.",
    ]
    rnd = random.Random(3)
    out, total = [], 0
    while total < n:
        ln = rnd.choice(lines) + ("\n" if rnd.random() < 0.8 else "  ")
        out.append(ln)
        total += len(ln.encode())
    return "".join(out)


def code(n):
    srcs = []
    for root, _, files in os.walk("src"):
        srcs += [os.path.join(root, f) for f in sorted(files) if f.endswith((".c", ".h"))]
    out, total = [], 0
    while total < n:
        for f in sorted(srcs):
            t = open(f, encoding="utf-8").read()
            out.append(t)
            total += len(t.encode())
            if total >= n:
                break
    return "".join(out)


PEAK = {}  # input -> meshtrain's peak RSS in MB (GNU time's %M)


def meshtrain_s(mt, vocab, path, reps):
    empty = path + ".empty"
    open(empty, "w").close()

    def wall(p):
        best = 1e9
        for _ in range(reps):
            t0 = time.perf_counter()
            r = subprocess.run(["/usr/bin/time", "-f", "%M", mt, "tokenizer", "encode", "--threads", "1", "--tokenizer", vocab, "--input", p,
                                "--format", "u32", "--out", p + ".u32"], check=True, stderr=subprocess.PIPE, text=True)
            best = min(best, time.perf_counter() - t0)
            PEAK[p] = int(r.stderr.strip().splitlines()[-1]) / 1024
        return best

    return max(wall(path) - wall(empty), 1e-9)


def ids_of(path):
    b = open(path, "rb").read()
    return [int.from_bytes(b[i:i + 4], "little") for i in range(0, len(b), 4)]


def hf_tokenizer(mt, vocab, tmp):
    """Hugging Face's tokenizers on the tokenizer.json `meshtrain tokenizer import` writes."""
    from tokenizers import Tokenizer

    out = os.path.join(tmp, "hf")
    subprocess.run([mt, "tokenizer", "import", "--from", vocab, "--out", out], check=True, stdout=subprocess.DEVNULL)
    return Tokenizer.from_file(os.path.join(out, "tokenizer.json"))


def best_of(reps, fn):
    best = 1e9
    for _ in range(reps):
        t0 = time.perf_counter()
        r = fn()
        best = min(best, time.perf_counter() - t0)
    return best, r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--meshtrain", default="build/meshtrain")
    ap.add_argument("--tiktoken-file", default="runs/tokenizers/gpt2/gpt2.tiktoken")
    ap.add_argument("--mb", type=float, default=8.0)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    from tiktoken_ext.openai_public import r50k_pat_str

    ranks = load_tiktoken_bpe(a.tiktoken_file)
    enc = tiktoken.Encoding("gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 50256})
    n = int(a.mb * 1e6)
    tmp = tempfile.mkdtemp()
    try:
        hf = hf_tokenizer(a.meshtrain, a.tiktoken_file, tmp)
    except ImportError:
        hf = None
    rows = []
    for name, make in (("English prose", prose), ("mixed scripts", mixed), ("source code", code)):
        text = make(n)
        path = os.path.join(tmp, name.split()[0] + ".txt")
        open(path, "w", encoding="utf-8", newline="").write(text)
        mb = os.path.getsize(path) / 1e6
        ms = meshtrain_s(a.meshtrain, a.tiktoken_file, path, a.reps)
        tt, ref = best_of(a.reps, lambda: enc.encode(text, allowed_special="all"))
        if ids_of(path + ".u32") != ref:
            sys.exit(f"{name}: meshtrain's ids differ from tiktoken's")
        row = [name, mb, mb / ms, mb / tt, None]
        if hf is not None:
            th, hids = best_of(a.reps, lambda: hf.encode(text).ids)
            if hids != ref:
                print(f"note: {name}: tokenizers' ids differ from tiktoken's", file=sys.stderr)
            row[4] = mb / th
        rows.append(row)
        print(f"{name}: {mb:.1f} MB done", file=sys.stderr)
    print(f"GPT-2 BPE encode, one thread, best of {a.reps} ({os.uname().machine}, "
          f"tiktoken {tiktoken.__version__}{', tokenizers ' + __import__('tokenizers').__version__ if hf else ''})\n")
    print("| text | MB | meshtrain MB/s | tiktoken MB/s | tokenizers MB/s | vs tiktoken | vs tokenizers |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, mb, m, t, h in rows:
        hs = f"{h:.2f}" if h else "-"
        hr = f"{m / h:.2f}x" if h else "-"
        print(f"| {name} | {mb:.1f} | {m:.1f} | {t:.1f} | {hs} | {m / t:.2f}x | {hr} |")
    # prepare: one thread and two, on the prose
    prose_path = os.path.join(tmp, "English.txt")
    pt = []
    for th in (1, 2):
        best = 1e9
        for _ in range(a.reps):
            out = os.path.join(tmp, f"prep{th}")
            subprocess.run(["rm", "-rf", out], check=True)
            t0 = time.perf_counter()
            subprocess.run([a.meshtrain, "prepare", "--input", prose_path, "--out", out, "--tokenizer", a.tiktoken_file,
                            "--threads", str(th)], check=True, stdout=subprocess.DEVNULL)
            best = min(best, time.perf_counter() - t0)
        pt.append(best)
    mb = os.path.getsize(prose_path) / 1e6
    print(f"\n`prepare` on the prose ({mb:.1f} MB, whole command: read, encode, write): 1 thread {mb / pt[0]:.1f} MB/s, "
          f"2 threads {mb / pt[1]:.1f} MB/s: {pt[0] / pt[1]:.2f}x")
    # scaling: 1 MB and 10 MB, prose and one piece with no split point
    print("\n| input | 1 MB s | 10 MB s | ratio |")
    print("|---|---:|---:|---:|")
    rnd = random.Random(5)
    for name, make in (("English prose", lambda k: prose(k)[:k]),
                       ("one piece, no split point", lambda k: "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz")
                                                                        for _ in range(k)))):
        t = []
        for k in (1_000_000, 10_000_000):
            path = os.path.join(tmp, f"{name.split()[0].strip(',')}-{k // 1_000_000}MB.txt")
            open(path, "w", encoding="utf-8").write(make(k))
            t.append(meshtrain_s(a.meshtrain, a.tiktoken_file, path, a.reps))
        print(f"| {name} | {t[0]:.3f} | {t[1]:.3f} | {t[1] / t[0]:.1f} |")
    print("\nmeshtrain's peak RSS (MB): " + ", ".join(f"{os.path.basename(p)} ({os.path.getsize(p) / 1e6:.0f} MB) "
                                                   f"{m:.0f}" for p, m in PEAK.items() if not p.endswith(".empty")))


if __name__ == "__main__":
    main()
