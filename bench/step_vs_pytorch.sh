#!/usr/bin/env bash
# Times dtrain's and PyTorch's CPU training step on the same model shape, batch, sequence and
# thread count, in the same run, and prints the ratio of their median throughputs.
#
#   bash bench/step_vs_pytorch.sh [--family gpt2 --n-layer 4 --d-model 768 --n-head 12
#                                  --batch 8 --seq 256 --steps 10 --threads 2]
#   bash bench/step_vs_pytorch.sh --family llama --n-kv-head 4 --ffn-hidden 2048
#   bash bench/step_vs_pytorch.sh --precision bf16    (dtrain's bf16 storage against PyTorch's
#                                                       CPU autocast to bf16)
#
# gpt2 starts from dtrain's gpt2-124m preset (vocabulary 50257), llama from llama3.2-1b
# (vocabulary 128256, tied embeddings, rotary theta 500000 with Llama 3 scaling); the flags
# override its sizes on both sides.
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A o=([precision]=f32 [family]=gpt2 [n-layer]=4 [d-model]=768 [n-head]=12 [n-kv-head]=0 [ffn-hidden]=0 [vocab-size]=0
              [max-seq-len]=1024 [batch]=8 [seq]=256 [steps]=10 [warmup]=2 [threads]=$(nproc))
while [ $# -gt 0 ]; do
  key=${1#--}
  [ -n "${o[$key]+x}" ] || { echo "step_vs_pytorch.sh: unknown flag $1 (known: ${!o[*]})" >&2; exit 2; }
  o[$key]=$2
  shift 2
done
case ${o[family]} in
  gpt2) preset=gpt2-124m; [ "${o[vocab-size]}" != 0 ] || o[vocab-size]=50257
        peer_model=(--tied 1) ;;
  llama) preset=llama3.2-1b; [ "${o[vocab-size]}" != 0 ] || o[vocab-size]=128256
         peer_model=(--tied 1 --rope-theta 500000 --rope-scaling-factor 32) ;;
  *) echo "step_vs_pytorch.sh: --family is gpt2 or llama" >&2; exit 2 ;;
esac
common=()
for k in n-layer d-model n-head vocab-size max-seq-len batch seq steps warmup threads; do common+=(--"$k" "${o[$k]}"); done
for k in n-kv-head ffn-hidden; do [ "${o[$k]}" = 0 ] || common+=(--"$k" "${o[$k]}"); done

export OMP_NUM_THREADS=${o[threads]}
# PyTorch gets the fix dtrain applies to itself (kernels/cpu/blas.h): Debian's OpenBLAS does
# not recognise recent Xeons and would run its SSE3 kernels, handicapping the peer 3-5x.
peer_env=()
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512bw /proc/cpuinfo; then peer_env=(OPENBLAS_CORETYPE=SkylakeX); fi
# Each side's full output goes to stderr as it runs (tee >(cat >&2), not tee /dev/stderr, which
# would reopen and truncate a log file that stderr is redirected to).
case ${o[precision]} in
  f32) peer_precision=fp32 ;;
  bf16) peer_precision=bf16 ;;
  *) echo "step_vs_pytorch.sh: --precision is f32 or bf16 (PyTorch 1.13 has no CPU fp16 autocast)" >&2; exit 2 ;;
esac
ours=$(./build/dtrain bench step --model "$preset" --precision "${o[precision]}" "${common[@]}" | tee >(cat >&2) |
       sed -n 's/^result tokens_per_s=\([0-9.]*\).*/\1/p')
peer=$(env "${peer_env[@]}" /usr/bin/python3 bench/pytorch_step.py --family "${o[family]}" --precision "$peer_precision" "${common[@]}" \
         "${peer_model[@]}" | tee >(cat >&2) | sed -n 's/^result tokens_per_s=\([0-9.]*\).*/\1/p')
awk -v a="$ours" -v b="$peer" 'BEGIN { printf "dtrain %.1f tokens/s, pytorch %.1f tokens/s: ratio %.2fx\n", a, b, a / b }'
