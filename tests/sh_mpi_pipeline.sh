#!/usr/bin/env bash
# Model and pipeline parallelism reproduce one device.  Every schedule (naive, gpipe, 1f1b,
# interleaved with 2 chunks per rank, zb, zb2) on 2 and 4 stages with 4 and 8 micro-batches, and
# with --recompute full and attn, gives the single-rank losses, model.safetensors and
# optimizer.safetensors bit for bit over 20 steps; so do uneven --stage-layers (end stages
# holding only the embedding or the head included), and a
# stage that sums its micro-batches left to right (a test hook) must not.  A run saved on
# pp 4 interleaved at step 10 resumes on pp 2 zb and on one rank bit for bit.  mem.activations
# equals the activation-set formula and comm.pp the traffic formula on every rank; the
# measured order of compute actions (the trace) equals each rank's list; bad layouts exit 2
# with one line before any rank starts; a killed middle stage ends the job, named.  Every
# run sums one block per micro-batch (--accum-blocks 0: the full tree, the order with the
# most adds to place; the equivalence matrix covers the default orders).
source "$(dirname "$0")/lib.sh"
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
base="--data $T/data --heads 2 --dim 32 --seq-len 32 --warmup 2 --lr 3e-3 --eval-every 0 --log-every 0 --seed 7
      --threads 1 --batch-size 8 --accum-blocks 0"
eq="$base --steps 20"

# ---- references: one rank, M = 4 and 8 micro-batches, 4 and 8 layers ----
for L in 4 8; do
  for M in 4 8; do
    train ref_L${L}_M$M $eq --layers $L --micro-batch-size $((8 / M))
  done
done

# ---- every schedule, P = 2 and 4, M = 4 and 8, and both recompute modes: bit for bit ----
for s in naive gpipe 1f1b interleaved zb zb2; do
  for P in 2 4; do
    L=4 extra=""
    if [ $s = interleaved ]; then
      extra="--virtual-stages 2"
      [ $P = 4 ] && L=8
    fi
    for M in 4 8; do
      train ${s}_p${P}_m$M $eq --layers $L --pp $P --schedule $s --microbatches $M $extra --check-collectives
      same_run "$s, pp $P, $M micro-batches" "$T/ref_L${L}_M$M" "$T/${s}_p${P}_m$M"
    done
    for r in full attn; do
      train ${s}_p${P}_$r $eq --layers $L --pp $P --schedule $s --microbatches 8 $extra --recompute $r
      same_run "$s, pp $P, --recompute $r" "$T/ref_L${L}_M8" "$T/${s}_p${P}_$r"
    done
  done
done
grep -q '"bubble": ' "$T/1f1b_p2_m8.jsonl" && pass || fail "no bubble in the JSON log of a pipeline"

# ---- uneven stages, recomputation without a pipeline, and a wrong order that must be caught ----
train uneven2 $eq --layers 4 --pp 2 --stage-layers 1,3 --microbatches 8
same_run "--stage-layers 1,3" "$T/ref_L4_M8" "$T/uneven2"
train uneven3 $eq --layers 4 --pp 3 --stage-layers 2,1,1 --schedule zb --microbatches 4
same_run "--pp 3 --stage-layers 2,1,1 zb" "$T/ref_L4_M4" "$T/uneven3"
# end stages that hold no block (the embedding or the head alone): the Zero Bubble paper's
# 1F1B-I, one layer per chunk with those two counted as layers, and zb2 with an empty first stage
train endless $eq --layers 4 --pp 2 --schedule interleaved --virtual-stages 3 --stage-layers 0,1,1,1,1,0 --microbatches 4
same_run "interleaved V3 --stage-layers 0,1,1,1,1,0" "$T/ref_L4_M4" "$T/endless"
train endless2 $eq --layers 4 --pp 3 --schedule zb2 --stage-layers 0,4,0 --microbatches 8 --recompute full
same_run "zb2 --pp 3 --stage-layers 0,4,0 --recompute full" "$T/ref_L4_M8" "$T/endless2"
train rc_one $eq --layers 4 --micro-batch-size 1 --recompute full
same_run "one rank --recompute full" "$T/ref_L4_M8" "$T/rc_one"
train rc_dp $eq --layers 4 --micro-batch-size 1 --dp 2 --zero 3 --recompute attn
same_run "dp 2 FSDP --recompute attn" "$T/ref_L4_M8" "$T/rc_dp"
MT_BIN=$MT_TEST_BIN MT_TEST_LTR_STAGE=1 train ltr $eq --layers 4 --pp 2 --microbatches 8
cmp -s "$T/ref_L4_M8/model.safetensors" "$T/ltr/model.safetensors" \
  && fail "a stage summing its micro-batches left to right still matched one device" || pass

