#!/usr/bin/env bash
# The equivalence matrix script (scripts/equivalence.sh --quick, the suite's subset: dp x tp
# with sequence parallelism, FSDP x tp with recomputation, hybrid-sharded ZeRO-2, dp x pp
# zb with full recomputation, tp x pp) reports each layout against one rank and exits 0;
# with tensor parallelism's blocks summed left to right in the layouts (its test hook) it
# reports the difference and exits 1.
source "$(dirname "$0")/lib.sh"
export MT_DIFF=${MT_BUILD:-build}/prog_stdiff
rc=0
bash scripts/equivalence.sh --quick > "$T/eq.out" 2>&1 || rc=$?
cat "$T/eq.out"
[ $rc -eq 0 ] && pass || fail "the matrix subset exited $rc"
[ "$(grep -c ' bit-identical (' "$T/eq.out")" -eq 4 ] && pass || fail "want 4 bit-identical layouts"
grep -q -- "--tp 2 --pp 2 .*refused: .*not built yet" "$T/eq.out" && pass || fail "tp x pp is not reported refused"
grep -q "5 layouts: 4 bit-identical, 0 different, 1 refused" "$T/eq.out" && pass || fail "no summary line"
rc=0
MT_EQ_MUTATE=1 bash scripts/equivalence.sh --quick > "$T/mut.out" 2>&1 || rc=$?
[ $rc -eq 1 ] && grep -q -- "--dp 2 --tp 2 --sequence-parallel .*DIFFERS: max relative" "$T/mut.out" && pass \
  || fail "blocks summed left to right: exit $rc: $(cat "$T/mut.out")"
finish
