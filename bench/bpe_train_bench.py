#!/usr/bin/env python3
"""bpe_train_bench.py - meshtrain's BPE trainer against Hugging Face tokenizers' BpeTrainer,
side by side in one run.

For each text of tests/textgen.py (English prose, a mixed-script text, source code; --mb MB
each) and each thread count, both train --vocab-size tokens (GPT-2's <|endoftext|> as the
special token) from the same file; their merges and vocabularies are compared before a time
counts.  meshtrain runs as the command (`meshtrain tokenizer train`, its whole run: read,
count, merge, write the files); tokenizers in a fresh Python process with RAYON_NUM_THREADS
set (its train(files) and save, not the import).  Best of --reps wall times; peak RSS by GNU
time.  Run it with the Python that has tokenizers (scripts/setup-tokenizer-check.sh):

    .venv-tok/bin/python bench/bpe_train_bench.py --mb 10 --reps 3
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import textgen  # noqa: E402

HF = """
import sys, time
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
text, vs, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t0 = time.perf_counter()
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.train([text], trainers.BpeTrainer(vocab_size=vs, special_tokens=["<|endoftext|>"], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
tok.save(out)
print(time.perf_counter() - t0)
"""


def run_timed(cmd, env=None):
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, check=True, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, env=env)
    return time.perf_counter() - t0, int(r.stderr.strip().splitlines()[-1]) / 1024, r.stdout


def model_of(path):
    m = json.load(open(path))["model"]
    return [tuple(x.split(" ")) if isinstance(x, str) else tuple(x) for x in m["merges"]], m["vocab"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--meshtrain", default=os.path.join(ROOT, "build/meshtrain"))
    ap.add_argument("--mb", type=float, default=10.0)
    ap.add_argument("--vocab-size", type=int, default=32000)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--texts", default="english,mixed,code")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    rows = []
    try:
        for kind in a.texts.split(","):
            path = os.path.join(tmp, kind + ".txt")
            open(path, "wb").write(getattr(textgen, kind)(int(a.mb * 1e6)))
            for th in [int(x) for x in a.threads.split(",")]:
                mt_best, hf_best, mt_rss, hf_rss = 1e9, 1e9, 0, 0
                for _ in range(a.reps):
                    out = os.path.join(tmp, "mt")
                    shutil.rmtree(out, ignore_errors=True)
                    s, rss, _ = run_timed([a.meshtrain, "tokenizer", "train", "--input", path, "--vocab-size",
                                           str(a.vocab_size), "--special", "<|endoftext|>", "--threads", str(th),
                                           "--out", out])
                    mt_best, mt_rss = min(mt_best, s), max(mt_rss, rss)
                    env = dict(os.environ, RAYON_NUM_THREADS=str(th), TOKENIZERS_PARALLELISM="true")
                    s, rss, _ = run_timed([sys.executable, "-c", HF, path, str(a.vocab_size),
                                           os.path.join(tmp, "hf.json")], env=env)
                    hf_best, hf_rss = min(hf_best, s), max(hf_rss, rss)
                mm, mv = model_of(os.path.join(out, "tokenizer.json"))
                hm, hv = model_of(os.path.join(tmp, "hf.json"))
                if mm != hm or mv != hv:
                    sys.exit("%s: meshtrain's merges or vocabulary differ from tokenizers'" % kind)
                mb = os.path.getsize(path) / 1e6
                rows.append((kind, mb, th, len(mm), mt_best, hf_best, mt_rss, hf_rss))
                print("%s %.1f MB, %d thread(s): %d merges identical; meshtrain %.2f s, tokenizers %.2f s"
                      % (kind, mb, th, len(mm), mt_best, hf_best), file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("| text | MB | threads | merges | meshtrain s | tokenizers s | speed-up | meshtrain MB/s | "
          "meshtrain peak MB | tokenizers peak MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind, mb, th, nm, m, h, mr, hr in rows:
        print("| %s | %.1f | %d | %d | %.2f | %.2f | %.2fx | %.1f | %.0f | %.0f |"
              % (kind, mb, th, nm, m, h, h / m, mb / m, mr, hr))


if __name__ == "__main__":
    main()
