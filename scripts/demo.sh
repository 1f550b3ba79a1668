#!/usr/bin/env bash
# The main job: set up, prepare an English corpus (the fortune-cookie texts that Debian's
# `fortunes` package ships), train a small byte-level GPT-2 for a few minutes, evaluate it
# and print a sample of generated text.  Everything lands in runs/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
mkdir -p runs/demo
corpus=runs/demo/fortunes.txt
if [ ! -s "$corpus" ]; then
  # every text file of the package, in name order (not the .dat indexes or ascii art)
  find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' ! -name 'ascii-art' \
    -print0 | sort -z | xargs -0 cat > "$corpus"
fi
[ -f runs/demo/data/train.bin ] || build/meshtrain prepare --input "$corpus" --out runs/demo/data
build/meshtrain train --data runs/demo/data --layers 4 --heads 4 --dim 128 --seq-len 64 \
  --batch-size 32 --steps "${STEPS:-800}" --lr 4e-3 --warmup 20 --eval-every 100 --log-every 25 \
  --save runs/demo/ckpt --log-json runs/demo/log.jsonl
echo "---- eval: the checkpoint's mean loss on val.bin (nats per byte) ----"
build/meshtrain eval --ckpt runs/demo/ckpt --data runs/demo/data/val.bin --max-batches 50 | tail -2
echo "---- sample ----"
build/meshtrain sample --ckpt runs/demo/ckpt --prompt "The meaning of life is" --tokens 300 --seed 7
echo "---- next ----"
echo "binary: build/meshtrain (build/meshtrain --help); checkpoint: runs/demo/ckpt (Hugging Face GPT-2 files)"
echo "on 2 ranks, the same losses as one rank: build/meshtrain train --data runs/demo/data --steps 20" \
  "--eval-every 10 --micro-batch-size 8 --dp 2   (README: Run it on several ranks)"