# ---- resume across layouts: pp 4 interleaved to step 10, then pp 2 zb (and one rank) to 20 ----
train first $eq --layers 8 --micro-batch-size 1 --pp 4 --schedule interleaved --virtual-stages 2 --exit-interval 10
cp -r "$T/first" "$T/first_copy"
cp "$T/first.jsonl" "$T/one.jsonl"
resume "$T/first" "$T/first.jsonl" "$T/second" --pp 2 --schedule zb
resume "$T/first_copy" "$T/one.jsonl" "$T/third"
for x in first:second one:third; do
  same_resumed "resume of a pp 4 interleaved checkpoint (${x##*:})" "$T/ref_L8_M8" "$T/${x%%:*}.jsonl" "$T/${x##*:}" 20
done
$MT_BIN eval --ckpt "$T/second" --data "$T/data/val.bin" > "$T/eval.out" 2>&1 && grep -q '^loss ' "$T/eval.out" && pass \
  || fail "eval of a pipeline checkpoint: $(tail -2 "$T/eval.out")"

# ---- checkpoints: a rank holds its stages and writes or reads only its own tensors while saving and
# loading: resident memory grows by under 1 MiB per rank (one tensor is 256 KiB; the whole
# state 19 MB) ----
big="--data $T/data --layers 8 --heads 4 --dim 128 --seq-len 32 --eval-every 0 --log-every 0 --threads 1
     --batch-size 4 --micro-batch-size 1"
$MT_BIN train $big --steps 1 --pp 4 --save "$T/big" > "$T/big.out" 2>&1 || fail "big save: $(tail -2 "$T/big.out")"
$MT_BIN train --data "$T/data" --threads 1 --eval-every 0 --log-every 0 --resume "$T/big" --steps 2 --pp 2 \
  --save "$T/big2" > "$T/big2.out" 2>&1 || fail "big resume: $(tail -2 "$T/big2.out")"
whole=$(( $(stat -c %s "$T/big/model.safetensors") * 3 / 1024 ))
for what in "checkpoint save" "checkpoint load"; do
  kib=$(cat "$T/big.out" "$T/big2.out" | grep "^$what: resident memory grew by" | sed 's/.*grew by //; s/ KiB.*//' | tr '\n' ' ')
  [ -n "$kib" ] && echo "$kib" | awk -v w=$whole '{ for (i = 1; i <= NF; i++) if ($i > 1024) exit 1 }' && pass \
    || fail "$what: resident memory grew by [$kib] KiB per rank; the whole state is $whole KiB"
  echo "$what: grew by $kib KiB per rank (whole state $whole KiB)"
done

