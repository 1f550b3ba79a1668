#!/usr/bin/env bash
# soak.sh: a long run that keeps losing ranks, and still ends with the bits of one that did not
# (issue 29, docs/failures.md).
#
#   bash scripts/soak.sh [STEPS] [SEED]     (defaults 1000 and 1)
#
# A small model at dp 2 x pp 2 (4 ranks on this machine) trains STEPS steps with
# --save-every 25 --keep-checkpoints 2 --max-restarts 20, while a rank is killed with kill -9
# every 60-120 steps (at random, from SEED).  Then the same run without kills, and the final
# checkpoints compared with cmp.  Prints one row per restart (the step killed at, the step
# resumed from, the steps lost, the wall time from the kill until the run was back at the
# step it lost) and the totals.  Exit status 0 when the two final checkpoints are identical.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-1000}
SEED=${2:-1}
RANDOM=$SEED
MT=${MT_BIN:-build/meshtrain}
W=$(mktemp -d)
trap 'pkill -9 -f "meshtrain train.*$W" 2>/dev/null || true; rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
python3 tests/textgen.py english 750000 "$W/text.txt"
"$MT" prepare --input "$W/text.txt" --out "$W/data" > /dev/null
m=(--data "$W/data" --layers 4 --heads 4 --dim 64 --seq-len 64 --batch-size 8 --micro-batch-size 2 --warmup 20
   --lr 1e-3 --log-every 0 --eval-every 0 --threads 1 --dp 2 --pp 2 --steps "$STEPS")
now() { date +%s.%N; }
step_of_log() { tail -1 "$1" 2> /dev/null | grep -o '"step": [0-9]*' | cut -d' ' -f2 || true; }

t0=$(now)
"$MT" train "${m[@]}" --save "$W/run" --keep-checkpoints 2 --save-every 25 --max-restarts 20 \
  --log-json "$W/run.jsonl" > "$W/run.out" 2>&1 &
job=$!
next=$((60 + RANDOM % 61))
kills=()
while kill -0 $job 2> /dev/null; do
  s=$(step_of_log "$W/run.jsonl")
  if [ -n "$s" ] && [ "$s" -ge "$next" ] && [ "$s" -lt "$STEPS" ]; then
    ranks=($(pgrep -f "meshtrain train.*--save $W/run " | grep -v "^$job\$" || true))
    # the ranks: the processes whose parent is mpirun (not the supervisor, not mpirun itself)
    victims=()
    for p in "${ranks[@]}"; do
      pp=$(ps -o ppid= -p "$p" 2> /dev/null | tr -d ' ')
      [ -n "$pp" ] && [ "$(cat /proc/"$pp"/comm 2> /dev/null)" = mpirun ] && victims+=("$p")
    done
    if [ ${#victims[@]} -gt 0 ]; then
      v=${victims[$((RANDOM % ${#victims[@]}))]}
      kill -9 "$v" 2> /dev/null && kills+=("$s $(now)")
      next=$((s + 60 + RANDOM % 61))
    fi
  fi
  sleep 0.05
done
wait $job || { echo "soak: the run failed: $(tail -3 "$W/run.out")"; exit 1; }
wall=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')

t1=$(now)
"$MT" train "${m[@]}" --save "$W/ref" > "$W/ref.out" 2>&1
ref_wall=$(awk -v a="$t1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')

final=$(printf '%s/run/step-%08d' "$W" "$STEPS")
same=no
cmp -s "$final/model.safetensors" "$W/ref/model.safetensors" && cmp -s "$final/optimizer.safetensors" \
  "$W/ref/optimizer.safetensors" && same=yes

echo "soak: $STEPS steps of dp 2 x pp 2, --save-every 25, a rank killed every 60-120 steps (seed $SEED)"
echo
echo "| restart | killed at step | resumed from | steps lost | cause |"
echo "|---:|---:|---:|---:|---|"
i=0
grep "restart [0-9]* of" "$W/run.out" | while IFS= read -r line; do
  i=$((i + 1))
  from=$(echo "$line" | sed -n 's/.*(step \([0-9]*\))$/\1/p')
  cause=$(echo "$line" | sed -n 's/.*the job ended (\(.*\)); .*/\1/p')
  at=$(echo "${kills[$((i - 1))]:-? ?}" | cut -d' ' -f1)
  lost=$([ "$at" != "?" ] && [ -n "$from" ] && echo $((at - from)) || echo "?")
  echo "| $i | $at | ${from:-start} | $lost | $cause |"
done
n=$(grep -c "restart [0-9]* of" "$W/run.out" || true)
echo
echo "kills: ${#kills[@]}, restarts: $n; wall time $wall s against $ref_wall s uninterrupted ($(awk -v a="$wall" \
  -v b="$ref_wall" -v n="$n" 'BEGIN { printf "%.1f s", n ? (a - b) / n : 0 }') lost per restart)"
echo "final checkpoint byte-identical to the uninterrupted run's: $same"
[ $same = yes ]
