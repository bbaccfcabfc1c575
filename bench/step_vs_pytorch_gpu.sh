#!/usr/bin/env bash
# dtrain's training step on the GPU against PyTorch's at its best (bench/pytorch_step_gpu.py:
# torch.compile, flash SDPA, fused AdamW), same model, batch, sequence and precision, in the same
# run, for the shapes issue 6 names: gpt2-124m (sequence 1024), gpt2-774m (1024) and
# llama3.2-1b (2048), bf16. Prints each side's median tokens/s, dtrain's MFU against the GPU's
# datasheet dense peak, its peak memory, and the ratio.
#
#   bash bench/step_vs_pytorch_gpu.sh [--batch N] [--steps 20] [--warmup 5] [--precision bf16]
#
# Micro-batches: 32, 16 and 8 sequences by default (32k, 16k and 16k tokens a step), which both
# sides fit in an 80 GB GPU; --batch N sets one for all three.
# Needs a GPU and PyTorch with CUDA for python3 (not Debian's CPU build at /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A o=([batch]= [steps]=20 [warmup]=5 [precision]=bf16)
while [ $# -gt 0 ]; do
  key=${1#--}
  [ -n "${o[$key]+x}" ] || { echo "step_vs_pytorch_gpu.sh: unknown flag $1 (known: ${!o[*]})" >&2; exit 2; }
  o[$key]=$2
  shift 2
done
peer_precision=${o[precision]/f32/fp32}
run() {  # preset seq batch family peer-model-flags...
  local preset=$1 seq=$2 batch=${o[batch]:-$3} family=$4
  shift 4
  local ours peer
  ours=$(./build/dtrain bench step --device cuda --model "$preset" --seq "$seq" --batch "$batch" \
           --steps "${o[steps]}" --warmup "${o[warmup]}" --precision "${o[precision]}" | tee >(cat >&2) | grep '^result')
  peer=$(python3 bench/pytorch_step_gpu.py --family "$family" --seq "$seq" --batch "$batch" --steps "${o[steps]}" \
           --warmup "${o[warmup]}" --precision "$peer_precision" "$@" | tee >(cat >&2) | grep '^result')
  value() { sed -E "s/.*$1=([0-9.]+).*/\1/" <<<"$2"; }
  awk -v name="$preset" -v seq="$seq" -v a="$(value tokens_per_s "$ours")" -v b="$(value tokens_per_s "$peer")" \
      -v mfu="$(value datasheet_mfu "$ours")" \
      -v batch="$batch" \
      'BEGIN { printf "result %-12s seq %5d batch %3d  dtrain %10.0f tok/s (MFU %5.1f%%)  pytorch %10.0f tok/s  ratio %.2fx\n", name, seq, batch, a, 100 * mfu, b, a / b }'
}
run gpt2-124m 1024 32 gpt2 --n-layer 12 --d-model 768 --n-head 12 --vocab-size 50257 --max-seq-len 1024
run gpt2-774m 1024 16 gpt2 --n-layer 36 --d-model 1280 --n-head 20 --vocab-size 50257 --max-seq-len 1024
run llama3.2-1b 2048 8 llama --n-layer 16 --d-model 2048 --n-head 32 --n-kv-head 8 --ffn-hidden 8192 \
  --vocab-size 128256 --max-seq-len 2048 --rope-theta 500000
