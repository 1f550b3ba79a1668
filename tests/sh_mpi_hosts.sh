#!/usr/bin/env bash
# Many hosts on one machine (issue 29, scripts/hosts.sh): two network namespaces joined by a
# switch, mpirun started inside the first with an rsh agent, Open MPI over TCP:
#  - the ranks run on the two hosts (192.0.2.1 and 192.0.2.2, round robin);
#  - dp 2, pp 2 (zb2) and dp 2 x pp 2 across them train bit for bit as one rank does
#    (losses, weights, moments), the same bytes as the layouts on one host;
#  - a cut link, a far rank killed (kill -9) or stopped (SIGSTOP): every process of the job
#    on both hosts gone within --comm-timeout + 15 s, mpirun's status non-zero; a 3 s pause
#    under a 20 s timeout, or a link throttled to 4 Mbit/s: the job finishes, bit for bit the
#    uninterrupted run;
#  - elastic: dp 4 over both hosts (--accum-blocks 4, --max-restarts --min-ranks 2) loses
#    host 2 (its link cut at a random moment) and goes on by itself as dp 2 on host 1, ending
#    byte-identical to the uninterrupted dp 4 run and to one rank; --min-ranks 4 gives up;
#  - hosts.sh down leaves no namespace behind.
# Skipped (exit 77, said) where namespaces cannot be made (not root, no iproute2).
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export MT_HOSTS_PREFIX=mtt$$ MT_HOSTS_SLOTS=2
H="$(dirname "$0")/../scripts/hosts.sh"
rc=0
bash "$H" up 2 "$T/h" > "$T/up.out" 2>&1 || rc=$?
if [ $rc -ne 0 ]; then
  echo "sh_mpi_hosts: skipped: $(tail -1 "$T/up.out")"
  bash "$H" down "$T/h" > /dev/null 2>&1 || true
  [ $rc -eq 77 ] && exit 77
  fail "hosts.sh up 2: exit $rc: $(tail -2 "$T/up.out")"
  finish
fi
trap 'bash "$H" down "$T/h" > /dev/null 2>&1 || true; rm -rf "$T"' EXIT
MPI="$T/h/mpirun --map-by node"
where=$($MPI -np 2 sh -c 'echo "$OMPI_COMM_WORLD_RANK $(ip -4 -o addr show dev eth0 | awk "{print \$4}")"' 2>&1 | sort)
[ "$where" = "$(printf '0 192.0.2.1/24\n1 192.0.2.2/24')" ] && pass || fail "the ranks' hosts: $where"
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
m="--data $T/data --layers 4 --heads 2 --dim 32 --seq-len 16 --batch-size 8 --steps 6 --warmup 2 --log-every 0
   --eval-every 0 --threads 1"
train one $m --micro-batch-size 2 --accum-blocks 2
train onepp $m --micro-batch-size 1
train local $m --micro-batch-size 2 --dp 2
for layout in "dp:2:--micro-batch-size 2 --dp 2:one" "pp:2:--micro-batch-size 1 --pp 2 --schedule zb2:onepp" \
              "dpp:4:--micro-batch-size 1 --dp 2 --pp 2 --accum-blocks 2:onek"; do
  IFS=: read -r name np flags ref <<< "$layout"
  [ $ref = onek ] && train onek $m --micro-batch-size 1 --accum-blocks 2
  # shellcheck disable=SC2086
  timeout 300 $MPI -np $np $MT_BIN train $m $flags --log-json "$T/$name.jsonl" --save "$T/$name" > "$T/$name.out" 2>&1 \
    || fail "$name across two hosts: exit $?: $(tail -3 "$T/$name.out")"
  same_run "$name across two hosts" "$T/$ref" "$T/$name"
done
cmp -s "$T/dp/model.safetensors" "$T/local/model.safetensors" && pass || fail "dp 2 across hosts differs from one host"

# ---- failures across the hosts: the whole job gone within --comm-timeout (5 s) + 15 s ----
long="--data $T/data --layers 2 --heads 2 --dim 64 --seq-len 32 --batch-size 8 --micro-batch-size 4 --warmup 2
      --log-every 0 --eval-every 0 --threads 1"
far_rank() { # the training process on host 2
  for p in $(ip netns pids "$MT_HOSTS_PREFIX-2"); do
    [ "$(cat /proc/$p/comm 2>/dev/null)" = meshtrain ] && echo $p
  done | head -1
}
gone() { ! ip netns pids "$MT_HOSTS_PREFIX-1" | grep -q . && ! ip netns pids "$MT_HOSTS_PREFIX-2" | grep -q .; }
for what in cut kill stop; do
  # shellcheck disable=SC2086
  $MPI -np 2 $MT_BIN train $long --dp 2 --comm-timeout 5 --steps 100000 > "$T/$what.out" 2>&1 &
  job=$!
  for i in $(seq 1 100); do [ -n "$(far_rank)" ] && grep -q "memory:" "$T/$what.out" && break; sleep 0.1; done
  sleep 1
  t0=$(date +%s.%N)
  case $what in
    cut) bash "$H" cut 2 ;;
    kill) kill -9 "$(far_rank)" ;;
    stop) kill -STOP "$(far_rank)" ;;
  esac
  for i in $(seq 1 250); do gone && break; sleep 0.1; done
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  rc=0
  wait $job || rc=$?
  gone && [ $rc -ne 0 ] && awk -v s="$secs" 'BEGIN { exit !(s < 20) }' && pass \
    || fail "$what on host 2: exit $rc after $secs s, left: $(ip netns pids "$MT_HOSTS_PREFIX-1") $(ip netns pids "$MT_HOSTS_PREFIX-2")"
  echo "$what on host 2: every process of the job gone after $secs s, mpirun exit $rc"
  [ $what = cut ] && bash "$H" heal 2
  for p in $(ip netns pids "$MT_HOSTS_PREFIX-1") $(ip netns pids "$MT_HOSTS_PREFIX-2"); do kill -9 "$p" 2>/dev/null || true; done
