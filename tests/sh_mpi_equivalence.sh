#!/usr/bin/env bash
# The equivalence matrix script (scripts/equivalence.sh --quick, the suite's subset: the
# three-way dp x tp x pp with recomputation, FSDP x tp with sequence parallelism, hybrid-
# sharded ZeRO-2, dp x pp zb with full recomputation, tp x pp zb, the three-way zb with
# sequence parallelism, each ZeRO stage in a three-way hybrid, hybrid-sharded FSDP over
# pipeline copies, dp 2 x tp 2 and dp 2 x pp 2 zb with --accum-blocks 2, FSDP dp 2 at K 2,
# FSDP over pp 2 zb2 with attention recomputation, an untied head (--untie-embeddings) on
# ZeRO-1 zb2 three-way, on FSDP over pp 2 zb at --accum-blocks 2 and on ZeRO-1 dp 2 x tp 2,
# dp 2 x pp 2 zb2 with post-validation;
# 16 stages of 8 layers and ZeRO with 8 blocks over 2 tp ranks, refused) reports each
# layout against one rank at the same accumulation order (losses, validation losses,
# weights, moments), each rank's memory and traffic as planned, and exits 0.  With a wrong
# order in the layouts (test hooks) it reports the difference and exits 1: tensor
# parallelism's blocks summed left to right; the trainer's first accumulation block summed
# right to left; its first and last leaf exchanged (these two on the --accum-blocks 2 rows).
source "$(dirname "$0")/lib.sh"
export MT_DIFF=${MT_BUILD:-build}/prog_stdiff MT_TEST_BIN
rc=0
bash scripts/equivalence.sh --quick > "$T/eq.out" 2>&1 || rc=$?
cat "$T/eq.out"
[ $rc -eq 0 ] && pass || fail "the matrix subset exited $rc"
[ "$(grep -c ' bit-identical (2 val losses too), memory and traffic as planned (' "$T/eq.out")" -eq 19 ] && pass \
  || fail "want 19 bit-identical layouts, each rank's memory and traffic as mt_plan_memory and mt_plan_comm predict"
# the plan itself: ZeRO-1 over 2 ranks holds half the moments, FSDP also half the parameters
# (plus its unit slots), a pipeline stage its own units
plan() { $MT_BIN train --data "$T/data" --layers 4 --heads 4 --dim 64 --seq-len 16 --batch-size 4 "$@" --plan-ranks; }
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
one=$(plan | awk '{print $5, $9}') z1=$(plan --dp 2 --zero 1 | head -1 | awk '{print $5, $9}')
read -r p1 o1 <<< "$one"
read -r pz oz <<< "$z1"
[ "$o1" = $((2 * p1)) ] && [ "$pz" -ge "$p1" ] && [ "$oz" -lt "$o1" ] && [ "$oz" -ge $((p1)) ] && pass \
  || fail "plan: one rank params $p1 optimizer $o1; ZeRO-1 dp 2 params $pz optimizer $oz"
[ "$(plan --pp 2 | wc -l)" -eq 2 ] && [ "$(plan --pp 2 | head -1 | awk '{print $5}')" -lt "$p1" ] && pass \
  || fail "plan: a pp 2 stage does not hold less than the whole model: $(plan --pp 2 | tr '\n' ' ')"
[ "$(grep -c ' refused: ' "$T/eq.out")" -eq 2 ] && grep -q ' refused: .*16 stages do not divide the 8 layers' "$T/eq.out" \
  && grep -q ' refused: --zero 1 with --tp-blocks 8 over --tp 2: the sharded norm' "$T/eq.out" \
  && pass || fail "want 2 layouts refused: 16 stages of 8 layers, ZeRO with 8 blocks over tp 2"
grep -q "21 layouts: 19 bit-identical, 0 different, 2 refused (exit 2" "$T/eq.out" && pass || fail "no summary line"
rc=0
MT_EQ_MUTATE=1 bash scripts/equivalence.sh --quick > "$T/mut.out" 2>&1 || rc=$?
[ $rc -eq 1 ] && grep -q -- "--dp 2 --tp 2 --pp 2 --recompute attn .*DIFFERS: max relative" "$T/mut.out" && pass \
  || fail "blocks summed left to right: exit $rc: $(cat "$T/mut.out")"
for m in rtl swap; do
  rc=0
  MT_EQ_MUTATE=$m MT_EQ_GREP='--accum-blocks 2' bash scripts/equivalence.sh --quick > "$T/mut.out" 2>&1 || rc=$?
  [ $rc -eq 1 ] && grep -q -- "--dp 2 --tp 2 --accum-blocks 2 .*DIFFERS: max relative" "$T/mut.out" \
    && grep -q -- "--dp 2 --zero 3 --accum-blocks 2 .*DIFFERS: max relative" "$T/mut.out" \
    && grep -q -- "--dp 2 --pp 2 --schedule zb --accum-blocks 2 .*DIFFERS: max relative" "$T/mut.out" && pass \
    || fail "accumulation mutation $m: exit $rc: $(cat "$T/mut.out")"
done
finish
