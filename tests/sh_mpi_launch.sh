#!/usr/bin/env bash
# Started by hand, a multi-rank command re-executes itself under mpirun with the right
# number of ranks; the communication benchmark then prints its table from rank 0.
source "$(dirname "$0")/lib.sh"
$MT_BIN bench-comm --ranks 2 --min-kib 64 --max-mib 1 --reps 1 > "$T/out" 2> "$T/err" && pass \
  || fail "bench-comm --ranks 2 failed: $(head -c 400 "$T/err")"
grep -q "2 ranks" "$T/out" && pass || fail "not 2 ranks: $(head -3 "$T/out")"
[ "$(grep -c '^| .* | \(allreduce\|reduce_scatter\|allgather\) |' "$T/out")" -eq 9 ] && pass \
  || fail "want 9 rows (3 sizes x 3 operations): $(cat "$T/out")"
expect_bad_input "bench-comm with 0 ranks" $MT_BIN bench-comm --ranks 0
finish
