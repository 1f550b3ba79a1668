#!/usr/bin/env bash
# Hybrids of data and tensor parallelism (issue 10): --dp D --tp T runs DDP or ZeRO over
# the dp group of each tp rank's slices.  With --tp-blocks 4, dp 2 x tp 2 (with and without
# sequence parallelism) and dp 2 over one-rank --tp-blocks give the one-rank --tp-blocks 4
# losses, model.safetensors and optimizer.safetensors bit for bit; without --tp-blocks,
# dp 2 x tp 2 gives the bits of tp 2 alone, for every ZeRO stage (with and without
# sequence parallelism, hybrid sharding on dp 4 x tp 2).  A dp 2 x tp 2 checkpoint (DDP
# and FSDP) resumes on tp 4, on dp 2 x tp 2 ZeRO-1 and on one rank bit for bit.  The
# replicated tensors stay identical over the tp group.  Every run sums one block per
# micro-batch (--accum-blocks 0), an order all these layouts share, so that one reference
# serves them all (sh_mpi_accum and the matrix cover the default orders).
# Pipelines over dp (--dp D --pp P, DDP over the copies of the pipeline): dp 2 x pp 2
# (1f1b, zb, interleaved), dp 4 x pp 2 gpipe and dp 2 x pp 4 with full recomputation give
# the one-rank run bit for bit; a dp 2 x pp 2 checkpoint resumes on pp 4 and on dp 4; each
# stage's dp bytes per step are the all-reduce of what it sums (the wte replica and the
# loss on the last stage).  ZeRO-1 over the copies (--zero 1 --pp P --dp D): 1f1b, zb and
# interleaved on dp 2 x pp 2 and dp 4 x pp 2 bit for bit with one rank; a stage's AdamW
# moments are 1/D of its (padded) parameters; its checkpoint resumes on one rank and on
# dp 2 x pp 2 ZeRO-1 again.
# Tensor parallelism inside pipelines (--tp T --pp P, and the three-way dp x tp x pp):
# with --tp-blocks 4, tp 2 x pp 2 (1f1b with validation losses, interleaved, gpipe with
# full recomputation, zb, zb with attention recomputation on dp 2 x tp 2 x pp 2; sequence
# parallelism with validation losses, interleaved on dp 2 x tp 2 x pp 2, and zb with full
# recomputation), tp 4 x pp 2
# and dp 2 x tp 2 x pp 2 give the one-rank --tp-blocks 4
# run bit for bit; without, tp 2 x pp 2 gives tp 2 alone's; a tp 2 x pp 2 checkpoint
# resumes on dp 2 x tp 2 and on pp 2 (blocks on one rank per stage) bit for bit; the replicated
# tensors stay identical over each stage's tp group.  The three-way hybrid with ZeRO-1
# (dp 2 x tp 2 x pp 2, interleaved) gives one rank's --tp-blocks 2 bits, and its checkpoint
# resumes on the same layout and on one rank bit for bit.
# comm.dp per step is DDP's all-reduce of the rank's slices (and the loss), comm.tp the
# tensor-parallel formula at the rank's micro-batches.  Layouts not built yet, and a world
# that is not dp x tp x pp under mpirun -np N, exit 2 with one line, printed once.
source "$(dirname "$0")/lib.sh"
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
base="--data $T/data --heads 4 --dim 32 --seq-len 16 --warmup 2 --lr 3e-3 --eval-every 0 --log-every 0 --seed 7
      --threads 1 --batch-size 8 --micro-batch-size 2 --layers 2 --accum-blocks 0"
eq="$base --steps 10"

# ---- bit for bit with --tp-blocks 4 ----
train ref $eq --tp-blocks 4
train dp2tp2 $eq --dp 2 --tp 2 --tp-blocks 4 --check-collectives
same_run "dp 2 x tp 2 --tp-blocks 4" "$T/ref" "$T/dp2tp2"
train dp2sp $eq --dp 2 --tp 2 --tp-blocks 4 --sequence-parallel
same_run "dp 2 x tp 2 --tp-blocks 4 --sequence-parallel" "$T/ref" "$T/dp2sp"
train dp2k4 $eq --dp 2 --tp-blocks 4
same_run "dp 2 x one-rank --tp-blocks 4" "$T/ref" "$T/dp2k4"
for x in dp2tp2 dp2sp; do
  grep -q "every replicated tensor (parameters and moments) is identical on the 2 tp ranks at step 10" "$T/$x.out" \
    && pass || fail "$x: no identity of the replicated tensors: $(tail -3 "$T/$x.out")"
