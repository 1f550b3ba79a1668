#!/usr/bin/env bash
# The sanitizer suite: builds build-sanitize/ with -DMT_SANITIZE=ON (AddressSanitizer and
# UndefinedBehaviorSanitizer, leak detection on) and runs the tests labelled "sanitize":
# every C test that needs no MPI and a short single-rank train / resume / eval / sample
# (tests/san_cli.sh).  Extra arguments go to ctest.  CI runs it after the main suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh >/dev/null   # the packages; the normal build is not needed here
cmake -S . -B build-sanitize -DMT_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-sanitize -j"$(nproc)" >/dev/null
cd build-sanitize
ctest --output-on-failure --timeout 900 -L sanitize "$@"