# ---- memory and traffic per rank against their formulas (micro-batches of 1 x 32 tokens) ----
field() { echo "$1" | grep -o "\"$2\": [0-9.]*" | sed -n "${3}p" | cut -d' ' -f2; }
check_rank() { # schedule P M V L recompute rank line chunk-peaks tied-head ("nh kept": --plan-ranks's)
  awk -v s=$1 -v P=$2 -v M=$3 -v V=$4 -v L=$5 -v rc=$6 -v r=$7 -v act=$8 -v pp=$9 -v peaks="${10}" -v tied="${11}" '
    function al(x) { return int((x + 15) / 16) * 16 }
    function blocks(st) { return int(L / S) + (st < L % S) }
    function nblk(x) { return int((x + 511) / 512) }
    BEGIN {
      N = 32; C = 32; NC = N * C; T = 32; VOC = 256; NH = 2; S = P * V
      # a block keeps 13 buffers; recompute attn shares the rows log-sum-exp, full all but the output
      all13 = 5 * al(NC) + 4 * al(N) + al(3 * NC) + al(NH * T) + 2 * al(4 * NC)
      keep = rc == "full" ? al(NC) : rc == "attn" ? all13 - al(NH * T) : all13
      shared = all13 - keep
      head = al(NC) + 2 * al(N) + al(N * VOC) + al(N)
      # the attention scratch of one thread: three (T x hs) panels, q, dy, dq rows (T + 16
      # rounded to 8), the dk and dv of a key block, D, the ds rows (hs = 16 here)
      hs = C / NH; att = 3 * T * hs + 3 * (int((T + 7) / 8) * 8 + 16) * hs + 32 * hs + T + 128
      want = 3 * al(NC) + al(3 * NC) + al(4 * NC) + al(att) + shared   # backward scratch + shared layer
      split(peaks, pk, " ")
      for (c = 0; c < V; c++) {
        st = c * P + r
        if (s == "naive") n = 1; else if (s == "gpipe") n = M; else if (s == "1f1b") n = (P - r < M ? P - r : M)
        else if (s == "zb") n = (P < M ? P : M); else if (s == "zb2") n = (2 * P < M ? 2 * P : M); else n = pk[c + 1]
        set = al(NC) + blocks(st) * keep + (st == S - 1 ? head : 0)
        stash = s == "zb" || s == "zb2" ? NC * (11 * blocks(st) + (st == S - 1) + (st == 0)) : 0
        want += n * (set + stash)
      }
      # the last rank, with blocks of one micro-batch: nh awaiting their rows keep their
      # dlogits and ln_f output, or their ln_f output and one row block of logits to
      # recompute them (pipe_head); at the default (one block) it sums them as they come
      split(tied, hd, " ")
      if (r == P - 1 && hd[2] == "operands") want += hd[1] * N * (VOC + C)
      if (r == P - 1 && hd[2] == "ln_f") want += hd[1] * NC + C * VOC + C
      want *= 4
      # bytes on the pp and embed groups: activations and their gradients to the neighbours,
      # the embedding rows (first stage: the step is one block, its distinct tokens at most
      # min(V, M N), x C) and the final wte gradient (last), the norm block sums
      K = 0
      for (q = 0; q < P; q++) {
        b = 0
        for (c = 0; c < V; c++) {
          st = c * P + q; b += blocks(st) * nblk(12 * C * C + 13 * C)
          if (st == 0) b += nblk((VOC + T) * C)
          if (st == S - 1) b += nblk(2 * C)
        }
        K = b > K ? b : K
      }
      K++
      sends = 0
      for (c = 0; c < V; c++) { st = c * P + r; sends += (st < S - 1) + (st > 0) }
      rowsE = VOC < M * N ? VOC : M * N
      wantpp = 4 * NC * M * sends + (r == 0 ? 4 * rowsE * C : 0) + (r == P - 1 ? 4 * VOC * C : 0) + 8 * K * (P - 1)
      if (act != want || pp != wantpp) { printf "activations %d want %d, pp bytes %d want %d", act, want, pp, wantpp; exit }
      printf "ok"
    }'
}
small="--data $T/data --heads 2 --dim 32 --seq-len 32 --vocab 256 --eval-every 0 --threads 1 --batch-size 8
       --micro-batch-size 1"
mem="$small --layers 4 --steps 1 --log-every 0"
for cfg in "naive 2 none" "gpipe 2 none" "1f1b 2 none" "1f1b 4 none" "1f1b 4 attn" "1f1b 2 full" "zb 2 none" "zb 4 full" \
           "zb2 2 none" "zb2 4 attn" "gpipe 4 attn" "interleaved 2 none" "interleaved 2 full"; do
  read -r s P rc <<< "$cfg"
  V=1
  [ $s = interleaved ] && V=2
  $MT_BIN train $mem --pp $P --schedule $s --virtual-stages $V --recompute $rc --log-json "$T/mem.jsonl" > "$T/mem.out" 2>&1 \
    || { fail "mem $cfg: $(tail -2 "$T/mem.out")"; continue; }
  line=$(tail -1 "$T/mem.jsonl")
  plan=$($MT_BIN schedule --pp $P --microbatches 8 --schedule $s --virtual-stages $V | grep "^peak")
  head=$($MT_BIN train $mem --pp $P --schedule $s --virtual-stages $V --recompute $rc --plan-ranks \
         | sed -n 's/.*tied head: \([0-9]*\) blocks\? of 1 micro-batch.*their \(operands\|ln_f\).*/\1 \2/p')
  for ((r = 0; r < P; r++)); do
    peaks=$(echo "$plan" | { grep -o "(chunks [0-9 ]*)" || true; } | sed -n "$((r + 1))p" | tr -d '()' | sed 's/chunks //')
    verdict=$(check_rank $s $P 8 $V 4 $rc $r "$(field "$line" activations $((r + 1)))" "$(field "$line" pp $((r + 1)))" "$peaks" "$head")
    [ "$verdict" = ok ] && pass || fail "$cfg rank $r: $verdict"
  done
  echo "memory and traffic $cfg: $(grep -o '"activations": [0-9]*' "$T/mem.jsonl" | tr '\n' ' ')"