done
grep -q "over dp: DDP" "$T/dp2tp2.out" && pass || fail "the start-up line does not name the hybrid: $(head -1 "$T/dp2tp2.out")"

# ---- the default mode: the tp group's own blocks, dp changes no bit ----
train tp2 $eq --tp 2
train dp2tp2d $eq --tp 2 --dp 2
same_run "dp 2 x tp 2 against tp 2 alone" "$T/tp2" "$T/dp2tp2d"

# ---- every ZeRO stage over dp with tp 2 (the default mode: one slice per tp rank) ----
for z in 1 2 3; do
  train z$z $eq --tp 2 --dp 2 --zero $z
  same_run "dp 2 x tp 2 --zero $z against tp 2 alone" "$T/tp2" "$T/z$z"
done
train z2sp $eq --tp 2 --dp 2 --zero 2 --sequence-parallel
train tp2sp $eq --tp 2 --sequence-parallel
same_run "dp 2 x tp 2 --zero 2 --sequence-parallel against tp 2 --sequence-parallel" "$T/tp2sp" "$T/z2sp"
train z3hsdp $eq --tp 2 --dp 4 --zero 3 --shard-size 2
same_run "dp 4 x tp 2 FSDP sharded in copies of 2 against tp 2 alone" "$T/tp2" "$T/z3hsdp"
grep -q "over dp: FSDP (ZeRO-3)" "$T/z3hsdp.out" && pass || fail "start-up line: $(head -1 "$T/z3hsdp.out")"

# ---- FSDP x tp to step 5, then one rank and dp 2 x tp 2 ZeRO-1 to 10 ----
train fhalf $eq --dp 2 --tp 2 --zero 3 --exit-interval 5
cp -r "$T/fhalf" "$T/fhalf_copy"
cp "$T/fhalf.jsonl" "$T/fone.jsonl"
resume "$T/fhalf" "$T/fhalf.jsonl" "$T/fz1" --dp 2 --tp 2 --zero 1
resume "$T/fhalf_copy" "$T/fone.jsonl" "$T/f1" --tp-blocks 2
for x in fhalf:fz1 fone:f1; do
  same_resumed "resume of a dp 2 x tp 2 FSDP checkpoint (${x##*:})" "$T/tp2" "$T/${x%%:*}.jsonl" "$T/${x##*:}" 10
done

# ---- resume across layouts: dp 2 x tp 2 to step 5, then tp 4 (and one rank) to 10 ----
train half $eq --dp 2 --tp 2 --tp-blocks 4 --exit-interval 5
cp -r "$T/half" "$T/half_copy"
cp "$T/half.jsonl" "$T/one.jsonl"
resume "$T/half" "$T/half.jsonl" "$T/r4" --tp 4 --tp-blocks 4
resume "$T/half_copy" "$T/one.jsonl" "$T/r1" --tp-blocks 4
for x in half:r4 one:r1; do
  same_resumed "resume of a dp 2 x tp 2 checkpoint (${x##*:})" "$T/ref" "$T/${x%%:*}.jsonl" "$T/${x##*:}" 10
done

# ---- pipelines over dp ----
pipev="--data $T/data --heads 4 --dim 32 --seq-len 16 --warmup 2 --lr 3e-3 --log-every 0 --seed 7 --threads 1
       --batch-size 8 --micro-batch-size 1 --layers 4 --steps 10 --accum-blocks 0"
pipe="$pipev --eval-every 0"
train pref $pipe
train prefv $pipev --eval-every 5
train dp2pp2 $pipev --dp 2 --pp 2 --check-collectives --eval-every 5
same_run "dp 2 x pp 2 1f1b" "$T/prefv" "$T/dp2pp2"
vl() { grep -o '"val_loss": [^,}]*' "$1"; }
[ "$(vl "$T/dp2pp2.jsonl" | wc -l)" -eq 2 ] && cmp -s <(vl "$T/prefv.jsonl") <(vl "$T/dp2pp2.jsonl") && pass \
  || fail "dp 2 x pp 2 validation losses: $(vl "$T/dp2pp2.jsonl" | tr '\n' ' ') vs $(vl "$T/prefv.jsonl" | tr '\n' ' ')"
