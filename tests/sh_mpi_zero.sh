#!/usr/bin/env bash
# The data-parallel family reproduces one device.  For DDP (--zero 0), ZeRO-1, ZeRO-2 and
# FSDP (--zero 3), with N = 2 and 4 ranks and with and without gradient accumulation, the
# loss sequence, final weights and optimizer state equal the single-rank run's bit for bit
# (fixed-order reductions; N a power of two dividing M; every run here sums in one block per
# micro-batch, --accum-blocks 0, the order ZeRO-2/3 reduce in round-robin and the one all
# stages share; sh_mpi_accum covers the other orders); N = 3 and MPI's own reductions
# (round-robin ZeRO-2 / FSDP with M/N not a power of two among them) agree within 1e-5.  The JSON log's mem entries equal the sharding
# formulas (exactly, in padded units, and within 5% of the ZeRO paper's plus the documented
# working buffers), its comm entries equal the traffic formulas byte for byte, and an FSDP
# run saved at step 10 on 2 ranks resumes on 4 ranks with the same sequence.  Hybrid
# sharding (4 ranks as 2 copies of 2) is bit-exact too and holds per rank what 2 ranks do.
source "$(dirname "$0")/lib.sh"
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
close_run() { # what ref new: losses within 1e-5 relative, and not all equal to nothing
  [ "$(losses "$3.jsonl" | wc -l)" -eq "$(losses "$2.jsonl" | wc -l)" ] && \
  paste <(losses "$2.jsonl") <(losses "$3.jsonl") | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) bad++ }
    END { exit bad > 0 }' && pass || fail "$1: losses not within 1e-5: $(paste <(losses "$2.jsonl") <(losses "$3.jsonl") | tr '\n' ' ')"
}
base="--data $T/data --layers 2 --heads 2 --dim 32 --seq-len 32 --warmup 2 --lr 3e-3 --eval-every 0
      --log-every 0 --seed 7 --threads 1 --bucket-mb 0.05 --accum-blocks 0"
eq="$base --steps 20"

# ---- equivalence: accumulation (batch 8 of micro 2: M = 4) and none (micro 8/N: M = N) ----
train ref_acc $eq --batch-size 8 --micro-batch-size 2
train ref_m1 $eq --batch-size 8 --micro-batch-size 1
train ref_m2 $eq --batch-size 8 --micro-batch-size 2
train ref_m4 $eq --batch-size 8 --micro-batch-size 4
for z in 0 1 2 3; do
  for n in 2 4; do
    train z${z}n${n}_acc $eq --batch-size 8 --micro-batch-size 2 --dp $n --zero $z --check-collectives
    same_run "zero $z, dp $n, M/N = $((4 / n))" "$T/ref_acc" "$T/z${z}n${n}_acc"
    train z${z}n${n}_one $eq --batch-size 8 --micro-batch-size $((8 / n)) --dp $n --zero $z
    same_run "zero $z, dp $n, one micro-batch per rank" "$T/ref_m$((8 / n))" "$T/z${z}n${n}_one"
  done
  # three ranks, and three rounds per rank (M/N not a power of two): within fp32 rounding
  train z${z}n3 $eq --batch-size 6 --micro-batch-size 2 --dp 3 --zero $z
  [ -f "$T/ref3.jsonl" ] || train ref3 $eq --batch-size 6 --micro-batch-size 2
  close_run "zero $z, dp 3" "$T/ref3" "$T/z${z}n3"
  # three micro-batches per rank: not a whole number of rounds-subtrees, so ZeRO-2 and FSDP
  # take contiguous runs too (full local gradients) and stay exact; --fast-comm goes round-robin
  train z${z}r3 $eq --batch-size 6 --micro-batch-size 1 --dp 2 --zero $z
  [ -f "$T/ref6.jsonl" ] || train ref6 $eq --batch-size 6 --micro-batch-size 1
  same_run "zero $z, dp 2, 3 micro-batches per rank" "$T/ref6" "$T/z${z}r3"
  train z${z}r3f $eq --batch-size 6 --micro-batch-size 1 --dp 2 --zero $z --fast-comm
  close_run "zero $z, dp 2, 3 micro-batches per rank, --fast-comm" "$T/ref6" "$T/z${z}r3f"
  train z${z}fast $eq --batch-size 8 --micro-batch-size 2 --dp 2 --zero $z --fast-comm
  close_run "zero $z, dp 2, --fast-comm" "$T/ref_acc" "$T/z${z}fast"
