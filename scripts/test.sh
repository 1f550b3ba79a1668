#!/usr/bin/env bash
# The whole test suite: set-up (as bootstrap.sh), then every test through ctest.
# Extra arguments go to ctest (e.g. -L unit, -R golden).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
cd build
ctest --output-on-failure --timeout 900 "$@"