done
# a pause shorter than the timeout (a 3 s SIGSTOP under a 20 s one) does not end the job,
# and the run is the uninterrupted one
train long1 $long --accum-blocks 2 --steps 400
# shellcheck disable=SC2086
$MPI -np 2 $MT_BIN train $long --dp 2 --comm-timeout 20 --steps 400 --log-json "$T/paused.jsonl" \
  --save "$T/paused" > "$T/paused.out" 2>&1 &
job=$!
for i in $(seq 1 100); do [ -n "$(far_rank)" ] && grep -q "memory:" "$T/paused.out" && break; sleep 0.1; done
sleep 1
p=$(far_rank)
kill -STOP "$p"; sleep 3; kill -CONT "$p"
rc=0
wait $job || rc=$?
[ $rc -eq 0 ] && pass || fail "a 3 s pause ended the job: exit $rc: $(tail -3 "$T/paused.out")"
same_run "paused 3 s on host 2" "$T/long1" "$T/paused"
# a link throttled to 4 Mbit/s (tc) slows the job and does not end it: the same bits
if command -v tc > /dev/null && bash "$H" throttle 2 4mbit 2> /dev/null; then
  # shellcheck disable=SC2086
  timeout 300 $MPI -np 2 $MT_BIN train $m --micro-batch-size 2 --dp 2 --comm-timeout 20 \
    --log-json "$T/slow.jsonl" --save "$T/slow" > "$T/slow.out" 2>&1 || fail "a throttled link: $(tail -2 "$T/slow.out")"
  bash "$H" throttle 2 off
  train local4 $m --micro-batch-size 2 --dp 2
  same_run "dp 2 over a 4 Mbit/s link" "$T/local4" "$T/slow"
else
  echo "sh_mpi_hosts: no tc here: the throttled link is not checked"
fi

# ---- elastic: dp 4 over the two hosts loses host 2 and goes on as dp 2 on host 1 ----
el="${long/--micro-batch-size 4/--micro-batch-size 2} --accum-blocks 4 --steps 600"
train elone $el
train eldp4 $el --dp 4
# shellcheck disable=SC2086
MT_MPIRUN="$T/h/mpirun" MT_HOST_PROBE="$T/h/probe" $MT_BIN train $el --dp 4 --hostfile "$T/h/hostfile" \
  --comm-timeout 5 --save "$T/el" --keep-checkpoints 2 --save-every 50 --max-restarts 2 --min-ranks 2 \
  --log-json "$T/el.jsonl" > "$T/el.out" 2>&1 &
job=$!
for i in $(seq 1 600); do [ -d "$T/el/step-00000050" ] && break; sleep 0.05; done # after a save, at random
sleep "$((RANDOM % 2)).$((RANDOM % 10))"
bash "$H" cut 2
rc=0
wait $job || rc=$?
[ $rc -eq 0 ] && grep -q "192.0.2.2 does not answer: on 2 ranks from here (--dp 2, was 4)" "$T/el.out" \
  && grep -q "restart 1 of 2: .*resuming from $T/el/step-" "$T/el.out" && pass || fail "elastic: exit $rc: $(grep -v '^step' "$T/el.out" | tail -4)"
for ref in eldp4 elone; do
  cmp -s "$T/$ref/model.safetensors" "$T/el/step-00000600/model.safetensors" \
    && cmp -s "$T/$ref/optimizer.safetensors" "$T/el/step-00000600/optimizer.safetensors" \
    && cmp -s <(losses "$T/$ref.jsonl") <(losses "$T/el.jsonl") && pass \
    || fail "elastic dp 4 -> dp 2 differs from $ref"
done
echo "elastic: $(grep -E "does not answer|restart 1" "$T/el.out" | tr '\n' ' ')"
bash "$H" heal 2
# too few ranks left: gives up, saying so
MT_MPIRUN="$T/h/mpirun" MT_HOST_PROBE="$T/h/probe" $MT_BIN train $el --dp 4 --hostfile "$T/h/hostfile" \
  --comm-timeout 5 --save "$T/el4" --save-every 50 --max-restarts 2 --min-ranks 4 > "$T/el4.out" 2>&1 &
job=$!
for i in $(seq 1 200); do grep -q "memory:" "$T/el4.out" && break; sleep 0.05; done
sleep 1
bash "$H" cut 2
rc=0
wait $job || rc=$?
[ $rc -ne 0 ] && grep -q "2 ranks answer (192.0.2.2 do not), fewer than --min-ranks 4: giving up" "$T/el4.out" && pass \
  || fail "min-ranks 4: exit $rc: $(grep -v '^step' "$T/el4.out" | tail -2)"
bash "$H" heal 2
expect_bad_input "--min-ranks without --hostfile" $MT_BIN train $el --save "$T/x" --max-restarts 1 --min-ranks 2

bash "$H" down "$T/h"
[ -z "$(ip netns list | grep "^$MT_HOSTS_PREFIX-" || true)" ] && pass || fail "namespaces left: $(ip netns list)"
finish