train dp2zb $pipe --dp 2 --pp 2 --schedule zb
same_run "dp 2 x pp 2 zb" "$T/pref" "$T/dp2zb"
train dp2il $pipe --dp 2 --pp 2 --schedule interleaved --virtual-stages 2
same_run "dp 2 x pp 2 interleaved" "$T/pref" "$T/dp2il"
train dp4pp2 $pipe --dp 4 --pp 2 --schedule gpipe
same_run "dp 4 x pp 2 gpipe" "$T/pref" "$T/dp4pp2"
train dp2pp4 $pipe --dp 2 --pp 4 --recompute full
same_run "dp 2 x pp 4 --recompute full" "$T/pref" "$T/dp2pp4"
grep -q "measured bubble" "$T/dp2pp2.out" && pass || fail "no pipeline summary: $(tail -3 "$T/dp2pp2.out")"
train phalf $pipe --dp 2 --pp 2 --exit-interval 5
cp -r "$T/phalf" "$T/phalf_copy"
cp "$T/phalf.jsonl" "$T/pone.jsonl"
resume "$T/phalf" "$T/phalf.jsonl" "$T/pp4" --pp 4
resume "$T/phalf_copy" "$T/pone.jsonl" "$T/pdp4" --dp 4
for x in phalf:pp4 pone:pdp4; do
  same_resumed "resume of a dp 2 x pp 2 checkpoint (${x##*:})" "$T/pref" "$T/${x%%:*}.jsonl" "$T/${x##*:}" 10
done
line=$(sed -n 2p "$T/dp2pp2.jsonl")
f() { echo "$line" | grep -o "\"dp\": [0-9]*" | sed -n "${1}p" | cut -d' ' -f2; }
# C 32, T 16, V 256: a block 12 C^2 + 13 C floats; stage 0 sums wpe and blocks 0-1 (its wte
# rows come whole from the last stage), stage 1 blocks 2-3, ln_f, the wte replica and the loss
blk=$(( 12 * 32 * 32 + 13 * 32 ))
want0=$(( 4 * (16 * 32 + 2 * blk) )) want1=$(( 4 * (2 * blk + 2 * 32 + 256 * 32 + 1) ))
# mesh: pp slowest, so world ranks 0-1 are stage 0 (dp 0, 1), ranks 2-3 stage 1
[ "$(f 1)" = $want0 ] && [ "$(f 2)" = $want0 ] && [ "$(f 3)" = $want1 ] && [ "$(f 4)" = $want1 ] && pass \
  || fail "dp bytes of dp 2 x pp 2: $(f 1) $(f 2) $(f 3) $(f 4), want $want0 $want0 $want1 $want1"

# ---- ZeRO-1 over copies of the pipeline ----
for lay in "--dp 2 --pp 2 --zero 1" "--dp 2 --pp 2 --zero 1 --schedule zb" \
           "--dp 2 --pp 2 --zero 1 --schedule interleaved --virtual-stages 2" "--dp 4 --pp 2 --zero 1 --schedule gpipe"; do
  name=z$(echo "$lay" | tr -d ' -')
  train $name $pipe $lay
  same_run "$lay" "$T/pref" "$T/$name"
done
line=$(sed -n 2p "$T/zdp2pp2zero1.jsonl")
g() { echo "$line" | grep -o "\"$1\": [0-9]*" | sed -n "${2}p" | cut -d' ' -f2; }
[ "$(g optimizer 1)" = $(( 2 * $(g params 1) / 2 )) ] && [ "$(g optimizer 2)" = "$(g optimizer 1)" ] && pass \
  || fail "ZeRO-1 x pp: stage 0 optimizer bytes $(g optimizer 1), want 2 x params $(g params 1) / 2"
train zhalf $pipe --dp 2 --pp 2 --zero 1 --exit-interval 5
cp -r "$T/zhalf" "$T/zhalf_copy"
cp "$T/zhalf.jsonl" "$T/zone.jsonl"
resume "$T/zhalf" "$T/zhalf.jsonl" "$T/zz1" --dp 2 --pp 2 --zero 1
resume "$T/zhalf_copy" "$T/zone.jsonl" "$T/z1r"
for x in zhalf:zz1 zone:z1r; do
  same_resumed "resume of a dp 2 x pp 2 ZeRO-1 checkpoint (${x##*:})" "$T/pref" "$T/${x%%:*}.jsonl" "$T/${x##*:}" 10