done

# ---- hybrid sharding: 4 ranks as 2 copies of 2; a copy holds what 2 ranks hold ----
mem_of() { tail -1 "$1" | grep -o "\"$2\": [0-9]*" | head -1 | cut -d' ' -f2; }
for z in 1 2 3; do
  train hy$z $eq --batch-size 8 --micro-batch-size 2 --dp 4 --shard-size 2 --zero $z --check-collectives
  same_run "zero $z, dp 4 in copies of 2" "$T/ref_acc" "$T/hy$z"
  for k in params optimizer; do
    [ "$(mem_of "$T/hy$z.jsonl" $k)" = "$(mem_of "$T/z${z}n2_acc.jsonl" $k)" ] && pass \
      || fail "zero $z hybrid: $k $(mem_of "$T/hy$z.jsonl" $k) bytes, 2 ranks hold $(mem_of "$T/z${z}n2_acc.jsonl" $k)"
  done
done
expect_bad_input "--shard-size not dividing --dp" $MT_BIN train $eq --batch-size 8 --dp 4 --zero 3 --shard-size 3
expect_bad_input "--shard-size with DDP" $MT_BIN train $eq --batch-size 8 --dp 4 --shard-size 2

# ---- memory and traffic: a model whose padding is small (units padded to N * 512 floats) ----
V=256; S=32; C=128; L=2
mem="--data $T/data --layers $L --heads 2 --dim $C --seq-len $S --vocab $V --steps 1 --eval-every 0
     --log-every 0 --threads 1 --micro-batch-size 1 --bucket-mb 0.5"
