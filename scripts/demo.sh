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
build/meshtrain eval --ckpt runs/demo/ckpt --data runs/demo/data/val.bin --max-batches 50 | tail -1
echo "---- sample ----"
build/meshtrain sample --ckpt runs/demo/ckpt --prompt "The meaning of life is" --tokens 300 --seed 7