done

# ---- tensor parallelism inside pipelines, and the three-way hybrid ----
train pref4 $pipe --tp-blocks 4
train pref4v $pipev --tp-blocks 4 --eval-every 5
train tp2pp2 $pipev --tp 2 --pp 2 --tp-blocks 4 --eval-every 5 --check-collectives
train sp2pp2 $pipev --tp 2 --pp 2 --tp-blocks 4 --eval-every 5 --sequence-parallel --check-collectives
same_run "tp 2 x pp 2 --sequence-parallel --tp-blocks 4" "$T/pref4v" "$T/sp2pp2"
[ "$(vl "$T/sp2pp2.jsonl" | wc -l)" -eq 2 ] && cmp -s <(vl "$T/pref4v.jsonl") <(vl "$T/sp2pp2.jsonl") && pass \
  || fail "tp 2 x pp 2 sequence-parallel validation losses: $(vl "$T/sp2pp2.jsonl" | tr '\n' ' ')"
same_run "tp 2 x pp 2 --tp-blocks 4" "$T/pref4v" "$T/tp2pp2"
[ "$(vl "$T/tp2pp2.jsonl" | wc -l)" -eq 2 ] && cmp -s <(vl "$T/pref4v.jsonl") <(vl "$T/tp2pp2.jsonl") && pass \
  || fail "tp 2 x pp 2 validation losses: $(vl "$T/tp2pp2.jsonl" | tr '\n' ' ') vs $(vl "$T/pref4v.jsonl" | tr '\n' ' ')"
grep -q "every replicated tensor (parameters and moments) is identical on the 2 tp ranks" "$T/tp2pp2.out" && pass \
  || fail "tp 2 x pp 2: no identity of the replicated tensors: $(tail -3 "$T/tp2pp2.out")"
for lay in "--tp 2 --pp 2 --schedule interleaved --virtual-stages 2" "--tp 2 --pp 2 --schedule gpipe --recompute full" \
           "--tp 4 --pp 2" "--dp 2 --tp 2 --pp 2" "--tp 2 --pp 2 --schedule zb" "--dp 2 --tp 2 --pp 2 --schedule zb --recompute attn" \
           "--tp 2 --pp 2 --sequence-parallel" "--dp 2 --tp 2 --pp 2 --sequence-parallel --schedule interleaved --virtual-stages 2" \
           "--tp 2 --pp 2 --sequence-parallel --schedule zb --recompute full"; do
  name=h$(echo "$lay" | tr -d ' -')
  train $name $pipe $lay --tp-blocks 4
  same_run "$lay --tp-blocks 4" "$T/pref4" "$T/$name"
done
# the three-way hybrid with the distributed optimizer (Megatron's layout): dp x tp x pp ZeRO-1
train ref2 $pipe --tp-blocks 2
train z1three $pipe --dp 2 --tp 2 --pp 2 --zero 1 --schedule interleaved --virtual-stages 2
same_run "dp 2 x tp 2 x pp 2 ZeRO-1 interleaved" "$T/ref2" "$T/z1three"
train z3half $pipe --dp 2 --tp 2 --pp 2 --zero 1 --exit-interval 5
cp -r "$T/z3half" "$T/z3half_copy"
cp "$T/z3half.jsonl" "$T/z3one.jsonl"
resume "$T/z3half" "$T/z3half.jsonl" "$T/z3again" --dp 2 --tp 2 --pp 2 --zero 1
resume "$T/z3half_copy" "$T/z3one.jsonl" "$T/z3r1" --tp-blocks 2
for x in z3half:z3again z3one:z3r1; do
  same_resumed "resume of a dp 2 x tp 2 x pp 2 ZeRO-1 checkpoint (${x##*:})" "$T/ref2" "$T/${x%%:*}.jsonl" "$T/${x##*:}" 10
done
train tp2only $pipe --tp 2
train tp2pp2d $pipe --tp 2 --pp 2
same_run "tp 2 x pp 2 against tp 2 alone" "$T/tp2only" "$T/tp2pp2d"
train tphalf $pipe --tp 2 --pp 2 --tp-blocks 4 --exit-interval 5
cp -r "$T/tphalf" "$T/tphalf_copy"
cp "$T/tphalf.jsonl" "$T/tpone.jsonl"
resume "$T/tphalf" "$T/tphalf.jsonl" "$T/tdt" --dp 2 --tp 2 --tp-blocks 4
resume "$T/tphalf_copy" "$T/tpone.jsonl" "$T/tpp" --pp 2 --tp-blocks 4 --schedule 1f1b
for x in tphalf:tdt tpone:tpp; do
  same_resumed "resume of a tp 2 x pp 2 checkpoint (${x##*:})" "$T/pref4" "$T/${x%%:*}.jsonl" "$T/${x##*:}" 10
