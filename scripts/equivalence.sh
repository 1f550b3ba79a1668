#!/usr/bin/env bash
# scripts/equivalence.sh [--quick] - the equivalence matrix: a tiny model trained for 10
# steps on every layout of at most 8 ranks (dp, tp, pp in 1, 2, 4, 8; ZeRO 0-3 over dp;
# the schedules 1f1b, interleaved, zb and zb2 over pp; sequence parallelism on and off over tp;
# recomputation none / attn / full in turn; hybrid sharding on dp >= 4 for ZeRO 2 and 3),
# each compared with one rank: its losses, its validation losses (steps 5 and 10, on 32
# windows shared among the dp ranks),
# model.safetensors and optimizer.safetensors.
# Prints one row per layout: bit-identical, the largest relative difference of a tensor
# (prog_stdiff), refused (the layout's one-line reason), or failed; and for
# a run, whether every rank's parameter, gradient, optimizer and activation bytes (the
# log's mem) and its bytes sent per group (the log's comm) are what mt_plan_memory and
# mt_plan_comm predict (`train --plan-ranks`).  Exits 1 if any layout differs or fails.
#
# Blocks: each layout runs with --tp-blocks 8 (every split sum as 8 fixed blocks) and is
# compared with one rank run with --tp-blocks 8, except ZeRO, which runs --tp-blocks tp (one
# slice per tp rank; none without tp) against one rank with the same; ZeRO with --tp-blocks
# 8 over fewer tp ranks is refused (its norm), one row per mesh shows it.
#
# The accumulation order (--accum-blocks K, mt_accum.h): each layout's reference is one rank
# run with the K the layout's checkpoint records (its trainer_state.json: the default for the
# layout, or the flag) and the same tp-blocks, made once per (K, tp-blocks).  Every layout
# runs at its default K (dp, or one block per micro-batch for ZeRO-2/3); per mesh, rows add
# K = M (--accum-blocks 0), and over dp ZeRO-1 at K = 2 dp and FSDP at K = dp (a blocked
# order: contiguous runs); K = 1, PyTorch's order, is the default of every layout without dp.
#
# --quick: a representative subset (the test suite runs it): the three-way hybrid with
# recomputation, FSDP x tp with sequence parallelism, hybrid-sharded ZeRO-2, dp x pp zb
# with full recomputation, tp x pp zb, the three-way zb with sequence parallelism, each
# ZeRO stage in a three-way hybrid (ZeRO-1 interleaved, ZeRO-2 with sequence parallelism,
# FSDP zb with full recomputation), hybrid-sharded FSDP over pipeline copies, interleaved
# pp 2 with 8 chunks, dp 2 x tp 2 and dp 2 x pp 2 zb at --accum-blocks 2, FSDP dp 2 at K = 2,
# FSDP over pp 2 zb2 with attention recomputation, 1F1B-I's cut (interleaved, the end chunks
# holding the embedding and the head alone), and two refused: a layout that cannot be (16 stages of 8 layers) and ZeRO with 8 blocks
# over 2 tp ranks; and three of an untied head (--untie-embeddings: ZeRO-1 zb2 three-way, FSDP
# over pp 2 zb at --accum-blocks 2, ZeRO-1 dp 2 x tp 2, whose padding between tensors once
# held another unit's gradient); and dp 2 x pp 2 zb2 with optimizer post-validation
# (--post-validate).  MT_EQ_UNTIE=1 runs every row on the untied model.  MT_BIN (default build/meshtrain) and MT_DIFF (build/prog_stdiff) name
# the binaries.  MT_EQ_GREP=PATTERN runs only the layouts whose flags match it (grep -E).
# Test hooks: MT_EQ_MUTATE runs the layouts (not the references) through MT_TEST_BIN, the
# command with its hooks, with a wrong order the matrix must report: 1 (or tp) tensor
# parallelism's blocks summed left to right; rtl the first accumulation block summed right
# to left; swap the step's first and last leaf exchanged (both by filling the micro-batches
# in another order, so they reach every executor: mt_trainer_fill).
set -u
cd "$(dirname "$0")/.."
MT_BIN=${MT_BIN:-build/meshtrain}
MT_DIFF=${MT_DIFF:-build/prog_stdiff}
MT_TEST_BIN=${MT_TEST_BIN:-build/prog_meshtrain_test} # the command with its test hooks
quick=0
[ "${1:-}" = --quick ] && quick=1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
cat src/*/*.c src/*/*.h > "$W/text.txt"
$MT_BIN prepare --input "$W/text.txt" --out "$W/data" > /dev/null || exit 1
model="--data $W/data --layers 8 --heads 8 --dim 64 --seq-len 16 --batch-size 16 --micro-batch-size 1 --steps 10
       --warmup 2 --lr 3e-3 --eval-every 5 --eval-batches 2 --log-every 0 --seed 5 --threads 1"
