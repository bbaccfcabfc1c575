#!/usr/bin/env bash
# The README's test command: installs what is needed, builds, and runs every test under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
# ctest runs one test process per core; each gets 2 OpenMP threads (CMakeLists.txt), so the
# threaded code paths run.
ctest --test-dir build --output-on-failure --parallel "$(nproc)" --timeout 600