done

# ---- the measured order of compute actions equals each rank's list ----
for x in "1f1b 4 1" "interleaved 2 2" "zb 2 1" "zb2 4 1"; do
  read -r s P V <<< "$x"
  $MT_BIN train $small --layers 4 --steps 3 --log-every 0 --pp $P --schedule $s --virtual-stages $V --trace "$T/t.json" > "$T/t.out" 2>&1 \
    || fail "traced $x: $(tail -2 "$T/t.out")"
  $MT_BIN schedule --pp $P --microbatches 8 --schedule $s --virtual-stages $V --from-trace "$T/t.json" \
    --svg "$T/t.svg" > "$T/s.out" 2>&1 && [ "$(grep -c "measured order = the list's" "$T/s.out")" -eq $P ] \
    && grep -q "<svg" "$T/t.svg" && pass || fail "measured order of $x: $(cat "$T/s.out")"
done

# ---- bad layouts: exit 2, one line, before any rank starts ----
bad="--data $T/data --heads 2 --dim 32 --seq-len 32 --steps 1"
ok="$bad --layers 4 --batch-size 8"
expect_bad_input "more stages than layers" $MT_BIN train $ok --pp 5
expect_bad_input "--stage-layers not summing to the layers" $MT_BIN train $ok --pp 2 --stage-layers 1,2
expect_bad_input "--stage-layers with a middle stage of none" $MT_BIN train $ok --pp 3 --stage-layers 2,0,2
expect_bad_input "--stage-layers of another stage count" $MT_BIN train $ok --pp 2 --stage-layers 1,1,2
expect_bad_input "--stage-layers not numbers" $MT_BIN train $ok --pp 2 --stage-layers 2,x
expect_bad_input "interleaved stages not dividing the layers" $MT_BIN train $bad --batch-size 8 --layers 6 --pp 2 \
  --schedule interleaved --virtual-stages 2 --microbatches 4
expect_bad_input "interleaved with M not a multiple of pp" $MT_BIN train $bad --layers 4 --batch-size 6 --pp 2 \
  --schedule interleaved --virtual-stages 2 --microbatches 3
expect_bad_input "--virtual-stages without interleaved" $MT_BIN train $ok --pp 2 --virtual-stages 2
expect_bad_input "--microbatches contradicting the batch sizes" $MT_BIN train $ok --micro-batch-size 2 --microbatches 8
expect_bad_input "--microbatches not dividing the batch" $MT_BIN train $ok --microbatches 3
expect_bad_input "unknown recompute mode" $MT_BIN train $ok --recompute some
expect_bad_input "unknown schedule" $MT_BIN train $ok --pp 2 --schedule fastest
expect_bad_input "pipeline with ZeRO" $MT_BIN train $ok --pp 2 --zero 1

# ---- a killed middle stage ends the job, naming the stage it waited on ----
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
timeout 60 $MT_BIN train $small --steps 100000 --pp 3 --layers 3 --comm-timeout 5 --log-every 1 > "$T/k.out" 2> "$T/k.err" &
job=$!
victim=""
for _ in $(seq 1 100); do
  for p in $(pgrep -f "meshtrain train --data $T/data" || true); do
    [ "$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -c '^OMPI_COMM_WORLD_RANK=1$')" = 1 ] && victim=$p
  done
  [ -n "$victim" ] && grep -q "step" "$T/k.out" 2>/dev/null && break
  sleep 0.1
done
sleep 0.5
t0=$(date +%s)
[ -n "$victim" ] && kill -9 "$victim"
rc=0
wait $job || rc=$?
secs=$(( $(date +%s) - t0 ))
[ -n "$victim" ] && [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$secs" -lt 30 ] && pass \
  || fail "killed middle stage: exit $rc after $secs s (victim '$victim')"
grep -qE "from pp rank 1|to pp rank 1|process rank 1" "$T/k.err" && pass \
  || fail "killed middle stage not named: $(head -c 400 "$T/k.err")"
echo "killed stage 1 ($secs s): $(grep -m2 -E "pp rank 1|process rank 1" "$T/k.err" | tr '\n' ' ')"
finish
