#!/usr/bin/env bash
# Accumulation blocks (--accum-blocks K, issue 26, mt_accum.h): the step's M = 8 micro-batches
# as K blocks, each summed left to right, the blocks as the pairwise tree.
#  - bit for bit: DDP dp 2, ZeRO-1, ZeRO-2 and FSDP dp 2, dp 4 (K 4), tp 2 (against one rank
#    with --tp-blocks 2), dp 2 x tp 2, pp 2 (1f1b, zb), ZeRO-1 and FSDP over 2 copies of pp 2,
#    tp 2 x pp 2, each with K = 2 and 4, against one rank with the same K;
#  - the defaults: one rank and pp 2 sum left to right (K = 1, PyTorch's order), --dp 2 in 2
#    blocks (K = dp), ZeRO-2/3 over dp 2 one block per micro-batch (their round-robin);
#    K = 1 is another sum than K = 8;
#  - memory: one rank holds less than 2 gradient copies at K = 1 (the sum, a leaf buffer unit
#    by unit, the block's embedding rows) instead of 1 + log2 8 at K = 8; every
#    rank's logged grads bytes equal --plan-ranks's on one rank, DDP, ZeRO-1/2/3, pp 2 and ZeRO-1
#    over pipeline copies at 1, 2, 7, 8 and 64 micro-batches per rank (at the default K and at
#    one block per micro-batch), and at the default K a DDP, ZeRO-1 or pipeline rank holds at
#    most 2x its parameters plus one unit, whatever M;
#  - a checkpoint records K and a resume continues it;
#  - refused, one line each: K not dividing M, K not a multiple of --dp.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
m="--data $T/data --layers 2 --heads 4 --dim 32 --seq-len 16 --batch-size 8 --micro-batch-size 1 --steps 6
   --warmup 2 --lr 3e-3 --eval-every 3 --eval-batches 1 --log-every 0 --threads 1 --check-collectives"
vals() { grep -o '"val_loss": [^,]*' "$1" | cut -d' ' -f2; }
grads() { tail -1 "$1" | grep -o '"grads": [0-9]*' | cut -d' ' -f2 | tr '\n' ' '; }
params() { tail -1 "$1" | grep -o '"params": [0-9]*' | cut -d' ' -f2 | tr '\n' ' '; }
for K in 2 4; do
  train one$K $m --accum-blocks $K
  train onek$K $m --accum-blocks $K --tp-blocks 2
  for layout in "dp2:--dp 2" "z1:--dp 2 --zero 1" "z2:--dp 2 --zero 2" "z3:--dp 2 --zero 3" "dp4:--dp 4" \
                "tp2:--tp 2" "dptp:--dp 2 --tp 2" "pp2:--pp 2" "pp2zb:--pp 2 --schedule zb" \
                "dppp:--dp 2 --pp 2 --zero 1" "dppp3:--dp 2 --pp 2 --zero 3" "tppp:--tp 2 --pp 2"; do
    name=${layout%%:*}
    [ $name = dp4 ] && [ $K = 2 ] && continue # 4 ranks need 4 blocks
    train $name$K $m --accum-blocks $K ${layout#*:}
    ref=one$K
    case $name in tp2|dptp|tppp) ref=onek$K ;; esac
    same_run "$name --accum-blocks $K" "$T/$ref" "$T/$name$K"
    cmp -s <(vals "$T/$ref.jsonl") <(vals "$T/$name$K.jsonl") && pass || fail "$name K $K: validation losses differ"
  done
