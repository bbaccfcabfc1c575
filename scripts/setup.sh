#!/usr/bin/env bash
# Installs every system package that dtrain's build, tests and quickstart need.
# Debian package names only; safe to run any number of times (apt-get skips what is present).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config   # compiler and build
  libopenblas-openmp-dev                          # sgemm for kernels/cpu; the OpenMP build shares our thread pool
  libopenmpi-dev openmpi-bin                      # multi-rank launch and the MPI backend
  libgtest-dev                                    # unit tests (GoogleTest, built from source by CMake)
  nlohmann-json3-dev                              # JSON headers of safetensors and tokenizer.json
  python3 python3-torch python3-numpy             # PyTorch reference for equivalence tests and bench/
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