losses() { grep -o '"loss": [^,]*' "$1" | cut -d' ' -f2; }
vals() { grep -o '"val_loss": [^,]*' "$1" | cut -d' ' -f2; }
# plan_ok log flags...: every rank's params, grads, optimizer and activation bytes, and the
# bytes it sent over dp, tp and pp, in the run's last logged step equal what `train --plan-ranks`
# (mt_plan_memory, mt_plan_comm) predicts for the layout
plan_ok() {
  local log=$1 r=0 want got
  shift
  $MT_BIN train $model "$@" --plan-ranks > "$W/plan.out" 2>&1 || return 1
  local line=$(tail -1 "$log")
  while read -r _ _ _ _ p _ g _ o _ a _ _ _ d _ t _ q _; do
    r=$((r + 1))
    got=$(for k in params grads optimizer activations dp tp pp; do echo "$line" | grep -o "\"$k\": [0-9]*" | sed -n "${r}p" | cut -d' ' -f2; done | tr '\n' ' ')
    [ "$got" = "$p $g $o $a $d $t $q " ] || return 1
  done < "$W/plan.out"
  [ $r -gt 0 ]
}

# ref K A [u]: the one-rank reference with --tp-blocks K (0: none) and --accum-blocks A (u:
# of the untied model, --untie-embeddings), made once
ref() {
  local r=ref${1}a$2${3:-} kflag=""
  [ $1 -gt 0 ] && kflag="--tp-blocks $1"
  [ "${3:-}" = u ] && kflag="$kflag --untie-embeddings"
  [ -d "$W/$r" ] || $MT_BIN train $model $kflag --accum-blocks $2 --save "$W/$r" --log-json "$W/$r.jsonl" \
    > "$W/$r.out" 2>&1 || { echo "equivalence: the one-rank reference $r failed: $(tail -2 "$W/$r.out")" >&2; exit 1; }
  echo $r
}
case ${MT_EQ_MUTATE:-0} in
  0) mutate="" ;;
  1|tp) mutate=MT_TEST_TP_LTR=1 ;;
  rtl) mutate=MT_TEST_ACCUM_RTL=1 ;;
  swap) mutate=MT_TEST_ACCUM_SWAP=1 ;;
  *) echo "equivalence: MT_EQ_MUTATE=$MT_EQ_MUTATE: want 1, tp, rtl or swap" >&2; exit 2 ;;
esac