done
# the defaults, and K = 1 is another sum than K = 8
train one1 $m --accum-blocks 1
train one8 $m --accum-blocks 8
train def $m
same_run "one rank's default = --accum-blocks 1" "$T/one1" "$T/def"
cmp -s "$T/one1/model.safetensors" "$T/one8/model.safetensors" && fail "K = 1 gave the tree's bits: the order is not used" || pass
train dpdef $m --dp 2
same_run "--dp 2's default = one rank at --accum-blocks 2" "$T/one2" "$T/dpdef"
train z2def $m --dp 2 --zero 2
same_run "--dp 2 --zero 2's default = one rank at --accum-blocks 8" "$T/one8" "$T/z2def"
train ppdef $m --pp 2
same_run "--pp 2's default = one rank at --accum-blocks 1" "$T/one1" "$T/ppdef"
grep -q "accumulation: 8 micro-batches in 2 blocks of 4 (each left to right, the blocks as a pairwise tree): the default" \
  "$T/dpdef.out" && pass || fail "the banner does not say the order: $(grep accumulation "$T/dpdef.out")"
# the last stage's tied head (pipe_head, docs/parallelism.md).  At the default order each
# copy of a pipeline is one accumulation block: the last rank sums the head's parts of wte as
# they come, the first rank the block's embedding rows per token and sends them once; the
# leaf buffer is unit by unit, so every rank of a pipeline alone holds at most 2x its
# parameters in gradients (2x only on a stage of one unit: pp 4's middle ranks of one
# block), exactly the plan's (first loop).  With blocks of one micro-batch (--accum-blocks 0)
# the last rank keeps, for the micro-batches whose rows are in flight, their dlogits and ln_f
# output (micro-batches of fewer tokens than the width) or, with --head-recompute, only their
# ln_f output, recomputing the logits when the rows arrive (more tokens than the width; the
# head's products in row blocks of C, two blocks here).  Bit for bit with one rank in the same
# order (also with tp, sequence parallelism, interleaving and over ZeRO-3 copies, round-robin).
h="--data $T/data --layers 4 --heads 4 --dim 64 --seq-len 8 --batch-size 8 --micro-batch-size 1 --steps 4
   --warmup 1 --lr 3e-3 --eval-every 0 --eval-batches 0 --log-every 0 --threads 1 --check-collectives"
r="--data $T/data --layers 4 --heads 4 --dim 32 --seq-len 16 --batch-size 16 --micro-batch-size 4 --steps 3
   --warmup 1 --lr 3e-3 --eval-every 0 --eval-batches 0 --log-every 0 --threads 1 --check-collectives"
train h1 $h
train hk $h --tp-blocks 2
train h0 $h --accum-blocks 0
train hk0 $h --tp-blocks 2 --accum-blocks 0
train rk $r --tp-blocks 2
train r0 $r --accum-blocks 0
train rk0 $r --tp-blocks 2 --accum-blocks 0
for x in "hg:h1:--pp 2 --schedule gpipe:sum" "h4:h1:--pp 4:sum" \
         "hi:h1:--pp 2 --schedule interleaved --virtual-stages 2:sum" "htp:hk:--tp 2 --pp 2 --schedule gpipe:sum" \
         "rsp:rk:--tp 2 --pp 2 --schedule gpipe --sequence-parallel:sum" \
         "hg0:h0:--pp 2 --schedule gpipe:operands" "h40:h0:--pp 4:operands" "hz0:h0:--pp 4 --schedule gpipe:operands" \
         "hi0:h0:--pp 2 --schedule interleaved --virtual-stages 2:operands" \
         "htp0:hk0:--tp 2 --pp 2 --schedule gpipe:operands" "hrr:h0:--dp 2 --pp 2 --zero 3:operands" \
         "rg0:r0:--pp 2 --schedule gpipe:ln_f" "r40:r0:--pp 4:ln_f" \
         "ri0:r0:--pp 2 --schedule interleaved --virtual-stages 2:ln_f" "rtp0:rk0:--tp 2 --pp 2 --schedule gpipe:ln_f" \
         "rsp0:rk0:--tp 2 --pp 2 --schedule gpipe --sequence-parallel:ln_f" "rrr:r0:--dp 2 --pp 2 --zero 3:ln_f"; do
  IFS=: read -r name ref lay kept <<< "$x"
  model=$h; [ ${name:0:1} = r ] && model=$r
  case $kept in
    sum) want="tied head: 1 block of [0-9]* micro-batches awaits their rows, each as its head sum" ;;
    *) lay="$lay --accum-blocks 0"; want="tied head: [0-9]* blocks of 1 micro-batch await their rows, their $kept" ;;
  esac
  [ $kept = ln_f ] && lay="$lay --head-recompute"
  $MT_BIN train $model $lay --plan-ranks | grep -q "$want" && pass \
    || fail "$lay: the plan's tied head is not '$want': $($MT_BIN train $model $lay --plan-ranks | grep -o 'tied head.*')"
  train $name $model $lay
  same_run "$lay, the head's $kept" "$T/$ref" "$T/$name"
  [ $kept = sum ] || continue # (blocks of one: the tree over micro-batches)
  want=$($MT_BIN train $model $lay --plan-ranks | awk '{print $7}' | tr '\n' ' ')
  paste <(grads "$T/$name.jsonl" | tr ' ' '\n') <(params "$T/$name.jsonl" | tr ' ' '\n') | grep . \
    | awk -v u=$((4 * (12 * 64 * 64 + 13 * 64))) '$1 > 2 * $2 || ($1 == 2 * $2 && $2 != u) { bad++ } END { exit bad > 0 }' \
    && [ "$want" = "$(grads "$T/$name.jsonl")" ] && pass \
    || fail "$lay: grads $(grads "$T/$name.jsonl")not below 2x params $(params "$T/$name.jsonl")or not the plan's $want"
