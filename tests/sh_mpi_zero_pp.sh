#!/usr/bin/env bash
# ZeRO-2 and FSDP over copies of a pipeline (--dp D --pp P --zero 2|3, issue 10).  Every
# run sums one block per micro-batch (--accum-blocks 0, ZeRO-2/3's round-robin order).
# Round-robin (the copy's j-th micro-batch is j D + its dp rank): each micro-batch's leaf
# gradient is reduce-scattered over dp as it completes, the rounds summed as a tree of
# shards; FSDP gathers each unit into a slot before a pass uses it.  Shown here:
#  - bit for bit with one rank: ZeRO-2 and FSDP on dp 2 x pp 2 (1f1b with validation
#    losses and --check-collectives, zb with full recomputation, interleaved), FSDP on
#    dp 4 x pp 2 sharded in copies of 2 (hybrid sharding), FSDP with 6 micro-batches per
#    copy (not a power of two: contiguous runs, at the default K = dp), and the three-way
#    dp 2 x tp 2 x pp 2 FSDP with sequence parallelism against one rank's --tp-blocks 2
#    (with the tp replica check), and dp 2 x tp 2 x pp 2 ZeRO-1 in contiguous runs (the
#    leaf buffer unit by unit);
#  - memory by formula on the first stage (C 32, T 16, V 256, 4 layers, 2 stages, S 2,
#    units padded to S x 512 floats): ZeRO-2's gradient is one leaf buffer of the stage
#    plus (1 + ceil(log2 M)) shards, FSDP's parameters a shard plus the unit slots;
#  - dp bytes of a ZeRO-2 stage: M reduce-scatters of the stage's span, the norm's block
#    sums and the parameters' all-gather;
#  - resume across layouts: a dp 2 x tp 2 x pp 2 FSDP checkpoint at step 5 continues on
#    pp 4 x tp 2, on dp 8 and on one rank, each bit for bit with the uninterrupted run.
source "$(dirname "$0")/lib.sh"
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
model="--data $T/data --heads 4 --dim 32 --seq-len 16 --warmup 2 --lr 3e-3 --log-every 0 --seed 7 --threads 1
       --batch-size 8 --micro-batch-size 1 --layers 4 --accum-blocks 0"
pipev="$model --steps 10"
pipe="$pipev --eval-every 0"
vl() { grep -o '"val_loss": [^,}]*' "$1"; }

# ---- bit for bit with one rank ----
train prefv $pipev --eval-every 5
for z in 2 3; do
  train z${z}v $pipev --dp 2 --pp 2 --zero $z --eval-every 5 --check-collectives
  same_run "dp 2 x pp 2 --zero $z" "$T/prefv" "$T/z${z}v"
  [ "$(vl "$T/z${z}v.jsonl" | wc -l)" -eq 2 ] && cmp -s <(vl "$T/prefv.jsonl") <(vl "$T/z${z}v.jsonl") && pass \
    || fail "dp 2 x pp 2 --zero $z validation losses: $(vl "$T/z${z}v.jsonl" | tr '\n' ' ')"
done
grep -q "over dp: FSDP (ZeRO-3)\|FSDP" "$T/z3v.out" && pass || fail "start-up line: $(head -1 "$T/z3v.out")"
train pref $pipe
for lay in "--dp 2 --pp 2 --zero 3 --schedule zb --recompute full" "--dp 2 --pp 2 --zero 2 --schedule zb" \
           "--dp 2 --pp 2 --zero 3 --schedule interleaved --virtual-stages 2" \
           "--dp 4 --pp 2 --zero 3 --shard-size 2 --schedule gpipe"; do
  name=z$(echo "$lay" | tr -d ' -')
  train $name $pipe $lay
  same_run "$lay" "$T/pref" "$T/$name"
done
six="--data $T/data --heads 4 --dim 32 --seq-len 16 --warmup 2 --lr 3e-3 --log-every 0 --seed 7 --threads 1
     --batch-size 12 --micro-batch-size 1 --layers 4 --steps 6 --eval-every 0"
train ref12 $six --accum-blocks 2 # the layout's default order: contiguous runs, K = dp
train z3six $six --dp 2 --pp 2 --zero 3
same_run "dp 2 x pp 2 FSDP, 6 micro-batches per copy (contiguous runs)" "$T/ref12" "$T/z3six"
train ref2 $pipe --tp-blocks 2
train three $pipe --dp 2 --tp 2 --pp 2 --zero 3 --sequence-parallel --schedule zb
same_run "dp 2 x tp 2 x pp 2 FSDP --sequence-parallel zb" "$T/ref2" "$T/three"
grep -q "every replicated tensor (parameters and moments) is identical on the 2 tp ranks" "$T/three.out" && pass \
  || fail "three-way FSDP: no identity of the replicated tensors: $(tail -3 "$T/three.out")"
