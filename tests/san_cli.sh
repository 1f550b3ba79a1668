#!/usr/bin/env bash
# Under the sanitizer build (MT_SANITIZE=ON; its ctest sets ASAN/UBSAN/LSAN_OPTIONS): a short
# single-rank train, resume, eval and sample, and the bad inputs that once read out of bounds
# or parsed without bound.  Any sanitizer report makes its command exit non-zero.
source "$(dirname "$0")/lib.sh"
make_ascii_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
cp -r "$T/data" "$T/d128" && vocab128 "$T/d128"
m="--layers 2 --heads 2 --dim 32 --seq-len 16"
run() { # what, command...: exit 0 and no sanitizer report
  local what=$1; shift
  if "$@" >"$T/out" 2>"$T/err" && ! grep -q 'Sanitizer' "$T/err"; then pass; echo "ok: $what"
  else fail "$what: $(grep -m3 -E 'Sanitizer|ERROR|error' "$T/err" || tail -3 "$T/err")"; fi
}
run "train" $MT_BIN train --data "$T/data" $m --batch-size 4 --micro-batch-size 2 --steps 3 --threads 2 \
  --eval-every 2 --log-every 1 --save "$T/ckpt" --recompute attn
run "resume" $MT_BIN train --data "$T/data" --resume "$T/ckpt" --steps 4 --threads 1 --save "$T/ckpt"
run "eval --data" $MT_BIN eval --ckpt "$T/ckpt" --data "$T/data/val.bin" --max-batches 2
run "eval --text" $MT_BIN eval --ckpt "$T/ckpt" --text "$T/text.txt" --max-batches 1 --seq-len 16
run "sample" $MT_BIN sample --ckpt "$T/ckpt" --prompt "int main" --tokens 8 --threads 2
run "train, vocabulary 128" $MT_BIN train --data "$T/d128" $m --vocab 128 --batch-size 2 --steps 1 --threads 1 \
  --save "$T/v128"
expect_bad_input "a prompt byte outside the vocabulary" $MT_BIN sample --ckpt "$T/v128" --prompt $'\xff'
grep -q Sanitizer "$T/err" && fail "sanitizer report on bad input" || pass
finish
