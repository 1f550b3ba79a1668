#!/usr/bin/env bash
# Regenerates tests/golden/: a small checkpoint written by meshtrain (three training steps
# from initialisation, so that biases and LayerNorm weights are no longer trivial), a token
# file, and PyTorch's answers for that checkpoint (tests/golden/make_golden.py).
# Needs a python3 with torch and numpy: PYTHON=/path/to/python scripts/make-golden.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
bash scripts/bootstrap.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat src/*/*.c > "$tmp/text.txt"
build/meshtrain prepare --input "$tmp/text.txt" --out "$tmp/data" >/dev/null
rm -rf tests/golden/ckpt
# odd sizes: width 36 over 3 heads of 12, sequences of 13 in a context of 16
build/meshtrain train --data "$tmp/data" --layers 2 --heads 3 --dim 36 --context 16 --seq-len 13 \
  --batch-size 4 --steps 3 --warmup 0 --lr 1e-2 --log-every 0 --eval-every 0 --seed 4242 \
  --save tests/golden/ckpt >/dev/null
rm -f tests/golden/ckpt/optimizer.safetensors tests/golden/ckpt/trainer_state.json
cp "$tmp/data/val.bin" tests/golden/tokens.bin
"$PYTHON" tests/golden/make_golden.py --ckpt tests/golden/ckpt --tokens tests/golden/tokens.bin \
  --batch 3 --seq 13 --lr 1e-3 --weight-decay 0.1 --grad-clip 0.5 --out tests/golden/expected.safetensors