# contiguous runs (the default order, one block per copy): a block's later leaves go through
# the pipeline's unit-sized leaf buffer, whose padding between tensors (ZeRO's norm blocks
# under tensor parallelism) must stay zero from unit to unit
runs=${pipe/--accum-blocks 0/}
train ref2a $runs --tp-blocks 2 --accum-blocks 2
train tpz1 $runs --dp 2 --tp 2 --pp 2 --zero 1
same_run "dp 2 x tp 2 x pp 2 ZeRO-1, contiguous runs" "$T/ref2a" "$T/tpz1"

# ---- memory of the first stage by formula ----
# blocks 0-1 and the embedding on stage 0: the embedding unit 256 x 32 + 16 x 32 floats, a
# block 12 C^2 + 13 C, each padded to 1024 floats (S 2 x 512)
pad() { echo $(( ($1 + 1023) / 1024 * 1024 )); }
emb=$(pad $(( 256 * 32 + 16 * 32 ))) blk=$(pad $(( 12 * 32 * 32 + 13 * 32 )))
stage=$(( emb + 2 * blk )) shard=$(( (emb + 2 * blk) / 2 ))
field() { sed -n 2p "$1" | grep -o "\"$2\": [0-9]*" | sed -n "${3}p" | cut -d' ' -f2; }
M=4 depth=2 # a copy's micro-batches, ceil(log2 M)
rows=$(( 16 * 32 )) # a micro-batch's embedding rows (16 tokens x C), summed per token for the last stage
want_g=$(( 4 * (stage + shard * (1 + depth) + rows) ))
[ "$(field "$T/z2v.jsonl" grads 1)" = $want_g ] && pass \
  || fail "ZeRO-2 x pp stage 0 gradient bytes $(field "$T/z2v.jsonl" grads 1), want $want_g (leaf + $((1 + depth)) shards + rows)"
want_p=$(( 4 * (shard + emb + 2 * blk) ))
[ "$(field "$T/z3v.jsonl" params 1)" = $want_p ] && [ "$(field "$T/z3v.jsonl" grads 1)" = $want_g ] && pass \
  || fail "FSDP x pp stage 0 parameter bytes $(field "$T/z3v.jsonl" params 1), want $want_p (shard + slots)"
[ "$(field "$T/z2v.jsonl" params 1)" = $(( 4 * stage )) ] && [ "$(field "$T/z2v.jsonl" optimizer 1)" = $(( 8 * shard )) ] \
  && pass || fail "ZeRO-2 x pp stage 0: params $(field "$T/z2v.jsonl" params 1), optimizer $(field "$T/z2v.jsonl" optimizer 1)"
# FSDP holds less than ZeRO-2 once a stage has more blocks than its two block slots: 8
# layers on dp 4 x pp 2 (with 2 blocks a stage, the slots hold as much as the stage)
l8="--data $T/data --heads 4 --dim 32 --seq-len 16 --threads 1 --batch-size 8 --micro-batch-size 1 --layers 8 --steps 2
    --eval-every 0 --dp 4 --pp 2"
train z2d4 $l8 --zero 2
train z3d4 $l8 --zero 3
[ "$(field "$T/z3d4.jsonl" params 1)" -lt "$(field "$T/z2d4.jsonl" params 1)" ] && pass \
  || fail "dp 4 x pp 2: FSDP params $(field "$T/z3d4.jsonl" params 1) not below ZeRO-2's $(field "$T/z2d4.jsonl" params 1)"
# ---- dp bytes of ZeRO-2's first stage: per leaf a reduce-scatter of the stage's span
# ((D-1)/D of it), the norm's block sums (D x 2 doubles-as-floats per 512-float block,
# all-gathered: (D-1)/D), the parameters' all-gather ((D-1)/D of the stage)
dpb=$(( M * (4 * stage) / 2 + (4 * 2 * 2 * (shard / 512)) / 2 + (4 * stage) / 2 ))
[ "$(field "$T/z2v.jsonl" dp 1)" = $dpb ] && pass \
  || fail "ZeRO-2 x pp stage 0: $(field "$T/z2v.jsonl" dp 1) dp bytes per step, want $dpb"

# ---- resume across layouts: dp 2 x tp 2 x pp 2 FSDP to step 5, then pp 4 x tp 2, dp 8, one rank ----
train fhalf $pipe --dp 2 --tp 2 --pp 2 --zero 3 --exit-interval 5
for x in tp4 dp8 one; do
  cp -r "$T/fhalf" "$T/fhalf_$x"
  cp "$T/fhalf.jsonl" "$T/f$x.jsonl"
done
resume "$T/fhalf_tp4" "$T/ftp4.jsonl" "$T/rtp4" --pp 4 --tp 2
resume "$T/fhalf_dp8" "$T/fdp8.jsonl" "$T/rdp8" --dp 8 --tp-blocks 2
resume "$T/fhalf_one" "$T/fone.jsonl" "$T/rone" --tp-blocks 2
for x in tp4 dp8 one; do
  same_resumed "resume of a dp 2 x tp 2 x pp 2 FSDP checkpoint ($x)" "$T/ref2" "$T/f$x.jsonl" "$T/r$x" 10
done
finish
