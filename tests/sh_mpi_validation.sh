#!/usr/bin/env bash
# The validation loss is defined by the data, not the layout (issue 25): every logged
# val_loss of dp 2, pp 2, dp 2 x FSDP and tp 2 is the one rank's, bit for bit (tp 2 against
# one rank with --tp-blocks 2, as its training), at micro-batch sizes 1 and 2; the set holds
# an odd number of windows, so the dp ranks' shares are uneven.  `meshtrain eval` of the
# final checkpoint gives the last val_loss whatever its --batch-size, and the log says how
# many sequences were evaluated.  Training sums one block per micro-batch here
# (--accum-blocks 0), an order every layout below can share.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
make_text "$T/all.txt"
# 40,000 bytes of text, 3,421 of them val.bin: 213 windows of 16 tokens
head -c 40000 "$T/all.txt" > "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" --val-frac 0.08553 >/dev/null
base="--data $T/data --layers 2 --heads 2 --dim 32 --seq-len 16 --batch-size 8 --steps 4 --warmup 1 --lr 3e-3
      --eval-every 2 --eval-batches 100 --log-every 0 --threads 1 --check-collectives --accum-blocks 0"
vals() { grep -o '"val_loss": [^,]*' "$1" | cut -d' ' -f2; }
for m in 1 2; do
  train ref$m $base --micro-batch-size $m
  train refk$m $base --micro-batch-size $m --tp-blocks 2
  n=$(grep -o '"val_sequences": [0-9]*' "$T/ref$m.jsonl" | head -1 | cut -d' ' -f2)
  [ "$(vals "$T/ref$m.jsonl" | wc -l)" -eq 2 ] && [ $((n % 2)) -eq 1 ] && pass \
    || fail "micro $m: want 2 validation losses of an odd number of windows, got $(vals "$T/ref$m.jsonl" | wc -l) of $n"
  [ $m = 1 ] && n1=$n
  [ "$n" = "$n1" ] && pass || fail "micro $m evaluates $n sequences, micro 1 $n1: the set depends on the micro-batch"
  grep -q "validation: $n sequences of 16 tokens" "$T/ref$m.out" && pass \
    || fail "the banner does not say how many sequences are evaluated: $(grep validation "$T/ref$m.out")"
  for layout in "dp2:--dp 2" "pp2:--pp 2" "fsdp:--dp 2 --zero 3" "tp2:--tp 2"; do
    name=${layout%%:*}
    train $name$m $base --micro-batch-size $m ${layout#*:}
    ref=ref$m
    [ $name = tp2 ] && ref=refk$m
    same_run "$name micro $m" "$T/$ref" "$T/$name$m"
    cmp -s <(vals "$T/$ref.jsonl") <(vals "$T/$name$m.jsonl") && pass \
      || fail "$name micro $m: validation losses $(vals "$T/$name$m.jsonl" | tr '\n' ' ') vs one rank's $(vals "$T/$ref.jsonl" | tr '\n' ' ')"
  done
done
# eval of the final weights: the last val_loss (9 digits), whatever windows share a pass
last=$(vals "$T/ref1.jsonl" | tail -1)
want=$(printf '%.9g' "$last")
for b in 1 3 8; do
  got=$($MT_BIN eval --ckpt "$T/ref1" --data "$T/data/val.bin" --seq-len 16 --threads 1 --batch-size $b | tail -1)
  [ "$got" = "loss $want" ] && pass || fail "eval --batch-size $b: '$got', the run's last val_loss $want"
done
finish
