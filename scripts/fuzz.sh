#!/usr/bin/env bash
# Runs every libFuzzer target for N seconds (default 60) on its corpus, with AddressSanitizer
# and UndefinedBehaviorSanitizer: builds build-fuzz/ with clang (-DMT_FUZZ=ON -DMT_SANITIZE=ON),
# then fuzz/corpus/<target>/ is both the seed set and where new inputs go (merge them into git
# when they add coverage; a crash's input goes to fuzz/crashes/ and, once fixed, into the
# corpus, which the suite replays).  Usage: bash scripts/fuzz.sh [seconds] [target...]
# MT_FUZZ_RUNS=N stops each target after N inputs instead (with the time as a ceiling), and
# MT_FUZZ_SANITIZE=0 builds build-fuzz-fast/ without the sanitizers, for long runs (the
# checks that abort on a wrong answer still run): MT_FUZZ_RUNS=10000000 MT_FUZZ_SANITIZE=0
# bash scripts/fuzz.sh 3600 bpe is the ten million round trips of issue 27.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(json safetensors tokens checkpoint tiktoken bpe hfjson merges bpe_train)
bash scripts/install_packages.sh clang libomp-dev # libFuzzer and its OpenMP runtime, from Debian
bdir=build-fuzz san=ON
[ "${MT_FUZZ_SANITIZE:-1}" = 0 ] && bdir=build-fuzz-fast san=OFF
CC=clang cmake -S . -B $bdir -DMT_FUZZ=ON -DMT_SANITIZE=$san -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build $bdir -j"$(nproc)" --target "${targets[@]/#/fuzz_}" >/dev/null
mkdir -p fuzz/crashes
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp OMP_NUM_THREADS=1
status=0
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t"
  echo "fuzz: $t for $secs s"
  # -max_len: the largest seed (a one-layer checkpoint) and some room
  $bdir/fuzz_$t -max_total_time="$secs" ${MT_FUZZ_RUNS:+-runs=$MT_FUZZ_RUNS} -max_len=65536 -artifact_prefix=fuzz/crashes/$t- \
    -print_final_stats=1 "fuzz/corpus/$t" 2>&1 | grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY)' \
    || true
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
ls fuzz/crashes/ 2>/dev/null | grep -q . && { echo "fuzz: crashes in fuzz/crashes/" >&2; status=1; }
exit $status