field() { echo "$1" | grep -o "\"$2\": [0-9.]*" | sed -n "${3:-1}p" | cut -d' ' -f2; }
for n in 1 2 4 8; do
  for z in 0 1 2 3; do
    $MT_BIN train $mem --batch-size $n --dp $n --zero $z --log-json "$T/mem$z$n.jsonl" > "$T/mem.out" 2>&1 \
      || { fail "mem zero $z dp $n: $(tail -3 "$T/mem.out")"; continue; }
    line=$(tail -1 "$T/mem$z$n.jsonl")
    read -r p g o b <<< "$(field "$line" params) $(field "$line" grads) $(field "$line" optimizer) $(field "$line" dp)"
    verdict=$(awk -v z=$z -v N=$n -v V=$V -v S=$S -v C=$C -v L=$L -v p=$p -v g=$g -v o=$o -v b=$b '
      function pad(x) { a = (N > 1 ? N * 512 : 1); return int((x + a - 1) / a) * a }
      function max(a, b) { return a > b ? a : b }
      BEGIN {
        u0 = (V + S) * C; ub = 12 * C * C + 13 * C; uh = 2 * C
        psi = u0 + L * ub + uh                      # floats, as the ZeRO paper counts them
        P = pad(u0) + L * pad(ub) + pad(uh); sh = P / N
        work = 4 * (pad(u0) + pad(uh) + 2 * pad(ub)) # unit buffers: embedding, head, two blocks
        # exact accounting, per category, in padded units
        ep = (z == 3 ? 4 * sh + work : 4 * P)
        er = 4 * (V < S ? V : S) * C                 # the embedding rows of a block (one micro-batch)
        eg = (z >= 2 ? 4 * sh + work : 4 * P + (z == 1 ? 4 * max(max(pad(u0), pad(ub)), pad(uh)) / N : 0)) + er
        eo = (z >= 1 ? 8 * sh : 8 * P)
        if (N == 1) { ep = 4 * psi; eg = 4 * psi + er; eo = 8 * psi }   # one rank: the plain trainer
        if (p != ep || g != eg || o != eo) { printf "mem %d/%d/%d, want %d/%d/%d", p, g, o, ep, eg, eo; exit }
        # the ZeRO formulas on the true size, within 5%, plus the working buffers
        F = (z == 0 ? 16 * psi : z == 1 ? 8 * psi + 8 * psi / N : z == 2 ? 4 * psi + 12 * psi / N : 16 * psi / N)
        Tr = er + (N == 1 ? 0 : z == 1 ? 4 * max(max(pad(u0), pad(ub)), pad(uh)) / N : z == 2 ? work : z == 3 ? 2 * work : 0)
        if (p + g + o > 1.05 * F + Tr || p + g + o < 0.95 * F) { printf "p+g+o %d outside 16psi-formula %d (+%d)", p + g + o, F, Tr; exit }
        # bytes sent per step: gradient all-reduce 2(N-1)/N; reduce-scatter and all-gather (N-1)/N each;
        # FSDP gathers every unit in the forward and the blocks again in the backward; the
        # sharded modes all-gather the norm block sums (8 bytes per 512 floats); the loss
        f = (N - 1) / N; nb = 8 * P / 512
        if (z == 0) eb = 2 * f * 4 * P + int(2 * f * 4)
        if (z == 1) eb = 2 * f * 4 * P + f * nb + int(2 * f * 4)
        if (z == 2) eb = 2 * f * 4 * P + f * nb + f * 4 * N
        if (z == 3) eb = f * 4 * (P + (P - pad(u0) - pad(uh)) + P) + f * nb + f * 4 * N
        if (N == 1) eb = 0
        if (b != eb) { printf "comm %d bytes, want %d", b, eb; exit }
        printf "ok p+g+o %.2f psi, comm %.3f x DDP", (p + g + o) / psi, (N > 1 ? b / (2 * f * 4 * P) : 0)
      }')
    case "$verdict" in ok*) pass; echo "zero $z dp $n: $verdict" ;; *) fail "zero $z dp $n: $verdict" ;; esac
  done
done

# ---- resume on another layout: FSDP on 2 ranks to step 10, then 4 ranks to step 20 ----
run="$base --batch-size 8 --micro-batch-size 2 --steps 20"
train straight $run
train first $run --dp 2 --zero 3 --exit-interval 10
$MT_BIN train --data "$T/data" --threads 1 --eval-every 0 --log-every 0 --dp 4 --zero 3 --resume "$T/first" --log-json "$T/first.jsonl" --save "$T/second" \
  > "$T/second.out" 2>&1 || fail "resume on 4 ranks: $(tail -3 "$T/second.out")"
[ "$(losses "$T/first.jsonl" | wc -l)" -eq 20 ] && cmp -s <(losses "$T/straight.jsonl") <(losses "$T/first.jsonl") \
  && cmp -s "$T/straight/model.safetensors" "$T/second/model.safetensors" && pass \
  || fail "FSDP 2 -> 4 ranks resume differs: $(losses "$T/straight.jsonl" | tr '\n' ' ') vs $(losses "$T/first.jsonl" | tr '\n' ' ')"
$MT_BIN eval --ckpt "$T/second" --data "$T/data/val.bin" > "$T/eval.out" 2>&1 && grep -q '^loss ' "$T/eval.out" && pass \
  || fail "eval of an FSDP checkpoint: $(tail -2 "$T/eval.out")"
expect_bad_input "--zero 4" $MT_BIN train $eq --batch-size 8 --dp 2 --zero 4
expect_bad_input "--bucket-mb -1" $MT_BIN train --data $T/data --batch-size 8 --dp 2 --bucket-mb -1
finish
