#!/usr/bin/env bash
# Tensor parallelism reproduces one device.  With --tp-blocks 4, tp 1, 2 and 4, with and
# without sequence parallelism (and with recomputation), give the one-rank --tp-blocks 4
# losses, model.safetensors and optimizer.safetensors bit for bit over 20 steps, and a run
# whose ranks sum their blocks left to right (a test hook) must not; without --tp-blocks,
# tp 2, 3 and 4, with and without sequence parallelism, stay within 1e-5 (losses) and 1e-4
# (each tensor; the attention key biases, whose exact gradient is zero and whose values are
# AdamW-scaled rounding noise in any two runs, apart: prog_stdiff) of the plain run.  A tp 2 checkpoint resumes on tp 4 and on one rank bit for bit.
# The replicated tensors stay identical on every rank for 50 steps (and a drift, a test
# hook, is caught).  mem.* per rank equals the formulas (parameters, gradients, optimizer
# exactly; activations per layer and logits per rank by difference); comm.tp per step
# equals the traffic formula byte for byte.  Bad layouts exit 2 with one line.
source "$(dirname "$0")/lib.sh"
DIFF=${MT_BUILD:-build}/prog_stdiff
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
base="--data $T/data --heads 4 --dim 32 --seq-len 16 --warmup 2 --lr 3e-3 --eval-every 0 --log-every 0 --seed 7
      --threads 1 --batch-size 4 --micro-batch-size 2 --layers 2"
eq="$base --steps 20"

# ---- bit for bit with --tp-blocks K: tp 1, 2, 4 against one rank with the same K ----
train ref $eq
train ref4 $eq --tp-blocks 4
train ref8 $eq --tp-blocks 8
cmp -s "$T/ref/model.safetensors" "$T/ref4/model.safetensors" \
  && fail "--tp-blocks 4 gave the bits of the plain run (the blocks changed nothing?)" || pass
for N in 2 4; do
  train tp${N}_k4 $eq --tp $N --tp-blocks 4 --check-collectives
  same_run "tp $N --tp-blocks 4" "$T/ref4" "$T/tp${N}_k4"
  train sp${N}_k4 $eq --tp $N --tp-blocks 4 --sequence-parallel --check-collectives
  same_run "tp $N --tp-blocks 4 --sequence-parallel" "$T/ref4" "$T/sp${N}_k4"
done
train sp2_full $eq --tp 2 --tp-blocks 4 --sequence-parallel --recompute full
same_run "tp 2 --sequence-parallel --recompute full" "$T/ref4" "$T/sp2_full"
train tp4_attn $eq --tp 4 --tp-blocks 4 --recompute attn
same_run "tp 4 --recompute attn" "$T/ref4" "$T/tp4_attn"
train tp2_k8 $eq --tp 2 --tp-blocks 8
same_run "tp 2 --tp-blocks 8" "$T/ref8" "$T/tp2_k8"
MT_BIN=$MT_TEST_BIN MT_TEST_TP_LTR=1 train ltr $eq --tp 2 --tp-blocks 8
cmp -s "$T/ref8/model.safetensors" "$T/ltr/model.safetensors" \
  && fail "ranks summing their blocks left to right still matched one device" || pass

