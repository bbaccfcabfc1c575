#!/usr/bin/env bash
# Installs the system packages (Debian package names) that building dtrain and running it need,
# with the quickstart's corpus:
#   scripts/setup.sh            the build, dtrain and the quickstart
#   scripts/setup.sh --tests    also what the tests need: GoogleTest, Chromium, Slurm, the reference stack
#                               (Debian's PyTorch, then the pinned PyPI packages of
#                               scripts/python-requirements.txt for its /usr/bin/python3) and an
#                               MLflow server (scripts/mlflow-requirements.txt, in /opt/dtrain-mlflow)
#                               and llama.cpp (scripts/llama-cpp-requirements.txt, in /opt/dtrain-llama-cpp)
# Safe to run any number of times: each step skips what is present.
set -euo pipefail

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
tests=false
case "${1:-}" in
  "") ;;
  --tests) tests=true ;;
  *) echo "usage: $0 [--tests]" >&2; exit 2 ;;
esac

packages=(
  build-essential cmake ninja-build pkg-config   # compiler and build
  libopenblas-openmp-dev                          # sgemm for kernels/cpu; the OpenMP build shares our thread pool
  libdnnl-dev                                     # oneDNN: bf16 matrix products on AMX / AVX-512 BF16
  libopenmpi-dev openmpi-bin                      # multi-rank launch and the MPI backend
  nlohmann-json3-dev                              # JSON headers of safetensors and tokenizer.json
  libpcre2-dev                                    # the tokenizer's pre-tokenization regex (Unicode classes)
  libtomlplusplus-dev                             # the run configuration's TOML
  libcurl4-openssl-dev                            # MLflow tracking's HTTP(S) requests (libcurl opened when used)
  bible-kjv                                       # the quickstart's corpus: the King James Bible
)
# The CUDA backend is built wherever nvcc is (CMakeLists.txt); its attention runs through the
# cuDNN frontend's headers, fetched below with pip.
cuda=false
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda=true
  packages+=(python3-pip)                         # fetches the cuDNN frontend's headers (below)
fi
if $tests; then
  packages+=(
    libgtest-dev                                  # unit tests (GoogleTest, built from source by CMake)
    python3 python3-torch python3-numpy           # PyTorch reference for equivalence tests and bench/
    chromium                                      # dtrain report's page loaded in a real browser (cli/report_cli_test.cpp)
    slurmctld slurmd slurm-client munge           # a one-node Slurm cluster (scripts/local_slurm.sh, cli/slurm_cli_test.cpp)
    python3-pip python3-yaml python3-requests python3-typing-extensions python3-six  # pip, and what the PyPI packages import
    python3-venv                                  # the MLflow server's own environment (below)
  )
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} Debian packages already installed"
else
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The cuDNN frontend (header-only C++ over cuDNN's graph API, MIT licence), pinned, into
# /usr/local/include/cudnn-frontend-VERSION/include where CMakeLists.txt looks for it (the
# headers include each other as ../include/NAME, so the folder keeps its name). PyPI ships it
# inside a Python wheel; only its include/ folder is kept (the headers are the same on every
# platform and Python version, so one wheel serves all).
cudnn_frontend_version=1.32.0
cudnn_frontend_dir=/usr/local/include/cudnn-frontend-$cudnn_frontend_version
if $cuda && [ ! -f "$cudnn_frontend_dir/include/cudnn_frontend.h" ]; then
  echo "setup: fetching the cuDNN frontend $cudnn_frontend_version headers into $cudnn_frontend_dir"
  wheel_dir=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
    --platform manylinux_2_28_x86_64 --dest "$wheel_dir" "nvidia-cudnn-frontend==$cudnn_frontend_version"
  python3 -m zipfile -e "$wheel_dir"/nvidia_cudnn_frontend-*.whl "$wheel_dir/unpacked"
  $SUDO mkdir -p "$cudnn_frontend_dir"
  $SUDO cp -r "$wheel_dir/unpacked/include" "$cudnn_frontend_dir/"
  rm -rf "$wheel_dir"
fi

$tests || exit 0
# Debian marks its Python as externally managed; these packages go to /usr/local beside it.
requirements="$(dirname "$0")/python-requirements.txt"
if /usr/bin/python3 -m pip install --dry-run --break-system-packages --no-deps -r "$requirements" 2>/dev/null |
    grep -q "^Would install"; then
  echo "setup: installing the PyPI packages of $requirements"
  /usr/bin/python3 -m pip install --quiet --no-warn-script-location --root-user-action=ignore \
    --break-system-packages --no-deps -r "$requirements"
else
  echo "setup: PyPI packages of $requirements already installed"
fi

# The MLflow server and llama.cpp (built from source by llama-cpp-python), each in a virtual
# environment of its own, every package pinned.
python_environment() {  # DIRECTORY REQUIREMENTS WHAT
  local venv=$1 requirements=$2 what=$3
  [ -x "$venv/bin/python" ] || $SUDO /usr/bin/python3 -m venv "$venv"
  if "$venv/bin/python" -m pip install --dry-run --no-deps -r "$requirements" 2>/dev/null | grep -q "^Would install"; then
    echo "setup: installing $what ($requirements) into $venv"
    $SUDO env CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$venv/bin/python" -m pip install --quiet --root-user-action=ignore \
      --no-deps -r "$requirements"
  else
    echo "setup: $what of $requirements already installed in $venv"
  fi
}
python_environment /opt/dtrain-mlflow "$(dirname "$0")/mlflow-requirements.txt" "the MLflow server"
python_environment /opt/dtrain-llama-cpp "$(dirname "$0")/llama-cpp-requirements.txt" "llama.cpp"
