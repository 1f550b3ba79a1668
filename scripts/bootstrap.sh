#!/usr/bin/env bash
# Installs what meshtrain needs on Debian 12 (as root, or with sudo), then configures and
# builds it in build/.  Idempotent: when everything is there it only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

# cmake/gcc: the build; libblis-dev: the BLAS (thread-count-invariant results);
# libopenblas-dev: the alternative backend and the benchmark's reference; openmpi: the
# multi-rank layer (Open MPI's launcher refuses to start without an ssh client, even for
# local ranks: openssh-client); libssl-dev: OpenSSL's SHA-256, for checkpoint manifests; iproute2: scripts/hosts.sh's namespaces; unicode-data: the Unicode Character Database the
# tokenizer's character classes are generated from; procps: pgrep for the tests; fortunes: the English corpus of the main job (a real text that a
# Debian package ships, so nothing is fetched at run time).
packages=(cmake gcc make libc6-dev unicode-data libblis-dev libopenblas-dev openmpi-bin libopenmpi-dev libssl-dev openssh-client iproute2 procps fortunes)
bash scripts/install_packages.sh "${packages[@]}"

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" 2>&1 | grep -E "error|warning" || true
test -x build/meshtrain || { echo "bootstrap: build failed" >&2; exit 1; }
