#!/usr/bin/env bash
# Packs a CUDA build for a GPU machine that has the NVIDIA driver and CUDA libraries but not the
# packages dtrain builds against (oneDNN, OpenBLAS, toml++, OpenMPI, ...), and no compiler for them:
#
#   bash scripts/pack_for_gpu.sh BUILD_DIR OUT.tar.gz
#
# The archive holds BUILD_DIR's binaries and test lists, lib/ with every shared library they load
# from outside CUDA and the C runtime (found by ldd), and mpi.tar with OpenMPI's files at their
# Debian paths, for a machine without an mpiexec. scripts/gpu_checks.sh unpacks and runs it.
set -euo pipefail
build=$1 out=$(realpath -m "$2")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib"
cp "$build"/dtrain "$build"/dtrain_tests "$stage/"
(cd "$build" && tar cf "$stage/tests.tar" CTestTestfile.cmake dtrain_tests*_tests.cmake dtrain_tests*_include.cmake)
# CUDA's libraries come from the GPU machine (they must match its driver); the C and C++ runtimes
# from its system, which is as new as this one or newer.
ldd "$build"/dtrain "$build"/dtrain_tests | awk '$3 ~ /^\// { print $3 }' | sort -u |
  grep -v -E '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libz|libudev|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so' |
  grep -v -E 'lib(mpi|open-pal|open-rte|hwloc|event|pmix)' | xargs -I{} cp -L {} "$stage/lib/"
packages=(openmpi-bin libopenmpi3 openmpi-common libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7)
dpkg -L "${packages[@]}" | grep -v -E '^/usr/share/(doc|man|lintian)' | while read -r f; do
  [ -f "$f" ] || [ -L "$f" ] && echo "${f#/}"; done > "$stage/mpi.files"
tar cf "$stage/mpi.tar" -C / -T "$stage/mpi.files"
tar czf "$out" -C "$stage" dtrain dtrain_tests tests.tar lib mpi.tar
ls -la "$out"