done

# ---- traffic per rank: dp and tp bytes of one step against their formulas ----
field() { echo "$1" | grep -o "\"$2\": [0-9]*" | sed -n "${3}p" | cut -d' ' -f2; }
line=$(sed -n 2p "$T/dp2tp2.jsonl")
for r in 1 2 3 4; do
  verdict=$(awk -v p="$(field "$line" params $r)" -v dp="$(field "$line" dp $r)" -v tp="$(field "$line" tp $r)" '
    BEGIN {
      # DDP over 2 ranks: the all-reduce of the rank slices (2 (N-1)/N of their bytes,
      # padding included) and of the loss (4 bytes)
      wdp = p + 4
      # tp 2 per micro-batch (sh_mpi_tp.sh): the residual stream crosses the group 4 L + 2
      # times (all-reduces of n C floats), the loss statistics 5 floats per row; per step
      # the norm parts (2 floats per tensor); a dp rank runs 2 of the 4 micro-batches
      N = 2; L = 2; C = 32; n = 2 * 16; M = 2
      ar = int(2 * (N - 1) * 4 * n * C / N)
      wtp = M * ((4 * L + 2) * ar + (N - 1) * 4 * 5 * n) + (N - 1) * 4 * 2 * (4 + 12 * L)
      if (dp != wdp) { printf "comm.dp %d bytes, want %d", dp, wdp; exit }
      if (tp != wtp) { printf "comm.tp %d bytes, want %d", tp, wtp; exit }
      printf "ok"
    }')
  [ "$verdict" = ok ] && pass || fail "dp 2 x tp 2 rank $((r - 1)): $verdict"
done
echo "dp 2 x tp 2, rank 0, one step: $(field "$line" dp 1) dp bytes, $(field "$line" tp 1) tp bytes"

# ---- bad layouts: exit 2, one line ----
ok="--data $T/data --heads 4 --dim 32 --seq-len 16 --steps 1 --layers 2 --batch-size 4"
expect_bad_input "ZeRO with more tp blocks than tp ranks (not built yet)" $MT_BIN train $ok --tp 2 --dp 2 --zero 1 \
  --tp-blocks 4
expect_bad_input "dp x tp x pp with the sequence not divisible by tp" $MT_BIN train --data $T/data --heads 4 \
  --dim 32 --seq-len 15 --steps 1 --layers 2 --batch-size 4 --dp 2 --tp 2 --pp 2 --sequence-parallel
expect_bad_input "ZeRO-1 over tensor-parallel pipelines with more blocks than tp ranks (not built yet)" $MT_BIN \
  train $ok --dp 2 --pp 2 --tp 2 --zero 1 --tp-blocks 4
expect_bad_input "dp x pp whose copies' micro-batches do not suit interleaving" $MT_BIN train --data $T/data \
  --heads 4 --dim 32 --seq-len 16 --steps 1 --layers 4 --batch-size 2 --micro-batch-size 1 --dp 2 --pp 2 \
  --schedule interleaved --virtual-stages 2
expect_bad_input "dp x tp with sequence parallelism and the sequence not divisible by tp" $MT_BIN train \
  --data $T/data --heads 4 --dim 32 --seq-len 15 --steps 1 --layers 2 --batch-size 4 --dp 2 --tp 2 --sequence-parallel
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rc=0
timeout 60 ${MT_MPIEXEC:-mpiexec} --oversubscribe --mca btl_vader_single_copy_mechanism none -n 3 \
  $MT_BIN train $ok --dp 2 --tp 2 --threads 1 >"$T/out" 2>"$T/err" || rc=$?
n=$(grep -c "^meshtrain train:" "$T/err" || true)
[ "$rc" -eq 2 ] && [ "$n" -eq 1 ] && grep -q "mpirun -np 3" "$T/err" && pass \
  || fail "mpirun -np 3 for dp 2 x tp 2: exit $rc, $n lines: $(cat "$T/err")"
finish
