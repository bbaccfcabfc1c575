#!/usr/bin/env bash
# The README's test command: installs what is needed, builds, and runs every test under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
# Each test binary process gets one BLAS/OpenMP thread per core it may use; the tests that
# need more set their own.
ctest --test-dir build --output-on-failure --parallel "$(nproc)" --timeout 600