done
# memory: K = 8 holds 1 + log2 8 copies and a micro-batch's embedding rows (16 tokens x 32
# floats); K = 1 the sum, the leaf buffer unit by unit (the embedding unit and the largest
# other unit: less than a copy) and the block's rows (128 tokens x 32 floats); the same for
# DDP's two blocks; every figure as the plan says (below)
p=$(params "$T/one1.jsonl")
g1=$(grads "$T/one1.jsonl")
[ "$(grads "$T/one8.jsonl")" = "$((4 * p + 4 * 16 * 32)) " ] && [ $g1 -gt $((p + 4 * 128 * 32)) ] \
  && [ $g1 -lt $((2 * p + 4 * 128 * 32)) ] && pass \
  || fail "one rank: grads ${g1}at K 1, $(grads "$T/one8.jsonl")at K 8, params $p"
read -r p0 _ <<< "$(params "$T/dpdef.jsonl")"
read -r g0 g1 <<< "$(grads "$T/dpdef.jsonl")"
[ $g0 = $g1 ] && [ $g0 -lt $((2 * p0 + 4 * 64 * 32)) ] && pass \
  || fail "DDP dp 2 at K 2: grads $(grads "$T/dpdef.jsonl"), params $(params "$T/dpdef.jsonl")"
# the plan's grads on every path at 1, 2, 7, 8 and 64 micro-batches per rank; at the default
# K, DDP, ZeRO-1 and pipeline ranks within 2x their parameters plus one unit (a block: 12 C^2
# + 13 C floats), the last stage included (one block per copy: one head sum).
unit=$((4 * (12 * 32 * 32 + 13 * 32)))
mm="--data $T/data --layers 2 --heads 4 --dim 32 --seq-len 16 --micro-batch-size 1 --steps 1 --warmup 0
    --eval-batches 0 --log-every 0 --threads 1"