nrows=0 nsame=0 ndiff=0 nref=0 nfail=0
t_start=$(date +%s)
printf '%-84s %5s %3s %3s  %s\n' layout ranks K A result
row() { # [K8] flags...: one layout against its reference (K8: --tp-blocks 8 under ZeRO too)
  local k8=0
  [ "$1" = K8 ] && { k8=1; shift; }
  local flags="$*${MT_EQ_UNTIE:+ --untie-embeddings}" k=8 dp=1 tp=1 pp=1 zero=0 u="" 
  [ -n "${MT_EQ_GREP:-}" ] && ! echo "$flags" | grep -qE -- "$MT_EQ_GREP" && return
  set -- $flags
  while [ $# -gt 0 ]; do
    case $1 in --dp) dp=$2 ;; --tp) tp=$2 ;; --pp) pp=$2 ;; --zero) zero=$2 ;; --untie-embeddings) u=u ;; esac
    shift
  done
  [ $zero -gt 0 ] && [ $k8 = 0 ] && k=$([ $tp -gt 1 ] && echo $tp || echo 0)
  local kflag="" ranks=$((dp * tp * pp)) r=""
  [ $k -gt 0 ] && kflag="--tp-blocks $k"
  local t0=$EPOCHREALTIME rc=0 result
  if [ -n "$mutate" ]; then
    env $mutate $MT_TEST_BIN train $model $flags $kflag --save "$W/run" --log-json "$W/run.jsonl" > "$W/run.out" 2>&1 || rc=$?
  else
    $MT_BIN train $model $flags $kflag --save "$W/run" --log-json "$W/run.jsonl" > "$W/run.out" 2>&1 || rc=$?
  fi
  local acc=$(grep -o '"accum_blocks": [0-9]*' "$W/run/trainer_state.json" 2>/dev/null | cut -d' ' -f2)
  if [ $rc -eq 0 ] && [ -n "$acc" ]; then r=$(ref $k $acc $u) || exit 1; fi
  local dt=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  nrows=$((nrows + 1))
  if [ $rc -eq 2 ]; then
    result="refused: $(grep -m1 '^meshtrain' "$W/run.out" | sed 's/^meshtrain train: //')"
    nref=$((nref + 1))
  elif [ $rc -ne 0 ]; then
    result="FAILED (exit $rc): $(tail -1 "$W/run.out")"
    nfail=$((nfail + 1))
  elif cmp -s <(losses "$W/$r.jsonl") <(losses "$W/run.jsonl") \
       && [ "$(vals "$W/$r.jsonl" | wc -l)" -eq 2 ] && cmp -s <(vals "$W/$r.jsonl") <(vals "$W/run.jsonl") \
       && cmp -s "$W/$r/model.safetensors" "$W/run/model.safetensors" \
       && cmp -s "$W/$r/optimizer.safetensors" "$W/run/optimizer.safetensors"; then
    result="bit-identical (2 val losses too)"
    nsame=$((nsame + 1))
    if plan_ok "$W/run.jsonl" $flags $kflag; then
      result="$result, memory and traffic as planned"
    else
      result="$result, MEMORY OR TRAFFIC NOT AS PLANNED: $(tr '\n' ' ' < "$W/plan.out") got: $(tail -1 "$W/run.jsonl" | grep -o '"comm": .*')"
      nfail=$((nfail + 1))
    fi
  else
    result="DIFFERS: max relative $($MT_DIFF "$W/run/model.safetensors" "$W/$r/model.safetensors" | head -2 | tr '\n' ' '); val losses $(vals "$W/run.jsonl" | tr '\n' ' ')vs $(vals "$W/$r.jsonl" | tr '\n' ' ')"
    ndiff=$((ndiff + 1))
  fi
  printf '%-84s %5d %3s %3s  %s (%s s)\n' "$flags" $ranks $([ $k -gt 0 ] && echo $k || echo -) "${acc:--}" "$result" "$dt"
  rm -rf "$W/run" "$W/run.jsonl"
}

if [ $quick = 1 ]; then
  row --dp 2 --tp 2 --pp 2 --recompute attn
  row --dp 2 --tp 2 --zero 3 --sequence-parallel
  row --dp 4 --zero 2 --shard-size 2
  row --dp 2 --pp 2 --schedule zb --recompute full
  row --dp 2 --tp 2 --pp 2 --zero 1 --schedule interleaved --virtual-stages 2
  row --tp 2 --pp 2 --schedule zb
  row --dp 2 --tp 2 --pp 2 --sequence-parallel --schedule zb
  row --dp 2 --tp 2 --pp 2 --zero 2 --sequence-parallel
  row --dp 2 --tp 2 --pp 2 --zero 3 --schedule zb --recompute full
  row --dp 4 --pp 2 --zero 3 --shard-size 2
  row --pp 2 --schedule interleaved --virtual-stages 8
  row K8 --dp 2 --tp 2 --pp 2 --zero 1
  row --dp 2 --tp 2 --accum-blocks 2
  row --dp 2 --pp 2 --schedule zb --accum-blocks 2
  row --dp 2 --zero 3 --accum-blocks 2
  row --dp 2 --pp 2 --zero 3 --schedule zb2 --recompute attn
  row --pp 2 --schedule interleaved --virtual-stages 5 --stage-layers 0,1,1,1,1,1,1,1,1,0
  row --dp 2 --tp 2 --pp 2 --zero 1 --schedule zb2 --untie-embeddings
  row --dp 2 --pp 2 --zero 3 --schedule zb --accum-blocks 2 --untie-embeddings
  row --dp 2 --tp 2 --zero 1 --untie-embeddings
  row --dp 2 --pp 2 --schedule zb2 --untie-embeddings --post-validate
