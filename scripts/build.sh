#!/usr/bin/env bash
# Configures and builds dtrain (Release, -Wall -Wextra) into build/. Extra arguments go to cmake:
# scripts/quickstart.sh passes -DDTRAIN_TESTS=OFF (dtrain alone), scripts/test.sh -DDTRAIN_TESTS=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build --parallel "$(nproc)"