# ---- default mode (K = tp): within rounding of the plain run ----
# within_rounding what ref new: every loss within 1e-5 relative, every tensor within 1e-4
within_rounding() {
  local worst wts
  worst=$(paste <(losses "$2.jsonl") <(losses "$3.jsonl") \
          | awk '{ d = $1 - $2; d = d < 0 ? -d : d; r = d / $1; if (r > w) w = r } END { printf "%.3e", w }')
  wts=$($DIFF "$2/model.safetensors" "$3/model.safetensors")
  echo "$1 (default): losses within $worst relative; weights within $wts (worst tensor)"
  awk -v l="$worst" -v w="${wts%% *}" 'BEGIN { exit !(l + 0 <= 1e-5 && w + 0 <= 1e-4) }' && pass \
    || fail "$1 default: losses within $worst, weights $wts (want 1e-5, 1e-4)"
}
for run in "tp2:--tp 2" "tp4:--tp 4" "sp2:--tp 2 --sequence-parallel" "sp4:--tp 4 --sequence-parallel"; do
  train ${run%%:*} $eq ${run#*:}
  within_rounding "${run#*:}" "$T/ref" "$T/${run%%:*}"
done

# ---- a group of 3 (fixed-order reductions, uneven row blocks: 32 rows in 3) ----
odd="--data $T/data --heads 6 --dim 48 --seq-len 16 --warmup 2 --lr 3e-3 --eval-every 0 --log-every 0 --seed 7
     --threads 1 --batch-size 4 --micro-batch-size 2 --layers 2 --steps 20"
train odd1 $odd
train odd3 $odd --tp 3
within_rounding "--tp 3" "$T/odd1" "$T/odd3"

# ---- resume across layouts: tp 2 to step 10, then tp 4 (and one rank) to 20 ----
train half $eq --tp 2 --tp-blocks 4 --exit-interval 10
cp -r "$T/half" "$T/half_copy"
cp "$T/half.jsonl" "$T/one.jsonl"
resume "$T/half" "$T/half.jsonl" "$T/r4" --tp 4 --tp-blocks 4
resume "$T/half_copy" "$T/one.jsonl" "$T/r1" --tp-blocks 4
for x in half:r4 one:r1; do
  same_resumed "resume of a tp 2 checkpoint (${x##*:})" "$T/ref4" "$T/${x%%:*}.jsonl" "$T/${x##*:}" 20
done
$MT_BIN eval --ckpt "$T/r4" --data "$T/data/val.bin" > "$T/eval.out" 2>&1 && grep -q '^loss ' "$T/eval.out" && pass \
  || fail "eval of a tensor-parallel checkpoint: $(tail -2 "$T/eval.out")"

# ---- the replicated tensors stay identical for 50 steps; a drift is caught ----
for sp in "" --sequence-parallel; do
  train rep $base --steps 50 --tp 2 $sp
  grep -q "every replicated tensor (parameters and moments) is identical on the 2 tp ranks at step 50" "$T/rep.out" \
    && pass || fail "no identity of the replicated tensors after 50 steps ($sp): $(tail -3 "$T/rep.out")"
done
rc=0
MT_TEST_TP_DRIFT=1 $MT_TEST_BIN train $base --steps 5 --tp 2 > "$T/drift.out" 2>&1 || rc=$?
[ $rc -eq 1 ] && grep -q "replicated tensors differ across the 2 tp ranks" "$T/drift.out" && pass \
  || fail "a drifting replica was not caught (exit $rc): $(tail -2 "$T/drift.out")"

# ---- memory and traffic per rank against their formulas ----
field() { echo "$1" | grep -o "\"$2\": [0-9.]*" | sed -n "${3}p" | cut -d' ' -f2; }
one_step() { # name args...: one step, its JSON line in $T/name.jsonl
  local name=$1; shift
  $MT_BIN train --data "$T/data" --heads 4 --dim 32 --seq-len 16 --threads 1 --eval-every 0 --log-every 0 --steps 1 \
    --batch-size 4 --micro-batch-size 2 --log-json "$T/$name.jsonl" "$@" > "$T/$name.out" 2>&1 \
    || fail "$name: $(tail -2 "$T/$name.out")"
}
for lay in "1 0" "2 0" "4 0" "2 1" "4 1"; do
  read -r N sp <<< "$lay"
  flag=""
  [ $sp = 1 ] && flag=--sequence-parallel
  for L in 2 4; do
    one_step m${N}_${sp}_$L --tp $N --tp-blocks 4 --layers $L $flag
  done
  one_step v${N}_$sp --tp $N --tp-blocks 4 --layers 2 --vocab 512 $flag
  l2=$(tail -1 "$T/m${N}_${sp}_2.jsonl") l4=$(tail -1 "$T/m${N}_${sp}_4.jsonl") v=$(tail -1 "$T/v${N}_$sp.jsonl")
  for ((r = 1; r <= N; r++)); do
    verdict=$(awk -v N=$N -v sp=$sp -v L=2 -v p="$(field "$l2" params $r)" -v g="$(field "$l2" grads $r)" \
      -v o="$(field "$l2" optimizer $r)" -v a2="$(field "$l2" activations $r)" -v a4="$(field "$l4" activations $r)" \
      -v av="$(field "$v" activations $r)" -v tp="$(field "$l2" tp $r)" '
      function al(x) { return int((x + 15) / 16) * 16 }
      BEGIN {
        C = 32; T = 16; NH = 4; V = 256; K = 4; Vp = 256; mb = 2; n = mb * T; M = 2
        rows = sp ? n / N : n   # the residual stream rows a rank holds
        # a rank slices: wte (Vp/N rows), c_attn and c_fc columns, the c_proj rows
        P = Vp / N * C + T * C + L * (6 * C + 12 * C * C / N + 7 * C / N) + 2 * C
        # M = 2 micro-batches in one block: the sum, the second leaf unit by unit (the
        # embedding unit buffer and a block one) and the embedding rows of the block (its distinct
        # tokens, at most M n or the Vp/N of the rank, x C)
        er = Vp / N < M * n ? Vp / N : M * n
        wp = 4 * P; wg = 4 * (P + Vp / N * C + T * C + 6 * C + 12 * C * C / N + 7 * C / N + er * C); wo = 8 * P
        # a layer (Korthikanti et al. adapted: fp32, no dropout masks, the LayerNorm outputs
        # kept gathered): ln1 and ln2 (n C), res2 and res3 (rows C), four row statistics
        # (rows), qkv, atty, the heads rows log-sum-exp, fch and its GELU (the share of the rank)
        layer = 4 * (2 * al(n * C) + 2 * al(rows * C) + 4 * al(rows) + al(3 * n * C / N) + al(n * C / N) \
                     + al(mb * NH / N * T) + 2 * al(4 * n * C / N))
        logits = 4 * n * (512 - 256) / N   # doubling the vocabulary adds its logits, n x V/N
        # traffic per micro-batch: the residual stream crosses the group 4 L + 2 times, each
        # an all-reduce of n C floats or, with sequence parallelism, an all-gather plus a
        # reduce-scatter (the same bytes); the row maxima and row stats (1 + 4 floats per
        # row) all-gathered; with sequence parallelism the replicated gradients (6 C per
        # block, 2 C for ln_f) all-reduced.  Per step the norm parts (2 floats per tensor).
        ar = int(2 * (N - 1) * 4 * n * C / N)
        rep = sp ? L * int(2 * (N - 1) * 4 * 6 * C / N) + int(2 * (N - 1) * 4 * 2 * C / N) : 0
        wtp = M * ((4 * L + 2) * ar + (N - 1) * 4 * (n + 4 * n) + rep) + (N - 1) * 4 * 2 * (4 + 12 * L)
        if (p != wp || g != wg || o != wo) { printf "params %d grads %d optimizer %d, want %d %d %d", p, g, o, wp, wg, wo; exit }
        if ((a4 - a2) / 2 != layer) { printf "activations per layer %d, want %d", (a4 - a2) / 2, layer; exit }
        if (av - a2 != logits) { printf "logits per rank %d bytes, want %d", av - a2, logits; exit }
        if (tp != wtp) { printf "comm.tp %d bytes, want %d", tp, wtp; exit }
        printf "ok"
      }')
    [ "$verdict" = ok ] && pass || fail "tp $N sp $sp rank $((r - 1)): $verdict"
  done
  echo "tp $N sequence-parallel $sp (rank 0): per layer $(( ($(field "$l4" activations 1) - $(field "$l2" activations 1)) / 2 )) bytes of activations, $(field "$l2" tp 1) tp bytes per step"
done

# ---- bad layouts: exit 2, one line, before any rank starts ----
ok="--data $T/data --heads 4 --dim 32 --seq-len 16 --steps 1 --layers 2 --batch-size 4"
expect_bad_input "tp not dividing the heads" $MT_BIN train $ok --tp 3
expect_bad_input "--tp-blocks not a power of two" $MT_BIN train $ok --tp-blocks 3
expect_bad_input "--tp-blocks not a multiple of tp" $MT_BIN train $ok --tp 4 --tp-blocks 2
expect_bad_input "--tp-blocks not dividing the width" $MT_BIN train $ok --tp-blocks 64
expect_bad_input "sequence parallelism with the sequence not divisible by tp" $MT_BIN train --data $T/data \
  --heads 4 --dim 32 --seq-len 15 --steps 1 --layers 2 --batch-size 4 --tp 2 --sequence-parallel
expect_bad_input "tp with --fast-comm" $MT_BIN train $ok --tp 2 --fast-comm
finish
