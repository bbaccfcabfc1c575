#!/usr/bin/env bash
# Times dtrain's and PyTorch's CPU training step on the same GPT-2 shape, batch, sequence and
# thread count, in the same run, and prints the ratio of their median throughputs.
#
#   bash bench/step_vs_pytorch.sh [--n-layer 4 --d-model 768 --n-head 12 --batch 8 --seq 256
#                                  --steps 10 --threads 2]
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A o=([n-layer]=4 [d-model]=768 [n-head]=12 [vocab-size]=50257 [max-seq-len]=1024
              [batch]=8 [seq]=256 [steps]=10 [warmup]=2 [threads]=$(nproc))
while [ $# -gt 0 ]; do
  key=${1#--}
  [ -n "${o[$key]+x}" ] || { echo "step_vs_pytorch.sh: unknown flag $1 (known: ${!o[*]})" >&2; exit 2; }
  o[$key]=$2
  shift 2
done
flags=()
for k in n-layer d-model n-head vocab-size max-seq-len batch seq steps warmup threads; do flags+=(--"$k" "${o[$k]}"); done

export OMP_NUM_THREADS=${o[threads]}
# PyTorch gets the fix dtrain applies to itself (kernels/cpu/blas.h): Debian's OpenBLAS does
# not recognise recent Xeons and would run its SSE3 kernels, handicapping the peer 3-5x.
peer_env=()
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512bw /proc/cpuinfo; then peer_env=(OPENBLAS_CORETYPE=SkylakeX); fi
ours=$(./build/dtrain bench step --model gpt2-124m "${flags[@]}" | tee /dev/stderr | sed -n 's/^result tokens_per_s=\([0-9.]*\).*/\1/p')
peer=$(env "${peer_env[@]}" /usr/bin/python3 bench/pytorch_step.py "${flags[@]}" | tee /dev/stderr | sed -n 's/^result tokens_per_s=\([0-9.]*\).*/\1/p')
awk -v a="$ours" -v b="$peer" 'BEGIN { printf "dtrain %.1f tokens/s, pytorch %.1f tokens/s: ratio %.2fx\n", a, b, a / b }'
