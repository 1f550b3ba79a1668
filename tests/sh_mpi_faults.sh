#!/usr/bin/env bash
# Failures never leave ranks hanging: a collective mismatch stops the job at once with both
# signatures; a killed rank and a stalled rank make the others exit non-zero within the
# bound, naming the operation they waited on; the trace of a run is JSON with one row per rank.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
prog=${MT_BUILD:-build}/prog_mpi_faults
run() { # ranks, scenario, timeout: runs with a 60 s outer bound, records status and time
  local np=$1; shift
  local t0=$(date +%s%N)
  rc=0
  timeout 60 ${MT_MPIEXEC:-mpiexec} --oversubscribe --mca btl_vader_single_copy_mechanism none -n "$np" \
    "$prog" "$@" >"$T/out" 2>"$T/err" || rc=$?
  secs=$(( ($(date +%s%N) - t0) / 1000000000 ))
}
run 2 mismatch 30
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && pass || fail "mismatch: exit status $rc"
grep -q "collective mismatch" "$T/err" && grep -q "allreduce(n=1024" "$T/err" && grep -q "allgather(n=512" "$T/err" \
  && pass || fail "mismatch message lacks both signatures: $(head -c 400 "$T/err")"
echo "mismatch ($secs s): $(grep -m1 "collective mismatch" "$T/err")"

run 3 kill 10
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && pass || fail "kill: exit status $rc"
awk -v s="$secs" 'BEGIN { exit !(s < 30) }' && pass || fail "kill: others took $secs s to stop"
grep -qE "rank 1|waiting in allreduce" "$T/err" && pass || fail "kill: no message naming the rank or operation: $(head -c 400 "$T/err")"
echo "kill ($secs s): $(grep -m2 -E "rank 1|waiting in" "$T/err" | tr '\n' ' ')"

run 2 stall 2
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && pass || fail "stall: exit status $rc"
awk -v s="$secs" 'BEGIN { exit !(s < 30) }' && pass || fail "stall: took $secs s to stop"
grep -q "waiting in allreduce" "$T/err" && grep -q "no progress" "$T/err" && pass \
  || fail "stall: no watchdog message: $(head -c 400 "$T/err")"
echo "stall ($secs s): $(grep -m1 "no progress" "$T/err")"

# Ctrl-C: SIGINT to the launcher stops every rank (mpirun ends them; what they print on the
# way out may be lost with mpirun's output forwarding, so only the stopping is checked)
timeout 60 ${MT_MPIEXEC:-mpiexec} --oversubscribe --mca btl_vader_single_copy_mechanism none -n 2 \
  "$prog" stall 600 >"$T/out" 2>"$T/err" &
pid=$!
sleep 2
t0=$(date +%s%N)
kill -INT $pid
rc=0
wait $pid || rc=$?
secs=$(( ($(date +%s%N) - t0) / 1000000000 ))
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && pass || fail "Ctrl-C: exit status $rc"
[ "$secs" -lt 20 ] && pass || fail "Ctrl-C: took $secs s"
sleep 1
pgrep -f "prog_mpi_faults stall" >/dev/null && fail "Ctrl-C left ranks running" || pass
echo "ctrl-c ($secs s): all ranks stopped; stderr: $(head -c 200 "$T/err")"

# a world that does not match the layout: refused with one line, printed once, exit 2
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
rc=0
timeout 60 ${MT_MPIEXEC:-mpiexec} --oversubscribe -n 2 $MT_BIN train --data "$T/data" --layers 2 --heads 2 \
  --dim 32 --seq-len 32 --batch-size 8 --micro-batch-size 2 --dp 4 >"$T/out" 2>"$T/err" || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && pass || fail "world mismatch: exit status $rc"
[ "$(grep -c "but the world has 2" "$T/err")" -eq 1 ] && pass || fail "world mismatch: want the message once: $(head -c 400 "$T/err")"
echo "world mismatch: $(grep -m1 "world has" "$T/err")"

run 3 trace 60 "$T/trace.json"
[ "$rc" -eq 0 ] && grep -q "trace ok: 3 rows" "$T/out" && pass || fail "trace: $(cat "$T/err" "$T/out" | head -c 400)"
finish
