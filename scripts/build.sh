#!/usr/bin/env bash
# Configures and builds dtrain (Release, -Wall -Wextra) into build/. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build --parallel "$(nproc)"