else
  rc_i=0
  for dp in 1 2 4 8; do for tp in 1 2 4 8; do for pp in 1 2 4 8; do
    n=$((dp * tp * pp))
    [ $n -lt 2 ] || [ $n -gt 8 ] && continue
    zeros="0"; [ $dp -gt 1 ] && zeros="0 1 2 3"
    scheds="-"; [ $pp -gt 1 ] && scheds="1f1b interleaved zb zb2"
    sps="0"; [ $tp -gt 1 ] && sps="0 1"
    for z in $zeros; do for s in $scheds; do for sp in $sps; do
      f="--dp $dp --tp $tp --pp $pp"
      [ $z -gt 0 ] && f="$f --zero $z"
      [ $z -ge 2 ] && [ $dp -ge 4 ] && f="$f --shard-size $((dp / 2))"
      [ "$s" != - ] && f="$f --schedule $s"
      [ "$s" = interleaved ] && f="$f --virtual-stages 2"
      [ $sp = 1 ] && f="$f --sequence-parallel"
      rcm=(none attn full)
      [ $((rc_i % 3)) -gt 0 ] && f="$f --recompute ${rcm[$((rc_i % 3))]}"
      rc_i=$((rc_i + 1))
      row $f
    done; done; done
    # ZeRO with the matrix's 8 blocks over fewer tp ranks: refused (docs/parallelism.md), once per mesh
    [ $dp -gt 1 ] && [ $tp -gt 1 ] && [ $tp -lt 8 ] && row K8 --dp $dp --tp $tp --pp $pp --zero 1
  done; done; done
  # end stages of no block (the embedding alone, the head alone): 1F1B-I's cut, and with
  # FSDP, tp and zb2, ZeRO-1 and full recomputation
  row --pp 2 --schedule interleaved --virtual-stages 5 --stage-layers 0,1,1,1,1,1,1,1,1,0
  row --dp 2 --tp 2 --pp 2 --zero 3 --schedule zb2 --stage-layers 0,8 --sequence-parallel
  row --dp 2 --pp 4 --zero 1 --schedule zb --stage-layers 0,4,4,0 --recompute full
  # the untied head (--untie-embeddings: lm_head.weight its own tensor) on each technique
  # (MT_EQ_UNTIE=1 runs the whole matrix untied)
  if [ -z "${MT_EQ_UNTIE:-}" ]; then
    row --dp 2 --zero 2 --untie-embeddings
    row --tp 4 --sequence-parallel --untie-embeddings
    row --dp 2 --tp 2 --zero 3 --untie-embeddings
    row --dp 2 --tp 2 --zero 1 --untie-embeddings
    for s in 1f1b interleaved zb zb2; do
      f="--pp 2 --schedule $s"
      [ $s = interleaved ] && f="$f --virtual-stages 2"
      row $f --untie-embeddings
    done
    row --dp 2 --pp 2 --zero 3 --schedule zb2 --recompute attn --untie-embeddings
    row --dp 2 --tp 2 --pp 2 --zero 1 --schedule zb --accum-blocks 0 --untie-embeddings
    row --tp 2 --pp 4 --schedule zb2 --stage-layers 0,4,4,0 --sequence-parallel --untie-embeddings
  fi
  # post-validation (an update before its norm is known, made again where it clipped)
  for s in 1f1b interleaved zb zb2; do
    f="--pp 4 --schedule $s"
    [ $s = interleaved ] && f="$f --virtual-stages 2"
    row $f --untie-embeddings --post-validate
  done
  row --dp 2 --pp 2 --schedule zb2 --recompute full --accum-blocks 4 --untie-embeddings --post-validate
  row --dp 4 --pp 2 --schedule zb --untie-embeddings --post-validate
  row --pp 8 --schedule zb2 --untie-embeddings --post-validate
  row --tp 2 --pp 2 --schedule zb2 --untie-embeddings --post-validate
  row --dp 2 --tp 2 --pp 2 --schedule zb --sequence-parallel --untie-embeddings --post-validate
  row --tp 4 --pp 2 --schedule interleaved --virtual-stages 2 --recompute attn --untie-embeddings --post-validate
  # the accumulation order per mesh (the rows above ran the default: K = 1 without dp,
  # PyTorch's order; K = dp with it; one block per micro-batch for ZeRO-2/3): K = M (one
  # block per micro-batch); over dp, ZeRO-1 at K = 2 dp and FSDP at K = dp (blocks of
  # several micro-batches: FSDP takes contiguous runs)
  for dp in 1 2 4 8; do for tp in 1 2 4 8; do for pp in 1 2 4 8; do
    n=$((dp * tp * pp))
    [ $n -lt 2 ] || [ $n -gt 8 ] && continue
    f="--dp $dp --tp $tp --pp $pp"
    [ $pp -gt 1 ] && f="$f --schedule zb"
    row $f --accum-blocks 0
    [ $dp -gt 1 ] && [ $dp -lt 8 ] && row $f --zero 1 --accum-blocks $((2 * dp))
    [ $dp -gt 1 ] && row $f --zero 3 --accum-blocks $dp
  done; done; done
fi
echo "equivalence: $nrows layouts: $nsame bit-identical, $ndiff different, $nref refused (exit 2 with the reason), $nfail failed;" \
  "$(( $(date +%s) - t_start )) s"
[ $ndiff -eq 0 ] && [ $nfail -eq 0 ]