for per in 1 2 7 8 64; do
  for x in "1:1:" "2:1:--dp 2" "2:1:--dp 2 --zero 1" "2:0:--dp 2 --zero 2" "2:0:--dp 2 --zero 3" "1:1:--pp 2" \
           "2:1:--dp 2 --pp 2 --zero 1" "2:0:--dp 2 --pp 2 --zero 3" "1:1:--pp 2 --head-recompute" \
           "2:1:--dp 2 --pp 2 --zero 1 --head-recompute"; do
    IFS=: read -r copies bound lay <<< "$x"
    for acc in "" "--accum-blocks 0"; do
      b=$((per * copies))
      $MT_BIN train $mm --batch-size $b $lay $acc --log-json "$T/mm.jsonl" > "$T/mm.out" 2>&1 \
        || { fail "M $b $lay $acc: $(tail -2 "$T/mm.out")"; continue; }
      $MT_BIN train $mm --batch-size $b $lay $acc --plan-ranks > "$T/plan.txt"
      want=$(awk '{print $7}' "$T/plan.txt" | tr '\n' ' ')
      [ "$want" = "$(grads "$T/mm.jsonl")" ] && pass || fail "M $b, $lay $acc: grads $(grads "$T/mm.jsonl"), plan $want"
      [ -z "$acc" ] && [ $bound = 1 ] || continue
      paste <(grads "$T/mm.jsonl" | tr ' ' '\n') <(params "$T/mm.jsonl" | tr ' ' '\n') | grep . \
        | awk -v u=$unit '$1 > 2 * $2 + u { bad++ } END { exit bad > 0 }' && pass \
        || fail "M $b, $lay at the default K: grads $(grads "$T/mm.jsonl")over 2x params $(params "$T/mm.jsonl")+ a unit"
    done
  done
done
# the two plans of the issue: the 124M GPT-2 on dp 8 and the 175B shape on dp 8 x tp 8 x pp 8,
# every rank's gradients within 2.1x its parameters at the default order
gpt2="--layers 12 --heads 12 --dim 768 --seq-len 1024 --vocab 50257 --dp 8 --batch-size 512 --micro-batch-size 4"
big="--layers 96 --heads 96 --dim 12288 --seq-len 2048 --vocab 51200 --dp 8 --tp 8 --pp 8 --batch-size 1536
     --micro-batch-size 1"
for x in "$gpt2" "$big"; do
  r=$($MT_BIN train --data "$T/data" $x --plan-ranks | awk '{ r = $7 / $5; if (r > m) m = r } END { printf "%.3f %d", m, NR }')
  awk -v r="${r% *}" 'BEGIN { exit !(r <= 2.1) }' && pass || fail "plan $x: the largest grads / params is ${r% *} over ${r#* } ranks"
  echo "plan: grads / params at most ${r% *} over ${r#* } ranks: $x" | tr -s ' \n' ' '; echo
done
for x in "one1:--accum-blocks 1" "dd:--dp 2 --accum-blocks 2" "z14:--dp 2 --zero 1 --accum-blocks 4" \
         "z22:--dp 2 --zero 2 --accum-blocks 2" "pk1:--pp 2 --accum-blocks 1" "dpk:--dp 2 --pp 2 --accum-blocks 2"; do
  [ -f "$T/${x%%:*}.jsonl" ] || train ${x%%:*} $m ${x#*:}
  want=$($MT_BIN train $m ${x#*:} --plan-ranks | awk '{print $7}' | tr '\n' ' ')
  [ "$want" = "$(grads "$T/${x%%:*}.jsonl")" ] && pass || fail "${x#*:}: grads $(grads "$T/${x%%:*}.jsonl"), plan $want"
done
# the checkpoint keeps K: resumed without the flag, the run is the straight one
grep -q '"accum_blocks": 2,' "$T/dd/trainer_state.json" && pass || fail "trainer_state.json lacks accum_blocks 2"
train half $m --dp 2 --accum-blocks 2 --exit-interval 3
cp "$T/half.jsonl" "$T/res.jsonl"
resume "$T/half" "$T/res.jsonl" "$T/res" --layers 2 --heads 4 --dim 32
same_resumed "dp 2 at K 2 resumed on one rank without --accum-blocks" "$T/dd" "$T/res.jsonl" "$T/res" 6
expect_bad_input "K not dividing M" $MT_BIN train $m --accum-blocks 3
expect_bad_input "K not a multiple of --dp" $MT_BIN train $m --accum-blocks 2 --dp 4
finish
