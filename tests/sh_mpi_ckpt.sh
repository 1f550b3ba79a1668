#!/usr/bin/env bash
# Checkpoints at scale (issue 10): every rank writes its own part of model.safetensors and
# optimizer.safetensors straight into the files and reads only its part back.
#  - Memory: on 4 ranks of a model whose state (19 MB) is four times a rank's share,
#    FSDP, tp 4, dp 2 x pp 2, dp 2 x tp 2 FSDP, dp 2 x pp 2 FSDP, and dp 2 x tp 2 x pp 2
#    ZeRO-1 and ZeRO-2 (8 ranks) saves and loads grow no rank's resident memory by 1 MiB.
#  - Layout-free, bit for bit: an FSDP dp 4 checkpoint resumes on pp 2, on dp 2 x pp 2 and
#    on one rank; a dp 2 x tp 2 ZeRO-2 one (two blocks) on tp 2 and on one rank
#    --tp-blocks 2; each as the uninterrupted one-rank run.
#  - The files a 4-rank FSDP save writes are the one-rank files (at its order, one block
#    per micro-batch), byte for byte.
# The layout-free runs sum one block per micro-batch (--accum-blocks 0), an order every
# layout here shares.
source "$(dirname "$0")/lib.sh"
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null

# ---- memory while saving and loading ----
big="--data $T/data --layers 8 --heads 4 --dim 128 --seq-len 32 --eval-every 0 --log-every 0 --threads 1
     --batch-size 4 --micro-batch-size 1"
grew() { # file what: the per-rank KiB of the line
  grep "^$2: resident memory grew by" "$1" | sed 's/.*grew by //; s/ KiB.*//'
}
for lay in "--dp 4 --zero 3" "--tp 4" "--dp 2 --pp 2" "--dp 2 --tp 2 --zero 3" "--dp 2 --tp 2 --pp 2 --zero 1" \
           "--dp 2 --pp 2 --zero 3" "--dp 2 --tp 2 --pp 2 --zero 2"; do
  name=$(echo "$lay" | tr -d ' -')
  $MT_BIN train $big --steps 1 $lay --save "$T/$name" > "$T/$name.out" 2>&1 || fail "$lay save: $(tail -2 "$T/$name.out")"
  $MT_BIN train --data "$T/data" --threads 1 --eval-every 0 --log-every 0 --resume "$T/$name" --steps 2 $lay \
    --save "$T/${name}_2" > "$T/${name}_2.out" 2>&1 || fail "$lay resume: $(tail -2 "$T/${name}_2.out")"
  whole=$(( $(stat -c %s "$T/$name/model.safetensors") * 3 / 1024 ))
  for what in "checkpoint save" "checkpoint load"; do
    kib=$(grew "$T/${name}_2.out" "$what")
    [ -n "$kib" ] && echo "$kib" | awk '{ if (NF < 4) exit 1; for (i = 1; i <= NF; i++) if ($i > 1024) exit 1 }' && pass \
      || fail "$lay $what: resident memory grew by [$kib] KiB per rank; the whole state is $whole KiB"
    echo "$lay $what: grew by $kib KiB per rank (whole state $whole KiB)"
  done
done
$MT_BIN train $big --steps 1 --accum-blocks 0 --save "$T/one" > "$T/one.out" 2>&1 || fail "one-rank save: $(tail -2 "$T/one.out")"
cmp -s "$T/one/model.safetensors" "$T/dp4zero3/model.safetensors" \
  && cmp -s "$T/one/optimizer.safetensors" "$T/dp4zero3/optimizer.safetensors" && pass \
  || fail "the files of a 4-rank FSDP save differ from one rank's"

# ---- resume across layouts, bit for bit ----
eq="--data $T/data --heads 4 --dim 32 --seq-len 16 --warmup 2 --lr 3e-3 --eval-every 0 --log-every 0 --seed 7
    --threads 1 --batch-size 8 --micro-batch-size 1 --layers 4 --steps 10 --accum-blocks 0"
train ref $eq
train half $eq --dp 4 --zero 3 --exit-interval 5
for to in "--pp 2" "--dp 2 --pp 2" ""; do
  name=r$(echo "$to" | tr -d ' -')
  cp -r "$T/half" "$T/h_$name"
  cp "$T/half.jsonl" "$T/$name.jsonl"
  resume "$T/h_$name" "$T/$name.jsonl" "$T/$name" $to
  same_resumed "FSDP dp 4 checkpoint resumed on [${to:-one rank}]" "$T/ref" "$T/$name.jsonl" "$T/$name" 10
done
train ref2 $eq --tp-blocks 2
train thalf $eq --dp 2 --tp 2 --zero 2 --exit-interval 5
for to in "--tp 2" "--tp-blocks 2"; do
  name=t$(echo "$to" | tr -d ' -')
  cp -r "$T/thalf" "$T/h_$name"
  cp "$T/thalf.jsonl" "$T/$name.jsonl"
  resume "$T/h_$name" "$T/$name.jsonl" "$T/$name" $to
  same_resumed "dp 2 x tp 2 ZeRO-2 checkpoint resumed on [$to]" "$T/ref2" "$T/$name.jsonl" "$T/$name" 10
done
finish
