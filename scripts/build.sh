#!/usr/bin/env bash
# Configures and builds dtrain (Release, -Wall -Wextra) into build/. Extra arguments go to cmake:
# scripts/quickstart.sh passes -DDTRAIN_TESTS=OFF (dtrain alone), scripts/test.sh -DDTRAIN_TESTS=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# Where ccache is installed (a developer's machine; CI has none), compilations are cached, keyed
# on paths relative to the checkout's parent so that worktrees and clones side by side share them.
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$PWD")}"
fi
cmake -S . -B build "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build --parallel "$(nproc)"
