#!/usr/bin/env bash
# Same seed -> the same loss sequence and final weights, bit for bit: run to run, with 1 or
# 2 threads, and 20 steps straight = 10 steps, save, resume, 10 steps.
source "$(dirname "$0")/lib.sh"
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
model="--layers 2 --heads 2 --dim 32 --context 32"
run="--data $T/data --seq-len 32 --batch-size 8 --micro-batch-size 2 --steps 20 --warmup 5 --lr 3e-3
     --eval-every 0 --log-every 0 --seed 11"
$MT_BIN train $model $run --threads 1 --log-json "$T/a.jsonl" --save "$T/a" >/dev/null
$MT_BIN train $model $run --threads 2 --log-json "$T/b.jsonl" --save "$T/b" >/dev/null
$MT_BIN train $model $run --threads 2 --log-json "$T/c.jsonl" --save "$T/c" >/dev/null
$MT_BIN train $model $run --threads 2 --exit-interval 10 --log-json "$T/d.jsonl" --save "$T/d" >/dev/null
$MT_BIN train $run --threads 1 --resume "$T/d" --log-json "$T/e.jsonl" --save "$T/e" >/dev/null

losses() { grep -o '"loss": [^,]*' "$1"; }
[ "$(losses "$T/a.jsonl" | wc -l)" -eq 20 ] && pass || fail "run a did not log 20 steps"
[ "$(losses "$T/d.jsonl" | wc -l)" -eq 10 ] && pass || fail "--exit-interval 10 did not stop at step 10"
first=$(losses "$T/a.jsonl" | head -1 | cut -d' ' -f2); last=$(losses "$T/a.jsonl" | tail -1 | cut -d' ' -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' && pass || fail "loss did not fall: $first -> $last"
cmp -s <(losses "$T/a.jsonl") <(losses "$T/c.jsonl") && pass || fail "1 thread vs 2 threads: losses differ"
cmp -s <(losses "$T/b.jsonl") <(losses "$T/c.jsonl") && pass || fail "run to run: losses differ"
cmp -s "$T/a/model.safetensors" "$T/b/model.safetensors" && pass || fail "1 vs 2 threads: final weights differ"
cmp -s "$T/b/model.safetensors" "$T/c/model.safetensors" && pass || fail "run to run: final weights differ"
cmp -s <(losses "$T/a.jsonl" | head -10) <(losses "$T/d.jsonl") && pass || fail "first 10 steps differ"
cmp -s <(losses "$T/a.jsonl" | tail -10) <(losses "$T/e.jsonl") && pass || fail "resumed steps 11-20 differ"
cmp -s "$T/a/model.safetensors" "$T/e/model.safetensors" && pass || fail "resumed final weights differ"
cmp -s "$T/a/optimizer.safetensors" "$T/e/optimizer.safetensors" && pass || fail "resumed optimizer state differs"
grep -q '"step": 20' "$T/e/trainer_state.json" && pass || fail "resumed checkpoint is not at step 20"
finish
