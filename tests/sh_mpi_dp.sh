#!/usr/bin/env bash
# Data parallelism reproduces one device: --dp 2 and --dp 4 (each rank a contiguous run of
# micro-batches summed left to right, the default --accum-blocks dp; fixed-order all-reduce)
# give the loss sequence and final weights of one rank with --accum-blocks 2 and 4 bit for bit; MPI's own reductions (--fast-comm) agree within fp32 rounding; the
# JSON log carries mem and comm per rank, comm equal to the all-reduce formula; --trace
# writes one row per rank.
source "$(dirname "$0")/lib.sh"
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
run="--data $T/data --layers 2 --heads 2 --dim 32 --seq-len 32 --batch-size 8 --micro-batch-size 2
     --steps 6 --warmup 2 --lr 3e-3 --eval-every 0 --log-every 0 --seed 5 --check-collectives"
$MT_BIN train $run --accum-blocks 2 --log-json "$T/1.jsonl" --save "$T/c1" > "$T/out1" 2>&1 || fail "dp 1: $(tail -3 "$T/out1")"
$MT_BIN train $run --accum-blocks 4 --log-json "$T/1k4.jsonl" --save "$T/c1k4" > "$T/out1k4" 2>&1 \
  || fail "dp 1, K 4: $(tail -3 "$T/out1k4")"
$MT_BIN train $run --dp 2 --log-json "$T/2.jsonl" --save "$T/c2" --trace "$T/trace.json" > "$T/out2" 2>&1 \
  || fail "dp 2: $(tail -3 "$T/out2")"
$MT_BIN train $run --dp 4 --log-json "$T/4.jsonl" --save "$T/c4" > "$T/out4" 2>&1 || fail "dp 4: $(tail -3 "$T/out4")"
$MT_BIN train $run --dp 2 --fast-comm --log-json "$T/f.jsonl" > "$T/outf" 2>&1 || fail "dp 2 fast: $(tail -3 "$T/outf")"
[ "$(losses "$T/1.jsonl" | wc -l)" -eq 6 ] && pass || fail "dp 1 logged $(losses "$T/1.jsonl" | wc -l) steps"
cmp -s <(losses "$T/1.jsonl") <(losses "$T/2.jsonl") && pass || fail "dp 2 losses differ from dp 1"
cmp -s <(losses "$T/1k4.jsonl") <(losses "$T/4.jsonl") && pass || fail "dp 4 losses differ from dp 1"
cmp -s "$T/c1/model.safetensors" "$T/c2/model.safetensors" && pass || fail "dp 2 final weights differ"
cmp -s "$T/c1k4/model.safetensors" "$T/c4/model.safetensors" && pass || fail "dp 4 final weights differ"
paste <(losses "$T/1.jsonl") <(losses "$T/f.jsonl") | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) bad++ }
  END { exit bad > 0 }' && pass || fail "--fast-comm losses not within 1e-5: $(paste <(losses "$T/1.jsonl") <(losses "$T/f.jsonl") | tr '\n' ' ')"
# per-rank entries; dp bytes = gradient all-reduce 2(N-1)/N * params bytes + the loss (4 bytes x 2(N-1)/N)
line=$(tail -1 "$T/2.jsonl")
[ "$(echo "$line" | grep -o '"dp": [0-9]*' | wc -l)" -eq 2 ] && [ "$(echo "$line" | grep -o '"peak": [0-9]*' | wc -l)" -eq 2 ] \
  && pass || fail "want mem and comm for 2 ranks: $line"
params=$(echo "$line" | grep -o '"params": [0-9]*' | head -1 | cut -d' ' -f2)
dp=$(echo "$line" | grep -o '"dp": [0-9]*' | head -1 | cut -d' ' -f2)
[ "$dp" -eq $(( params + 4 )) ] && pass || fail "dp bytes $dp, formula $(( params + 4 )) (params $params)"
line4=$(tail -1 "$T/4.jsonl")
dp4=$(echo "$line4" | grep -o '"dp": [0-9]*' | tail -1 | cut -d' ' -f2)
params4=$(echo "$line4" | grep -o '"params": [0-9]*' | head -1 | cut -d' ' -f2) # units padded for 4 ranks
[ "$dp4" -eq $(( 2 * 3 * params4 / 4 + 2 * 3 * 4 / 4 )) ] && pass || fail "dp 4 bytes $dp4 (params $params4)"
grep -q '"name": "rank 1"' "$T/trace.json" && grep -q '"name": "allreduce"' "$T/trace.json" && pass \
  || fail "trace lacks rank 1 or its all-reduces"
grep -q "communication, bytes sent" "$T/out2" && pass || fail "no end-of-run summary: $(tail -5 "$T/out2")"
expect_bad_input "micro-batches not splitting over dp" $MT_BIN train $run --dp 3
expect_bad_input "ZeRO over dp with more tp blocks than tp ranks (issue 10)" $MT_BIN train $run --tp 2 --dp 2 --zero 2 --tp-blocks 4
finish
