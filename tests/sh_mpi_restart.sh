#!/usr/bin/env bash
# --max-restarts (issue 29, src/cli/restart.c): the process started by hand supervises the job
# and starts it again from the newest intact save when it fails:
#  - dp 2 (and one rank) with a rank killed (kill -9) at a random moment: one line naming the
#    restart, its cause and the save; the run finishes by itself, its final checkpoint and
#    every logged loss byte-identical to the uninterrupted run's (the log keeps each step once);
#  - --max-restarts 1 and two kills: gives up, saying so, with a non-zero status;
#  - refused: without --save, negative.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
m="--data $T/data --layers 2 --heads 2 --dim 64 --seq-len 32 --batch-size 8 --micro-batch-size 4 --warmup 2
   --log-every 0 --eval-every 0 --threads 1 --steps 1500"
victim() { pgrep -f "meshtrain train.*--save $1( |$)" | tail -1; } # the newest process of the job: a rank
started() { for i in $(seq 1 200); do grep -q "saved checkpoint\|memory:" "$1" 2>/dev/null && return; sleep 0.05; done; }
for layout in "dp:--dp 2" "one:"; do
  name=${layout%%:*} flags=${layout#*:}
  # shellcheck disable=SC2086
  train ref$name $m $flags
  # shellcheck disable=SC2086
  $MT_BIN train $m $flags --save "$T/$name" --keep-checkpoints 2 --save-every 50 --max-restarts 3 \
    --log-json "$T/$name.jsonl" > "$T/$name.out" 2>&1 &
  job=$!
  started "$T/$name.out"
  sleep "0.$((RANDOM % 9 + 1))"
  kill -9 "$(victim "$T/$name")"
  rc=0
  wait $job || rc=$?
  [ $rc -eq 0 ] && grep -q "restart 1 of 3: the job ended (.*); resuming from $T/$name/step-" "$T/$name.out" && pass \
    || fail "$name: exit $rc: $(grep -v '^step' "$T/$name.out" | tail -3)"
  cmp -s "$T/ref$name/model.safetensors" "$T/$name/step-00001500/model.safetensors" \
    && cmp -s "$T/ref$name/optimizer.safetensors" "$T/$name/step-00001500/optimizer.safetensors" \
    && cmp -s <(losses "$T/ref$name.jsonl") <(losses "$T/$name.jsonl") && pass \
    || fail "$name: the restarted run differs from the uninterrupted one ($(losses "$T/$name.jsonl" | wc -l) losses)"
  echo "$name: $(grep "restart 1" "$T/$name.out")"
done
# out of restarts
$MT_BIN train $m --dp 2 --save "$T/twice" --save-every 50 --max-restarts 1 > "$T/twice.out" 2>&1 &
job=$!
started "$T/twice.out"
sleep 0.3
kill -9 "$(victim "$T/twice")"
for i in $(seq 1 200); do grep -q "restart 1 of 1" "$T/twice.out" && break; sleep 0.05; done
sleep 1
kill -9 "$(victim "$T/twice")"
rc=0
wait $job || rc=$?
[ $rc -ne 0 ] && grep -q "after 1 restart: giving up (--max-restarts 1)" "$T/twice.out" && pass \
  || fail "out of restarts: exit $rc: $(grep -v '^step' "$T/twice.out" | tail -2)"
expect_bad_input "--max-restarts without --save" $MT_BIN train $m --max-restarts 2
expect_bad_input "--max-restarts -1" $MT_BIN train $m --save "$T/x" --max-restarts -1
finish
