#!/usr/bin/env bash
# The main job: set up, train a byte-level BPE vocabulary on an English corpus (the
# fortune-cookie texts that Debian's `fortunes` package ships), prepare the corpus with it,
# train a small GPT-2 on two ranks (data parallel, the same bits as one rank) for about a
# minute and a half, evaluate it and print a sample of generated text.  Everything lands in
# runs/demo/.
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
[ -f runs/demo/tokenizer/tokenizer.json ] || build/meshtrain tokenizer train --input "$corpus" --vocab-size 4096 \
  --special '<|endoftext|>' --out runs/demo/tokenizer
[ -f runs/demo/data/train.bin ] || build/meshtrain prepare --input "$corpus" --tokenizer runs/demo/tokenizer \
  --out runs/demo/data
build/meshtrain train --data runs/demo/data --layers 4 --heads 4 --dim 128 --seq-len 64 --dp 2 \
  --batch-size 32 --steps "${STEPS:-1500}" --lr 4e-3 --warmup 20 --eval-every 250 --log-every 125 \
  --save runs/demo/ckpt --log-json runs/demo/log.jsonl
echo "---- eval: the checkpoint's mean loss on val.bin (nats per token) ----"
build/meshtrain eval --ckpt runs/demo/ckpt --data runs/demo/data/val.bin --max-batches 50 | tail -2
echo "---- sample ----"
build/meshtrain sample --ckpt runs/demo/ckpt --prompt "The meaning of life is" --tokens 80 --seed 7
echo "---- next ----"
echo "binary: build/meshtrain (build/meshtrain --help); checkpoint: runs/demo/ckpt (Hugging Face GPT-2 files with" \
  "the tokenizer: transformers' AutoTokenizer loads it)"
echo "the same bits on one rank: the train command above without --dp 2, with --micro-batch-size 16 --accum-blocks 2" \
  "(README: Run it on several ranks)"
