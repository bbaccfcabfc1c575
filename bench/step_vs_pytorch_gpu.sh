#!/usr/bin/env bash
# dtrain's training step on the GPU against PyTorch's at its best (bench/pytorch_step_gpu.py:
# torch.compile of the model with its loss, flash SDPA, fused AdamW), same model, batch, sequence
# and precision, in the same run: gpt2-124m (sequence 1024), gpt2-774m (1024) and llama3.2-1b
# (2048), bf16. Prints each side's median tokens/s and peak memory, dtrain's MFU against the GPU's
# datasheet dense peak, and the ratio to PyTorch in each torch.compile mode asked for.
#
#   bash bench/step_vs_pytorch_gpu.sh [--batch N] [--steps 20] [--warmup 5] [--precision bf16]
#                                     [--modes "default max-autotune"] [--models "gpt2-124m ..."]
#
# Micro-batches: 32, 16 and 8 sequences by default (32k, 16k and 16k tokens a step), which both
# sides fit in an 80 GB GPU; --batch N sets one for all. max-autotune compiles for minutes a
# model (it times Triton's GEMMs against cuBLAS for every shape).
# Needs a GPU and PyTorch with CUDA for python3 (not Debian's CPU build at /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A o=([batch]= [steps]=20 [warmup]=5 [precision]=bf16 [modes]=default [models]="gpt2-124m gpt2-774m llama3.2-1b")
while [ $# -gt 0 ]; do
  key=${1#--}
  [ -n "${o[$key]+x}" ] || { echo "step_vs_pytorch_gpu.sh: unknown flag $1 (known: ${!o[*]})" >&2; exit 2; }
  o[$key]=$2
  shift 2
done
peer_precision=${o[precision]/f32/fp32}
value() { sed -E "s/.*$1=([0-9.]+).*/\1/" <<<"$2"; }
run() {  # preset seq batch family peer-model-flags...
  local preset=$1 seq=$2 batch=${o[batch]:-$3} family=$4
  shift 4
  [[ " ${o[models]} " == *" $preset "* ]] || return 0
  local ours peer mode
  ours=$(./build/dtrain bench step --device cuda --model "$preset" --seq "$seq" --batch "$batch" \
           --steps "${o[steps]}" --warmup "${o[warmup]}" --precision "${o[precision]}" | tee >(cat >&2) | grep '^result')
  for mode in ${o[modes]}; do
    peer=$(python3 bench/pytorch_step_gpu.py --family "$family" --seq "$seq" --batch "$batch" --steps "${o[steps]}" \
             --warmup "${o[warmup]}" --precision "$peer_precision" --mode "$mode" "$@" | tee >(cat >&2) | grep '^result')
    awk -v name="$preset" -v seq="$seq" -v batch="$batch" -v mode="$mode" \
        -v a="$(value tokens_per_s "$ours")" -v mfu="$(value datasheet_mfu "$ours")" -v ma="$(value peak_memory_gib "$ours")" \
        -v b="$(value tokens_per_s "$peer")" -v mb="$(value peak_memory_gib "$peer")" \
        'BEGIN { printf "result %-12s seq %5d batch %3d  dtrain %9.0f tok/s (MFU %5.1f%%, %5.1f GiB)  pytorch %-12s %9.0f tok/s (%5.1f GiB)  ratio %.2fx\n", name, seq, batch, a, 100 * mfu, ma, mode, b, mb, a / b }'
  done
}
run gpt2-124m 1024 32 gpt2 --n-layer 12 --d-model 768 --n-head 12 --vocab-size 50257 --max-seq-len 1024
run gpt2-774m 1024 16 gpt2 --n-layer 36 --d-model 1280 --n-head 20 --vocab-size 50257 --max-seq-len 1024
run llama3.2-1b 2048 8 llama --n-layer 16 --d-model 2048 --n-head 32 --n-kv-head 8 --ffn-hidden 8192 \
  --vocab-size 128256 --max-seq-len 2048 --rope-theta 500000
